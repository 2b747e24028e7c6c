"""AlpacaEval judged as the original does (protocol `paper`): the alpaca_eval package's own annotator and metric.

RD-Agent's evaluator calls `alpaca_eval.evaluate` (alpaca_eval 0.6.6) with its annotator config `annotators_gpt52_fn`:
the package's `alpaca_eval_gpt4_turbo_fn` config with the judge model gpt-5.2 (the same prompt file, tool, forced
tool call, temperature 0, max_tokens 100, parser; tests/fixtures/parity/make_alpacaeval.py checks it). a2rl builds
that annotator from the package (`PairwiseAnnotator`), swaps in the judge driver's model, and lets the package do the
rest: its seeded per-instruction order swap, its prompt, its `openai_completions` call (the openai SDK, pointed at
the driver proxy with the evaluation's metered key), its parser (preference 1 or 2; NaN when a reply cannot be
read; 1.5 without asking when the two outputs are equal), and its `get_length_controlled_winrate` with the
`length_controlled_v1` GLM and its regularisation towards the gamed baselines of `df_gamed.csv`.

Nothing of the package is copied here; `annotate` only routes its client and maps its annotations back to rows.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import threading
from pathlib import Path

from contracts.screening import JudgePrompt
from contracts.specs import ConfigError
from evaluators.judging.client import JudgeUnavailable

PACKAGE_ANNOTATOR = "alpaca_eval_gpt4_turbo_fn"  # RD-Agent's annotators_gpt52_fn is this with model gpt-5.2
PAPER_JUDGE_MODEL = "gpt-5.2"
GAMED_FILE = "df_gamed.csv"  # the hub file (tatsu-lab/alpaca_eval) the LC regularisation reads
_hub_lock = threading.Lock()


def _alpaca_eval():
    """The package, imported quietly: it sets the root logger to INFO at import; a2rl's level is put back."""
    root = logging.getLogger()
    level = root.level
    try:
        import alpaca_eval.annotators
        import alpaca_eval.metrics.glm_winrate  # noqa: F401
    except ImportError as e:
        raise ConfigError(f"alpacaeval protocol=paper needs the alpaca_eval package (pip install alpaca-eval==0.6.6; "
                          f"it imports pkg_resources: setuptools<81): {e}") from None
    finally:
        root.setLevel(level)
    return alpaca_eval


def annotator_identity(driver: dict, annotators_config: str) -> dict:
    """What decides a judgement besides its inputs: the config (its files' contents), the model, where it is asked."""
    path = _config_path(annotators_config)
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(path.parent.glob("*"))
                                     if p.suffix in (".yaml", ".txt"))).hexdigest()[:16]
    return {"kind": "alpaca_eval", "annotators_config": path.parent.name, "config_sha": digest,
            "model": driver.get("model"), "base_url": driver.get("base_url"),
            "alpaca_eval": _package_version()}


def _package_version() -> str:
    from importlib import metadata

    return metadata.version("alpaca_eval")


def _config_path(annotators_config: str) -> Path:
    """An annotator config by name (a folder of the package's evaluators_configs) or a path (e.g. RD-Agent's
    annotators_gpt52_fn folder): its configs.yaml."""
    path = Path(annotators_config).expanduser()
    if not path.exists():
        path = Path(_alpaca_eval().__file__).parent / "evaluators_configs" / annotators_config
    path = path / "configs.yaml" if path.is_dir() else path
    if not path.is_file():
        raise ConfigError(f"alpacaeval: annotators_config={annotators_config!r} is neither a folder of alpaca_eval's "
                          "evaluators_configs nor a path to an annotator config (a folder with configs.yaml)")
    return path


def judge_prompt(annotators_config: str = PACKAGE_ANNOTATOR) -> JudgePrompt:
    """The annotator's prompt template and forced tool as the package reads them (its prompt_template relative to
    the folder above the config's, or the text itself), for the screen of answers aimed at this judge
    (contracts/screening.py)."""
    import yaml

    path = _config_path(annotators_config)
    (config,) = yaml.safe_load(path.read_text()).values()
    template = path.parents[1] / str(config["prompt_template"])
    text = template.read_text() if template.is_file() else str(config["prompt_template"])
    tools = (config.get("completions_kwargs") or {}).get("tools") or []
    function = tools[0].get("function") if tools else None
    return JudgePrompt(f"alpaca_eval's {path.parent.name}", (text,),
                       tool=(function["name"], function.get("parameters") or {}) if function else None)


def build_annotator(driver: dict, annotators_config: str = PACKAGE_ANNOTATOR):
    """alpaca_eval's PairwiseAnnotator for the config, judging with the driver's model; no cache file of its own
    (a2rl caches judgements in the grader's score cache)."""
    if driver.get("provider") not in ("openai", "openai-compatible"):
        raise ConfigError(f"alpacaeval protocol=paper: the judge {driver.get('name')!r} must speak OpenAI's chat "
                          f"completions (provider openai or openai-compatible), as alpaca_eval's openai_completions "
                          f"does; it is {driver.get('provider')!r}")
    ae = _alpaca_eval()
    path = _config_path(annotators_config)
    annotator = ae.annotators.PairwiseAnnotator(annotators_config=str(path.parent), caching_path=None, seed=0)
    for single in annotator.annotators.values():
        if driver.get("model"):
            single.completions_kwargs["model_name"] = driver["model"]
    return annotator


