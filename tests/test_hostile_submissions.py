"""What a hostile agent submits, against the real grading service over HTTP on loopback: a memory bomb (a config
declaring far more parameters than the grader can hold, beside an empty checkpoint), special files (FIFO, socket)
in the submission and in its workspace, links swapped in while the grader reads (a race, 200 tries), and clutter
(many files, a large sparse file) that must not stall grading. Timings are printed, never asserted."""
from __future__ import annotations

import ctypes
import json
import multiprocessing
import os
import select
import socket
import struct
import time
from pathlib import Path

import httpx

from contracts.refusals import Refusal
from evaluators.submissions import CopyLimits, private_copy
from tests.test_grading import Run, grader  # noqa: F401  (the same grader the other grading tests use)


def bomb_config(base: Path, params_gb: float) -> dict:
    """The base model's config, scaled until it declares about `params_gb` GB of fp32 parameters."""
    config = json.loads((base / "config.json").read_text())
    config.update(hidden_size=4096, intermediate_size=11008, num_attention_heads=32, num_key_value_heads=8,
                  head_dim=128)
    per_layer = 4 * (4096 * 4096 * 2 + 4096 * 1024 * 2 + 3 * 4096 * 11008)
    config["num_hidden_layers"] = max(1, int(params_gb * 1e9 / per_layer))
    config.pop("layer_types", None)  # one per layer: let the config make them
    return config


def test_a_memory_bomb_is_refused_before_anything_is_allocated(grader, tmp_path):  # noqa: F811
    run = Run(grader, tmp_path)
    bomb = Path(run.copy_base("bomb"))
    folder = run.workspace / bomb
    for f in folder.glob("*.safetensors"):
        f.write_bytes(b"")  # an empty checkpoint: every weight would be "initialised"
    bound = grader["handle"].ensure_baseline.remote().result()["memory_bound"]  # the replica's (half the node's)
    (folder / "config.json").write_text(json.dumps(bomb_config(grader["base"], 1.5 * bound / 1e9)))
    started = time.monotonic()
    r = run.submit(str(bomb), timeout=120)
    took = time.monotonic() - started
    print(f"memory bomb ({1.5 * bound / 1e9:.1f} GB declared, empty checkpoint): {r.status_code} in {took:.2f} s; "
          f"replica bound {bound / 1e9:.1f} GB")
    assert r.status_code == 422 and r.json()["code"] == "not_a_model", r.text
    error = r.json()["error"]
    assert "B parameters" in error and " GB" in error and str(bomb) in error, error  # names the sizes and folder
    # a model that would fit but whose checkpoint lacks weights: refused before anything is initialised
    half = Path(run.copy_base("half"))
    from safetensors.torch import load_file, save_file

    weights_file = next((run.workspace / half).glob("*.safetensors"))
    weights = load_file(weights_file)
    name = sorted(weights)[0]
    save_file({name: weights[name]}, weights_file, metadata={"format": "pt"})
    r = run.submit(str(half), timeout=120)
    assert r.status_code == 422 and "weights are missing" in r.json()["error"], r.text
    assert run.recorded() == [] and run.status().json()["submissions_used"] == 0  # nothing counted
    # the replica lives on and scores a sound model
    assert run.submit(run.copy_base()).json()["score"] is not None


def test_special_files_are_refused_naming_them_and_never_block_the_grader(grader, tmp_path):  # noqa: F811
    run = Run(grader, tmp_path)
    fifo_model = Path(run.copy_base("fifo"))
    (run.workspace / fifo_model / "tokenizer.json").unlink()
    os.mkfifo(run.workspace / fifo_model / "tokenizer.json")  # opened for reading, it would wait for a writer
    sock_model = Path(run.copy_base("sock"))
    (run.workspace / sock_model / "extra").mkdir()
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(run.workspace / sock_model / "extra" / "s.sock"))
    # FIFOs where the code snapshot and the contamination scan look, beside a sound submission
    os.mkfifo(run.workspace / "code" / "pipe.py")
    os.mkfifo(run.workspace / "output" / "notes.txt")
    try:
        for path, named in ((fifo_model, "tokenizer.json"), (sock_model, "extra/s.sock")):
            started = time.monotonic()
            r = run.submit(str(path), timeout=60)
            print(f"special file {named}: {r.status_code} in {time.monotonic() - started:.2f} s")
            assert r.status_code == 422 and r.json()["code"] == "not_a_model", r.text
            assert f"{path}/{named}" in r.json()["error"], r.text
        assert run.recorded() == []
        r = run.submit(run.copy_base(), timeout=120)
        assert r.status_code == 200 and r.json()["score"] is not None, r.text
        assert r.json()["code_commit"]  # the snapshot went past the FIFO in code/
    finally:
        server.close()


