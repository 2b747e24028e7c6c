"""Search backends: what `search[query]` runs. A local BM25 index over documents (bm25s), or an HTTP search API.

- ``LocalIndex(documents)``: BM25 (bm25s, Lucene's variant, English stopwords) over the documents' titles and
  texts; built lazily in each process that searches (the index is not pickled, the documents are), so the grader's
  workers and the rollout service's hosts each hold their own. Hits with a zero score (no query word in them) are
  not results.
- ``HttpSearch(url, ...)``: GET ``url?<query_param>=<query>&<params>`` (the key, when one is configured, is read
  from the grading side's environment variable ``key_env`` and sent as ``key_param``; it never enters a
  config or a workspace). The answer's results are read from the common shapes: SerpAPI's ``organic_results``,
  a plain ``results`` list, or Brave's ``web.results``; each hit's ``title`` and its ``snippet`` / ``content`` /
  ``description`` / ``text``. A failed call is answered as an observation ("Search failed: ..."), not an error:
  the agent sees what a flaky web looks like, as the original did.
- ``OriginalSearch(...)``: the paper's search, as RD-Agent's benchmarks/deepsearchqa/eval.py runs it: SerpAPI
  (``GET serpapi_url?q=<query>&api_key=<key>&num=3``, the top 3 organic results' ``snippet`` joined with `` | ``)
  when the variable ``SERPAPI_KEY`` is set (and not empty) on the grading side, else DuckDuckGo's instant-answer API
  (``GET duckduckgo_url?q=<query>&format=json&no_html=1``: ``AbstractText``, else the ``Text`` of the first two
  ``RelatedTopics`` joined with `` | ``). ``observation(query)`` is the original's text to the byte: "No results
  found." when that is empty, "Search error: <the exception>" when the call or its JSON fails, whatever the HTTP
  status (requests, as the original calls it, so the query string, the error texts and the 10 s timeout are the
  same). The base URLs default to the real hosts; tests point them at loopback.
- ``load_documents(path)``: a local document collection for real questions: JSONL (``title`` and ``text`` /
  ``contents`` / ``body``) or a folder of ``.txt`` files (title = file name).
"""
from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from envs.bm25 import load_bm25s
from envs.deepsearchqa.world import Document
from contracts.infra import InfraError


@dataclass(frozen=True)
class Hit:
    title: str
    text: str


class LocalIndex:
    def __init__(self, documents: list[Document]):
        if not documents:
            raise ValueError("a local search index needs documents; got none")
        self.documents = list(documents)
        self._index = None

    def __getstate__(self) -> dict:
        return {"documents": self.documents, "_index": None}  # each process builds its own

    def _built(self):
        if self._index is None:
            bm25s = load_bm25s()

            tokenizer = bm25s.tokenization.Tokenizer(stopwords="en")
            ids = tokenizer.tokenize([f"{d.title} {d.text}" for d in self.documents], show_progress=False,
                                     update_vocab=True)
            retriever = bm25s.BM25()
            retriever.index(ids, show_progress=False)
            self._index = (tokenizer, retriever)
        return self._index

    def search(self, query: str, k: int) -> list[Hit]:
        return self.search_many([query], k)[0]

    def search_many(self, queries: list[str], k: int) -> list[list[Hit]]:
        """Several queries scored in one call (what a rollout host does with a batch's searches)."""
        tokenizer, retriever = self._built()
        ids = tokenizer.tokenize(list(queries), show_progress=False, update_vocab=False)
        k = min(k, len(self.documents))
        # n_threads=0: in this thread (any other number starts a thread pool per call: ~30% more CPU a search);
        # numpy's top-k, which bm25s picks where JAX is absent: the same ranking, ties included, on every machine
        docs, scores = retriever.retrieve(ids, k=k, show_progress=False, n_threads=0, backend_selection="numpy")
        return [[Hit(self.documents[i].title, self.documents[i].text)
                 for i, score in zip(row_docs.tolist(), row_scores.tolist()) if score > 0]
                for row_docs, row_scores in zip(docs, scores)]


class SearchApi:
    """A web search API: one request a query."""

    def search(self, query: str, k: int) -> list[Hit]:
        raise NotImplementedError

    def search_many(self, queries: list[str], k: int) -> list[list[Hit] | SearchError]:
        """One call per query (a search API answers one query a request); a failed one is its own SearchError."""
        out: list = []
        for query in queries:
            try:
                out.append(self.search(query, k))
            except SearchError as e:
                out.append(e)
        return out


class HttpSearch(SearchApi):
    def __init__(self, url: str, query_param: str = "q", key_env: str | None = None, key_param: str = "api_key",
                 params: dict | None = None, timeout_s: float = 10.0):
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"search url {url!r} must start with http:// or https://")
        self.url, self.query_param, self.key_env, self.key_param = url, query_param, key_env, key_param
        self.params, self.timeout_s = dict(params or {}), float(timeout_s)

    def search(self, query: str, k: int) -> list[Hit]:
        params = {**self.params, self.query_param: query}
        if self.key_env:
            key = os.environ.get(self.key_env)
            if not key:
                raise SearchError(f"the search API key variable {self.key_env} is not set on the grading side")
            params[self.key_param] = key
        sep = "&" if "?" in self.url else "?"
        try:
            with urllib.request.urlopen(self.url + sep + urllib.parse.urlencode(params),
                                        timeout=self.timeout_s) as response:
                body = json.loads(response.read() or b"{}")
        except (urllib.error.URLError, TimeoutError, OSError, ValueError) as e:
            raise SearchError(f"{type(e).__name__}: {e}") from e
        return results_of(body)[:k]



