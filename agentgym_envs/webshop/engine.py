"""The WebShop game: pages, what is clickable on them, where each click leads, and the purchase.

The whole game state is a small immutable ``PageState`` (which page, the search keywords, the
result page, the product, the chosen options). ``Shop.view(state, goal)`` lays a page out as a
list of ``Segment``s: text, or a button whose click value and target state are known. Text mode
joins the segment texts with `` [SEP] `` (the WebShop text observation); the browser mode's site
renders the same segments as HTML, so both modes show the same page and score the same purchase.

Actions (lower-cased, as in WebShop): ``search[keywords]`` on a page with a search bar and
``click[value]`` for a value listed on the page (a product id, an option value, ``next >``,
``< prev``, ``back to search``, ``description``, ``features``, ``reviews``, ``buy now``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable

from agentgym_envs.webshop.catalogue import Catalogue, Goal, Product
from agentgym_envs.webshop.reward import (
    EXACT_MATCH_OPTIONS,
    FUZZY_THRESHOLD,
    RewardBreakdown,
    normalize_color,
    score_purchase,
    token_set_ratio,
)
from agentgym_envs.webshop.search import ProductSearch

SEP = " [SEP] "
PRODUCT_WINDOW = 10
MAX_KEYWORDS_LENGTH = 300
BACK_TO_SEARCH, NEXT_PAGE, PREV_PAGE, BUY_NOW = "Back to Search", "Next >", "< Prev", "Buy Now"
DETAIL_TABS = ("Description", "Features", "Reviews")
KINDS = ("search", "results", "item", "detail", "done")


@dataclass(frozen=True)
class PageState:
    """Where the shopper is. ``options`` holds the chosen (name, value) pairs in the product's option order."""

    kind: str = "search"
    keywords: str = ""
    page: int = 1
    asin: str = ""
    options: tuple[tuple[str, str], ...] = ()
    detail: str = ""

    @property
    def chosen(self) -> dict[str, str]:
        """The chosen options as a dict (option name -> value)."""
        return dict(self.options)


@dataclass(frozen=True)
class Segment:
    """One piece of a page; ``click`` is the (lower-case) click value of a button, ``target`` where it leads."""

    text: str
    click: str | None = None
    target: PageState | None = None
    role: str = "text"


@dataclass(frozen=True)
class PageView:
    """A laid-out page: its segments, whether it has a search bar and, on the done page, the score."""

    state: PageState
    segments: tuple[Segment, ...]
    has_search_bar: bool = False
    reward: RewardBreakdown | None = None

    @property
    def clickables(self) -> list[str]:
        """The page's click values, each once, in page order (what ``click[...]`` accepts here)."""
        return list(dict.fromkeys(s.click for s in self.segments if s.click is not None))

    @property
    def text(self) -> str:
        """The page as the agent reads it: its segments joined by WebShop's ``[SEP]``."""
        return SEP.join(s.text for s in self.segments)

    def target(self, value: str) -> PageState | None:
        """The page a click on ``value`` leads to, or None when the page has no such button."""
        return next((s.target for s in self.segments if s.click == value), None)


@dataclass(frozen=True)
class Command:
    verb: str  # "search" or "click"
    argument: str


def normalize_text(text: str) -> str:
    """Collapse white space (the browser mode reads text back the same way)."""
    return " ".join(text.split())


_COMMAND = re.compile(r"^\s*(search|click)\s*\[(.*)\]\s*$", re.IGNORECASE | re.DOTALL)
USAGE = "Use search[keywords] on a page with a search bar, or click[value] with a value shown on the page."


def parse_command(action: str) -> Command | str:
    """``search[...]`` / ``click[...]`` -> ``Command``; anything else -> an error message for the agent."""
    match = _COMMAND.match(action)
    if match is None:
        shown = action if len(action) <= 80 else action[:77] + "..."
        return f"'{shown}' is not a WebShop action. {USAGE}"
    verb, argument = match.group(1).lower(), normalize_text(match.group(2)).lower()
    if argument.startswith("[") and argument.endswith("]"):  # click[[black]]
        argument = argument[1:-1].strip()
    if not argument:
        return f"{verb}[] is empty. " + (
            "Give keywords, e.g. search[red running shoes]."
            if verb == "search"
            else "Give a value shown on the page, e.g. click[buy now]."
        )
    return Command(verb, argument)


