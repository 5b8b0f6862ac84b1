"""Launch a node pool on a run with submitit (harness/launch/submit.py); `--help` for usage.

STUDY_RUN=my_run POLICY=... python orchestrators/submit.py --nodes 3 --gres gpu:1
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's harness

from harness.launch.submit import main
from harness.process.failures import run_command

if __name__ == "__main__":
    sys.exit(run_command("submit", main))
