"""The WebShop reward against upstream's scoring code, re-implemented here from AgentGym's copy of
WebShop's ``web_agent_site/engine/goal.py`` and ``normalize.py`` (thefuzz 0.19.0 on difflib).

Every goal of the generated catalogue is scored with the right purchase and with near misses
(each other value of each option, no options, a similar product, a price over the limit). The
type score uses our title nouns on both sides (spaCy's en_core_web_lg is not installable), so this
checks everything else. The one documented adaptation, goals whose options are a dict (upstream
passes ``(name, value)`` pairs, see docs/fidelity.md), is counted separately.
"""

from __future__ import annotations

import re
from difflib import SequenceMatcher
from functools import lru_cache

from agentgym_envs.webshop.catalogue import default_catalogue
from agentgym_envs.webshop.reward import score_purchase, title_nouns

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


_nouns = lru_cache(maxsize=None)(title_nouns)


def up_type_reward(product, goal):
    query_match = product["query"] == goal["query"]
    pc = [x.strip() for x in product["product_category"].split("›")]
    gc = [x.strip() for x in goal["product_category"].split("›")]
    category_match = len(set(pc) & set(gc)) >= 2
    purchased, desired = list(_nouns(product["name"])), list(_nouns(goal["name"]))
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
    """Every case with upstream's reward on the values path and on the dict path."""
    return tuple(
        (product, goal, chosen, price, *_both_paths(product, goal, chosen, price))
        for product, goal, chosen, price in _cases(default_catalogue())
    )


def _both_paths(product, goal, chosen, price):
    p, g = _as_upstream(product, goal, True)
    on_dict = up_get_reward(p, g, price, chosen)
    if not isinstance(g["goal_options"], dict):
        return on_dict, on_dict
    return up_get_reward(p, {**g, "goal_options": list(g["goal_options"].values())}, price, chosen), on_dict


def webshop_agreement(score=score_purchase, **options):
    """(agreeing, compared, adaptation cases: where upstream's two goal paths differ)."""
    agree = total = adapted = 0
    for product, goal, chosen, price, up_values, up_dict in upstream_scores():
        if abs(up_values - up_dict) > 1e-9:
            adapted += 1  # the dict path (documented): ours scores the option values
            continue
        total += 1
        agree += abs(score(product, goal, chosen, price, **options).reward - up_values) < 1e-9
    return agree, total, adapted


def test_webshop_reward_equals_upstreams_goal_py() -> None:
    agree, total, adapted = webshop_agreement()
    print(f"webshop reward: {agree}/{total} agree ({agree / total:.4%}); dict-path adaptation: {adapted} cases")
    assert total > 40_000
    assert agree / total >= 0.995
    assert adapted < 0.1 * total


def test_exact_sizes_is_an_opt_in_that_changes_only_sizes() -> None:
    agree, total, _ = webshop_agreement(exact_sizes=True)
    print(f"webshop reward, exact_sizes=True: {agree}/{total} agree with upstream ({agree / total:.4%})")
    assert agree < total  # a real change: fuzzily matching sizes ("3 piece set" for "2 piece set") now fail
