"""WebShop's search under the paper's protocol is the original's: the Lucene index pyserini builds, searched as its
engine searches it, gives the original's ranked lists (tests/fixtures/parity/webshop_search.json, made by running the
original's own indexing and search code: make_webshop_search.py); a2rl's protocol keeps its BM25 (bm25s)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from envs.webshop import lucene_search
from envs.webshop.catalogue import GeneratedShop
from envs.webshop.environment import WebShopEnvironment, WebShopPaperEnvironment
from envs.webshop.lucene_search import LuceneSearchEngine, build_index, index_dir_for, index_present
from envs.webshop.real_data import UpstreamShop, load_products
from envs.webshop.search import SearchEngine
from envs.webshop.shop import ShopSession

FIXTURE = Path(__file__).parent / "fixtures" / "parity" / "webshop_search.json"


def write_data(root: Path, fixture: dict) -> Path:
    """The fixture's products (the scraped layout) as WebShop's data/ folder, with no instructions."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "items_shuffle_1000.json").write_text(json.dumps(fixture["products"]))
    (root / "items_ins_v2_1000.json").write_text("{}")
    (root / "items_human_ins.json").write_text("{}")
    return root


@pytest.fixture(scope="module")
def parity(tmp_path_factory):
    """The fixture's products read by a2rl's loader (the paper's files) and indexed by a2rl's code."""
    fixture = json.loads(FIXTURE.read_text())
    products = load_products(write_data(tmp_path_factory.mktemp("webshop-search-data"), fixture), paper=True)
    index = build_index(products, index_dir_for(tmp_path_factory.mktemp("cache"), products))
    return fixture, products, index


def test_lucene_search_gives_the_originals_ranked_lists(parity):
    fixture, products, index = parity
    assert fixture["pyserini"] == "0.17.0" and len(products) == 360  # 363 scraped, 3 skipped as upstream skips them
    engine = LuceneSearchEngine(index)
    results = fixture["results"]
    equal = [r["query"] for r in results if engine.search(r["query"]) == r["asins"]]
    assert len(equal) == len(results) == 663, [r["query"] for r in results if r["query"] not in equal][:10]
    assert sum(1 for r in results if len(r["asins"]) == 50) > 100  # full pages: the cut at k=50 is compared too
    assert sum(1 for r in results if not r["asins"]) > 10  # stopwords, unknown words, the empty query


def test_the_index_is_built_once_where_the_cache_says(parity, tmp_path, monkeypatch):
    _, products, index = parity
    assert index_present(index) and index.parent.name == "lucene" and index.parents[1].name == "webshop"
    assert index_dir_for(tmp_path, products) == index_dir_for(tmp_path, list(products))  # a digest of the text
    assert index_dir_for(tmp_path, products) != index_dir_for(tmp_path, products[1:])
    monkeypatch.setattr(lucene_search.subprocess, "run", lambda *a, **k: pytest.fail("indexed again"))
    assert build_index(products, index) == index
    with pytest.raises(FileNotFoundError, match="build it first"):
        LuceneSearchEngine(tmp_path / "nothing")


def test_the_paper_searches_upstream_data_with_lucene_and_a2rl_keeps_bm25s(parity, tmp_path):
    data, cache = write_data(tmp_path / "data", parity[0]), tmp_path / "cache"
    paper = WebShopPaperEnvironment(UpstreamShop(str(data), 5, 10, paper=True, cache_dir=cache), 20)
    engine = paper.shop.engine
    assert isinstance(engine, LuceneSearchEngine) and not index_present(engine.index_dir)  # built at the first search
    products = list(paper.shop.products.values())
    session = ShopSession(paper.shop, {"instruction_text": "i want a shampoo"})
    session.step(f"search[{products[0]['Title']}]")
    assert session.results[0] == products[0]["asin"]
    assert engine.index_dir == index_dir_for(cache, products) and index_present(engine.index_dir)

    a2rl = WebShopEnvironment(UpstreamShop(str(data), 5, 10, cache_dir=cache), 20)
    assert type(a2rl.shop.engine) is SearchEngine
    generated = WebShopPaperEnvironment(GeneratedShop(40, 5, 10), 20)  # the stand-in store: flagged
    assert type(generated.shop.engine) is SearchEngine
