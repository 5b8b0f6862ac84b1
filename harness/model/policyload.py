"""Loading a policy wrapper once and calling it: the model side's half of the policy contract.

A wrapper is `policy/<name>/deploy_policy.py` + `deploy_policy.yml` (or any directory holding
those two files). `get_model(usr_args)` loads it; per request `encode_obs(obs)` returns the keyword
arguments of `model.generate_actions(...)`, which returns [B, chunk_len, action_dim].
"""

from __future__ import annotations

import copy
import inspect
import logging
import math
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from harness.config.paths import resolve_checkpoint
from harness.config.settings import Settings
from harness.model.batcher import Batcher, Member
from harness.model.collate import collate
from harness.model.seeding import check_batched_seeding, rng_seed, seed_global_rngs
from harness.model.wrapper import (
    ANY,
    PolicyRefused,
    action_conventions,
    batch_size,
    deploy_settings,
    import_wrapper,
    policy_dir,
)

log = logging.getLogger("model_server")


class PolicyCallFailed(Exception):
    """A call into a loaded policy failed on a well-formed request: it raised (the policy's
    exception is the `__cause__`) or its output breaks the contract (shape, batch size, non-finite
    actions). The server answers that request with the reason and stays up; a policy that cannot be
    loaded is `PolicyRefused`."""


@dataclass(eq=False)
class SessionState:
    """A session's wrapper state (`init_state`'s object), held by reference so that a batch that is
    retried one request at a time can put back the snapshot taken before its failed call."""

    value: Any


@dataclass(slots=True)
class Request:
    """One session's infer, as the batcher carries it: the observation, or (batched form) the
    `encode_obs` output already made in the session's thread; its RNG seed (0 for a batched wrapper
    that takes no `rng_seeds`: it draws nothing); its session's state (None for a stateless wrapper)."""

    obs: dict[str, Any] | None
    inputs: dict[str, Any] | None
    rng_seed: int
    state: SessionState | None


