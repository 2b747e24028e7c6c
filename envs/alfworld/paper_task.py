"""ALFWorld graded as the paper grades it (`protocol: paper`): the original benchmark's raw ReAct transcript
(envs.alfworld.paper_prompt: ReAct's two examples for the game's task type, the reply sent to the game as it is),
greedy raw-text decoding of at most 100 tokens cut at a newline, the prompt fitted to the release's 4,096-token
context; 50 steps a game. The a2rl variant is task.py's class.
"""
from __future__ import annotations

from functools import cached_property
from pathlib import Path

from contracts import release
from contracts.decoding import Decoding
from contracts.errors import ConfigError
from contracts.task import task_variant
from contracts.task_spec import TaskSpec
from envs.alfworld import paper_prompt
from envs.alfworld.environment import AlfWorldEnvironment, AlfWorldPaperEnvironment
from envs.alfworld.task import AlfWorldTask

REACT_PROMPTS = f"benchmarks/alfworld/{paper_prompt.FILE_NAME}"  # in the released original's folder


@task_variant("alfworld", "paper")
class AlfWorldPaper(AlfWorldTask):
    prompt_module = paper_prompt
    # greedy, raw text, at most 100 new tokens, cut at a newline, no repetition penalty (the original's vLLM
    # SamplingParams), a prompt too long for 4,096 tokens cut to its last ones (rdagent 1.0.0's eval.py,
    # paper_prompt.fit)
    variant_decoding = Decoding(max_new_tokens=paper_prompt.MAX_NEW_TOKENS, stop=paper_prompt.STOP,
                                repetition_penalty=1.0, chat_template=False, fit=paper_prompt.fit)
    original_max_model_len = 4096  # its eval.py's LLM(max_model_len=4096)
    original_benchmark = "alfworld"
    original_exposed = ("eval.py",)
    paper_eval = (134, "games")  # its eval.py's env_num: valid_unseen's games
    rows_tag = "-paper"

    def __init__(self, spec: TaskSpec, **knobs):
        super().__init__(spec, **knobs)
        if self.max_steps != paper_prompt.MAX_STEPS:  # the release's step count is fixed
            raise ValueError(f"task {spec.name}: max_steps={self.max_steps}, but the paper protocol plays "
                             f"{paper_prompt.MAX_STEPS} steps a game, as the original does")

    def approximations(self) -> list[str]:
        # upstream data: n_eval caps valid_unseen (0: all of it), so at most the paper's 134 are graded
        graded = min(self.n_eval or self.paper_eval[0], self.paper_eval[0]) if self.data_path else self.n_eval
        if not self.data_path:
            return ["games: a2rl's generated games stand in for ALFWorld's json_2.1.1 valid_unseen (data_path is null; "
                    "data_path=paper reads the paper's)", *self.paper_size_notes(graded)]
        return self.paper_size_notes(graded)

    def examples_path(self) -> Path:
        """task.react_prompts, else the file the released original ships beside its eval.py (contracts/release.py)."""
        if self.react_prompts:
            return Path(self.react_prompts).expanduser()
        return self.cache_dir / "release" / release.VERSION_DIR / REACT_PROMPTS

    def missing_data(self) -> list[str]:
        return super().missing_data() + self._missing_examples()

    def fetch_data(self, sources: dict) -> None:
        """Besides the games: the released original's ReAct examples."""
        super().fetch_data(sources)
        self.examples  # noqa: B018 - fetches and extracts the released original where it is missing

    def _missing_examples(self) -> list[str]:
        if self.examples_path().is_file():
            return []
        if self.react_prompts:
            return [f"task {self.name}: ReAct's react_prompts.json (protocol paper) is not at {self.examples_path()}: "
                    "fix task.react_prompts=<path>, or set it to null to use the released original's"]
        if (release.wheel_store() / release.WHEEL).is_file():
            return []  # extracted from the pinned wheel at first use, no download
        return [f"task {self.name}: ReAct's react_prompts.json comes from the released original ({release.RELEASE} "
                f"on PyPI), which is not on this machine: it is fetched once at first use (scripts/setup fetches it)"]

    @cached_property
    def examples(self) -> dict[str, str]:
        """ReAct's few-shot examples (paper protocol), from the path the config gives or the released original."""
        path = self.examples_path()
        if not self.react_prompts and not path.is_file():
            try:
                path = release.release_root(self.cache_dir) / REACT_PROMPTS
            except release.ReleaseUnavailable as e:
                raise ConfigError(f"task {self.name}: protocol=paper needs ReAct's ALFWorld examples: {e}; or set "
                                  "task.react_prompts=<path> to a copy of react_prompts.json") from e
        if not path.is_file():
            raise ConfigError(
                f"task {self.name}: protocol=paper needs ReAct's ALFWorld examples, and {path} is not a file: set "
                f"task.react_prompts=<path> to RD-Agent's rdagent/scenarios/rl/autorl_bench/benchmarks/alfworld/"
                f"react_prompts.json (the same as ReAct's prompts/alfworld_3prompts.json), or null for the released "
                f"original's")
        try:
            return paper_prompt.load_examples(path)
        except ValueError as e:
            raise ConfigError(f"task {self.name}: {e}") from e

    def make_environment(self, games: dict[str, list[Path]], names: dict[Path, str]) -> AlfWorldEnvironment:
        """The release's ReAct loop, with its examples (a missing file is refused before any build); the original
        reads an upstream game's task type from its folder's name."""
        return AlfWorldPaperEnvironment(games, names, self.max_steps, self.examples,
                                        types_from_names=bool(self.data_path))

    def original_data(self, target: Path) -> None:
        """The original's alfworld/data.py: `train`, a link to the ALFWorld train games' folder, and an empty
        `.downloaded` marker. Upstream data (data_path): its json_2.1.1/train, the folder the original links
        (~/.cache/alfworld/json_2.1.1/train), all of it whatever n_train caps. Generated games: the train split's
        folder under the grading cache (built here when it is not yet; the sandbox must bind it, as the grading
        cache is hidden), which is laid out otherwise than upstream's: one folder per game,
        `<index>-<task type>-s<seed>/`, holding game.tw-pddl and traj_data.json (upstream: `<task type>-<object>-
        <movable receptacle>-<receptacle>-<scene>/trial_*/`, with initial_state.pddl too), a manifest.json beside
        the games, traj_data.json with a few of upstream's keys, and game files with a2rl's `a2rl` key."""
        if self.data_path:
            from envs.alfworld.real_data import resolve_data_root

            source = resolve_data_root(self.data_path) / "train"
            if not source.is_dir():
                raise FileNotFoundError(f"task {self.name}: no ALFWorld train games at {source} (data_path="
                                        f"{self.data_path!r}): the original links that folder")
        else:
            self.train_games()  # builds the splits
            source = self.games_dir / "train"
        target.mkdir(parents=True, exist_ok=True)
        (target / "train").symlink_to(source.absolute())
        (target / ".downloaded").touch()

    def _grading_text(self, final: str) -> str:
        context = paper_prompt.MAX_MODEL_LEN
        room, keep = context - paper_prompt.MAX_NEW_TOKENS, context - paper_prompt.MAX_NEW_TOKENS - 1
        return f"""## How the grader plays and scores (the original benchmark's protocol)

The hidden eval split has {self.n_eval} other games of the same kinds{final}. For each, the grader resets the game
and, every step, {self.grader_asks("this raw text")}:

    {paper_prompt.HEADER.strip()}
    <ReAct's two examples for the game's task type (react_<type>_1, react_<type>_0 of ReAct's react_prompts.json)>
    Here is the task.
    <the game's first answer, without the welcome banner>
    > <action 1>
    <the game's answer>
    > ...
    >

A text longer than {room} tokens of your model's own tokenizer (counted as `tokenizer.encode` counts, special
tokens included) is cut first, as the original cuts it to fit its {context}-token context: to the text of its last
{keep} tokens (`tokenizer.decode`), so the header and examples go first, then the task and the oldest steps.
The stripped reply is sent to the game as it is (no admissible commands are shown, nothing is matched); a reply
starting with `think:` is sent too (it costs a step) and is shown as `OK.`. `messages` in the train data is this
text at that step, uncut; `code/task_prompt.py` builds it (render, parse) and cuts it (fit). The score is **100 x
the fraction of eval games won** within {self.max_steps} steps."""
