"""BENCH_PARAMS checked against the benchmark's constructor before the benchmark is built.

Why: a vla-eval benchmark's constructor takes BENCH_PARAMS as keyword arguments and often stores
them unchecked, so a value of the wrong type fails later, in a method, as a TypeError deep in the
benchmark (`{tasks: 5}`: `'int' object is not iterable`). The constructor's signature and type hints
say what each parameter takes; a parameter it does not have, one it requires and is not given, or a
value of the wrong type is one line each, naming BENCH_PARAMS and the parameter. Hints this check
does not understand accept any value (the constructor is then the judge, as before).
"""

from __future__ import annotations

import collections.abc
import inspect
import types
import typing
from typing import Any

from harness.config.knobtypes import parse_mapping
from harness.episode.bench import NAMED
from harness.episode.bench.vlaeval import PREFIX

SEQUENCES = (list, tuple, set, frozenset, collections.abc.Sequence)
MAPPINGS = (dict, collections.abc.Mapping)


def params_problems(benchmark: str, text: str) -> list[str]:
    """One line per problem of BENCH_PARAMS=`text` for BENCHMARK=`benchmark`."""
    if benchmark in NAMED:  # a named adapter (libero) parses its own BENCH_PARAMS when it is built
        return []
    if not benchmark.startswith(PREFIX):
        if text.strip():
            return [f"knob BENCH_PARAMS={text!r}: only a vla-eval benchmark takes parameters, "
                    f"BENCHMARK={benchmark} takes none: unset BENCH_PARAMS"]  # fmt: skip
        return []
    try:
        params = parse_mapping("BENCH_PARAMS", text)
    except ValueError:
        return []  # the knob check names it
    from vla_eval.registry import resolve_import_string

    try:
        cls = resolve_import_string(benchmark[len(PREFIX) :])
    except Exception:
        return []  # the benchmark loader names it
    return constructor_problems(cls, params)


def constructor_problems(cls: Any, params: dict[str, Any]) -> list[str]:
    """What `cls(**params)` would be refused for, read from the signature of `cls.__init__`."""
    try:
        signature = inspect.signature(cls.__init__)
    except (TypeError, ValueError):
        return []
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception:  # a hint naming something its module cannot resolve: check names only
        hints = {}
    accepted = {n: p for n, p in list(signature.parameters.items())[1:] if p.kind not in (p.VAR_POSITIONAL,)}
    open_ended = any(p.kind == p.VAR_KEYWORD for p in accepted.values())
    named = {n: p for n, p in accepted.items() if p.kind != p.VAR_KEYWORD}
    problems = []
    for key, value in params.items():
        if key not in named:
            if not open_ended:
                problems.append(
                    f"BENCH_PARAMS: {cls.__name__} has no parameter {key!r}; it takes {', '.join(named)}"
                )
        elif key in hints and not matches(value, hints[key]):
            problems.append(
                f"BENCH_PARAMS: {key}: expected {type_text(hints[key])}, got {value!r} "
                f"({cls.__name__}'s constructor)"
            )
    for name, param in named.items():
        if param.default is param.empty and param.kind != param.VAR_KEYWORD and name not in params:
            problems.append(f"BENCH_PARAMS: {cls.__name__} requires parameter {name!r}")
    return problems


def matches(value: Any, hint: Any) -> bool:
    """Whether the YAML value `value` fits type hint `hint` (True for hints it cannot judge)."""
    if hint is Any or hint is inspect.Parameter.empty:
        return True
    if hint is None or hint is type(None):
        return value is None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(matches(value, a) for a in args)
    if origin is typing.Literal:
        return value in args
    if origin in SEQUENCES:
        if not isinstance(value, list | tuple):
            return False
        if origin is tuple and args and args[-1] is not Ellipsis:
            return len(value) == len(args) and all(matches(v, a) for v, a in zip(value, args, strict=True))
        return not args or all(matches(v, args[0]) for v in value)
    if origin in MAPPINGS:
        if not isinstance(value, dict):
            return False
        return len(args) != 2 or all(matches(k, args[0]) and matches(v, args[1]) for k, v in value.items())
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint in (str, bool, list, dict, tuple):
        return isinstance(value, list | tuple) if hint in (list, tuple) else isinstance(value, hint)
    return True


def type_text(hint: Any) -> str:
    """A type hint as the message says it: `list[str] | None`."""
    if isinstance(hint, type) and not typing.get_args(hint):
        return hint.__name__
    return str(hint).replace("typing.", "").replace("NoneType", "None")
