"""The reference policy batched (`--set max_batch=8`, as on a GPU node) answers what it answers alone.

Its sessions' observations go into one model call; each answer, its sampled noise included, must be
the one the unbatched server gives the same request: the noise from the request's own seed, never
from what it was batched with, and the model's rows independent of each other.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from harness.wire.client import PolicyClient
from support.referencekit import SHIPPED
from support.wirekit import SPEC, obs, start_server_process, stop_process

TASKS = (
    ("PushCube", "push the blue cube forward onto the red and white target"),
    ("PickCube", "pick up the red cube and move it to the goal"),
    ("PullCube", "pull the cube back onto the target"),
    ("StackCube", "stack the red cube on top of the green cube"),
)
STEPS = 6


def request(index: int, step: int) -> dict:
    image = np.random.default_rng(100 * index + step).integers(0, 255, (224, 224, 3), dtype=np.uint8)
    return {**obs(0.05 * index + 0.01 * step), "images": {"base_camera": image}}


def session(ready: Path, index: int, answers: dict, barrier: threading.Barrier | None) -> None:
    task, instruction = TASKS[index]
    with PolicyClient.from_ready_file(ready, timeout_s=120, io_timeout_s=60) as client:
        client.hello(SPEC)
        client.reset(task, "table_clean", instruction, 10 + index)
        for step in range(STEPS):
            if barrier is not None:
                barrier.wait(60)  # all sessions ask at once: one batch a step
            answers[(index, step)] = client.infer(request(index, step), step)


def serve(tmp_path: Path, model_py: str, name: str, extra: list[str]) -> tuple:
    ready = tmp_path / f"{name}.json"
    args = ["--policy", "reference", "--ckpt", str(SHIPPED), "--set", "noise_std=0.01", *extra]
    env = {"HF_HUB_OFFLINE": "1", "MODEL_BATCH_WAIT_MS": "200"}
    return start_server_process(model_py, ready, args, tmp_path / f"{name}.log", env=env), ready


def test_batched_answers_are_the_unbatched_ones(tmp_path: Path, model_py: str) -> None:
    alone_proc, alone_ready = serve(tmp_path, model_py, "alone", [])
    batched_proc, batched_ready = serve(tmp_path, model_py, "batched", ["--set", "max_batch=8"])
    alone: dict = {}
    batched: dict = {}
    try:
        for index in range(len(TASKS)):
            session(alone_ready, index, alone, None)
        barrier = threading.Barrier(len(TASKS))
        threads = [
            threading.Thread(target=session, args=(batched_ready, index, batched, barrier))
            for index in range(len(TASKS))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(300)
        with PolicyClient.from_ready_file(batched_ready, timeout_s=60) as client:
            stats = client._call({"type": "ping", "stats": True})["stats"]
    finally:
        codes = stop_process(alone_proc), stop_process(batched_proc)
    assert codes == (0, 0), (tmp_path / "batched.log").read_text()[-3000:]
    assert len(batched) == len(alone) == len(TASKS) * STEPS
    assert stats["items"] / stats["calls"] > 1.5, stats  # the sessions did share calls
    for key, chunk in alone.items():
        np.testing.assert_allclose(batched[key], chunk, rtol=0, atol=1e-4, err_msg=f"session, step {key}")
    firsts = [alone[(index, 0)] for index in range(len(TASKS))]
    assert not np.allclose(firsts[0], firsts[1])  # the sessions' requests do differ


@pytest.mark.parametrize(
    ("device", "says"),
    [("tpu", "setting 'device' is auto, cpu or cuda"), ("cuda", "torch sees no CUDA GPU")],
)
def test_a_device_it_cannot_use_stops_the_server_naming_it(
    tmp_path: Path, model_py: str, device: str, says: str
) -> None:
    import subprocess

    probe = subprocess.run([model_py, "-c", "import torch; print(torch.cuda.is_available())"],
                           capture_output=True, text=True, check=True)  # fmt: skip
    if device == "cuda" and probe.stdout.strip() == "True":
        pytest.skip("this machine has a CUDA GPU")
    proc, _ = serve(tmp_path, model_py, "bad", ["--set", f"device={device}"])
    code = proc.wait(120)
    log = (tmp_path / "bad.log").read_text()
    assert code != 0 and says in log, log[-2000:]