# -- the symlink race --------------------------------------------------------------------------------------------

IN_OPEN, IN_ACCESS = 0x20, 0x01


class OpenWatch:
    """Every open (and read) of the files in some folders, by any process, through inotify."""

    def __init__(self, folders: list[Path]):
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK)
        self.names = {self.libc.inotify_add_watch(self.fd, str(f).encode(), IN_OPEN | IN_ACCESS): f for f in folders}
        self.events: list[tuple[Path, str]] = []

    def drain(self) -> list[tuple[Path, str]]:
        while select.select([self.fd], [], [], 0)[0]:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            i = 0
            while i < len(data):
                wd, mask, _, length = struct.unpack_from("iIII", data, i)
                name = data[i + 16:i + 16 + length].rstrip(b"\0").decode()
                self.events.append((self.names.get(wd, Path("?")), name))
                i += 16 + length
        return self.events

    def close(self) -> None:
        os.close(self.fd)


def swap_forever(folder: str, outside: str, names: list[str], stop) -> None:
    """The hostile agent: each file in turn, atomically, a real file then a link to the same name outside."""
    n = 0
    while not stop.is_set():
        for name in names:
            real = os.path.join(folder, name)
            tmp = os.path.join(folder, f".{name}.swap")
            if os.path.lexists(tmp):
                os.unlink(tmp)
            if n % 2:
                os.symlink(os.path.join(outside, name), tmp)
            else:
                os.link(os.path.join(folder, ".keep", name), tmp)
            os.replace(tmp, real)
        n += 1


def test_a_link_swapped_in_while_the_grader_reads_is_never_followed(grader, tmp_path):  # noqa: F811
    """An agent swaps config, weights, tokenizer and chat template between real files and links to another cell's
    files while it submits: 200 private copies (what the grader reads from) and a few real submissions open nothing
    outside its workspace."""
    run = Run(grader, tmp_path / "agent", max_submissions=10)
    model = Path(run.copy_base("racer"))
    folder = run.workspace / model
    names = sorted(p.name for p in folder.iterdir()
                   if p.suffix in (".json", ".safetensors", ".jinja"))  # config, weights, tokenizer, template...
    assert {"config.json", "tokenizer.json"} <= set(names) and any(n.endswith(".safetensors") for n in names)
    (folder / ".keep").mkdir()
    for name in names:
        os.link(folder / name, folder / ".keep" / name)
    outside = tmp_path / "other-cell"  # another cell's submission, with different weights and config
    outside.mkdir()
    for name in names:
        (outside / name).write_bytes((folder / name).read_bytes())
    watch = OpenWatch([outside])
    (outside / names[0]).read_bytes()
    assert watch.drain(), "inotify saw no open: the watch would prove nothing"
    watch.events.clear()
    stop = multiprocessing.Event()
    swapper = multiprocessing.Process(target=swap_forever, args=(str(folder), str(outside), names, stop))
    swapper.start()
    outcomes: dict[str, int] = {}
    try:
        started = time.monotonic()
        for i in range(200):
            dest = tmp_path / "grader-private" / str(i)
            try:
                private_copy(run.workspace, folder, dest, CopyLimits(10000, 10 ** 10))
                outcomes["copied"] = outcomes.get("copied", 0) + 1
            except Refusal as e:
                outcomes[e.code] = outcomes.get(e.code, 0) + 1
        loop_s = time.monotonic() - started
        answers = [run.submit(str(model), timeout=120).status_code for _ in range(6)]
    finally:
        stop.set()
        swapper.join(10)
    opened_outside = watch.drain()
    watch.close()
    print(f"symlink race: 200 tries in {loop_s:.1f} s: {outcomes}; submissions {answers}; "
          f"opens outside the workspace: {len(opened_outside)}")
    assert opened_outside == [], opened_outside
    assert outcomes.get("path_outside_workspace", 0) > 0, outcomes  # the race was live: links were met
    assert set(answers) <= {200, 400, 422}, answers


