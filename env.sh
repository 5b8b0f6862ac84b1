# Sourced by every script: where things are, and which python runs what.
# Every value is overridable from the environment. Secrets come from an optional .env, never echoed.
_env_here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export EVAL_ROOT="${EVAL_ROOT:-$_env_here}"
export BUNDLE="${BUNDLE:-$EVAL_ROOT}"
export RUNS_ROOT="${RUNS_ROOT:-$EVAL_ROOT/runs}"
export ENVS_ROOT="${ENVS_ROOT:-$EVAL_ROOT/envs}"
export SIM_PY="${SIM_PY:-$ENVS_ROOT/sim/bin/python}"
export MODEL_PY="${MODEL_PY:-$ENVS_ROOT/model/bin/python}"
export LEROBOT_PY="${LEROBOT_PY:-$ENVS_ROOT/lerobot/bin/python}"  # LeRobot's own pins (POLICY=lerobot)
export HF_HOME="${HF_HOME:-$EVAL_ROOT/.hf_home}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export NODE_CACHE="${NODE_CACHE:-/tmp/eval_node_cache}"
export PYTHONPATH="$EVAL_ROOT${PYTHONPATH:+:$PYTHONPATH}"
if [ -f "$EVAL_ROOT/.env" ]; then
  set -a
  # shellcheck disable=SC1091
  . "$EVAL_ROOT/.env" >/dev/null 2>&1
  set +a
fi
unset _env_here
