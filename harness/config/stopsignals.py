"""Moved to `harness.process.stopsignals` (issue 58): this alias stays only until
scripts/policy_model_server.py imports from there. # removed by the transport change"""

from harness.process.stopsignals import STOP_SIGNALS, StopSignals

__all__ = ["STOP_SIGNALS", "StopSignals"]
