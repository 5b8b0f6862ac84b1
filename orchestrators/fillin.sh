#!/usr/bin/env bash
# Fill in a run: raise EVAL_TEST_NUM or add a disjoint seed bank; only missing seeds run.
# Resumable: re-run the same command. LAUNCHER=srun|local picks Slurm or the local pool. --help for usage.
set -euo pipefail
. "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/env.sh"
exec "$SIM_PY" -m harness.orchestrate.fillin "$@"
