"""Level 2: AlpacaEval. The model answers each eval instruction; a judge compares its output with the reference
output (evaluators.judging); the score is the length-controlled win rate, as the paper reports.

Data, by dataset id (fetched once into the Hugging Face cache) or local path:
- eval: `tatsu-lab/alpaca_eval`'s `alpaca_eval.json` (805 rows: instruction, output, generator, dataset); `output`
  is the reference. A local path is that file or a folder holding it.
- train (the agent's): the first `n_train` rows of `tatsu-lab/alpaca` (instruction, input, output), as the paper;
  a local path is anything `datasets.load_dataset` reads (the hub's folder layout with data/*.parquet, a .json/.jsonl
  or .parquet file).
`final_size` > 0 draws a held-out final split out of the 805 (contracts.task.split_off_final), which the feedback
split then lacks; 0, the default, judges all of them as the paper does.
The judge is a driver config (task.judge: a conf/driver name or a whole config); the grader opens it a metered key
on the driver proxy for each evaluation. `alpacaeval_offline` (instruct_offline_task.py) is the twin with no key.

Protocols (`protocol:` in the config):
- `paper` (its variant class, alpacaeval_paper.py), as RD-Agent's benchmarks/alpacaeval/eval.py grades: the reference
  outputs of AlpacaEval 2.0 (`alpaca_eval_gpt4_baseline.json`, gpt4_1106_preview's); greedy decoding of 512 new tokens
  with repetition penalty 1.0, the reply stripped; the judge is the alpaca_eval package's own annotator (its ranking
  prompt with a forced tool call, its parser, its seeded order swap: evaluators/judging/alpaca_eval_annotator.py),
  preference 1 or 2 (1.5 only for an output equal to the reference, which the package does not send); the score is the
  package's length-controlled win rate with its regularisation (`length_controlled_v1`, df_gamed.csv from the same hub
  dataset, or beside a local eval file). An unreadable judge reply is dropped from the win rate and kept in the LC
  table, as the package does, and counted (`unparsed`).
- `a2rl`, a2rl's own: AlpacaEval 1.0's reference outputs (`alpaca_eval.json`, text-davinci-003's), the grader's
  max_new_tokens (1024) with the model's own repetition penalty, a short judge prompt of a2rl's (pairwise.py) where an
  unreadable reply is a draw, and the LC GLM without the gamed-baseline regularisation (winrate.py), which needs no
  hub file.
Both screen the judged answers (contracts/screening.py: `null_model`, `judge_injection`, the markers read off the
protocol's judge prompt); a flagged submission's score counts under paper, as the original counts it, and is withheld
under a2rl (`screen.count_flagged`).
"""
from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path

from contracts import screening
from contracts.registry import register
from contracts.specs import ConfigError
from contracts.task import Task, split_off_final, write_original_jsonl
from contracts.task_spec import TaskSpec
from evaluators.judging import alpaca_eval_annotator
from evaluators.judging.pairwise import JUDGE_PROMPT, judge_all
from evaluators.judging.winrate import length_controlled_win_rate, win_rate

METRICS = ("lc_win_rate", "win_rate")


