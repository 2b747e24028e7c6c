"""The built-in agents train on exactly the chats the grader sends: their one client (agents/builtin/a2rl_client.py)
and, for an interactive task, the environment's own render/parse, copied beside them as a cell copies them."""
from __future__ import annotations

import json
import shutil

import pytest

from agents.kinds import agent_kind
from contracts.specs import AgentSpec, ConfigError
from contracts.task import load_task, prompt_file
from contracts.task_spec import TaskSpec
from orchestrator.sweep import agent_spec, load_named
from tests.conftest import load_script


def code_dir(tmp_path, task_cfg: dict, script: str):
    """What a cell puts in a built-in agent's code/: its script, the client, and the task's render/parse if any."""
    _, files = agent_kind("builtin").command(AgentSpec(name=script, kind="builtin", script=script),
                                             prompt_file(TaskSpec.from_config(task_cfg)))
    code = tmp_path / "code"
    code.mkdir()
    for name, source in files.items():
        shutil.copy(source, code / name)
    return code


def test_the_client_is_no_agent_of_its_own():
    with pytest.raises(ConfigError, match="no built-in agent script 'a2rl_client'; known: copy_base, noop"):
        agent_spec({"name": "x", "kind": "builtin", "script": "a2rl_client"}, "agent")


def test_sft_trains_on_the_graders_chat_for_single_turn_rows(tmp_path):
    task_cfg = {**load_named("task", "arithmetic", "test"), "train_size": 20, "eval_size": 5}
    task = load_task(task_cfg)
    code = code_dir(tmp_path, task_cfg, "sft")
    assert sorted(p.name for p in code.iterdir()) == ["a2rl_client.py", "sft.py"]  # no prompt: not interactive
    sft = load_script(code / "sft.py")
    rows = task.train_rows()
    data = sft.chat_dataset(rows)
    assert [d["prompt"] for d in data] == [task.messages(row) for row in rows]


def test_sft_trains_on_raw_text_rows_as_the_grader_sends_them(tmp_path):
    """Under a raw-text protocol (ALFWorld's paper protocol) a row's prompt is text: trl gets it as a plain
    prompt/completion pair (the prompt masked), and trains on it."""
    from trl import SFTConfig, SFTTrainer

    from evaluators.base_models import resolve_base_model

    task_cfg = {**load_named("task", "arithmetic", "test"), "train_size": 4, "eval_size": 2}
    sft = load_script(code_dir(tmp_path, task_cfg, "sft") / "sft.py")
    rows = [{"id": f"r{i}", "prompt": "x", "messages": f"Here is the task.\nYou are in room {i}.\n>",
             "completion": f" go to desk {i}"} for i in range(4)]
    data = sft.chat_dataset(rows)
    assert [d["prompt"] for d in data] == [row["messages"] for row in rows]
    assert [d["completion"] for d in data] == [row["completion"] for row in rows]
    model = resolve_base_model("tiny", tmp_path / "models")
    config = SFTConfig(output_dir=str(tmp_path / "out"), max_steps=2, per_device_train_batch_size=2, report_to=[],
                       use_cpu=True, save_strategy="no", logging_steps=1)
    trainer = SFTTrainer(model=str(model), args=config, train_dataset=data)
    trainer.train()
    assert all(0 < log["loss"] < 100 for log in trainer.state.log_history if "loss" in log)


alfworld = pytest.importorskip("alfworld")


@pytest.fixture(scope="module")
def small_task(cache_dir):
    from tests.test_rollout_service import SMALL_TASK

    return SMALL_TASK, load_task(SMALL_TASK, cache_dir)


class InProcessEnv:
    """The rollout service's answers (a2rl_client.Env's interface) from the environment in this process."""

    def __init__(self, env):
        self.env, self.instances = env, env.instances("train")
        self.games = [{"index": i, "name": inst.name, **inst.info} for i, inst in enumerate(self.instances)]
        self.max_steps, self.max_sessions = env.max_steps, 16
        self.open: dict[str, tuple] = {}

    def _answer(self, sid, episode, step, won):
        return {"session_id": sid, "observation": step.observation, "admissible_commands": list(step.actions),
                "reward": step.reward, "won": won, "done": won or step.done, "steps": episode.steps}

    def starts(self, starts):
        out = []
        for game, actions in starts:
            inst = next(i for i in self.instances if i.name == game)
            episode = self.env.open(inst)
            step, won = episode.reset(), False
            for action in actions:
                step = episode.step(action)
                won = won or step.won
            sid = f"s{len(self.open)}"
            self.open[sid] = (episode, won)
            out.append({**self._answer(sid, episode, step, won), "task": episode.goal})
        return out

    def steps(self, moves):
        out = []
        for sid, action in moves:
            episode, won = self.open[sid]
            step = episode.step(action)
            self.open[sid] = (episode, won or step.won)
            out.append(self._answer(sid, episode, step, won or step.won))
        return out

    def release(self, session_ids):
        for sid in session_ids:
            self.open.pop(sid)[0].close()


