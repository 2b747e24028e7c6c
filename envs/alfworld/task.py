"""Level-3 task ``alfworld``: household text games played step by step; the score is the eval success rate x100.

Games: generated offline (``envs.alfworld.generator``, six task types) or upstream ALFWorld data (``data_path``).
They live under CACHE_DIR/grading/alfworld/<key>/{train,eval,final-<n>} (hidden from agents): built once, under a file
lock, by whichever process needs them first (grader, rollout service or orchestrator). The eval split is salted with a
secret (``eval_salt`` in the config, else a random salt kept in CACHE_DIR/grading/alfworld-eval-salt), so knowing the
generator and its seeds does not rebuild it. Train games are generated from a disjoint seed range, and any train
game equal to an eval game is dropped. The held-out final split (``final_size`` games) is built after both, in a folder
of its own (so adding it leaves the train and eval games and their cache as they were), salted like the eval split,
with no game equal to a train or eval one; upstream data: ``valid_seen`` (see ``envs.alfworld.real_data``).

- ``environment()``: the games as an Environment (``envs.alfworld.environment``): the grader plays the eval games
  (score = 100 x won / games, evaluators.lockstep), the rollout service serves the train games.
- ``train_rows()``: expert demonstrations on the train games, one SFT row per step (the agent's data/train.jsonl).
"""
from __future__ import annotations

import hashlib
import json
from functools import cached_property
from pathlib import Path

from contracts.environment import Demonstration
from contracts.file_lock import build_once
from contracts.registry import register
from contracts.task import InteractiveTask
from contracts.task_spec import TaskSpec
from envs.alfworld import prompt
from envs.alfworld.environment import AlfWorldEnvironment


def _expert_demonstrations(job: tuple) -> list[Demonstration]:
    """One train game's demonstrations by its expert (a process-pool job)."""
    game, name, expert, episodes, noise, max_steps = job
    if expert == "ordered":
        from envs.alfworld.ordered_expert import ordered_demonstrations

        return ordered_demonstrations(game, episodes, noise, max_steps, name)
    from envs.alfworld.expert import demonstrations, expert_steps

    return demonstrations(expert_steps(game, mode=expert, max_steps=max_steps), game_name=name)