class PairwiseTask(Task):
    """A task whose eval rows carry `instruction` and `reference`, judged pairwise against the reference."""

    item = "instruction"

    def __init__(self, spec: TaskSpec, judge_seed: int, metric: str, screen: dict | None = None):
        """screen: the screen of null-model and judge-addressing answers (contracts/screening.py)."""
        super().__init__(spec)
        if metric not in METRICS:
            raise ConfigError(f"task {spec.name}: metric={metric!r}; use one of {METRICS}")
        self.judge_seed, self.metric = int(judge_seed), metric
        self.screen = screening.ScreenSettings.from_config(screen, self.protocol, spec.name)

    def judge_prompt(self) -> screening.JudgePrompt:
        """What this task's judge is asked with (the screen's markers are read off it)."""
        return JUDGE_PROMPT

    @cached_property
    def judge_markers(self) -> screening.Markers:
        return screening.derive_markers(self.judge_prompt())

    def screened(self, summary: dict, items: list[dict], rows: list[dict]) -> dict:
        """The summary after the screen: flagged null_model / judge_injection, with its evidence in
        metrics["screen"], the score withheld when flagged submissions do not count (screen.count_flagged)."""
        found = screening.screen([i["id"] for i in items], [i["completion"] for i in items],
                                 [i["preference"] == 2.0 for i in items], self.judge_markers, self.screen,
                                 [r["instruction"] for r in rows])
        return screening.apply(summary, items, found)

    def offline_judge(self):
        """The judge when the task names no driver (None: it needs the grader's)."""
        return None

    def judgement_cache(self):
        from evaluators.score_cache import ScoreCache

        return ScoreCache(self.cache_dir / "grading" / self.name / "judgements")  # grading side only

    def score_all(self, rows: list[dict], completions: list[str], judge=None) -> list[dict]:
        judge = judge or self.offline_judge()
        if judge is None:
            raise RuntimeError(f"task {self.name}: its judge ({(self.judge_driver() or {}).get('name')}) was not "
                               "opened; the grading service opens it on the driver proxy")
        return judge_all(judge, rows, completions, self.judge_seed, self.judgement_cache())

    def summarize(self, items: list[dict], rows: list[dict]) -> dict:
        prefs = [item["preference"] for item in items]
        difficulty = [row["instruction_difficulty"] for row in rows] \
            if rows and all("instruction_difficulty" in row for row in rows) else None
        lc = length_controlled_win_rate(prefs, [i["output_len"] for i in items], [i["reference_len"] for i in items],
                                        difficulty)
        metrics = {"win_rate": win_rate(prefs), "lc_win_rate": lc,
                   "draws": sum(p == 1.5 for p in prefs), "judgements_cached": sum(i["cached"] for i in items)}
        score = metrics[self.metric] if metrics[self.metric] is not None else metrics["win_rate"]
        return self.screened({"score": score, "metrics": metrics}, items, rows)

    def score(self, completion: str, row: dict) -> float:
        raise NotImplementedError("a pairwise task is scored in score_all, by its judge")

    def judging_instructions(self) -> str:
        judge = self.judge_driver()
        who = (f"an LLM judge (`{judge.get('model')}`)" if judge else
               "a rubric judge that prefers the output closer to a hidden gold answer")
        headline = ("the **length-controlled win rate** (AlpacaEval 2.0's GLM: what the win rate would be if your "
                    "outputs were as long as the reference's)" if self.metric == "lc_win_rate" else
                    "the **win rate** (wins count 1, draws 0.5)")
        return self.grader_section(
            f"{who} then compares your output with a reference output for the same instruction, the two shown in a "
            f"seeded random order. The score, 0-100, is {headline}, over the hidden eval instructions.")


