"""Lent frames: where a writer puts its next frame, never over one its reader may still be viewing.

Why: copying a 441 KB observation out of the region cost the model server as much as the whole
rest of its request (`benchmarks/wire.py`). So the sim client lends its request frames: the server
reads their arrays as read-only views of the client's region, and a view lives as long as anything
(the policy's history, a traceback) keeps it. When the last view of a frame goes, the server notes
the frame's release in its own outgoing region's release table (`Region.note_release`, from a
finalizer), and the client places each next frame in the first gap between the frames it has not
seen released (`LentFrames.place`).

A frame is lent only while at most the frame before it is still held: a policy that keeps its
observations gets copies from then on (a copied frame is read out before its answer leaves, so it
is free again when the client writes the next one), until what it kept goes. So at most two lent
frames are held at once, and each frame starts at DATA_START or right after a held one: a region
never needs more than `region_limit(limit)` bytes for frames of at most `limit` bytes each.
"""

from __future__ import annotations

from typing import NamedTuple

from harness.wire.shm import TABLE_BYTES, Region

ALIGN = 64  # every frame and every array in it starts on a multiple of this
DATA_START = -(-TABLE_BYTES // ALIGN) * ALIGN  # the first frame's place, after the release table
HELD_AT_MOST = 3  # two lent frames held, and the frame being written


def aligned(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN


def region_limit(limit: int) -> int:
    """The bytes a region may grow to when its frames are at most `limit` bytes each."""
    return DATA_START + HELD_AT_MOST * aligned(limit)


class Placed(NamedTuple):
    """Where a frame goes and whether its reader may view it instead of copying it out."""

    base: int
    lend: bool


class LentFrames:
    """A lending writer's frames that its reader may still view, and the places of the next ones."""

    def __init__(self, notes: Region) -> None:
        """`notes`: the reader's outgoing region, whose release table says what it views no more."""
        self._notes = notes
        self._held: list[tuple[int, int, int]] = []  # (start, end, seq) of lent frames, by start

    @property
    def held(self) -> list[int]:
        """The sequence numbers of the lent frames not yet seen released."""
        return [seq for _, _, seq in self._held]

    def place(self, seq: int, span: int) -> Placed:
        """Frame `seq` of `span` bytes: the first offset from DATA_START where it overlaps no held
        frame, lent if no frame older than `seq - 1` is still held."""
        self._held = [frame for frame in self._held if not self._notes.released(frame[2])]
        base = DATA_START
        for start, end, _ in self._held:
            if base + span <= start:
                break
            base = max(base, aligned(end))
        return Placed(base, all(held >= seq - 1 for _, _, held in self._held))

    def lent(self, seq: int, placed: Placed, span: int) -> None:
        """Frame `seq` went out at `placed`: held until its reader notes its release."""
        self._held.append((placed.base, placed.base + span, seq))
        self._held.sort()
