#!/usr/bin/env bash
# Warm this node's cache without running workers: stages the envs, checkpoint and backbones into
# NODE_CACHE, installs SIM_PIN, refreshes the code copy and prunes, exactly as eval_node.sh does
# first (e.g. `srun -N13 --ntasks-per-node=1 bash slurm/stage_node.sh` before a sweep).
# Prints the resulting environment (SIM_PY, MODEL_PY, EVAL_ROOT, CKPT_DIR, ...).
set -euo pipefail
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then sed -n '2,5p' "$0" | cut -c3-; exit 0; fi
. "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/env.sh"
exports="$("$SIM_PY" -m harness.config.knobs --shell)"
eval "$exports"
"$SIM_PY" -m harness.node.steps prepare
