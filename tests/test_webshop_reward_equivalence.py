"""The WebShop reward against upstream's scoring code, re-implemented here from AgentGym's copy of
WebShop's ``web_agent_site/engine/goal.py`` and ``normalize.py`` (thefuzz 0.19.0 on difflib).

Every goal of the generated catalogue is scored with the right purchase and with near misses
(each other value of each option, no options, a similar product, a price over the limit). Our goals'
options are a dict, as WebShop's synthetic goals are, which AgentGym's server uses (its
``WebAgentTextEnv-v0`` is made without ``human_goals``): the default is compared with upstream's
``(name, value)``-pair path, ``match_option_values=True`` with its path for goals that list values.

The big comparison takes the title nouns from the content-word rule on both sides (tagging 12,000
titles with spaCy would take ~30 s); ``test_title_nouns_are_spacys_tags_when_a_model_is_installed``
checks the spaCy path on upstream's own title pairs against the rule written from ``goal.py``.
"""

from __future__ import annotations

import re
from difflib import SequenceMatcher
from functools import lru_cache

import pytest

from agentgym_envs.webshop import reward
from agentgym_envs.webshop.catalogue import default_catalogue
from agentgym_envs.webshop.reward import content_words, score_purchase

# ---- upstream, re-implemented ---------------------------------------------------------------------
UPSTREAM_COLORS = """alabaster apricot aqua ash asphalt azure banana beige black blue blush bordeaux bronze brown
burgundy camel camo caramel champagne charcoal cheetah chestnut chocolate christmas coffee cognac copper coral
cranberry cream crystal dark denim eggplant elephant espresso fuchsia gold granite grape graphite grass gray green
grey heather indigo ivory ivy khaki lavender lemon leopard light lilac lime magenta maroon mauve merlot midnight
mint mocha multicolor mushroom mustard natural navy nude olive orange peach pewter pink plum purple rainbow red rose
royal rust sand sapphire seashell silver skull slate steel stone stonewash sunflower tan taupe teal tiger turquoise
violet walnut wheat white wine yellow""".split()


def up_normalize_color(color_string):
    for norm_color in UPSTREAM_COLORS:
        if norm_color in color_string:  # a tuple (the dict path) tests membership, a str substrings
            return norm_color
    return color_string


def _process(s):
    s = s if isinstance(s, str) else str(s)  # thefuzz's asciidammit: str() of anything else
    s = "".join(ch for ch in s if not 128 <= ord(ch) < 256)
    return re.sub(r"(?ui)\W", " ", s).lower().strip()


def _ratio(s1, s2):
    if s1 == s2:
        return 100
    if len(s1) == 0 or len(s2) == 0:
        return 0
    return int(round(100 * SequenceMatcher(None, s1, s2).ratio()))


@lru_cache(maxsize=None)  # a pure function: cached only to keep the test fast
def up_token_set_ratio(s1, s2):
    p1, p2 = _process(s1), _process(s2)
    if not p1 or not p2:
        return 0
    t1, t2 = set(p1.split()), set(p2.split())
    sect = " ".join(sorted(t1 & t2))
    c12 = (sect + " " + " ".join(sorted(t1 - t2))).strip()
    c21 = (sect + " " + " ".join(sorted(t2 - t1))).strip()
    return max(_ratio(sect.strip(), c12), _ratio(sect.strip(), c21), _ratio(c12, c21))


_nouns = lru_cache(maxsize=None)(content_words)  # the tagger both sides use here (see the module docstring)


def up_type_reward(product, goal):
    query_match = product["query"] == goal["query"]
    pc = [x.strip() for x in product["product_category"].split("›")]
    gc = [x.strip() for x in goal["product_category"].split("›")]
    category_match = len(set(pc) & set(gc)) >= 2
    purchased, desired = _nouns(product["name"]), _nouns(goal["name"])  # lists: repeats count in len(desired)
    title_score = 0.2 if not desired else len(set(purchased) & set(desired)) / len(desired)
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return r_type


def up_attribute_matches(product, goal):
    n = 0
    for g_attr in goal["attributes"]:
        matched = any(up_token_set_ratio(p_attr, g_attr) > 85 for p_attr in product["Attributes"])
        if matched or (
            g_attr in product["Title"].lower()
            or g_attr in " ".join(product["BulletPoints"]).lower()
            or g_attr in product["Description"].lower()
        ):
            n += 1
    return n