@dataclass
class LoadedPolicy:
    """A loaded wrapper. `batched` (the yml declares `max_batch`) picks the call form: batched, every
    call gets the collated inputs of up to `max_batch` requests (+ `rng_seeds`, `states` when
    `generate_actions` names them); else today's form, one request, global RNGs seeded per request.
    `stateful` (the module defines `init_state`): each session holds a state object that `encode_obs`
    and `reset_model` receive as a second argument; a batched call may change the states it gets,
    and a batch whose call raises has them put back before its requests run again one at a time,
    so each request advances its session's state once, whatever it was batched with."""

    name: str
    ckpt: str
    module: ModuleType
    model: Any
    usr_args: dict[str, Any]
    spec: dict[str, Any]
    max_batch: int = 1
    batched: bool = False
    max_wait_s: float = 0.0
    # One model call at a time (a batch is one call), and no reset_model during one.
    lock: threading.Lock = field(default_factory=threading.Lock)
    batcher: Batcher = field(init=False)

    def __post_init__(self) -> None:
        self.stateful = callable(getattr(self.module, "init_state", None))
        params = inspect.signature(self.model.generate_actions).parameters
        self._takes = {name for name in ("rng_seeds", "states") if name in params}
        self._seeded = not self.batched or "rng_seeds" in self._takes  # does a request need its seed
        self.batcher = Batcher(self._run, self.max_batch if self.batched else 1, self.max_wait_s)
        self._direct = self.batcher.join()  # act() without a session: never waited for

    def new_state(self) -> SessionState | None:
        """A fresh per-session state (None for a stateless wrapper)."""
        return SessionState(self.module.init_state(self.model)) if self.stateful else None

    def reset(self, state: SessionState | None = None) -> None:
        """A session's episode starts: its own state is reset (no lock: no call holds it now), or,
        for a stateless wrapper, the shared model, between calls."""
        if state is not None:
            self.module.reset_model(self.model, state.value)
            return
        with self.lock:
            self.module.reset_model(self.model)

    def act(
        self,
        obs: dict[str, Any],
        seed: int,
        step: int,
        state: SessionState | None = None,
        member: Member | None = None,
    ) -> np.ndarray:
        """The action chunk [chunk_len, action_dim] float32 for one observation, batched with
        other members' requests. The RNG seed's task and task_config come from obs["episode"]."""
        key = 0
        if self._seeded:
            ep = obs.get("episode") or {}
            key = rng_seed(str(ep.get("task", "")), str(ep.get("task_config", "")), seed, step)
        if self.batched:  # encode here, in the session's thread, while the model serves others
            request = Request(None, self._encode(obs, state), key, state)
        else:
            request = Request(obs, None, key, state)
        return self.batcher.submit(member or self._direct, request)

    def _encode(self, obs: dict[str, Any], state: SessionState | None) -> dict[str, Any]:
        inputs = self.module.encode_obs(obs) if state is None else self.module.encode_obs(obs, state.value)
        if not isinstance(inputs, dict):
            raise PolicyCallFailed(f"{self.name}.encode_obs must return a dict of generate_actions kwargs")
        return inputs

    def _run(self, requests: list[Request]) -> list[np.ndarray | Exception]:
        """One model call for `requests` (the batcher's runner): one chunk, or error, per request.

        A batch whose call raises is run again one request at a time, so a request that breaks the
        call (a missing trace, odd shapes) fails only itself; the sessions' states are put back to
        their snapshots first, so the failed call's changes to them do not count twice. A contract
        breach (wrong shape or batch size) is not retried: it is the wrapper's bug, and every request
        in the call is told so."""
        with self.lock:
            if not self.batched:
                (request,) = requests
                seed_global_rngs(request.rng_seed)
                out = self.model.generate_actions(**self._encode(request.obs or {}, request.state))
                return [self._check(out, None)[0]]
            snapshots = _snapshot(requests)
            try:
                out = self._call(requests)
            except Exception as exc:
                if len(requests) == 1:
                    raise
                _log_retry(self.name, len(requests), exc)
                for state, snapshot in snapshots:
                    state.value = snapshot
                return [self._alone(r) for r in requests]
        return self._check(out, len(requests))

    def _call(self, requests: list[Request]) -> Any:
        kwargs = collate([r.inputs or {} for r in requests], self.name)
        if "rng_seeds" in self._takes:
            kwargs["rng_seeds"] = [r.rng_seed for r in requests]
        if "states" in self._takes:
            kwargs["states"] = [None if r.state is None else r.state.value for r in requests]
        return self.model.generate_actions(**kwargs)

    def _alone(self, request: Request) -> np.ndarray | Exception:
        try:
            return self._check(self._call([request]), 1)[0]
        except Exception as exc:
            return exc

    def _check(self, out: Any, batch: int | None) -> list[np.ndarray | Exception]:
        """Per request its chunk, or a PolicyCallFailed for a non-finite one; a batch of the wrong
        shape or size is a PolicyCallFailed for all (raised). `batch` None: today's form, the first
        row counts."""
        if hasattr(out, "detach"):
            out = out.detach().float().cpu().numpy()
        arr = np.asarray(out, dtype=np.float32)
        want = (self.spec["chunk_len"], self.spec.get("action_dim", arr.shape[-1]))
        if arr.ndim != 3 or arr.shape[0] < 1 or arr.shape[1:] != want:
            raise PolicyCallFailed(
                f"{self.name}.generate_actions returned shape {arr.shape}, expected [B, *{want}]"
            )
        if batch is not None and arr.shape[0] != batch:
            raise PolicyCallFailed(
                f"{self.name}.generate_actions returned a batch of {arr.shape[0]} chunks "
                f"for {batch} requests (shape {arr.shape})"
            )
        # one copy for all rows: a reply is encoded after the call, when the wrapper may reuse its buffer
        rows = (arr[:1] if batch is None else arr).copy()
        # The common case in one BLAS call, the cheapest check numpy has (~5 us less than a ufunc
        # reduction per request in a server between socket polls): a NaN or an inf makes the sum
        # of squares non-finite; huge finite numbers whose squares overflow are checked per row.
        if math.isfinite(np.vdot(rows, rows)):
            return list(rows)
        finite = np.isfinite(rows).all(axis=(1, 2)).tolist()
        return [
            row if ok else PolicyCallFailed(f"{self.name}.generate_actions returned non-finite actions")
            for row, ok in zip(rows, finite, strict=True)
        ]


def _snapshot(requests: list[Request]) -> list[tuple[SessionState, Any]]:
    """(state, deep copy) of each stateful request of a batch that would be retried (more than one
    request); none for a single request, which is not retried."""
    if len(requests) == 1:
        return []
    return [(r.state, copy.deepcopy(r.state.value)) for r in requests if r.state is not None]


_retry_logged = [0.0]  # when a retried batch was last logged (at most one line a minute)


def _log_retry(policy: str, size: int, exc: Exception) -> None:
    now = time.monotonic()
    if now >= _retry_logged[0]:
        _retry_logged[0] = now + 60.0
        log.warning(
            "%s: a batch of %d failed (%s: %s); running its requests one at a time",
            policy,
            size,
            type(exc).__name__,
            exc,
        )


