"""Base models, tasks, the transformers evaluator backend and the reference agent scripts, on real tiny models."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch
import yaml

from agents.kinds import agent_kind
from contracts.decoding import Decoding
from contracts.specs import AgentSpec
from contracts.task import load_task
from evaluators.backends.base import ModelLoadError
from evaluators.backends.transformers_backend import TransformersBackend
from evaluators.base_models import resolve_base_model
from evaluators.evaluate import evaluate
from evaluators.tasks.reasoning_gym_task import final_number, numeric_score
from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[1]


def task_config(name: str, **overrides) -> dict:
    return {**yaml.safe_load((ROOT / "conf" / "task" / f"{name}.yaml").read_text()), **overrides}


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("a2rl-models")


@pytest.fixture(scope="module")
def tiny(models_dir) -> Path:
    return resolve_base_model("tiny", models_dir)


@pytest.fixture(scope="module")
def backend() -> TransformersBackend:
    # One thread: with two, torch's thread pool stalls whenever the other core is busy (measured 20-50x slower).
    return TransformersBackend(batch_size=8, device="cpu", torch_threads=1)


@pytest.fixture(scope="module")
def arithmetic():
    return load_task(task_config("arithmetic"))


# ---------------------------------------------------------------- base models

def test_tiny_model_builds_the_same_every_time(tiny, tmp_path, backend):
    again = resolve_base_model("tiny", tmp_path)
    assert again != tiny
    for name in ("tokenizer.json", "config.json", "chat_template.jinja"):
        assert (again / name).read_bytes() == (tiny / name).read_bytes()
    digests = []
    for path in (tiny, again):
        loaded = backend.load(path)
        digests.append(backend.weights_digest(loaded))
        backend.unload(loaded)
    assert digests[0] == digests[1]
    assert resolve_base_model("tiny", tmp_path) == again  # built once, then reused
    assert resolve_base_model(str(again), "/nonexistent") == again  # a directory is used as is


def test_concurrent_builds_yield_one_complete_model(tmp_path):
    script = f"import sys; sys.path.insert(0, {str(ROOT)!r}); from evaluators.base_models import resolve_base_model; " \
             f"print(resolve_base_model('tiny', {str(tmp_path)!r}))"
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert outs[0] == outs[1] == str(tmp_path / "tiny")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".tiny.lock", "tiny"]


@pytest.mark.skipif(os.environ.get("A2RL_SLOW") != "1", reason="converts SmolLM2 from GGUF (~20 s); A2RL_SLOW=1")
def test_smollm2_converts_to_a_plain_model(models_dir, backend):
    path = resolve_base_model("smollm2-135m", models_dir)
    assert "quantization_config" not in json.loads((path / "config.json").read_text())
    loaded = backend.load(path)
    [reply] = backend.generate(loaded, [[{"role": "user", "content": "What is 2 + 3?"}]], Decoding(max_new_tokens=12))
    backend.unload(loaded)
    assert reply.strip()


# ---------------------------------------------------------------- tasks

def test_splits_are_disjoint_and_deterministic(arithmetic):
    train, held_out = arithmetic.train_rows(), arithmetic.eval_rows()
    assert len(train) == 1000 and len(held_out) == 200
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in held_out}
    assert len({r["prompt"] for r in held_out}) == len(held_out)
    assert {"id", "prompt", "answer", "completion"} <= set(train[0])
    assert "completion" not in held_out[0]
    again = load_task(task_config("arithmetic"))
    assert again.eval_rows() == held_out and again.train_rows() == train
    assert "last number" in arithmetic.instructions() and "16 new tokens" in arithmetic.instructions()


def test_gsm_symbolic_trains_on_worked_solutions():
    task = load_task(task_config("gsm_symbolic", train_size=50, eval_size=20))
    row = task.train_rows()[0]
    assert row["completion"] != row["answer"] and task.score(row["completion"], row) == 1.0
    assert not {r["prompt"] for r in task.train_rows()} & {r["prompt"] for r in task.eval_rows()}


def test_eval_split_cannot_be_rebuilt_from_the_public_config(tmp_path):
    """The generator and every public knob are known to an agent; the grading side's secret is not."""
    import reasoning_gym

    cfg = task_config("arithmetic", train_size=50, eval_size=40)
    task = load_task(cfg, tmp_path / "a")
    hidden = [r["prompt"] for r in task.eval_rows()]
    secret = (tmp_path / "a" / "grading" / "eval-salt")
    assert secret.exists() and oct(secret.stat().st_mode & 0o777) == "0o600"
    # What an agent could replay: the generator at the public eval seed, in order, skipping train questions (how
    # the split was drawn before the secret). The question space is small, so compare position by position.
    train = {r["prompt"] for r in task.train_rows()}
    replayed = [cfg.get("prompt_template", "{question}").format(question=item["question"])
                for item in reasoning_gym.create_dataset(cfg["dataset"], size=40 * 10, seed=cfg["eval_seed"],
                                                         **cfg["dataset_config"])]
    replayed = list(dict.fromkeys(q for q in replayed if q not in train))[:len(hidden)]
    assert sum(a == b for a, b in zip(hidden, replayed)) < 4
    assert [r["prompt"] for r in load_task(cfg, tmp_path / "a").eval_rows()] == \
        [r["prompt"] for r in task.eval_rows()]  # same secret, same split
    other = load_task(cfg, tmp_path / "b")  # another secret, another split
    assert [r["prompt"] for r in other.eval_rows()] != [r["prompt"] for r in task.eval_rows()]
    assert task.secret_eval_seed() >= 1 << 40 and not train & set(hidden)


