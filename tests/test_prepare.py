"""`python -m orchestrator prepare`: a sweep's models, datasets and upstream archives fetched from servers on
loopback that speak the hub's protocol (HF_ENDPOINT) and the upstream download URLs' layouts (ALFWorld's release
archives, WebShop's Drive files), resumed after a cut transfer, refused on a checksum that does not match, a second
run that asks the network nothing; and the refusal of a GPU sweep that would fetch while it holds its GPUs."""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.conftest import ROOT, compose
from tests.support.hub_server import HubServer

MODEL, SIBLING, DATASET = "a2rl-test/tiny-base", "a2rl-test/tiny-sibling", "a2rl-test/gsm8k"
RELEASES = "/alfworld/alfworld/releases/download"
WEBSHOP = "/download?id={id}&export=download&confirm=t"  # Google Drive's layout (the id in the query)
DRIVE_PATH = WEBSHOP.split("?")[0]
GAMES = OmegaConf.load(ROOT / "conf" / "task" / "alfworld.yaml").games_archive  # the paper's (docs/tasks/alfworld.md)
GAME = "json_2.1.1/train/pick_and_place_simple-Mug-None-CoffeeMachine-1/trial_T0"


def parquet(rows: list[dict]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), out)
    return out.getvalue()


def zipped(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        for name, data in files.items():
            z.writestr(name, data)
    return out.getvalue()


GSM8K_README = b"""---
configs:
- config_name: main
  data_files:
  - split: train
    path: main/train-*
  - split: test
    path: main/test-*
---
"""


def tiny_model() -> dict[str, bytes]:
    """A model repo's files (config.json, weights as safetensors): what prepare fetches and checks, never loads."""
    import numpy as np
    from safetensors.numpy import save

    config = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 64, "hidden_size": 16,
              "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1}
    weights = save({"model.embed_tokens.weight": np.random.default_rng(0).standard_normal((64, 16), np.float32)})
    return {"config.json": json.dumps(config).encode(), "model.safetensors": weights,
            "generation_config.json": b"{}"}


@pytest.fixture(scope="module")
def upstream():
    """The hub (a tiny model built here, its sibling, a GSM8K-shaped dataset) and the archives' upstream URLs."""
    from envs.alfworld import download as alfworld_download
    from envs.webshop import download as webshop_download

    model = tiny_model()
    server = HubServer().start()
    server.add_repo("model", MODEL, model)
    server.add_repo("model", SIBLING, model)
    rows = [{"question": f"What is {i} + {i}?", "answer": f"{i} + {i} = {2 * i}\n#### {2 * i}"} for i in range(6)]
    server.add_repo("dataset", DATASET, {"README.md": GSM8K_README, "main/train-00000-of-00001.parquet": parquet(rows),
                                         "main/test-00000-of-00001.parquet": parquet(rows[:3])})
    # a few hundred KB each, as the real files are large: a cut transfer has written some of it
    traj = json.dumps({"task_type": "pick_and_place_simple", "pddl_params": {}, "turk_annotations": {
        "anns": [{"task_desc": "put a clean mug in the coffee machine"}] * 4000}}).encode()
    game = json.dumps({"solvable": True, "pddl_domain": "(define (domain alfred))", "grammar": "",
                       "pddl_problem": "(define (problem p))", "walkthrough": []}).encode()
    pddl = b"(define (problem p)\n" + b" (objects mug_1)\n" * 8000 + b")"
    layout = {"json_2.1.1_json.zip": {f"{GAME}/traj_data.json": traj},
              "json_2.1.1_pddl.zip": {f"{GAME}/initial_state.pddl": pddl},
              "json_2.1.2_tw-pddl.zip": {f"{GAME}/game.tw-pddl": game},
              "json_2.1.3_tw-pddl.zip": {f"{GAME}/game.tw-pddl": game.replace(b'"walkthrough"',
                                                                             b'"v": 3, "walkthrough"')}}
    for games in (None, GAMES):  # the installed downloader's games archive, and the task's (conf/task/alfworld.yaml)
        for archive, url in alfworld_download.archives("http://upstream" + RELEASES, games).items():
            server.add_file(url.removeprefix("http://upstream"), zipped(layout[archive]))
    for name, file_id in webshop_download.FILES.items():
        server.add_drive_file(DRIVE_PATH, file_id, name, json.dumps([{"asin": "B0", "name": name}] * 3000).encode())
    yield server
    server.stop()


def env_for(server: HubServer, home: Path) -> dict:
    """Loopback only: the hub at HF_ENDPOINT, fresh caches, the alfworld downloader's temp folder under home."""
    env = {**os.environ, "HF_ENDPOINT": server.url, "HF_HOME": str(home / "hf"), "HF_HUB_OFFLINE": "0",
           "HF_DATASETS_OFFLINE": "0", "HF_HUB_DISABLE_TELEMETRY": "1", "TMPDIR": str(home / "tmp"),
           "A2RL_ORIGINAL_WHEEL_DIR": str(home / "wheels"), "RAY_AUTH_MODE": "disabled", "NO_PROXY": "*",
           "PYTHONPATH": str(ROOT)}
    (home / "tmp").mkdir(parents=True, exist_ok=True)
    return env


def sweep_args(server: HubServer, home: Path) -> list[str]:
    tasks = (f"[{{name:gsm8k,protocol:a2rl,dataset:'{DATASET}',base_model:'{MODEL}',known_models:['{SIBLING}']}},"
             f"{{name:alfworld,protocol:a2rl,base_model:'{MODEL}',data_path:'{home}/alfworld'}},"
             f"{{name:webshop,protocol:a2rl,base_model:'{MODEL}',data_path:'{home}/webshop'}}]")
    return ["sweep=demo", "sweep.agents=[copy_base]", "sweep.seeds=[0]", f"sweep.tasks={tasks}",
            f"cache_dir={home}/cache", f"output_dir={home}/out", "logger=none",
            f"downloads.alfworld={server.url}{RELEASES}", f"downloads.webshop='{server.url}{WEBSHOP}'"]


def orchestrator(args: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


def status_of(table: str, artefact: str) -> str:
    line = next(line for line in table.splitlines() if line.startswith(artefact))
    return re.split(r"\s{2,}", line.strip())[-1]


def test_prepare_fetches_resumes_and_then_fetches_nothing(upstream, tmp_path):
    env = env_for(upstream, tmp_path)
    args = sweep_args(upstream, tmp_path)
    dry = orchestrator([*args, "dry_run=true"], env)
    assert dry.returncode == 0, dry.stderr
    for what in (f"model {MODEL}", f"model {SIBLING}", "a2rl-test/gsm8k (main) is not in the Hugging Face cache",
                 "no ALFWorld json_2.1.1 games", "no items_shuffle_1000.json"):
        assert what in dry.stdout, dry.stdout
    assert "`python -m orchestrator prepare sweep=demo" in dry.stdout

    # the first try is cut mid-file for one ALFWorld archive and one WebShop file: those two fail, the rest arrive
    upstream.cut("json_2.1.1_pddl.zip")
    upstream.cut(upstream_id("items_human_ins.json"))
    first = orchestrator(["prepare", *args], env)
    assert first.returncode == 1, first.stdout + first.stderr
    assert status_of(first.stdout, f"model {MODEL}") == "fetched"
    assert status_of(first.stdout, "data of task gsm8k") == "fetched"
    assert status_of(first.stdout, "data of task alfworld") == "failed"
    assert status_of(first.stdout, "data of task webshop") == "failed"
    assert "run the same command again" in first.stdout

    # the second resumes both cut transfers where they stopped (a Range request), and fetches nothing else
    upstream.requests.clear()
    second = orchestrator(["prepare", *args], env)
    assert second.returncode == 0, second.stdout + second.stderr
    assert status_of(second.stdout, "data of task alfworld") == "fetched"
    assert status_of(second.stdout, "data of task webshop") == "fetched"
    assert status_of(second.stdout, f"model {MODEL}") == "already there"
    ranged = {path for method, path, range_ in upstream.requests if range_}
    assert any(p.endswith("json_2.1.1_pddl.zip") for p in ranged), upstream.requests
    assert any(upstream_id("items_human_ins.json") in p for p in ranged), upstream.requests
    assert not any("/api/" in path for _, path, _ in upstream.requests)  # the hub was not asked again
    record = json.loads((tmp_path / "webshop" / ".a2rl-prepare.json").read_text())
    body = upstream.drive[(DRIVE_PATH, upstream_id("items_human_ins.json"))][1]
    assert record["items_human_ins.json"]["sha256"] == hashlib.sha256(body).hexdigest()
    assert (tmp_path / "alfworld" / GAME / "game.tw-pddl").is_file()
    assert re.search(r"revision [0-9a-f]{12}", second.stdout)

    # a third run asks nothing of anyone, and the dry run lists nothing the network would give
    upstream.requests.clear()
    third = orchestrator(["prepare", *args], env)
    assert third.returncode == 0, third.stdout + third.stderr
    assert "nothing fetched: all" in third.stdout, third.stdout
    assert upstream.requests == []
    dry = orchestrator([*args, "dry_run=true"], env)
    assert "prepare sweep=demo" not in dry.stdout, dry.stdout
    assert upstream.requests == []


def upstream_id(name: str) -> str:
    from envs.webshop.download import FILES

    return FILES[name]


def test_a_checksum_that_does_not_match_is_refused_and_named(upstream, tmp_path, monkeypatch):
    import tempfile

    from envs.alfworld import download as alfworld_download
    from envs.webshop import download as webshop_download

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the alfworld downloader keeps partial files
    with pytest.raises(webshop_download.DownloadRefused, match=r"items_ins_v2_1000.json .* has sha256 [0-9a-f]{64}, "
                                                                 r"not the pinned 0{64}"):
        webshop_download.fetch(tmp_path / "webshop", upstream.url + WEBSHOP, {"items_ins_v2_1000.json": "0" * 64})
    assert not (tmp_path / "webshop" / "items_ins_v2_1000.json").exists()
    assert not (tmp_path / "webshop" / "items_ins_v2_1000.json.part").exists()
    with pytest.raises(alfworld_download.DownloadRefused, match=r"json_2.1.1_json.zip .* not the pinned f{64}"):
        alfworld_download.fetch(tmp_path / "alfworld", upstream.url + RELEASES, {"json_2.1.1_json.zip": "f" * 64})
    assert not list((tmp_path / "alfworld").rglob("traj_data.json"))


def test_the_released_original_is_checked_against_its_pin(tmp_path):
    """pip fetches the wheel from the index it is given (here one on loopback whose wheel is not the pinned one):
    refused, named, nothing kept in the wheel store."""
    from contracts import release

    info = "rdagent-1.0.0.dist-info"
    wheel = zipped({"rdagent/__init__.py": b"",  # a valid wheel that pip accepts, but not the released one
                    f"{info}/METADATA": b"Metadata-Version: 2.1\nName: rdagent\nVersion: 1.0.0\n",
                    f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
                    f"{info}/RECORD": b""})
    server = HubServer().start()
    server.add_file("/simple/rdagent/", f'<a href="/files/{release.WHEEL}">{release.WHEEL}</a>'.encode(),
                    "text/html")
    server.add_file(f"/files/{release.WHEEL}", wheel)
    try:
        env = {**os.environ, "PIP_INDEX_URL": server.url + "/simple", "PIP_NO_CACHE_DIR": "1",
               "PIP_CONFIG_FILE": os.devnull, "PIP_FIND_LINKS": "",
               "A2RL_ORIGINAL_WHEEL_DIR": str(tmp_path / "store")}
        code = ("from contracts import release\ntry:\n    release.fetch_wheel()\nexcept release.ReleaseUnavailable"
                " as e:\n    print('REFUSED', e)")
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                             timeout=120)
    finally:
        server.stop()
    assert f"REFUSED the downloaded {release.WHEEL} has sha256" in out.stdout, out.stdout + out.stderr
    assert release.SHA256 in out.stdout
    assert not (tmp_path / "store" / release.WHEEL).exists()


def test_a_gpu_sweep_missing_an_artefact_refuses_in_one_line(tmp_path, monkeypatch):
    from contracts.specs import ConfigError
    from orchestrator.artefacts import check_artefacts
    from orchestrator.sweep import expand

    monkeypatch.setattr(sys, "argv", ["orchestrator", "sweep=demo", "task=gsm8k"])
    cfg = compose(["sweep=demo", "task=gsm8k", "task.protocol=a2rl", f"task.base_model={MODEL}",
                   "task.dataset=a2rl-tests/no-such-gsm8k",
                   f"cache_dir={tmp_path}", "sweep.budget.gpus=1"])
    cells = expand(cfg)
    with pytest.raises(ConfigError) as refused:
        check_artefacts(cells, tmp_path, emulated=False, allow_fetch_in_cells=False, out=io.StringIO())
    line = str(refused.value)
    assert "\n" not in line
    assert line.startswith(f"model {MODEL} is not on this machine (and 1 more)"), line
    assert "run `python -m orchestrator prepare sweep=demo task=gsm8k` first (or allow_fetch_in_cells=true)" in line

    # allowed, or with no real GPU held (CPU cells, emulated GPUs): it starts, and says what it will fetch
    for emulated, allowed in ((False, True), (True, False)):
        said = io.StringIO()
        check_artefacts(cells, tmp_path, emulated=emulated, allow_fetch_in_cells=allowed, out=said)
        assert "2 artefacts are fetched while cells run" in said.getvalue()
        assert f"model {MODEL} (base model of gsm8k)" in said.getvalue()


PAPER_DRIVE = "/paper-drive/download?id={id}"  # WebShop's files in their real layout (the ones above are filler)
SPACY_WHEEL = "/explosion/spacy-models/releases/download/en_core_web_sm-3.7.1/en_core_web_sm-3.7.1-py3-none-any.whl"


def test_prepare_fetches_the_papers_data_into_the_cache_then_nothing(upstream, tmp_path):
    """protocol paper with data_path: paper (the shipped configs): ALFWorld's archives and WebShop's files into
    CACHE_DIR/data, the spaCy model the original's reward tags with, and the Lucene index built from WebShop's
    products; a second run asks the network nothing; and the reward then tags with the original's model."""
    from envs.webshop import download as webshop_download
    from tests.support.upstream_layouts import spacy_model_wheel, write_webshop_data

    write_webshop_data(files := tmp_path / "upload", instructions=True)
    for name, file_id in webshop_download.FILES.items():
        upstream.add_drive_file(PAPER_DRIVE.split("?")[0], file_id, name, (files / name).read_bytes())
    upstream.add_file(SPACY_WHEEL, spacy_model_wheel())
    env = env_for(upstream, tmp_path)
    cache = tmp_path / "cache"
    args = ["sweep=demo", "sweep.agents=[copy_base]", "sweep.seeds=[0]",
            f"sweep.tasks=[{{name:alfworld,base_model:'{MODEL}'}},{{name:webshop,base_model:'{MODEL}'}}]",
            f"cache_dir={cache}", f"output_dir={tmp_path}/out", "logger=none",
            f"downloads.alfworld={upstream.url}{RELEASES}", f"downloads.webshop='{upstream.url}{PAPER_DRIVE}'",
            f"downloads.spacy_model={upstream.url}{SPACY_WHEEL}"]
    first = orchestrator(["prepare", *args], env)
    assert first.returncode == 0, first.stdout + first.stderr
    assert status_of(first.stdout, "data of task alfworld") == "fetched"
    assert status_of(first.stdout, "data of task webshop") == "fetched"
    assert (cache / "data" / "alfworld" / GAME / "game.tw-pddl").is_file()
    assert (cache / "data" / "webshop" / "items_shuffle_1000.json").is_file()
    (index,) = (p for p in (cache / "grading" / "webshop" / "lucene").iterdir() if not p.name.startswith("."))
    assert (index / "a2rl-index.json").is_file()
    assert (cache / "data" / "spacy" / "en_core_web_sm-3.7.1" / "en_core_web_sm" / "en_core_web_sm-3.7.1").is_dir()
    assert not list((cache / "data" / "spacy").glob("*.whl"))  # unpacked, then deleted

    upstream.requests.clear()
    second = orchestrator(["prepare", *args], env)
    assert second.returncode == 0 and "nothing fetched: all" in second.stdout, second.stdout + second.stderr
    assert upstream.requests == []
    dry = orchestrator([*args, "dry_run=true"], env)
    said = dry.stdout[dry.stdout.index("graded as the paper:"):]
    assert f"task webshop: the paper's data ({cache}/data/webshop)" in said, said  # the original's spaCy model too
    assert "prepare sweep=demo" not in dry.stdout, dry.stdout


def test_offline_prepare_of_the_paper_grid_names_what_it_could_not_fetch_and_fails(tmp_path):
    """No network (the hub offline, every upstream URL a closed loopback port): the paper data is among what failed,
    each by name, and the command ends with status 1."""
    from contracts import release

    closed = "http://127.0.0.1:9"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"),
           "RAY_AUTH_MODE": "disabled", "A2RL_ORIGINAL_WHEEL_DIR": str(release.wheel_store()),
           "PYTHONPATH": str(ROOT)}
    run = orchestrator(["prepare", "sweep=paper_grid", "sweep.tasks=[alfworld,webshop,deepsearchqa]",
                        f"cache_dir={tmp_path}/cache", f"output_dir={tmp_path}/out", f"downloads.alfworld={closed}",
                        f"downloads.webshop='{closed}/d?id={{id}}'", f"downloads.spacy_model={closed}/s.whl"], env)
    assert run.returncode == 1, run.stdout + run.stderr
    failed = "\n".join(line for line in run.stdout.splitlines() if line.startswith("failed: "))
    for what in ("no ALFWorld json_2.1.1 games", "no items_shuffle_1000.json, items_ins_v2_1000.json, "
                 "items_human_ins.json", "then the Lucene index of their products", "spaCy's en_core_web_sm 3.7.1",
                 "the DeepSearchQA set google/deepsearchqa"):
        assert what in failed, (what, run.stdout)


def flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def test_drive_pages_and_cut_files_are_never_kept_and_the_lock_pins_what_was_fetched(upstream, tmp_path):
    """Google Drive answers items_shuffle_1000.json with its quota page, then with half of the file (a JSON that
    stops mid-value), then with the file; items_ins_v2_1000.json through its virus-scan form. Neither bad body is
    kept as data, each failure says what came back; the lock in the cache holds the digests of what was fetched;
    a cached file changed afterwards is restored by prepare and refused by a run, by name; a file Drive changes
    later is refused by name."""
    from envs.webshop.download import FILES

    env = env_for(upstream, tmp_path)
    cache, data = tmp_path / "cache", tmp_path / "cache" / "data" / "webshop"
    args = ["sweep=demo", "sweep.agents=[copy_base]", "sweep.seeds=[0]", "task=webshop", "task.protocol=a2rl",
            f"task.base_model={MODEL}", f"cache_dir={cache}", f"output_dir={tmp_path}/out", "logger=none",
            f"downloads.webshop='{upstream.url}{WEBSHOP}'"]
    shuffle, ins = FILES["items_shuffle_1000.json"], FILES["items_ins_v2_1000.json"]
    upstream.drive_answers(shuffle, "quota", "truncated")
    upstream.drive_answers(ins, "confirm")

    quota = orchestrator(["prepare", *args], env)
    assert quota.returncode == 1, quota.stdout + quota.stderr
    assert status_of(quota.stdout, "data of task webshop") == "failed"
    assert (f"items_shuffle_1000.json: Google Drive answered file id {shuffle}" in quota.stdout and
            'titled "Google Drive - Quota exceeded": "Too many users have viewed' in quota.stdout), quota.stdout
    assert "nothing was kept" in quota.stdout
    assert not (data / "items_shuffle_1000.json").exists() and not list(data.glob("*.part"))

    cut = orchestrator(["prepare", *args], env)
    assert cut.returncode == 1, cut.stdout + cut.stderr
    assert re.search(r"items_shuffle_1000\.json from Google Drive \(.*\) is not the file: [0-9,]+ bytes that are not "
                     r"JSON \(at byte [0-9,]+: ", cut.stdout), cut.stdout
    assert not (data / "items_shuffle_1000.json").exists() and not list(data.glob("*.part"))

    upstream.requests.clear()
    good = orchestrator(["prepare", *args], env)
    assert good.returncode == 0, good.stdout + good.stderr
    assert status_of(good.stdout, "data of task webshop") == "fetched"
    assert any(f"id={ins}" in path and "uuid=" in path for _, path, _ in upstream.requests)  # the form, followed
    lock = json.loads((cache / "downloads.lock.json").read_text())
    for name, file_id in FILES.items():
        body = upstream.drive[(DRIVE_PATH, file_id)][1]
        assert (data / name).read_bytes() == body
        assert lock["files"][name]["sha256"] == hashlib.sha256(body).hexdigest()
    assert lock["hub"][f"model {MODEL}"]["revision"]

    # a byte of a cached file changes: a run refuses it by name before it starts; prepare fetches it again
    flip_a_byte(data / "items_shuffle_1000.json")
    refused = orchestrator(args, env)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "Traceback" not in refused.stderr and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert (f"items_shuffle_1000.json at {data}/items_shuffle_1000.json is not the file prepare fetched"
            in refused.stderr), refused.stderr
    restored = orchestrator(["prepare", *args], env)
    assert restored.returncode == 0, restored.stdout + restored.stderr
    assert f"{data}/items_shuffle_1000.json is not what prepare fetched (sha256 " in restored.stdout
    assert (data / "items_shuffle_1000.json").read_bytes() == upstream.drive[(DRIVE_PATH, shuffle)][1]

    # Drive's file changes after it was locked: fetching it again is refused, naming it; the cached one is not kept
    name, body = upstream.drive[(DRIVE_PATH, shuffle)]
    upstream.add_drive_file(DRIVE_PATH, shuffle, name, body.replace(b'"B0"', b'"B1"', 1))
    try:
        flip_a_byte(data / "items_shuffle_1000.json")
        changed = orchestrator(["prepare", *args], env)
    finally:
        upstream.add_drive_file(DRIVE_PATH, shuffle, name, body)
    assert changed.returncode == 1, changed.stdout + changed.stderr
    assert re.search(r"items_shuffle_1000\.json from \S+ has sha256 [0-9a-f]{64}, not the pinned "
                     + hashlib.sha256(body).hexdigest(), changed.stdout), changed.stdout
    assert not (data / "items_shuffle_1000.json").exists()