def annotate(judge, rows: list[dict], outputs: list[str], annotators_config: str = PACKAGE_ANNOTATOR) -> list[dict]:
    """One annotation per row, in order: {preference (1.0, 2.0, 1.5 for equal outputs, None when unreadable),
    raw_completion}. `judge`: the LLMJudge the grader opened (its driver, the proxy's URL, the evaluation's key).
    rows need `instruction` and `reference`. A failed call raises JudgeUnavailable."""
    import openai

    if not rows:
        return []
    annotator = build_annotator(judge.driver, annotators_config)
    # RD-Agent's call: evaluate(model_outputs, reference_outputs) -> annotate_head2head(outputs_1=reference, outputs_2=
    # model), merged on the instruction
    reference = [{"instruction": r["instruction"], "output": r["reference"], "generator": "reference"} for r in rows]
    model = [{"instruction": r["instruction"], "output": out, "generator": "model"} for r, out in zip(rows, outputs)]
    client = {
        # not a file: the package then builds its OpenAI client from the key and base below (the proxy), never
        # from a client config a user may have
        "client_config_path": os.devnull,
        "openai_api_keys": [judge.key], "openai_api_base": judge.proxy_url + "/v1",
        "client_kwargs": {"max_retries": 0, "timeout": judge.client.timeout.read},  # the proxy retries 429/5xx
        "num_procs": judge.concurrency,
    }
    try:
        annotations = annotator.annotate_head2head(outputs_1=reference, outputs_2=model, **client)
    except openai.OpenAIError as e:
        raise JudgeUnavailable(f"judge {judge.driver.get('name')}: {type(e).__name__}: {e}") from None
    by_pair = {(a["instruction"], a["output_2"]): a for a in annotations}
    out = []
    for row, output in zip(rows, outputs):
        a = by_pair[row["instruction"], output]
        pref = a.get("preference")
        out.append({"preference": None if pref is None or (isinstance(pref, float) and math.isnan(pref)) else
                    float(pref), "raw_completion": a.get("preference_raw_completion")})
    return out


@contextlib.contextmanager
def _gamed_from(folder: Path | None):
    """alpaca_eval reads df_gamed.csv with hf_hub_download; a local copy of the dataset (a folder holding it) is
    served in its place for the call. The name is the module's, process-wide: one call at a time."""
    from alpaca_eval.metrics import glm_winrate

    with _hub_lock:
        if folder is None or not (folder / GAMED_FILE).is_file():
            yield
            return
        hub_download = glm_winrate.hf_hub_download

        def local_first(*, filename, **kwargs):
            return str(folder / filename) if (folder / filename).is_file() else hub_download(filename=filename,
                                                                                            **kwargs)

        glm_winrate.hf_hub_download = local_first
        try:
            yield
        finally:
            glm_winrate.hf_hub_download = hub_download


def length_controlled(preferences: list[float | None], references: list[str], outputs: list[str],
                      positions: list[int], local_data: Path | None = None) -> dict:
    """alpaca_eval's get_length_controlled_winrate (length_controlled_v1) on the annotation table, as RD-Agent's
    evaluate computes it: rows in the eval file's order, `positions` their index there (it picks each
    instruction's difficulty); unreadable judgements (None) stay in the table as NaN, as the package keeps them.
    {win_rate, length_controlled_winrate, lc_standard_error, n_total, ...} (percentages)."""
    import numpy as np
    import pandas as pd

    glm = _alpaca_eval().metrics.glm_winrate
    table = pd.DataFrame({"instruction": [str(p) for p in positions], "output_1": references, "output_2": outputs,
                          "preference": [np.nan if p is None else float(p) for p in preferences],
                          "generator_1": "reference", "generator_2": "model", "annotator": "judge"},
                         index=pd.Index(positions))
    try:
        with _gamed_from(local_data):
            metrics = glm.get_length_controlled_winrate(table, save_weights_dir=None, is_warn_extreme_changes=False)
    except OSError as e:  # the hub file: offline and not cached
        raise ConfigError(f"alpacaeval protocol=paper: the LC win rate's regularisation needs {GAMED_FILE} from the "
                          f"hub dataset tatsu-lab/alpaca_eval (or beside a local eval file): {type(e).__name__}: "
                          f"{e}") from None
    return {k: (float(v) if isinstance(v, (int, float, np.number)) else v) for k, v in metrics.items()}


def judgement_key(identity: dict, instruction: str, reference: str, output: str) -> str:
    blob = json.dumps([identity, instruction, reference, output], ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()