def up_option_matches(purchased_options, goal_options):
    purchased_options = [up_normalize_color(o) for o in purchased_options]
    goal_options = [up_normalize_color(o) for o in goal_options]
    n = 0
    for g_option in goal_options:
        for p_option in purchased_options:
            if up_token_set_ratio(p_option, g_option) > 85:
                n += 1
                break
    return n


def up_get_reward(product, goal, price, options):
    r_price = (price <= goal["price_upper"]) if goal["price_upper"] > 0 else None
    n_attr = _attribute_matches(product, goal)
    goal_options = goal["goal_options"]
    n_opt = up_option_matches(
        list(options.values()), goal_options.items() if isinstance(goal_options, dict) else goal_options
    )
    total = (n_attr + n_opt + r_price) / (len(goal["attributes"]) + len(goal["goal_options"]) + 1)
    return total * up_type_reward(product, goal)


def _attribute_matches(product, goal):
    """``up_attribute_matches``, remembered per (product, goal) pair: the test asks for it often."""
    key = (product["Title"], goal["name"], tuple(goal["attributes"]))
    if key not in _ATTRIBUTES:
        _ATTRIBUTES[key] = up_attribute_matches(product, goal)
    return _ATTRIBUTES[key]


_ATTRIBUTES: dict = {}


# ---- the comparison -------------------------------------------------------------------------------
def _as_upstream(product, goal, dict_options: bool):
    p = {"query": product.query, "product_category": product.product_category, "name": product.title,
         "Title": product.title, "Attributes": list(product.attributes), "BulletPoints": list(product.features),
         "Description": product.description}
    g = {"query": goal.query, "product_category": goal.product_category, "name": goal.name,
         "attributes": list(goal.attributes), "price_upper": goal.price_upper,
         "goal_options": dict(goal.options) if dict_options and isinstance(goal.options, dict) else goal.option_values}
    return p, g


def _cases(catalogue):
    """(product, goal, chosen options, price) for every goal: the right purchase and near misses."""
    by_query: dict[str, list] = {}
    for product in catalogue.products:
        by_query.setdefault(product.query, []).append(product)
    for goal in catalogue.goals:
        target = catalogue.by_asin[goal.asin]
        right = dict(goal.options) if isinstance(goal.options, dict) else {}
        yield target, goal, right, target.price
        yield target, goal, {}, target.price
        yield target, goal, right, goal.price_upper + 1.0
        for name, values in target.options.items():
            for value in values:
                if right.get(name) != value:
                    yield target, goal, {**right, name: value}, target.price
        for other in by_query[goal.query][:3]:
            if other.asin != goal.asin:
                chosen = {n: vs[0] for n, vs in other.options.items()}
                chosen.update({n: v for n, v in right.items() if v in other.options.get(n, [])})
                yield other, goal, chosen, other.price


@lru_cache(maxsize=1)
def upstream_scores() -> tuple[tuple, ...]:
    """Every case with upstream's reward on the synthetic-goal path (options a dict: ``(name, value)`` pairs)
    and on the path of goals that list values."""
    return tuple(
        (product, goal, chosen, price, *_both_paths(product, goal, chosen, price))
        for product, goal, chosen, price in _cases(default_catalogue())
    )


def _both_paths(product, goal, chosen, price):
    p, g = _as_upstream(product, goal, True)
    on_pairs = up_get_reward(p, g, price, chosen)
    if not isinstance(g["goal_options"], dict):
        return on_pairs, on_pairs
    return on_pairs, up_get_reward(p, {**g, "goal_options": list(g["goal_options"].values())}, price, chosen)


@pytest.fixture
def content_word_nouns(monkeypatch):
    """Our scorer with the content-word nouns, as the reference here (whatever spaCy model is installed)."""
    monkeypatch.setattr(reward, "title_nouns", _nouns)


def webshop_agreement(**options):
    """(agreeing with the pair path, agreeing with the values path, compared, cases where upstream's two paths
    differ): ours with ``options`` against upstream's synthetic-goal path (options a dict: ``(name, value)``
    pairs) and its path for goals that list values."""
    pairs = values = total = paths_differ = 0
    for product, goal, chosen, price, up_pairs, up_values in upstream_scores():
        ours = score_purchase(product, goal, chosen, price, **options).reward
        total += 1
        paths_differ += abs(up_pairs - up_values) > 1e-9
        pairs += abs(ours - up_pairs) < 1e-9
        values += abs(ours - up_values) < 1e-9
    return pairs, values, total, paths_differ


