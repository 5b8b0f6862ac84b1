#!/usr/bin/env bash
# The main job, from a fresh clone: installs what it needs, then evaluates a policy on the bundled
# ManiSkill3 seed bank with a local pool of workers (no Slurm) and prints the results table.
#   bash scripts/demo.sh                      # the reference policy (checkpoints/reference, trained BC)
#   POLICY=replay bash scripts/demo.sh        # the expert oracle: SR ~100%;  POLICY=hold: the floor, SR 0%
#   POLICY=lerobot CKPT_NAME=<pretrained_model dir> BENCHMARK=metaworld bash scripts/demo.sh   # MT10 x 3
# Knobs: POLICY, CKPT_NAME + EXEC_ACTIONS (reference: reference, 10), EVAL_TEST_NUM (seeds per task, default 3),
# BENCHMARK (maniskill; metaworld: seeds 0..N-1 of seeds/metaworld/<BENCH_CONFIG>.txt), BENCH_CONFIG,
# DEMO_QUEUE (the queue file), DEMO_NODES (default 2), STUDY_RUN (default demo_<policy>_<config>). Re-running resumes.
set -euo pipefail
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then sed -n '2,9p' "$0" | cut -c3-; exit 0; fi
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
. ./env.sh
export POLICY="${POLICY:-reference}"
if [ "$POLICY" = reference ]; then  # its checkpoint, re-queried every 10 of its 30 actions
  export CKPT_NAME="${CKPT_NAME:-reference}" EXEC_ACTIONS="${EXEC_ACTIONS:-10}"
fi
queue=seeds/maniskill_queue.txt
if [ "${BENCHMARK:-}" = metaworld ]; then  # no seed bank: seeds 0..EVAL_TEST_NUM-1, each a task variation
  export BENCH_CONFIG="${BENCH_CONFIG:-MT10}" USE_EVAL_SEEDS=0
  queue="seeds/metaworld/$BENCH_CONFIG.txt"
fi
export EVAL_TEST_NUM="${EVAL_TEST_NUM:-3}" BENCH_CONFIG="${BENCH_CONFIG:-clean}"
export STUDY_RUN="${STUDY_RUN:-demo_${POLICY}_${BENCH_CONFIG}}"
"$SIM_PY" scripts/new_run.py "$STUDY_RUN" --queue "${DEMO_QUEUE:-$queue}"
bash scripts/run_local.sh "${DEMO_NODES:-2}" --results "${POLICY}_${BENCH_CONFIG}"
echo "Report: $RUNS_ROOT/${POLICY}_${BENCH_CONFIG}/report.html"
