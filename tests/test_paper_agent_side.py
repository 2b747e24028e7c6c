"""A paper cell's agent side is the original's (issue 34): each CLI agent's cell on gsm8k (protocol paper) is
compared with what the released original (rdagent 1.0.0) hands the same agent, from fixtures its own code made
(tests/fixtures/parity/make_agent_side.py: setup_workspace, init_run_meta, agents/<name>/start.sh, the Flask grader).

The CLI is a recording stand-in (tests/fixtures/parity/record_cli.py) found through cli_path under the CLI's name:
it prints its argv, cwd, environment and the workspace's tree and hashes, then submits a copy of the base model with
the prompt's own curl line (as written, and with its escaped quotes read as quotes) through the cell's grading relay.
Both sides are reduced by the same function (tests/fixtures/parity/agent_side.py: paths and times as placeholders,
`ls -la` lines as type and name, texts as hashes). Compared: the command line and the prompt line by line, the
environment, the workspace's tree and bytes, the data folder, the grader's answers to the curl line.

A difference is allowed only where the cell's own record (outcome.json) declares it: a variable a2rl set over the
original's config.yaml (`env`: <NAME>_MODEL for the driver's model) and what follows from it in the
command line. The original's opencode and openhands start.sh run pipelines that are not in the release: while the
cell's record says its launch is a2rl's, only the workspace, data and run.py's variables are compared.

Run alone: .venv/bin/python -m pytest tests/test_paper_agent_side.py
"""
from __future__ import annotations

import difflib
import json
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from agents.cli import get_adapter
from agents.cli.base import Context
from contracts.release import release_root
from orchestrator.workspace import base_env
from tests.conftest import ROOT
from tests.fixtures.parity import agent_side as side
from tests.support.cells import cells_ended
from tests.support.fake_upstream import FakeUpstream
from tests.test_cli_agents import REAL_KEY, USAGE, agent_sweeps, collect, drivers_override, fake_driver

FIXTURES = ROOT / "tests" / "fixtures" / "parity"
VARIANT = "start_sh"  # a2rl's workspace holds no run.log / agent.log: the cell's logs are in its attempt folder
AGENTS = {"claude_code": "claude", "codex": "codex", "gemini_cli": "gemini", "opencode": "opencode",
          "openhands": "openhands"}   # a2rl's agent -> the original's agents/<name>
PIPELINES = ("opencode", "openhands")
# Each CLI's driver, its model the one the original's config.yaml names (a2rl passes the driver's model as
# <NAME>_MODEL; the same name keeps the comparison strict). The pipelines' cells take any provider.
DRIVERS = {"claude_code": ("fake-anthropic", "anthropic", "claude-sonnet-4-6"),
           "codex": ("fake-openai", "openai", "gpt-5.2"),
           "gemini_cli": ("fake-gemini", "gemini", "gemini-2.5-pro"),
           "opencode": ("fake-anthropic", "anthropic", "claude-sonnet-4-6"),
           "openhands": ("fake-anthropic", "anthropic", "claude-sonnet-4-6")}
WALL_TIME_S = 300   # run_meta.json's timeout_s is the cell's budget (the fixture's: 43,200 s, run.py's --timeout)
TEST_ROWS = 2       # GSM8K test rows the grader scores (the first train rows: only the score's existence counts)


def fixture(agent: str) -> dict:
    return json.loads((FIXTURES / "agent_side" / f"{AGENTS[agent]}-gsm8k.json").read_text())


# -- the cells ----------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def gsm8k_hub(tmp_path_factory) -> Path:
    """openai/gsm8k in the hub's layout: the fixtures' eight rows as the train split."""
    import pandas as pd

    root = tmp_path_factory.mktemp("gsm8k-hub")
    (root / "main").mkdir()
    rows = [dict(r) for r in side.GSM8K_ROWS]
    pd.DataFrame(rows).to_parquet(root / "main" / "train-00000-of-00001.parquet")
    pd.DataFrame(rows[:TEST_ROWS]).to_parquet(root / "main" / "test-00000-of-00001.parquet")
    return root


@pytest.fixture(scope="module")
def stand_in_dir(tmp_path_factory) -> Path:
    """cli_path: the stand-in under every CLI's name (and as a pipeline's main.py), asked to submit."""
    folder = tmp_path_factory.mktemp("stand-in-cli")
    folder.chmod(0o755)  # the sandbox shows it read-only to the cell's own uid, as an npm install's folder is
    for name in [get_adapter(a).executable for a in AGENTS] + ["main.py"]:
        shutil.copyfile(FIXTURES / "record_cli.py", folder / name)
        (folder / name).chmod(0o755)
    (folder / "RECORD_CLI_SUBMIT").touch()
    return folder


