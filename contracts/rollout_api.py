"""The rollout service's HTTP API as agents see it: one table of the routes it serves, and the section of an
interactive task's instructions rendered from it.

envs.rollout_service serves exactly these routes (tests/test_rollout_service.py compares the table with its FastAPI
app's routes and a session's answers with these keys), so what agents read cannot drift from what runs. The API
calls every environment's instances "games" and actions "commands", as agents have always used it.
"""
from __future__ import annotations

from dataclasses import dataclass

from contracts.task_spec import RolloutSettings


@dataclass(frozen=True)
class Route:
    method: str
    path: str           # under the service's prefix, `$A2RL_ROLLOUT_URL` (= `$GRADING_SERVER_URL/env`)
    body: str           # the request's JSON body ("" for none)
    answer: str         # the answer's JSON shape
    what: str           # what it does, for agents


# The keys of one session's answer at reset and after each step (the host's; reset adds "task" and "game").
STEP_KEYS = ("session_id", "observation", "admissible_commands", "reward", "won", "done", "steps")
RESET_KEYS = STEP_KEYS + ("task", "game")
GAMES_KEYS = ("games", "max_steps", "max_sessions", "idle_timeout_s")

ROUTES = (
    Route("GET", "/games", "", '{"games": [{"index", "name", <info>}], "max_steps", "max_sessions", '
          '"idle_timeout_s"}', "the train games (names match the `game` field of the train data)"),
    Route("POST", "/reset", '{"game": <index or name, optional: random if absent>, "session_id": <optional: reuse '
          'one>, "actions": [<optional commands replayed after the reset>]}',
          '{' + ", ".join(f'"{k}"' for k in RESET_KEYS) + '}', "opens a session (or resets one of yours)"),
    Route("POST", "/step", '{"session_id", "command"}', '{' + ", ".join(f'"{k}"' for k in STEP_KEYS) + '}',
          "one command; a command the environment does not know is answered by it, never refused. The two fields "
          "may instead come as query parameters with no body (`POST /env/step?session_id=...&command=...`, URL-"
          "encoded): the same answer, a few ms sooner (the server has no body to fetch)"),
    Route("POST", "/step_batch", '{"steps": [{"session_id", "command"}, ...]}', '{"results": [...]}',
          "steps many sessions of your run in one request (the service steps them on all its hosts at once: one "
          "request per lockstep step of a batch of episodes is far faster than one per session); in order, each "
          "entry is the single call's answer plus `\"status\": 200`, or its own error `{\"session_id\", \"status\", "
          "\"error\", \"code\"}` (a session lost with its host is `410 session_lost`: reset a new one); the others "
          "are unaffected"),
    Route("POST", "/reset_batch", '{"resets": [<reset bodies>]}', '{"results": [...]}',
          "resets or opens many sessions in one request, answered as /env/step_batch"),
    Route("POST", "/close", '{"session_id"}', '{"closed", "open_sessions"}', "frees a session"),
    Route("GET", "/sessions", "", '{"sessions": [{"session_id", "game", "steps", "done", "won"}], "max_sessions"}',
          "your run's open sessions"),
    Route("GET", "/health", "", '{"status", "task", "games", "hosts", "replica"}', "the service is up"),
)


def instructions_section(*, n_train: int, instances: str, actions: str, info_keys: list[str], reward: str,
                         max_steps: int, settings: RolloutSettings) -> str:
    """The "Rollout service" section of an interactive task's instructions: `instances` / `actions`, what the task
    calls them ("games" / "commands" in the API); `info_keys`, what /env/games says of each instance; `reward`,
    what a step's reward is."""
    names = "" if (instances, actions) == ("games", "commands") else \
        f' The API calls {instances} "games" and {actions} "commands".'
    lines = []
    for r in ROUTES:
        answer = r.answer.replace("<info>", ", ".join(f'"{k}"' for k in info_keys) or "...")
        body = f" {r.body}" if r.body else ""
        lines.append(f"- `{r.method:<4} /env{r.path}{body}` -> `{answer}`: {r.what}")
    routes = "\n".join(lines)
    return f"""## Rollout service (train {instances} only)

Play the {n_train} train {instances} online, e.g. for RL, with the same run token (`Authorization: Bearer
$A2RL_RUN_TOKEN`) at `$A2RL_ROLLOUT_URL` (= `$GRADING_SERVER_URL/env`; also `rollout_url` in run.json).{names}

{routes}

`reward`: {reward}. An episode ends (`done`) when it is won or after {max_steps} commands; a step after that changes
nothing. At most {settings.max_sessions_per_run} open sessions per run (429 beyond); a session idle for
{settings.idle_timeout_s:.0f} s is closed. Errors are JSON `{{"error", "code"}}` with a 4xx status.
"""
