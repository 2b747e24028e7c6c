"""sft: supervised fine-tuning in rounds, submitting after each one.

Run in a workspace (`python code/sft.py`). Reads run.json, trains the base model with trl's SFTTrainer on
data/train.jsonl (prompt -> completion as chat, so the loss is on the completion only), saves output/round-N,
submits it, and keeps training while another round and its grading fit before the deadline. Grading runs in a
background thread, so the next round trains while the last one is graded.

Knobs (run.json "agent_args"): steps_per_round, max_rounds, learning_rate, batch_size, warmup_steps,
lr_scheduler_type, weight_decay, max_length, margin_s (kept free before the deadline), grading_estimate_s (a guess
until a grading has been timed), threads (torch threads; default: OMP_NUM_THREADS), activation_checkpointing,
pace_window (steps the pace is timed over), min_round_steps (the shortest round worth a submission).

Runs inside the sandbox on torch, transformers, trl and datasets, and a2rl_client.py (copied beside it): the grader's
chat for each row and the background submitter.
"""
from __future__ import annotations

import os
import sys
import time
from collections import deque
from pathlib import Path

import a2rl_client

DEFAULTS = {
    "steps_per_round": 250,
    "max_rounds": 20,
    "learning_rate": 1e-3,
    "batch_size": 16,
    "warmup_steps": 30,
    "lr_scheduler_type": "constant_with_warmup",
    "weight_decay": 0.0,
    "max_length": 1024,
    "margin_s": 5.0,
    "grading_estimate_s": 15.0,
    "threads": None,
    "activation_checkpointing": False,  # trl turns it on: ~10% slower on small models, worth it only for memory
    "pace_window": 20,                   # steps the time per step is measured over
    "min_round_steps": 10,               # a round shorter than this is not worth a submission
}


def log(msg: str) -> None:
    print(f"[sft {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def load_rows(path) -> list[dict]:
    import json

    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def chat_dataset(rows: list[dict]):
    """prompt/completion examples, the prompt the grader sends for each row (a2rl_client.sft_example)."""
    from datasets import Dataset

    return Dataset.from_list([a2rl_client.sft_example(row) for row in rows])


def train(model_path, rows: list[dict], output_dir, args: dict, seed: int, deadline: float,
          on_round, grading_s=None, callbacks=()) -> list[str]:
    """Train in rounds of args["steps_per_round"]; after each, save output_dir/round-N and call
    on_round(path) -> bool (False: stop). A round is only started when it and its grading (grading_s(): the
    current estimate in seconds) end before the deadline. Returns the saved round directories. callbacks: more
    trainer callbacks (the tests slow the first steps down with one)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback, set_seed
    from trl import SFTConfig, SFTTrainer

    args = {**DEFAULTS, **(args or {})}
    grading_s = grading_s or (lambda: float(args["grading_estimate_s"]))
    if args["threads"]:
        torch.set_num_threads(int(args["threads"]))
    set_seed(seed)
    output_dir = Path(output_dir)
    use_gpu = torch.cuda.is_available()
    bf16 = use_gpu and torch.cuda.is_bf16_supported()
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    steps, rounds = int(args["steps_per_round"]), int(args["max_rounds"])
    config = SFTConfig(
        output_dir=str(output_dir / ".trainer"), max_steps=steps * rounds,
        per_device_train_batch_size=int(args["batch_size"]), learning_rate=float(args["learning_rate"]),
        lr_scheduler_type=args["lr_scheduler_type"],
        warmup_steps=int(args["warmup_steps"]), weight_decay=float(args["weight_decay"]),
        max_length=int(args["max_length"]), seed=seed, data_seed=seed, bf16=bf16, use_cpu=not use_gpu,
        save_strategy="no", report_to=[], logging_steps=max(1, steps // 5), disable_tqdm=True,
        dataloader_num_workers=0, **a2rl_client.checkpointing(SFTConfig, bool(args["activation_checkpointing"])),
    )
    saved: list[str] = []

    class Rounds(TrainerCallback):
        """Saves and hands over a round at its last step. A round gets `steps` steps, or fewer when only fewer fit
        before the deadline (with its grading and the margin): a round that turns out too long is shortened, not
        ended, and training stops when not even `min_round_steps` fit. The pace is timed over the last
        `pace_window` steps: the first steps carry warm-up costs (CUDA's, measured at 20x a warm step on an H100)
        that must not decide the rest of the run."""

        def __init__(self):
            self.ticks: deque = deque(maxlen=int(args["pace_window"]) + 1)
            self.round_start, self.round_end = 0, steps

        def per_step(self) -> float | None:
            t = self.ticks
            return (t[-1] - t[0]) / (len(t) - 1) if len(t) >= 2 else None

        def fit(self, now: float, reserve: float) -> int:
            """Steps that fit before the deadline, keeping the reserve (grading and margin) free."""
            per_step = self.per_step()
            return int((deadline - now - reserve) / per_step) if per_step else steps

        def on_step_end(self, _args, state, control, **kw):
            now, step = time.time(), state.global_step
            self.ticks.append(now)
            reserve = grading_s() + float(args["margin_s"])
            least = int(args["min_round_steps"])
            out_of_time = now + reserve > deadline
            if step < self.round_end and not out_of_time:
                # Trust the pace only after some steps: one slow step (a busy machine) must not cut a round.
                if len(self.ticks) <= 10 or step + self.fit(now, reserve) >= self.round_end:
                    return  # on track
                if self.fit(now, reserve) >= least:
                    self.round_end = step + self.fit(now, reserve)  # shorten the round to what fits, go on
                    return
            if step - self.round_start < least and saved:
                control.should_training_stop = True  # too little new training to be worth a submission
                return
            path = output_dir / f"round-{len(saved) + 1}"
            kw["model"].save_pretrained(path)
            tokenizer.save_pretrained(path)
            saved.append(str(path))
            per_step = self.per_step()
            log(f"round {len(saved)} saved at step {step}" + (f" ({per_step:.3f} s/step)" if per_step else ""))
            keep_going = on_round(str(path)) is not False
            fit = self.fit(time.time(), grading_s() + float(args["margin_s"]))
            if not keep_going or fit < least:
                control.should_training_stop = True
            else:
                self.round_start, self.round_end = step, step + min(steps, fit)

    trainer = SFTTrainer(model=model, args=config, train_dataset=chat_dataset(rows), processing_class=tokenizer,
                         callbacks=[Rounds(), *callbacks])
    trainer.train()
    return saved


def main() -> int:
    run = a2rl_client.load_run()
    args = {**DEFAULTS, **(run.get("agent_args") or {})}
    deadline = float(run["deadline"])
    rows = load_rows(run["train_data"])
    log(f"{len(rows)} training rows, {deadline - time.time():.0f} s left, args {args}")
    submitter = a2rl_client.Submitter(run, args["grading_estimate_s"])

    def on_round(path: str) -> bool:
        # submit the path relative to the workspace, as the grading API expects
        submitter.submit(os.path.relpath(path, Path.cwd()))
        return submitter.can_submit()

    if not submitter.can_submit():
        log("no submissions allowed; nothing to do")
        return 0
    saved = train(run["model_path"], rows, run["output_dir"], args, int(run.get("seed", 0)), deadline, on_round,
                  grading_s=lambda: submitter.grading_s)
    submitter.wait()
    log(f"done: {len(saved)} round(s) saved, {len(submitter.results)} graded, best score {submitter.best()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
