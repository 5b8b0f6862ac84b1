"""One error path for every command: an expected failure is one or two lines, a bug is a traceback.

Every entry point runs its `main` through `run_command`. An expected failure (bad input, a refused
launch, a full disk, an unreachable server) prints `<prog>: <what, naming the input>` on stderr and
exits 2 when the command refused (the input is wrong: fix it and rerun) or 1 when it failed (the
machine or a peer let it down). Anything else is a bug: its traceback is printed, then a line saying
so. Errors of the harness say which they are by their base class: `Refused` (ValueError too, as the
config errors already are) or `Failed`. The wire's errors are failures too, but this package imports
nothing of the harness: an entry point that talks over the wire names them (`failures=(WireError,)`).
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from pathlib import Path

REFUSED, FAILED = 2, 1
_REPO = str(Path(__file__).resolve().parents[2]) + "/"


class Refused(Exception):
    """The input cannot work: the message names it and says what to do."""


class Failed(Exception):
    """The input was fine, but the machine or a peer did not hold up: the message says which."""


def describe(exc: BaseException) -> str:
    """One line for an expected failure; an OSError names its file, or (an error on an open file or
    socket carries no name: NFS's ESTALE on a read) the line of ours that met it."""
    if isinstance(exc, OSError) and exc.filename:
        return f"{exc.filename}: {exc.strerror or exc}"
    if isinstance(exc, OSError) and (where := _where(exc)):
        return f"{exc} (in {where})"
    return str(exc) or type(exc).__name__


def _where(exc: BaseException) -> str | None:
    """`path:line function` of the innermost frame of this repository's code that `exc` passed."""
    ours = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith(_REPO)]
    if not ours:
        return None
    return f"{ours[-1].filename[len(_REPO) :]}:{ours[-1].lineno} {ours[-1].name}"


def exit_code(exc: BaseException, failures: tuple[type[BaseException], ...] = ()) -> int | None:
    """REFUSED or FAILED for an expected failure (`failures`: more classes that are failures), None
    for a bug."""
    if isinstance(exc, Refused | ValueError):
        return REFUSED
    if isinstance(exc, (Failed, OSError, *failures)):
        return FAILED
    return None


def run_command(
    prog: str, main: Callable[[], int | None], failures: tuple[type[BaseException], ...] = ()
) -> int:
    """Run `main` and turn what it raises into the exit status and stderr lines described above;
    `failures`: more exception classes that are failures, not bugs (the wire's, where it talks)."""
    try:
        return main() or 0
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        code = exit_code(exc, failures)
        if code is None:
            traceback.print_exc()
            print(f"{prog}: this is a bug (traceback above); please report it", file=sys.stderr)
            return FAILED
        print(f"{prog}: {describe(exc)}", file=sys.stderr)
        return code
