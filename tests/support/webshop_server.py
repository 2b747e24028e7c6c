"""A stand-in for the original WebShop server (princeton-nlp/WebShop's ``web_agent_site/app.py``) on 127.0.0.1.

The original cannot run here (its Flask app needs pyserini's Lucene index, spaCy's model and the scraped data). This
one serves its routes with its pages' HTML layout (the ids, classes, forms, links and option radios its templates
have, the search form's redirect, a session's goal picked by ``fixed_<i>`` as the original picks it, the done page
with the goal in a hidden block) over a WebShopEnvironment's store: its BM25 search and its reward. Used by the tests
of envs.webshop.remote.
"""
from __future__ import annotations

import ast
import html
import json
from urllib.parse import parse_qs, quote

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from envs.webshop.reward import reward as purchase_reward
from envs.webshop.shop import PRODUCT_WINDOW

HEAD = ('<head><title>WebShop</title><link rel="stylesheet" href="/static/style.css">'
        '<script src="https://ajax.googleapis.com/ajax/libs/jquery/3.5.1/jquery.min.js"></script></head>')


def url(*parts) -> str:
    """As Flask's url_for puts a list or dict in a path: its str(), quoted."""
    return "/" + "/".join(quote(str(p), safe="") for p in parts)


def esc(text) -> str:
    return html.escape(str(text))


def form(action: str, label: str, cls: str = "btn btn-primary") -> str:
    return f'<form method="post" action="{action}"><button type="submit" class="{cls}">{esc(label)}</button></form>'