def test_task_config_mistakes_are_explained():
    with pytest.raises(ValueError, match="train seeds"):
        load_task(task_config("arithmetic", train_seed=(1 << 40) - 10))
    with pytest.raises(ValueError, match="does not take.*'colour'"):
        load_task(task_config("arithmetic", colour="red"))
    with pytest.raises(ValueError, match="unknown task 'ReasoningGymTask'; known: .*reasoning_gym"):
        load_task({"name": "x", "cls": "ReasoningGymTask", "base_model": "tiny"})


@pytest.mark.parametrize("completion, answer, expected", [
    ("42", "42", 1.0),
    ("The answer is 42.", "42", 1.0),
    ("1,234", "1234", 1.0),
    ("It costs $1,234,567 in total", "1234567", 1.0),
    ("-17", "-17", 1.0),
    ("x = -3.", "-3", 1.0),
    ("2.50", "2.5", 1.0),
    ("42.0", "42", 1.0),
    ("first 3, then 7", "7", 1.0),           # the last number counts
    ("7 then 3", "7", 0.0),
    ("#### 288\n", "288", 1.0),
    ("5-3", "3", 1.0),                       # a hyphen between numbers is not a minus sign
    ("", "0", 0.0),
    ("no number here", "5", 0.0),
    ("-4", "4", 0.0),
])
def test_score_reads_the_final_number(completion, answer, expected):
    assert numeric_score(completion, answer) == expected


def test_final_number_edge_cases():
    assert final_number("1,2,3") == 3  # not thousands groups: three numbers
    assert final_number("0.5 and 12.") == 12
    assert final_number(None) is None


# ---------------------------------------------------------------- backend

def test_batched_generation_equals_one_at_a_time(tiny, backend, arithmetic):
    gsm = load_task(task_config("gsm_symbolic", train_size=20, eval_size=4))
    conversations = [arithmetic.messages(r) for r in arithmetic.eval_rows()[:9]] + \
                    [gsm.messages(r) for r in gsm.eval_rows()[:3]] + [[{"role": "user", "content": "hi"}]]
    loaded = backend.load(tiny)
    batched = backend.generate(loaded, conversations, Decoding(max_new_tokens=12))
    single = [backend.generate(loaded, [c], Decoding(max_new_tokens=12))[0] for c in conversations]
    backend.unload(loaded)
    assert batched == single
    assert len(batched) == len(conversations)


def test_not_a_model_is_a_load_error_with_a_reason(tiny, backend, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelLoadError, match="no config.json"):
        backend.load(empty)
    with pytest.raises(ModelLoadError, match="not a directory"):
        backend.load(tmp_path / "missing")

    no_weights = tmp_path / "no_weights"
    shutil.copytree(tiny, no_weights)
    (no_weights / "model.safetensors").unlink()
    with pytest.raises(ModelLoadError, match="not a loadable causal LM") as err:
        backend.load(no_weights)
    assert len(err.value.reason) < 800

    no_template = tmp_path / "no_template"
    shutil.copytree(tiny, no_template)
    (no_template / "chat_template.jinja").unlink()
    with pytest.raises(ModelLoadError, match="chat template"):
        backend.load(no_template)

    from safetensors.torch import load_file, save_file
    partial = tmp_path / "partial"
    shutil.copytree(tiny, partial)
    weights = load_file(partial / "model.safetensors")
    weights.pop(sorted(k for k in weights if "mlp" in k)[0])
    save_file(weights, partial / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ModelLoadError,
                       match=r"the checkpoint holds [0-9,]+ parameters but config.json declares [0-9,]+: weights are"):
        backend.load(partial)