def test_a_lab_lock_pins_this_machine(upstream, tmp_path):
    """A lock a lab published (here a manifest's `downloads`) names other bytes for a file and another revision
    for the model: prepare refuses both by name; the manifest of a run carries the lock it ran on."""
    from envs.webshop.download import FILES
    from orchestrator.manifest import downloads_lock
    from orchestrator.sweep import expand

    env = env_for(upstream, tmp_path)
    cache = tmp_path / "cache"
    args = ["sweep=demo", "sweep.agents=[copy_base]", "sweep.seeds=[0]", "task=webshop", "task.protocol=a2rl",
            f"task.base_model={MODEL}", f"cache_dir={cache}", f"output_dir={tmp_path}/out", "logger=none",
            f"downloads.webshop='{upstream.url}{WEBSHOP}'"]
    lab = tmp_path / "lab-manifest.json"
    lab.write_text(json.dumps({"downloads": {"files": {"items_human_ins.json": {"sha256": "a" * 64}},
                                             "hub": {f"model {MODEL}": {"revision": "b" * 40}}}}))
    run = orchestrator(["prepare", *args, f"downloads.lock={lab}"], env)
    assert run.returncode == 1, run.stdout + run.stderr
    assert f"not the pinned {'a' * 64}" in run.stdout and "items_human_ins.json from" in run.stdout, run.stdout
    assert f"model {MODEL} is at revision" in run.stdout and f"pins {'b' * 40}" in run.stdout, run.stdout

    # without the lab's lock everything arrives; a run's manifest carries the cache's lock for its artefacts
    assert orchestrator(["prepare", *args], env).returncode == 0
    lock = downloads_lock(expand(compose(args)), cache)
    cached = json.loads((cache / "downloads.lock.json").read_text())
    assert {n: e["sha256"] for n, e in lock["files"].items()} == {n: cached["files"][n]["sha256"] for n in FILES}
    assert lock["hub"] == {f"model {MODEL}": cached["hub"][f"model {MODEL}"]}
    assert re.fullmatch(r"[0-9a-f]{64}", lock["fingerprint"])


