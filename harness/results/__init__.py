"""Results: turn a run dir's episode records into honest tables, reports, comparisons and live status.

Every rate is shown with its n and a Wilson 95% interval; errored episodes are counted apart and are
never trials; a run that mixes contracts is refused rather than averaged into a meaningless number.
"""

from harness.process.failures import Refused


class ResultsError(Refused):
    """A run that cannot be summarised honestly (missing, empty, mixed contracts); the message says why."""
