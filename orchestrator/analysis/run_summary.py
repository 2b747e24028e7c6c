"""An LLM-written summary of one run (the paper's post-hoc summarization), beside its deterministic run report.

Optional: `python -m orchestrator report output_dir=DIR analysis.summarize=gpt` (a conf/driver name; null, the
default, writes none). For every finished cell a driver reads the run report (the source of truth), the code diff
between consecutive submissions (the code snapshots) and a timeline of the agent's trace and submissions, and writes
what the agent tried, why its score moved and its failure class with the evidence: cells/<id>/summary.md.

No sweep runs during a report, so there is no driver proxy to go through: the provider is asked directly with the
proxy's own upstream code (URL joining and where the real key goes: agents.proxy.protocols; retries of 429/5xx:
agents.proxy.upstream; usage and price: agents.proxy.usage) and the judge's request shape
(evaluators.judging.client). Every call is metered as analysis usage, one line each in cells/<id>/analysis_calls.jsonl
(fsynced), never charged to the agent. A summary is cached in summary.json under a key of its prompt and the driver's
model: a second report asks nothing again, and a failed call leaves the run report as it was.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from agents.proxy import upstream
from agents.proxy.protocols import protocol_of_path, upstream_headers, upstream_url
from agents.proxy.upstream import RetryPolicy, UpstreamUnreachable
from agents.proxy.usage import Usage, cost_usd, usage_from_body
from contracts.code_snapshots import diff_text
from contracts.records import append_jsonl, write_json_durably
from contracts.screening import FLAGS as SCREEN_FLAGS
from contracts.screening import describe as describe_screen
from contracts.specs import ConfigError, to_plain
from evaluators.judging.client import CHAT_PROVIDERS, chat_request, reply_text
from orchestrator.analysis import run_report

SUMMARY_MD, SUMMARY_JSON, ANALYSIS_CALLS = "summary.md", "summary.json", "analysis_calls.jsonl"
LINE_LIMIT = 300          # one trace event in the timeline; the full trace stays in the attempt's records
STDOUT_TAIL_LINES = 40    # what an agent without a trace printed last

SYSTEM = """\
You write the post-hoc summary of one run of an autonomous LLM agent that was asked to post-train a base model on a \
task within a fixed budget; a grader scored each model it submitted. You get the run's deterministic report (the \
source of truth: outcome, failure class, score trajectory, budget use), the code changes between its submissions and \
a timeline of what it did (its own trace where its scaffold records one, and its submissions).

