"""TextCraft's game: gather base items and craft a goal from shown recipes.

``Game`` is the engine (inventory, ``get`` / ``craft`` / ``inventory`` commands with the feedback
players expect); ``make_game`` builds the episode of one goal: the recipe tree it needs, the
recipes shown to the agent (the true ones plus shuffled distractors) and the plan the oracle
follows.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from agentgym_envs.textcraft.recipes import Ingredient, Recipe, RecipeBook

MAX_DISTRACTORS = 10
MAX_GET = 999

#: A count: ASCII digits, few enough for ``int()`` (a 5,000-digit "count" is read as part of the name).
_COUNT = r"([0-9]{1,18})"
_GET = re.compile(rf"^get\s+(?:{_COUNT}\s+)?(.+)$")
_CRAFT = re.compile(rf"^craft\s+(?:{_COUNT}\s+)?(.+?)\s+using\s+(.+)$")
_COUNTED = re.compile(rf"^(?:{_COUNT}\s+)?(.+)$")


def item_key(text: str) -> str:
    """How players may write an item: 'Minecraft:Oak_Planks' and 'oak  planks' are 'oak planks'."""
    text = text.strip().lower().replace("minecraft:", "").replace("_", " ")
    return re.sub(r"\s+", " ", text).strip(" .")


@dataclass
class Result:
    message: str
    valid: bool


@dataclass
class Game:
    """One episode: the goal, the recipes shown, the plan (crafted item -> recipe) and the inventory."""

    book: RecipeBook
    goal: str
    plan: dict[str, Recipe]
    shown: list[Recipe]
    inventory: Counter = field(default_factory=Counter)

    @property
    def won(self) -> bool:
        """Whether the goal item is in the inventory."""
        return self.inventory[self.goal] > 0

    def intro(self) -> str:
        """The first observation: the crafting commands shown and the goal."""
        commands = "\n".join(recipe.command() for recipe in self.shown)
        return f"Crafting commands:\n{commands}\n\nGoal: craft {self.goal}."

    # ---- commands -----------------------------------------------------------------------------
    def execute(self, command: str) -> Result:
        """Carry out one command (``get``, ``craft`` or ``inventory``): its result text and whether it was valid."""
        text = item_key(command)
        if text in ("inventory", "inv", "check inventory"):
            return Result(self.describe_inventory(), True)
        if match := _GET.match(text):
            return self._get(int(match.group(1) or 1), match.group(2))
        if match := _CRAFT.match(text):
            return self._craft(int(match.group(1) or 1), match.group(2), match.group(3))
        return Result(
            f"I don't understand '{command.strip()[:200]}'. Valid actions: get <count> <item>; "
            "craft <count> <item> using <count> <item>, <count> <item>, ...; inventory.",
            False,
        )

    def describe_inventory(self) -> str:
        """The inventory as TextCraft prints it."""
        if not +self.inventory:
            return "Inventory: you are not carrying anything."
        return "Inventory: " + ", ".join(f"[{item}] ({n})" for item, n in sorted((+self.inventory).items()))

    def _resolve(self, name: str) -> str | None:
        """An item name as the player wrote it, tolerating a plural or singular 's'."""
        name = item_key(name)
        known = self.book.depth
        for candidate in (name, name[:-1] if name.endswith("s") else name + "s",
                          name[:-2] if name.endswith("es") else name):
            if candidate in known:
                return candidate
        return None

    def _get(self, count: int, name: str) -> Result:
        item = self._resolve(name)
        if item is None:
            return Result(f"Could not find an item called '{name}'.", False)
        if item not in self.book.base_items:
            return Result(f"Could not get {item}: it is not a raw material; craft it instead.", False)
        if not 1 <= count <= MAX_GET:
            return Result(f"Could not get {count} {item}: ask for between 1 and {MAX_GET}.", False)
        self.inventory[item] += count
        return Result(f"Got {count} {item}.", True)

    def _craft(self, count: int, name: str, ingredient_text: str) -> Result:
        item = self._resolve(name)
        if item is None:
            return Result(f"Could not find an item called '{name}'.", False)
        recipes = self.book.recipes.get(item)
        if not recipes:
            return Result(f"Could not find a recipe for {item}: it is a raw material; get it instead.", False)
        offered = self._parse_ingredients(ingredient_text)
        if isinstance(offered, Result):
            return offered
        quantity_hint = None
        for recipe in recipes:
            slots = _match_slots(self.book, recipe, offered)
            if slots is None:
                continue
            multiplier, remainder = divmod(count, recipe.output_count)
            if remainder or multiplier == 0 or any(n != slot.count * multiplier for (n, _), slot in slots):
                quantity_hint = recipe
                continue
            return self._apply(recipe, count, slots)
        if quantity_hint is not None:
            return Result(
                f"Wrong quantities: {quantity_hint.command()} is one craft; "
                f"scale every count by the same whole number (e.g. {quantity_hint.command(2)}).",
                False,
            )
        return Result(f"Could not find a valid recipe for {item} using those ingredients.", False)

    def _parse_ingredients(self, text: str) -> list[tuple[int, str]] | Result:
        offered = []
        for part in (p for p in re.split(r",|\band\b", text) if p.strip()):
            match = _COUNTED.match(part.strip())
            name = item_key(match.group(2))
            if self._resolve(name) is None and name not in self.book.tag_members:
                return Result(f"Could not find an item called '{name}'.", False)
            offered.append((int(match.group(1) or 1),
                            self._resolve(name) if name not in self.book.tag_members else name))
        if not offered:
            return Result("Name the ingredients: craft <count> <item> using <count> <item>, ...", False)
        return offered

    def _apply(self, recipe: Recipe, count: int, slots: list[tuple[tuple[int, str], Ingredient]]) -> Result:
        takes: Counter = Counter()
        for (needed, name), slot in slots:
            candidates = sorted(self.book.accepts(slot)) if name == slot.name and slot.is_tag else [name]
            remaining = needed
            for candidate in candidates:
                take = min(remaining, self.inventory[candidate] - takes[candidate])
                if take > 0:
                    takes[candidate] += take
                    remaining -= take
            if remaining > 0:
                have = needed - remaining
                return Result(
                    f"Could not craft {count} {recipe.output}: you need {needed} {name} but have {have}.", False)
        self.inventory.subtract(takes)
        self.inventory[recipe.output] += count
        self.inventory = +self.inventory
        return Result(f"Crafted {count} {recipe.output}.", True)

    # ---- the oracle ---------------------------------------------------------------------------
    def plan_actions(self, unit_crafts: bool = False) -> list[str]:
        """Actions that reach the goal from the current inventory: gets first, then crafts bottom-up.

        ``unit_crafts`` plans for AgentGym's rules: each craft applies one recipe unit (repeated as
        often as needed) and names the specific item used for a generic ingredient.
        """
        need: Counter = Counter({self.goal: 1})
        stock = Counter(self.inventory)
        gets: list[str] = []
        crafts: list[str] = []
        for item in sorted(self._plan_items(), key=lambda i: (-self.book.depth[i], i)):
            missing = max(0, need[item] - stock[item])
            if missing == 0:
                continue
            if item not in self.plan:
                gets.append(f"get {missing} {item}")
                continue
            recipe = self.plan[item]
            multiplier = math.ceil(missing / recipe.output_count)
            if unit_crafts:
                parts = ", ".join(f"{i.count} {self.member(i)}" for i in recipe.ingredients)
                crafts += [f"craft {recipe.output_count} {recipe.output} using {parts}"] * multiplier
            else:
                crafts.append(recipe.command(multiplier))
            for ingredient in recipe.ingredients:
                need[self.member(ingredient)] += ingredient.count * multiplier
        return gets + crafts[::-1]

    def member(self, ingredient: Ingredient) -> str:
        """The item the plan uses for an ingredient slot (the shown recipe's output for a tag)."""
        if not ingredient.is_tag:
            return ingredient.name
        members = self.book.accepts(ingredient)
        planned = sorted(m for m in members if m in self.plan)
        return planned[0] if planned else min(members, key=lambda m: (self.book.depth[m], m))

    def _plan_items(self) -> set[str]:
        items = {self.goal}
        for recipe in self.plan.values():
            items.update(self.member(i) for i in recipe.ingredients)
        return items


def _match_slots(book: RecipeBook, recipe: Recipe, offered: list[tuple[int, str]]) -> list | None:
    """Pair each offered (count, name) with a distinct ingredient slot of ``recipe``, or ``None``."""
    if len(offered) != len(recipe.ingredients):
        return None
    free = list(recipe.ingredients)
    pairs = []
    for entry in offered:
        slot = next((s for s in free if entry[1] == s.name or entry[1] in book.accepts(s)), None)
        if slot is None:
            return None
        free.remove(slot)
        pairs.append((entry, slot))
    return pairs


def make_game(book: RecipeBook, goal: str, rng: np.random.Generator, recipe_list: str = "agentgym") -> Game:
    """The episode of ``goal``: the oracle's plan (one shallowest recipe per needed item) and the recipes shown.

    ``recipe_list="agentgym"`` shows what AgentGym's server shows: every recipe of the goal's tree
    (``RecipeBook.tree_recipes``) and up to 10 distractors, drawn as its ``create_recipe_set`` and ``reset``
    draw them (up to 10 uses of each ingredient of the tree, those not in the tree pooled, 10 of the pool),
    in a shuffled order. The draw and the order are ours, a pure function of ``rng``: AgentGym's come from
    ``random.seed(42)`` over lists in Python set order, which changes with ``PYTHONHASHSEED``.
    ``recipe_list="shallowest"``: the plan's recipes and 5-10 distractors (one recipe of other items).
    """
    plan: dict[str, Recipe] = {}
    pending = [goal]
    while pending:
        item = pending.pop()
        if item in plan or item in book.base_items:
            continue
        options = sorted(book.best_recipes(item), key=lambda r: r.command())
        recipe = options[int(rng.integers(len(options)))]
        plan[item] = recipe
        for ingredient in recipe.ingredients:
            shallowest = min(book.depth[x] for x in book.accepts(ingredient))
            members = sorted(m for m in book.accepts(ingredient) if book.depth[m] == shallowest)
            pending.append(members[int(rng.integers(len(members)))] if ingredient.is_tag else ingredient.name)
    if recipe_list == "agentgym":
        return Game(book=book, goal=goal, plan=plan, shown=_agentgym_recipe_list(book, goal, rng))
    if recipe_list != "shallowest":
        raise ValueError(f"recipe_list must be 'agentgym' or 'shallowest', got {recipe_list!r}")
    others = sorted(item for item in book.recipes if item not in plan)
    count = int(rng.integers(MAX_DISTRACTORS // 2, MAX_DISTRACTORS + 1))
    distractors = [book.recipes[item][0] for item in rng.choice(others, size=count, replace=False)]
    shown = list(plan.values()) + distractors
    rng.shuffle(shown)
    return Game(book=book, goal=goal, plan=plan, shown=shown)


def _agentgym_recipe_list(book: RecipeBook, goal: str, rng: np.random.Generator) -> list[Recipe]:
    """AgentGym's first list (see ``make_game``): the tree's recipes, one per command, and its distractors."""
    tree = {recipe.command(): recipe for recipe in book.tree_recipes(goal)}
    pool: dict[str, Recipe] = {}
    for recipe in tree.values():
        for ingredient in recipe.ingredients:
            uses = book.uses(ingredient.name)
            for index in sorted(rng.choice(len(uses), size=min(len(uses), MAX_DISTRACTORS), replace=False)):
                pool.setdefault(uses[index].command(), uses[index])
    candidates = sorted(command for command in pool if command not in tree)
    drawn = rng.choice(len(candidates), size=min(len(candidates), MAX_DISTRACTORS), replace=False)
    shown = list(tree.values()) + [pool[candidates[i]] for i in sorted(drawn)]
    rng.shuffle(shown)
    return shown
