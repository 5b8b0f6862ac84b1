"""A vla-eval model server for the interop tests, started with vla-eval's own entry point:

    $SIM_PY tests/interop/vla_hold_server.py --address 127.0.0.1:PORT [--args.mode MODE]

`hold` answers each observation with its `state` (our ee6d proprio), so the robot stays put. The
other modes misbehave on purpose: `wrong_shape` sends 7 numbers, `int_dtype` integer actions,
`die_at_3` exits the process at the third observation (a server gone mid-episode), `raise`
raises in predict (vla-eval answers ERROR), `stall` sleeps 30 s (a timeout), `declare_9`
declares a 9-D action spec in its HELLO (a spec mismatch). `--args.needs_image false` declares no
camera input (for the camera-less FastBench).
"""

from __future__ import annotations

import os
import time

import numpy as np
from vla_eval.model_servers.base import SessionContext
from vla_eval.model_servers.predict import PredictModelServer
from vla_eval.model_servers.serve import run_server
from vla_eval.specs import GRIPPER_CLOSE_NEG, IMAGE_RGB, LANGUAGE, RAW, DimSpec

EE6D_POSITION = DimSpec("position", 3, "absolute_xyz")
EE6D_ROTATION = DimSpec("rotation", 6, "rot6d")


class HoldModelServer(PredictModelServer):
    def __init__(self, mode: str = "hold", needs_image: bool = True) -> None:
        super().__init__()
        self.mode, self.needs_image = mode, needs_image
        self.seen = 0

    def predict(self, obs: dict, ctx: SessionContext) -> dict:
        self.seen += 1
        if self.mode == "die_at_3" and self.seen == 3:
            os._exit(0)
        if self.mode == "raise":
            raise RuntimeError("the model fell over")
        if self.mode == "stall":
            time.sleep(30)
        state = np.asarray(obs["state"], dtype=np.float32)
        if self.mode == "wrong_shape":
            return {"actions": state[:7]}
        if self.mode == "int_dtype":
            return {"actions": state.astype(np.int64)}
        return {"actions": state}

    def _normalize_result(self, result: dict, ctx: SessionContext) -> dict:
        return result  # keep the dtype as predicted: the int_dtype mode must reach the client

    def get_action_spec(self) -> dict[str, DimSpec]:
        if self.mode == "declare_9":
            return {"position": EE6D_POSITION, "rotation": EE6D_ROTATION}  # no gripper: 9 dims
        return {"position": EE6D_POSITION, "rotation": EE6D_ROTATION, "gripper": GRIPPER_CLOSE_NEG}

    def get_observation_params(self) -> dict:
        return {"mode": self.mode}  # in the HELLO: each mode is another model to the contract

    def get_observation_spec(self) -> dict[str, DimSpec]:
        spec = {"state": RAW, "language": LANGUAGE}
        return {"image": IMAGE_RGB, **spec} if self.needs_image else spec


if __name__ == "__main__":
    run_server(HoldModelServer)
