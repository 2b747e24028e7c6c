"""The vLLM evaluator backend (grader.backend=vllm) on the tiny model: the same replies as the transformers backend, a
resident engine that reloads weights of the base's architecture and starts afresh for anything else, no engine
process left behind, and the grading service over HTTP on the demo task and an interactive one.

The tests that run vLLM need its environment (`scripts/setup --vllm`; `scripts/test-vllm` makes it and runs this
file) and skip without it.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from contracts.decoding import Decoding
from contracts.specs import ConfigError, task_identity, to_plain
from contracts.task import build_task
from contracts.task_spec import TaskSpec
from evaluators.backends import make_backend
from evaluators.backends.base import ModelLoadError
from evaluators.backends.transformers_backend import TransformersBackend
from evaluators.backends.vllm_backend import VENV_VARIABLE, VLLMBackend, vllm_python
from evaluators.base_models import resolve_base_model
from evaluators.evaluate import evaluate
from evaluators.score_cache import score_key, split_key
from tests.conftest import compose
from tests.support import counter  # noqa: F401  (registers the task "counter")
from tests.test_grading import Run

needs_vllm = pytest.mark.skipif(
    not vllm_python().exists(),
    reason=f"no vLLM environment at {vllm_python().parent.parent}: make it with `scripts/setup --vllm` "
           f"(or run scripts/test-vllm; {VENV_VARIABLE} points at another one)")
# Small KV caches: two engines run at once in the service test, on a machine others share
VLLM_GRADER = {"backend": "vllm", "kv_cache_gb": 0.25, "threads": 1}
COUNTER = {"name": "counter_vllm", "cls": "counter", "base_model": "tiny", "level": 3, "train_starts": [0, 5],
           "eval_starts": [1, 2, 9, 4, 0], "target": 3, "max_steps": 4, "grader": {**VLLM_GRADER,
                                                                                 "max_new_tokens": 8}}


def alfworld_config() -> dict:
    """The small ALFWorld task of the rollout tests (the same games), graded by vLLM, episodes cut at 8 steps."""
    from tests.test_rollout_service import SMALL_TASK

    return {**SMALL_TASK, "name": "alfworld_vllm", "max_steps": 8, "grader": {**SMALL_TASK["grader"], **VLLM_GRADER}}


def variant(base: Path, out: Path, seed: int, **config_changes) -> Path:
    """The base model with its weights moved by noise (same architecture), or re-made with config changes."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    if config_changes:
        config = AutoConfig.from_pretrained(base)
        for key, value in config_changes.items():
            setattr(config, key, value)
        model = AutoModelForCausalLM.from_config(config)
    else:
        model = AutoModelForCausalLM.from_pretrained(base)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.05)
        model.config.use_cache = False  # as trainers save it: the same architecture still
    model.generation_config = AutoModelForCausalLM.from_pretrained(base).generation_config
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(base).save_pretrained(out)
    return out


def group_alive(pgid: int, wait_s: float = 10.0) -> bool:
    """Whether a process of the group still runs (zombies hold no memory), after at most wait_s for a kill to land."""
    import time

    deadline = time.monotonic() + wait_s
    while True:
        members = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                members.append(stat.parent.name)
        if not members or time.monotonic() > deadline:
            return bool(members)
        time.sleep(0.2)


def test_settings_are_grader_runtime_keys_and_mistakes_name_the_fix(monkeypatch):
    task = to_plain(compose(["task=arithmetic"]).task)
    with_vllm = {**task, "grader": {**task["grader"], **VLLM_GRADER, "max_model_len": 512,
                                    "gpu_memory_utilization": 0.5, "tensor_parallel_size": 2}}
    spec = TaskSpec.from_config(with_vllm)
    assert (spec.grader.max_model_len, spec.grader.kv_cache_gb, spec.grader.tensor_parallel_size) == (512, 0.25, 2)
    assert task_identity(with_vllm) == task_identity(task)  # cell ids and score caches do not move
    with pytest.raises(ConfigError, match="tensor_parallel_size=0"):
        TaskSpec.from_config({**task, "grader": {"tensor_parallel_size": 0}})
    monkeypatch.setenv(VENV_VARIABLE, "/nonexistent/venv")
    with pytest.raises(ConfigError, match=r"scripts/setup --vllm"):
        make_backend(spec.grader)
    import sys

    with pytest.raises(ConfigError, match="kv_cache_gb"):  # on a CPU vLLM would take 90% of the machine's memory
        VLLMBackend(device="cpu", python=sys.executable)


