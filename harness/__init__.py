"""The pipeline's library, one subpackage per stage of an episode's journey (README, "Layout"):
node -> worker -> queue -> episode <-> wire <-> model -> results, with config below them all and
launch above. Both envs import it (PYTHONPATH=$EVAL_ROOT)."""