def test_digest_follows_weights_not_files(tiny, backend, tmp_path):
    from transformers import AutoModelForCausalLM

    loaded = backend.load(tiny)
    base = backend.weights_digest(loaded)
    backend.unload(loaded)

    model = AutoModelForCausalLM.from_pretrained(tiny)
    resaved = tmp_path / "sharded"
    model.save_pretrained(resaved, max_shard_size="500KB")  # another file layout, same weights
    shutil.copy(tiny / "tokenizer.json", resaved)
    shutil.copy(tiny / "tokenizer_config.json", resaved)
    shutil.copy(tiny / "chat_template.jinja", resaved)
    assert len(list(resaved.glob("*.safetensors"))) > 1
    loaded = backend.load(resaved)
    assert backend.weights_digest(loaded) == base
    backend.unload(loaded)

    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    batch = torch.tensor([[1, 2, 3, 4, 5]])
    model(input_ids=batch, labels=batch).loss.backward()
    opt.step()
    stepped = tmp_path / "stepped"
    model.save_pretrained(stepped)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(tiny / name, stepped)
    loaded = backend.load(stepped)
    assert backend.weights_digest(loaded) != base
    backend.unload(loaded)


# ---------------------------------------------------------------- agents

@pytest.mark.slow  # the demo sweep test trains the same agent on the same task; batching is test_determinism's
def test_sft_beats_the_base_model(tiny, backend, arithmetic, tmp_path):
    sft = load_script(ROOT / "agents" / "builtin" / "sft.py")
    baseline = evaluate(arithmetic, backend, tiny)
    rounds = []
    saved = sft.train(tiny, arithmetic.train_rows(), tmp_path / "output",
                      {"steps_per_round": 200, "max_rounds": 2, "threads": 1}, seed=0,
                      deadline=time.time() + 600, on_round=rounds.append)
    assert saved == rounds == [str(tmp_path / "output" / f"round-{i}") for i in (1, 2)]
    result = evaluate(arithmetic, backend, saved[-1])
    assert result["n"] == 200 and result["digest"] != baseline["digest"]
    assert result["score"] >= baseline["score"] + 10, (baseline["score"], result["score"])  # percentage points

    # a trained model stops at eos after a few tokens: batching (uneven lengths, padding) must still not matter
    loaded = backend.load(saved[-1])
    conversations = [arithmetic.messages(r) for r in arithmetic.eval_rows()[:24]]
    assert backend.generate(loaded, conversations, Decoding(max_new_tokens=16)) == \
        [backend.generate(loaded, [c], Decoding(max_new_tokens=16))[0] for c in conversations]
    backend.unload(loaded)


# ~40 s of real training; the pacing it checks is also exercised by every sft sweep in the suite
@pytest.mark.slow
def test_sft_keeps_training_after_a_slow_warm_up_cut_its_first_round(tiny, arithmetic, tmp_path):
    """As on the H100: the first steps are slow (CUDA warm-up, here a sleep), so the first round is cut for time.
    The agent must not stop there: its pace comes from the warm steps, and it goes on in rounds that fit."""
    from transformers import TrainerCallback

    sft = load_script(ROOT / "agents" / "builtin" / "sft.py")

    class SlowWarmUp(TrainerCallback):
        def on_step_end(self, _args, state, control, **kw):
            if state.global_step <= 12:
                time.sleep(1.0)

    rounds = []
    saved = sft.train(tiny, arithmetic.train_rows()[:200], tmp_path / "output",
                      {"steps_per_round": 100, "max_rounds": 20, "threads": 1, "grading_estimate_s": 1,
                       "margin_s": 1, "min_round_steps": 5}, seed=0, deadline=time.time() + 40,
                      on_round=rounds.append, callbacks=[SlowWarmUp()])
    # 100 steps at the warm-up's pace cannot fit in 40 s, so round 1 is cut after about 11 steps; rounds follow
    assert len(saved) >= 2 and saved == rounds, saved