def load_policy(
    name: str, ckpt: str = "", overrides: list[str] | None = None, settings: Settings | None = None
) -> LoadedPolicy:
    """Import the wrapper and call get_model once with the yml + overrides + ckpt_path; batched as
    `settings` say (MODEL_MAX_BATCH, MODEL_BATCH_WAIT_MS; None: the knobs' defaults)."""
    settings = settings or Settings.defaults()
    directory = policy_dir(name)
    yml, usr_args = deploy_settings(directory, overrides)
    ckpt_path = resolve_checkpoint(ckpt)
    if ckpt and ckpt_path is None:
        raise PolicyRefused(f"checkpoint {ckpt!r}: neither a path nor a directory under $BUNDLE/checkpoints")
    usr_args["ckpt_path"] = None if ckpt_path is None else str(ckpt_path)
    usr_args.setdefault("policy_name", directory.name)
    _check_shape_settings(directory.name, usr_args, yml, FROM_CHECKPOINT)
    module = import_wrapper(directory)
    try:
        model = module.get_model(usr_args)
    except Exception as exc:
        why = f"{type(exc).__name__}: {exc}"
        raise PolicyRefused(f"policy {directory.name}: get_model failed: {why}") from exc
    _check_shape_settings(directory.name, usr_args, yml, None)  # get_model has read the checkpoint's
    spec = {
        "policy": directory.name,
        "ckpt": Path(ckpt).name if ckpt else "",
        "chunk_len": usr_args["num_actions"],  # the yml setting `num_actions` is the chunk length
        "cameras": list(usr_args.get("cameras") or []),
    }
    if usr_args["action_dim"] != ANY:  # else each episode's observation says the sim's (`episode`)
        spec["action_dim"] = usr_args["action_dim"]
    if usr_args.get("image_size") is not None:
        spec["image_size"] = usr_args["image_size"]
    spec["action"] = action_conventions(usr_args.get("action_convention"), yml)
    spec["stack"] = model_stack()  # the model side of each record's node fingerprint (issue 59)
    max_batch = batch_size(usr_args, yml, settings.model_max_batch)
    policy = LoadedPolicy(
        directory.name,
        spec["ckpt"],
        module,
        model,
        usr_args,
        spec,
        max_batch=max_batch or 1,
        batched=max_batch is not None,
        max_wait_s=settings.model_batch_wait_ms / 1000,
    )
    if policy.batched:
        check_batched_seeding(directory.name, model.generate_actions, usr_args, yml)
        _check_state_copies(policy)
    return policy


FROM_CHECKPOINT = "checkpoint"  # yml num_actions / action_dim that get_model sets from the checkpoint


def _check_shape_settings(name: str, usr_args: dict[str, Any], yml: Path, pending: str | None) -> None:
    """`num_actions` and `action_dim` are integers (`action_dim` may be `any`); before get_model
    either may still be `pending` (`checkpoint`: the wrapper sets it from what it loads)."""
    if not isinstance(usr_args.get("num_actions"), int) and usr_args.get("num_actions") != pending:
        raise PolicyRefused(f"policy {name}: setting 'num_actions' must be an integer in {yml}")
    if not isinstance(usr_args.get("action_dim"), int) and usr_args.get("action_dim") not in (ANY, pending):
        raise PolicyRefused(
            f"policy {name}: setting 'action_dim' must be an integer in {yml}, or {ANY!r} "
            "for a policy that acts in whatever convention the sim applies (hold)"
        )


def model_stack() -> dict[str, Any]:
    """What the policy computes on, for the sim side's node fingerprint: numpy, and torch with its
    CUDA, cuDNN, GPUs and driver when the policy loaded torch (never imported here)."""
    import platform
    import sys

    out: dict[str, Any] = {"python": platform.python_version(), "numpy": np.__version__, "gpus": []}
    torch = sys.modules.get("torch")
    if torch is not None:
        out.update(torch=torch.__version__, cuda=torch.version.cuda)
        try:
            if torch.cuda.is_available():
                out["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
                out["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
                out["cudnn"] = torch.backends.cudnn.version()
                out["driver"] = Path("/proc/driver/nvidia/version").read_text().split("\n", 1)[0][-60:]
        except Exception as exc:  # a broken CUDA install is itself worth a fingerprint of its own
            out["cuda_error"] = f"{type(exc).__name__}: {exc}"[:200]
    return out


def _check_state_copies(policy: LoadedPolicy) -> None:
    """A batched stateful wrapper's state must survive `copy.deepcopy`: `_run` snapshots the states
    of a batch before its call. Checked on a fresh state, so a wrapper that cannot is refused here."""
    state = policy.new_state()
    if state is None:
        return
    try:
        copy.deepcopy(state.value)
    except Exception as exc:
        raise PolicyRefused(
            f"policy {policy.name}: its per-session state (init_state) cannot be copied with "
            f"copy.deepcopy ({type(exc).__name__}: {exc}); the server snapshots the states of a batch "
            "so that a batch it retries one request at a time advances each state once: keep locks, "
            "files and handles on the model, not in the state"
        ) from None
