"""The model server batching its sessions: same answers in any arrival order and any grouping,
per-session wrapper state, batch statistics, a wrapper breaking the batch contract, bad settings."""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from harness.config.settings import Settings
from harness.config.validate import InputRefused
from harness.model.policyload import PolicyCallFailed, PolicyRefused, Request, load_policy
from harness.process.failures import Refused
from harness.wire.client import PolicyClient
from harness.wire.errors import RemoteError
from support.wirekit import REPO, SPEC, client, episode, obs, running_server

NOISY = str(REPO / "tests" / "policies" / "noisy")
LEGACY = str(REPO / "tests" / "policies" / "legacy")
STATEFUL = str(REPO / "tests" / "policies" / "stateful")


def stats(ready: Path) -> dict:
    """The server's batch statistics, read the way any client can: a ping with `stats`."""
    with client(ready) as c:
        return c._call({"type": "ping", "stats": True})["stats"]


def jittered_episode(ready: Path, seed: int, steps: int, jitter: random.Random) -> list[np.ndarray]:
    """One episode whose sim takes a random time per step, so arrivals shuffle between runs."""
    with client(ready) as c:
        c.hello(SPEC)
        c.reset("task", "cfg", "do it", seed)
        chunks = []
        for s in range(steps):
            time.sleep(jitter.random() * 0.004)
            chunks.append(c.infer(obs(float(s)), s))
        return chunks


def test_answers_do_not_depend_on_arrival_order_or_batching(tmp_path: Path) -> None:
    ready = tmp_path / "ready.json"
    seeds = list(range(30, 36))
    with running_server(tmp_path, policy=NOISY) as server:
        solo = {seed: episode(ready, seed, steps=5) for seed in seeds}
        assert stats(ready)["sizes"] == {"1": 30}
        for run in range(2):
            rng = random.Random(run)
            jitters = {seed: random.Random(rng.random()) for seed in seeds}
            order = random.Random(run).sample(seeds, len(seeds))
            with ThreadPoolExecutor(len(seeds)) as pool:
                futures = {s: pool.submit(jittered_episode, ready, s, 5, jitters[s]) for s in order}
                together = {s: f.result() for s, f in futures.items()}
            for seed in seeds:
                for a, b in zip(solo[seed], together[seed], strict=True):
                    np.testing.assert_array_equal(a, b)
        assert max(server.policy.model.batch_sizes) > 1  # they were batched, not merely serialised
    assert not np.array_equal(solo[30][0], solo[31][0])


def test_the_task_is_part_of_the_rng_key(tmp_path: Path) -> None:
    with running_server(tmp_path, policy=NOISY), client(tmp_path / "ready.json") as c:
        c.hello(SPEC)
        chunks = []
        for task, config in [("pick", "cfg"), ("push", "cfg"), ("pick", "other"), ("pick", "cfg")]:
            c.reset(task, config, "do it", 7)
            chunks.append(c.infer(obs(), 0))
    assert not np.array_equal(chunks[0], chunks[1]) and not np.array_equal(chunks[0], chunks[2])
    np.testing.assert_array_equal(chunks[0], chunks[3])


def test_k_sessions_in_lock_step_batch_and_the_stats_show_it(tmp_path: Path) -> None:
    ready = tmp_path / "ready.json"
    with running_server(tmp_path, policy=NOISY, overrides=["sleep_ms=20"]):
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda s: episode(ready, s, steps=8), range(4)))
        got = stats(ready)
    assert got["items"] == 32 and got["max"] > 1
    assert sum(int(size) * n for size, n in got["sizes"].items()) == 32
    assert got["calls"] < 32


def test_a_pre_batching_wrapper_works_unchanged(tmp_path: Path) -> None:
    """No max_batch, no state, global RNG: one request per call, still reproducible under concurrency."""
    ready = tmp_path / "ready.json"
    with running_server(tmp_path, policy=LEGACY):
        solo = {seed: episode(ready, seed, steps=4) for seed in (1, 2, 3)}
        with ThreadPoolExecutor(3) as pool:
            together = dict(
                zip((1, 2, 3), pool.map(lambda s: episode(ready, s, steps=4), (1, 2, 3)), strict=True)
            )
        assert stats(ready)["sizes"] == {"1": 24}
    for seed in solo:
        for a, b in zip(solo[seed], together[seed], strict=True):
            np.testing.assert_array_equal(a, b)