def test_webshop_reward_equals_upstreams_goal_py(content_word_nouns) -> None:
    pairs, values, total, paths_differ = webshop_agreement()
    print(f"webshop reward: {pairs}/{total} agree with upstream's synthetic-goal path ({pairs / total:.4%}), "
          f"{values}/{total} with its values path ({values / total:.4%}); the two differ on {paths_differ}")
    assert total > 40_000
    assert pairs / total >= 0.995
    assert paths_differ > 0  # the pair path is a real choice: it changes scores


def test_match_option_values_is_upstreams_path_for_listed_values(content_word_nouns) -> None:
    pairs, values, total, _ = webshop_agreement(match_option_values=True)
    print(f"webshop reward, match_option_values=True: {values}/{total} agree with the values path "
          f"({values / total:.4%}), {pairs}/{total} with the synthetic-goal path ({pairs / total:.4%})")
    assert values / total >= 0.995 and pairs < total


def test_exact_sizes_is_an_opt_in_that_changes_only_sizes(content_word_nouns) -> None:
    pairs, values, total, _ = webshop_agreement(exact_sizes=True)
    print(f"webshop reward, exact_sizes=True: {values}/{total} agree with upstream's values path "
          f"({values / total:.4%}), {pairs}/{total} with its synthetic-goal path ({pairs / total:.4%})")
    assert values < total  # a real change: fuzzily matching sizes ("3 piece set" for "2 piece set") now fail


# Upstream's own title pairs (WebShop's tests/web-agent-site/engine/test_goal.py, whose expected title scores
# were computed with en_core_web_lg): goal title, purchased title, lg's title score.
UPSTREAM_TITLE_PAIRS = (
    ("Name 1", "Name 1", 1.0),
    ("Mens D.O.N. Issue 2 Gca Basketball Sneakers Shoes Casual - Off White",
     "PEAK High Top Mens Basketball Shoes Lou Williams Streetball Master Breathable Non Slip Outdoor Sneakers", 0.333),
    ("Saireed UL Listed 2 Prong Power Cord for JBL Bar 3.1 Bar 2.1 Channel 4K Ultra HD Soundbar Home Theater System "
     "Subwoofer", "BRST AC Power Cord Outlet Socket Cable Plug Lead for Panasonic SC-HT830V DVD/VCR Combo Home Theater "
     "System", 0.3),
    ("Saireed UL Listed 2 Prong Power Cord for JBL Bar 3.1 Bar 2.1 Channel 4K Ultra HD Soundbar",
     "BRST AC Power Cord Outlet Socket Cable Plug Lead for Panasonic SC-HT830V DVD/VCR Combo Home Theater System",
     0.15),
    ("Rusticware 921ORB Kitchen and Bath Cabinet Knob", "Minkissy 2pcs Stainless Steel Eyebrow Tweezers Blackhead "
     "Acne Remover Portable Makeup Tweezers (Silver)", 0.0),
)


def _title_score(nouns, goal_title, purchased_title):
    desired = nouns(goal_title)
    return len(set(nouns(purchased_title)) & set(desired)) / len(desired) if desired else 0.2


def _r_type(title_score):
    # query and category differ in these pairs, so r_type depends on the title score alone
    return 0.0 if title_score == 0 else 0.1 if title_score < 0.1 else 1.0 if title_score > 0.2 else 0.5


def test_title_nouns_are_spacys_tags_when_a_model_is_installed() -> None:
    """With a spaCy model, ``title_nouns`` is goal.py's rule (the full pipeline's NOUN/PROPN/PNOUN tokens,
    lower-cased, repeats kept) and the model gives lg's r_type on upstream's title pairs."""
    model = reward.spacy_model()
    if model is None:
        pytest.skip("no English spaCy model installed (pip install 'agentgym-rl[webshop]'): content words are used")
    import spacy

    full = spacy.load(model[0])  # the full pipeline, as goal.py runs it
    for goal_title, purchased_title, lg_score in UPSTREAM_TITLE_PAIRS:
        for title in (goal_title, purchased_title):
            assert reward.title_nouns(title) == tuple(
                t.text.lower() for t in full(title) if t.pos_ in ("PNOUN", "NOUN", "PROPN"))
        ours = _title_score(reward.title_nouns, goal_title, purchased_title)
        assert _r_type(ours) == _r_type(lg_score), (goal_title, ours, lg_score)
        assert _r_type(_title_score(content_words, goal_title, purchased_title)) == _r_type(lg_score)