def check_command(command: Command, has_search_bar: bool, clickables: list[str]) -> str | None:
    """Why ``command`` is not possible on a page with this search bar and these buttons (``None`` if it is)."""
    if command.verb == "search":
        if not has_search_bar:
            return "There is no search bar on this page. Click 'back to search' to start a new search."
        if len(command.argument) > MAX_KEYWORDS_LENGTH:
            return f"Your keywords are {len(command.argument)} characters long; use at most {MAX_KEYWORDS_LENGTH}."
        return None
    if command.argument in clickables:
        return None
    if command.argument == BUY_NOW.lower():
        return "There is no 'buy now' button here: open a product page first (click a product id in the results)."
    if has_search_bar and not clickables:
        return "There is nothing to click on the search page. Search first, e.g. search[keywords]."
    return f"There is no '{command.argument}' button on this page."


def describe_available(has_search_bar: bool, clickables: list[str]) -> str:
    """The ``Available actions:`` line of an observation: the search action (where there is a search bar) and the
    clicks.
    """
    actions = (["search[<keywords>]"] if has_search_bar else []) + [f"click[{value}]" for value in clickables]
    return "Available actions: " + ", ".join(actions) + "."


class Shop:
    """The shop of one catalogue: pages, transitions and purchases (stateless, shared by envs)."""

    def __init__(
        self, catalogue: Catalogue, search: ProductSearch, exact_sizes: bool = False, match_option_values: bool = False
    ):
        """``exact_sizes=True``: purchases are scored with sizes matched exactly; ``match_option_values=True``: a
        goal's options are matched on their values, not on AgentGym's ``(name, value)`` pairs (see ``reward``)."""
        self.catalogue = catalogue
        self.search = search
        self.exact_sizes = exact_sizes
        self.match_option_values = match_option_values

    def scoring(self, exact_sizes: bool, match_option_values: bool = False) -> "Shop":
        """This shop (same catalogue and search index) scoring with ``exact_sizes`` and ``match_option_values``."""
        if (exact_sizes, match_option_values) == (self.exact_sizes, self.match_option_values):
            return self
        return Shop(self.catalogue, self.search, exact_sizes, match_option_values)

    def score(self, product: Product, goal: Goal, chosen: dict[str, str]) -> RewardBreakdown:
        """The reward for buying ``product`` with ``chosen`` against ``goal``, scored the way this shop scores."""
        return score_purchase(product, goal, chosen, exact_sizes=self.exact_sizes,
                              match_option_values=self.match_option_values)

    def product(self, asin: str) -> Product:
        """The catalogue's product with this ASIN."""
        return self.catalogue.by_asin[asin]

    def results(self, keywords: str) -> tuple[str, ...]:
        """The ASINs a search for ``keywords`` returns, best first."""
        return self.search.search(keywords)

    # ---- transitions -------------------------------------------------------------------------
    def apply(self, view: PageView, command: Command) -> PageState:
        """The state after a command already accepted by ``check_command`` on ``view``."""
        if command.verb == "search":
            return PageState("results", keywords=command.argument, page=1)
        target = view.target(command.argument)
        if target is None:
            raise ValueError(f"{command.argument!r} is not clickable on this page")
        return target

    def state_from_search(self, keywords: str) -> PageState:
        """The first results page of a search for ``keywords`` (normalised, lower case)."""
        return PageState("results", keywords=normalize_text(keywords).lower(), page=1)

    # ---- pages ---------------------------------------------------------------------------------
    def view(self, state: PageState, goal: Goal) -> PageView:
        """The page of ``state`` laid out for ``goal``: the instruction heading, then the search, results, product,
        option or done page's segments.

        Args:
            state: where the shopper is.
            goal: the episode's goal (its instruction is on every page).

        Returns:
            The page's view: its segments, its clickables and, on the done page, the reward.
        """
        header = [
            Segment("Instruction:", role="heading"),
            Segment(normalize_text(goal.instruction), role="instruction"),
        ]
        if state.kind == "search":
            return PageView(
                state,
                (Segment("WebShop", role="heading"), *header, Segment("Search", role="submit")),
                has_search_bar=True,
            )
        back = Segment(BACK_TO_SEARCH, BACK_TO_SEARCH.lower(), PageState(), role="button")
        if state.kind == "results":
            return PageView(state, (*header, back, *self._results(state)))
        product = self.product(state.asin)
        if state.kind == "item":
            return PageView(state, (*header, back, *self._item(state, product)))
        if state.kind == "detail":
            return PageView(state, (*header, back, *self._detail(state, product)))
        if state.kind == "done":
            reward = self.purchase(state, goal)
            return PageView(state, tuple(self._done(state, product, reward)), reward=reward)
        raise ValueError(f"unknown page kind {state.kind!r}")

    def _results(self, state: PageState) -> list[Segment]:
        results = self.results(state.keywords)
        pages = max(1, -(-len(results) // PRODUCT_WINDOW))
        page = min(max(1, state.page), pages)
        segments = [Segment(f"Page {page} (Total results: {len(results)})")]
        if page > 1:
            segments.append(
                Segment(PREV_PAGE, PREV_PAGE.lower(), PageState("results", state.keywords, page - 1), role="button")
            )
        if page < pages:
            segments.append(
                Segment(NEXT_PAGE, NEXT_PAGE.lower(), PageState("results", state.keywords, page + 1), role="button")
            )
        if not results:
            segments.append(Segment("No products match your keywords. Go back to search and try other words."))
        for asin in results[(page - 1) * PRODUCT_WINDOW: page * PRODUCT_WINDOW]:
            product = self.product(asin)
            segments += [
                Segment(asin, asin.lower(), PageState("item", state.keywords, page, asin), role="product"),
                Segment(normalize_text(product.title), role="title"),
                Segment(normalize_text(product.price_text), role="price"),
            ]
        return segments

    def _item(self, state: PageState, product: Product) -> list[Segment]:
        segments = [
            Segment(PREV_PAGE, PREV_PAGE.lower(), PageState("results", state.keywords, state.page), role="button")
        ]
        chosen = state.chosen
        for name, values in product.options.items():
            segments.append(Segment(name, role="option-name"))
            for value in values:
                picked = {**chosen, name: value}
                options = tuple((n, picked[n]) for n in product.options if n in picked)
                target = PageState("item", state.keywords, state.page, state.asin, options)
                segments.append(
                    Segment(
                        value, value.lower(), target, role="option-selected" if chosen.get(name) == value else "option"
                    )
                )
        if chosen:
            segments.append(
                Segment("You have chosen: " + ", ".join(f"{n}: {v}" for n, v in state.options), role="chosen")
            )
        segments += [
            Segment(normalize_text(product.title), role="title"),
            Segment(f"Price: {normalize_text(product.price_text)}", role="price"),
            Segment(f"Rating: {product.rating}", role="text"),
        ]
        for tab in DETAIL_TABS:
            segments.append(
                Segment(
                    tab,
                    tab.lower(),
                    PageState("detail", state.keywords, state.page, state.asin, state.options, tab.lower()),
                    role="button",
                )
            )
        segments.append(
            Segment(
                BUY_NOW,
                BUY_NOW.lower(),
                PageState("done", state.keywords, state.page, state.asin, state.options),
                role="buy",
            )
        )
        return segments

    def _detail(self, state: PageState, product: Product) -> list[Segment]:
        segments = [
            Segment(
                PREV_PAGE,
                PREV_PAGE.lower(),
                PageState("item", state.keywords, state.page, state.asin, state.options),
                role="button",
            )
        ]
        if state.detail == "description":
            segments.append(Segment(normalize_text(product.description) or "This product has no description."))
        elif state.detail == "features":
            segments += [Segment(normalize_text(f)) for f in product.features if normalize_text(f)] or [
                Segment("This product lists no features.")
            ]
        else:
            for review in product.reviews:
                segments += [
                    Segment(normalize_text(str(review.get("title", ""))) or "Review", role="heading"),
                    Segment(f"{review.get('score', '?')} out of 5 stars"),
                    Segment(normalize_text(str(review.get("body", ""))) or "(no text)"),
                ]
            if not product.reviews:
                segments.append(Segment("This product has no reviews yet."))
        return segments

    def _done(self, state: PageState, product: Product, reward: RewardBreakdown) -> Iterable[Segment]:
        chosen = state.chosen
        yield Segment("Thank you for shopping with us!", role="heading")
        yield Segment(f"You bought: {state.asin}")
        yield Segment(normalize_text(product.title), role="title")
        yield Segment("Options: " + (", ".join(f"{n}: {v}" for n, v in state.options) if chosen else "none chosen"))
        missing = [name for name in product.options if name not in chosen]
        if missing:
            yield Segment("You bought it without choosing: " + ", ".join(missing) + ".")
        yield Segment(f"Price: {normalize_text(product.price_text)}", role="price")
        yield Segment(f"Your score (min 0.0, max 1.0): {reward.reward:.4f}", role="score")

    def purchase(self, state: PageState, goal: Goal) -> RewardBreakdown:
        """The reward of buying the product of ``state`` with its chosen options, against ``goal``."""
        return self.score(self.product(state.asin), goal, state.chosen)


# ---- the expert ----------------------------------------------------------------------------------
@dataclass
class Oracle:
    """The expert of one episode: searches with the goal's words, pages through the results to the
    first product that can reach score 1, chooses the options the goal asks for and buys it.

    It knows the goal (attributes, options, price limit) but not the target product's position:
    it judges products with the reward function, as a careful shopper reading every page would.
    If the goal's words do not surface a perfect product it searches the target's title, and if
    no product can reach 1 (possible with the human goals of the original data) it buys the
    target with the best options.
    """

    shop: Shop
    goal: Goal
    _plans: dict[str, tuple[dict[str, str], float]] = field(default_factory=dict)

    def keywords(self) -> str:
        """The expert's search: the goal's attributes and query when they find a fitting product, else the product's
        name.
        """
        primary = normalize_text(" ".join([*self.goal.attributes, self.goal.query])).lower()
        if self._pick(self.shop.results(primary)) is not None:
            return primary
        return normalize_text(self.goal.name).lower()[:MAX_KEYWORDS_LENGTH]

    def plan(self, asin: str) -> tuple[dict[str, str], float]:
        """The options to choose on ``asin`` for this goal, and the reward they give."""
        if asin not in self._plans:
            product = self.shop.product(asin)
            wanted = self.goal.option_values
            chosen: dict[str, str] = {}
            for name, values in product.options.items():
                best = max(values, key=lambda v: _option_fit(name, v, wanted), default=None)
                if best is not None and _option_fit(name, best, wanted) > 0:
                    chosen[name] = best
            reward = self.shop.score(product, self.goal, chosen).reward
            self._plans[asin] = (chosen, reward)
        return self._plans[asin]

    def _pick(self, results: tuple[str, ...]) -> int | None:
        for index, asin in enumerate(results):
            if self.plan(asin)[1] >= 1.0 - 1e-9:
                return index
        return results.index(self.goal.asin) if self.goal.asin in results else None

    def act(self, state: PageState) -> tuple[str, str]:
        """(thought, action) for the page ``state``."""
        if state.kind == "search":
            keywords = self.keywords()
            return f"I should search for the product described: {keywords}.", f"search[{keywords}]"
        if state.kind == "results":
            results = self.shop.results(state.keywords)
            index = self._pick(results)
            if index is None:
                if results and state.keywords == normalize_text(self.goal.name).lower()[:MAX_KEYWORDS_LENGTH]:
                    return "Nothing fits better; I will take the first result.", f"click[{results[0].lower()}]"
                return "None of these results fits the request. I will search again.", "click[back to search]"
            page = index // PRODUCT_WINDOW + 1
            if page > state.page:
                return "The product I want is further down the results.", "click[next >]"
            if page < state.page:
                return "The product I want was on an earlier page.", "click[< prev]"
            return f"{results[index]} matches the request; let me open it.", f"click[{results[index].lower()}]"
        if state.kind == "item":
            chosen, reward = self.plan(state.asin)
            results = self.shop.results(state.keywords)
            index = self._pick(results)
            if index is not None and results[index] != state.asin and reward < 1.0 - 1e-9:
                return "This product does not match the request; back to the results.", "click[< prev]"
            for name, value in chosen.items():
                if state.chosen.get(name) != value:
                    return f"The request asks for {name} {value}.", f"click[{value.lower()}]"
            return "The product and its options match the request, and the price is within the limit.", "click[buy now]"
        if state.kind == "detail":
            return "I have read enough; back to the product.", "click[< prev]"
        return "The purchase is done.", "click[buy now]"


def _option_fit(name: str, value: str, wanted: list[str]) -> int:
    """3 for the very value wanted, 2 for the same base colour, 1 for a fuzzy match, 0 otherwise."""
    if value in wanted:
        return 3
    value_n = normalize_color(value)
    wanted_n = [normalize_color(w) for w in wanted]
    if value_n in wanted_n:
        return 2
    if name.lower() not in EXACT_MATCH_OPTIONS and any(token_set_ratio(w, value_n) > FUZZY_THRESHOLD for w in wanted_n):
        return 1
    return 0
