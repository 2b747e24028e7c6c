"""The shop's pages and actions, as WebShop's text environment shows them (``web_agent_site/envs/web_agent_text_env``,
observation mode "text": a page's visible texts joined by `` [SEP] ``).

Pages: search (a search bar), results (10 products a page out of at most 50, ``Next >`` / ``< Prev``), item (option
groups, ``Description`` / ``Features`` / ``Reviews``, ``Buy Now``), a product's sub-page, and the done page that shows
the reward. Actions, as the original parses them (``name[argument]``, the argument lower-cased):

- ``search[query]``: a new search, from any page (the original allows it anywhere);
- ``click[x]`` with ``x`` one of the page's clickables: ``back to search``, ``next >``, ``< prev``, a product's asin,
  an option's value, ``description``, ``features``, ``reviews``, ``buy now``.

Anything else (an unknown button, a malformed action, ``click[search]``) leaves the page as it was, with reward 0: the
page answers, never an error. ``buy now`` ends the episode with the purchase's reward (``envs.webshop.reward``).
"""
from __future__ import annotations

import json
import re

from envs.webshop.reward import reward as purchase_reward
from envs.webshop.search import SearchEngine

PRODUCT_WINDOW = 10
END_BUTTON, NEXT_PAGE, PREV_PAGE, BACK_TO_SEARCH = "buy now", "next >", "< prev", "back to search"
SUB_PAGES = ("description", "features", "reviews")
SEARCH_ACTION = "search[<query>]"   # how the actions list says that the page has a search bar
_ACTION_RE = re.compile(r"(.+)\[(.+)\]")


def parse_action(action: str) -> tuple[str, str | None]:
    """The original's parse (``web_agent_site/engine/engine.py``): ``name[argument]`` -> (name, argument), else
    (action, None); nothing stripped, the first line only (``.`` stops at a newline)."""
    m = _ACTION_RE.match(action)
    return (m.group(1), m.group(2)) if m else (action, None)


class Shop:
    """A catalogue and its search engine, shared by every session of a process. engine: anything with
    ``search(query) -> asins`` (envs.webshop.lucene_search.LuceneSearchEngine); BM25 over the products if None."""

    def __init__(self, products: list[dict], engine=None):
        self.products = {p["asin"]: p for p in products}
        self.engine = SearchEngine(products) if engine is None else engine


