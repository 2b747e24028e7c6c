"""Built-in reference agents. Each is a standalone script copied into the workspace's code/ and run there, beside
the agent client (a2rl_client.py) and, for an interactive task, the task's render/parse (task_prompt.py); they import
nothing else of a2rl (the sandbox hides it) and talk to the grader over HTTP like any agent."""
import ast
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent
CLIENT = SCRIPTS / "a2rl_client.py"
TASK_PROMPT = "task_prompt.py"  # the name the client imports the task's render/parse module by


def script_path(name: str) -> Path:
    path = SCRIPTS / f"{name}.py"
    if path == CLIENT or not path.exists():
        known = sorted(p.stem for p in SCRIPTS.glob("*.py") if not p.stem.startswith("_") and p != CLIENT)
        raise FileNotFoundError(f"no built-in agent script {name!r}; known: {', '.join(known)}")
    return path


def script_args(name: str) -> set[str]:
    """The knobs a script takes from agent.args: the keys of its DEFAULTS dict (none when it has none). Read from
    its source, not imported: the scripts import torch."""
    for node in ast.parse(script_path(name).read_text()).body:
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "DEFAULTS" for t in node.targets)
                and isinstance(node.value, ast.Dict)):
            return {k.value for k in node.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    return set()