def stateful_episode(c: PolicyClient, seed: int, values: list[float]) -> list[float]:
    c.reset("task", "cfg", "do it", seed)
    return [float(c.infer(obs(v), s)[0, 0]) for s, v in enumerate(values)]


def test_per_session_state_is_isolated_when_interleaved(tmp_path: Path) -> None:
    ready = tmp_path / "ready.json"
    with running_server(tmp_path, policy=STATEFUL), client(ready) as a, client(ready) as b:
        a.hello(SPEC)
        b.hello(SPEC)
        a.reset("task", "cfg", "do it", 1)
        b.reset("task", "cfg", "do it", 2)
        got_a = [float(a.infer(obs(1.0), 0)[0, 0])]
        got_b = [float(b.infer(obs(10.0), 0)[0, 0])]
        got_a.append(float(a.infer(obs(2.0), 1)[0, 0]))
        b.reset("task", "cfg", "do it", 3)  # b's reset clears b's history only
        got_b.append(float(b.infer(obs(20.0), 0)[0, 0]))
        got_a.append(float(a.infer(obs(3.0), 2)[0, 0]))
    # history sum + 1000 x calls since this session's own reset
    assert got_a == [1001.0, 2003.0, 3006.0]
    assert got_b == [1010.0, 1020.0]


def test_per_session_state_is_isolated_when_batched_together(tmp_path: Path) -> None:
    ready = tmp_path / "ready.json"
    values = {k: [float(10 * k + s) for s in range(6)] for k in range(4)}
    expected = {k: [sum(v[: s + 1]) + 1000 * (s + 1) for s in range(6)] for k, v in values.items()}

    def session(k: int) -> list[float]:
        with client(ready) as c:
            c.hello(SPEC)
            return stateful_episode(c, k, values[k])

    with running_server(tmp_path, policy=STATEFUL, overrides=["sleep_ms=20"]) as server:
        with ThreadPoolExecutor(4) as pool:
            got = dict(zip(range(4), pool.map(session, range(4)), strict=True))
        assert max(server.policy.model.batch_sizes) > 1
    assert got == expected


def test_a_request_that_breaks_the_call_fails_only_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the first arrival waits for the other session: at the default 5 ms wait a loaded machine let
    # the two go in separate calls (a third of the runs at load 5), and the test checked nothing
    monkeypatch.setenv("MODEL_BATCH_WAIT_MS", "1000")
    ready = tmp_path / "ready.json"
    barrier = threading.Barrier(2)

    def session(explode: bool) -> object:
        with client(ready) as c:
            c.hello(SPEC)
            c.reset("task", "cfg", "do it", 5)
            barrier.wait()
            try:
                return c.infer({**obs(), "explode_in_call": explode}, 0)
            except RemoteError as exc:
                return exc

    with running_server(tmp_path, policy=NOISY, overrides=["sleep_ms=30"]) as server:
        alone = episode(ready, 5, steps=1)[0]
        with ThreadPoolExecutor(2) as pool:
            bad, good = pool.map(session, [True, False])
        assert 2 in server.policy.model.batch_sizes  # the two went in one call, which raised
    assert isinstance(bad, RemoteError) and "boom in the call" in str(bad)
    np.testing.assert_array_equal(good, alone)


