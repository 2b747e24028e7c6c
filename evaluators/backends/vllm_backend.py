"""The vLLM backend: one resident engine per grading replica, in a process of its own (vllm_worker.py), run by the
vLLM environment's python (`scripts/setup --vllm` makes it; A2RL_VLLM_VENV moves it).

Same replies as the transformers backend by construction where it matters: prompts (chats through the submission's
template, or raw text) are tokenised here by the same code (`prompt_ids`), decoding is greedy with the same eos tokens,
token limit and repetition penalty (the task's Decoding), and replies are decoded and cut at stop strings here
(`reply_text`, `Decoding.cut`). The engine turns token ids into token ids, and stops a reply at the decoding's stop
strings as it goes (the original's vLLM does: an action of 10 tokens costs 10, not max_new_tokens), with a
tokenizer that decodes as the submission's.

A submission whose config, checkpoint layout (tensor names, dtypes, shapes) and tokenizer (what it decodes: its
vocabulary, added tokens and decoder) equal the running engine's only has its weights loaded into that engine;
anything else gets a fresh engine. The engine's process group is killed on
close() (the replica stopping) and when the replica's process dies, so its memory always comes back.
"""
from __future__ import annotations

import collections
import hashlib
import json
import logging
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contracts.decoding import Decoding, Prompt
from contracts.infra import InfraError
from contracts.registry import register
from contracts.specs import ConfigError
from contracts.errors import ModelLoadError
from evaluators.backends.base import EvaluatorBackend
from evaluators.backends.transformers_backend import (_short, eos_token_ids, load_config_and_tokenizer, prompt_ids,
                                                      repetition_penalty, reply_text)

log = logging.getLogger("a2rl.vllm")
ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).resolve().parent / "vllm_worker.py"
VENV_VARIABLE = "A2RL_VLLM_VENV"
# config.json keys that say nothing about the network an engine runs (trainers save use_cache=false: the demo's sft
# submissions got a fresh engine for it)
CONFIG_NOISE = ("_name_or_path", "transformers_version", "use_cache")


def vllm_python() -> Path:
    """The interpreter of the vLLM environment (scripts/setup --vllm puts it in the project root's .venv-vllm)."""
    return Path(os.environ.get(VENV_VARIABLE) or ROOT / ".venv-vllm") / "bin" / "python"


def environment_missing(python: Path | None = None) -> str | None:
    """Why grader.backend=vllm cannot start here (what to run), or None."""
    python = python or vllm_python()
    if python.exists():
        return None
    return (f"grader.backend=vllm needs the vLLM environment, and {python} does not exist: make it with "
            f"`scripts/setup --vllm` (or point {VENV_VARIABLE} at one)")


class EngineError(InfraError):
    pass


class EngineProcess:
    """vllm_worker.py with one engine: requests and answers are JSON lines over its stdin and stdout."""

    def __init__(self, python: Path, model_dir: Path, engine_args: dict, env: dict):
        self.model_dir = model_dir
        self.tail: collections.deque[str] = collections.deque(maxlen=40)  # its last log lines, for errors
        self.proc = subprocess.Popen([str(python), str(WORKER), json.dumps({"model": str(model_dir), **engine_args})],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env, start_new_session=True)  # its own group: killed whole
        threading.Thread(target=self._drain_log, daemon=True).start()
        self.start_s = self._answer()["start_s"]

    def _drain_log(self) -> None:
        for line in self.proc.stderr:
            self.tail.append(line.rstrip())
            log.debug("%s", line.rstrip())

    def _answer(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(timeout=30)
            time.sleep(0.2)  # the log drain's last lines
            raise EngineError(f"the vLLM engine process exited ({self.proc.returncode}): "
                              + " | ".join(list(self.tail)[-8:]))
        answer = json.loads(line)
        if not answer["ok"]:
            raise EngineError(answer["error"])
        return answer

    def ask(self, **request) -> dict:
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        except OSError:
            pass  # it died: _answer says how
        return self._answer()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self, grace_s: float = 10.0) -> None:
        """Ask it to stop, then kill its whole process group (vLLM's engine core and workers are its children)."""
        try:
            self.proc.stdin.write(json.dumps({"op": "close"}) + "\n")
            self.proc.stdin.close()
            self.proc.wait(timeout=grace_s)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


@dataclass
class LoadedModel:
    tokenizer: Any
    model_dir: Path
    eos_ids: list[int]
    generation: Any     # the model's GenerationConfig
    weight_files: list[Path]
    load_count: int     # which load of the engine this is (a stale handle must not generate)
    digest: str | None = None


