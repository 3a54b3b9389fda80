"""WebShop on the original files: by default the goals AgentGym's server plays, ours behind ``human_goals=True``.

AgentGym's ``agentenv-webshop`` server makes ``WebAgentTextEnv-v0`` with ``num_products=1000`` and WebShop's
synthetic goals. ``upstream_goals`` re-writes that path plainly from WebShop's ``engine.load_products`` (the first
``num_products`` rows, then ``nan``/long/duplicate asins dropped), ``goal.get_synthetic_goals`` and ``SimServer``'s
shuffle, as read at WooooDyy/AgentGym 3ef9235 (``agentenv-webshop/webshop/web_agent_site``). A product's price
range is priced by our seeded draw (WebShop draws it from a clock-seeded state), so the reference takes the
loader's prices. The files are generated here in WebShop's format; nothing is downloaded.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

from agentgym_envs.webshop.catalogue import load_webshop_data

pytest.importorskip("bm25s")

PRICE_RANGE = [10.0 * i for i in range(1, 100)]


def upstream_goals(rows: list[dict[str, Any]], attributes: dict[str, Any], prices: dict[str, float]) -> list[dict]:
    """WebShop's synthetic goals for ``WebAgentTextEnv-v0(num_products=1000, human_goals=False)``."""
    products, asins = [], set()
    for p in rows[:1000]:
        asin = p["asin"]
        if asin == "nan" or len(asin) > 10 or asin in asins:
            continue
        asins.add(asin)
        options = {}
        for name, contents in (p["customization_options"] or {}).items():
            if contents is None:
                continue
            options[name.lower()] = [c["value"].strip().replace("/", " | ").lower() for c in contents]
        products.append({**p, "options": options, "instruction_text": attributes[asin].get("instruction"),
                         "instruction_attributes": attributes[asin].get("instruction_attributes")})
    goals = []
    random.seed(233)
    for product in products:
        if product["instruction_text"] is None:
            continue
        price_range = [p for p in PRICE_RANGE if p > prices[product["asin"]]][:4]
        if len(price_range) >= 2:
            _, price_upper = sorted(random.sample(price_range, 2))
            price_text = f", and price lower than {price_upper:.2f} dollars"
        else:
            price_upper, price_text = 1000000, ""
        names = sorted(product["options"])
        for combination in itertools.product(*(product["options"][n] for n in names)):
            goal_options = dict(zip(names, combination))
            option_text = ", and ".join(f"{k}: {v}" for k, v in goal_options.items())
            option_text = " with " + option_text if option_text else ""
            goals.append({"asin": product["asin"], "instruction_text": f"{product['instruction_text']}{option_text}"
                          f"{price_text}", "goal_options": goal_options, "price_upper": price_upper,
                          "attributes": product["instruction_attributes"]})
    random.seed(233)
    random.shuffle(goals)
    return goals


def write_files(folder: Path, count: int) -> dict[str, str]:
    """``count`` rows in WebShop's format (prices single and ranged, 0-2 options, a ``nan`` row, duplicates, rows
    without an instruction) plus their attributes file; returns the paths."""
    rng = random.Random(7)
    rows, attributes = [], {}
    colors, sizes = ["Red", "Navy/Blue", "Black"], ["Small", "Large", "XL"]
    for i in range(count):
        asin = f"B0{i:08d}"
        price = round(rng.uniform(3, 80), 2) if i % 50 else 985.5  # a dear one: fewer than two limits above
        pricing = f"${price}" if i % 3 else f"${price} - ${price + rng.uniform(1, 25):.2f}"
        options: dict[str, Any] | None = {}
        if i % 4 == 1:
            options = {"Color": [{"value": c} for c in rng.sample(colors, 2)]}
        elif i % 4 == 2:
            options = {"Size": [{"value": s} for s in sizes], "Color": [{"value": colors[i % 3]}]}
        elif i % 8 == 3:
            options = None
        rows.append({"asin": asin, "name": f"Widget {i} Deluxe", "full_description": f"Widget number {i}.",
                     "small_description": [f"Sturdy widget {i}"], "pricing": pricing if i % 11 else "",
                     "customization_options": options, "category": "tools", "query": "widget",
                     "product_category": "Tools › Hand Tools › Widgets", "images": ["w.jpg"]})
        entry = {"attributes": ["sturdy", f"feature {i % 5}"]}
        if i % 7:
            entry.update(instruction=f"i need a sturdy widget number {i}", instruction_attributes=["sturdy"])
        attributes[asin] = entry
    rows.insert(5, {**rows[2]})  # a duplicate asin, dropped
    rows.insert(9, {**rows[0], "asin": "nan"})
    paths = {}
    for name, data in (("products_file", rows), ("attributes_file", attributes)):
        path = folder / f"{name}.json"
        path.write_text(json.dumps(data))
        paths[name] = str(path)
    return paths


def test_the_original_files_give_agentgyms_goals_in_agentgyms_order(tmp_path: Path) -> None:
    paths = write_files(tmp_path, 1010)  # rows past the first 1000 are not AgentGym's products
    catalogue = load_webshop_data(**paths)
    rows = json.loads(Path(paths["products_file"]).read_text())
    attributes = json.loads(Path(paths["attributes_file"]).read_text())
    assert [p.asin for p in catalogue.products] == list(dict.fromkeys(
        r["asin"] for r in rows[:1000] if r["asin"] != "nan"))
    expected = upstream_goals(rows, attributes, {p.asin: p.price for p in catalogue.products})
    assert len(catalogue.goals) == len(expected) > 1000
    for ours, theirs in zip(catalogue.goals, expected):
        assert (ours.asin, ours.instruction, ours.options, ours.price_upper, ours.attributes) == (
            theirs["asin"], theirs["instruction_text"], theirs["goal_options"], theirs["price_upper"],
            theirs["attributes"])
    assert {g.price_upper for g in catalogue.goals} > {1000000}  # some limits drawn, some products too dear


def test_the_env_plays_agentgyms_goals_and_the_human_goals_are_opt_in(tmp_path: Path) -> None:
    paths = write_files(tmp_path, 12)
    human = {"B000000001": [{"instruction": "i want widget one", "instruction_attributes": ["sturdy"],
                             "instruction_options": ["red"]}]}
    (tmp_path / "human.json").write_text(json.dumps(human))
    with pytest.raises(ValueError, match="attributes_file"):
        gym.make("AgentGym/WebShop-v0", products_file=paths["products_file"])
    env = gym.make("AgentGym/WebShop-v0", **paths)
    goal = load_webshop_data(**paths).goals[0]
    obs, info = env.reset(options={"item_id": 0})
    assert goal.instruction in obs and info["item_id"] == 0
    for item in (0, 1):  # the oracle buys the goal's options: the synthetic goals score 1 as AgentGym's do
        env.reset(options={"item_id": item})
        for _ in range(15):
            *_, terminated, _, info = env.step(env.unwrapped.oracle_action())
            if terminated:
                break
        assert info["score"] == 1.0
    env.close()
    ours = gym.make("AgentGym/WebShop-v0", **paths, instructions_file=str(tmp_path / "human.json"), human_goals=True)
    obs, _ = ours.reset(options={"item_id": 0})
    assert "i want widget one" in obs and len(ours.unwrapped.catalogue.goals) == 1
    ours.close()