def test_a_stateful_request_batched_with_a_failing_one_answers_as_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failed batch call counted itself in both states before it raised; the retry alone must
    not count again: the state advances once per request, whatever the batch did."""
    monkeypatch.setenv("MODEL_BATCH_WAIT_MS", "1000")  # the first arrival waits for the other session
    ready = tmp_path / "ready.json"
    barrier = threading.Barrier(2)

    def session(explode: bool) -> list[object]:
        with client(ready) as c:
            c.hello(SPEC)
            c.reset("task", "cfg", "do it", 5)
            barrier.wait()
            try:
                answers: list[object] = [float(c.infer({**obs(1.0), "explode_in_call": explode}, 0)[0, 0])]
            except RemoteError as exc:
                return [exc]
            answers.append(float(c.infer(obs(2.0), 1)[0, 0]))
            return answers

    with running_server(tmp_path, policy=STATEFUL, overrides=["sleep_ms=30"]) as server:
        with client(ready) as c:
            c.hello(SPEC)
            alone = stateful_episode(c, 5, [1.0, 2.0])
        sizes = server.policy.model.batch_sizes
        before = len(sizes)
        with ThreadPoolExecutor(2) as pool:
            bad, good = pool.map(session, [True, False])
        # one call of both, which raised; each request again alone; the good one's next step alone
        assert sizes[before:] == [2, 1, 1, 1]
    assert alone == [1001.0, 2003.0]
    assert good == alone
    assert len(bad) == 1 and isinstance(bad[0], RemoteError) and "boom in the call" in str(bad[0])


def write_wrapper(root: Path, yml: str, generate_actions: str, extra: str = "") -> str:
    """A one-file wrapper under `root` whose model's generate_actions is `generate_actions`."""
    root.mkdir(parents=True)
    (root / "deploy_policy.yml").write_text("action_dim: 10\nnum_actions: 4\n" + yml)
    (root / "deploy_policy.py").write_text(
        "import numpy as np\n"
        "class Model:\n"
        f"    {generate_actions}\n"
        "        return np.zeros((len(proprio), 4, 10)) + np.random.random()\n"
        "def get_model(usr_args): return Model()\n"
        "def encode_obs(obs): return {'proprio': np.asarray(obs['proprio']).reshape(1, -1)}\n"
        "def reset_model(model, state=None): pass\n" + extra
    )
    return str(root)


def test_a_batched_wrapper_without_rng_seeds_is_refused_naming_it_and_the_fix(tmp_path: Path) -> None:
    unseeded = write_wrapper(tmp_path / "unseeded", "max_batch: 4\n", "def generate_actions(self, proprio):")
    with pytest.raises(PolicyRefused) as refused:
        load_policy(unseeded)
    message = str(refused.value)
    assert "policy unseeded: batched" in message and "unseeded.generate_actions takes no rng_seeds" in message
    assert "add an `rng_seeds` parameter" in message and "set `deterministic: true`" in message
    assert load_policy(unseeded, "", ["deterministic=true"]).batched
    with pytest.raises(PolicyRefused, match="setting 'deterministic' must be true or false"):
        load_policy(unseeded, "", ["deterministic=yes please"])
    assert not load_policy(unseeded, "", ["max_batch=null"]).batched  # served one per call, seeded
    seeded = write_wrapper(
        tmp_path / "seeded", "max_batch: 4\n", "def generate_actions(self, proprio, rng_seeds):"
    )
    assert load_policy(seeded).batched


def test_a_batched_stateful_wrapper_whose_state_cannot_be_copied_is_refused(tmp_path: Path) -> None:
    extra = "import threading\ndef init_state(model): return {'lock': threading.Lock()}\n"
    wrapper = write_wrapper(
        tmp_path / "locked", "max_batch: 4\n", "def generate_actions(self, proprio, rng_seeds):", extra
    )
    with pytest.raises(PolicyRefused, match=r"policy locked: its per-session state \(init_state\) cannot be"):
        load_policy(wrapper)


def test_a_batch_of_the_wrong_size_is_an_error_naming_the_wrapper(tmp_path: Path) -> None:
    ready = tmp_path / "ready.json"
    with running_server(tmp_path, policy=NOISY, overrides=["extra_rows=1"]):
        with client(ready) as c:
            c.hello(SPEC)
            c.reset("task", "cfg", "do it", 1)
            with pytest.raises(
                RemoteError, match=r"noisy\.generate_actions returned a batch of 2 chunks for 1"
            ):
                c.infer(obs(), 0)
            c.ping()  # the connection lives on
        with client(ready) as c:  # and so does the server
            assert c.hello(SPEC)["policy"] == "noisy"


def test_a_broken_output_is_a_failed_call_never_a_refused_input() -> None:
    """Issue 23: an output that breaks the contract at run time is a PolicyCallFailed (its request is
    answered with the reason, the server stays up), never a PolicyRefused, the error of a policy
    that cannot be loaded as given (exit 2: fix the input)."""
    policy = load_policy(NOISY, "", ["extra_rows=1"])
    policy.reset()
    broken = r"noisy\.generate_actions returned a batch of 2 chunks"
    with pytest.raises(PolicyCallFailed, match=broken) as failed:
        policy.act(obs(), 1, 0, None, None)
    assert not isinstance(failed.value, Refused)


def test_model_max_batch_caps_the_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_MAX_BATCH", "1")
    ready = tmp_path / "ready.json"
    with running_server(tmp_path, policy=NOISY, overrides=["sleep_ms=10"]):
        with ThreadPoolExecutor(3) as pool:
            list(pool.map(lambda s: episode(ready, s, steps=3), range(3)))
        assert stats(ready)["sizes"] == {"1": 9}


