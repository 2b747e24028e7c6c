"""a2rl's agent side: the workspace of orchestrator/workspace.py (instructions.md, run.json, data/train.jsonl,
model/), the run's endpoints and token in the environment, the grader reached directly, a CLI launched on the
workspace's instructions.md. Every agent kind, every protocol without an agent side of its own."""
from __future__ import annotations

from contracts.registry import register
from orchestrator.agent_sides import AgentSide, CellStart, Opened
from orchestrator.workspace import agent_env, materialise, task_material


@register("agent_side", "a2rl")
class A2rlSide(AgentSide):
    name = "a2rl"

    def open(self, start: CellStart) -> Opened:
        cell, workspace = start.cell, start.workspace
        run_info = {"grading_url": start.grading_url, "run_token": start.token,
                    **({"rollout_url": f"{start.grading_url}/env"} if start.task.interactive else {}),
                    "started_at": start.started, "deadline": start.deadline}
        materialise(workspace, cell, material=task_material(cell.task, start.cache_dir),
                    base_model_dir=start.base_model, run_info=run_info, code_files=start.code_files)
        model = str(workspace / "model")
        return Opened(env=agent_env(
            workspace, home=workspace / ".home", task=cell.task_name, base_model=model, model_path=workspace / "model",
            grading_url=start.grading_url, cpus=cell.budget.cpus,
            extra={"A2RL_RUN_TOKEN": start.token, "A2RL_CELL_ID": cell.cell_id, "A2RL_DEADLINE": str(start.deadline),
                   **({"A2RL_ROLLOUT_URL": run_info["rollout_url"]} if start.task.interactive else {})}))
