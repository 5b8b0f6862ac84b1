#!/usr/bin/env bash
# The per-node payload of `srun` (one task per node); also runs by hand without Slurm.
# Everything comes from the environment (knobs: `python -m harness.config.knobs --markdown`). On this node it
# stages envs/checkpoint into NODE_CACHE if cold, installs SIM_PIN into the staged sim env, refreshes
# the code from the shared tree, then starts one worker per GPU share, WORKERS_PER_GPU of each GPU (CPU_WORKERS on
# a node without GPUs; `auto`, the default, fills the allocation: harness/node/sizing.py) and waits.
# It exits non-zero only for a node-level failure (staging, pin, or every worker failed), so a
# `--kill-on-bad-exit=0` pool keeps going without this node.
set -euo pipefail
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then sed -n '2,8p' "$0" | cut -c3-; exit 0; fi
. "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/env.sh"
exports="$("$SIM_PY" -m harness.config.knobs --shell)"
eval "$exports"
: "${STUDY_RUN:?set STUDY_RUN to the run dir name under \$RUNS_ROOT}"
node="$("$SIM_PY" -m harness.node.steps name)"
logs="$RUNS_ROOT/$STUDY_RUN/logs"
mkdir -p "$logs"
exec > >(tee -a "$logs/node-$node.log") 2>&1
tee_pid=$!
trap 'exec >&- 2>&-; wait "$tee_pid"' EXIT  # the log is complete when the node script has exited
echo "[node $node] $(date -Is) start: run=$STUDY_RUN job=${SLURM_JOB_ID:-none}"

# Stage if cold, pin, refresh code: prints exports of SIM_PY, MODEL_PY, EVAL_ROOT, PYTHONPATH, CKPT_DIR, HF_HOME.
# The staged entries are held by this script's pid (EVAL_NODE_PID): no other job's pruning removes them.
exports="$(EVAL_NODE_PID=$$ "$SIM_PY" -m harness.node.steps prepare)"
eval "$exports"
cd "$EVAL_ROOT"

plan="$("$SIM_PY" -m harness.node.steps plan)"
pids=()
while read -r wid devices sims cores; do
  [ "$devices" = "-" ] && devices=""
  echo "[node $node] worker $wid CUDA_VISIBLE_DEVICES='$devices' SIMS_PER_WORKER=$sims log=$logs/worker-$wid.log"
  CUDA_VISIBLE_DEVICES="$devices" SIMS_PER_WORKER="$sims" EVAL_WORKER_CORES="$cores" WORKER_ID="$wid" \
    bash slurm/eval_worker.sh >"$logs/worker-$wid.log" 2>&1 &
  pids+=("$!")
done <<<"$plan"

failed=0
for pid in "${pids[@]}"; do wait "$pid" || failed=$((failed + 1)); done
echo "[node $node] $(date -Is) done: ${#pids[@]} workers, $failed failed"
[ "$failed" -lt "${#pids[@]}" ] || { echo "[node $node] every worker failed: see $logs/worker-*.log" >&2; exit 1; }
