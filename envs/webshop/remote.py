"""WebShop played on a running original server (princeton-nlp/WebShop's Flask app), for ``task.server_url``.

The instructions still come from the upstream files (``task.data_path``: the data/ folder that server loads): an
instance is the server's session ``fixed_<i>``, i being its goal's index in the original's shuffled order, so the eval
split is the server's sessions 0..n_eval-1 as in the paper. The client is a text browser: it fetches the server's
pages, follows the page's own forms and links for a click (a button posts its form, a product link and an option's
radio get their URL), and shows a page as the original's text mode does (its visible texts joined by `` [SEP] ``).
The reward is the one the server's done page shows: the server's search engine and reward, not a copy of them.

Every episode opens a new server session (``a2rl<random>_fixed_<i>``: the server picks the goal from the name's last
part). At reset the page's instruction is checked against the data's (price bound aside: the server draws its own):
a server that loads other data is refused rather than graded against the wrong instructions.
"""
from __future__ import annotations

import secrets
import threading
from html.parser import HTMLParser

import httpx

from contracts.infra import InfraError
from contracts.environment import Episode, Instance, Step
from envs.webshop.environment import MAX_STEPS, WebShopEnvironment
from envs.webshop.real_data import instruction_key
from envs.webshop.reward import SUCCESS
from envs.webshop.shop import SEARCH_ACTION, parse_action

SKIPPED = {"style", "script", "head", "title", "meta"}   # the original's tag_visible
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
TIMEOUT_S = 60.0


class ServerError(InfraError):
    """The server did not answer a page, or answered one unlike the original's: an infrastructure failure, not the
    model's."""


class Page(HTMLParser):
    """One page of the original site: its visible texts, its clickables (lower-cased text -> (method, url)), whether
    it has the search bar, its instruction and, on the done page, the reward."""

    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.texts: list[str] = []
        self.clickables: dict[str, tuple[str, str]] = {}
        self.search_bar = False
        self.instruction = ""
        self.reward: float | None = None
        self._open: list[tuple[str, dict, bool]] = []   # (tag, attrs, hidden) of the elements we are inside
        self._form: tuple[str, str] | None = None       # (method, action) of the form we are inside
        self._button: list[str] | None = None           # the text of the button we are inside
        self._link: tuple[str, list[str]] | None = None # (href, text) of the product link we are inside
        self.feed(html)
        self.close()

    def _inside(self, key: str, value: str) -> bool:
        return any(attrs.get(key) == value for _, attrs, _ in self._open)

    def handle_starttag(self, tag: str, attrs_list) -> None:
        attrs = {k: v or "" for k, v in attrs_list}
        if tag == "form":
            self._form = (attrs.get("method", "get").upper(), attrs.get("action", ""))
        elif tag == "button" and "btn" in attrs.get("class", "").split():
            self._button = []
        elif tag == "a" and "product-link" in attrs.get("class", "").split():
            self._link = (attrs.get("href", ""), [])
        elif tag == "input" and attrs.get("id") == "search_input":
            self.search_bar = True
        elif tag == "input" and attrs.get("type") == "radio" and attrs.get("value"):
            self.clickables.setdefault(attrs["value"].strip().lower(), ("GET", attrs.get("data-url", "")))
        if tag not in VOID:
            hidden = "hidden" in attrs or "display:none" in attrs.get("style", "").replace(" ", "")
            self._open.append((tag, attrs, hidden))

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._form = None
        elif tag == "button" and self._button is not None:
            if self._form:
                self.clickables.setdefault(" ".join(self._button).strip().lower(), self._form)
            self._button = None
        elif tag == "a" and self._link is not None:
            self.clickables.setdefault(" ".join(self._link[1]).strip().lower(), ("GET", self._link[0]))
            self._link = None
        # close up to the matching element; a stray end tag (the original's templates have some) closes nothing
        for i in range(len(self._open) - 1, -1, -1):
            if self._open[i][0] == tag:
                del self._open[i:]
                break

    def handle_data(self, data: str) -> None:
        text = data.strip()
        if not text or not self._open or any(t in SKIPPED or hidden for t, _, hidden in self._open):
            return
        self.texts.append(text)
        if self._button is not None:
            self._button.append(text)
        if self._link is not None:
            self._link[1].append(text)
        if self._inside("id", "instruction-text") and text != "Instruction:":
            self.instruction = text
        if self._inside("id", "reward") and self._open[-1][0] == "pre":
            try:
                self.reward = float(text)
            except ValueError:
                raise ServerError(f"the done page's reward is {text!r}, not a number: is task.server_url the "
                                  "original WebShop site?") from None

    def observation(self) -> str:
        return " [SEP] ".join(self.texts)

    def actions(self) -> list[str]:
        return ([SEARCH_ACTION] if self.search_bar else []) + [f"click[{c}]" for c in self.clickables if c != "search"]


