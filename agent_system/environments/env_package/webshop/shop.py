"""The built-in shop: WebShop's text pages and actions over a generated catalogue, with BM25 search.

It has the interface of WebShop's ``WebAgentTextEnv`` (text mode) so one adapter drives both:
``reset(session) -> (obs, None)``, ``step(action) -> (obs, reward, done, info)``,
``get_available_actions() -> {"has_search_bar", "clickables"}`` and ``instruction_text``. Pages: search ->
results (10 per page, up to 50 hits) -> item (options, Description / Features / Reviews, Buy Now). The
reward of ``click[buy now]`` is WebShop's purchase score in [0, 1] (scoring.py).
"""

from __future__ import annotations

import functools
import re

from agent_system.environments.env_package.webshop.catalog import Goal, Product, generate_catalog, generate_goal
from agent_system.environments.env_package.webshop.scoring import purchase_score

SEP = " [SEP] "
PAGE_SIZE = 10
MAX_RESULTS = 50
_ACTION = re.compile(r"^\s*(search|click)\[(.*)\]\s*$", re.IGNORECASE | re.DOTALL)


@functools.lru_cache(maxsize=4)
def _catalog_and_index(num_products: int, seed: int):
    import bm25s

    products = generate_catalog(num_products, seed)
    docs = [" ".join([p.title, p.product_type, *p.attributes, p.description]) for p in products]
    index = bm25s.BM25()
    index.index(bm25s.tokenize(docs, stopwords="en", show_progress=False), show_progress=False)
    return products, index


VAL_PRODUCT_EVERY = 5  # every 5th product of the catalogue is a validation-only goal product


def goal_products(products: list[Product], split: str) -> list[Product]:
    """The products goals of ``split`` are drawn from: validation goals ask for held-out products (every
    ``VAL_PRODUCT_EVERY``-th, 20%) that no training goal asks for; the shop itself sells every product."""
    if split not in ("train", "val"):
        raise ValueError(f"split={split!r} must be 'train' or 'val'")
    if len(products) < VAL_PRODUCT_EVERY:
        raise ValueError(f"the built-in shop needs at least {VAL_PRODUCT_EVERY} products (env.webshop.num_products) to hold some out for validation")
    held_out = split == "val"
    return [p for i, p in enumerate(products) if (i % VAL_PRODUCT_EVERY == VAL_PRODUCT_EVERY - 1) == held_out]