class ShopSession:
    """One shopper on one instruction: the current page, what was searched and chosen."""

    def __init__(self, shop: Shop, goal: dict):
        self.shop, self.goal = shop, goal
        self.reset()

    # -- state ----------------------------------------------------------------------------------------------------
    def reset(self) -> str:
        self.page, self.keywords, self.results, self.number = "search", "", [], 1
        self.asin: str | None = None
        self.options: dict[str, str] = {}
        self.sub_page = ""
        self.reward, self.done, self.reward_info = 0.0, False, {}
        return self.observation()

    @property
    def instruction(self) -> str:
        return self.goal["instruction_text"]

    def _product(self) -> dict:
        return self.shop.products[self.asin]

    def clickables(self) -> list[str]:
        if self.page == "results":
            out = [BACK_TO_SEARCH]
            if self.number > 1:
                out.append(PREV_PAGE)
            if self.number * PRODUCT_WINDOW < len(self.results):
                out.append(NEXT_PAGE)
            return out + [asin.lower() for asin in self._window()]
        if self.page == "item":
            values = [v for vs in self._product()["options"].values() for v in vs]
            return [BACK_TO_SEARCH, PREV_PAGE, *values, *SUB_PAGES, END_BUTTON]
        if self.page == "sub":
            return [BACK_TO_SEARCH, PREV_PAGE]
        return []

    def page_clickables(self) -> list[str]:
        """The page's clickables as the original's text environment lists them (``get_available_actions``): its
        buttons in the page's order, then its product links, then its option values, each text once."""
        if self.page == "search":
            return ["search"]
        if self.page == "results":
            return self.clickables()
        if self.page == "item":
            values = [v for vs in self._product()["options"].values() for v in vs]
            return list(dict.fromkeys([BACK_TO_SEARCH, PREV_PAGE, *SUB_PAGES, END_BUTTON, *values]))
        return self.clickables()

    def actions(self) -> list[str]:
        """What can be done on this page: ``search[<query>]`` where there is a search bar, and each clickable."""
        return ([SEARCH_ACTION] if self.page == "search" else []) + [f"click[{c}]" for c in self.clickables()]

    def _window(self) -> list[str]:
        return self.results[(self.number - 1) * PRODUCT_WINDOW:self.number * PRODUCT_WINDOW]

    # -- actions --------------------------------------------------------------------------------------------------
    def step(self, action: str) -> tuple[str, float, bool]:
        """(observation, reward, done). The reward is the purchase's, on ``click[buy now]``; 0 otherwise."""
        if self.done:
            return self.observation(), 0.0, True
        name, arg = parse_action(action)
        arg = arg.lower() if arg is not None else None  # as the original: lower-cased, not stripped
        if name == "search" and arg:  # "search[  ]" too: the original searches for nothing
            arg = arg.strip()
            self.keywords, self.results, self.number = arg, self.shop.engine.search(arg), 1
            self.page, self.asin, self.options = "results", None, {}
        elif name == "click" and arg and arg != "search" and arg in self.clickables():
            self._click(arg)
        return self.observation(), (self.reward if self.done else 0.0), self.done

    def _click(self, arg: str) -> None:
        if arg == BACK_TO_SEARCH:
            self.page, self.asin, self.options = "search", None, {}
        elif self.page == "results":
            if arg == NEXT_PAGE:
                self.number += 1
            elif arg == PREV_PAGE:
                self.number -= 1
            else:
                self.page, self.asin, self.options = "item", arg.upper(), {}
        elif self.page == "item":
            product = self._product()
            if arg == PREV_PAGE:
                self.page = "results"
            elif arg in SUB_PAGES:
                self.page, self.sub_page = "sub", arg
            elif arg == END_BUTTON:
                price = product["price"]
                self.reward, self.reward_info = purchase_reward(product, self.goal, price, self.options)
                self.page, self.done = "done", True
            else:
                for option, values in product["options"].items():
                    if arg in values:
                        self.options[option] = arg
        elif self.page == "sub" and arg == PREV_PAGE:
            self.page = "item"

    # -- pages ----------------------------------------------------------------------------------------------------
    def observation(self) -> str:
        head = ["Instruction:", self.instruction]
        if self.page == "search":
            texts = ["WebShop", *head, "Search"]
        elif self.page == "results":
            total = len(self.results)
            texts = [*head, "Back to Search", f"Page {self.number} (Total results: {total})"]
            texts += (["< Prev"] if self.number > 1 else []) + (["Next >"] if NEXT_PAGE in self.clickables() else [])
            for asin in self._window():
                product = self.shop.products[asin]
                texts += [asin, product["Title"], product["Price"]]
        elif self.page == "item":
            product = self._product()
            texts = [*head, "Back to Search", "< Prev"]
            for option, values in product["options"].items():
                texts += [option, *values]
            texts += [product["Title"], f"Price: {product['Price']}", f"Rating: {product['Rating']}",
                      "Description", "Features", "Reviews", "Buy Now"]
        elif self.page == "sub":
            product = self._product()
            texts = [*head, "Back to Search", "< Prev"]
            if self.sub_page == "description":
                texts.append(product["Description"])
            elif self.sub_page == "features":
                texts += product["BulletPoints"]
            else:
                texts += [f"{r['score']} stars: {r['body']}" for r in product["Reviews"]] or ["No reviews yet."]
        else:
            texts = ["Thank you for shopping with us!", "Purchased", "asin", self.asin, "options",
                     json.dumps(self.options), "Your score (min 0.0, max 1.0)", f"{self.reward:.4f}"]
        return " [SEP] ".join(texts)
