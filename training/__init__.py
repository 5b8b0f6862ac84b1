"""Training the reference policy: its data card, samples, tokenizer, checkpoints and training loop.

Apart from `policy/` on purpose: the run contract hashes the code that decides an episode
(`harness.config.contract.CODE_PATHS`: harness/episode, harness/model, harness/wire, policy/ and the
two process entry scripts), so editing training code must not invalidate running runs. What the
deployed policy needs at eval time (the model, the observation features) stays in policy/reference/;
this package imports it and the harness, and neither of them ever imports this package
(tests/test_layers.py checks it).
"""