@pytest.fixture(scope="module")
def paper_run(ray_cluster, cache_dir, grading_port, tmp_path_factory, gsm8k_hub, stand_in_dir):
    """Two sweeps: the three CLIs whose start.sh the release has, each on its provider, and the two pipelines."""
    fake = FakeUpstream(usage=USAGE, expect_key=REAL_KEY).start()  # the stand-in calls no model: a driver must exist
    sweeps = agent_sweeps(cache_dir, grading_port, tmp_path_factory, str(stand_in_dir))
    go = next(sweeps)
    common = ["task=gsm8k", f"task.data_path={gsm8k_hub}", f"sweep.budget.wall_time_s={WALL_TIME_S}",
              "sweep.budget.max_submissions=3"]
    runs = {}
    try:
        for name, agents in (("paper-clis", ["claude_code", "codex", "gemini_cli"]), ("paper-pipelines", PIPELINES)):
            drivers = {DRIVERS[a][0]: fake_driver(DRIVERS[a][0], DRIVERS[a][1], fake, DRIVERS[a][2]) for a in agents}
            out = go(name, [f"sweep.agents=[{','.join(agents)}]", drivers_override(list(drivers.values())), *common])
            runs.update({a: (out, collect(out, fake)) for a in agents})
    finally:
        fake.stop()
        next(sweeps, None)
    return runs


class Cell:
    """One agent's cell: its ledger row, outcome, what the stand-in recorded, and both sides reduced."""

    def __init__(self, runs: dict, agent: str, cache_dir: Path):
        out, run = runs[agent]
        self.agent = agent
        self.row, _ = run.of(agent, DRIVERS[agent][0])
        self.dir = out / "cells" / self.row["cell_id"] / "attempt-1"
        self.outcome = json.loads((self.dir / "outcome.json").read_text())
        printed = (self.dir / "agent.stdout").read_text(errors="replace")
        self.raw, self.raw_submit = side.read_lines(printed)
        if self.raw is None:
            stderr = (self.dir / "agent.stderr").read_text(errors="replace")
            pytest.fail(f"{agent}: the stand-in CLI never ran (start.sh stopped before its launch line?); cell "
                        f"{self.row['status']} {self.row.get('error')}\nstdout: {printed[-1500:]}\nstderr: "
                        f"{stderr[-1500:]}")
        self.expected = fixture(agent)
        env, tree = self.raw["env"], self.raw["tree"] or {}
        self.workspace, self.url = env.get("WORKSPACE", ""), env.get("GRADING_SERVER_URL", "")
        self.paths = dict(workspace=self.workspace, grading_url=self.url, original_dir=str(release_root(cache_dir)),
                          model_dir=tree.get(f"models/{side.BASE_MODEL}", {}).get("target"),
                          data_dir=tree.get("data", {}).get("target"),
                          pipeline_dir=env.get("OPENCODE_RL_ROOT") or env.get("OPENHANDS_RL_ROOT"))
        self.actual = side.normalise(self.raw, **self.paths, keep_text=True)
        self.submit = side.normalise_submit(self.raw_submit, workspace=self.workspace, grading_url=self.url)

    @property
    def original_launch(self) -> bool:
        """Whether the cell ran the original's start.sh (its record says so), else a2rl's launch (a pipeline)."""
        return self.outcome.get("launch") != "a2rl"

    def declared(self) -> dict:
        """Variables a2rl says it set over the original's config.yaml (outcome.json `env`), as the agent sees them."""
        return {k: self.actual["env"].get(k) for k in self.outcome.get("env") or {}}


@pytest.fixture(scope="module")
def cells(paper_run, cache_dir):
    made = {}

    def get(agent: str) -> Cell:
        if agent not in made:
            made[agent] = Cell(paper_run, agent, cache_dir)
        return made[agent]
    return get


# -- comparing ----------------------------------------------------------------------------------------------------

def prompt_differences(expected: dict, actual: dict) -> list[str]:
    """The original's prompt lines (hashes) against a2rl's (text): which lines differ, with a2rl's."""
    if expected["sha256"] == actual["sha256"]:
        return []
    got = [side.sha256(line) for line in actual["text"]]
    out = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, expected["lines"], got, autojunk=False).get_opcodes():
        if op != "equal":
            shown = "\n".join(f"    {j + 1}: {actual['text'][j][:200]}" for j in range(j1, min(j2, j1 + 12)))
            out.append(f"{op}: the original's lines {i1 + 1}-{i2} / a2rl's lines {j1 + 1}-{j2}:\n{shown}")
    return out