class WebShopServer:
    """goals: the server's goal list (a goal's index is its session number); shop: an envs.webshop.shop.Shop."""

    def __init__(self, shop, goals: list[dict]):
        self.shop, self.goals = shop, goals
        self.sessions: dict[str, dict] = {}
        self.requests: list[str] = []
        self.app = self._make_app()
        self._server = None

    @property
    def url(self) -> str:
        return self._server.url

    def start(self) -> "WebShopServer":
        from agents.proxy.server import ThreadServer

        self._server = ThreadServer(self.app).start()
        return self

    def stop(self) -> None:
        if self._server:
            self._server.stop()

    # -- pages, laid out as the original's templates -------------------------------------------------------------
    def _page(self, sid: str, body: str) -> HTMLResponse:
        goal = self.sessions[sid]
        instruction = (f'<div id="instruction-text" class="text-center"><h4>Instruction:<br>'
                       f'{esc(goal["instruction_text"])}</h4></div>')
        return HTMLResponse(f"<!DOCTYPE html><html>{HEAD}<body><div class=\"container\">{instruction}{body}"
                            "</div></body></html>")

    def search_page(self, sid: str) -> HTMLResponse:
        goal = self.sessions[sid]
        return HTMLResponse(
            f'<!DOCTYPE html><html>{HEAD}<body><!-- Code reference: bootsnipp --><div id="logo"><h2>WebShop</h2></div>'
            f'<div id="instruction-text" class="text-center"><h4>Instruction: <br>{esc(goal["instruction_text"])}</h4>'
            f'</div><form role="form" method="post" action="{url(sid)}"><div class="input-group">'
            '<input id="search_input" class="form-control" type="text" name="search_query" required/>'
            '<span class="input-group-btn"><button class="btn btn-success" type="submit"><i class="glyphicon">'
            '</i>Search</button></span></div></form></body></html>')

    def results_page(self, sid: str, keywords: list[str], page: int) -> HTMLResponse:
        asins = self.shop.engine.search(" ".join(keywords))
        body = form(url(sid), "Back to Search", "btn btn-success")
        body += f'<div class="display-4"><h3>Page {page} (Total results: {len(asins)})</h3></div>'
        if page > 1:
            body += form(url("search_results", sid, keywords, page - 1), "< Prev")
        body += form(url("search_results", sid, keywords, page + 1), "Next >")   # always there, as the original's
        for asin in asins[(page - 1) * PRODUCT_WINDOW:page * PRODUCT_WINDOW]:
            p = self.shop.products[asin]
            link = url("item_page", sid, asin, keywords, page, {})
            # the original's mismatched h4/h5 tags and commented-out fields, kept
            body += (f'<div class="searched-product"><h4 class="product-asin"><a class="product-link" href="{link}">'
                     f'{asin}</a></h5><h4 class="product-title">{esc(p["Title"])}</h5>'
                     f'<h5 class="product-price">{esc(p["Price"])}</h6>'
                     f'<!-- <h5 class="product-category">{esc(p["category"])}</h5> --></div>')
        return self._page(sid, body)

    def item_page(self, sid: str, asin: str, keywords: list[str], page: int, options: dict) -> HTMLResponse:
        p = self.shop.products[asin]
        body = form(url(sid), "Back to Search", "btn btn-success")
        body += form(url("search_results", sid, keywords, page), "< Prev")
        for name, values in p["options"].items():
            body += f'<div class="row"><h4>{esc(name)}</h4><div class="radio-toolbar">'
            for i, value in enumerate(values):
                target = url("item_page", sid, asin, keywords, page, {**options, name: value})
                body += (f'<input type="radio" id="radio_{esc(name)}{i}" name="{esc(name)}" value="{esc(value)}" '
                         f'data-url="{target}"><label for="radio_{esc(name)}{i}">{esc(value)}</label>')
            body += "</div></div>"
        body += f'<h2>{esc(p["Title"])}</h2><h4>Price: {esc(p["Price"])}</h4><h4>Rating: {esc(p["Rating"])}</h4>'
        for sub in ("Description", "Features", "Reviews"):
            body += form(url("item_sub_page", sid, asin, keywords, page, sub, options), sub)
        body += form(url("done", sid, asin, options), "Buy Now", "btn btn-lg purchase")
        body += "<script>$('input:radio').each(function() { /* reload with the chosen option */ });</script>"
        return self._page(sid, body)

    def sub_page(self, sid: str, asin: str, keywords: list[str], page: int, sub: str, options: dict) -> HTMLResponse:
        p = self.shop.products[asin]
        body = form(url(sid), "Back to Search", "btn btn-success")
        body += form(url("item_page", sid, asin, keywords, page, options), "< Prev")
        if sub == "Description":
            body += f'<p class="product-info">{esc(p["Description"])}</p>'
        elif sub == "Features":
            body += "<ul>" + "".join(f"<li><p>{esc(b)}</p></li>" for b in p["BulletPoints"]) + "</ul>"
        else:
            reviews = [f"{r['score']} stars: {r['body']}" for r in p["Reviews"]] or ["No reviews yet."]
            body += "".join(f"<p>{esc(r)}</p>" for r in reviews)
        return self._page(sid, body)

    def done_page(self, sid: str, asin: str, options: dict) -> HTMLResponse:
        goal, product = self.sessions[sid], self.shop.products[asin]
        value, info = purchase_reward(product, goal, product["price"], options)
        return HTMLResponse(
            f'<!DOCTYPE html><html>{HEAD}<body><div id="thankyou"><h1>Thank you for shopping with us!</h1></div>'
            f'<div id="stats"><div style="display:none"><h2>Purchased</h2><h4 id="asin">asin<pre>{asin}</pre></p>'
            f'<h2>Target</h2><h4 id="goal-asin">asin<pre>{goal["asin"]}</pre></p>'
            f'<h4 id="goal-options">options<pre>{esc(goal["goal_options"])}</pre></h4></div>'
            f'<h3 id="reward">Your score (min 0.0, max 1.0)<pre>{value}</pre></h3>'
            f'<h4 hidden>Reward Details <div id="reward_info"><pre>{esc(json.dumps(info))}</pre></div></h4>'
            '</div></body></html>')

    # -- routes, as the original's -------------------------------------------------------------------------------
    def _make_app(self) -> FastAPI:
        app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
        methods = ["GET", "POST"]

        @app.middleware("http")
        async def log(request: Request, call_next):
            self.requests.append(f"{request.method} {request.url.path}")
            return await call_next(request)

        @app.api_route("/{sid}", methods=methods)
        async def index(sid: str, request: Request):
            if sid not in self.sessions:   # the original: a "fixed" session's goal is goals[int(last part)]
                if "fixed" not in sid:
                    return HTMLResponse("only fixed_<i> sessions here", 400)
                self.sessions[sid] = self.goals[int(sid.split("_")[-1])]
            if request.method == "POST":
                fields = parse_qs((await request.body()).decode())
                if "search_query" in fields:
                    keywords = fields["search_query"][0].lower().split(" ")
                    return RedirectResponse(url("search_results", sid, keywords, 1), 302)
            return self.search_page(sid)

        @app.api_route("/search_results/{sid}/{keywords}/{page}", methods=methods)
        async def search_results(sid: str, keywords: str, page: int):
            words = ast.literal_eval(keywords) if keywords.startswith("[") else [keywords]
            return self.results_page(sid, words, page)

        @app.api_route("/item_page/{sid}/{asin}/{keywords}/{page}/{options}", methods=methods)
        async def item_page(sid: str, asin: str, keywords: str, page: int, options: str):
            return self.item_page(sid, asin, ast.literal_eval(keywords), page, ast.literal_eval(options))

        @app.api_route("/item_sub_page/{sid}/{asin}/{keywords}/{page}/{sub}/{options}", methods=methods)
        async def item_sub_page(sid: str, asin: str, keywords: str, page: int, sub: str, options: str):
            return self.sub_page(sid, asin, ast.literal_eval(keywords), page, sub, ast.literal_eval(options))

        @app.api_route("/done/{sid}/{asin}/{options}", methods=methods)
        async def done(sid: str, asin: str, options: str):
            return self.done_page(sid, asin, ast.literal_eval(options))

        return app