@register("backend", "vllm")
class VLLMBackend(EvaluatorBackend):
    def __init__(self, batch_size: int = 32, device: str = "auto", torch_threads: int | None = None, *,
                 gpu_memory_utilization: float = 0.9, tensor_parallel_size: int = 1, max_model_len: int | None = None,
                 kv_cache_gb: float | None = None, python: str | Path | None = None):
        super().__init__(batch_size, device, torch_threads)
        self.python = Path(python) if python else vllm_python()
        problem = environment_missing(self.python)
        if problem:
            raise ConfigError(problem)
        if device == "auto":
            import torch

            self.device = "cuda" if torch.cuda.is_available() else "cpu"
        if self.device == "cpu" and kv_cache_gb is None:
            raise ConfigError("grader.backend=vllm on a CPU needs grader.kv_cache_gb (e.g. 1): vLLM would take "
                              f"gpu_memory_utilization={gpu_memory_utilization} of the machine's memory")
        self.engine_args: dict = {
            # fp32 on CPU and the saved dtype on a GPU, as the transformers backend loads them
            "dtype": "float32" if self.device == "cpu" else "auto",
            "tensor_parallel_size": int(tensor_parallel_size), "gpu_memory_utilization": float(gpu_memory_utilization),
            "max_model_len": max_model_len, "seed": 0,
        }
        if kv_cache_gb is not None:
            self.engine_args["kv_cache_memory_bytes"] = int(kv_cache_gb * (1 << 30))
        self.engine: EngineProcess | None = None
        self.signature: str | None = None   # what the running engine holds
        self.load_count = 0
        self.stats = {"starts": 0, "reloads": 0, "start_s": 0.0, "reload_s": 0.0}
        # one submission at a time in the one engine: held from load to unload
        self._busy = threading.Lock()

    @classmethod
    def from_settings(cls, settings) -> "VLLMBackend":
        threads = settings.threads or max(1, int(settings.num_cpus))
        return cls(batch_size=settings.batch_size, device=settings.device, torch_threads=threads,
                   gpu_memory_utilization=settings.gpu_memory_utilization,
                   tensor_parallel_size=settings.tensor_parallel_size, max_model_len=settings.max_model_len,
                   kv_cache_gb=settings.kv_cache_gb)

    def engine_env(self) -> dict:
        """The engine process's environment: the replica's, less what would point it at the main environment."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        env.update(HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1")
        if self.device == "cpu":
            # the replica's thread count, as for torch in the transformers backend, not every core of the node
            env.update(VLLM_CPU_OMP_THREADS_BIND="nobind", OMP_NUM_THREADS=str(self.torch_threads or 1))
        return env

    def load(self, model_dir) -> LoadedModel:
        self._busy.acquire()
        try:
            return self._load(Path(model_dir))
        except BaseException:
            self._busy.release()
            raise

    def _load(self, path: Path) -> LoadedModel:
        from transformers import GenerationConfig

        config, tokenizer = load_config_and_tokenizer(path)
        vocab = getattr(config.get_text_config(), "vocab_size", None)
        if vocab is not None and len(tokenizer) > vocab:
            raise ModelLoadError(f"the tokenizer has {len(tokenizer)} tokens but the model's embedding only {vocab}")
        try:
            generation = GenerationConfig.from_pretrained(path)
        except OSError:  # no generation_config.json: transformers derives one from the config, so do we
            generation = GenerationConfig.from_model_config(config)
        eos_ids = eos_token_ids(tokenizer, generation)
        if not eos_ids:
            raise ModelLoadError(f"neither the tokenizer nor generation_config.json in {path} names an eos token")
        files = _weight_files(path)
        layout = {name: spec for f in files for name, spec in _tensor_specs(f).items()}
        arch = {k: v for k, v in json.loads((path / "config.json").read_text()).items() if k not in CONFIG_NOISE}
        signature = hashlib.sha256(json.dumps([arch, sorted(layout.items()), decoder_identity(tokenizer)],
                                              sort_keys=True).encode()).hexdigest()
        try:
            if self.engine is not None and self.engine.alive() and signature == self.signature:
                answer = self.engine.ask(op="reload", model=str(path))
                self.stats["reloads"] += 1
                self.stats["reload_s"] += answer["reload_s"]
            else:
                self.close()
                self.engine = EngineProcess(self.python, path, self.engine_args, self.engine_env())
                self.stats["starts"] += 1
                self.stats["start_s"] += self.engine.start_s
        except EngineError as e:
            self.close()  # a failed start left nothing; a failed reload left half-loaded weights
            raise ModelLoadError(f"vLLM could not load {path}: {_short(e)}") from None
        self.signature = signature
        self.load_count += 1
        # the model's generation_config.json: its repetition penalty is a2rl's protocol's (Qwen's chat models: 1.1)
        return LoadedModel(tokenizer=tokenizer, model_dir=path, eos_ids=eos_ids, generation=generation,
                           weight_files=files, load_count=self.load_count)

    def generate(self, loaded: LoadedModel, prompts: list[Prompt], decoding: Decoding) -> list[str]:
        if self.engine is None or loaded.load_count != self.load_count:
            raise RuntimeError(f"{loaded.model_dir} is no longer the model in the vLLM engine")
        if not prompts:
            return []
        ids = [prompt_ids(loaded.tokenizer, p, decoding) for p in prompts]
        # all at once (batch_size does not apply): vLLM's scheduler batches them as its KV cache allows. The engine
        # stops each reply at its first stop string; the reply is still decoded and cut here, exactly as the
        # transformers backend cuts it (the tokens the engine kept end with the one that completed the stop string).
        answer = self.engine.ask(op="generate", prompts=ids, max_tokens=int(decoding.max_new_tokens),
                                 stop_token_ids=loaded.eos_ids, stop=list(decoding.stop),
                                 repetition_penalty=repetition_penalty(decoding, loaded.generation))
        self.generated_tokens += sum(len(out) for out in answer["outputs"])
        return [decoding.cut(reply_text(loaded.tokenizer, out, loaded.eos_ids)) for out in answer["outputs"]]

    def weights_digest(self, loaded: LoadedModel) -> str:
        """sha256 over the checkpoint's tensors by name (as stored: any sharding, safetensors or .bin), tagged with
        this backend: its scores are cached apart from the transformers backend's, whose numerics differ."""
        if loaded.digest is None:
            import torch

            h = hashlib.sha256(b"vllm|")
            tensors = {name: f for f in loaded.weight_files for name in _tensor_specs(f)}
            opened: dict[Path, Any] = {}
            for name in sorted(tensors):
                t = _read_tensor(tensors[name], name, opened).contiguous()
                h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
                h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
            loaded.digest = h.hexdigest()
        return loaded.digest

    def unload(self, loaded: LoadedModel) -> None:
        self._busy.release()  # the engine stays resident with these weights until the next load

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine, self.signature = None, None