def flags(argv: list) -> list:
    return ["<prompt>" if isinstance(a, dict) else a for a in argv]


def prompt_of(argv: list) -> dict | None:
    return next((a["prompt"] for a in argv if isinstance(a, dict)), None)


def plumbing(agent: str, tmp_path: Path) -> set[str]:
    """What every sandboxed agent gets (a clean environment) and what hooks this CLI to the driver proxy: the
    deployment's, as the original's os.environ is (run.py passes it to start.sh whole)."""
    adapter = get_adapter(agent)  # a2rl's CLI agents are named as their adapters
    name, provider, model = DRIVERS[agent]
    args = yaml.safe_load((ROOT / "conf" / "agent" / f"{agent}.yaml").read_text()).get("args") or {}
    ctx = Context(workspace=tmp_path, home=tmp_path / "home", prompt="", proxy_url="http://127.0.0.1:9/driver",
                  key="a2rl-key", args=args, driver={"name": name, "provider": provider, "model": model})
    return set(base_env(tmp_path / "home", 1, {})) | set(adapter.launch(ctx).env)


# -- the tests ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("agent", list(AGENTS))
def test_the_command_line_and_prompt_are_the_originals(cells, agent):
    cell = cells(agent)
    if not cell.original_launch:
        assert agent in PIPELINES and cell.outcome.get("not_held"), cell.outcome  # said so, with the reason
        pytest.skip(f"{agent}: the original's start.sh runs a pipeline not in the release; a2rl launches its own "
                    f"CLI ({cell.outcome['not_held'][0]})")
    expected = cell.expected[VARIANT]["record"]
    want, got = flags(expected["argv"]), flags(cell.actual["argv"])
    declared = cell.declared()
    for name, value in declared.items():  # a declared variable's value where the original's start.sh put it
        old = expected["env"].get(name)
        if old and value and old != value:
            want = [a.replace(f'"{old}"', f'"{value}"') if isinstance(a, str) else a for a in want]
    assert got == want, f"{agent}: flags differ (a2rl declared {declared})"
    problems = prompt_differences(prompt_of(expected["argv"]), prompt_of(cell.actual["argv"]))
    assert not problems, f"{agent}: the prompt differs from the original's:\n" + "\n".join(problems)
    if expected["cwd"] != "$LAUNCH_DIR":  # codex's start.sh does not cd: it works in -C $WORKSPACE
        assert cell.actual["cwd"] == expected["cwd"], agent


@pytest.mark.parametrize("agent", list(AGENTS))
def test_the_environment_is_the_originals(cells, agent, tmp_path):
    cell = cells(agent)
    # the placeholders are read off the record itself: what they stand for must be the cell's own
    assert cell.workspace == cell.outcome["workspace"] and cell.url.startswith("http://127.0.0.1:"), cell.paths
    expected, got = cell.expected[VARIANT]["record"]["env"], cell.actual["env"]
    if not cell.original_launch:  # a2rl's launch: run.py's variables hold, the pipeline's knobs mean nothing here
        expected = {k: v for k, v in expected.items() if k in ("TASK", "BASE_MODEL", "WORKSPACE", "MODEL_PATH",
                                                                 "DATA_PATH", "OUTPUT_DIR", "GRADING_SERVER_URL")}
    declared = cell.declared()
    problems = [f"{k}: the original's {v!r}, a2rl's {got.get(k, '<unset>')!r}" for k, v in expected.items()
                if got.get(k) != v and k not in declared]
    allowed = plumbing(agent, tmp_path) | set(declared)
    extra = sorted(k for k in set(got) - set(expected) if k not in allowed and not k.startswith("A2RL_"))
    assert not problems and not extra, (f"{agent}: {problems}; variables the original's agent does not get: "
                                        f"{ {k: got[k] for k in extra} }; a2rl declared {declared}")


@pytest.mark.parametrize("agent", list(AGENTS))
def test_the_workspace_is_the_originals(cells, agent):
    """Names, types, link targets and bytes, as the CLI found it; run_meta.json's timeout is the cell's budget."""
    cell = cells(agent)
    expected = json.loads(json.dumps(cell.expected[VARIANT]["record"]["tree"]))
    expected["run_meta.json"]["content"]["timeout_s"] = WALL_TIME_S
    got = cell.actual["tree"]
    missing, extra = sorted(set(expected) - set(got)), sorted(set(got) - set(expected))
    differ = {k: (expected[k], got[k]) for k in sorted(set(expected) & set(got)) if expected[k] != got[k]}
    assert not (missing or extra or differ), f"{agent}: missing {missing}, extra {extra}, differing {differ}"
    assert cell.actual["data_tree"] == cell.expected[VARIANT]["record"]["data_tree"], agent  # data.py's train.jsonl