def test_backend_auto_grades_a_paper_task_on_a_gpu_with_vllm_at_the_originals_context(monkeypatch):
    """`grader.backend: auto` (the paper tasks' configs): vLLM for a task graded as the paper on a GPU, with the
    original's max_model_len for the task; transformers on a CPU, under a2rl's protocol, or when named. A sweep that
    would grade with vLLM where its environment is missing says so in one line before it starts."""
    from types import SimpleNamespace

    from contracts.task import load_task
    from envs.alfworld.paper_task import AlfWorldPaper as AlfWorldTask
    from orchestrator.preflight import check_vllm, vllm_missing

    config = to_plain(compose(["task=humaneval"]).task)
    assert config["grader"]["backend"] == "auto" and config["protocol"] == "paper"
    on_gpu = {**config, "grader": {**config["grader"], "num_gpus": 1}}
    paper = load_task(on_gpu)
    assert paper.backend_name(gpu=True) == "vllm" and paper.backend_name(gpu=False) == "transformers"
    assert paper.backend_settings(gpu=True).max_model_len == 32768  # OpenCompass's max_seq_len
    assert paper.backend_settings(gpu=False).backend == "transformers"
    assert load_task({**on_gpu, "protocol": "a2rl"}).backend_name(gpu=True) == "transformers"
    assert load_task({**on_gpu, "grader": {**on_gpu["grader"], "backend": "transformers"}}).backend_name(True) \
        == "transformers"
    own_context = {**on_gpu, "grader": {**on_gpu["grader"], "max_model_len": 2048}}
    assert load_task(own_context).backend_settings(gpu=True).max_model_len == 2048
    assert load_task({**config}).backend_name(gpu=True) == "transformers"  # no GPU reserved for its grader
    assert AlfWorldTask.original_max_model_len == 4096
    monkeypatch.setenv(VENV_VARIABLE, "/nonexistent/venv")
    cells = [SimpleNamespace(task_name="humaneval", task=TaskSpec.from_config(on_gpu))]
    assert vllm_missing(cells, emulated=True) == []  # emulated GPUs: graded on the CPU, with transformers
    with pytest.raises(ConfigError, match=r"task humaneval: .*scripts/setup --vllm.*backend=transformers"):
        check_vllm(cells, emulated=False)


@needs_vllm
def test_same_replies_as_transformers_reload_in_place_and_a_fresh_engine_otherwise(cache_dir, tmp_path):
    spec = TaskSpec.from_config(to_plain(compose(["task=arithmetic"]).task))
    task = build_task(spec, str(cache_dir))
    chats = [task.messages(row) for row in task.eval_rows()[:48]]
    base = resolve_base_model("tiny", cache_dir / "models")
    moved = variant(base, tmp_path / "moved", seed=1)
    other = variant(base, tmp_path / "other", seed=2, intermediate_size=256)
    reference = TransformersBackend(batch_size=16, device="cpu", torch_threads=1)

    def transformers_replies(path: Path) -> list[str]:
        loaded = reference.load(path)
        try:
            return reference.generate(loaded, chats, Decoding(max_new_tokens=16))
        finally:
            reference.unload(loaded)

    backend = VLLMBackend(device="cpu", torch_threads=1, kv_cache_gb=0.25)
    replies, pids = {}, {}
    try:
        for name, path in [("base", base), ("moved", moved), ("other", other)]:
            loaded = backend.load(path)
            try:
                replies[name] = backend.generate(loaded, chats, Decoding(max_new_tokens=16))
                pids[name] = backend.engine.pid
                assert group_alive(pids[name], wait_s=0)
            finally:
                backend.unload(loaded)
            assert replies[name] == transformers_replies(path), name
        with pytest.raises(ModelLoadError, match="no weights"):
            empty = tmp_path / "empty"
            shutil.copytree(base, empty, ignore=shutil.ignore_patterns("*.safetensors"))
            backend.load(empty)
    finally:
        backend.close()
    assert replies["moved"] != replies["base"]  # the reload really changed the engine's weights
    assert pids["moved"] == pids["base"] and backend.stats["reloads"] == 1  # same architecture: same engine
    assert pids["other"] != pids["base"] and backend.stats["starts"] == 2  # another one: a fresh engine...
    assert not group_alive(pids["base"])  # ...and the old one's processes are gone
    assert not group_alive(pids["other"]) and backend.engine is None  # close() kills the engine