@register("task", "alpacaeval")
class AlpacaEvalTask(PairwiseTask):
    eval_file_default = "alpaca_eval.json"  # the reference outputs: AlpacaEval 1.0's, text-davinci-003's

    def __init__(self, spec: TaskSpec, *, judge: dict | None, eval_data: str = "tatsu-lab/alpaca_eval",
                 train_data: str = "tatsu-lab/alpaca", n_train: int = 2000, n_eval: int | None = None,
                 final_size: int = 0, judge_seed: int = 0, metric: str = "lc_win_rate", eval_file: str | None = None,
                 annotators_config: str = alpaca_eval_annotator.PACKAGE_ANNOTATOR, judge_model: str | None = None,
                 screen: dict | None = None):
        """judge: a driver config (conf/driver/<name>.yaml's contents; a sweep resolves a name). n_eval: the first
        n feedback rows only (None: all), for a cheaper run that is not the paper's number. final_size: eval rows
        held out as the final split (0: none). eval_file: the reference outputs' file in eval_data (None: the
        variant's, eval_file_default). annotators_config (protocol paper): alpaca_eval's annotator, a config name of the
        package or a folder (RD-Agent's annotators_gpt52_fn is the package's alpaca_eval_gpt4_turbo_fn with model
        gpt-5.2); its model is the judge driver's, or judge_model (protocol paper: the paper's is gpt-5.2).
        screen: the screen of null-model and judge-addressing answers (its thresholds; count_flagged null: a flagged
        submission counts under paper, as the original counts it, and not under a2rl)."""
        super().__init__(spec, judge_seed, metric, screen)
        if not isinstance(judge, dict) or not judge.get("provider") or judge.get("provider") == "none":
            raise ConfigError(f"task {spec.name}: an LLM judge is required (task.judge=NAME of a conf/driver file, "
                              "e.g. gpt or local-vllm); without a key, use task=alpacaeval_offline")
        self.judge = judge
        self.eval_data, self.train_data = eval_data, train_data
        self.eval_file = eval_file or self.eval_file_default
        self.n_train, self.n_eval = int(n_train), (None if n_eval is None else int(n_eval))
        self.final_size = int(final_size)
        self.annotators_config = annotators_config

    def judge_driver(self) -> dict | None:
        return self.judge

    def _local_eval_folder(self) -> Path | None:
        local = Path(self.eval_data).expanduser()
        return (local if local.is_dir() else local.parent) if local.exists() else None

    def hidden_paths(self) -> list[Path]:
        """The eval set's local copy, or its entry in the Hugging Face cache (it holds the reference outputs)."""
        local = Path(self.eval_data).expanduser()
        if local.exists():
            return [local.resolve()]
        from huggingface_hub import constants

        return [Path(constants.HF_HUB_CACHE) / f"datasets--{self.eval_data.replace('/', '--')}"]

    def data_files(self) -> list[Path]:
        """The eval set's copy and the train set's (a local path, or its entry in the Hugging Face cache)."""
        from huggingface_hub import constants

        local = Path(self.train_data).expanduser()
        train = local.resolve() if local.exists() else \
            Path(constants.HF_HUB_CACHE) / f"datasets--{self.train_data.replace('/', '--')}"
        return [*self.hidden_paths(), train]

    def missing_data(self) -> list[str]:
        out = []
        for what, source, probe in (("eval set", self.eval_data, self.eval_file),
                                    ("train set", self.train_data, "README.md")):
            if not hub_or_local_present(source, probe):
                out.append(f"{self.name}: {what} {source!r} is neither a local path nor in the Hugging Face cache "
                           "(downloaded at first use: needs the network)")
        return out

    def fetch_data(self, sources: dict) -> None:
        """What missing_data() names, by the loading code a grader runs: the eval and train sets."""
        self.train_split, self.hidden_splits  # noqa: B018 - loading is fetching

    def make_train_rows(self) -> list[dict]:
        rows = []
        for i, item in enumerate(load_alpaca(self.train_data, self.n_train)):
            prompt = item["instruction"] + (f"\n\n{item['input']}" if item.get("input") else "")
            rows.append({"id": f"{self.name}-train-{i}", "prompt": prompt, "completion": item["output"],
                         "answer": item["output"]})
        return rows

    def original_data(self, target: Path) -> None:
        """The original's alpacaeval/data.py: train.jsonl, the first n_train rows of train_data (`tatsu-lab/alpaca`;
        n_train plays its ALPACAEVAL_TRAIN_SAMPLES, 2000 in both) each as its _convert_row makes it, one
        `json.dumps(row, ensure_ascii=False)` a line. The same folder under both protocols."""
        write_original_jsonl(target / "train.jsonl", (original_row(item)
                                                      for item in load_alpaca(self.train_data, self.n_train)))

    def _row(self, split: str, index: int, item: dict) -> dict:
        row = {"id": f"{self.name}-{split}-{index}", "prompt": item["instruction"], "instruction": item["instruction"],
               "reference": item["output"], "answer": item["output"], "position": item["position"]}
        if "instruction_difficulty" in item:
            row["instruction_difficulty"] = float(item["instruction_difficulty"])
        return row

    def make_hidden_rows(self) -> tuple[list[dict], list[dict]]:
        """(feedback split, final split) of the eval set."""
        items = [{**item, "position": i} for i, item in enumerate(load_alpaca_eval(self.eval_data, self.eval_file))]
        rest, final = split_off_final(items, self.final_size, self.name)
        return ([self._row("eval", i, item) for i, item in enumerate(rest[:self.n_eval])],
                [self._row("final", i, item) for i, item in enumerate(final)])

    def instructions(self) -> str:
        example = self.train_split[0]
        final = f"; {self.final_size} more are a held-out final split" if self.final_size else ""
        return f"""{self.description.strip() or "AlpacaEval: follow open-ended instructions helpfully."}

## Data

`data/train.jsonl` holds {len(self.train_split)} instruction-following examples (the first rows of Stanford Alpaca), one
JSON object a line: `id`, `prompt` (the instruction, with its input when it has one), `completion` (Alpaca's
output). Example:

```json
{json.dumps(example, ensure_ascii=False)}
```

The hidden eval set has {self.n_eval or 805 - self.final_size} different instructions (AlpacaEval's){final}.

{self.judging_instructions()}"""


