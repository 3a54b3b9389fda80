"""The WebShop catalogue: products, shopping goals, the generated default and the loader for the
original WebShop data files.

* ``default_catalogue()``: 12,000 products over the 100 product types of ``vocabulary.py`` (12
  departments) and 6,000 goals, a pure function of ``DEFAULT_SEED``. It is generated once (about
  a second) and cached as JSON under ``<cache root>/webshop`` (``core.cache``: ``$AGENTGYM_CACHE_DIR``,
  else ``~/.cache/agentgym`` on Linux); every later process loads the file, and the catalogue object is
  shared by every env of the process. Goal ``i`` is item id ``i``: ids 0-199 are the test split
  (AgentGym evaluates WebShop on 200 items), the rest train.
* ``load_webshop_data(products_file, attributes_file=..., ...)``: the original WebShop files (the
  product scrape ``items_shuffle*.json``, ``items_ins_v2*.json`` for product attributes and the synthetic
  instructions, optionally a reviews file), read from a local path; nothing is downloaded. By default the
  goals are those AgentGym's server plays (WebShop's synthetic goals over the first 1000 products, shuffled
  by seed 233); ``human_goals=True`` reads the human instructions ``items_human_ins.json`` in file order
  instead. See its docstring for the fields used.

The generator draws only through ``random.Random.random()``, whose sequence Python guarantees
across versions, so the catalogue (and so the splits) are the same on every machine.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import random
import re
import threading
from dataclasses import asdict, dataclass, field
from decimal import Decimal, InvalidOperation
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from agentgym_envs.core.cache import cache_root
from agentgym_envs.core.jsonl import write_atomically
from agentgym_envs.webshop import vocabulary as vocab

GENERATOR_VERSION = 1
DEFAULT_SEED = 0
N_PRODUCTS = 12_000
N_GOALS = 6_000
N_TEST = 200
#: Price limits are multiples of ten just above the product's price, as in WebShop.
PRICE_STEPS = tuple(10.0 * i for i in range(1, 100))
NO_PRICE_LIMIT = 1_000_000.0


@dataclass
class Product:
    """One product page. ``options`` maps an option name ("color") to its values, in page order."""

    asin: str
    title: str
    query: str
    category: str
    product_category: str
    price: float
    price_text: str
    attributes: list[str]
    options: dict[str, list[str]]
    description: str
    features: list[str]
    reviews: list[dict[str, Any]] = field(default_factory=list)
    rating: str = "N.A."


@dataclass
class Goal:
    """A shopping instruction and what the reward checks it against.

    ``options`` is a dict (option name -> value) for generated goals and a list of values for the
    human goals of the original data, which name values without their option.
    """

    asin: str
    query: str
    name: str
    product_category: str
    instruction: str
    attributes: list[str]
    options: dict[str, str] | list[str]
    price_upper: float

    @property
    def option_values(self) -> list[str]:
        """The values the goal asks for, without their option names."""
        return list(self.options.values()) if isinstance(self.options, dict) else list(self.options)


@dataclass
class Catalogue:
    """Products plus goals; ``key`` names the content (used for disk caches and in-process sharing)."""

    key: str
    products: list[Product]
    goals: list[Goal]

    @cached_property
    def by_asin(self) -> dict[str, Product]:
        """The products by ASIN."""
        return {product.asin: product for product in self.products}

    def to_json(self) -> dict[str, Any]:
        """The catalogue as JSON-ready data (the disk cache's form)."""
        return {
            "key": self.key,
            "products": [asdict(p) for p in self.products],
            "goals": [asdict(g) for g in self.goals],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Catalogue":
        """A catalogue from ``to_json``'s data."""
        return cls(data["key"], [Product(**p) for p in data["products"]], [Goal(**g) for g in data["goals"]])


# ---- disk cache -------------------------------------------------------------------------------
def cache_dir() -> Path:
    """``cache_root() / "webshop"`` (``~/.cache/agentgym/webshop`` on Linux by default), created on demand."""
    path = cache_root() / "webshop"
    path.mkdir(parents=True, exist_ok=True)
    return path


def default_key(seed: int = DEFAULT_SEED, n_products: int = N_PRODUCTS, n_goals: int = N_GOALS) -> str:
    """The name of a generated catalogue's content: generator version, seed and sizes (its cache key)."""
    return f"gen{GENERATOR_VERSION}-seed{seed}-p{n_products}-g{n_goals}"


_BUILD_LOCK = threading.Lock()
_DEFAULTS: dict[tuple[int, int, int], Catalogue] = {}


def default_catalogue(seed: int = DEFAULT_SEED, n_products: int = N_PRODUCTS, n_goals: int = N_GOALS) -> Catalogue:
    """The generated catalogue, shared by every env of the process (loaded or built once, even across threads)."""
    key = (seed, n_products, n_goals)
    with _BUILD_LOCK:
        if key not in _DEFAULTS:
            _DEFAULTS[key] = load_or_generate_catalogue(seed, n_products, n_goals)
        return _DEFAULTS[key]


def load_or_generate_catalogue(seed: int = DEFAULT_SEED, n_products: int = N_PRODUCTS,
                               n_goals: int = N_GOALS) -> Catalogue:
    """Read the catalogue from the disk cache, or generate it and write the cache (no in-process sharing)."""
    key = default_key(seed, n_products, n_goals)
    path = cache_dir() / f"catalogue-{key}.json"
    if path.exists():
        try:
            with path.open(encoding="utf-8") as handle:
                catalogue = Catalogue.from_json(json.load(handle))
            if catalogue.key == key and len(catalogue.products) == n_products and len(catalogue.goals) == n_goals:
                return catalogue
        except (OSError, ValueError, TypeError, KeyError):
            pass  # a corrupt or foreign file: regenerate below
    catalogue = generate_catalogue(seed, n_products, n_goals)
    try:
        write_atomically(path, json.dumps(catalogue.to_json(), separators=(",", ":")))
    except OSError:
        pass  # a read-only cache only costs the next process a regeneration
    return catalogue


# ---- generation -------------------------------------------------------------------------------
class _Draw:
    """Random choices built on ``random.Random.random()`` alone (stable across Python versions)."""

    def __init__(self, seed: int | str):
        self._random = random.Random(seed).random

    def random(self) -> float:
        return self._random()

    def below(self, n: int) -> int:
        return min(int(self._random() * n), n - 1)

    def choice(self, items: Sequence[Any]) -> Any:
        return items[self.below(len(items))]

    def chance(self, p: float) -> bool:
        return self._random() < p

    def sample(self, items: Sequence[Any], k: int) -> list[Any]:
        pool = list(items)
        for i in range(min(k, len(pool))):
            j = i + self.below(len(pool) - i)
            pool[i], pool[j] = pool[j], pool[i]
        return pool[:k]

    def ordered_sample(self, items: Sequence[Any], k: int) -> list[Any]:
        """``k`` items keeping their original order (option values are listed in vocabulary order)."""
        chosen = set(self.sample(range(len(items)), k))
        return [item for i, item in enumerate(items) if i in chosen]


_SMALL_WORDS = {"a", "an", "and", "for", "in", "of", "on", "or", "the", "to", "with", "x"}
_ASIN_ALPHABET = "0123456789ABCDEFGHJKLMNPQRSTUVWXYZ"


def title_case(text: str) -> str:
    """A product title in title case, small words (after the first) and words starting with a digit kept as they are."""
    words = text.split(" ")
    return " ".join(
        w if (w in _SMALL_WORDS and i) or w[:1].isdigit() else w[:1].upper() + w[1:] for i, w in enumerate(words)
    )


def _brands(draw: _Draw) -> list[str]:
    names = [start + end for start in vocab.BRAND_SYLLABLES_START for end in vocab.BRAND_SYLLABLES_END]
    return [name + draw.choice(vocab.BRAND_SUFFIXES) for name in draw.sample(names, 360)]


def _price(draw: _Draw, low: float, high: float) -> float:
    value = low + (high - low) * draw.random() ** 1.6
    cents = draw.choice((0.99, 0.99, 0.49, 0.95, 0.0))
    return max(1.99, float(int(value)) + cents)


def _join(items: Sequence[str], conjunction: str = "and") -> str:
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + f" {conjunction} " + items[-1]


def _make_product(draw: _Draw, kind: vocab.ProductType, brand: str, asin: str) -> Product:
    """One product of ``kind``; the parts are drawn in this order (title words, price, description,
    feature bullets, reviews), which fixes the catalogue."""
    audience = draw.choice(kind.audiences) if kind.audiences else ""
    attributes = draw.sample(kind.attributes, 3 + draw.below(3))
    descriptors = draw.sample(
        [d for d in kind.descriptors if d not in attributes] or kind.descriptors, 1 + draw.below(2)
    )
    head = draw.choice(kind.heads)
    use = draw.choice(kind.uses)
    options: dict[str, list[str]] = {}
    for name, values in kind.options.items():
        if draw.chance(kind.option_chance.get(name, 0.9)):
            options[name] = draw.ordered_sample(values, 2 + draw.below(min(5, len(values) - 1)))
    title = _title(draw, brand, audience, attributes, descriptors, head, use)
    price = _price(draw, *kind.price)
    path = " › ".join(part.replace("{aud}", audience.title() or "Unisex") for part in kind.path)
    query = f"{audience}'s {kind.query}" if audience else kind.query
    description = _description(draw, brand, head, use, attributes, descriptors, options)
    features = _features(draw, head, use, attributes)
    reviews = _reviews(draw, kind, head, attributes, options)
    rating = f"{sum(r['score'] for r in reviews) / len(reviews):.1f}" if reviews else "N.A."
    return Product(
        asin=asin,
        title=title,
        query=query,
        category=kind.department,
        product_category=path,
        price=price,
        price_text=f"${price:.2f}",
        attributes=attributes,
        options=options,
        description=description,
        features=features,
        reviews=reviews,
        rating=rating,
    )


def _title(
    draw: _Draw, brand: str, audience: str, attributes: list[str], descriptors: list[str], head: str, use: str
) -> str:
    """A title in one of three shop layouts, with one or two attributes in it."""
    possessive = {"men": "Men's ", "women": "Women's "}.get(audience, "")
    in_title = [title_case(a) for a in attributes[: 1 + draw.below(2)]]
    desc = " ".join(title_case(d) for d in descriptors)
    layout = draw.below(3)
    if layout == 0:
        return f"{brand} {possessive}{desc} {title_case(head)} {' '.join(in_title)}"
    if layout == 1:
        suffix = f" for {audience.title()}" if audience else ""
        return f"{brand} {desc} {title_case(head)}{suffix} - {', '.join(in_title)}"
    return f"{brand} {possessive}{title_case(head)}, {desc}, {in_title[0]}, for {title_case(use)}"


def _description(
    draw: _Draw,
    brand: str,
    head: str,
    use: str,
    attributes: list[str],
    descriptors: list[str],
    options: dict[str, list[str]],
) -> str:
    sentences = [
        f"Meet the {brand} {head}: {_join(attributes[:2])}, and ready for {use}.",
        f"It is {descriptors[0]} by design, and {attributes[-1]} details make it hold up to everyday use.",
    ]
    if options:
        sentences.append(f"Pick the {_join(list(options))} that suits you best.")
    sentences.append(
        draw.choice(
            (
                "Backed by a 30-day return policy.",
                "Ships in recyclable packaging.",
                "Our support team answers every question within a day.",
                "A thoughtful gift for friends and family.",
            )
        )
    )
    return " ".join(sentences)


def _features(draw: _Draw, head: str, use: str, attributes: list[str]) -> list[str]:
    """The bullet points: one per attribute, in a shuffled order, then a closing one."""
    features = []
    for attribute in draw.sample(attributes, len(attributes)):
        template = draw.choice(
            (
                "{A}: built to be {a} so it keeps up with {use}.",
                "{A} - you will notice the difference from the first day of {use}.",
                "{A} design, tested for {use} and everyday wear.",
            )
        )
        features.append(template.format(A=attribute.upper(), a=attribute, use=use))
    features.append(
        draw.choice(
            (
                f"WHAT YOU GET: your new {head} and our friendly customer service.",
                "EASY CARE: wipe or wash as the label says to keep it like new.",
            )
        )
    )
    return features


def _reviews(
    draw: _Draw, kind: vocab.ProductType, head: str, attributes: list[str], options: dict[str, list[str]]
) -> list[dict[str, Any]]:
    """Zero to three reviews, mostly good; their words depend on the score."""
    reviews = []
    for _ in range(draw.below(4)):
        score = draw.choice((5, 5, 5, 4, 4, 3, 2, 1))
        titles, bodies = (
            (vocab.REVIEW_TITLES_GOOD, vocab.REVIEW_BODIES_GOOD)
            if score >= 4
            else (
                (vocab.REVIEW_TITLES_MIXED, vocab.REVIEW_BODIES_MIXED)
                if score == 3
                else (vocab.REVIEW_TITLES_BAD, vocab.REVIEW_BODIES_BAD)
            )
        )
        option_name = next(iter(options), "color")
        reviews.append(
            {
                "title": draw.choice(titles),
                "score": score,
                "body": draw.choice(bodies).format(
                    head=head, use=draw.choice(kind.uses), attr=draw.choice(attributes), option=option_name
                ),
            }
        )
    return reviews


def price_limit(price: float, draw: _Draw) -> float:
    """WebShop's rule: of the next four multiples of ten above the price, the larger of two picked at random."""
    steps = [p for p in PRICE_STEPS if p > price][:4]
    if len(steps) < 2:
        return NO_PRICE_LIMIT
    return max(draw.sample(steps, 2))


_EDITIONS = tuple(
    f"{a}{b}"
    for a in ("Classic", "Signature", "Essential", "Premier", "Urban", "Coastal", "Heritage", "Summit")
    for b in ("", " Plus", " Pro", " Max", " Lite", " Select", " Prime", " Elite")
)
_OPENINGS = (
    "i am looking for",
    "i need",
    "i want to buy",
    "find me",
    "i'm searching for",
    "can you get me",
    "i would like",
    "please buy me",
)


def _option_phrase(name: str, value: str, draw: _Draw) -> str:
    if name == "color":
        return draw.choice((f"in {value} color", f"{value} colored", f"color {value}"))
    if name == "size":
        return draw.choice((f"size {value}", f"in size {value}", f"{value} in size"))
    if name in ("flavor", "scent"):
        return draw.choice((f"{value} {name}", f"with the {value} {name}"))
    if value.endswith(name):  # "6 pack"
        return value
    return draw.choice((f"{name} {value}", f"the {value} {name} option"))


def _make_goal(draw: _Draw, product: Product) -> Goal:
    count = 1 if draw.chance(0.3) else 2 if draw.chance(0.65) else 3
    attributes = draw.sample(product.attributes, count)
    options = {name: draw.choice(values) for name, values in product.options.items()}
    upper = price_limit(product.price, draw)
    query = product.query
    if "'s " in query and draw.chance(0.5):  # "men's running shoes" -> "running shoes for men"
        owner, _, rest = query.partition("'s ")
        query = f"{rest} for {owner}"
    noun = product.query.split(" ")[-1]
    plural = noun.endswith("s") and not noun.endswith("ss")
    with_phrases = [a for a in attributes if a.startswith("with ")]
    plain = [a for a in attributes if not a.startswith("with ")]
    tail = f" {_join(with_phrases)}" if with_phrases else ""
    if not plain:
        phrase = f"{query}{tail}"
    elif draw.chance(0.5):
        phrase = f"{_join(plain)} {query}{tail}"
    else:
        phrase = f"{query}{tail} that {'are' if plural else 'is'} {_join(plain)}"
    article = "some" if plural else ("an" if phrase[0] in "aeiou" else "a")
    text = f"{draw.choice(_OPENINGS)} {article} {phrase}"
    if options:
        if draw.chance(0.3):  # the synthetic WebShop style
            text += " with " + ", and ".join(f"{name}: {value}" for name, value in options.items())
        else:
            text += ", " + _join([_option_phrase(name, value, draw) for name, value in options.items()])
    if upper < NO_PRICE_LIMIT:
        text += f", and price lower than {upper:.2f} dollars"
    return Goal(
        asin=product.asin,
        query=product.query,
        name=product.title,
        product_category=product.product_category,
        instruction=text,
        attributes=attributes,
        options=options,
        price_upper=upper,
    )


def generate_catalogue(seed: int = DEFAULT_SEED, n_products: int = N_PRODUCTS, n_goals: int = N_GOALS) -> Catalogue:
    """Generate products round-robin over the product types, then goals on a random subset of them."""
    if n_goals > n_products:
        raise ValueError(f"need at least as many products as goals ({n_products} < {n_goals})")
    draw = _Draw(f"webshop-catalogue-{seed}")
    brands = _brands(draw)
    department_brands = {dept: draw.sample(brands, 45) for dept in sorted({t.department for t in vocab.PRODUCT_TYPES})}
    products: list[Product] = []
    asins: set[str] = set()
    titles: set[str] = set()
    for index in range(n_products):
        kind = vocab.PRODUCT_TYPES[index % len(vocab.PRODUCT_TYPES)]
        asin = "B0" + "".join(draw.choice(_ASIN_ALPHABET) for _ in range(8))
        while asin in asins:
            asin = "B0" + "".join(draw.choice(_ASIN_ALPHABET) for _ in range(8))
        asins.add(asin)
        product = _make_product(draw, kind, draw.choice(department_brands[kind.department]), asin)
        editions = iter(_EDITIONS)
        base_title = product.title
        while product.title in titles:  # keep titles unique, as editions and model names do in real shops
            product.title = f"{base_title}, {next(editions)} Edition"
        titles.add(product.title)
        products.append(product)
    order = draw.sample(range(n_products), n_goals)
    goals = [_make_goal(draw, products[i]) for i in order]
    return Catalogue(default_key(seed, n_products, n_goals), products, goals)


# ---- the original WebShop data files ------------------------------------------------------------
def _clean(text: Any) -> str:
    """Flatten whitespace and drop control characters (scraped text is full of both)."""
    text = "" if text is None else str(text)
    return " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())


def _parse_pricing(pricing: Any) -> list[float]:
    if isinstance(pricing, (int, float)):
        return [float(pricing)]
    if isinstance(pricing, list):
        values = []
        for item in pricing:
            values.extend(_parse_pricing(item))
        return values[:2]
    values = []
    for part in str(pricing or "").split("$")[1:]:
        digits = re.sub(r"[^\d.]", "", part)
        try:
            values.append(float(Decimal(digits)))
        except InvalidOperation:
            continue
    return values[:2]


class WebShopDataError(ValueError):
    """An original WebShop data file that cannot be read as the file its parameter names (a file passed as another,
    or not JSON): the message names the file, the shape it needs, and which file it looks like."""


#: What each parameter of ``load_webshop_data`` reads, as its error says it.
DATA_SHAPES: dict[str, str] = {
    "products_file": "a JSON list of product objects ({\"asin\", \"name\", \"pricing\", \"customization_options\": "
                     "{name: [...]}, ...}), e.g. items_shuffle_1000.json",
    "attributes_file": "a JSON object of asin -> {\"attributes\": [...], \"instruction\": ..., "
                       "\"instruction_attributes\": [...]}, e.g. items_ins_v2_1000.json",
    "instructions_file": "a JSON object of asin -> list of {\"instruction\", \"instruction_attributes\", "
                         "\"instruction_options\"}, e.g. items_human_ins.json",
    "reviews_file": "a JSON list of {\"asin\", \"reviews\": [{\"title\", \"stars\", \"review\"}], "
                    "\"average_rating\"} objects",
}


def _kind(value: Any) -> str:
    return {list: "a list", dict: "an object", str: "a string", type(None): "null"}.get(type(value),
                                                                                     type(value).__name__)


def _shape_problem(data: Any, parameter: str) -> str | None:
    """What in ``data`` is not the shape ``parameter`` reads (``DATA_SHAPES``), or None."""
    def first(entries: Iterable[tuple[str, Any]], ok: Callable[[Any], bool], what: str) -> str | None:
        for where, value in entries:
            if not ok(value):
                return f"{where} is {_kind(value)}, not {what}"
        return None

    def listed(value: Any, key: str) -> bool:  # an optional list field
        return value.get(key) is None or isinstance(value.get(key), list)

    if parameter in ("products_file", "reviews_file"):
        if not isinstance(data, list):
            return f"it holds {_kind(data)}, not a list"
        rows = [(f"entry {i}", row) for i, row in enumerate(data)]
        if parameter == "products_file":
            return first(rows, lambda r: isinstance(r, dict) and "name" in r, "a product object with a name") or first(
                ((f"entry {i}'s customization_options", r.get("customization_options")) for i, r in enumerate(data)),
                lambda o: o is None or isinstance(o, dict), "an object of option name -> values")
        return first(rows, lambda r: isinstance(r, dict) and "asin" in r and listed(r, "reviews")
                     and all(isinstance(v, dict) for v in r.get("reviews") or []),
                     "an object with an asin and a list of review objects")
    if not isinstance(data, dict):
        return f"it holds {_kind(data)}, not an object of asin -> entries"
    entries = ((f"the entry of {str(asin)[:20]!r}", value) for asin, value in data.items())
    if parameter == "attributes_file":
        return first(entries, lambda v: v is None or (isinstance(v, dict) and listed(v, "attributes")
                                                      and listed(v, "instruction_attributes")),
                     "an object with lists of attributes")
    return first(entries, lambda v: isinstance(v, list) and all(isinstance(e, dict) for e in v),
                 "a list of instruction objects")


def _read_json(path: str | os.PathLike[str], parameter: str | None = None) -> Any:
    """A data file's JSON; with ``parameter``, checked against the shape that parameter reads
    (``WebShopDataError`` naming the file, the shape it needs and which parameter it looks like)."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise WebShopDataError(f"{parameter or 'the WebShop data file'} {os.fspath(path)!r} is not JSON ({error}); "
                               f"it must be {DATA_SHAPES.get(parameter or '', 'a WebShop data file')}") from None
    problem = _shape_problem(data, parameter) if parameter else None
    if problem is not None:
        fits = [other for other in DATA_SHAPES if other != parameter and _shape_problem(data, other) is None]
        hint = f"; it looks like {' or '.join(fits)} (were the files mixed up?)" if fits else ""
        raise WebShopDataError(f"{parameter} {os.fspath(path)!r} is not the file it reads: {problem}. It must be "
                               f"{DATA_SHAPES[parameter]}{hint}")
    return data


#: AgentGym's WebShop server makes ``WebAgentTextEnv-v0`` with ``num_products=1000``: the first 1000 rows.
AGENTGYM_NUM_PRODUCTS = 1000
#: WebShop's seed for its synthetic goals' price limits and for the goal shuffle (``random.seed(233)``).
WEBSHOP_GOAL_SEED = 233


def load_webshop_data(
    products_file: str | os.PathLike[str],
    instructions_file: str | os.PathLike[str] | None = None,
    attributes_file: str | os.PathLike[str] | None = None,
    reviews_file: str | os.PathLike[str] | None = None,
    seed: int = WEBSHOP_GOAL_SEED,
    human_goals: bool = False,
) -> Catalogue:
    """Build a catalogue from the original WebShop data files (local paths; nothing is downloaded).

    * ``products_file``: a JSON list of scraped products (``items_shuffle_1000.json`` /
      ``items_shuffle.json``) with ``asin``, ``name``, ``full_description``, ``small_description``
      (bullet points, list or string), ``pricing`` (``"$12.99"`` or ``"$10.99 - $15.99"``),
      ``customization_options`` (option name -> list of ``{"value": ...}``), ``category``,
      ``query`` and ``product_category`` (``"A › B › C"``).
    * ``attributes_file`` (``items_ins_v2*.json``): asin -> ``{"attributes": [...], "instruction": ...,
      "instruction_attributes": [...]}``: the product attributes the reward matches against (titles and
      bullets are searched too) and, by default, each product's synthetic instruction.
    * ``instructions_file`` (``human_goals=True`` only): the human instructions (``items_human_ins.json``):
      asin -> list of ``{"instruction", "instruction_attributes", "instruction_options"}``.
    * ``reviews_file`` (optional): a list of ``{"asin", "reviews": [{"title", "stars", "review"}],
      "average_rating"}``.

    By default the goals are the ones AgentGym's server plays (``_synthetic_goals``): WebShop's synthetic
    goals over the first 1000 rows, shuffled with its seed, so item id ``i`` is AgentGym's goal ``i``.
    ``human_goals=True`` is our earlier reading: every row, the human instructions with attributes in file
    order (goal ``i`` = item id ``i``), a price limit drawn from our seeded draw.

    As in WebShop, option values are lower-cased with ``/`` turned into `` | `` and a product with a
    price range gets a price drawn inside it (ours is seeded; WebShop's server draws it from a clock-seeded
    state, so that price, and any limit drawn from it, cannot be reproduced).
    """
    draw = _Draw(f"webshop-data-{seed}")
    raw_products = _read_json(products_file, "products_file")
    if not human_goals:
        if attributes_file is None:
            raise ValueError("WebShop's synthetic goals need attributes_file (items_ins_v2*.json); "
                             "human_goals=True reads instructions_file instead")
        raw_products = raw_products[:AGENTGYM_NUM_PRODUCTS]  # sliced before duplicates are dropped, as WebShop
    elif instructions_file is None:
        raise ValueError("human_goals=True needs instructions_file (items_human_ins.json)")
    attributes = _read_json(attributes_file, "attributes_file") if attributes_file else {}
    reviews = _read_reviews(reviews_file) if reviews_file else {}
    products: list[Product] = []
    kept: list[dict[str, Any]] = []
    seen: set[str] = set()
    for raw in raw_products:
        asin = str(raw.get("asin", ""))
        if not asin or asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        kept.append(raw)
        products.append(_scraped_product(raw, asin, draw, attributes, reviews))
    if human_goals:
        goals = _human_goals(_read_json(instructions_file, "instructions_file"), {p.asin: p for p in products}, draw)
    else:
        goals = _synthetic_goals(kept, products, attributes, seed)
    if not goals:
        source = instructions_file if human_goals else attributes_file
        raise ValueError(f"{source} gave no usable goal (none names a product of {products_file} with attributes)")
    return Catalogue(_data_key(products_file, instructions_file, attributes_file, reviews_file, human_goals, seed),
                     products, goals)


def _data_key(products_file: str | os.PathLike[str], instructions_file: str | os.PathLike[str] | None,
              attributes_file: str | os.PathLike[str] | None, reviews_file: str | os.PathLike[str] | None,
              human_goals: bool, seed: int) -> str:
    """The name of a catalogue read from WebShop's files: which goals (the human file counts only for them) and a
    fingerprint of the files and the seed; the process cache is keyed by it too."""
    files = [products_file, instructions_file if human_goals else None, attributes_file, reviews_file]
    return f"data-{'human' if human_goals else 'synthetic'}-{_fingerprint(files, seed)}"


def _option_lists(raw: dict[str, Any]) -> dict[str, list[str]]:
    """A row's options as WebShop's ``load_products`` keeps them for its goals: every value in page order
    (duplicates too), an option whose contents are ``None`` left out, one with an empty list kept (the product
    then has no goal). Names and values are normalised as ``Product.options`` so that goals match pages."""
    options: dict[str, list[str]] = {}
    for name, contents in (raw.get("customization_options") or {}).items():
        if contents is None:
            continue
        options[_clean(name).lower()] = [_option_value(c) for c in contents]
    return options


def _option_value(content: Any) -> str:
    """An option value as pages and goals both show it: WebShop's ``{"value": ...}`` (or a bare value) cleaned,
    lower-cased, with ``/`` turned into `` | ``."""
    return _clean(content.get("value") if isinstance(content, dict) else content).replace("/", " | ").lower()


def _synthetic_goals(
    rows: list[dict[str, Any]], products: list[Product], attributes: dict[str, Any], seed: int
) -> list[Goal]:
    """WebShop's ``get_synthetic_goals`` as AgentGym's server runs it, so item ids are AgentGym's goals: for each
    product with an instruction (in row order), one price limit (the larger of two of the next four multiples of
    ten above the price, drawn by ``random.seed(seed)``; none when fewer than two), then one goal per combination
    of its option values (names sorted); finally the goals are shuffled after ``random.seed(seed)`` again."""
    rng = random.Random(seed)
    goals: list[Goal] = []
    for raw, product in zip(rows, products):
        entry = attributes.get(product.asin) or {}
        instruction = entry.get("instruction")
        goal_attributes = entry.get("instruction_attributes") or []
        if instruction is None or not goal_attributes:  # WebShop skips the first and asserts against the second
            continue
        steps = [p for p in PRICE_STEPS if p > product.price][:4]
        if len(steps) >= 2:
            upper = max(rng.sample(steps, 2))
            price_text = f", and price lower than {upper:.2f} dollars"
        else:
            upper, price_text = NO_PRICE_LIMIT, ""
        options = _option_lists(raw)
        names = sorted(options)
        for values in itertools.product(*(options[name] for name in names)):
            chosen = dict(zip(names, values))
            option_text = ", and ".join(f"{name}: {value}" for name, value in chosen.items())
            goals.append(
                Goal(
                    asin=product.asin,
                    query=product.query,
                    name=product.title,
                    product_category=product.product_category,
                    instruction=_clean(f"{instruction}{' with ' + option_text if option_text else ''}{price_text}"),
                    attributes=[_clean(a) for a in goal_attributes],
                    options=chosen,
                    price_upper=upper,
                )
            )
    random.Random(seed).shuffle(goals)
    return goals


def _read_reviews(reviews_file: str | os.PathLike[str]) -> dict[str, tuple[list[dict[str, Any]], str]]:
    """asin -> (reviews, average rating) from a reviews file."""
    reviews: dict[str, tuple[list[dict[str, Any]], str]] = {}
    for entry in _read_json(reviews_file, "reviews_file"):
        items = [
            {
                "title": _clean(r.get("title")),
                "score": r.get("score", r.get("stars", "")),
                "body": _clean(r.get("body", r.get("review", ""))),
            }
            for r in entry.get("reviews") or []
        ]
        reviews[entry["asin"]] = (items, _clean(entry.get("average_rating", "N.A.")) or "N.A.")
    return reviews


def _scraped_product(
    raw: dict[str, Any],
    asin: str,
    draw: _Draw,
    attributes: dict[str, Any],
    reviews: dict[str, tuple[list[dict[str, Any]], str]],
) -> Product:
    """A product of the scrape (a price range gets a price drawn inside it)."""
    pricing = _parse_pricing(raw.get("pricing")) or [100.0]
    if len(pricing) == 1:
        price, price_text = pricing[0], f"${pricing[0]:.2f}"
    else:
        low, high = sorted(pricing)
        price, price_text = round(low + (high - low) * draw.random(), 2), f"${low:.2f} to ${high:.2f}"
    options: dict[str, list[str]] = {}
    for name, contents in (raw.get("customization_options") or {}).items():
        if not contents:
            continue
        values = [_option_value(c) for c in contents]
        options[_clean(name).lower()] = [v for v in dict.fromkeys(values) if v]
    bullets = raw.get("small_description") or []
    bullets = bullets if isinstance(bullets, list) else [bullets]
    product_reviews, rating = reviews.get(asin, ([], _clean(raw.get("average_rating")) or "N.A."))
    return Product(
        asin=asin,
        title=_clean(raw.get("name")),
        query=_clean(raw.get("query")).lower(),
        category=_clean(raw.get("category")),
        product_category=_clean(raw.get("product_category")),
        price=float(price),
        price_text=price_text,
        attributes=[_clean(a).lower() for a in (attributes.get(asin) or {}).get("attributes", [])],
        options=options,
        description=_clean(raw.get("full_description")),
        features=[_clean(b) for b in bullets if _clean(b)],
        reviews=product_reviews,
        rating=rating or "N.A.",
    )


def _human_goals(human: dict[str, Any], by_asin: dict[str, Product], draw: _Draw) -> list[Goal]:
    """The human instructions that name a known product and have attributes, in file order."""
    goals: list[Goal] = []
    for asin, entries in human.items():
        product = by_asin.get(asin)
        if product is None:
            continue
        for entry in entries:
            goal_attributes = [_clean(a).lower() for a in entry.get("instruction_attributes") or []]
            if not goal_attributes:
                continue
            upper = price_limit(product.price, draw)
            price_text = f", and price lower than {upper:.2f} dollars" if upper < NO_PRICE_LIMIT else ""
            goals.append(
                Goal(
                    asin=asin,
                    query=product.query,
                    name=product.title,
                    product_category=product.product_category,
                    instruction=_clean(entry.get("instruction", "")).strip(".") + price_text,
                    attributes=goal_attributes,
                    options=[_clean(o).lower() for o in entry.get("instruction_options") or []],
                    price_upper=upper,
                )
            )
    return goals


def _fingerprint(paths: Iterable[str | os.PathLike[str] | None], seed: int) -> str:
    digest = hashlib.sha1(str(seed).encode())
    for path in paths:
        if path is None:
            digest.update(b"-")
            continue
        stat = os.stat(path)
        digest.update(f"{os.path.abspath(path)}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


_LOADED: dict[str, Catalogue] = {}


def cached_webshop_data(
    products_file: str | os.PathLike[str],
    instructions_file: str | os.PathLike[str] | None = None,
    attributes_file: str | os.PathLike[str] | None = None,
    reviews_file: str | os.PathLike[str] | None = None,
    human_goals: bool = False,
) -> Catalogue:
    """``load_webshop_data`` once per process for the same unchanged files (envs of a process share it)."""
    key = _data_key(products_file, instructions_file, attributes_file, reviews_file, human_goals, WEBSHOP_GOAL_SEED)
    if key not in _LOADED:
        _LOADED[key] = load_webshop_data(products_file, instructions_file, attributes_file, reviews_file,
                                         human_goals=human_goals)
    return _LOADED[key]