@needs_vllm
def test_every_protocols_decoding_gives_the_same_replies_as_transformers(cache_dir, tmp_path):
    """Raw text or chats, stop strings, the protocol's repetition penalty or the model's own: vLLM and transformers
    answer alike (the paper protocols decode raw text with a stop at "\n" and penalty 1.0)."""
    base = resolve_base_model("tiny", cache_dir / "models")
    model = variant(base, tmp_path / "penalised", seed=3)
    gen_file = model / "generation_config.json"
    generation = json.loads(gen_file.read_text()) if gen_file.exists() else {}
    (model / "generation_config.json").write_text(json.dumps({**generation, "repetition_penalty": 1.3}))
    raw = [f"Interact with a household.\n> go to desk {i}\nOn the desk {i}, you see a mug.\n>" for i in range(8)]
    chats = [[{"role": "user", "content": f"What is {i} + {i}?"}] for i in range(8)]
    cases = [(raw, Decoding(max_new_tokens=20, stop=("\n",), repetition_penalty=1.0, chat_template=False)),
             (raw, Decoding(max_new_tokens=20, chat_template=False)),
             (chats, Decoding(max_new_tokens=20, stop=("\nAction:", "e "), repetition_penalty=1.0)),
             (chats, Decoding(max_new_tokens=20))]
    reference = TransformersBackend(batch_size=4, device="cpu", torch_threads=1)
    loaded = reference.load(model)
    expected = [reference.generate(loaded, prompts, decoding) for prompts, decoding in cases]
    reference.unload(loaded)
    backend = VLLMBackend(device="cpu", torch_threads=1, kv_cache_gb=0.25)
    try:
        loaded = backend.load(model)
        got = [backend.generate(loaded, prompts, decoding) for prompts, decoding in cases]
        backend.unload(loaded)
    finally:
        backend.close()
    assert got == expected
    assert expected[2] != expected[3]  # the cases decode differently: each one checks something


def paper_decodings() -> dict[str, tuple[str, Decoding]]:
    """Each paper task's decoding (the prompt kind it takes, and how it decodes), GSM8K's shortened (no stop string:
    the engine stops at eos only, as before)."""
    import dataclasses

    from envs.alfworld.paper_task import AlfWorldPaper as AlfWorldTask
    from envs.deepsearchqa import react
    from envs.webshop import paper_prompt as webshop
    from evaluators.tasks.gsm8k_paper import Gsm8kPaper

    alfworld = AlfWorldTask.variant_decoding
    return {"alfworld": ("raw", alfworld),
            "webshop": ("chat", Decoding(webshop.MAX_NEW_TOKENS, webshop.STOP, repetition_penalty=1.0)),
            "deepsearchqa": ("raw", react.TURN), "deepsearchqa_answer": ("raw", react.FORCED_ANSWER),
            "gsm8k": ("chat", dataclasses.replace(Gsm8kPaper.variant_decoding, max_new_tokens=48))}