Write markdown, at most 300 words, in exactly these three sections:
### What the agent tried
### Why the score moved
### Outcome
The last one names the outcome class exactly as the report does, with the evidence for it: submission numbers, \
scores, commits, files, trace lines. Use only what the materials show; where they do not say, write so. Never \
contradict the report."""


@dataclass(frozen=True)
class Summarizer:
    """The `analysis` config resolved: the driver (its real key read from its api_key_env) and the prompt limits."""
    driver: dict
    real_key: str | None
    max_tokens: int
    max_diff_chars: int
    max_trace_chars: int
    concurrency: int
    retry: RetryPolicy


def summarizer_from_config(analysis, driver_proxy, key: str = "summarize") -> Summarizer | None:
    """From the config's `analysis` (`key`, summarize or audit: a conf/driver name, an inline driver config, or null)
    and `driver_proxy` (its upstream retries). Mistakes are a ConfigError naming the key, before any cell is read."""
    chosen = to_plain(analysis.get(key))
    if chosen is None:
        return None
    from orchestrator.sweep import driver_spec, load_named

    where = f"analysis.{key}"
    driver = load_named("driver", chosen, where) if isinstance(chosen, str) else {"name": where, **chosen}
    driver_spec(driver)  # provider and base_url, checked as an agent's driver's
    name = driver["name"]
    if driver.get("provider") not in CHAT_PROVIDERS:
        raise ConfigError(f"{where}={name}: provider {driver.get('provider')!r} cannot read a run; name a driver "
                          f"with one of {', '.join(CHAT_PROVIDERS)}, or {where}=null")
    env = driver.get("api_key_env")
    real_key = os.environ.get(env) if env else None
    if env and not real_key:
        raise ConfigError(f"{where}={name}: the environment variable {env} (the driver's api_key_env) is "
                          f"not set; set it, or leave {where}=null")
    for knob in ("summary_max_tokens", "summary_max_diff_chars", "summary_max_trace_chars", "summary_concurrency"):
        if not isinstance(analysis[knob], int) or analysis[knob] < 1:
            raise ConfigError(f"analysis.{knob}={analysis[knob]!r} must be a whole number >= 1")
    return Summarizer(driver, real_key, analysis.summary_max_tokens, analysis.summary_max_diff_chars,
                      analysis.summary_max_trace_chars, analysis.summary_concurrency,
                      RetryPolicy(max_attempts=driver_proxy.max_attempts, base_s=driver_proxy.backoff_s))


# -- the prompt --------------------------------------------------------------------------------------------------

def prompt(report: dict, events: list[dict], cell_dir: Path, s: Summarizer) -> str:
    """The user message: the run report, the code diffs between submissions, the timeline (final attempt only)."""
    return "\n".join(["# Run report", "", run_report.render_markdown(report),
                      "# Code changes between submissions", "", *_diffs(report, cell_dir, s.max_diff_chars),
                      "# Timeline (seconds since the attempt started)", "",
                      *_timeline(report, events, cell_dir, s.max_trace_chars)])


def _diffs(report: dict, cell_dir: Path, budget: int) -> list[str]:
    """The code at the first submission, then each change to the next submission with other code."""
    repo = cell_dir / "code.git"
    shots = [(s["index"], s["code_commit"]) for s in report["trajectory"] if s["code_commit"]]
    steps: list[tuple[tuple[int, str] | None, tuple[int, str]]] = []
    prev = None
    for index, sha in shots:
        if prev is None or sha != prev[1]:
            steps.append((prev, (index, sha)))
            prev = (index, sha)
    if not repo.exists() or not steps:
        return ["No code snapshots were recorded.", ""]
    share, out = max(budget // len(steps), 200), []
    for prev, (index, sha) in steps:
        title = (f"## Code at submission #{index} ({sha[:10]}), the first" if prev is None
                 else f"## Submission #{prev[0]} ({prev[1][:10]}) to #{index} ({sha[:10]})")
        try:
            text = diff_text(repo, prev[1] if prev else None, sha)
        except RuntimeError as e:  # a snapshot that never made it into the repository
            text = f"(not comparable: {str(e).splitlines()[0]})"
        out += [title, "", "```diff", _cut(text or "(no change)", share), "```", ""]
    unchanged = len(shots) - len(steps)
    if unchanged:
        out += [f"{unchanged} submission(s) had the same code as the one before.", ""]
    return out


def _timeline(report: dict, events: list[dict], cell_dir: Path, budget: int) -> list[str]:
    attempt = report["attempt"]
    mine = sorted((e for e in events if e["attempt"] == attempt and e["kind"] in ("agent_trace", "submission")),
                  key=lambda e: e["t"])
    traced = any(e["kind"] == "agent_trace" for e in mine)
    lines = [line for line in map(_event_line, mine) if line]
    out = _cut_lines(lines, budget) or ["(no trace and no submission)"]
    if not traced:
        out.append("")
        out.append("The agent's scaffold records no trace (a built-in or command agent): these are its submissions.")
        tail = run_report.tail(cell_dir / f"attempt-{attempt}" / "agent.stdout", STDOUT_TAIL_LINES)
        if tail:
            out += ["", f"Last lines it printed (agent.stdout, attempt {attempt}):", "", "```",
                    _cut(tail, budget // 2), "```"]
    return out + [""]


def _event_line(e: dict) -> str | None:
    p = e["payload"]
    if e["kind"] == "submission":
        score = "not scored" if p.get("score") is None else f"score {p['score']:.3f}"
        return (f"t={e['t']:.1f} submission #{p.get('submission_id')}: {score}"
                + (f", improvement {p['improvement']:+.3f}" if p.get("improvement") is not None else "")
                + (f", flags {', '.join(p['flags'])}" if p.get("flags") else "")
                + (f", error: {_one_line(p['error'])}" if p.get("error") else "")
                + (f", commit {p['code_commit'][:10]}" if p.get("code_commit") else "")
                # what the screen of judged answers found (its items, what matched), last: the line may be cut
                + (f"; screened: {describe_screen(p['metrics']['screen'])}"
                   if set(p.get("flags") or ()) & set(SCREEN_FLAGS) and (p.get("metrics") or {}).get("screen")
                   else ""))[:LINE_LIMIT]
    if p.get("type") == "usage":  # token counts: the report has the metered ones
        return None
    fields = ", ".join(f"{k}={_one_line(v if isinstance(v, str) else json.dumps(v))}" for k, v in p.items()
                       if k not in ("type", "source", "t"))
    return f"t={e['t']:.1f} {p.get('type', 'event')}: {fields}"[:LINE_LIMIT]


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters not shown]"


def _cut_lines(lines: list[str], limit: int) -> list[str]:
    """Whole lines from the start and the end within limit characters: how it began and how it ended."""
    if sum(len(line) + 1 for line in lines) <= limit:
        return lines
    head: list[str] = []
    tail: list[str] = []
    used = 0
    for i in range(len(lines)):
        line = lines[i // 2] if i % 2 == 0 else lines[-1 - i // 2]
        if used + len(line) + 1 > limit:
            break
        (head if i % 2 == 0 else tail).append(line)
        used += len(line) + 1
    return head + [f"[... {len(lines) - len(head) - len(tail)} events not shown ...]"] + tail[::-1]


def cache_key(driver: dict, system: str, user: str, max_tokens: int) -> str:
    """What decides a summary: the prompt and the model that answers it."""
    identity = {"provider": driver["provider"], "model": driver.get("model"), "max_tokens": max_tokens,
                "system": system, "user": user}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


# -- asking the driver -------------------------------------------------------------------------------------------

class SummaryFailed(Exception):
    def __init__(self, message: str, status: int | None = None, usage: Usage = Usage(), attempts: int = 0,
                 wait_s: float = 0.0):
        super().__init__(message)
        self.status, self.usage, self.attempts, self.wait_s = status, usage, attempts, wait_s


async def ask(client, s: Summarizer, system: str, user: str) -> tuple[str, Usage, int, float]:
    """(reply text, usage, attempts, seconds waited between retries) of one chat call straight to the provider."""
    path, body, headers = chat_request(s.driver, system, user, s.max_tokens, temperature=None)
    headers = upstream_headers({**headers, "content-type": "application/json"}, s.driver, s.real_key)
    try:
        resp, attempts, wait_s = await upstream.send(client, "POST", upstream_url(s.driver, path, []), headers,
                                                     json.dumps(body).encode(), s.retry)
    except UpstreamUnreachable as e:
        raise SummaryFailed(f"upstream unreachable after {e.attempts} attempt(s): {e}", attempts=e.attempts,
                            wait_s=e.wait_s) from None
    try:
        data = await resp.read()
    except Exception as e:  # the connection broke mid-answer
        raise SummaryFailed(f"upstream read failed: {type(e).__name__}: {e}", attempts=attempts,
                            wait_s=wait_s) from None
    finally:
        resp.release()
    if resp.status >= 400:
        raise SummaryFailed(f"HTTP {resp.status} after {attempts} attempt(s): "
                            f"{_one_line(data[:300].decode('utf-8', 'replace'))}", resp.status, attempts=attempts,
                            wait_s=wait_s)
    usage = usage_from_body(protocol_of_path(path), data)
    try:
        text = reply_text(s.driver["provider"], json.loads(data)).strip()
    except (ValueError, KeyError, IndexError, TypeError) as e:
        raise SummaryFailed(f"unreadable answer ({type(e).__name__}: {e})", resp.status, usage, attempts,
                            wait_s) from None
    if not text:  # e.g. a reasoning model that spent max_tokens thinking
        raise SummaryFailed(f"the answer has no text (analysis.summary_max_tokens={s.max_tokens} too low?)",
                            resp.status, usage, attempts, wait_s)
    return text, usage, attempts, wait_s


def summarize(output_dir: Path, reports: dict[str, dict], events: dict[str, list[dict]],
              s: Summarizer) -> list[dict]:
    """Summaries of the given cells' runs (finished cells only); one row each: cell_id, status (new, cached or
    failed), the tokens and cost of this report's call (0 when cached), error."""
    async def run_all():
        sem = asyncio.Semaphore(s.concurrency)
        async with upstream.session() as client:
            return await asyncio.gather(*(_one(output_dir / "cells" / cid, report, events.get(cid, []), s, client,
                                               sem) for cid, report in reports.items()))
    rows = list(asyncio.run(run_all())) if reports else []
    for row in rows:
        if row["status"] == "failed":
            print(f"a2rl: no run summary for cell {row['cell_id']}: {row['error']}; its run report is complete "
                  "without it", file=sys.stderr)
    return rows


