"""sft_grpo: SFT warm-up on the expert trajectories, then GRPO with online rollouts through the rollout service.

Run in a workspace of an interactive (level 3) task (`python code/sft_grpo.py`); reads run.json.

1. SFT: trl's SFTTrainer on data/train.jsonl (each row's `messages` -> `completion`: loss on the command only), for
   `sft_steps` steps or `sft_fraction` of the time budget; saves output/sft and submits it.
2. GRPO, in rounds (trl's GRPOTrainer, one trainer per round on the same model):
   - collect states: play `episodes_per_round` episodes of random train games with the current policy (greedy,
     the grader's decoding) through the rollout service, all in lockstep (one batched generate and one step batch
     request per step: a2rl_client.Env);
   - for a batch of those states the trainer samples `num_generations` candidate commands each; the reward function
     scores a candidate by the episode's success: it resets a session to the same game with the state's command
     prefix plus the candidate (the service replays them: the engine is deterministic), then lets the current policy
     play on greedily for at most `horizon` steps; reward 1 if the game is won, else 0. Candidates that repeat in a
     group are played once;
   - after each round: log the round's on-policy success and mean reward, save output/grpo-N, submit it when a
     submission and its grading fit (always after the last round).

Knobs (run.json "agent_args"): see DEFAULTS. Runs inside the sandbox on torch, transformers, trl and datasets, and
a2rl_client.py (copied beside it, with the task's task_prompt.py): the rollout service, the submitter, and the task's
own render and parse, so every chat it plays and trains on is the one the grader sends.
"""
from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path

import a2rl_client

DEFAULTS = {
    # SFT warm-up
    "sft_steps": 600,
    "sft_fraction": 0.5,          # at most this share of the time budget
    "sft_learning_rate": 2e-3,
    "sft_batch_size": 16,
    "sft_warmup_steps": 30,
    "max_length": 1024,
    # GRPO
    "grpo_rounds": 50,
    "grpo_steps_per_round": 8,
    "grpo_learning_rate": 2e-4,
    "num_generations": 4,
    "states_per_step": 2,         # prompts per GRPO step (batch = states_per_step x num_generations)
    "episodes_per_round": 4,
    "horizon": 12,                # greedy steps after a candidate before the episode counts as lost
    "temperature": 1.0,
    "loss_type": "dapo",
    "scale_rewards": "group",
    "max_new_tokens": 16,
    "submit_every": 2,            # GRPO rounds between submissions (the last round is always submitted, and the
                                  # last submission is kept for it)
    # time
    "margin_s": 10.0,
    "grading_estimate_s": 60.0,
    "threads": None,
    "seed": None,
    "activation_checkpointing": False,  # trl turns it on: ~10% slower on small models, worth it only for memory
}


