#!/usr/bin/env bash
# The test command (README, CI): installs what the tests need, then lints and runs the pytest suite.
# The suite starts (and reuses) the local multi-node Slurm test cluster itself. Extra args go to pytest.
set -euo pipefail
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then sed -n '2,3p' "$0" | cut -c3-; exit 0; fi
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
. ./env.sh
"$ENVS_ROOT/sim/bin/ruff" check .
exec "$SIM_PY" -m pytest "$@"