@needs_vllm
@pytest.mark.parametrize("model_name", ["tiny", "smollm2-135m"])
def test_replies_stop_inside_the_engine_and_equal_the_cut_replies(cache_dir, model_name):
    """Every paper task's decoding, raw text and chats: the engine ends a reply at its first stop string (it decodes
    the tokens up to there, not max_new_tokens) and the reply is byte-equal to the one decoded to max_new_tokens and
    cut after (what this backend returned before)."""
    import dataclasses

    model = resolve_base_model(model_name, cache_dir / "models")
    raw = [f"Thought: I need the year the bridge {i} opened.\nAction: search[bridge {i} opened]\nObservation: "
           f"The bridge {i} opened in 19{i}5 and spans a river.\nThought:" for i in range(3)] + \
          ["Interact with a household.\n> go to desk 1\nOn the desk 1, you see a mug.\n>"]
    chats = [[{"role": "user", "content": f"Write two short lines about the number {i}."}] for i in range(4)]
    # the original's context for ALFWorld and DeepSearchQA (SmolLM2's own 8,192 needs a larger KV cache)
    backend = VLLMBackend(device="cpu", torch_threads=1, kv_cache_gb=0.25, max_model_len=4096)
    generated = {}
    try:
        loaded = backend.load(model)
        for name, (kind, decoding) in paper_decodings().items():
            prompts = raw if kind == "raw" else chats
            before = backend.generated_tokens
            stopped = backend.generate(loaded, prompts, decoding)
            middle = backend.generated_tokens
            uncut = backend.generate(loaded, prompts, dataclasses.replace(decoding, stop=()))
            generated[name] = (middle - before, backend.generated_tokens - middle)
            assert stopped == [decoding.cut(reply) for reply in uncut], name
        backend.unload(loaded)
    finally:
        backend.close()
    assert generated["gsm8k"][0] == generated["gsm8k"][1]  # no stop string: nothing changes
    stops = [name for name in generated if name != "gsm8k"]
    assert all(generated[name][0] <= generated[name][1] for name in stops)
    assert sum(generated[name][0] for name in stops) < sum(generated[name][1] for name in stops), generated


@needs_vllm
def test_a_submission_whose_tokenizer_decodes_otherwise_gets_an_engine_of_its_own(cache_dir, tmp_path):
    """The engine matches stop strings with its tokenizer: a submission of the same architecture whose tokenizer
    decodes otherwise is not loaded into it; a trainer's re-save of the base's tokenizer is."""
    from transformers import AutoTokenizer

    base = resolve_base_model("tiny", cache_dir / "models")
    resaved = variant(base, tmp_path / "resaved", seed=5)  # AutoTokenizer(...).save_pretrained: the same tokenizer
    renamed = variant(base, tmp_path / "renamed", seed=6)
    tokenizer = AutoTokenizer.from_pretrained(renamed)
    state = json.loads((renamed / "tokenizer.json").read_text())
    vocab = state["model"]["vocab"]
    first, second = [t for t in sorted(vocab, key=vocab.get) if t.isalpha() and len(t) > 1][:2]  # swap their texts
    vocab[first], vocab[second] = vocab[second], vocab[first]
    (renamed / "tokenizer.json").write_text(json.dumps(state))
    assert AutoTokenizer.from_pretrained(renamed).decode([vocab[first]]) != tokenizer.decode([vocab[first]])
    backend = VLLMBackend(device="cpu", torch_threads=1, kv_cache_gb=0.25)
    try:
        for path in (base, resaved, renamed):
            backend.unload(backend.load(path))
    finally:
        backend.close()
    assert (backend.stats["starts"], backend.stats["reloads"]) == (2, 1)


@needs_vllm
def test_alfworlds_paper_protocol_plays_the_same_episodes_on_vllm_and_transformers(cache_dir, tmp_path):
    """ALFWorld under the paper protocol (raw ReAct transcripts, a stop at "\n", penalty 1.0) on two generated eval
    games: whole episodes, reply by reply, alike on both backends."""
    from tests.test_alfworld_paper import FIXTURE, PAPER_TASK

    examples = tmp_path / "react_prompts.json"
    examples.write_text(json.dumps(json.loads(FIXTURE.read_text())["react_prompts"]))
    task = build_task(TaskSpec.from_config({**PAPER_TASK, "react_prompts": str(examples)}), str(cache_dir))
    rows = task.eval_rows()[:2]
    # a whole 50-step transcript outgrows the tiny model's 2,048 positions, which vLLM refuses (transformers only
    # warns): the same model with room for it
    model = variant(resolve_base_model(PAPER_TASK["base_model"], cache_dir / "models"), tmp_path / "long", seed=4)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 16384}))  # RoPE: no weights
    expected = evaluate(task, TransformersBackend(batch_size=8, device="cpu", torch_threads=1), model, rows,
                        max_new_tokens=12)
    backend = VLLMBackend(device="cpu", torch_threads=1, kv_cache_gb=0.25)
    try:
        got = evaluate(task, backend, model, rows, max_new_tokens=12)
    finally:
        backend.close()
    assert [i["commands"] for i in got["items"]] == [i["commands"] for i in expected["items"]]
    assert [i["completion"] for i in got["items"]] == [i["completion"] for i in expected["items"]]
    assert got["score"] == expected["score"]


