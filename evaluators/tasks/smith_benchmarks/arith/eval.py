"""arith's scorer: the reply's last integer against the answer."""
import re


def evaluate(question, model_answer, reference, **extra):
    numbers = re.findall(r"-?\d+", model_answer or "")
    return 1.0 if numbers and int(numbers[-1]) == int(reference) else 0.0
