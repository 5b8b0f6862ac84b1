#!/usr/bin/env bash
# One eval worker: sets the environment, then runs the worker loop (harness/worker/loop.py), which starts
# its persistent model server and claims units from $RUN_DIR (else $RUNS_ROOT/$STUDY_RUN) until none
# is left. WORKER_ID names it in logs and record files (default: <host>-<pid>). SIGTERM: clean stop.
set -euo pipefail
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then sed -n '2,4p' "$0" | cut -c3-; exit 0; fi
. "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/env.sh"
eval "$("$SIM_PY" -m harness.config.knobs --shell)"
exec "$SIM_PY" -m harness.worker.loop