def decoder_identity(tokenizer) -> str:
    """What the engine's stop strings are matched with: the tokenizer's vocabulary, added tokens (and which are
    special: replies skip them) and decoder, not how its files are laid out (a trainer re-saving the base's tokenizer
    keeps the engine)."""
    if getattr(tokenizer, "is_fast", False):
        state = json.loads(tokenizer.backend_tokenizer.to_str())
        kept = {key: state.get(key) for key in ("model", "decoder", "added_tokens")}
    else:
        kept = {"vocab": sorted(tokenizer.get_vocab().items()), "class": type(tokenizer).__name__}
    kept["special"] = sorted(tokenizer.all_special_ids)
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()


def _weight_files(path: Path) -> list[Path]:
    """The files vLLM loads weights from: safetensors when there are any, else PyTorch .bin files."""
    files = sorted(path.glob("*.safetensors")) or sorted(path.glob("*.bin"))
    if not files:
        raise ModelLoadError(f"no weights in {path} (*.safetensors or pytorch_model*.bin): save the model with "
                             "model.save_pretrained(dir)")
    return files


def _tensor_specs(path: Path) -> dict[str, list]:
    """name -> [dtype, shape] of every tensor in a weight file, from its header where it has one."""
    try:
        if path.suffix == ".safetensors":
            with open(path, "rb") as f:
                header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
            return {k: [v["dtype"], v["shape"]] for k, v in header.items() if k != "__metadata__"}
        import torch

        state = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
        return {k: [str(v.dtype), list(v.shape)] for k, v in state.items()}
    except Exception as e:
        raise ModelLoadError(f"{path.name} in {path.parent} is not a readable weight file: {_short(e)}") from e


def _read_tensor(path: Path, name: str, opened: dict):
    if path.suffix == ".safetensors":
        from safetensors import safe_open

        if path not in opened:
            opened[path] = safe_open(str(path), framework="pt")
        return opened[path].get_tensor(name)
    import torch

    if path not in opened:
        opened[path] = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
    return opened[path][name]
