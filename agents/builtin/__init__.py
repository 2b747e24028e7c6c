"""Built-in reference agents. Each is a standalone script copied into the workspace's code/ and run there;
they import nothing from a2rl (the sandbox hides it) and talk to the grader over HTTP like any agent."""
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent


def script_path(name: str) -> Path:
    path = SCRIPTS / f"{name}.py"
    if not path.exists():
        known = sorted(p.stem for p in SCRIPTS.glob("*.py") if not p.stem.startswith("_"))
        raise FileNotFoundError(f"no built-in agent script {name!r}; known: {', '.join(known)}")
    return path
