#!/usr/bin/env bash
# Evaluate several models at once: a dedicated pool per model plus a shared pool that helps each.
# Resumable: re-run the same command. LAUNCHER=srun|local picks Slurm or the local pool. --help for usage.
set -euo pipefail
. "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/env.sh"
exec "$SIM_PY" -m harness.orchestrate.parallel "$@"
