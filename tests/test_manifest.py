"""The sweep's manifest (orchestrator/manifest.py): content hashes of what a task reads, cached by path, mtime and size;
a resumed run configured differently is written beside the first, and the report names the keys that differ. (A real
sweep writes one before its first cell: tests/test_sweep_end_to_end.py.)"""
from __future__ import annotations

import hashlib
import json

import yaml

from contracts.records import write_json_durably
from orchestrator import manifest
from orchestrator.analysis.report_markdown import _manifest_section
from tests.conftest import ROOT


def test_data_files_are_hashed_once_and_again_when_they_change(tmp_path):
    data = tmp_path / "gsm8k"
    (data / "main").mkdir(parents=True)
    (data / "main" / "train-00000-of-00001.parquet").write_bytes(b"train rows")
    (data / "main" / "test-00000-of-00001.parquet").write_bytes(b"test rows")
    config = {**yaml.safe_load((ROOT / "conf" / "task" / "gsm8k.yaml").read_text()), "protocol": "a2rl",
              "data_path": str(data)}
    cache = tmp_path / "cache" / manifest.HASH_CACHE
    hashes = manifest.FileHashes(cache)
    entry = manifest.task_entry(config, tmp_path / "cache", hashes)
    hashes.save()
    (source,) = entry["data_files"].values()
    expected = hashlib.sha256("".join(f"main/{name}\0{hashlib.sha256(body).hexdigest()}\n" for name, body in (
        ("test-00000-of-00001.parquet", b"test rows"), ("train-00000-of-00001.parquet", b"train rows"))).encode())
    assert (source["sha256"], source["files"], source["bytes"]) == (expected.hexdigest(), 2, 19)
    assert entry["protocol"] == "a2rl" and entry["config"]["dataset"] == "openai/gsm8k"

    again = manifest.FileHashes(cache)  # a second sweep reads the cache, not the files
    assert manifest.task_entry(config, tmp_path / "cache", again)["data_files"] == entry["data_files"]
    assert not again.changed
    (data / "main" / "test-00000-of-00001.parquet").write_bytes(b"other test rows")
    changed = manifest.task_entry(config, tmp_path / "cache", again)["data_files"]
    assert again.changed and changed[str(data.resolve())]["sha256"] != source["sha256"]

    generated = manifest.task_entry(yaml.safe_load((ROOT / "conf" / "task" / "arithmetic.yaml").read_text()),
                                    tmp_path / "cache", again)
    assert generated["data_files"] == {} and "generated in-process" in generated["data_note"]


def test_a_resumed_run_configured_differently_is_kept_beside_the_first(tmp_path):
    first = {"written_at": "2026-01-01T00:00:00Z", "a2rl": {"commit": "abc", "dirty": False}, "seeds": [0, 1],
             "sandbox": {"network": "isolated", "allow": []}, "hardware": {"cpus": 2, "gpus": []}, "cells": [],
             "tasks": {"t": {"data_files": {"/d": {"sha256": "11"}}}}}
    path, differing = manifest.write(tmp_path, first)
    assert path.name == "manifest.json" and differing == []
    # the same configuration again, later: nothing new is written
    assert manifest.write(tmp_path, {**first, "written_at": "2026-01-02T00:00:00Z"}) == (path, [])
    resumed = {**first, "written_at": "2026-01-03T00:00:00Z", "seeds": [0, 1, 2],
               "a2rl": {"commit": "def", "dirty": True}, "tasks": {"t": {"data_files": {"/d": {"sha256": "22"}}}}}
    path, differing = manifest.write(tmp_path, resumed)
    assert path.name == "manifest-2.json"
    assert differing == ["a2rl.commit", "a2rl.dirty", "seeds", "tasks.t.data_files./d.sha256"]
    assert json.loads((tmp_path / "manifest.json").read_text()) == first  # the first is kept as it was
    assert manifest.write(tmp_path, resumed)[0].name == "manifest-2.json"  # once

    info = manifest.summary(tmp_path)
    text = "\n".join(_manifest_section(info))
    assert "[manifest.json](../manifest.json)" in text and "a2rl abc (clean tree)" in text
    assert ("[manifest-2.json](../manifest-2.json) (2026-01-03T00:00:00Z) differs from manifest.json in 4 keys: "
            "`a2rl.commit`, `a2rl.dirty`, `seeds`, `tasks.t.data_files./d.sha256`") in text
    write_json_durably(tmp_path / "manifest-3.json", {**resumed, "sandbox": {"network": "host", "allow": []}})
    assert [m["file"] for m in manifest.summary(tmp_path)["later"]] == ["manifest-2.json", "manifest-3.json"]
    assert "no manifest" in "\n".join(_manifest_section(manifest.summary(tmp_path / "none")))


def test_the_report_prints_the_lock_the_run_ran_on_and_the_games_it_read(tmp_path):
    from orchestrator.lock import fingerprint

    downloads = {"files": {"json_2.1.3_tw-pddl.zip": {"sha256": "ab" * 32, "path": None},
                           "items_shuffle_1000.json": {"sha256": "cd" * 32, "path": "/c/items_shuffle_1000.json"}},
                 "hub": {"model Qwen/Qwen2.5-1.5B": {"revision": "8faed761d45a263340a0528343f099c05c9a4323"}}}
    downloads["fingerprint"] = fingerprint(downloads)
    tasks = {"alfworld": {"protocol": "paper", "config": {"games_archive": "0.4.2/json_2.1.3_tw-pddl.zip",
                                                          "data_path": "paper"}},
             "alfworld_small": {"protocol": "a2rl", "config": {"games_archive": "0.4.2/json_2.1.3_tw-pddl.zip",
                                                               "data_path": None}},
             "webshop": {"protocol": "paper", "config": {"data_path": "paper"}}}
    manifest.write(tmp_path, {"written_at": "2026-01-01T00:00:00Z", "cells": [], "tasks": tasks,
                              "downloads": downloads})
    text = "\n".join(_manifest_section(manifest.summary(tmp_path)))
    assert ("Protocols: task alfworld: protocol paper, games json_2.1.3_tw-pddl.zip (sha256 abababababab); "
            "task alfworld_small: protocol a2rl; task webshop: protocol paper.") in text, text
    assert (f"Downloads lock (fingerprint `{downloads['fingerprint'][:16]}`): items_shuffle_1000.json sha256 "
            "cdcdcdcdcdcd; json_2.1.3_tw-pddl.zip sha256 abababababab; model Qwen/Qwen2.5-1.5B revision "
            "8faed761d45a.") in text, text
    # the same bytes give the same fingerprint, another digest another one
    assert fingerprint({**downloads, "fingerprint": "x"}) == downloads["fingerprint"]
    other = {**downloads, "files": {**downloads["files"], "items_shuffle_1000.json": {"sha256": "ef" * 32}}}
    assert fingerprint(other) != downloads["fingerprint"]
