"""Upstream WebShop data, when a user points ``task.data_path`` at it (the ``data/`` folder of princeton-nlp/WebShop
after its ``setup.sh``; nothing is downloaded here).

Files, found by their upstream names in that folder::

    items_shuffle.json | items_shuffle_1000.json     products (the scraped layout: asin, name, full_description,
                                                     small_description, pricing, customization_options, category,
                                                     query, product_category)
    items_ins_v2.json | items_ins_v2_1000.json       per asin: attributes (the reward's product attributes)
    items_human_ins.json                             per asin: human instructions (instruction,
                                                     instruction_attributes, instruction_options)
    il_trajs_finalized_images.jsonl                  optional: human trajectories (states, available_actions,
                                                     actions), the train rows when present

Products are read as the original's ``load_products`` reads them; instructions as its ``get_human_goals`` builds them
(price bound from the next steps of 10 dollars, drawn here with a seeded generator where the original's is unseeded),
shuffled with the original's seed (233). The eval split is the first ``n_eval`` of them (the sessions 0..99 the paper
evaluates), train instructions start at 1500 as in the original's imitation-learning split (or right after the eval
and final ones when there are fewer), and the held-out final split is the next ``n_final`` after the eval ones
(sessions 100.. by default, in the original's test range 0..499), less any with an eval or train instruction's text.
Human trajectories whose instruction is not a train one are never used.
"""
from __future__ import annotations

import itertools
import json
import random
import re
from decimal import Decimal
from pathlib import Path

from contracts.environment import Demonstration, Step
from envs.webshop.catalogue import price_bound
from envs.webshop.shop import SEARCH_ACTION

PRODUCT_FILES = ("items_shuffle.json", "items_shuffle_1000.json")
PAPER_PRODUCTS, PAPER_ATTRIBUTES, PAPER_N_PRODUCTS = "items_shuffle_1000.json", "items_ins_v2_1000.json", 1000
ATTRIBUTE_FILES = ("items_ins_v2.json", "items_ins_v2_1000.json")
HUMAN_INSTRUCTIONS = "items_human_ins.json"
HUMAN_TRAJECTORIES = "il_trajs_finalized_images.jsonl"
GOAL_SHUFFLE_SEED = 233
TRAIN_START = 1500


def _find(root: Path, names: tuple[str, ...]) -> Path:
    for name in names:
        if (root / name).is_file():
            return root / name
    raise FileNotFoundError(f"no {' or '.join(names)} in {root}: point task.data_path at WebShop's data/ folder")


def load_products(root: Path, seed: int = 0, paper: bool = False) -> list[dict]:
    """The products as the original's load_products reads them. paper: the files and size the paper's text
    environment loads (WebAgentTextEnv(num_products=1000): the first 1,000 of items_shuffle_1000.json, the
    attributes of items_ins_v2_1000.json), with each product's synthetic instruction and its attributes."""
    if paper:
        for name in (PAPER_PRODUCTS, PAPER_ATTRIBUTES):
            if not (root / name).is_file():
                raise FileNotFoundError(f"no {name} in {root}: the paper's protocol plays WebShop's synthetic goals "
                                        "over it (point task.data_path at WebShop's data/ folder)")
        raw = json.loads((root / PAPER_PRODUCTS).read_text())[:PAPER_N_PRODUCTS]
        attrs_path = root / PAPER_ATTRIBUTES
    else:
        raw = json.loads(_find(root, PRODUCT_FILES).read_text())
        attrs_path = next((root / n for n in ATTRIBUTE_FILES if (root / n).is_file()), None)
    attributes = json.loads(attrs_path.read_text()) if attrs_path else {}
    rng = random.Random(f"a2rl-webshop-prices:{seed}")
    products, seen = [], set()
    for p in raw:
        asin = p.get("asin")
        if not asin or asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        pricing = [float(Decimal(re.sub(r"[^\d.]", "", x))) for x in (p.get("pricing") or "").split("$")[1:]
                   if re.sub(r"[^\d.]", "", x)]
        pricing = pricing[:2] or [100.0]
        tag = f"${pricing[0]}" if len(pricing) == 1 else f"${pricing[0]} to ${pricing[1]}"
        options = {}
        for name, contents in (p.get("customization_options") or {}).items():
            if contents:
                options[name.lower()] = [c["value"].strip().replace("/", " | ").lower() for c in contents]
        bullets = p.get("small_description")
        products.append({
            "asin": asin, "Title": p["name"], "Description": p.get("full_description") or "",
            "BulletPoints": bullets if isinstance(bullets, list) else [bullets or ""],
            "Attributes": attributes.get(asin, {}).get("attributes") or ["DUMMY_ATTR"], "options": options,
            "pricing": pricing, "Price": tag,
            "price": pricing[0] if len(pricing) == 1 else rng.uniform(*pricing),
            "Rating": "N.A.", "Reviews": [], "category": p.get("category", ""),
            "query": (p.get("query") or "").lower().strip(), "product_category": p.get("product_category") or ""})
        if paper:
            products[-1]["instruction_text"] = attributes.get(asin, {}).get("instruction")
            products[-1]["instruction_attributes"] = attributes.get(asin, {}).get("instruction_attributes")
    return products


