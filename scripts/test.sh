#!/usr/bin/env bash
# The test command (README, CI): installs what the tests need, then lints and runs the pytest suite.
# The suite starts (and reuses) the local multi-node Slurm test cluster itself. Extra args go to pytest.
set -euo pipefail
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then sed -n '2,3p' "$0" | cut -c3-; exit 0; fi
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ -n "${EVAL_ROOT:-}" ] && [ "$(cd "$EVAL_ROOT" 2>/dev/null && pwd -P)" != "$(pwd -P)" ]; then
  echo "scripts/test.sh: EVAL_ROOT=$EVAL_ROOT is not this checkout ($(pwd -P)): this shell sourced" \
    "another checkout's env.sh, so the tests would run that checkout's code and envs. Run it from a" \
    "fresh shell, or unset EVAL_ROOT BUNDLE RUNS_ROOT ENVS_ROOT SIM_PY MODEL_PY HF_HOME PYTHONPATH." >&2
  exit 2
fi
bash scripts/setup.sh
. ./env.sh
"$ENVS_ROOT/sim/bin/ruff" check .
exec "$SIM_PY" -m pytest "$@"
