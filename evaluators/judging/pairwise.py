"""The model's output against the reference, one instruction at a time, in alpaca_eval's style.

Which output is shown first is decided per instruction by a seeded hash (not by call order), so a rerun asks the
judge the same questions and a judge's position bias falls evenly on both sides. Preferences use alpaca_eval's
encoding: 1 the reference wins, 2 the model wins, 1.5 a draw; an item's score is preference - 1 (0, 0.5, 1).
"""
from __future__ import annotations

import difflib
import hashlib
import json
import re
from concurrent.futures import ThreadPoolExecutor

from contracts.screening import JudgePrompt
from evaluators.judging.client import chat

JUDGE_VERSION = 1  # bump when a judge's prompt or parsing changes: cached judgements of the old one are not served
FIRST, SECOND, DRAW = "first", "second", "draw"

SYSTEM = ("You are a careful, impartial judge of instruction following. You compare two outputs written for the "
          "same instruction and say which one a thoughtful human would prefer.")
USER = """Which output better follows the instruction? Judge helpfulness, correctness, relevance and clarity. The
order of the outputs says nothing about their quality, and a longer output is not better for being longer.

## Instruction
{instruction}

## Output (a)
{first}

## Output (b)
{second}

Answer with exactly one of: Output (a), Output (b)."""
VERDICT = re.compile(r"output\s*\(?\s*([ab])\b", re.IGNORECASE)
# what the screen of answers aimed at this judge reads (contracts/screening.py): its prompt, and the labels
# its verdict is read from
JUDGE_PROMPT = JudgePrompt("a2rl's pairwise judge", (SYSTEM, USER), labels=("Output (a)", "Output (b)"))


class LLMJudge:
    """A driver asked with the prompt above at temperature 0, through the driver proxy (evaluators.judging.client)."""

    def __init__(self, driver: dict, proxy_url: str, key: str, max_tokens: int = 16, timeout_s: float = 300,
                 concurrency: int = 8):
        import httpx

        self.driver, self.proxy_url, self.key, self.max_tokens = driver, proxy_url.rstrip("/"), key, max_tokens
        self.concurrency = concurrency
        self.client = httpx.Client(timeout=timeout_s, limits=httpx.Limits(max_connections=concurrency))
        self.sample = 0  # > 0: keep this many (prompt, reply) pairs to ask again (repeat_agreement)
        self.asked: list[tuple] = []  # (system, user, reply, temperature, max_tokens)

    @property
    def identity(self) -> dict:
        return {"kind": "llm", "provider": self.driver["provider"], "model": self.driver.get("model"),
                "base_url": self.driver.get("base_url"), "version": JUDGE_VERSION}

    def ask(self, system: str, user: str, temperature: float | None = 0, max_tokens: int | None = -1) -> str:
        """One reply (greedy unless told otherwise; max_tokens -1: the judge's own, None: no limit): what a task with
        a rubric of its own (deepsearchqa's answer check) asks."""
        max_tokens = self.max_tokens if max_tokens == -1 else max_tokens
        reply = chat(self.client, self.proxy_url, self.key, self.driver, system, user, max_tokens, temperature)
        if len(self.asked) < self.sample:
            self.asked.append((system, user, reply, temperature, max_tokens))
        return reply

    def repeat_agreement(self) -> dict:
        """The kept prompts asked once more: the share of identical replies. A provider at temperature 0 is not
        bound to be deterministic; this says how far this judge is, on a sample."""
        kept, self.sample = list(self.asked), 0
        same = sum(chat(self.client, self.proxy_url, self.key, self.driver, system, user, max_tokens,
                        temperature) == reply for system, user, reply, temperature, max_tokens in kept)
        return {"n": len(kept), "agreement": same / len(kept) if kept else None}

    def compare(self, instruction: str, first: str, second: str, row: dict) -> str:
        reply = self.ask(SYSTEM, USER.format(instruction=instruction, first=first, second=second))
        match = VERDICT.search(reply)
        if match is None:  # alpaca_eval leaves such an annotation out; we count it a draw, and say so per item
            return DRAW
        return FIRST if match.group(1).lower() == "a" else SECOND

    def close(self) -> None:
        self.client.close()


class RubricJudge:
    """The offline judge: the output closer to the instruction's hidden gold answer wins (difflib's ratio on the
    stripped texts); equally close outputs draw. Needs no model and no network."""

    concurrency = 1

    def __init__(self, gold_key: str = "gold"):
        self.gold_key = gold_key

    @property
    def identity(self) -> dict:
        return {"kind": "rubric", "gold": self.gold_key, "version": JUDGE_VERSION}

    def compare(self, instruction: str, first: str, second: str, row: dict) -> str:
        gold = row[self.gold_key].strip()
        a = difflib.SequenceMatcher(None, first.strip(), gold).ratio()
        b = difflib.SequenceMatcher(None, second.strip(), gold).ratio()
        return DRAW if a == b else FIRST if a > b else SECOND

    def close(self) -> None:
        pass


def model_goes_first(seed: int, item_id: str) -> bool:
    return hashlib.sha256(f"{seed}:{item_id}".encode()).digest()[0] & 1 == 1


def judgement_key(judge_identity: dict, instruction: str, first: str, second: str) -> str:
    blob = json.dumps([judge_identity, instruction, first, second], ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


def judge_all(judge, rows: list[dict], outputs: list[str], seed: int, cache=None) -> list[dict]:
    """One item per row: {id, completion, score, preference, model_first, cached, output_len, reference_len}.
    rows need `id`, `instruction` and `reference`; cache: a ScoreCache for judgements (None: no caching)."""

    def one(row: dict, output: str) -> dict:
        model_first = model_goes_first(seed, row["id"])
        first, second = (output, row["reference"]) if model_first else (row["reference"], output)
        key = judgement_key(judge.identity, row["instruction"], first, second)
        held = cache.get(key) if cache is not None else None
        verdict = held["verdict"] if held is not None else judge.compare(row["instruction"], first, second, row)
        if held is None and cache is not None:
            cache.put(key, {"verdict": verdict})
        model_won = verdict == (FIRST if model_first else SECOND)
        preference = 1.5 if verdict == DRAW else 2.0 if model_won else 1.0
        return {"id": row["id"], "completion": output, "score": preference - 1.0, "preference": preference,
                "model_first": model_first, "cached": held is not None, "output_len": len(output),
                "reference_len": len(row["reference"])}

    with ThreadPoolExecutor(max_workers=max(1, judge.concurrency)) as pool:
        return list(pool.map(one, rows, outputs))
