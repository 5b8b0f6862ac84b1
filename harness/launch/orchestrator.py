"""What the three orchestrator commands (sweep, parallel, fillin) share: common flags, progress
lines, error reporting."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from harness.config.manifest import ContractMismatch, ManifestError
from harness.config.rundir import QueueFileError
from harness.config.seedbank import SeedBankError
from harness.launch import pools
from harness.results import ResultsError

EXPECTED_ERRORS = (
    ContractMismatch,
    ManifestError,
    QueueFileError,
    SeedBankError,
    pools.LaunchError,
    ResultsError,
    ValueError,
)


def parser(doc: str | None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, help="nodes in the pool (default: the POOL_NODES knob)")
    p.add_argument(
        "--progress-every", type=float, default=30.0, metavar="S", help="seconds between progress lines"
    )
    return p


def say(line: str) -> None:
    print(line, flush=True)


def main_wrapper(body: Callable[[], int], prog: str) -> int:
    """Run an orchestrator: pools die with it, and an expected error is one clear line, exit 2."""
    pools.stop_on_signals()
    try:
        return body()
    except EXPECTED_ERRORS as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    finally:
        pools.terminate_all()
