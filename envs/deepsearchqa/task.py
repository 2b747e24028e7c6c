"""Level-3 task ``deepsearchqa``: multi-hop questions answered by searching, at most 6 actions; score = 100 x the
fraction of eval questions answered correctly.

Questions: the real ``google/deepsearchqa`` set (``data_path``: the dataset id, the default of
conf/task/deepsearchqa.yaml, or a local file; the paper's seeded 100 / 200 split) searched through one backend
(``search.backend``: ``original``, the paper's SerpAPI-else-DuckDuckGo search and the default under ``paper``; ``http``,
an HTTP search API at ``search.url``; ``local``, BM25 over ``search.documents``), or generated offline
(``data_path: null``; ``envs.deepsearchqa.generated``: a world and its BM25 index per split, 100 train / 200 eval
questions as the paper splits the real set). The eval world is salted with a secret (``eval_salt`` in the
config, else a random salt kept in CACHE_DIR/grading/deepsearchqa-eval-salt), so the generator and its seeds do not
rebuild it, and its documents are in the eval split's index only: a train session's searches never reach them. The
held-out final split (``final_size`` questions) is a third world of its own, salted the same way (real data: the
questions after the paper's 200 eval ones in its shuffled order).

- ``environment()``: the questions as an Environment (``envs.deepsearchqa.environment``): the grader plays the eval
  questions (evaluators.lockstep), the rollout service serves the train ones.
- ``train_rows()``: the expert's episodes on the train questions, one SFT row per action.
Answers are graded offline by ``answers.answer_correct`` (normalised exact / alias match).

Protocols (``protocol:`` in the config):
- ``paper`` (its variant class, envs/deepsearchqa/paper_task.py), as RD-Agent's benchmarks/deepsearchqa/eval.py grades
  (``envs.deepsearchqa.react``): one raw-text ReAct completion per question (its system text, stops, forced answer, 6
  turns, "I don't know" when nothing was answered), repetition penalty 1.0, searches shown as the original shows them
  (its own search: SerpAPI's top 3 snippets, else DuckDuckGo's instant answer; another backend: the top results' texts
  joined with `` | ``); every answer judged by the LLM judge with the original's prompt and first-line verdict, the
  substring match where the judge call fails (counted, ``judge_fallbacks``); with no judge configured every answer is
  matched that way and the score is flagged ``approximate``. Score: 100 x the share judged correct.
- ``a2rl``, a2rl's own: a chat per step (question, previous actions, last observation), the first action in the reply,
  32 tokens with the model's repetition penalty, the normalised exact / alias match (or a configured judge, asked with
  a2rl's prompt for episodes that answered).
Judged answers are screened under both (contracts/screening.py: ``null_model``, ``judge_injection``, the markers read
off the protocol's judge prompt); a flagged submission's score counts under paper and is withheld under a2rl
(``screen.count_flagged``).
"""
from __future__ import annotations

import json
import os
from functools import cached_property
from pathlib import Path

from contracts import screening
from contracts.registry import register
from contracts.task import InteractiveTask
from contracts.task_spec import TaskSpec
from envs.deepsearchqa import prompt
from envs.deepsearchqa.environment import DeepSearchQAEnvironment
from envs.deepsearchqa.search import DUCKDUCKGO_URL, SERPAPI_KEY_ENV, SERPAPI_URL
from envs.deepsearchqa.world import RELATIONS, Question

WORLD_KEYS = ("people", "organisations", "cities", "countries", "distractors")
SEARCH_DEFAULTS = {"backend": None, "url": None, "query_param": "q", "key_env": None, "key_param": "api_key",
                   "params": {}, "timeout_s": 10.0, "documents": None, "serpapi_url": SERPAPI_URL,
                   "duckduckgo_url": DUCKDUCKGO_URL}
SEARCH_BACKENDS = ("original", "http", "local")