class BuiltinShopTextEnv:
    def __init__(self, num_products: int = 200, seed: int = 0, split: str = "train"):
        import bm25s

        self._bm25s = bm25s
        self.products, self._index = _catalog_and_index(num_products, seed)
        self._goal_products = goal_products(self.products, split)
        self._by_asin = {p.asin.lower(): p for p in self.products}
        self.seed = seed
        self.goal: Goal | None = None

    # ----- WebAgentTextEnv interface -----
    def reset(self, session: int = 0):
        self.goal = generate_goal(self._goal_products, int(session), self.seed)
        self.instruction_text = self.goal.instruction
        self._page = "search"
        self._results: list[Product] = []
        self._page_num = 1
        self._item: Product | None = None
        self._chosen: dict[str, str] = {}
        self._sub = ""
        return self.observation(), None

    def get_available_actions(self) -> dict:
        if self._page == "search":
            return {"has_search_bar": True, "clickables": ["search"]}
        clickables = ["back to search"]
        if self._page == "results":
            if self._page_num > 1:
                clickables.append("< prev")
            if self._page_num * PAGE_SIZE < len(self._results):
                clickables.append("next >")
            clickables += [p.asin.lower() for p in self._page_items()]
        elif self._page == "item":
            clickables.append("< prev")
            clickables += [v for values in self._item.options.values() for v in values]
            clickables += ["description", "features", "reviews", "buy now"]
        else:
            clickables.append("< prev")
        return {"has_search_bar": False, "clickables": clickables}

    def step(self, action: str):
        m = _ACTION.match(action or "")
        if m is None:
            return self.observation(), 0.0, False, {"valid": False}
        kind, arg = m.group(1).lower(), m.group(2).strip()
        available = self.get_available_actions()
        if kind == "search":
            if not available["has_search_bar"] or not arg:
                return self.observation(), 0.0, False, {"valid": False}
            self._search(arg)
            return self.observation(), 0.0, False, {"valid": True}
        target = arg.lower()
        if target not in available["clickables"]:
            return self.observation(), 0.0, False, {"valid": False}
        if target == "buy now":
            result = purchase_score(self._item, self._chosen, self.goal)
            self._page = "done"
            return f"Thank you for shopping with us!{SEP}Your score (min 0.0, max 1.0){SEP}{result['score']:.4f}", result["score"], True, {"valid": True, "purchase": result}
        self._click(target)
        return self.observation(), 0.0, False, {"valid": True}

    # ----- pages -----
    def _search(self, query: str) -> None:
        tokens = self._bm25s.tokenize([query], stopwords="en", return_ids=False, show_progress=False)[0]
        tokens = [t for t in tokens if t in self._index.vocab_dict]
        self._results = []
        if tokens:
            k = min(MAX_RESULTS, len(self.products))
            docs, scores = self._index.retrieve([tokens], k=k, show_progress=False, n_threads=1)
            self._results = [self.products[i] for i, s in zip(docs[0].tolist(), scores[0].tolist()) if s > 0]
        self._page, self._page_num = "results", 1

    def _click(self, target: str) -> None:
        if target == "back to search":
            self._page, self._item, self._chosen = "search", None, {}
        elif target == "next >":
            self._page_num += 1
        elif target == "< prev":
            if self._page == "results":
                self._page_num -= 1
            elif self._page == "item":
                self._page, self._item, self._chosen = "results", None, {}
            else:
                self._page = "item"
        elif self._page == "results":
            self._page, self._item, self._chosen = "item", self._by_asin[target], {}
        elif target in ("description", "features", "reviews"):
            self._page, self._sub = "sub", target
        else:  # an option value
            option_type = next(t for t, values in self._item.options.items() if target in values)
            self._chosen[option_type] = target

    def _page_items(self) -> list[Product]:
        start = (self._page_num - 1) * PAGE_SIZE
        return self._results[start : start + PAGE_SIZE]

    def observation(self) -> str:
        head = f"Instruction:{SEP}{self.goal.instruction}"
        if self._page == "search":
            return f"WebShop{SEP}{head}{SEP}Search"
        if self._page == "results":
            parts = [head, "Back to Search", f"Page {self._page_num} (Total results: {len(self._results)})"]
            if self._page_num > 1:
                parts.append("< Prev")
            if self._page_num * PAGE_SIZE < len(self._results):
                parts.append("Next >")
            for p in self._page_items():
                parts += [p.asin, p.title, f"${p.price:.2f}"]
            return SEP.join(parts)
        p = self._item
        if self._page == "item":
            parts = [head, "Back to Search", "< Prev"]
            for option_type, values in p.options.items():
                parts += [option_type, *values]
            parts += [p.title, f"Price: ${p.price:.2f}", "Rating: N.A.", "Description", "Features", "Reviews", "Buy Now"]
            if self._chosen:
                parts.append("Selected: " + ", ".join(f"{t}: {v}" for t, v in self._chosen.items()))
            return SEP.join(parts)
        body = {"description": p.description, "features": SEP.join(p.features), "reviews": "No reviews yet."}[self._sub]
        return SEP.join([head, "Back to Search", "< Prev", body])

    # ----- scripted shopper -----
    def expert_action(self) -> str | None:
        """Search the goal's words, page to the goal's product, pick its options, buy."""
        goal = self.goal
        if goal is None or self._page == "done":
            return None
        if self._page == "search":
            return f"search[{goal.query}]"
        if self._page == "sub":
            return "click[< prev]"
        if self._page == "results":
            clickables = self.get_available_actions()["clickables"]
            if goal.asin.lower() in clickables:
                return f"click[{goal.asin.lower()}]"
            if "next >" in clickables:
                return "click[next >]"
            return "click[back to search]"
        if self._item.asin != goal.asin:
            return "click[< prev]"
        for option_type, value in goal.options.items():
            if self._chosen.get(option_type) != value:
                return f"click[{value}]"
        return "click[buy now]"
