"""One node's start-up, the `srun` payload's decisions: stage envs and checkpoints into the node-local
cache, install the simulator pin, refresh the code copy, and plan one worker per GPU share."""
