"""Writes data/train.jsonl: every single-digit question (a, b in 0..10; +, -, *; four phrasings), shuffled with a
fixed seed. A generator, no network."""
import json
import random
from pathlib import Path

PHRASINGS = ["What is {a} {op} {b}?", "Solve {a} {op} {b}.", "Compute {a} {op} {b}.", "Evaluate: {a} {op} {b}."]
VALUE = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}

items = [{"question": p.format(a=a, op=op, b=b), "answer": str(VALUE[op](a, b)), "op": op}
         for a in range(11) for b in range(11) for op in VALUE for p in PHRASINGS]
random.Random(0).shuffle(items)
Path("data").mkdir(exist_ok=True)
with open("data/train.jsonl", "w", encoding="utf-8") as f:
    for item in items:
        f.write(json.dumps(item) + "\n")
print(f"wrote {len(items)} items to data/train.jsonl")