@pytest.mark.parametrize("agent", list(AGENTS))
def test_the_prompts_curl_line_is_answered_as_the_original_answers_it(cells, agent):
    """As written, the line's body (`{\\"model_path\\": ...}`, backslashes kept by the shell's single quotes) is not
    JSON: the original's server refuses it (400). With its quotes read as quotes it is graded: the original's answer
    keys and values (scores, times and the timestamp as placeholders; a2rl's extra keys may follow)."""
    cell = cells(agent)
    cells_ended([cell.row], allowed=["completed"])  # the stand-in exits 0 once it has submitted (or, a pipeline, not)
    expected = cell.expected[VARIANT]["submit"]
    if expected is None or not cell.original_launch:  # a pipeline: no prompt, no curl line
        assert cell.submit is None, cell.submit
        return
    assert cell.submit is not None, f"{agent}: the stand-in found no submit line in its command line"
    assert cell.submit["as_given"]["status"] == expected["as_given"]["status"], cell.submit["as_given"]
    unescaped = cell.submit["unescaped"]
    assert unescaped["status"] == expected["unescaped"]["status"] == 200, unescaped
    assert not keys_missing(expected["unescaped"]["body"], unescaped["body"]), \
        f"{agent}: {keys_missing(expected['unescaped']['body'], unescaped['body'])}"
    assert cell.row["best_score"] is not None and cell.row["n_submissions"] >= 1, cell.row  # it reached the ledger


def keys_missing(expected, actual, where: str = "") -> list[str]:
    """What of the original's answer a2rl's lacks or answers otherwise (its extra keys are allowed)."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{where or 'answer'}: {actual!r} is not an object"]
        return [p for k, v in expected.items() for p in
                ([f"{where}{k}: missing"] if k not in actual else keys_missing(v, actual[k], f"{where}{k}."))]
    return [] if expected == actual else [f"{where[:-1]}: the original's {expected!r}, a2rl's {actual!r}"]


def test_the_stand_in_records_what_a_start_sh_gives_it(tmp_path):
    """The recorder itself (no Ray): links recorded, not followed; secrets as <set>; executables marked; the data
    link followed one level; and a prompt's ls -la reduced to types and names."""
    ws, data = tmp_path / "ws", tmp_path / "data"
    (ws / "code").mkdir(parents=True)
    data.mkdir()
    (data / "train.jsonl").write_text('{"question": "q", "answer": "#### 1"}\n')
    (ws / "data").symlink_to(data)
    (ws / "timer.sh").write_text("DEADLINE=1764288000\n")
    (ws / "timer.sh").chmod(0o755)
    exe = tmp_path / "claude"
    shutil.copyfile(FIXTURES / "record_cli.py", exe)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    prompt = (f"## Workspace Contents\ntotal 8\ndrwxr-xr-x 3 root root 4096 Nov 27 23:39 .\n"
              f"lrwxrwxrwx 1 root root   9 Nov 27 23:39 data -> {data}\n")
    env = {"PATH": "/usr/bin:/bin", "WORKSPACE": str(ws), "ANTHROPIC_API_KEY": "sk-secret", "CLAUDE_MODEL": "m"}
    with open(tmp_path / "stdout", "w") as out:  # a file, not a pipe: a pipe is tee's, waited for a while
        subprocess.run([str(exe), "--print", prompt], env=env, cwd=ws, stdout=out, check=True)
    printed = (tmp_path / "stdout").read_text()
    record, submit = side.read_lines(printed)
    assert submit is None and "sk-secret" not in printed
    assert record["env"] == {"ANTHROPIC_API_KEY": "<set>", "CLAUDE_MODEL": "m", "WORKSPACE": str(ws)}
    normal = side.normalise(record, workspace=str(ws), original_dir="/nowhere", grading_url="http://x:1",
                            model_dir=None, data_dir=str(data), keep_text=True)
    assert normal["argv"][:2] == ["claude", "--print"] and normal["cwd"] == "$WORKSPACE"
    assert normal["argv"][2]["prompt"]["text"] == ["## Workspace Contents", "d .", "l data -> $DATA_DIR", ""]
    assert normal["tree"]["data"] == {"type": "link", "target": "$DATA_DIR", "resolves_to": "dir"}
    assert normal["tree"]["timer.sh"] == {"type": "file", "executable": True,
                                          "sha256": side.sha256("DEADLINE=<epoch>\n")}
    assert set(normal["data_tree"]) == {"train.jsonl"} and "code" in normal["tree"]
