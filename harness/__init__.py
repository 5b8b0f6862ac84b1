"""The pipeline's library: knobs, run directory, episode records, wire protocol, model server,
sim client, lease queue, worker loop and results. Both envs import it (PYTHONPATH=$EVAL_ROOT)."""
