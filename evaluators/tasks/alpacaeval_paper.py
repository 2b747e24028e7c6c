"""AlpacaEval graded as the paper grades it (`protocol: paper`): RD-Agent's benchmarks/alpacaeval/eval.py: the
reference outputs of AlpacaEval 2.0 (`alpaca_eval_gpt4_baseline.json`, gpt4_1106_preview's); greedy decoding of 512
new tokens with repetition penalty 1.0, the reply stripped; the judge is the alpaca_eval package's own annotator
(evaluators/judging/alpaca_eval_annotator.py, its model the config's judge_model); the score is the package's
length-controlled win rate with its regularisation. The a2rl variant is alpacaeval_task.py's class.
"""
from __future__ import annotations

from pathlib import Path

from contracts import screening
from contracts.decoding import Decoding
from contracts.errors import ConfigError
from contracts.task import task_variant
from contracts.task_spec import TaskSpec
from evaluators.judging import alpaca_eval_annotator
from evaluators.tasks.alpacaeval_task import AlpacaEvalTask, hub_or_local_present


@task_variant("alpacaeval", "paper")
class AlpacaEvalPaper(AlpacaEvalTask):
    eval_file_default = "alpaca_eval_gpt4_baseline.json"  # AlpacaEval 2.0: gpt4_1106_preview's outputs
    variant_decoding = Decoding(max_new_tokens=512, repetition_penalty=1.0)  # RD-Agent's eval_config max_tokens
    original_max_model_len = 4096  # its eval.py's LLM(max_model_len=4096)
    original_benchmark = "alpacaeval"
    original_exposed = ("eval.py",)

    def __init__(self, spec: TaskSpec, **knobs):
        super().__init__(spec, **knobs)
        if knobs.get("judge_model"):  # the release's judge model (a2rl's judge keeps its config)
            self.judge = {**self.judge, "model": knobs["judge_model"]}
        metric = knobs.get("metric", "lc_win_rate")
        if metric != "lc_win_rate":
            raise ConfigError(f"task {spec.name}: protocol paper reports the LC win rate; metric={metric!r}")
        alpaca_eval_annotator.build_annotator(self.judge, self.annotators_config)  # a bad config or judge fails here

    def judge_prompt(self) -> screening.JudgePrompt:
        """alpaca_eval's annotator's prompt."""
        return alpaca_eval_annotator.judge_prompt(self.annotators_config)

    def score_all(self, rows: list[dict], completions: list[str], judge=None) -> list[dict]:
        if judge is None:
            raise RuntimeError(f"task {self.name}: its judge ({self.judge.get('name')}) was not opened; the grading "
                               "service opens it on the driver proxy")
        outputs = [c.strip() for c in completions]  # RD-Agent strips the reply
        identity = alpaca_eval_annotator.annotator_identity(judge.driver, self.annotators_config)
        cache = self.judgement_cache()
        keys = [alpaca_eval_annotator.judgement_key(identity, r["instruction"], r["reference"], out)
                for r, out in zip(rows, outputs)]
        held = [cache.get(k) for k in keys]
        ask = [i for i, h in enumerate(held) if h is None]
        asked = alpaca_eval_annotator.annotate(judge, [rows[i] for i in ask], [outputs[i] for i in ask],
                                               self.annotators_config)
        for i, judgement in zip(ask, asked):
            cache.put(keys[i], judgement)
            held[i] = {**judgement, "fresh": True}
        return [{"id": r["id"], "completion": out, "preference": h["preference"],
                 "score": None if h["preference"] is None else h["preference"] - 1.0,
                 "raw_completion": h["raw_completion"], "cached": "fresh" not in h, "output_len": len(out),
                 "reference_len": len(r["reference"])} for r, out, h in zip(rows, outputs, held)]

    def summarize(self, items: list[dict], rows: list[dict]) -> dict:
        lc = alpaca_eval_annotator.length_controlled(
            [i["preference"] for i in items], [r["reference"] for r in rows], [i["completion"] for i in items],
            [r["position"] for r in rows], self._local_eval_folder())
        metrics = {"lc_win_rate": lc["length_controlled_winrate"], "win_rate": lc["win_rate"],
                   "lc_standard_error": lc["lc_standard_error"], "discrete_win_rate": lc["discrete_win_rate"],
                   "draws": sum(i["preference"] == 1.5 for i in items),
                   "unparsed": sum(i["preference"] is None for i in items),
                   "judgements_cached": sum(i["cached"] for i in items)}
        return self.screened({"score": metrics["lc_win_rate"], "metrics": metrics}, items, rows)

    def judging_instructions(self) -> str:
        return self.grader_section(heading=" (the paper's protocol: RD-Agent's AlpacaEval 2.0 evaluator)", scoring=f"""\
The reply is stripped. An LLM judge (`{self.judge.get('model')}`) then ranks your output
against AlpacaEval 2.0's reference output (GPT-4 Turbo's, `alpaca_eval_gpt4_baseline.json`) with the alpaca_eval
package's own annotator (`{Path(self.annotators_config).name}`: its ranking prompt, a forced tool call, the two
outputs in a seeded order). The score, 0-100, is alpaca_eval's **length-controlled win rate** (`length_controlled_v1`:
what the win rate would be if your outputs were as long as the reference's), over the hidden eval instructions.""")

    def missing_data(self) -> list[str]:
        """Besides the eval and train sets: the LC win rate's df_gamed.csv."""
        out = super().missing_data()
        local = self._local_eval_folder()
        gamed = alpaca_eval_annotator.GAMED_FILE
        if not ((local is not None and (local / gamed).is_file())
                or hub_or_local_present("tatsu-lab/alpaca_eval", gamed)):
            out.append(f"{self.name}: the LC win rate's {gamed} (hub dataset tatsu-lab/alpaca_eval) is neither beside "
                       "the local eval file nor in the Hugging Face cache (downloaded at first use: needs the network)")
        return out

    def fetch_data(self, sources: dict) -> None:
        """Besides the eval and train sets: df_gamed.csv as alpaca_eval's LC win rate fetches it."""
        super().fetch_data(sources)
        if self.missing_data():
            from alpaca_eval import constants
            from huggingface_hub import hf_hub_download

            hf_hub_download(repo_id="tatsu-lab/alpaca_eval", filename=alpaca_eval_annotator.GAMED_FILE,
                            repo_type="dataset", token=constants.DATASETS_TOKEN, cache_dir=constants.DEFAULT_CACHE_DIR)
