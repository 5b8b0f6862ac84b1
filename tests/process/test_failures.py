"""One error path for every command: expected failures are one line and exit 2 or 1, bugs say so."""

from __future__ import annotations

import ast
import errno
from pathlib import Path

import pytest

from harness.config.manifest import ContractMismatch
from harness.process.failures import FAILED, REFUSED, Failed, Refused, run_command
from harness.results import ResultsError
from harness.wire.errors import WireError

ROOT = Path(__file__).resolve().parents[2]


def _raise(exc: BaseException):
    def main() -> int:
        raise exc

    return main


@pytest.mark.parametrize(
    ("exc", "code", "line"),
    [
        (ValueError("queue.txt:3: expected '<scene> <task>'"), REFUSED, "prog: queue.txt:3: expected"),
        (ContractMismatch("run r differs:", ["knob X: a vs b"]), REFUSED, "prog: run r differs:"),
        (ResultsError("run 'x' not found"), REFUSED, "prog: run 'x' not found"),
        (Refused("no"), REFUSED, "prog: no"),
        (OSError(errno.ENOSPC, "No space left on device", "/runs/r/x.jsonl"), FAILED,
         "prog: /runs/r/x.jsonl: No space left on device"),
        (WireError("cannot connect to 127.0.0.1:1"), FAILED, "prog: cannot connect"),
        (Failed("model server died 3 times"), FAILED, "prog: model server died"),
    ],
)  # fmt: skip
def test_an_expected_failure_is_one_line_and_its_exit_status(
    capsys: pytest.CaptureFixture[str], exc: BaseException, code: int, line: str
) -> None:
    assert run_command("prog", _raise(exc), failures=(WireError,)) == code
    err = capsys.readouterr().err
    assert err.startswith(line) and "Traceback" not in err


def test_the_wire_errors_are_failures_where_the_entry_point_names_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """harness.process imports nothing of the harness: an entry point that talks over the wire says
    its errors are failures (the worker, the sim client, eval_one_worker)."""
    assert run_command("prog", _raise(WireError("peer closed"))) == FAILED
    assert "this is a bug" in capsys.readouterr().err
    for path in ("harness/worker/loop.py", "scripts/eval_policy_client.py", "scripts/eval_one_worker.py"):
        assert "failures=(WireError,)" in (ROOT / path).read_text(), path


def test_an_os_error_on_an_open_file_names_the_line_that_met_it(capsys: pytest.CaptureFixture[str]) -> None:
    """NFS's ESTALE on a read of an open file carries no file name: `worker: [Errno 116] Stale file
    handle` alone left a chaos failure in CI undiagnosable."""

    def main() -> int:
        raise OSError(errno.ESTALE, "Stale file handle")

    assert run_command("prog", main) == FAILED
    err = capsys.readouterr().err
    line = main.__code__.co_firstlineno + 1  # the raise
    assert err == f"prog: [Errno 116] Stale file handle (in tests/process/test_failures.py:{line} main)\n"


def test_a_bug_prints_its_traceback_and_says_it_is_a_bug(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_command("prog", _raise(KeyError("oops"))) == FAILED
    err = capsys.readouterr().err
    assert "Traceback" in err and "KeyError: 'oops'" in err and "prog: this is a bug" in err


def test_success_and_interrupt(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_command("prog", lambda: 0) == 0 and run_command("prog", lambda: None) == 0
    assert run_command("prog", _raise(KeyboardInterrupt())) == 130


def test_every_entry_point_runs_through_run_command() -> None:
    """A new command cannot forget the error path: each `__main__` block calls run_command."""
    entry_points = [*ROOT.glob("scripts/*.py"), *ROOT.glob("orchestrators/*.py")]
    entry_points += ROOT.glob("harness/**/*.py")
    missing = []
    for path in entry_points:
        tree = ast.parse(path.read_text())
        for node in tree.body:
            main_block = isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)
            if main_block and "run_command(" not in ast.unparse(node):
                missing.append(str(path.relative_to(ROOT)))
    assert missing == []
