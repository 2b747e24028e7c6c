"""bm25s, the local searches' engine (WebShop's generated store, DeepSearchQA's generated world), imported so that it
cannot take a GPU.

On import bm25s runs one JAX top-k when JAX is installed (bm25s.selection), and JAX then reserves 75% of the GPU's
memory in that process: on an H200 with JAX installed the orchestrator held 108 GB and the grader 34 GB, and the
cell's own training ran out of memory. A search is CPU work, so JAX stays on the CPU unless the user set its
platforms."""
from __future__ import annotations

import os


def load_bm25s():
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import bm25s

    return bm25s