SERPAPI_URL = "https://serpapi.com/search"
DUCKDUCKGO_URL = "https://api.duckduckgo.com/"
SERPAPI_KEY_ENV = "SERPAPI_KEY"  # the variable the original reads (its eval_config's serpapi_key: keys stay out of
                                 # configs here)
NO_RESULTS = "No results found."


class OriginalSearch(SearchApi):
    """The original's search (see the module's docstring): which engine answers is decided per call by the grading
    side's environment, as the original decides it when its evaluator starts."""

    SNIPPETS = 3          # SerpAPI: `num=3` asked, the first 3 organic results shown
    RELATED_TOPICS = 2    # DuckDuckGo: the first 2 related topics, when there is no abstract

    def __init__(self, serpapi_url: str = SERPAPI_URL, duckduckgo_url: str = DUCKDUCKGO_URL,
                 key_env: str = SERPAPI_KEY_ENV, timeout_s: float = 10.0):
        for name, url in (("serpapi_url", serpapi_url), ("duckduckgo_url", duckduckgo_url)):
            if not str(url).startswith(("http://", "https://")):
                raise ValueError(f"search.{name} {url!r} must start with http:// or https://")
        self.serpapi_url, self.duckduckgo_url = str(serpapi_url), str(duckduckgo_url)
        self.key_env, self.timeout_s = key_env, float(timeout_s)

    def engine(self) -> str:
        return "serpapi" if os.environ.get(self.key_env) else "duckduckgo"

    def _answer(self, query: str, num: int):
        """The engine's JSON answer, parsed whatever its status (the original reads error bodies as answers)."""
        import requests

        key = os.environ.get(self.key_env)
        if key:
            return "serpapi", requests.get(self.serpapi_url, params={"q": query, "api_key": key, "num": num},
                                           timeout=self.timeout_s).json()
        return "duckduckgo", requests.get(self.duckduckgo_url, params={"q": query, "format": "json", "no_html": 1},
                                          timeout=self.timeout_s).json()

    def observation(self, query: str) -> str:
        """What the paper's ReAct loop appends after `Observation: `, exactly the original's text."""
        try:
            engine, body = self._answer(query, self.SNIPPETS)
            if engine == "serpapi":
                return " | ".join(r.get("snippet", "") for r in body.get("organic_results", [])[:self.SNIPPETS]) \
                    or NO_RESULTS
            abstract = body.get("AbstractText", "")  # read in the original's order: the same error, if any
            related = " | ".join(t.get("Text", "") for t in body.get("RelatedTopics", [])[:self.RELATED_TOPICS]
                                 if isinstance(t, dict))
            return abstract or related or NO_RESULTS
        except Exception as e:  # noqa: BLE001 - the original answers any failure as this observation
            return f"Search error: {e}"

    def search(self, query: str, k: int) -> list[Hit]:
        """The same engines' results as hits (a2rl's chat and the rollout service): SerpAPI's organic results
        (title, snippet), or DuckDuckGo's abstract (heading, text) then its related topics; a failure raises."""
        try:
            engine, body = self._answer(query, k)
            if engine == "serpapi":
                return results_of(body)[:k]
            hits = [Hit(str(body.get("Heading") or ""), str(body["AbstractText"]))] if body.get("AbstractText") \
                else []
            hits += [Hit("", str(t["Text"])) for t in body.get("RelatedTopics", [])
                     if isinstance(t, dict) and t.get("Text")]
            return hits[:k]
        except Exception as e:  # noqa: BLE001 - the agent sees a failed search, as in the paper's loop
            raise SearchError(f"{type(e).__name__}: {e}") from e



class SearchError(InfraError):
    """The search API failed; the episode shows it as an observation."""


def results_of(body: dict) -> list[Hit]:
    """The hits of a search API's JSON answer, whichever common shape it has."""
    results = body.get("organic_results") or body.get("results") or (body.get("web") or {}).get("results") or []
    hits = []
    for r in results:
        if not isinstance(r, dict):
            continue
        text = next((r[key] for key in ("snippet", "content", "description", "text") if r.get(key)), "")
        if text or r.get("title"):
            hits.append(Hit(str(r.get("title") or ""), str(text)))
    return hits


def load_documents(path: str | Path) -> list[Document]:
    """A local document collection: a JSONL file (title, and text / contents / body) or a folder of .txt files."""
    p = Path(os.path.expanduser(str(path)))
    if p.is_dir():
        return [Document(f.stem, f.read_text(errors="replace")) for f in sorted(p.rglob("*.txt"))]
    if not p.is_file():
        raise FileNotFoundError(f"search documents {p} do not exist (a JSONL file or a folder of .txt files)")
    docs = []
    for n, line in enumerate(p.read_text().splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        text = row.get("text") or row.get("contents") or row.get("body")
        if not text:
            raise ValueError(f"{p}:{n}: a document needs 'text' (or 'contents' / 'body'), got keys {sorted(row)}")
        docs.append(Document(str(row.get("title") or ""), str(text)))
    return docs
