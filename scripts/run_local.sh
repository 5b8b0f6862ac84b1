#!/usr/bin/env bash
# The local pool: `scripts/run_local.sh N [--results MODEL]` runs N "nodes" (slurm/eval_node.sh, each
# with its own NODE_NAME and CPU_WORKERS workers) over the run $RUNS_ROOT/$STUDY_RUN on this machine,
# with no Slurm, prints the queue's progress, and with --results organizes and prints the results.
# Knobs are not exported here: each node script exports its own defaults, so the pool's own default
# STAGE_ENVS=none (run the envs in place: the "nodes" share this disk) holds unless you set it.
set -euo pipefail
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then sed -n '2,4p' "$0" | cut -c3-; exit 0; fi
. "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/env.sh"
exec "$SIM_PY" -m harness.launch.localpool "$@"
