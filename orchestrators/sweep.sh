#!/usr/bin/env bash
# Sweep one model over several BENCH_CONFIGs, one run and one blocking pool per config.
# Resumable: re-run the same command. LAUNCHER=srun|submitit|local picks Slurm or the local pool. --help for usage.
# -P: import the harness of this checkout (EVAL_ROOT via PYTHONPATH), never one in the caller's cwd.
set -euo pipefail
. "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/env.sh"
exec "$SIM_PY" -P -m harness.launch.sweep "$@"