@register("task", "deepsearchqa")
class DeepSearchQATask(InteractiveTask):
    environment_class = DeepSearchQAEnvironment
    default_search: str | None = None  # the search backend of real questions when the config names none
    instance_noun, action_noun = "questions", "actions"
    reward_text = "1 for a correct answer, else 0"

    def __init__(self, spec: TaskSpec, *, n_train: int, n_eval: int, final_size: int | None, seed: int,
                 hops: list[int], relations: list[str] | None, world: dict, top_k: int, max_steps: int,
                 eval_salt: str | None, data_path: str | None, search: dict | None, eval_workers: int = 0,
                 judge: dict | None = None, judge_model: str | None = None, screen: dict | None = None):
        """n_train / n_eval: questions per split (real data: the paper's 100 / 200 unless set otherwise); final_size:
        questions in the held-out final split (None: as many as n_eval); hops: chain lengths of generated questions,
        cycled; relations: the kinds of facts chains use (null: all of envs.deepsearchqa.world.RELATIONS); world:
        sizes of each split's world; top_k: results per search; max_steps: actions per episode; data_path: the real
        set (dataset id or local path; null: generated questions); search: its backend (``backend``: original,
        http or local; null: http with a url, local with documents, else original under protocol paper);
        eval_workers: processes stepping eval episodes during grading (0: in the grader's
        process); judge: a driver config (a sweep resolves a conf/driver name) whose LLM decides whether an answer
        is correct, in place of the exact/alias match; judge_model (protocol paper): the judge's model becomes this
        one (the paper's: gpt-5.2; null: the driver's own); screen: the screen of judged answers (null-model and
        judge-addressing ones: contracts/screening.py; count_flagged null: a flagged submission counts
        under paper, as the original counts it, and not under a2rl)."""
        super().__init__(spec)
        name = spec.name
        self.set_splits(n_train, n_eval, final_size, eval_salt)
        self.seed = int(seed)
        self.hops = [int(h) for h in hops]
        self.top_k, self.max_steps = int(top_k), int(max_steps)
        if not self.hops or any(h < 1 or h >= self.max_steps for h in self.hops):
            raise ValueError(f"task {name}: hops={hops} must be chain lengths from 1 to max_steps - 1 "
                             f"({self.max_steps - 1}): the answer takes a step too")
        unknown = sorted(set(relations or ()) - set(RELATIONS))
        if unknown:
            raise ValueError(f"task {name}: relations {unknown} are unknown; known: {sorted(RELATIONS)}")
        self.relations = list(relations) if relations else None
        if set(world or {}) != set(WORLD_KEYS):
            raise ValueError(f"task {name}: world={world} must give exactly {list(WORLD_KEYS)}")
        self.world = {k: int(v) for k, v in world.items()}
        unknown = sorted(set(search or {}) - set(SEARCH_DEFAULTS))
        if unknown:
            raise ValueError(f"task {name}: search keys {unknown} are unknown; known: {sorted(SEARCH_DEFAULTS)}")
        self.search = {**SEARCH_DEFAULTS, **(search or {})}
        self.search_backend = self._search_backend(name, data_path)
        self.data_path = data_path
        self.eval_workers = int(eval_workers)
        self.judge = judge if isinstance(judge, dict) and judge.get("provider") not in (None, "none") else None
        self.screen = screening.ScreenSettings.from_config(screen, self.protocol, name)

    def _search_backend(self, name: str, data_path: str | None) -> str | None:
        """Which backend real questions search (None for generated ones: each split searches its own world)."""
        s = self.search
        backend = s["backend"]
        if backend not in (None, *SEARCH_BACKENDS):
            raise ValueError(f"task {name}: search.backend={backend!r} is unknown; known: {list(SEARCH_BACKENDS)} "
                             "(or null: http with search.url, local with search.documents, else original under "
                             "protocol paper)")
        if not data_path:
            if backend or s["url"] or s["documents"]:
                raise ValueError(f"task {name}: a search backend (search.backend / search.url / search.documents) "
                                 "is for real questions: set data_path too (generated questions search their own "
                                 "world)")
            return None
        given = {key for key in ("url", "documents") if s[key]}
        if backend is None and len(given) < 2:
            backend = "http" if s["url"] else "local" if s["documents"] else self.default_search
        if backend is None:
            raise ValueError(f"task {name}: real questions (data_path={data_path!r}) need one search backend: "
                             "search.backend=original (the paper's: SerpAPI with $SERPAPI_KEY, else DuckDuckGo), "
                             "search.url (an HTTP search API) or search.documents (a local JSONL / folder)")
        takes = {"http": {"url"}, "local": {"documents"}, "original": set()}[backend]
        if given != takes:
            raise ValueError(f"task {name}: search.backend={backend} takes " + {
                "http": "search.url (and not search.documents)", "local": "search.documents (and not search.url)",
                "original": "search.serpapi_url and search.duckduckgo_url (not search.url or search.documents)"
            }[backend] + f"; got url={s['url']!r}, documents={s['documents']!r}")
        return backend

    def search_keys(self) -> dict[str, str]:
        """The environment variables the search of real questions reads on the grading side (never in a config or
        a workspace), each with what it does and what happens without it (the dry run names them)."""
        if self.search_backend == "original":
            return {self.search["key_env"] or SERPAPI_KEY_ENV: "the SerpAPI key the paper's search uses; not set: "
                    "DuckDuckGo's instant-answer API answers instead, as the original falls back"}
        if self.search_backend == "http" and self.search["key_env"]:
            return {self.search["key_env"]: f"the key of the search API at {self.search['url']}; not set: every "
                    "search fails"}
        return {}

    def paper_data_path(self) -> str:
        """`data_path: paper`: the paper's set, by its hub id (its files in the Hugging Face cache)."""
        from envs.deepsearchqa.real_data import DATASET_ID

        return DATASET_ID

    def judge_driver(self) -> dict | None:
        return self.judge

    @cached_property
    def judge_markers(self) -> screening.Markers:
        """What an answer aimed at this protocol's judge holds, read off its prompt (contracts/screening.py):
        a2rl's (the first word)."""
        from envs.deepsearchqa import answers

        return screening.derive_markers(screening.JudgePrompt(
            "a2rl's DeepSearchQA judge", (answers.JUDGE_SYSTEM, answers.JUDGE_USER),
            first_words=("CORRECT", "INCORRECT")))

    def screened(self, result: dict, answers: list[str | None]) -> dict:
        """The judged result after the screen (answers: each item's, None where it gave none)."""
        items = result["items"]
        questions = [i.get("task") for i in items]
        found = screening.screen([i["id"] for i in items], answers, [bool(i["won"]) for i in items],
                                 self.judge_markers, self.screen, None if None in questions else questions)
        return screening.apply(result, items, found)

    def judge_episodes(self, result: dict, rows: list[dict], judge) -> dict:
        """Each episode that ended with an answer, re-graded by the judge (asked once per episode, concurrently);
        episodes that never answered stay lost without asking."""
        from concurrent.futures import ThreadPoolExecutor

        from envs.deepsearchqa.answers import JUDGE_SYSTEM, judge_prompt, judge_says_correct

        env = self.environment()
        splits = {row.get("split", "eval") for row in rows}  # the feedback split's rows, or the final split's
        by_name = {(split, inst.name): inst for split in splits for inst in env.instances(split)}

        def answer(item: dict) -> str | None:
            last = prompt.split_action(item["commands"][-1]) if item["commands"] else None
            return last[1] if last is not None and last[0] == "answer" and last[1] else None

        def regrade(pair):
            row, item = pair
            given = answer(item)
            if given is None:
                return item
            q = env.question(by_name[row.get("split", "eval"), row["instance"]])
            won = judge_says_correct(judge.ask(JUDGE_SYSTEM, judge_prompt(q.question, q.answer, q.aliases, given)))
            return {**item, "score": float(won), "won": won, "exact_match": item["won"]}

        with ThreadPoolExecutor(max_workers=max(1, getattr(judge, "concurrency", 1))) as pool:
            items = list(pool.map(regrade, zip(rows, result["items"])))
        n = max(1, len(items))
        metrics = {**result.get("metrics", {}), "success_rate": 100.0 * sum(i["won"] for i in items) / n,
                   "exact_match": 100.0 * sum(i.get("exact_match", i["won"]) for i in items) / n}
        return self.screened({**result, "score": self.percent(sum(i["score"] for i in items), n), "items": items,
                              "metrics": metrics}, [answer(i) for i in items])

    # -- questions ------------------------------------------------------------------------------------------------
    def _generated(self, split: str, exclude=frozenset()):
        from envs.deepsearchqa.generated import generated_split

        # the hidden splits' worlds are salted; "final" is a world of its own beside the eval one
        seed_text = f"deepsearchqa-train:{self.seed}" if split == "train" else \
            f"deepsearchqa-{split}:{self.seed}:{self.salt()}"
        n = {"train": self.n_train, "eval": self.n_eval, "final": self.n_final}[split]
        return generated_split(seed_text, n, self.hops, self.world, self.top_k, self.max_steps, self.relations,
                               exclude)

    def _backend(self):
        from envs.deepsearchqa.search import HttpSearch, LocalIndex, OriginalSearch, load_documents

        s = self.search
        if self.search_backend == "original":
            return OriginalSearch(s["serpapi_url"], s["duckduckgo_url"], s["key_env"] or SERPAPI_KEY_ENV,
                                  s["timeout_s"])
        if self.search_backend == "http":
            return HttpSearch(s["url"], s["query_param"], s["key_env"], s["key_param"], s["params"], s["timeout_s"])
        return LocalIndex(load_documents(s["documents"]))

    @cached_property
    def _real(self) -> dict[str, list[Question]]:
        from envs.deepsearchqa.real_data import real_splits

        return real_splits(self.data_path, self.n_train, self.n_eval, self.n_final)

    @cached_property
    def _train(self) -> tuple[list[Question], object]:
        if self.data_path:
            return self._real["train"], self._backend()
        return self._generated("train")

    @cached_property
    def _eval(self) -> tuple[list[Question], object]:
        if self.data_path:  # the real set's one backend serves both splits, as the web does
            return self._real["eval"], self._train[1]
        return self._generated("eval", exclude={q.question for q in self._train[0]})

    @cached_property
    def _final(self) -> tuple[list[Question], object]:
        if not self.n_final:  # no final split: no world to build for it
            return [], None
        if self.data_path:
            return self._real["final"], self._train[1]
        return self._generated("final", exclude={q.question for q in self._train[0] + self._eval[0]})

    @cached_property
    def _environment(self) -> DeepSearchQAEnvironment:
        splits = {"train": self._train, "eval": self._eval, "final": self._final}
        return DeepSearchQAEnvironment({split: qs for split, (qs, _) in splits.items()},
                                       {split: backend for split, (_, backend) in splits.items()}, self.top_k,
                                       self.max_steps)

    def environment(self) -> DeepSearchQAEnvironment:
        return self._environment

    # -- rows -----------------------------------------------------------------------------------------------------
    def make_train_rows(self) -> list[dict]:
        from envs.deepsearchqa.expert import demonstrations

        questions, backend = self._train
        demos = [d for q in questions for d in demonstrations(q, backend, self.top_k, self.max_steps)]
        return self.expert_rows(demos)


    def _grading_instructions(self, final: str) -> str:
        return f"""## How the grader plays and scores

The hidden eval split has {self.n_eval} other questions{final}. For each, the grader starts an episode and, every
step, {self.grader_asks("this chat")}:

    system:    {prompt.SYSTEM_PROMPT}
    user:      Question: <the question>
               Previous actions: <a1>; <a2>; ... (or "none")
               Observation: <the last search's results, or "{'No searches yet.'}">
               Reply with the next action.

The first `search[...]` or `answer[...]` in the reply is the action (a "Thought: ..." before it, an "Action:" prefix
and a missing closing bracket are forgiven). An answer is correct when it equals the gold answer or an accepted
alias after normalisation (lowercase; punctuation, the articles a/an/the and extra spaces ignored). All eval
questions are played in lockstep, in batches. The score is **100 x the fraction of eval questions answered
correctly**.
"""

    def missing_data(self) -> list[str]:
        """The real set by its hub id, not in the Hugging Face cache yet (`prepare` fetches it; a run would at
        first use)."""
        local = str(self.data_path or "")
        if not local or local.startswith((".", "/", "~")) or local.count("/") != 1:
            return []
        from huggingface_hub import constants

        if (Path(constants.HF_HUB_CACHE) / f"datasets--{local.replace('/', '--')}").is_dir():
            return []
        return [f"task {self.name}: the DeepSearchQA set {local} is not in the Hugging Face cache: it downloads at "
                "first use (needs the network)"]

    def fetch_data(self, sources: dict) -> None:
        """The real set, loaded by the code the task reads it with (that fills the Hugging Face cache)."""
        if self.missing_data():
            from envs.deepsearchqa.real_data import load_rows

            load_rows(self.data_path)

    def original_source(self):
        """The real set as a `datasets.Dataset`, loaded as the original loads it: a dataset id with
        `load_dataset(id, split="eval")`; a local DSQA-full.csv (or a folder holding it) with the csv builder the
        hub reads that file with (pandas: an empty cell, "NA" or "None" is null there, as in a2rl's own rows:
        real_data.load_rows); a save_to_disk folder as it is; a JSONL or Parquet file as a2rl reads it."""
        import datasets

        from envs.deepsearchqa.real_data import CSV_NAME, SOURCE_SPLIT, load_rows

        path = Path(os.path.expanduser(str(self.data_path)))
        csv = path / CSV_NAME if path.is_dir() else path
        if csv.is_file() and csv.suffix == ".csv":
            return datasets.load_dataset("csv", data_files={SOURCE_SPLIT: str(csv)}, split=SOURCE_SPLIT)
        if path.is_dir():
            return datasets.load_from_disk(str(path))
        if path.is_file():
            return datasets.Dataset.from_list(load_rows(path), split=SOURCE_SPLIT)
        return datasets.load_dataset(str(self.data_path), split=SOURCE_SPLIT)

    # -- the agent's view -----------------------------------------------------------------------------------------
    def _search_words(self) -> str:
        return {"original": "a web search (SerpAPI's Google results where the grading side has a SerpAPI key, "
                            "else DuckDuckGo's instant-answer API: an abstract or related topics, often nothing)",
                "http": "the configured search API"}.get(self.search_backend, "a BM25 search over the documents")

    def instructions(self) -> str:
        rows = self.train_split
        example = next((r for r in rows if r["step"] == 1), rows[0])
        n_questions = len(self._train[0])
        source = (f"the real DeepSearchQA set (`{self.data_path}`)" if self.data_path else
                  "a generated world of people, organisations, cities and countries (made-up names: nothing to "
                  "recall, everything to search); the eval questions are about another world of the same kind")
        default = "DeepSearchQA: multi-hop questions answered by searching a document collection."
        final = f" (a held-out final split has {self.n_final} more)" if self.n_final else ""
        return f"""{self.description.strip() or default}

You post-train a model that answers questions by searching. Questions come from {source}. Each step the model
sees the question, its previous actions and the last observation, and replies with one action:

- `search[query]`: the top {self.top_k} results of {self._search_words()} become the next observation;
- `answer[text]`: the final answer; it ends the episode.

At most {self.max_steps} actions per question; a question not answered by then counts as wrong. A reply with
neither action is answered "Invalid action ..." and costs a step.

## Data

`data/train.jsonl` holds {len(rows)} steps of an expert answering the {n_questions} train questions, one JSON object
a line:

- `messages`: the exact chat the grader sends at that step (system + user)
- `prompt`: the user message alone; `completion` (= `answer`): the expert's action
- `game`, `task`, `hops`, `step`: which train question (its name and text), the searches its chain takes, and the step

Example:

```json
{json.dumps(example, ensure_ascii=False)}
```

The expert knows each question's chain of facts and searches them one by one (`<name> <relation words>`, the name
read off the previous results), then answers.

{self._grading_instructions(final)}
{self.rollout_section()}"""
