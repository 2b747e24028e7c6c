"""Level-3 task ``webshop``: shopping by instruction in a web store, step by step; score = 100 x the mean final reward.

The store is generated offline (``envs.webshop.catalogue``: a seeded catalogue of ``n_products`` and instructions
over it), or built from upstream WebShop files (``data_path``: products, attributes, human instructions, and human
trajectories for the train rows, ``envs.webshop.real_data``). Eval instructions are drawn with a secret salt kept in
CACHE_DIR/grading/webshop-eval-salt (``eval_salt`` fixes it), for other products than the train instructions: they
exist only on the grading side; so do the held-out final instructions (``final_size``), for products of neither
split. Train rows are the expert's steps (``envs.webshop.expert``), or the humans' when the data has them; built once
into CACHE_DIR/grading/webshop/<key>/ under a file lock.
"""
from __future__ import annotations

import hashlib
import json
from functools import cached_property
from pathlib import Path

from contracts.registry import register
from contracts.task import InteractiveTask
from contracts.task_spec import TaskSpec
from envs.webshop import prompt
from envs.webshop.environment import WebShopEnvironment
from envs.webshop.reward import SUCCESS

VERSION = 2  # of the generator, the expert and the rows: bump when what they produce changes (2: the original's reward)


@register("task", "webshop")
class WebShopTask(InteractiveTask):
    # a2rl: its own prompt (envs.webshop.prompt), the model's decoding, score = mean final reward (the CPU twin's);
    # paper (envs/webshop/paper_task.py): RD-Agent's WebShop evaluator. Both use the original's reward
    # (envs.webshop.reward).
    environment_class: type[WebShopEnvironment] = WebShopEnvironment
    rows_tag: str | None = None  # the variant's mark in the train rows' cache key (its rows are rendered its way)
    human_rows = True  # with data_path, the train rows are the humans' trajectories where the data has them
    score_text = ("The score of a submission is **100 x the mean final reward** over the hidden eval "
                  "instructions (0 for an episode that buys nothing); the success rate (reward >= "
                  f"{SUCCESS}, x100) is reported beside it.")
    release_store = False  # with data_path: the store of the release's goals and search (UpstreamShop's paper)
    data_note = ""  # what `prepare` builds from WebShop's files besides them, in missing_data()'s line
    instance_noun, action_noun = "instructions", "actions"
    reward_text = f"the purchase's reward once `done` (`won`: {SUCCESS} or more), else 0"

    def __init__(self, spec: TaskSpec, *, n_products: int, n_train: int, n_eval: int, final_size: int | None,
                 seed: int, product_types: list[str] | None, max_steps: int, expert_episodes: int,
                 expert_noise: float, eval_salt: str | None, data_path: str | None, eval_workers: int,
                 server_url: str | None = None):
        """n_products: the generated catalogue's size; n_train / n_eval: instructions per split (with data_path: how
        many of the upstream ones); final_size: instructions in the held-out final split (None: as many as n_eval);
        product_types: a subset of envs.webshop.catalogue.TYPES (null: all); expert_episodes / expert_noise: expert
        episodes per train instruction, all but the first with detours at this rate (recovery rows); data_path:
        upstream WebShop data (see envs.webshop.real_data); eval_workers: processes stepping eval episodes;
        server_url: a running original WebShop server that plays the episodes (envs.webshop.remote; its data/
        folder is data_path)."""
        super().__init__(spec)
        name = spec.name
        self.set_splits(n_train, n_eval, final_size, eval_salt)
        if not data_path and n_products < self.n_train + self.n_eval + self.n_final:
            raise ValueError(f"task {name}: n_products={n_products} must be at least n_train + n_eval + final_size "
                             f"({self.n_train + self.n_eval + self.n_final}): each instruction targets its own "
                             "product")
        if server_url and not data_path:
            raise ValueError(f"task {name}: server_url={server_url!r} needs data_path, the data/ folder that server "
                             "loads: the instructions, their sessions and the train rows come from it")
        if expert_episodes < 1 or not 0 <= expert_noise < 1:
            raise ValueError(f"task {name}: expert_episodes={expert_episodes} must be >= 1 and "
                             f"expert_noise={expert_noise} in [0, 1)")
        self.n_products, self.seed = int(n_products), int(seed)
        self.product_types = list(product_types) if product_types else None
        self.max_steps, self.eval_workers = int(max_steps), int(eval_workers)
        self.expert_episodes, self.expert_noise = int(expert_episodes), float(expert_noise)
        self.data_path, self.server_url = data_path, server_url

    @cached_property
    def _data(self):
        if self.data_path:
            from envs.webshop.real_data import UpstreamShop

            return UpstreamShop(self.data_path, self.n_train, self.n_eval, self.seed, self.n_final,
                                paper=self.release_store, cache_dir=self.cache_dir)
        from envs.webshop.catalogue import GeneratedShop

        return GeneratedShop(self.n_products, self.n_train, self.n_eval, self.seed, self.salt(), self.product_types,
                             self.n_final)

    @cached_property
    def _local(self) -> WebShopEnvironment:
        """The store in this process: the expert plays it for the train rows."""
        return self.environment_class(self._data, self.max_steps)

    @cached_property
    def _environment(self) -> WebShopEnvironment:
        if self.server_url:
            from envs.webshop.remote import RemoteWebShopEnvironment

            return RemoteWebShopEnvironment(self._data, self.max_steps, self.server_url)
        return self._local

    def environment(self):
        """Where the graded and served episodes are played: the store in process, or the original server."""
        return self._environment

    def paper_data_path(self) -> str:
        """CACHE_DIR/data/webshop: where `prepare` fetches WebShop's files (envs.webshop.download)."""
        return str(self.cache_dir / "data" / "webshop")

    def missing_data(self) -> list[str]:
        """What `prepare` fetches: WebShop's files into data_path (envs.webshop.download)."""
        from envs.webshop import download

        out = []
        if self.data_path and (absent := download.missing(self.data_path)):
            out.append(f"task {self.name}: no {', '.join(absent)} in data_path={self.data_path} (WebShop's "
                       f"1,000-product files, as the original's data.py fetches them{self.data_note})")
        return out

    def unfetched_data(self) -> list[str]:
        """What missing_data() names that a run cannot fetch by itself (prepare does): WebShop's files."""
        from envs.webshop import download

        absent = download.missing(self.data_path) if self.data_path else []
        return self.missing_data()[:1] if absent else []

    def downloaded(self) -> dict[str, dict]:
        """The files prepare fetched for this task, by file (their digests: the lock's entries)."""
        from contracts.downloads import records
        from envs.webshop.reward import original_model_dir

        files = {name: {"path": str(Path(self.data_path).expanduser() / name), **entry}  # (older records: no path)
                 for name, entry in records(self.data_path).items()}
        return {**files, **records(original_model_dir(self.cache_dir))}

    def _lucene_index(self) -> Path:
        from envs.webshop.lucene_search import index_dir_for

        return index_dir_for(self.cache_dir, self._data.products())

    def _lucene_index_present(self) -> bool:
        from envs.webshop.lucene_search import index_present

        return index_present(self._lucene_index())

    def fetch_data(self, sources: dict) -> None:
        """What missing_data() names: WebShop's files into data_path (sources["webshop"]: the URL template with
        {id}, a Google Drive file id); sources["sha256"]: pinned digests by file name."""
        from envs.webshop import download

        pins = sources.get("sha256") or {}
        if self.data_path and download.missing(self.data_path):
            download.fetch(self.data_path, sources["webshop"], pins)

    # -- rows -------------------------------------------------------------------------------------------------
    @cached_property
    def rows_dir(self) -> Path:
        """CACHE_DIR/grading/webshop/<key>: the key covers everything that decides the train rows."""
        spec = [VERSION, self.n_products, self.n_train, self.seed, self.product_types, self.max_steps,
                str(self.data_path or "")]
        if self.rows_tag:  # its rows are rendered in another prompt (and, with data, other goals)
            spec.append(self.rows_tag)
        if self.data_path:  # a small upstream set's train instructions start after the eval and final ones
            spec += [self.n_eval, self.n_final]
        key = hashlib.sha256(json.dumps(spec).encode()).hexdigest()[:12]
        return self.cache_dir / "grading" / "webshop" / key

    def _demonstrations(self):
        env = self._local
        if self.data_path and self.human_rows:  # the humans shopped for the human instructions only
            from envs.webshop.real_data import human_demonstrations

            demos = human_demonstrations(self.data_path, env)
            if demos is not None:
                return demos
        from envs.webshop.expert import play

        return [d for inst in env.instances("train") for e in range(self.expert_episodes)
                for d in play(env, inst, e, self.expert_noise, self.seed)]

    def make_train_rows(self) -> list[dict]:
        path = self.rows_dir / f"train-{self.expert_episodes}-{self.expert_noise:g}.jsonl"
        return self.cached_rows(path, lambda: self.expert_rows(self._demonstrations()))

    # -- the agent's view ---------------------------------------------------------------------------------------
    def _grading_text(self) -> str:
        final = f" (a held-out final split has {self.n_final} more)" if self.n_final else ""
        head = f"The hidden eval split has {self.n_eval} other instructions, for other products of the same catalogue"
        return self.grading_text(head + final)

    def grading_text(self, head: str) -> str:
        """How the grader plays, in words (`head`: the eval split's size)."""
        return f"""{head}. For each, the grader opens the search page and, every step,
{self.grader_asks("this chat")}:

    system:    {prompt.SYSTEM_PROMPT}
    user:      Instruction: <the instruction>
               Previous actions: <a1>; <a2>; ... (the last {prompt.MAX_HISTORY}, or "none")
               Observation: <the page's text, parts separated by " [SEP] ">
               Available actions:
               <one per line: search[<query>] on the search page, click[...] for each button>
               Reply with the next action.

The reply's first non-empty line is the action ("Action:" prefixes, quotes, a trailing period and the case of a
click are forgiven; `choose[...]` means `click[...]`). All eval episodes are played in lockstep, in batches."""

    def instructions(self) -> str:
        rows = self.train_split
        example = rows[min(1, len(rows) - 1)]
        default = "WebShop: find and buy the product an instruction asks for in a web store."
        return f"""{self.description.strip() or default}

You post-train a model that shops in a web store by instruction ("i need a sulfate free shampoo with scent:
lavender, and price lower than 30.00 dollars"). Each step the model sees the instruction, its previous actions, the
page and the actions available on it, and replies with one action. An episode ends when the model buys something
(`click[buy now]`) or after {self.max_steps} actions.

## Pages and actions (as WebShop's text environment)

- search page: `search[<query>]` searches the catalogue (BM25 over titles, descriptions, features and options);
- results: 10 products a page (asin, title, price) out of at most 50; `click[<asin>]` opens one, `click[next >]` /
  `click[< prev]` turn pages, `click[back to search]`;
- product page: its option groups (`click[<value>]` chooses a value, e.g. `click[16 fl oz]`), `click[description]`,
  `click[features]`, `click[reviews]` (sub-pages; `click[< prev]` comes back), `click[< prev]` (to the results),
  `click[buy now]`;
- a search works from any page; anything else (an unknown button, a malformed action) leaves the page as it was.

## Reward and score

Buying gives WebShop's reward in [0, 1]: the share of the instruction's attributes the product has, of its options
that were chosen, and whether the price is under the bound, times a type factor (0 when the product is of another
kind). {self.score_text}

## Data

`data/train.jsonl` holds {len(rows)} steps of an expert shopping for the {self.n_train} train instructions, one JSON
object a line:

- `messages`: the exact chat the grader sends at that step (system + user); `prompt`: the user message alone;
- `completion` (= `answer`): the expert's action;
- `game` (the train instruction's name), `task` (the instruction), `category`, `step`, `episode` (episode 0 is the
  expert's own; in later ones some steps were detours injected on purpose: they show in the history, have no row, and
  the rows after them show how to recover).

Example:

```json
{json.dumps(example, ensure_ascii=False)}
```

## How the grader plays and scores

{self._grading_text()}

{self.rollout_section()}"""
