"""The channel between a host-side NFS test and its guest-side scenario: facts, not verdicts.

Why: the NFS mounts exist only inside the guest, so a scenario (a module under tests/nfs/ run
there with `python -m`) does the file operations and reports what it saw as one tagged JSON line;
the host-side test asserts on it, so a failure reads as a pytest assertion on named values.
A scenario first checks that its paths really are NFS mounts: run on the host by mistake, it would
test the local disk and prove nothing.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

TAG = "NFS-FACTS "
REPO = Path(__file__).resolve().parents[2]


def emit(facts: Mapping[str, Any]) -> None:
    """Guest side: report the scenario's facts (the host reads the last tagged line)."""
    print(TAG + json.dumps(facts, sort_keys=True, default=str), flush=True)


def require_nfs(*paths: Path) -> None:
    """Guest side: exit with the reason unless every path is an NFS mount point."""
    with open("/proc/mounts") as handle:
        mounts = {fields[1]: fields[2] for fields in (line.split() for line in handle)}
    fstype = {p: mounts.get(str(p), "not a mount point") for p in paths}
    wrong = [f"{p} ({kind})" for p, kind in fstype.items() if not kind.startswith("nfs")]
    if wrong:
        sys.exit(f"not NFS mounts: {', '.join(wrong)}: run this inside the NFS guest (tests/nfs/uml.py)")


def guest_env(**knobs: str) -> dict[str, str]:
    """Host side: the environment of a scenario: this one, the repo and tests/ importable, no Slurm."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(PYTHONPATH=f"{REPO}:{REPO / 'tests'}", EVAL_ROOT=str(REPO), PYTHONUNBUFFERED="1")
    env.update(knobs)
    return env


def run_scenario(guest, module: str, *args: str, timeout: float = 300, **knobs: str) -> dict[str, Any]:
    """Host side: run `python -m nfs.<module> args` in the guest; its facts (AssertionError with the
    output if it failed or reported none)."""
    argv = [sys.executable, "-m", f"nfs.{module}", str(guest.mnt1), str(guest.mnt2), str(guest.export), *args]
    result = guest.run(argv, env=guest_env(**knobs), cwd=REPO, timeout=timeout)
    tagged = [line[len(TAG) :] for line in result.output.splitlines() if line.startswith(TAG)]
    what = f"scenario {module} {' '.join(args)}"
    assert result.rc == 0 and tagged, f"{what} exited {result.rc}:\n{result.output}"
    return json.loads(tagged[-1])