def synthetic_goals(products: list[dict], seed: int = 0) -> list[dict]:
    """The original's synthetic goals (``get_synthetic_goals``), in its shuffled order (seed 233): for each product
    with an instruction, one goal per combination of its option values (option names sorted), its text the
    instruction + " with <name>: <value>, and ..." + the price bound. The bound is drawn as the original draws it,
    from a seeded generator where the original's is unseeded (so the original's own bounds change run to run)."""
    rng = random.Random(f"a2rl-webshop-price-bounds:{seed}")
    goals = []
    for product in products:
        if product.get("instruction_text") is None:
            continue
        upper = price_bound(product["price"], rng)
        price_text = f", and price lower than {upper:.2f} dollars" if upper < 1_000_000 else ""
        names = sorted(product["options"])
        for combination in itertools.product(*(product["options"][n] for n in names)):
            options = dict(zip(names, combination))
            option_text = ", and ".join(f"{k}: {v}" for k, v in options.items())
            option_text = " with " + option_text if option_text else ""
            goals.append({"asin": product["asin"], "category": product["category"], "query": product["query"],
                          "name": product["Title"], "product_category": product["product_category"],
                          "instruction_text": f"{product['instruction_text']}{option_text}{price_text}",
                          "attributes": product["instruction_attributes"], "price_upper": upper,
                          "goal_options": options})
    random.Random(GOAL_SHUFFLE_SEED).shuffle(goals)
    for i, goal in enumerate(goals):  # the paper's session i
        goal["session"] = i
    return goals


def human_goals(root: Path, products: list[dict], seed: int = 0) -> list[dict]:
    """The original's human goals, in its shuffled order; `session` is a goal's index in it."""
    by_asin = {p["asin"]: p for p in products}
    rng = random.Random(f"a2rl-webshop-price-bounds:{seed}")
    goals = []
    for asin, instructions in json.loads((root / HUMAN_INSTRUCTIONS).read_text()).items():
        product = by_asin.get(asin)
        if product is None:
            continue
        for ins in instructions:
            if not ins.get("instruction_attributes"):
                continue
            upper = price_bound(product["price"], rng)
            price_text = f", and price lower than {upper:.2f} dollars" if upper < 1_000_000 else ""
            goals.append({"asin": asin, "category": product["category"], "query": product["query"],
                          "name": product["Title"], "product_category": product["product_category"],
                          "instruction_text": ins["instruction"].strip(".") + price_text,
                          "attributes": ins["instruction_attributes"], "price_upper": upper,
                          "goal_options": ins.get("instruction_options") or []})
    random.Random(GOAL_SHUFFLE_SEED).shuffle(goals)
    for i, goal in enumerate(goals):  # its index in that order: the original server's session `fixed_<i>`
        goal["session"] = i
    return goals


def split_goals(goals: list[dict], n_train: int, n_eval: int, n_final: int = 0) -> dict[str, list[dict]]:
    """Eval: the first n_eval goals; train: n_train from TRAIN_START; final: the next n_final after the eval ones
    whose text is neither an eval nor a train one's. A set of TRAIN_START goals or fewer has its train goals right
    after the final ones (then less any with a final one's text)."""
    small = len(goals) <= TRAIN_START
    evals, train = goals[:n_eval], [] if small else goals[TRAIN_START:TRAIN_START + n_train]
    taken = {g["instruction_text"] for g in evals + train}
    final, i = [], n_eval
    while len(final) < n_final and i < (len(goals) if small else TRAIN_START):
        if goals[i]["instruction_text"] not in taken:
            final.append(goals[i])
            taken.add(goals[i]["instruction_text"])
        i += 1
    if len(final) < n_final:
        raise ValueError(f"WebShop data: only {len(final)} instructions after the {n_eval} eval ones differ from the "
                         f"eval and train ones; lower final_size (it asks for {n_final})")
    if small:
        texts = {g["instruction_text"] for g in final}
        train = [g for g in goals[i:] if g["instruction_text"] not in texts][:n_train]
    return {"eval": evals, "train": train, "final": final}


