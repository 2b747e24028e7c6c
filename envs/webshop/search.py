"""The shop's search engine: BM25 (bm25s) over each product's title, description, first feature and options, as the
original indexes its products for Lucene (``search_engine/convert_product_file_format.py``).

``search(query)`` answers the asins of at most ``SEARCH_RETURN_N`` products with a positive score, best first; equal
scores keep catalogue order, so a query always gets the same list.
"""
from __future__ import annotations

import numpy as np

from envs.bm25 import load_bm25s

SEARCH_RETURN_N = 50


def document(product: dict) -> str:
    """A product's text as the original indexes it (``contents``; envs.webshop.lucene_search indexes the same)."""
    options = ", and ".join(f"{name}: {', '.join(values)}" for name, values in product["options"].items())
    bullets = product["BulletPoints"][:1]
    return " ".join([product["Title"], product["Description"], *bullets, options]).lower()


class SearchEngine:
    def __init__(self, products: list[dict]):
        bm25s = load_bm25s()

        self.asins = [p["asin"] for p in products]
        self.tokenizer = bm25s.tokenization.Tokenizer(stopwords="en", stemmer=None)
        self.index = bm25s.BM25()
        self.index.index(self.tokenizer.tokenize([document(p) for p in products], show_progress=False),
                         show_progress=False)
        self.unknown = self.tokenizer.get_vocab_dict().get("")  # where words the index never saw go

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[str]:
        ids = self.tokenizer.tokenize([query.lower()], update_vocab=False, show_progress=False)[0]
        known = [i for i in ids if i != self.unknown]
        if not known:
            return []
        scores = self.index.get_scores(known)
        order = np.lexsort((np.arange(len(scores)), -scores))[:k]
        return [self.asins[i] for i in order if scores[i] > 0]
