"""The config stage's half of input validation: knob values against their declarations, run names,
and the error that carries every problem found.

Why one pass: an operator who typed three wrong knobs should learn all three at once, each naming the
knob and the form it takes, before anything is written or any node starts, instead of a unit
quarantined an hour later. Run creation (`harness.launch.newrun.check_runnable`) adds what only the
launch stage can check (the policy, the benchmark, the seeds); the local pool and the worker's start
call `check_node_knobs()` for the knobs only nodes read.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from harness.config.knobs import KNOBS
from harness.config.knobtypes import run_name_problem
from harness.process.failures import Refused


def some_of(items: list, shown: int = 5) -> str:
    """`[50, 51, 52, 53, 54] and 45 more`: a long list in a message, saying how much was left out."""
    more = f" and {len(items) - shown} more" if len(items) > shown else ""
    return f"{items[:shown]}{more}"


def problem_list(headline: str, problems: list[str]) -> str:
    """The message of a refusal: the headline, then one indented line per problem."""
    return headline + "".join(f"\n  - {p}" for p in problems)


class InputRefused(Refused, ValueError):
    """Inputs that cannot work, one line each in `problems` (a ValueError, as every refusal here)."""

    def __init__(self, headline: str, problems: list[str]) -> None:
        super().__init__(problem_list(headline, problems))
        self.problems = problems


def knob_problems(env: Mapping[str, str], names: list[str] | None = None) -> list[str]:
    """One line per knob of `names` (default: all) that `env` sets to a value its declaration refuses;
    an unset knob is its default, which is accepted by construction (a test holds the table to it)."""
    return [
        why
        for name in names or list(KNOBS)
        if name in env and (why := KNOBS[name].problem(env[name])) is not None
    ]


def check_node_knobs(env: Mapping[str, str] = os.environ) -> None:
    """Raise InputRefused naming every knob `env` sets to a refused value: the worker's start-up
    check, for the knobs only nodes read (crash limit, timeouts, codec, slots), and the rest again."""
    problems = knob_problems(env)
    if problems:
        raise InputRefused("refusing these knob values:", problems)


def run_arg_problem(run: str) -> str | None:
    """Why `run`, as a user typed it, names no run dir: a name under $RUNS_ROOT must be one path
    component of safe characters; an absolute path is taken as is, and its last component must be one."""
    if os.path.isabs(run):
        why = run_name_problem(Path(run).name)
        return None if why is None else f"run {run!r}: its last component: {why}"
    why = run_name_problem(run)
    if why is None:
        return None
    return f"run {run!r}: {why}, or an absolute path"
