"""LIBERO's task names and the shipped queue files (seeds/libero/<suite>.txt): one unit per task of
every suite. libero_90 gives one instruction to tasks of different scenes (28 of its 90); named by
instruction alone, 16 of them were shadowed by a namesake and could not be run at all."""

from __future__ import annotations

import pytest

from harness.config.rundir import read_queue
from harness.episode.bench.libero_suite import STEP_LIMITS, find_task, suite_tasks
from support.poolkit import REPO


@pytest.mark.parametrize("suite", list(STEP_LIMITS))
def test_each_suite_queue_file_holds_every_task_once_by_its_name(suite: str) -> None:
    cells = read_queue(REPO / "seeds" / "libero" / f"{suite}.txt")
    tasks = suite_tasks(suite)
    assert [cell.task for cell in cells] == list(tasks)  # LIBERO's task order, every task
    assert {cell.scene for cell in cells} == {"libero"}
    assert sorted(task.index for task in tasks.values()) == list(range(len(tasks)))


def test_libero_90s_repeated_instructions_are_named_by_their_scene() -> None:
    tasks = suite_tasks("libero_90")
    assert len(tasks) == 90
    kitchen10 = find_task("libero_90", "close the top drawer of the cabinet [KITCHEN_SCENE10]")
    kitchen5 = find_task("libero_90", "close the top drawer of the cabinet [KITCHEN_SCENE5]")
    assert kitchen10.instruction == kitchen5.instruction == "close the top drawer of the cabinet"
    assert kitchen10.bddl_file != kitchen5.bddl_file
    with pytest.raises(ValueError, match="is not in LIBERO suite libero_90"):
        find_task("libero_90", "close the top drawer of the cabinet")  # ambiguous: not a task name
    once = [t for t in tasks.values() if "[" not in t.name]
    assert once and all(t.name == t.instruction for t in once)  # a unique instruction is its own name
