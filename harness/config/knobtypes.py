"""What a knob accepts: its kind and range, how that reads in a message and on the knob page, and
the check of one value against it.

Why apart from the table (`harness.config.knobs`): the table says which knob takes what; this module
says what each kind of value means, once, so run creation (`harness.config.validate`), the worker's
start-up check and docs/knobs.md all read the same declaration. Values are checked as the text the
environment holds: `' 2'` is not the integer 2, and an empty value is not the default (the shell's
`${VAR:-default}` would turn it into the default while Python reads it as empty), except for a knob
whose default is empty.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

INTEGER = re.compile(r"[+-]?[0-9]+")
NUMBER = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
MAX_RUN_NAME = 200  # a path component, with room for the files a run dir holds
FLAG_WORDS = ("0", "1", "true", "false", "yes", "no", "on", "off")  # what knobs.get_bool reads


@dataclass(frozen=True)
class Accepts:
    """The values a knob accepts. `kind`: text (anything), words (text read as its space-separated
    words), int, number, flag, choice, mapping (YAML), name (a run name). `low`/`high` bound int
    and number (`above`: low itself is not accepted); `words` are a choice's values, or the words an
    int knob accepts besides integers (`auto`)."""

    kind: str = "text"
    low: float | None = None
    high: float | None = None
    above: bool = False
    words: tuple[str, ...] = ()

    def describe(self) -> str:
        """The expected form, as a message and the knob page say it."""
        if self.kind == "int":
            text = "an integer" + self._range()
            return text + "".join(f" or {w}" for w in self.words)
        if self.kind == "number":
            return "a number" + self._range()
        if self.kind == "flag":
            return "0 or 1"
        if self.kind == "choice":
            return "one of " + ", ".join(self.words)
        if self.kind == "mapping":
            return "a YAML/JSON mapping"
        if self.kind == "words":
            return "words, space separated"
        if self.kind == "name":
            return "a run name: letters, digits, '.', '_', '-' (no '/'), starting with a letter or digit"
        return "text"

    def _range(self) -> str:
        low, high = (None if b is None else f"{b:g}" for b in (self.low, self.high))
        if low is not None and high is not None:
            return f" {low}..{high}"
        if low is not None:
            return f" > {low}" if self.above else f" >= {low}"
        return f" <= {high}" if high is not None else ""

    def problem(self, value: str) -> str | None:
        """None when `value` is accepted, else `expected <form>` (the caller names the knob)."""
        if self.kind == "mapping":
            why = mapping_problem(value)
            return None if why is None else f"expected {self.describe()}: {why}"
        return None if self._accepts(value) else f"expected {self.describe()}"

    def _accepts(self, value: str) -> bool:
        if self.kind == "int":
            return value in self.words or (INTEGER.fullmatch(value) is not None and self._within(int(value)))
        if self.kind == "number":
            return NUMBER.fullmatch(value) is not None and self._within(float(value))
        if self.kind == "flag":
            return value.lower() in FLAG_WORDS
        if self.kind == "choice":
            return value in self.words
        if self.kind == "name":
            return run_name_problem(value) is None
        return True

    def _within(self, number: float) -> bool:
        if not math.isfinite(number):
            return False
        if self.low is not None and (number <= self.low if self.above else number < self.low):
            return False
        return self.high is None or number <= self.high


def integer(low: int | None = None, high: int | None = None, words: tuple[str, ...] = ()) -> Accepts:
    return Accepts("int", low, high, words=words)


def number(low: float | None = None, high: float | None = None, above: bool = False) -> Accepts:
    return Accepts("number", low, high, above)


def seconds() -> Accepts:
    """A duration that must pass: 0 would time out everything at once."""
    return number(0, above=True)


def choice(*words: str) -> Accepts:
    return Accepts("choice", words=words)


FLAG = Accepts("flag")
MAPPING = Accepts("mapping")
NAME = Accepts("name")
TEXT = Accepts()
WORDS = Accepts("words")


def _mapping(text: str) -> tuple[dict[str, Any], str | None]:
    """`text` as a mapping ({} when empty), and why it is none (None when it is one)."""
    if not text.strip():
        return {}, None
    import yaml  # here, not at the top: `knobs --shell` runs under whatever python a node has

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        return {}, f"not YAML/JSON ({getattr(exc, 'problem', None) or 'unparsable'}{where})"
    return (data, None) if isinstance(data, dict) else ({}, f"it is a {type(data).__name__}")


def mapping_problem(text: str) -> str | None:
    """Why `text` is not empty or a YAML/JSON mapping, or None."""
    return _mapping(text)[1]


def parse_mapping(name: str, text: str) -> dict[str, Any]:
    """The value `text` of the mapping knob `name` (BENCH_PARAMS) as a dict, {} when empty: the one
    parser of it, which the knob check and every benchmark adapter use. A ValueError names the knob
    and says why, as the knob check does."""
    data, why = _mapping(text)
    if why is not None:
        raise ValueError(f"knob {name}={text!r}: expected {MAPPING.describe()}: {why}")
    return data


def run_name_problem(name: str) -> str | None:
    """Why `name` cannot be a run dir name under $RUNS_ROOT (one path component), or None."""
    if RUN_NAME.fullmatch(name) is None:
        return f"expected {NAME.describe()}"
    return f"expected a run name of at most {MAX_RUN_NAME} characters" if len(name) > MAX_RUN_NAME else None
