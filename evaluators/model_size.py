"""What a submitted model will take, known before anything is allocated, and the grader replica's memory bound.

A config.json is a promise the agent writes: `from_pretrained` allocates (and initialises, for weights the checkpoint
lacks) whatever it declares. Measured on a 24 GB machine: a config declaring ~18 GB beside an empty safetensors file
took 20.4 GB resident before it failed, and Ray's memory monitor then killed six processes of the sweep. So before
`from_pretrained`, the model is built on the meta device (shapes, no storage: ~0.2 s for a 54B-parameter config),
its bytes at the dtype it would load in are compared with what the replica may still take, and the checkpoint's
headers (safetensors: a JSON header, read without the data) must hold as many parameters as the config declares.
"""
from __future__ import annotations

import json
import resource
import struct
from dataclasses import dataclass
from pathlib import Path

from contracts.errors import ModelLoadError

MAX_LAYERS = 512          # the largest open causal LMs have ~130; building 1,000 layers on meta alone takes ~4 s
MAX_HEADER_BYTES = 100 << 20  # a safetensors header larger than this is not a checkpoint (the format's own cap)
GB = 1e9


@dataclass(frozen=True)
class Need:
    params: int               # unique parameters the config declares (tied weights once)
    bytes: int                # their memory at the dtype they load in
    largest: int              # the largest parameter's bytes (a conversion holds one more of it at a time)


def _dtype_bytes(dtype) -> int:
    import torch

    return torch.empty((), dtype=dtype).element_size()


def declared(config, dtype) -> Need:
    """The parameters the config declares, counted on the meta device (nothing allocated). dtype: what they load in
    (None: the config's own)."""
    import torch
    from transformers import AutoModelForCausalLM

    layers = getattr(config, "num_hidden_layers", None)
    if isinstance(layers, int) and layers > MAX_LAYERS:
        raise ModelLoadError(f"config.json declares {layers} layers; the grader loads at most {MAX_LAYERS}")
    try:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config, trust_remote_code=False)
    except Exception as e:
        raise ModelLoadError(f"config.json does not describe a causal LM this grader can build: "
                             f"{type(e).__name__}: {str(e)[:300]}") from e
    if dtype is None:
        dtype = getattr(config, "dtype", None) or torch.float32
        dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    size = _dtype_bytes(dtype)
    numels = [p.numel() for p in model.parameters()]  # each shared (tied) parameter once
    return Need(params=sum(numels), bytes=sum(numels) * size, largest=max(numels, default=0) * size)


def checkpoint_params(folder: Path) -> int | None:
    """Parameters the checkpoint holds, from the safetensors headers (no tensor data is read); None when it has no
    safetensors files (a pickled checkpoint: its count is the loader's to check). A header that is not one, or
    that promises more bytes than its file has, is refused here."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for path in files:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            n = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
            if n < 2 or n > min(MAX_HEADER_BYTES, size - 8):
                raise ModelLoadError(f"{path.name} is not a safetensors file ({size} bytes, header length {n})")
            try:
                header = json.loads(f.read(n))
            except ValueError as e:
                raise ModelLoadError(f"{path.name} has no valid safetensors header: {e}") from None
        for name, meta in header.items():
            if name == "__metadata__":
                continue
            try:
                count = 1
                for d in meta["shape"]:
                    count *= int(d)
                end = int(meta["data_offsets"][1])
            except (KeyError, TypeError, ValueError, IndexError):
                raise ModelLoadError(f"{path.name}: tensor {name!r} has no valid shape or offsets") from None
            if 8 + n + end > size:
                raise ModelLoadError(f"{path.name} is truncated: tensor {name!r} ends at byte {8 + n + end} of "
                                     f"{size}")
            total += count
    return total


def check_fits(folder: Path, config, dtype, budget_bytes: int | None) -> Need:
    """Refuse (ModelLoadError, a 422) a model that would not fit the replica or whose checkpoint lacks weights the
    config declares, before anything of it is allocated."""
    need = declared(config, dtype)
    peak = need.bytes + 2 * need.largest  # the weights, plus a tensor being converted and its copy for the digest
    if budget_bytes is not None and peak > budget_bytes:
        raise ModelLoadError(f"config.json declares {need.params / 1e9:.3g}B parameters ({need.bytes / GB:.3g} GB "
                             f"to load, ~{peak / GB:.3g} GB at peak), more than the grader may take for one model "
                             f"({budget_bytes / GB:.3g} GB free of its bound); submit a model of the base model's "
                             "size")
    held = checkpoint_params(folder)
    if held is not None and held < need.params:
        raise ModelLoadError(f"the checkpoint holds {held:,} parameters but config.json declares {need.params:,}: "
                             "weights are missing (save the model with model.save_pretrained(dir))")
    return need


# -- the replica's bound -----------------------------------------------------------------------------------------

def _status_kb(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return 0


def bound_memory(limit_bytes: int) -> int:
    """Bound this process's private writable memory (RLIMIT_DATA: every malloc and anonymous mapping; not files
    mapped read-only, as safetensors are) at `limit_bytes`: past it an allocation fails in this process (a
    MemoryError: the evaluation fails, the replica lives) instead of the node running out and Ray's memory monitor
    killing other processes. Returns the limit set."""
    held = _status_kb("VmData")
    if held > 0.8 * limit_bytes:
        raise ValueError(f"the grader replica holds {held / GB:.2f} GB before any model; grader.memory_gb="
                         f"{limit_bytes / GB:.2f} leaves no room for one: raise it")
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    limit = int(limit_bytes) if hard == resource.RLIM_INFINITY else min(int(limit_bytes), hard)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
    return limit


def free_bytes(device: str) -> int | None:
    """What one more model may take now: on a GPU its free memory; on the CPU what the bound leaves, and never more
    than the node has available."""
    if device.startswith("cuda"):
        import torch

        return int(torch.cuda.mem_get_info()[0])
    import psutil

    available = psutil.virtual_memory().available
    soft, _ = resource.getrlimit(resource.RLIMIT_DATA)
    if soft == resource.RLIM_INFINITY:
        return available
    return max(0, min(available, soft - _status_kb("VmData")))


def default_bound() -> int:
    """The replica's bound when its task sets no grader.memory_gb: half of this node's memory."""
    import psutil

    return psutil.virtual_memory().total // 2

