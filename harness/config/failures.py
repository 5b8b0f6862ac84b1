"""Moved to `harness.process.failures` (issue 58): this alias stays only until the model server's
files import from there. # removed by the transport change"""

from harness.process.failures import FAILED, REFUSED, Failed, Refused, describe, exit_code, run_command

__all__ = ["FAILED", "REFUSED", "Failed", "Refused", "describe", "exit_code", "run_command"]