async def _one(cell_dir: Path, report: dict, events: list[dict], s: Summarizer, client, sem) -> dict:
    user = await asyncio.to_thread(prompt, report, events, cell_dir, s)  # git runs for the diffs
    key = cache_key(s.driver, SYSTEM, user, s.max_tokens)
    row = {"cell_id": report["cell_id"], "driver": s.driver["name"], "model": s.driver.get("model"),
           "input_tokens": 0, "output_tokens": 0, "cached_tokens": 0, "cost_usd": 0.0, "error": None}
    kept = read_summary(cell_dir)
    if kept and kept.get("key") == key:
        return {**row, "status": "cached"}
    async with sem:
        text, usage, cost, error = await ask_metered(client, s, SYSTEM, user, cell_dir, report["cell_id"],
                                                     "run_summary")
    row.update(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
               cached_tokens=usage.cached_tokens, cost_usd=cost)
    if error:
        return {**row, "status": "failed", "error": error}
    summary = {"key": key, "driver": s.driver["name"], "provider": s.driver["provider"],
               "model": s.driver.get("model"), "text": text, "input_tokens": usage.input_tokens,
               "output_tokens": usage.output_tokens, "cached_tokens": usage.cached_tokens, "cost_usd": cost,
               "prompt_chars": len(SYSTEM) + len(user)}
    write_json_durably(cell_dir / SUMMARY_JSON, summary)
    (cell_dir / SUMMARY_MD).write_text(render_markdown(report, summary))
    return {**row, "status": "new"}


