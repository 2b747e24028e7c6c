"""WebShop graded as the paper grades it (`protocol: paper`): RD-Agent's WebShop evaluator (its eval.py): the
release's prompt and reply parser (envs.webshop.paper_prompt, WebShopPaperEnvironment), 100 new tokens stopped at a
newline with repetition penalty 1.0, score = the success rate (reward >= 0.5); with data_path, WebShop's synthetic
goals over items_shuffle_1000 searched by the original's Lucene index (envs.webshop.lucene_search), and the reward's
nouns tagged by the original's spaCy model. The a2rl variant is task.py's class.
"""
from __future__ import annotations

from pathlib import Path

from contracts.decoding import Decoding
from contracts.task import task_variant
from contracts.task_spec import TaskSpec
from envs.webshop import paper_prompt
from envs.webshop.environment import WebShopPaperEnvironment
from envs.webshop.reward import SUCCESS, spacy_model_note
from envs.webshop.task import WebShopTask


@task_variant("webshop", "paper")
class WebShopPaper(WebShopTask):
    environment_class = WebShopPaperEnvironment
    # RD-Agent's SamplingParams(temperature=0, max_tokens=100, stop=["\n"])
    variant_decoding = Decoding(paper_prompt.MAX_NEW_TOKENS, paper_prompt.STOP, repetition_penalty=1.0)
    original_benchmark = "webshop"
    original_exposed = ("eval.py",)
    paper_eval = (100, "sessions")  # its eval.py's num_instructions
    rows_tag = "paper"
    human_rows = False  # the humans shopped for the human instructions, not the synthetic goals graded here
    release_store = True  # with data_path: the release's goals and its Lucene search (envs.webshop.real_data)
    score_text = (f"The score of a submission is **the success rate**: 100 x the share of the hidden eval "
                  f"instructions whose purchase earns {SUCCESS} or more (0 for an episode that buys nothing); "
                  "the mean final reward (x100) is reported beside it.")
    data_note = ", then the Lucene index of their products (the original's search)"

    def __init__(self, spec: TaskSpec, **knobs):
        if knobs.get("server_url"):
            raise ValueError(f"task {spec.name}: server_url is not supported under protocol paper (its prompt shows "
                             "the pages after the last actions, which the remote client does not keep); drop "
                             "server_url")
        super().__init__(spec, **knobs)

    def original_data(self, target: Path) -> None:
        """The original's webshop/data.py: an empty `.downloaded` marker, and `human_trajectories`, a link to the
        WebShop data folder's human_trajectories/ when there is one. There never is in the original: it looks in
        its WebShop clone's data/, which git does not hold (data/ is git-ignored upstream) and its download fills
        with three files only (items_shuffle_1000.json, items_ins_v2_1000.json, items_human_ins.json); WebShop's
        own setup.sh puts its example human trajectories in user_session_logs/, and il_trajs_finalized_images.jsonl
        (what a2rl's train rows come from when data_path has it) is never linked. So its folder is the marker
        alone, unless someone made data/human_trajectories by hand; here the same test is made of data_path
        (WebShop's data/ folder), and the generated store has no such folder."""
        target.mkdir(parents=True, exist_ok=True)
        if self.data_path:
            source = Path(self.data_path).expanduser() / "human_trajectories"
            if source.exists():
                (target / "human_trajectories").symlink_to(source.absolute())
        (target / ".downloaded").touch()

    def missing_data(self) -> list[str]:
        """Besides WebShop's files: the Lucene index of their products (envs.webshop.lucene_search: built here, from
        the files) and the spaCy model the original's reward tags with (envs.webshop.reward.fetch_original_model)."""
        from envs.webshop import download
        from envs.webshop.reward import ORIGINAL_SPACY, original_model_data, original_model_dir

        out = super().missing_data()
        if self.data_path and not download.missing(self.data_path) and not self._lucene_index_present():
            out.append(f"task {self.name}: the Lucene index of its products (the original's search) is not built "
                       f"under {self.cache_dir / 'grading' / 'webshop' / 'lucene'}")
        if original_model_data(self.cache_dir) is None:
            out.append(f"task {self.name}: spaCy's {' '.join(ORIGINAL_SPACY)} (the model the original's reward tags "
                       f"nouns with) is not in {original_model_dir(self.cache_dir)}")
        return out

    def fetch_data(self, sources: dict) -> None:
        """Besides WebShop's files: the Lucene index (built from them), the spaCy model (sources["spacy_model"]:
        its wheel's URL)."""
        from envs.webshop.reward import fetch_original_model, original_model_data

        super().fetch_data(sources)
        pins = sources.get("sha256") or {}
        if self.data_path:
            from envs.webshop.lucene_search import build_index, index_dir_for

            products = self._data.products()  # (read once: the index's folder is named by their digest)
            build_index(products, index_dir_for(self.cache_dir, products))
        if original_model_data(self.cache_dir) is None:
            url = sources["spacy_model"]
            fetch_original_model(url, self.cache_dir, pins.get(url.rsplit("/", 1)[-1]))

    def approximations(self) -> list[str]:
        """Where this grading is not the original's exactly (the record names each; the score is approximate)."""
        out = []
        if not self.data_path:
            out.append("goals: a2rl's generated store stands in for WebShop's synthetic goals over "
                       "items_shuffle_1000 (no data_path)")
        # (with data_path: the original's goals and its Lucene search, envs.webshop.lucene_search; their price
        # bounds are drawn seeded where the original's draws are unseeded, the same distribution, so not a
        # stand-in: docs/tasks/webshop.md)
        note = spacy_model_note(self.cache_dir)
        if note["approximate"]:
            out.append(f"reward: spaCy model {note['spacy_model']} {note['spacy_model_version']} where the "
                       f"original loads {note['original']}")
        return out + self.paper_size_notes()

    def grading_text(self, head: str) -> str:
        """How the grader plays: as the release's evaluator."""
        return f"""{head}. The grader plays them as the original benchmark's evaluator (RD-Agent's WebShop
eval.py) does: for each, it opens the search page and, every step,
{self.grader_asks("a system message and a user message")}:

    system:    {paper_prompt.SYSTEM_PROMPT}
    user:      {paper_prompt.HEADER}

               Instruction: Instruction: <the instruction>

               Available actions:
                 search[<your query>]         (on the search page)
                 click[<clickable>]           (each of the page's, e.g. click[buy now], click[b0abc12345])

               Rules: ... (four lines)

               Now it's your turn:

               Observation k: <the page after action k>   (the last {paper_prompt.HISTORY_WINDOW} steps)
               Action k: <action k>

               Observation n+1: <the current page>
               Action n+1:

The reply is stripped, a leading `Action:` dropped, `choose[` read as `click[`, and the page reads the rest as
`name[argument]` (argument lower-cased); anything else does nothing. The train rows' `messages` are exactly these
prompts. All eval episodes are played in lockstep, in batches."""
