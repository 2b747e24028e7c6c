"""A third protocol, to show that one is a task class that grades under it and one registered agent side
(tests/test_agent_sides.py imports this module into a sweep with `imports=[tests.support.third_side]`).

`third` grades arithmetic as a2rl does (its protocol's values are a2rl's, its task variant a2rl's class); its agent side
gives a command agent a workspace of its own (task.md, base/, data/train.jsonl, code/, output/; no run.json), its own
name for the run's token (THIRD_TOKEN), and the grader directly, in a2rl's grading API."""
from __future__ import annotations

import dataclasses
import shutil

from contracts.protocols import A2RL
from contracts.registry import register
from contracts.specs import CellSpec
from contracts.task import task_variant
from evaluators.tasks.reasoning_gym_task import ReasoningGymTask
from orchestrator.agent_sides import AgentSide, CellStart, Opened
from orchestrator.workspace import agent_env, new_workspace, task_material


register("protocol", "third")(dataclasses.replace(A2RL, name="third"))  # graded as a2rl grades, by its own name


@register("task", "reasoning_gym_third")
class ThirdProtocolTask(ReasoningGymTask):
    pass


@task_variant("reasoning_gym_third", "third")
class ThirdProtocolVariant(ThirdProtocolTask):
    """Grades arithmetic as a2rl does, under the protocol `third`."""


@register("agent_side", "third")
class ThirdSide(AgentSide):
    name = "third"

    def serves(self, cell: CellSpec) -> bool:
        return cell.agent.kind == "command"

    def open(self, start: CellStart) -> Opened:
        workspace, cell = start.workspace, start.cell
        material = task_material(cell.task, start.cache_dir)
        new_workspace(workspace, folders=("data", "output"), model_link="base", base_model_dir=start.base_model,
                      code_files=start.code_files)
        shutil.copyfile(material / "instructions.md", workspace / "task.md")
        shutil.copyfile(material / "train.jsonl", workspace / "data" / "train.jsonl")
        return Opened(env=agent_env(workspace, home=workspace / ".home", task=cell.task_name, base_model="base",
                                    model_path=workspace / "base", grading_url=start.grading_url,
                                    cpus=cell.budget.cpus, extra={"THIRD_TOKEN": start.token}))
