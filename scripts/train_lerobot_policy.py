"""Train a small ACT policy on MetaWorld expert demos with LeRobot's own trainer, and ship it.

Runs in the LeRobot env ($LEROBOT_PY). Three stages, each skippable:
  1. record: MetaWorld's scripted experts through LeRobot's `MetaworldEnv` (seeded as our benchmark
     seeds it) into a local LeRobotDataset (training/lerobot_demos.py); training seeds start at
     1_000_000 and are refused if an eval could draw them.
  2. train: `python -m lerobot.scripts.lerobot_train` as a subprocess, a CPU-sized ACT (no pretrained
     backbone: nothing downloads), its log tee'd to <out>.log.
  3. export: the last checkpoint's `pretrained_model/` into --ship (config, weights, pre/post
     processors, train config), the weights stored as float16 when that keeps the checkpoint small
     (checked: `ACTPolicy.from_pretrained` loads them and predicts the same actions within fp16
     tolerance), and its card README.md.
`POLICY=lerobot CKPT_NAME=lerobot-act-metaworld` evaluates what --ship holds.

Example (the shipped checkpoint, checkpoints/lerobot-act-metaworld/README.md):
  MUJOCO_GL=egl $LEROBOT_PY scripts/train_lerobot_policy.py --episodes 10 --steps 600 --batch 4
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TASKS = ["drawer-close-v3", "faucet-open-v3", "button-press-wall-v3"]
SHIP_LIMIT_BYTES = 30_000_000
CKPT_FILES = ("config.json", "model.safetensors", "train_config.json")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", default=",".join(TASKS), help="comma-separated MetaWorld tasks")
    p.add_argument("--episodes", type=int, default=10, help="successful expert episodes per task")
    p.add_argument("--first-seed", type=int, default=1_000_000, help="first training seed (>= 1_000_000)")
    p.add_argument(
        "--demos", type=Path, default=ROOT / "runs/lerobot-demos/metaworld-experts", help="dataset dir"
    )
    p.add_argument("--reuse-demos", action="store_true", help="train on --demos as recorded earlier")
    p.add_argument(
        "--out", type=Path, default=ROOT / "runs/lerobot-act-train", help="lerobot-train output dir"
    )
    p.add_argument(
        "--ship", type=Path, default=ROOT / "checkpoints/lerobot-act-metaworld", help="shipped ckpt"
    )
    p.add_argument("--steps", type=int, default=400, help="optimizer steps")
    p.add_argument("--batch", type=int, default=4, help="batch size")
    p.add_argument("--lr", type=float, default=3e-4, help="transformer learning rate")
    p.add_argument("--lr-backbone", type=float, default=1e-4, help="ResNet18 learning rate")
    p.add_argument("--save-every", type=int, default=100, help="steps between lerobot-train checkpoints")
    p.add_argument("--workers", type=int, default=1, help="dataloader workers")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    p.add_argument("--export-only", action="store_true", help="only export --out's last checkpoint")
    return p.parse_args(argv)


def train_command(args: argparse.Namespace) -> list[str]:
    return [
        sys.executable, "-m", "lerobot.scripts.lerobot_train",
        "--dataset.repo_id=local/metaworld-experts", f"--dataset.root={args.demos}",
        "--policy.type=act", "--policy.device=cpu", "--policy.pretrained_backbone_weights=null",
        "--policy.push_to_hub=false", "--policy.dim_model=256", "--policy.dim_feedforward=1024",
        "--policy.n_encoder_layers=2", "--policy.n_decoder_layers=1", "--policy.use_vae=false",
        "--policy.chunk_size=20", "--policy.n_action_steps=10",
        f"--policy.optimizer_lr={args.lr}", f"--policy.optimizer_lr_backbone={args.lr_backbone}",
        "--wandb.enable=false", "--eval_freq=0", f"--output_dir={args.out}", f"--steps={args.steps}",
        f"--batch_size={args.batch}", f"--num_workers={args.workers}", f"--save_freq={args.save_every}",
        "--log_freq=10", "--seed=1000",
    ]  # fmt: skip


def train(args: argparse.Namespace, log: Path) -> float:
    """Run lerobot-train, its output tee'd to `log`; returns the wall time in seconds."""
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    start = time.monotonic()
    with log.open("w") as sink:
        proc = subprocess.Popen(
            train_command(args), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            sink.write(line)
            sink.flush()
            if "step:" in line or "Error" in line:
                print(f"[train] {line.rstrip()}", file=sys.stderr, flush=True)
    if proc.wait() != 0:
        raise SystemExit(f"lerobot-train exited {proc.returncode}; its log: {log}")
    return time.monotonic() - start


def final_loss(log: Path) -> tuple[int, float] | None:
    """The last logged (step, loss) of a lerobot-train log."""
    found = re.findall(r"step:(\S+) .*?loss:([0-9.]+)", log.read_text())
    if not found:
        return None
    step, loss = found[-1]
    return int(float(step[:-1]) * 1000) if step.endswith("K") else int(step), float(loss)


def export(trained: Path, ship: Path) -> dict[str, object]:
    """Copy a `pretrained_model/` dir to `ship`, the weights as float16 if fp32 is over the limit.
    Built beside `ship` and swapped in only when complete: a failed export keeps the shipped one."""
    from safetensors.torch import load_file, save_file

    if not (trained / "model.safetensors").is_file():
        raise FileNotFoundError(f"{trained}: no model.safetensors to export (has lerobot-train finished?)")
    final, ship = ship, ship.with_name(f".{ship.name}.export")
    shutil.rmtree(ship, ignore_errors=True)
    ship.mkdir(parents=True)
    for path in trained.iterdir():
        if path.name.startswith("policy_") or path.name in CKPT_FILES:
            shutil.copy2(path, ship / path.name)
    stored = "float32"
    if (ship / "model.safetensors").stat().st_size > SHIP_LIMIT_BYTES:
        weights = load_file(trained / "model.safetensors")
        half = {k: v.half() if v.is_floating_point() else v for k, v in weights.items()}
        save_file(half, ship / "model.safetensors", metadata={"format": "pt"})
        stored = "float16"
        deviation = check_same_actions(trained, ship)
        print(f"[export] float16 weights: max |action difference| {deviation:.2e}", file=sys.stderr)
    else:
        deviation = 0.0
    size = sum(p.stat().st_size for p in ship.iterdir())
    shutil.rmtree(final, ignore_errors=True)
    ship.rename(final)
    return {"stored": stored, "fp16_max_action_diff": deviation, "bytes": size}


def check_same_actions(reference: Path, candidate: Path, tolerance: float = 0.02) -> float:
    """Load both checkpoints with ACTPolicy.from_pretrained and their processors; the largest
    action difference over a few recorded-like inputs, refused above `tolerance`."""
    import torch
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.policies.factory import make_pre_post_processors

    generator = torch.Generator().manual_seed(0)
    batch = {
        "observation.image": torch.rand(2, 3, 480, 480, generator=generator),
        "observation.state": torch.rand(2, 4, generator=generator) * 0.4 + torch.tensor([0.0, 0.6, 0.1, 0.5]),
    }
    actions = []
    for path in (reference, candidate):
        policy = ACTPolicy.from_pretrained(path).eval()
        pre, post = make_pre_post_processors(policy.config, pretrained_path=str(path))
        with torch.no_grad():
            actions.append(post(policy.predict_action_chunk(pre(dict(batch)))))
    deviation = float((actions[0] - actions[1]).abs().max())
    if not deviation <= tolerance:
        raise SystemExit(f"float16 weights change the actions by {deviation:.3g} > {tolerance}")
    return deviation


def shown_command(command: list[str]) -> str:
    """The lerobot-train command as run, repository paths relative, one option a line."""
    python, module_flag, module, *options = (c.replace(str(ROOT) + "/", "") for c in command)
    lead = "$LEROBOT_PY" if command[0] == sys.executable else python
    return " \\\n  ".join([f"{lead} {module_flag} {module}", *options])


def write_card(ship: Path, facts: dict[str, object]) -> None:
    import lerobot

    demos = facts["demos"]
    assert isinstance(demos, dict)
    seeds = "\n".join(f"| {task} | {len(s)} | {min(s)}..{max(s)} | {demos['dropped'][task] or '-'} |"
                      for task, s in demos["episodes"].items())  # fmt: skip
    (ship / "README.md").write_text(f"""# lerobot-act-metaworld

A small ACT policy (LeRobot {lerobot.__version__}) trained with LeRobot's own trainer (`lerobot-train`)
on the CPU, by behaviour cloning MetaWorld's scripted experts, for `POLICY=lerobot
CKPT_NAME=lerobot-act-metaworld`. Made by `scripts/train_lerobot_policy.py`.

- Inputs: `observation.image` (LeRobot's `MetaworldEnv` corner2 frame, 480x480, flipped as LeRobot
  flips it) and `observation.state` (`agent_pos`: hand xyz + gripper); output: 4 actions in [-1, 1].
  ACT has no language input: the scene tells the tasks apart.
- Model: ACT, ResNet18 from scratch (no pretrained weights), dim_model 256, dim_feedforward 1024,
  2 encoder / 1 decoder layers, no VAE, chunk_size 20, n_action_steps 10.
- Weights stored as {facts["stored"]} (max |action difference| against the float32 checkpoint on
  random inputs: {facts["fp16_max_action_diff"]:.1e}); checkpoint {facts["bytes"] / 1e6:.1f} MB.

## Data

{demos["frames"]} frames in {sum(len(s) for s in demos["episodes"].values())} episodes at 80 fps (one
frame per env step), each episode up to and including the expert's success step; episodes whose expert
failed were dropped. Training seeds start at 1_000_000 and are checked against the eval seeds
(0..EVAL_TEST_NUM-1, and any MetaWorld seed bank under `seeds/`): disjoint.

| task | episodes | seeds | dropped (expert failed) |
|---|---|---|---|
{seeds}

## Training

- {facts["steps"]} steps, batch size {facts["batch"]}, AdamW lr {facts["lr"]} (backbone
  {facts["lr_backbone"]}), {facts["threads"]} torch threads; wall time {facts["wall_s"]:.0f} s.
- Final logged loss (L1 on normalised actions): {facts["final_loss"]}.
- Made by `MUJOCO_GL=egl $LEROBOT_PY scripts/train_lerobot_policy.py {facts["argv"]}`, which ran
  (with OMP_NUM_THREADS={facts["threads"]}):

```
{facts["command"]}
```
""")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    summary = args.demos.with_suffix(".json")
    if not args.export_only:
        if not args.reuse_demos:
            from dataclasses import asdict

            from training.lerobot_demos import check_training_seeds, record

            check_training_seeds(tasks, [args.first_seed], ROOT / "seeds")
            if args.demos.exists():
                raise SystemExit(f"{args.demos} exists: remove it, or pass --reuse-demos")
            recorded = record(args.demos, tasks, args.episodes, args.first_seed)
            summary.write_text(json.dumps({**asdict(recorded), "root": str(recorded.root)}, indent=1))
            print(f"[demos] dropped (expert failed): {recorded.dropped}", file=sys.stderr)
        if args.out.exists():
            raise SystemExit(f"{args.out} exists: remove it, or pass --export-only")
        wall = train(args, args.out.with_suffix(".log"))
        args.out.with_suffix(".wall_s").write_text(f"{wall:.1f}\n")
    log = args.out.with_suffix(".log")
    trained = (args.out / "checkpoints/last/pretrained_model").resolve()
    exported = export(trained, args.ship)
    last = final_loss(log)
    wall_file = args.out.with_suffix(".wall_s")
    steps = int(trained.parent.name)
    write_card(
        args.ship,
        {
            **exported,
            "demos": json.loads(summary.read_text()),
            "steps": steps,
            "batch": args.batch,
            "lr": args.lr,
            "lr_backbone": args.lr_backbone,
            "threads": args.threads,
            "wall_s": float(wall_file.read_text()) if wall_file.exists() else float("nan"),
            "final_loss": f"{last[1]:.3f} (step {last[0]})" if last else "not logged",
            "command": shown_command(train_command(args)),
            "argv": " ".join(a for a in (argv if argv is not None else sys.argv[1:]) if a != "--export-only"),
        },
    )
    print(f"[export] {args.ship}: {exported}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    from harness.process.failures import run_command

    sys.exit(run_command("train_lerobot_policy", main))