def original_row(item: dict) -> dict:
    """An Alpaca row as the original's alpacaeval/data.py `_convert_row` writes it: these keys, in this order; the
    question is the instruction, with its input after a blank line when it has one."""
    instruction, user_input, output = item.get("instruction", ""), item.get("input", ""), item.get("output", "")
    return {"instruction": instruction, "input": user_input, "output": output,
            "question": instruction if not user_input else f"{instruction}\n\n{user_input}", "answer": output}


def hub_or_local_present(source: str, probe: str) -> bool:
    """A local path, or a dataset repo whose `probe` file is in the local Hugging Face cache."""
    if Path(source).expanduser().exists():
        return True
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(source, probe, repo_type="dataset"), str)
    except Exception:  # not a repo id at all
        return False


def load_alpaca_eval(source: str, filename: str = "alpaca_eval.json") -> list[dict]:
    """A reference-outputs file of tatsu-lab/alpaca_eval (alpaca_eval.json, alpaca_eval_gpt4_baseline.json): a
    local file or a folder holding it, else the dataset id on the hub."""
    path = Path(source).expanduser()
    if path.is_dir():
        path = path / filename
    if not path.exists():
        try:
            from huggingface_hub import hf_hub_download

            path = Path(hf_hub_download(repo_id=source, filename=filename, repo_type="dataset"))
        except Exception as e:
            raise ConfigError(f"alpacaeval: cannot load the eval set {source!r} ({type(e).__name__}: {e}); point "
                              f"task.eval_data at a local {filename}, or use task=alpacaeval_offline") from None
    rows = json.loads(path.read_text())
    bad = [i for i, r in enumerate(rows) if not {"instruction", "output"} <= set(r)]
    if bad:
        raise ConfigError(f"alpacaeval: {path} rows {bad[:5]} lack instruction/output")
    return rows


def load_alpaca(source: str, n: int) -> list[dict]:
    """The first n rows of tatsu-lab/alpaca: a dataset id, the hub's folder layout, or a .json/.jsonl/.parquet file."""
    import datasets

    path = Path(source).expanduser()
    try:
        if path.is_file():
            kind = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}.get(path.suffix)
            if kind is None:
                raise ConfigError(f"alpacaeval: {path}: expected .json, .jsonl or .parquet")
            data = datasets.load_dataset(kind, data_files=str(path), split="train")
        else:
            data = datasets.load_dataset(str(path) if path.exists() else source, split="train")
    except ConfigError:
        raise
    except Exception as e:
        raise ConfigError(f"alpacaeval: cannot load the train set {source!r} ({type(e).__name__}: {e}); point "
                          "task.train_data at a local copy of tatsu-lab/alpaca") from None
    return [dict(data[i]) for i in range(min(n, len(data)))]