async def ask_metered(client, s: Summarizer, system: str, user: str, cell_dir: Path, cell_id: str,
                      purpose: str) -> tuple[str | None, Usage, float, str | None]:
    """ask(), metered as analysis usage: one line (fsynced) in the cell's analysis_calls.jsonl whatever happened.
    Returns (the reply's text or None, usage, cost, the error or None)."""
    t0, start = time.time(), time.monotonic()
    try:
        text, usage, attempts, wait_s = await ask(client, s, system, user)
        failed = None
    except SummaryFailed as e:
        text, usage, attempts, wait_s, failed = None, e.usage, e.attempts, e.wait_s, e
    cost = cost_usd(usage, s.driver)
    line = {"t": t0, "kind": "analysis_usage", "purpose": purpose, "cell_id": cell_id,
            "driver": s.driver["name"], "provider": s.driver["provider"], "model": s.driver.get("model"),
            "input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
            "cached_tokens": usage.cached_tokens, "cost_usd": round(cost, 10),
            "latency_s": round(time.monotonic() - start, 6), "wait_s": round(wait_s, 6), "attempts": attempts,
            "status": failed.status if failed else 200, "error": _scrub(str(failed), s) if failed else None}
    append_jsonl(cell_dir / ANALYSIS_CALLS, line)
    return text, usage, cost, line["error"]


def _scrub(text: str, s: Summarizer) -> str:
    """Never write the real key, even if an upstream error message quotes it."""
    return text.replace(s.real_key, "***") if s.real_key else text


def read_summary(cell_dir: Path) -> dict | None:
    try:
        summary = json.loads((cell_dir / SUMMARY_JSON).read_text())
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) and summary.get("text") else None


def render_markdown(report: dict, summary: dict) -> str:
    return "\n".join([
        f"# Run summary: {report['agent']} / {report['driver']} on {report['task']}, seed {report['seed']}", "",
        f"*Written by {summary['driver']} ({summary['model']}) from the [run report](report.md), which is the source "
        f"of truth; {summary['input_tokens']} input and {summary['output_tokens']} output tokens, "
        f"${summary['cost_usd']:.4f}.*", "", summary["text"], ""])