@register("task", "alfworld")
class AlfWorldTask(InteractiveTask):
    environment_class = AlfWorldEnvironment
    # a2rl: a chat per step with the admissible commands, the reply matched to one (envs.alfworld.prompt);
    # paper (envs/alfworld/paper_task.py): the original benchmark's raw ReAct transcript, the reply sent as it is
    rows_tag = ""  # the variant's mark in the train rows' file name (its rows are rendered in its prompt)

    def __init__(self, spec: TaskSpec, *, n_train: int, n_eval: int, final_size: int | None, seed: int,
                 task_types: list[str] | None, max_receptacles_per_type: int | None, max_receptacles: int | None,
                 max_steps: int, expert: str, expert_episodes: int, expert_noise: float, eval_salt: str | None,
                 data_path: str | None, build_workers: int, eval_workers: int, react_prompts: str | None = None,
                 games_archive: str | None = None):
        """n_train / n_eval: generated games per split (with data_path: caps, 0 = all); final_size: games in the
        held-out final split (None: as many as n_eval; with data_path: a cap on valid_seen, 0 = all); task_types: the
        six upstream types or aliases (pick, look, clean, heat, cool, pick_two), cycled; max_receptacles_per_type /
        max_receptacles: smaller rooms (at most this many receptacles of a type / in all; None: the upstream
        ranges); expert: the SFT trajectories' expert, "search", "ordered" (search in the listed order: easier to
        imitate) or "planner"; expert_episodes / expert_noise (ordered only): episodes per train game, all but the
        first with perturbations injected at this rate (recovery data, see envs.alfworld.ordered_expert);
        build_workers: processes building the games and their expert rows; eval_workers: processes stepping eval
        games during grading (0: in the grader's process); react_prompts: ReAct's react_prompts.json for the paper
        protocol (None: the one the released original ships, contracts/release.py); games_archive: the release
        archive of game.tw-pddl files `prepare` fetches into data_path (None: the installed alfworld downloader's;
        docs/tasks/alfworld.md). Games live under the task's cache_dir."""
        super().__init__(spec)
        name = spec.name
        if expert not in ("search", "ordered", "planner"):
            raise ValueError(f"task {name}: expert={expert!r} must be 'search', 'ordered' or 'planner'")
        self.set_splits(n_train, n_eval, final_size, eval_salt, caps=bool(data_path))
        self.seed = int(seed)
        self.task_types = list(task_types) if task_types else None
        for knob, value in (("max_receptacles_per_type", max_receptacles_per_type),
                            ("max_receptacles", max_receptacles)):
            if value is not None and int(value) < 1:
                raise ValueError(f"task {name}: {knob}={value} must be >= 1 (or null: the upstream room sizes)")
        self.max_receptacles_per_type = int(max_receptacles_per_type) if max_receptacles_per_type else None
        self.max_receptacles = int(max_receptacles) if max_receptacles else None
        self.max_steps = int(max_steps)
        self.expert = expert
        self.expert_episodes, self.expert_noise = int(expert_episodes), float(expert_noise)
        self.data_path = data_path
        self.build_workers = int(build_workers)
        self.eval_workers = int(eval_workers)  # processes stepping eval games while the model generates
        self.react_prompts = react_prompts
        self.games_archive = games_archive

    # -- the protocol -----------------------------------------------------------------------------------------
    def paper_data_path(self) -> str:
        """CACHE_DIR/data/alfworld: where `prepare` unpacks ALFWorld's release archives (json_2.1.1/, logic/), as
        the alfworld package's downloader lays out $ALFWORLD_DATA."""
        return str(self.cache_dir / "data" / "alfworld")

    def missing_data(self) -> list[str]:
        return self._missing_games()

    def _missing_games(self) -> list[str]:
        """data_path set to a folder without upstream games: `prepare` fetches them there (envs.alfworld.download)."""
        from envs.alfworld import download
        from envs.alfworld.real_data import resolve_data_root

        if not self.data_path:
            return []
        try:
            resolve_data_root(self.data_path)
            if download.complete(self.data_path, self.games_archive) is not False:
                return []
        except FileNotFoundError:
            pass
        return [f"task {self.name}: no ALFWorld json_2.1.1 games under data_path={self.data_path} (the alfworld "
                f"package's release archives, the games from {download.games_of(self.games_archive)}: ~2 GB by the "
                "original's count)"]

    def fetch_data(self, sources: dict) -> None:
        """What missing_data() names: the upstream games into data_path, with the alfworld package's downloader
        (sources["alfworld"]: the releases' base URL; sources["sha256"]: pinned digests)."""
        if self._missing_games():
            from envs.alfworld import download

            download.fetch(self.data_path, sources["alfworld"], sources.get("sha256"), self.games_archive)

    def unfetched_data(self) -> list[str]:
        """What missing_data() names that a run cannot fetch by itself (prepare does): the games."""
        return self._missing_games()

    def downloaded(self) -> dict[str, dict]:
        """The archives prepare fetched into data_path, by file (their digests: the lock's entries)."""
        from envs.alfworld import download

        return download.fetched(self.data_path) if self.data_path else {}

    # -- games ------------------------------------------------------------------------------------------------
    @cached_property
    def games_dir(self) -> Path:
        """CACHE_DIR/grading/alfworld/<key>: the key covers everything that decides the games."""
        from envs.alfworld.generator import GENERATOR_VERSION

        salt_digest = hashlib.sha256(self.salt().encode()).hexdigest()
        spec = [GENERATOR_VERSION, self.n_train, self.n_eval, self.seed, self.task_types, salt_digest,
                str(self.data_path or "")]
        if self.max_receptacles_per_type or self.max_receptacles:  # only when set: default caches keep their keys
            spec += [self.max_receptacles_per_type, self.max_receptacles]
        if self.data_path:  # capped upstream splits are drawn across task types, not the first of the sorted list
            spec.append("drawn-across-types")
        key = hashlib.sha256(json.dumps(spec).encode()).hexdigest()[:12]
        return self.cache_dir / "grading" / "alfworld" / key

    @cached_property
    def _splits(self) -> dict[str, list[Path]]:
        from envs.alfworld.splits import game_sets

        if self.data_path:
            return game_sets(self.games_dir, self.n_train, self.n_eval, self.seed, data_path=self.data_path,
                             task_types=self.task_types, n_final=self.n_final)

        def build(tmp: Path) -> dict:
            from envs.alfworld.generator import build_splits

            tmp.mkdir()
            build_splits(tmp, self.n_train, self.n_eval, self.seed, self.task_types, eval_salt=self.salt(),
                         eval_dir=tmp / "eval", max_per_type=self.max_receptacles_per_type,
                         max_receptacles=self.max_receptacles, workers=self.build_workers)
            return {"n_train": self.n_train, "n_eval": self.n_eval}

        build_once(self.games_dir, build, marker="done.json")
        return {split: sorted((self.games_dir / split).rglob("game.tw-pddl")) for split in ("train", "eval")}

    @cached_property
    def _final(self) -> list[Path]:
        """The held-out final games: built after the train and eval games, in a folder of their own (its name has
        their number), so a cache built without them keeps its games and train rows."""
        if self.data_path:
            return self._splits["final"]
        if not self.n_final:
            return []
        self.train_games()  # builds the train and eval games first: no final game may equal one of them

        def build(tmp: Path) -> dict:
            from envs.alfworld.generator import build_final_split, split_fingerprints

            tmp.mkdir()
            taken = split_fingerprints(self.games_dir / "train") | split_fingerprints(self.games_dir / "eval")
            build_final_split(tmp, self.n_final, self.seed, self.task_types, eval_salt=self.salt(), exclude=taken,
                              max_per_type=self.max_receptacles_per_type, max_receptacles=self.max_receptacles,
                              workers=self.build_workers)
            return {"n_final": self.n_final}

        folder = self.games_dir / f"final-{self.n_final}"
        build_once(folder, build, marker="done.json")
        return sorted(folder.rglob("game.tw-pddl"))

    def game_name(self, path: Path) -> str:
        """A game's public name: its folder (generated) or its last two folders (upstream data)."""
        return path.parent.name if not self.data_path else "/".join(path.parent.parts[-2:])

    def train_games(self) -> list[Path]:
        return list(self._splits["train"])

    def eval_games(self) -> list[Path]:
        return list(self._splits["eval"])

    def final_games(self) -> list[Path]:
        return list(self._final)

    @cached_property
    def _environment(self) -> AlfWorldEnvironment:
        games = {"train": self.train_games(), "eval": self.eval_games(), "final": self.final_games()}
        names = {path: self.game_name(path) for paths in games.values() for path in paths}
        return self.make_environment(games, names)

    def make_environment(self, games: dict[str, list[Path]], names: dict[Path, str]) -> AlfWorldEnvironment:
        return AlfWorldEnvironment(games, names, self.max_steps)

    def environment(self) -> AlfWorldEnvironment:
        return self._environment

    # -- rows -------------------------------------------------------------------------------------------------
    def make_train_rows(self) -> list[dict]:
        path = self.games_dir / f"train-{self.expert}-{self.expert_episodes}-{self.expert_noise:g}{self.rows_tag}.jsonl"
        games = self.train_games()  # builds the splits first (under their own lock)

        def make_rows() -> list[dict]:
            jobs = [(str(game), self.game_name(game), self.expert, self.expert_episodes, self.expert_noise,
                     self.max_steps) for game in games]
            if self.build_workers > 1:  # the engine is pure Python: processes, spawned (never fork Ray)
                import concurrent.futures
                import multiprocessing

                with concurrent.futures.ProcessPoolExecutor(
                        self.build_workers, mp_context=multiprocessing.get_context("spawn")) as pool:
                    per_game = list(pool.map(_expert_demonstrations, jobs, chunksize=8))
            else:
                per_game = [_expert_demonstrations(job) for job in jobs]
            return self.expert_rows(d for demos in per_game for d in demos)

        return self.cached_rows(path, make_rows)

    # -- the agent's view ---------------------------------------------------------------------------------------
    def _grading_text(self, final: str) -> str:
        return f"""## How the grader plays and scores

The hidden eval split has {self.n_eval} other games of the same kinds{final}. For each, the grader resets the game
and, every step, {self.grader_asks("this chat")}:

    system:    {prompt.SYSTEM_PROMPT}
    user:      Task: <task sentence>.
               Previous commands: <c1>; <c2>; ... (or "none")
               Observation: <the game's last answer, without the welcome banner>
               Admissible commands:
               <one command per line>
               Reply with the next command.

The reply's first non-empty line is the command ("Action:" or "> " prefixes, quotes, a trailing period and case are
forgiven); a command the game does not know is answered "Nothing happens." and costs a step. All eval games are played
in lockstep, in batches. The score is **100 x the fraction of eval games won** within {self.max_steps} steps."""

    def instructions(self) -> str:
        rows = self.train_split
        example = rows[min(3, len(rows) - 1)]
        n_games = len(self.train_games())
        default = "ALFWorld: household text games (find, take, clean, heat, cool, place)."
        final = f" (a held-out final split has {self.n_final} more)" if self.n_final else ""
        return f"""{self.description.strip() or default}

You post-train a model that plays text household games ("put a clean mug in the coffeemachine", "look at the book
under the desklamp", ...). Each step the model sees the task, its previous commands, the game's last answer and the
list of admissible commands, and replies with the next command. A game is won when its goal holds; at most
{self.max_steps} steps per game.

## Data

`data/train.jsonl` holds {len(rows)} steps of expert play on the {n_games} train games, one JSON object a line:

- `messages`: the exact chat the grader sends at that step (system + user)
- `prompt`: the user message alone; `completion` (= `answer`): the expert's command
- `game`, `task`, `task_type`, `step`, `episode`: which train game, episode and step it comes from (episode 0 is the
  expert's own play; in later episodes some steps were detours or repeated commands injected on purpose, which show
  up in the history but have no row: those rows show how to recover)

Example:

```json
{json.dumps(example, ensure_ascii=False)}
```

The expert ({self.expert}) uses only what the prompt shows; it never sees hidden information.

{self._grading_text(final)}

{self.rollout_section()}"""
