"""The filesystem lease queue: units, leases, heartbeats, the reaper and Slurm job liveness.

It imports nothing of the harness but itself: TTL, heartbeat, errored-attempt limit and the unit list come
in as arguments, so the queue can be used and tested without a manifest, a benchmark or a policy.
"""