def log(msg: str) -> None:
    print(f"[sft_grpo {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Policy:
    """Batched generation with the model being trained (left padding, greedy or sampled)."""

    def __init__(self, model, tokenizer, max_new_tokens: int):
        self.model, self.tok, self.max_new_tokens = model, tokenizer, int(max_new_tokens)

    def __call__(self, chats: list[list[dict]], sample: bool = False, temperature: float = 1.0) -> list[str]:
        import torch

        if not chats:
            return []
        texts = [self.tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in chats]
        enc = self.tok(texts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
        enc = {k: v.to(self.model.device) for k, v in enc.items()}
        kwargs = {"do_sample": True, "temperature": temperature, "top_k": 0} if sample else {"do_sample": False}
        with torch.no_grad():
            out = self.model.generate(**enc, max_new_tokens=self.max_new_tokens, pad_token_id=self.tok.pad_token_id,
                                      eos_token_id=self.tok.eos_token_id, **kwargs)
        return self.tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)


def play(env: a2rl_client.Env, policy: Policy, starts: list[tuple[str, list[str]]], horizon: int,
         record: bool = False) -> list[dict]:
    """Play from each (game, prefix) in lockstep with the greedy policy for at most `horizon` more steps.

    Returns per start {"won", "steps", "states": [{"game", "prefix", "messages", "admissible"}] (when record)}."""
    out = []
    for chunk in range(0, len(starts), env.max_sessions):
        part = starts[chunk:chunk + env.max_sessions]
        answers = env.starts(part)
        eps = [{"game": g, "history": list(p), "task": a["task"], "last": a, "won": a["won"], "steps": 0,
                "states": [], "sid": a["session_id"]} for (g, p), a in zip(part, answers)]
        for _ in range(horizon):
            active = [e for e in eps if not e["last"]["done"]]
            if not active:
                break
            chats = [a2rl_client.render(e["task"], e["last"]["observation"], e["last"]["admissible_commands"],
                                        e["history"]) for e in active]
            replies = policy(chats)
            moves = []
            for e, chat, reply in zip(active, chats, replies):
                cmd = a2rl_client.parse(reply, e["last"]["admissible_commands"])
                if record:
                    e["states"].append({"game": e["game"], "prefix": list(e["history"]), "messages": chat,
                                        "admissible": e["last"]["admissible_commands"]})
                e["history"].append(cmd)
                moves.append((e["sid"], cmd))
            for e, answer in zip(active, env.steps(moves)):
                e["last"] = answer
                e["won"] = e["won"] or answer["won"]
                e["steps"] += 1
        env.release([e["sid"] for e in eps])
        out += [{"won": e["won"], "steps": e["steps"], "states": e["states"]} for e in eps]
    return out


class EnvReward:
    """GRPO reward: does the episode succeed when this command is played next and the policy goes on greedily?"""

    __name__ = "env_success"

    def __init__(self, env: a2rl_client.Env, policy: Policy, horizon: int):
        self.env, self.policy, self.horizon = env, policy, int(horizon)
        self.calls: list[float] = []
        self.known: dict[tuple, float] = {}  # horizon 0: a command's outcome never changes (the game is fixed)

    def __call__(self, prompts, completions, game, prefix, admissible, **kwargs) -> list[float]:
        starts, index = [], {}
        keys = []
        for comp, g, p, adm in zip(completions, game, prefix, admissible):
            text = comp[-1]["content"] if isinstance(comp, list) else str(comp)
            key = (g, tuple(p) + (a2rl_client.parse(text, list(adm)),))
            keys.append(key)
            if key not in index and key not in self.known:
                index[key] = len(starts)
                starts.append((key[0], list(key[1])))
        was_training = self.policy.model.training
        self.policy.model.eval()
        try:
            results = play(self.env, self.policy, starts, self.horizon) if starts else []
        finally:
            self.policy.model.train(was_training)
        outcome = {k: 1.0 if results[i]["won"] else 0.0 for k, i in index.items()}
        if self.horizon == 0:
            self.known.update(outcome)
        rewards = [self.known[k] if k in self.known else outcome[k] for k in keys]
        self.calls.append(sum(rewards) / len(rewards))
        return rewards


# ------------------------------------------------------------------------------------------------------ training

def sft_rows(rows: list[dict]):
    from datasets import Dataset

    return Dataset.from_list([a2rl_client.sft_example(row) for row in rows])


def run_sft(model, tokenizer, rows: list[dict], args: dict, seed: int, until: float, out_dir: Path) -> None:
    import torch
    from transformers import TrainerCallback
    from trl import SFTConfig, SFTTrainer

    use_gpu = torch.cuda.is_available()

    class Deadline(TrainerCallback):
        def on_step_end(self, _args, state, control, **kw):
            if time.time() >= until:
                log(f"SFT stops at step {state.global_step}: its time share is used")
                control.should_training_stop = True

    config = SFTConfig(
        output_dir=str(out_dir / ".sft-trainer"), max_steps=int(args["sft_steps"]),
        per_device_train_batch_size=int(args["sft_batch_size"]), learning_rate=float(args["sft_learning_rate"]),
        lr_scheduler_type="constant_with_warmup", warmup_steps=int(args["sft_warmup_steps"]),
        max_length=int(args["max_length"]), seed=seed, data_seed=seed, save_strategy="no", report_to=[],
        logging_steps=max(1, int(args["sft_steps"]) // 10), disable_tqdm=True, use_cpu=not use_gpu,
        bf16=use_gpu and torch.cuda.is_bf16_supported(), dataloader_num_workers=0,
        **a2rl_client.checkpointing(SFTConfig, bool(args["activation_checkpointing"])))
    SFTTrainer(model=model, args=config, train_dataset=sft_rows(rows), processing_class=tokenizer,
               callbacks=[Deadline()]).train()


def grpo_round(model, tokenizer, states: list[dict], reward: EnvReward, args: dict, seed: int, out_dir: Path,
               steps: int) -> dict:
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    g, per = int(args["num_generations"]), int(args["states_per_step"])
    data = Dataset.from_list([{"prompt": s["messages"], "game": s["game"], "prefix": s["prefix"],
                               "admissible": s["admissible"]} for s in states])
    use_gpu = torch.cuda.is_available()
    config = GRPOConfig(
        output_dir=str(out_dir / ".grpo-trainer"), max_steps=steps, per_device_train_batch_size=per * g,
        num_generations=g, max_completion_length=int(args["max_new_tokens"]),
        temperature=float(args["temperature"]), learning_rate=float(args["grpo_learning_rate"]), beta=0.0,
        loss_type=args["loss_type"], scale_rewards=args["scale_rewards"],
        lr_scheduler_type="constant", warmup_steps=0, seed=seed, data_seed=seed, save_strategy="no", report_to=[],
        logging_steps=1, disable_tqdm=True, use_cpu=not use_gpu, bf16=False, dataloader_num_workers=0,
        **a2rl_client.checkpointing(GRPOConfig, bool(args["activation_checkpointing"])))
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=config, train_dataset=data,
                          processing_class=tokenizer)
    reward.calls.clear()
    trainer.train()
    return {"reward_mean": sum(reward.calls) / len(reward.calls) if reward.calls else None,
            "reward_by_step": [round(r, 3) for r in reward.calls]}


def save(model, tokenizer, path: Path) -> str:
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return os.path.relpath(path, Path.cwd())


def submit_now(round_n: int, every: int, last: bool, remaining: int | None) -> bool:
    """Whether GRPO round `round_n` is submitted: every `every`-th round and the last one, but the last submission
    left is kept for the last round (spent early on fast rounds, it would end the run with its time unused)."""
    return last or (round_n % every == 0 and (remaining is None or remaining > 1))


def main() -> int:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, set_seed

    run = a2rl_client.load_run()
    args = {**DEFAULTS, **(run.get("agent_args") or {})}
    seed = int(args["seed"] if args["seed"] is not None else run.get("seed", 0))
    if args["threads"]:
        torch.set_num_threads(int(args["threads"]))
    set_seed(seed)
    rng = random.Random(seed)
    started, deadline = time.time(), float(run["deadline"])
    rows = [json.loads(line) for line in Path(run["train_data"]).read_text().splitlines() if line.strip()]
    out_dir = Path(run["output_dir"])
    submitter = a2rl_client.Submitter(run, args["grading_estimate_s"])
    if not submitter.can_submit():
        log("no submissions allowed; nothing to do")
        return 0
    tokenizer = AutoTokenizer.from_pretrained(run["model_path"])
    model = AutoModelForCausalLM.from_pretrained(run["model_path"], dtype=torch.float32)
    if torch.cuda.is_available():
        model.to("cuda")
    log(f"{len(rows)} expert steps, {deadline - started:.0f} s left, args {args}")

    # 1. SFT warm-up
    reserve = lambda: submitter.grading_s + float(args["margin_s"])  # noqa: E731
    sft_until = min(started + float(args["sft_fraction"]) * (deadline - started), deadline - reserve())
    t = time.time()
    run_sft(model, tokenizer, rows, args, seed, sft_until, out_dir)
    submitter.submit(save(model, tokenizer, out_dir / "sft"))
    log(f"SFT done in {time.time() - t:.0f} s; submitted output/sft")

    # 2. GRPO with online rollouts
    try:
        env = a2rl_client.Env(run)
    except RuntimeError as e:
        log(f"no rollout service ({e}); stopping after SFT")
        submitter.wait()
        return 0
    policy = Policy(model, tokenizer, args["max_new_tokens"])
    reward = EnvReward(env, policy, args["horizon"])
    per_round = int(args["grpo_steps_per_round"]) * int(args["states_per_step"])
    round_s, history, last_saved = None, [], None
    for n in range(1, int(args["grpo_rounds"]) + 1):
        left = deadline - time.time() - reserve()
        if round_s is not None and left < round_s or left <= 0 or not submitter.can_submit():
            break
        t = time.time()
        games = [rng.choice(env.games)["name"] for _ in range(int(args["episodes_per_round"]))]
        model.eval()
        episodes = play(env, policy, [(g, []) for g in games], env.max_steps, record=True)
        success = sum(e["won"] for e in episodes) / len(episodes)
        states = [s for e in episodes for s in e["states"]]
        if not states:
            continue
        states = [rng.choice(states) for _ in range(per_round)]
        model.train()
        stats = grpo_round(model, tokenizer, states, reward, args, seed + n, out_dir, int(args["grpo_steps_per_round"]))
        round_s = time.time() - t
        history.append({"round": n, "onpolicy_success": success, **stats, "round_s": round(round_s, 1)})
        log(json.dumps(history[-1]))
        last = n == int(args["grpo_rounds"]) or deadline - time.time() - reserve() < round_s
        # Submit only when its grading ends before the deadline: everything is stopped then.
        if submit_now(n, int(args["submit_every"]), last, submitter.remaining) and deadline - time.time() > reserve():
            last_saved = save(model, tokenizer, out_dir / f"grpo-{n}")
            submitter.submit(last_saved)
            log(f"submitted {last_saved}")
        else:
            last_saved = None
    submitter.wait()
    (out_dir / "grpo_history.json").write_text(json.dumps(history, indent=1))
    log(f"done: {len(history)} GRPO round(s), {len(submitter.results)} graded, best score {submitter.best()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