def test_a_closed_session_is_no_longer_expected(tmp_path: Path) -> None:
    ready = tmp_path / "ready.json"
    with running_server(tmp_path, policy=NOISY) as server:
        episode(ready, 1, steps=1)
        deadline = time.monotonic() + 10
        while len(server.policy.batcher._members) > 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(server.policy.batcher._members) == 1  # only act()'s own member is left


@pytest.mark.parametrize(
    ("env", "overrides", "message"),
    [
        ({"MODEL_BATCH_WAIT_MS": "-1"}, [], "knob MODEL_BATCH_WAIT_MS='-1': expected a number 0..1000"),
        ({"MODEL_BATCH_WAIT_MS": "5000"}, [], "knob MODEL_BATCH_WAIT_MS='5000': expected a number 0..1000"),
        ({"MODEL_BATCH_WAIT_MS": "soon"}, [], "knob MODEL_BATCH_WAIT_MS='soon': expected a number"),
        ({"MODEL_MAX_BATCH": "-2"}, [], "knob MODEL_MAX_BATCH='-2': expected an integer >= 0"),
        ({"MODEL_MAX_BATCH": "many"}, [], "knob MODEL_MAX_BATCH='many': expected an integer"),
        ({}, ["max_batch=0"], "setting 'max_batch' must be an integer >= 1"),
        ({}, ["max_batch=2.5"], "setting 'max_batch' must be an integer >= 1"),
        ({}, ["max_batch=true"], "setting 'max_batch' must be an integer >= 1"),
    ],
)
def test_bad_batch_settings_name_the_setting(env: dict[str, str], overrides: list[str], message: str) -> None:
    """A bad knob is refused where the server's settings are read (its entry point), a bad wrapper
    setting where the policy loads; each names what to fix."""
    with pytest.raises((PolicyRefused, InputRefused), match=message):
        load_policy(NOISY, "", overrides, Settings.from_env(env))


def test_a_non_finite_chunk_fails_only_its_request_and_answers_never_alias_the_wrapper(
    tmp_path: Path,
) -> None:
    """One copy serves a whole batch's answers: each request still gets its own outcome, and a
    wrapper reusing its output buffer after the call changes no answer already given."""
    wrapper = write_wrapper(
        tmp_path / "reuse",
        "max_batch: 4\ndeterministic: true\n",
        "def generate_actions(self, proprio):\n"
        "        self.out = np.zeros((len(proprio), 4, 10), np.float32)\n"
        "        self.out[:] = proprio[:, :1, None]\n"
        "        self.out[proprio[:, 0] < 0] = np.nan\n"
        "        return self.out",
    )
    policy = load_policy(wrapper)
    requests = [Request(None, {"proprio": np.full((1, 10), v, np.float32)}, 0, None) for v in (1, -1, 3)]
    first, bad, third = policy._run(requests)
    assert isinstance(bad, PolicyCallFailed) and "non-finite actions" in str(bad)
    policy.model.out[:] = 7  # the wrapper reuses its buffer for its next call
    assert (first == 1).all() and (third == 3).all() and first.shape == (4, 10)


def test_huge_finite_actions_are_answered_and_only_non_finite_ones_fail(tmp_path: Path) -> None:
    """The common case is checked with one reduction over the whole batch: numbers whose squares
    overflow a float32 are still finite, and only the rows holding an inf or a NaN fail."""
    wrapper = write_wrapper(
        tmp_path / "huge",
        "max_batch: 4\ndeterministic: true\n",
        "def generate_actions(self, proprio):\n"
        "        return np.repeat(proprio[:, None, :1], 4, axis=1).repeat(10, axis=2)",
    )
    policy = load_policy(wrapper)
    values = (1e30, np.inf, -3e38, np.nan)
    requests = [Request(None, {"proprio": np.full((1, 10), v, np.float32)}, 0, None) for v in values]
    huge, inf, negative, nan = policy._run(requests)
    assert huge.shape == (4, 10) and (huge == np.float32(1e30)).all()
    assert (negative == np.float32(-3e38)).all()
    for bad in (inf, nan):
        assert isinstance(bad, PolicyCallFailed) and "non-finite actions" in str(bad)
    (alone,) = policy._run(requests[:1])
    assert (alone == np.float32(1e30)).all()