def test_agents_name_activation_checkpointing_as_the_installed_transformers_does():
    import dataclasses

    from trl import GRPOConfig, SFTConfig

    client = load_script(ROOT / "agents" / "builtin" / "a2rl_client.py")

    @dataclasses.dataclass
    class OlderConfig:  # transformers 5.17's TrainingArguments knew only the old name
        gradient_checkpointing: bool = False

    assert client.checkpointing(OlderConfig, False) == {"gradient_checkpointing": False}
    for config in (SFTConfig, GRPOConfig):
        kwargs = client.checkpointing(config, False)
        assert config(output_dir="/tmp/a2rl-x", use_cpu=True, bf16=False, **kwargs)  # the installed version takes it


def test_sft_trains_on_the_chat_the_grader_sends():
    """A row with `messages` (ALFWorld's carry a system prompt) is trained on exactly those; a bare row on its text.
    Training without the system prompt the grader sends cost the tiny model most of its ALFWorld wins."""
    sft = load_script(ROOT / "agents" / "builtin" / "sft.py")

    system = {"role": "system", "content": "Reply with one command."}
    rows = [{"prompt": "look around", "completion": "look",
             "messages": [system, {"role": "user", "content": "look around"}]},
            {"prompt": "Evaluate: 1 + 1.", "completion": "2"}]
    data = sft.chat_dataset(rows)
    assert data[0]["prompt"] == rows[0]["messages"]
    assert data[1]["prompt"] == [{"role": "user", "content": "Evaluate: 1 + 1."}]
    assert data[0]["completion"] == [{"role": "assistant", "content": "look"}]


class StubGrader(BaseHTTPRequestHandler):
    """Speaks the grading API's wire protocol; accepts `limit` submissions, then answers 409."""
    limit, seen, token = 1, [], "secret"

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.headers.get("Authorization") != f"Bearer {self.token}":
            return self.reply(401, {"error": "unknown token", "code": "unauthorized"})
        if len(self.seen) >= self.limit:
            return self.reply(409, {"error": "submission budget spent", "code": "budget_exhausted"})
        self.seen.append(body["model_path"])
        self.reply(200, {"score": 0.5, "baseline_score": 0.0, "improvement": 0.5, "best": 0.5,
                         "remaining_submissions": 5 - len(self.seen)})

    def reply(self, code: int, obj: dict):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def workspace(tiny, arithmetic, tmp_path):
    StubGrader.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), StubGrader)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    ws = tmp_path / "ws"
    (ws / "data").mkdir(parents=True)
    (ws / "output").mkdir()
    os.symlink(tiny, ws / "model")
    with open(ws / "data" / "train.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in arithmetic.train_rows()[:200])
    run = {"model_path": "model", "train_data": "data/train.jsonl", "output_dir": "output",
           "grading_url": f"http://127.0.0.1:{server.server_port}/arithmetic", "run_token": StubGrader.token,
           "deadline": time.time() + 120, "max_submissions": 5, "seed": 0,
           "agent_args": {"steps_per_round": 10, "max_rounds": 4, "grading_estimate_s": 1}}
    (ws / "run.json").write_text(json.dumps(run))
    yield ws
    server.shutdown()


def run_script(name: str, ws: Path) -> subprocess.CompletedProcess:
    # Run as a cell does: the agent kind's command line and code/ files, the workspace as cwd (-E -s: no PYTHONPATH
    # or user site: what a sandboxed agent imports is what the cell gave it).
    argv, files = agent_kind("builtin").command(AgentSpec(name=name, kind="builtin", script=name))
    (ws / "code").mkdir(exist_ok=True)
    for file_name, source in files.items():
        shutil.copy(source, ws / "code" / file_name)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"OMP_NUM_THREADS": "1"}
    return subprocess.run([argv[0], "-E", "-s", *argv[1:]], cwd=ws, env=env, capture_output=True, text=True,
                          timeout=180)


def test_sft_script_submits_rounds_and_stops_at_409(workspace):
    proc = run_script("sft", workspace)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert StubGrader.seen == ["output/round-1"]
    answers = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{\"model_path\"")]
    assert [a["status"] for a in answers][:2] == [200, 409]
    assert len(answers) == 2  # stopped training after the 409
    assert (workspace / "output" / "round-1" / "model.safetensors").exists()


def test_copy_base_script_submits_a_copy(workspace):
    proc = run_script("copy_base", workspace)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert StubGrader.seen == ["output/base_copy"]
    copy = workspace / "output" / "base_copy"
    assert not copy.is_symlink()
    assert (copy / "model.safetensors").read_bytes() == (workspace / "model" / "model.safetensors").read_bytes()