def test_sft_grpo_plays_and_trains_on_the_graders_chats(small_task, tmp_path):
    """sft_grpo's episodes (what it trains GRPO on) against the grader's lockstep rollouts: with the same replies,
    every chat is the same, and its parse takes the same actions (<think> stripped, chatter after a command)."""
    from evaluators.lockstep import play

    cfg, task = small_task
    code = code_dir(tmp_path, cfg, "sft_grpo")
    assert sorted(p.name for p in code.iterdir()) == ["a2rl_client.py", "sft_grpo.py", "task_prompt.py"]
    agent = load_script(code / "sft_grpo.py")
    env = task.environment()
    plans = {inst.name: json.loads(path.read_text())["walkthrough"]
             for inst, path in zip(env.instances("train"), task.train_games())}

    by_goal = {}
    for inst in env.instances("train"):
        episode = env.open(inst)
        episode.reset()
        by_goal[f"Task: {episode.goal.strip().rstrip('.')}."] = plans[inst.name]
        episode.close()

    def replies(chats):  # the expert's next command, wrapped the way a chatty model might
        out = []
        for chat in chats:
            task_line, previous = chat[-1]["content"].splitlines()[:2]
            previous = previous.removeprefix("Previous commands: ")
            command = by_goal[task_line][0 if previous == "none" else len(previous.split("; "))]
            out.append(f"<think>go on</think>Action: {command} because it is next")
        return out

    graders: list[list[dict]] = []
    agents: list[list[dict]] = []

    def grader_generate(chats):
        graders.extend(chats)
        return replies(chats)

    class Policy:  # sft_grpo's policy interface: the model is replaced, its chats recorded
        def __call__(self, chats, sample=False, temperature=1.0):
            agents.extend(chats)
            return replies(chats)

    instances = env.instances("train")
    assert all(ep["won"] for ep in play(env, instances, grader_generate))  # the grader plays them as eval games
    played = agent.play(InProcessEnv(env), Policy(), [(inst.name, []) for inst in instances], env.max_steps,
                        record=True)
    assert [ep["won"] for ep in played] == [True] * len(instances)
    assert sorted(map(json.dumps, agents)) == sorted(map(json.dumps, graders))
    states = [s["messages"] for ep in played for s in ep["states"]]
    assert sorted(map(json.dumps, states)) == sorted(map(json.dumps, graders))  # what GRPO trains on
    rows = task.train_rows()
    sft = load_script(code / "sft_grpo.py")
    assert [d["prompt"] for d in sft.sft_rows(rows)] == [task.messages(row) for row in rows]


def test_sft_grpo_keeps_its_last_submission_for_its_last_round(small_task, tmp_path):
    """Fast GRPO rounds with a submission every 2nd once spent all of a cell's submissions in a minute, and the
    cell ended with its time unused."""
    cfg, _ = small_task
    agent = load_script(code_dir(tmp_path, cfg, "sft_grpo") / "sft_grpo.py")
    remaining, submitted = 3, []
    for n in range(1, 21):
        last = n == 20
        if agent.submit_now(n, 2, last, remaining):
            submitted.append(n)
            remaining -= 1
    assert submitted == [2, 4, 20]
    assert agent.submit_now(3, 2, True, 1) and not agent.submit_now(4, 2, False, 1)
    assert agent.submit_now(4, 2, False, None)  # no submission limit


def test_the_client_keeps_its_connection_and_reopens_one_the_server_closed():
    """a2rl_client.KeepAlive: requests share one connection while the server keeps it; one the server closed while it
    was idle (a proxy's keep-alive timeout) is opened anew and the request sent again, answered as usual."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from agents.builtin.a2rl_client import KeepAlive

    connections, closing = [], {"after_each": False}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keeps the connection unless told otherwise

        def setup(self):
            super().setup()
            connections.append(self.client_address)

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            answer = json.dumps({"echo": body, "auth": self.headers["Authorization"], "path": self.path}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)
            self.close_connection = closing["after_each"]  # closed without a "Connection: close" header

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        http = KeepAlive(f"http://127.0.0.1:{server.server_address[1]}/task/env", "tok")
        for i in range(3):
            assert http("/step", {"i": i}) == (200, {"echo": {"i": i}, "auth": "Bearer tok", "path": "/task/env/step"})
        assert len(connections) == 1
        closing["after_each"] = True
        for i in range(3):
            assert http("/step", {"i": i})[0] == 200
        assert len(connections) == 3  # the 2nd and 3rd found the last one closed (sent again on a new one)
        server.shutdown()
        server.server_close()
        code, answer = http("/step", {"i": 9})
        assert code == 0 and "Error" in answer["error"]  # no server: status 0, as `http` answers it
    finally:
        server.server_close()
