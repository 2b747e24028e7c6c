"""ALFWorld's `paper` protocol: the prompt and reply handling of the original benchmark's grader (RD-Agent's
autorl_bench `benchmarks/alfworld/eval.py`, which follows ReAct's alfworld.ipynb).

A raw text completion, no chat: a header, the two ReAct examples for the game's task type (`react_<key>_1`, then
`react_<key>_0`, from ReAct's react_prompts.json, loaded at run time), `\\nHere is the task.\\n`, the first observation
without its welcome banner, then `\\n>`; each step adds ` <action>\\n<observation>\\n>`, the whole history kept. A
reply is decoded greedily up to 100 tokens and cut at the first newline; stripped, it is sent to the game as it is
(no matching to the admissible commands, which are never shown). A `think: ...` reply is sent too (the game answers
"Nothing happens." and the step counts) and is shown to the model as `OK.`.

The released original (rdagent 1.0.0) makes each prompt fit its vLLM context (max_model_len 4096) before it decodes:
counted with the submitted model's own tokenizer, a prompt that leaves fewer than 100 tokens free is cut to its last
3,995 tokens, decoded back to text (`fit`). The cut is blind to the transcript's structure: the header and the
examples go first, then the task and the oldest steps; the current observation and the final `>` stay; it may fall
inside a word or a character. A prompt that fits is sent as it is.

Standard library only: a2rl copies it into an agent's code/ as task_prompt.py, so an agent builds the grader's
prompts from the same file.

    examples = load_examples(path)                     # react_prompts.json
    render(examples, task_type, observations, history) # the prompt at a step
    parse(reply)                                       # the action sent to the game
    fit(prompt, tokenizer)                             # the text the grader decodes from (a long prompt cut)
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

HEADER = "Interact with a household to solve a task. Here are two examples.\n"
TASK_HEADER = "\nHere is the task.\n"
MAX_NEW_TOKENS = 100
STOP = ("\n",)
THINK = "think:"
THINK_OBSERVATION = "OK."
MAX_STEPS = 50
MAX_MODEL_LEN = 4096  # the original's vLLM context (eval.py's max_model_len); a prompt is cut to fit it
# A game's task type (generated games: traj_data.json's task_type; upstream data: its folder name) starts with one
# of these; the value names its ReAct examples. In the original's order (it takes the first prefix that matches).
EXAMPLE_KEYS = {
    "pick_and_place": "put",
    "pick_clean_then_place": "clean",
    "pick_heat_then_place": "heat",
    "pick_cool_then_place": "cool",
    "look_at_obj": "examine",
    "pick_two_obj": "puttwo",
}
FILE_NAME = "react_prompts.json"  # as RD-Agent ships it beside eval.py (ReAct's prompts/alfworld_3prompts.json)


def example_key(task_type: str) -> str:
    """The ReAct examples' key for a task type or an upstream game's folder name."""
    for prefix, key in EXAMPLE_KEYS.items():
        if task_type.startswith(prefix):
            return key
    raise ValueError(f"task type {task_type!r} is none of ALFWorld's six ({', '.join(EXAMPLE_KEYS)}): the paper "
                     "protocol has no ReAct examples for it")


def load_examples(path: str | Path) -> dict[str, str]:
    """ReAct's few-shot examples from react_prompts.json; every key the six task types use must be there."""
    path = Path(path)
    try:
        examples = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"cannot read the ReAct examples from {path}: {e}") from e
    wanted = [f"react_{key}_{i}" for key in EXAMPLE_KEYS.values() for i in (1, 0)]
    missing = [k for k in wanted if not isinstance(examples.get(k) if isinstance(examples, dict) else None, str)]
    if missing:
        raise ValueError(f"{path} is not ReAct's react_prompts.json: it lacks {', '.join(missing[:4])}"
                         f"{' ...' if len(missing) > 4 else ''}")
    return examples


def first_observation(observation: str) -> str:
    """The first observation without the welcome banner (everything before its first blank line)."""
    return "\n".join(observation.split("\n\n")[1:])


def shown_observation(action: str, observation: str) -> str:
    """What the model sees after an action: `OK.` after a thought, else the game's answer (an old engine's
    `You arrive at loc N. ` cut off, as ReAct did)."""
    if action.startswith(THINK):
        return THINK_OBSERVATION
    if observation.startswith("You arrive at loc "):
        observation = observation[observation.find(". ") + 2:]
    return observation


def prefix(examples: dict[str, str], task_type: str) -> str:
    key = example_key(task_type)
    return HEADER + examples[f"react_{key}_1"] + examples[f"react_{key}_0"] + TASK_HEADER


def render(examples: dict[str, str], task_type: str, observations: Sequence[str], history: Sequence[str]) -> str:
    """The prompt at a step: `observations[0]` is the game's first answer (at reset), `observations[k]` its answer to
    `history[k - 1]`; the actions taken so far are `history`."""
    if len(observations) != len(history) + 1:
        raise ValueError(f"{len(history)} actions need {len(history) + 1} observations, got {len(observations)}")
    text = prefix(examples, task_type) + first_observation(observations[0]) + "\n>"
    for action, observation in zip(history, observations[1:]):
        text += f" {action}\n{shown_observation(action, observation)}\n>"
    return text


def parse(reply: str, actions: Sequence[str] | None = None) -> str:
    """The action sent to the game: the reply up to its first newline, stripped, nothing else."""
    return (reply or "").split(STOP[0], 1)[0].strip()


def fit(prompt: str, tokenizer, max_model_len: int = MAX_MODEL_LEN, max_new_tokens: int = MAX_NEW_TOKENS) -> str:
    """The text the grader decodes from: `prompt` while it leaves room for `max_new_tokens` in `max_model_len`, else
    the text of its last `max_model_len - max_new_tokens - 1` tokens. `tokenizer` is the submitted model's (a
    transformers tokenizer, or anything with its `encode` and `decode`): counted with `encode` (the tokenizer's
    special tokens added, e.g. a BOS), cut tokens turned back into text with `decode` (special tokens kept; a
    character whose bytes were split decodes to U+FFFD), as the original's eval.py counts and cuts with vLLM's
    tokenizer; the cut text is then tokenised again to be decoded from."""
    ids = tokenizer.encode(prompt)
    if len(ids) + max_new_tokens <= max_model_len:
        return prompt
    return tokenizer.decode(ids[-max(max_model_len - max_new_tokens - 1, 1):])