class RemoteEpisode(Episode):
    def __init__(self, env: "RemoteWebShopEnvironment", goal: dict):
        self.env, self.data_goal, self.max_steps = env, goal, env.max_steps
        self.page: Page | None = None
        self.done, self.reward = False, 0.0

    def _get(self, method: str, url: str, data: dict | None = None) -> Page:
        url = httpx.URL(self.env.server_url).join(url)
        try:
            resp = self.env.client().request(method, url, data=data)
        except httpx.HTTPError as e:
            raise ServerError(f"WebShop server {self.env.server_url}: {method} {url} failed ({e!r}); is it running "
                              "and reachable from the grader and the rollout hosts?") from e
        if resp.status_code >= 400:
            raise ServerError(f"WebShop server {self.env.server_url}: {method} {url} answered {resp.status_code}: "
                              f"{resp.text[:300]}")
        return Page(resp.text)

    def _step(self, reward: float = 0.0) -> Step:
        """reward: the purchase's, on the step that bought (later steps of a done episode earn nothing, as in
        process)."""
        won = self.done and self.reward >= SUCCESS
        return Step(self.page.observation(), tuple(self.page.actions()), reward,
                    self.done or self.steps >= self.max_steps, won)

    def reset(self) -> Step:
        self.steps, self.done, self.reward = 0, False, 0.0
        session = f"a2rl{secrets.token_hex(6)}_fixed_{self.data_goal['session']}"
        self.page = self._get("GET", f"/{session}")
        self.session = session
        if instruction_key(self.page.instruction) != instruction_key(self.data_goal["instruction_text"]):
            raise ServerError(
                f"WebShop server {self.env.server_url}: session fixed_{self.data_goal['session']} asks "
                f"{self.page.instruction!r}, the data at task.data_path has {self.data_goal['instruction_text']!r}: "
                "point task.data_path at the data/ folder that server loads (the same products file)")
        self.goal = self.page.instruction
        return self._step()

    def step(self, action: str) -> Step:
        if self.done:
            return self._step()
        self.steps += 1
        name, arg = parse_action(action)
        arg = arg.strip().lower() if arg is not None else None
        if name == "search" and arg:  # the site's search form, from any page (as the original's text env allows)
            self.page = self._get("POST", f"/{self.session}", {"search_query": arg})
        elif name == "click" and arg and arg != "search" and arg in self.page.clickables:
            self.page = self._get(*self.page.clickables[arg])
            if self.page.reward is not None:   # the done page
                self.done, self.reward = True, self.page.reward
                return self._step(self.reward)
        return self._step()


class RemoteWebShopEnvironment(WebShopEnvironment):
    """The instances and goals of the upstream data (an ``UpstreamShop``); episodes played on the server."""

    def __init__(self, data, max_steps: int = MAX_STEPS, server_url: str = ""):
        super().__init__(data, max_steps)
        self.server_url = server_url.rstrip("/") + "/"
        self._client: httpx.Client | None = None
        self._client_lock = threading.Lock()

    def __getstate__(self) -> dict:
        return {**super().__getstate__(), "server_url": self.server_url}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["data"], state["max_steps"], state["server_url"])

    def build(self):
        """The goals only: the server searches and rewards, so no store (and no search index) is built here."""
        with self._lock:
            if self._built is None:
                self._built = (None, self.data.goals(self.data.products()))
        return self._built

    def client(self) -> httpx.Client:
        with self._client_lock:  # one connection pool per process, for all its episodes
            if self._client is None:
                self._client = httpx.Client(timeout=TIMEOUT_S, follow_redirects=True, trust_env=False)
        return self._client

    def open(self, instance: Instance) -> RemoteEpisode:
        return RemoteEpisode(self, self.goal(instance))