@needs_vllm
def test_an_engine_dies_with_the_process_that_started_it(cache_dir, tmp_path):
    """A replica killed outright (SIGKILL, the out-of-memory killer) runs no teardown: the worker's watchdog kills
    the engine's process group once its parent is gone."""
    import signal
    import subprocess
    import sys
    import time

    model = shutil.copytree(resolve_base_model("tiny", cache_dir / "models"), tmp_path / "model")
    replica = subprocess.Popen([sys.executable, "-c", (
        "from pathlib import Path; from evaluators.backends.vllm_backend import EngineProcess, VLLMBackend; "
        "b = VLLMBackend(device='cpu', torch_threads=1, kv_cache_gb=0.25); "
        f"EngineProcess(b.python, Path({str(model)!r}), b.engine_args, b.engine_env())")],
        cwd=Path(__file__).resolve().parents[1])
    try:
        deadline = time.monotonic() + 120
        while not engine_processes(model) and time.monotonic() < deadline:
            time.sleep(0.2)
        [engine] = engine_processes(model)
        time.sleep(3)  # its watchdog is a thread started first thing
    finally:
        replica.send_signal(signal.SIGKILL)
        replica.wait()
    assert not group_alive(engine, wait_s=15)


def engine_processes(marker: Path) -> list[int]:
    """Engine worker processes whose command line names a model under `marker` (this session's cache)."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if proc.name.isdigit() and "vllm_worker.py" in cmdline and str(marker) in cmdline:
            pids.append(int(proc.name))
    return pids


@needs_vllm
def test_the_grading_service_grades_with_vllm_over_http(ray_cluster, cache_dir, grading_port, tmp_path):
    """arithmetic (the demo task), the counter and ALFWorld (interactive, lockstep) graded by vLLM replicas: a copy of
    the base scores the baseline, another model's replies equal the transformers backend's item by item (ALFWorld's
    whole episodes, command by command), and removing the applications leaves no engine process."""
    import time

    from ray import serve

    from contracts.serving import remove
    from evaluators.service import app_name, deploy

    arithmetic = to_plain(compose(["task=arithmetic"]).task)
    arithmetic = {**arithmetic, "name": "arithmetic_vllm", "grader": {**arithmetic["grader"], **VLLM_GRADER}}
    configs = (arithmetic, COUNTER, alfworld_config())
    reference = TransformersBackend(batch_size=32, device="cpu", torch_threads=1)
    try:
        for config in configs:
            base = resolve_base_model(config["base_model"], cache_dir / "models")
            spec = TaskSpec.from_config(config)
            deploy(spec, str(cache_dir), emulated_gpus=True)
            grader = {"url": f"http://127.0.0.1:{grading_port}/{spec.name}", "base": base,
                      "handle": serve.get_app_handle(app_name(spec.name))}
            run = Run(grader, tmp_path / spec.name)
            copy = run.submit(run.copy_base())
            assert copy.status_code == 200, copy.text
            assert "copy_of_base" in copy.json()["flags"] and copy.json()["score"] == copy.json()["baseline_score"]
            moved = variant(base, run.workspace / "output" / "moved", seed=3)
            r = run.submit("output/moved")
            assert r.status_code == 200 and not r.json()["error"], r.text
            graded = json.loads((cache_dir / "grading" / spec.name / split_key(config)
                                 / f"{score_key(moved, r.json()['digest'])}.items.json").read_text())["items"]
            expected = evaluate(build_task(spec, str(cache_dir)), reference, moved)
            assert r.json()["score"] == pytest.approx(expected["score"])
            assert [i["completion"] for i in graded] == [i["completion"] for i in expected["items"]]
            if spec.level == 3:  # whole episodes agree, step by step
                assert [i["commands"] for i in graded] == [i["commands"] for i in expected["items"]]
        assert len(engine_processes(cache_dir)) == 3  # one resident engine per grader replica
    finally:
        for config in configs:
            remove(app_name(config["name"]))
    deadline = time.monotonic() + 60
    while engine_processes(cache_dir) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert engine_processes(cache_dir) == []  # the replicas' teardown killed their engines
