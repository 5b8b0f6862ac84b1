"""The pipeline's library, one subpackage per stage of an episode's journey (README, "Layout"):
node -> worker -> queue -> episode <-> wire <-> model -> results, with config below them all and
launch above. Both envs import it (PYTHONPATH=$EVAL_ROOT)."""


def evaluate(*args, **kwargs):  # the signature is harness.launch.evaluate.evaluate's
    """Evaluate a checkpoint in the background: `harness.launch.evaluate.evaluate` (imported on first
    use, so `import harness` stays free of the launch stage's imports)."""
    from harness.launch.evaluate import evaluate as start

    return start(*args, **kwargs)
