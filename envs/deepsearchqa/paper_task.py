"""DeepSearchQA graded as the paper grades it (`protocol: paper`): RD-Agent's benchmarks/deepsearchqa/eval.py
(envs.deepsearchqa.react): one raw-text ReAct completion per question, searches shown as the original shows them
(its own search by default: SerpAPI's top 3 snippets, else DuckDuckGo's instant answer), every answer judged by the
LLM judge with the original's prompt and first-line verdict (the judge's model the config's judge_model), the
substring match where the judge call fails. The a2rl variant is task.py's class.
"""
from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path

from contracts import screening
from contracts.task import task_variant
from contracts.task_spec import TaskSpec
from envs.deepsearchqa import react
from envs.deepsearchqa.task import DeepSearchQATask


@task_variant("deepsearchqa", "paper")
class DeepSearchQAPaper(DeepSearchQATask):
    variant_decoding = react.TURN  # the release's ReAct turn (its loop, play(), decodes its forced answers too)
    default_search = "original"  # the release's own search
    original_max_model_len = 4096  # its eval.py's LLM(max_model_len=4096)
    original_benchmark = "deepsearchqa"
    original_exposed = ("eval.py",)
    paper_eval = (200, "questions")  # its data.py's DEFAULT_EVAL_SIZE

    def __init__(self, spec: TaskSpec, **knobs):
        super().__init__(spec, **knobs)
        if self.judge and knobs.get("judge_model"):  # the release's judge model (a2rl's judge keeps its config)
            self.judge = {**self.judge, "model": knobs["judge_model"]}

    def approximations(self) -> list[str]:
        """Where this grading is not the original's (each score is flagged approximate with these lines)."""
        out = []
        original = "SerpAPI ($SERPAPI_KEY), else DuckDuckGo's instant-answer API"
        if not self.data_path:
            out.append("questions: a2rl's generated world stands in for google/deepsearchqa (data_path: null), "
                       f"searched by BM25 over its own documents where the original searches {original}")
        elif self.search_backend != "original":
            what = (f"the search API at {self.search['url']}" if self.search_backend == "http" else
                    f"BM25 over the documents {self.search['documents']}")
            out.append(f"search: {what} where the original searches {original}")
        if not self.judge:
            out.append("judge: none configured: every answer is matched by the original's substring fallback where "
                       "the original asks an LLM (gpt-5.2)")
        return out + self.paper_size_notes()

    @cached_property
    def judge_markers(self) -> screening.Markers:
        """The original judge's markers (its verdict: the first line's word)."""
        return screening.derive_markers(screening.JudgePrompt(
            "RD-Agent's DeepSearchQA judge", (react.JUDGE_SYSTEM, react.judge_prompt("{predicted}", "{gold}",
                                                                                    "{answer_type}")),
            first_words=("correct", "incorrect")))

    def play(self, rows: list[dict], generate, judge=None) -> dict | None:
        """The paper's ReAct loop on the rows' questions, every answer then judged as the original judges it."""
        from concurrent.futures import ThreadPoolExecutor

        env = self.environment()
        splits = {row.get("split", "eval") for row in rows}
        by_name = {(split, inst.name): inst for split in splits for inst in env.instances(split)}
        instances = [by_name[row.get("split", "eval"), row["instance"]] for row in rows]
        questions = [env.question(inst) for inst in instances]
        episodes = [react.ReactEpisode(react.first_prompt(q.question, q.answer_type), self.max_steps)
                    for q in questions]
        react.play(episodes, generate, [self._paper_search(env.backend(inst.split)) for inst in instances])

        def judged(pair):
            q, ep = pair
            return self._paper_judge(judge, ep.answer, q.answer, q.answer_type)

        with ThreadPoolExecutor(max_workers=max(1, getattr(judge, "concurrency", 1))) as pool:
            verdicts = list(pool.map(judged, zip(questions, episodes)))
        items = [{"id": row["id"], **inst.info, "score": float(correct), "won": correct, "steps": len(ep.actions),
                  "task": q.question, "commands": ep.actions, "completion": ep.answer, "judged_by": how}
                 for row, inst, q, ep, (correct, how) in zip(rows, instances, questions, episodes, verdicts)]
        n = max(1, len(items))
        fallbacks = sum(i["judged_by"] != "llm" for i in items)
        metrics = {"accuracy": self.percent(sum(i["won"] for i in items), n), "judge_fallbacks": fallbacks,
                   "answered": sum(ep.answer != react.NO_ANSWER for ep in episodes),
                   "mean_steps": sum(i["steps"] for i in items) / n}
        return self.screened({"score": metrics["accuracy"], "n": len(items), "items": items, "metrics": metrics,
                              "flags": [] if judge is not None else ["approximate"]},
                             [None if ep.answer == react.NO_ANSWER else ep.answer for ep in episodes])

    def _paper_search(self, backend):
        from envs.deepsearchqa.search import SearchError

        if hasattr(backend, "observation"):  # the original's own search: its text, exactly
            return backend.observation

        def search(query: str) -> str:
            try:
                return react.search_text([" ".join(hit.text.split()) for hit in backend.search(query, self.top_k)])
            except SearchError as e:
                return f"Search error: {e}"

        return search

    @staticmethod
    def _paper_judge(judge, predicted: str, gold: str, answer_type: str) -> tuple[bool, str]:
        """(correct, how): the LLM judge's first line; the substring match where the call fails or its reply is
        empty (the original catches any error there), or when no judge is configured."""
        if judge is None:
            return react.substring_match(predicted, gold, answer_type), "substring: no judge"
        try:
            reply = judge.ask(react.JUDGE_SYSTEM, react.judge_prompt(predicted, gold, answer_type),
                              temperature=react.JUDGE_TEMPERATURE, max_tokens=None)
            return react.judge_verdict(reply), "llm"
        except Exception as e:  # noqa: BLE001 - the original's fallback, recorded per item
            return react.substring_match(predicted, gold, answer_type), f"substring: {type(e).__name__}: {e}"[:200]

    def original_data(self, target: Path) -> None:
        """The original's deepsearchqa/data.py: `deepsearchqa/`, the train questions saved with `save_to_disk`, and
        `split_meta.json` (indent 2). Real data: the set loaded as the original loads it (original_source), shuffled
        with seed 42, its first n_train saved (the paper's 100; n_eval, 200, counts the eval split), every column
        kept. Generated questions (no data_path) have no original: the train questions are saved in the real set's
        columns (problem, problem_category "", answer, answer_type), unshuffled, and split_meta.json names the
        generator as the dataset, with no shuffle seed."""
        import datasets

        from envs.deepsearchqa.real_data import DATASET_ID, SOURCE_SPLIT, SPLIT_SEED

        target.mkdir(parents=True, exist_ok=True)
        if self.data_path:
            source = self.original_source()
            shuffled = source.shuffle(seed=SPLIT_SEED)
            n_train = min(self.n_train, len(shuffled))
            train = shuffled.select(range(n_train))
            n_eval = min(self.n_train + self.n_eval, len(shuffled)) - n_train
            meta = {"dataset": DATASET_ID, "source_split": SOURCE_SPLIT, "shuffle_seed": SPLIT_SEED}
            total = len(source)
        else:
            questions = self._train[0]
            train = datasets.Dataset.from_list(
                [{"problem": q.question, "problem_category": "", "answer": q.answer, "answer_type": q.answer_type}
                 for q in questions], split="train")
            n_eval = self.n_eval
            meta = {"dataset": f"generated (a2rl envs/deepsearchqa/generated.py, seed {self.seed})",
                    "source_split": "train", "shuffle_seed": None}
            total = len(train) + n_eval
        train.save_to_disk(str(target / "deepsearchqa"))
        meta.update({"train_size": len(train), "eval_size": n_eval,
                     "unused_size": max(0, total - len(train) - n_eval), "total_size": total})
        (target / "split_meta.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")

    def _paper_observation(self) -> str:
        if self.search_backend == "original":
            return ('<with a SerpAPI key: the first 3 results\' snippets joined with " | "; without one: '
                    'DuckDuckGo\'s abstract, else its first 2 related topics joined with " | "; "No results found." '
                    'when that is empty, "Search error: ..." when the search fails>')
        return f'<the top {self.top_k} results\' text joined with " | ">'

    def _grading_instructions(self, final: str) -> str:
        judge = (f"an LLM judge (`{self.judge.get('model')}`)" if self.judge else
                 "the original's fallback (no judge is configured here, so the score is marked approximate): "
                 "correct when the gold answer contains yours or yours contains it (every comma-separated gold "
                 "item, for a Set Answer)")
        return f"""## How the grader plays and scores (the paper's protocol: RD-Agent's DeepSearchQA evaluator)

The hidden eval split has {self.n_eval} other questions{final}. For each, the grader feeds the submitted model ONE
raw text prompt, no chat template, and lets it continue (greedy, repetition penalty 1.0):

```
{react.REACT_SYSTEM_PROMPT}

Question: <the question>
Answer type: <Single Answer or Set Answer>

Thought:
```

Each turn the model's continuation (at most {react.TURN.max_new_tokens} tokens, cut before `\\nAction:`,
`\\nThought:` or `\\nObservation:`) is stripped and appended after a space; its first `Action: search[...]` or
`Action: answer[...]` is the action, so write the action on the thought's line (`Thought: ... Action:
search[query]`): an action on a line of its own is cut off by the stop. A search appends `\\nObservation:
{self._paper_observation()}\\nThought:`; an answer ends the episode. A turn with no action gets
`\\nAction: answer[` appended and the answer decoded up to `]` ({react.FORCED_ANSWER.max_new_tokens} tokens). At
most {self.max_steps} turns; then the last `Action: answer[...]` written, else "I don't know". Every answer is then
judged by {judge}. The score is **100 x the fraction judged correct**.

The train data and the rollout service below show the steps as a2rl's chat (question, previous actions, last
observation); the grader of this protocol uses the raw prompt above: `envs/deepsearchqa/react.py` in a2rl is the
loop itself.
"""