class UpstreamShop:
    """The upstream products and instructions as a data source of WebShopEnvironment: the human instructions
    (a2rl's protocol), or the paper's synthetic ones over items_shuffle_1000 (``paper``, searched with the
    original's Lucene index, built once under cache_dir: envs.webshop.lucene_search; None: the default cache)."""

    def __init__(self, data_path: str, n_train: int, n_eval: int, seed: int = 0, n_final: int = 0,
                 paper: bool = False, cache_dir: str | Path | None = None):
        self.root = Path(data_path).expanduser()
        self.n_train, self.n_eval, self.seed, self.n_final = int(n_train), int(n_eval), int(seed), int(n_final)
        self.paper = bool(paper)
        self.cache_dir = cache_dir
        if not self.root.is_dir():
            raise FileNotFoundError(f"task.data_path={data_path!r} is not a folder; point it at WebShop's data/")

    def products(self) -> list[dict]:
        return load_products(self.root, self.seed, self.paper)

    def search_engine(self, products: list[dict]):
        """paper: the original's Lucene search (its index built at the first search if `prepare` has not built
        it); a2rl: None, the shop's BM25 (envs.webshop.search)."""
        if not self.paper:
            return None
        from contracts.layout import default_cache_dir
        from envs.webshop.lucene_search import LuceneSearchEngine, index_dir_for

        return LuceneSearchEngine(index_dir_for(self.cache_dir or default_cache_dir(), products), products)

    def goals(self, products: list[dict]) -> dict[str, list[dict]]:
        goals = synthetic_goals(products, self.seed) if self.paper else human_goals(self.root, products, self.seed)
        return split_goals(goals, self.n_train, self.n_eval, self.n_final)


def instruction_key(text: str) -> str:
    """An instruction as the original's imitation-learning code compares them: lower-case, no quotes, no price."""
    text = text.lower().replace('"', "").replace("'", "")
    text = text.replace("webshop\ninstruction:", "").replace("\n[button] search [button_]", "").strip()
    return text.split(", and price lower than")[0].strip()


_MARKS = re.compile(r"\[(?:clicked )?button_?\] ?")


def simple_text(state: str) -> str:
    """A trajectory's state (the rich text mode: [button] marks, one text a line) in the simple text mode."""
    lines = [ln.strip() for ln in _MARKS.sub("", state).splitlines()]
    return " [SEP] ".join(ln for ln in lines if ln)


def human_demonstrations(data_path: str, env) -> list[Demonstration] | None:
    """Train rows from the human trajectories (None when the data has none): each step's page as the simple text
    mode shows it, the actions then available, the human's action; only trajectories of train instructions."""
    path = Path(data_path).expanduser() / HUMAN_TRAJECTORIES
    if not path.is_file():
        return None
    train = {instruction_key(g["instruction_text"]): (inst, g)
             for inst, g in zip(env.instances("train"), env.goals("train"))}
    demos: list[Demonstration] = []
    episodes: dict[str, int] = {}
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        traj = json.loads(line)
        states, actions = traj.get("states") or [], traj.get("actions") or []
        found = train.get(instruction_key(states[0])) if states else None
        if found is None:  # an eval instruction's trajectory, or one outside the train split
            continue
        inst, goal = found
        episode = episodes[inst.name] = episodes.get(inst.name, -1) + 1
        available = traj.get("available_actions") or [[] for _ in states]
        for i, (state, action) in enumerate(zip(states, actions)):
            if action.startswith("search["):
                menu = [SEARCH_ACTION]
            else:
                menu = [a if "[" in a else f"click[{a}]" for a in available[i]] if i < len(available) else []
            demos.append(Demonstration(inst.name, goal["instruction_text"],
                                       Step(simple_text(state), tuple(menu), 0.0, False), tuple(actions[:i]), action,
                                       episode=episode, index=i, expert="human", info=dict(inst.info)))
    return demos