def test_a_run_without_its_task_data_stops_in_one_line_before_ray(tmp_path):
    """`task=alfworld` with nothing fetched: exit 2, one line naming prepare and the offline twin, no traceback."""
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    run = orchestrator(["task=alfworld", f"cache_dir={tmp_path}/cache", f"output_dir={tmp_path}/out", "logger=none"],
                       env)
    assert run.returncode == 2, run.stdout + run.stderr
    (line,) = run.stderr.strip().splitlines()
    assert line.startswith(f"a2rl: config error: task alfworld: no ALFWorld json_2.1.1 games under "
                           f"data_path={tmp_path}/cache/data/alfworld"), line
    assert "`python -m orchestrator prepare task=alfworld" in line and "alfworld_small, its offline twin" in line
    assert "Ray" not in run.stdout and not (tmp_path / "out" / "ledger.sqlite").exists()


def test_the_games_archive_is_a_value_and_another_one_replaces_the_games(upstream, tmp_path, monkeypatch):
    """The games come from the archive the task names; a folder holding another archive's games is not complete
    for it, and fetching it replaces the games and the marker (what the lock and the report then name)."""
    import tempfile

    from envs.alfworld import download

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the alfworld downloader keeps partial files
    data = tmp_path / "alfworld"
    first = download.fetch(data, upstream.url + RELEASES)  # the installed downloader's own: json_2.1.2
    assert "json_2.1.2_tw-pddl.zip" in first and download.complete(data) and not download.complete(data, GAMES)
    assert "v" not in json.loads((data / GAME / "game.tw-pddl").read_text())
    second = download.fetch(data, upstream.url + RELEASES, games=GAMES)
    assert sorted(second) == ["json_2.1.1_json.zip", "json_2.1.1_pddl.zip", GAMES.rsplit("/", 1)[1]]
    assert json.loads((data / GAME / "game.tw-pddl").read_text())["v"] == 3
    assert download.complete(data, GAMES) and not download.complete(data)
    assert second[GAMES.rsplit("/", 1)[1]]["url"].endswith(GAMES)