def test_clutter_in_the_workspace_is_bounded_work_and_does_not_slow_another_cell(grader, tmp_path):  # noqa: F811
    """100,000 small files and an 8 GiB sparse file in code/: the snapshot and the scan stop at their limits and
    say so. A victim cell submits and polls /status beside an agent that submits without a pause, first with a tidy
    workspace, then cluttered: the victim's latencies are printed side by side (measured, not asserted: they depend
    on the machine)."""
    import statistics
    import threading

    from contracts.code_snapshots import _git

    victim = Run(grader, tmp_path / "victim", max_submissions=100)
    victim_path = victim.copy_base()
    run = Run(grader, tmp_path / "clutterer", max_submissions=100)
    path = run.copy_base()

    def submit(who: Run, folder: str) -> httpx.Response:
        (who.workspace / folder / "note.txt").write_text(os.urandom(8).hex())  # a new score key: evaluated
        return who.submit(folder, timeout=600)

    def victim_round(n: int = 4) -> tuple[list[float], list[float]]:
        """n victim submissions with /status polled all the while: their latencies, beside the other agent
        submitting without a pause."""
        subs, polls, done = [], [], threading.Event()

        def poll():
            while not done.is_set():
                started = time.monotonic()
                assert victim.status().status_code == 200
                polls.append(time.monotonic() - started)
                time.sleep(0.02)

        def other():
            while not done.is_set():
                submit(run, path)

        threads = [threading.Thread(target=poll), threading.Thread(target=other)]
        for t in threads:
            t.start()
        try:
            for _ in range(n):
                started = time.monotonic()
                assert submit(victim, victim_path).status_code == 200
                subs.append(time.monotonic() - started)
        finally:
            done.set()
            for t in threads:
                t.join()
        return subs, polls

    def p99(xs: list[float]) -> float:
        return sorted(xs)[max(0, int(len(xs) * 0.99) - 1)]

    started = time.monotonic()
    assert submit(run, path).status_code == 200
    tidy_s = time.monotonic() - started
    tidy_subs, tidy_polls = victim_round()

    clutter = run.workspace / "code" / "clutter"
    for i in range(100):
        (clutter / f"d{i}").mkdir(parents=True)
        for j in range(1000):
            (clutter / f"d{i}" / f"f{j}.txt").write_text(f"note {i} {j}\n")
    with open(run.workspace / "code" / "sparse.bin", "wb") as f:
        f.truncate(8 << 30)
    started = time.monotonic()
    r = submit(run, path)
    cluttered_s = time.monotonic() - started
    assert r.status_code == 200, r.text
    record = run.recorded()[-1]
    assert record["contamination_scan"]["truncated"].startswith("scan truncated"), record
    message = _git(["log", "-1", "--format=%B", record["code_commit"]], run.records.parent / "code.git")
    assert "Snapshot truncated" in message, message
    subs, polls = victim_round()

    ratio = statistics.median(subs) / statistics.median(tidy_subs)
    print(f"clutter: a submission answered in {cluttered_s:.1f} s cluttered, {tidy_s:.1f} s tidy. Victim beside "
          f"an agent submitting without a pause: submission median {statistics.median(tidy_subs):.2f} s (tidy) vs "
          f"{statistics.median(subs):.2f} s (cluttered), x{ratio:.2f}; /status p99 {p99(tidy_polls) * 1000:.0f} ms "
          f"vs {p99(polls) * 1000:.0f} ms ({len(tidy_polls)}, {len(polls)} polls)")
