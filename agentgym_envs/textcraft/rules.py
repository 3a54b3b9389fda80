"""TextCraft's rules as AgentGym's TextCraft server applies them: the default of every TextCraft id.

A model trained on our ids must keep its score on AgentGym's server, and the other way round, so
the default game accepts exactly what AgentGym's accepts and answers with the same text:

* Commands are case-sensitive and matched at the start: ``craft <n> <item> using <n> <item>, ...``,
  ``get <n> <item>``, ``inventory``; anything else gets "Could not execute <action>".
* A craft applies one recipe unit: every ingredient count must equal the recipe's, and the output
  count written is ignored (the recipe's own output count is added).
* Ingredients are looked up in the inventory by their exact item name, so a generic ingredient
  such as "planks" must be written as the specific kind carried ("oak planks").
* ``get`` gives any amount of any item that no recipe makes; the message repeats the name as
  written. Item ids in messages are Minecraft ids ("Crafted 4 minecraft:oak_planks").
* Before the command reaches the game, AgentGym's client keeps the first line after "Action:"
  and drops every character but letters, digits, commas and spaces (``client_action``).

The lenient rules (scaled crafts, tag names as ingredients, plural tolerance) are
``engine.Game``'s own and are opted into with ``gym.make(id, lenient_crafting=True)``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from agentgym_envs.core.safety import parse_count
from agentgym_envs.textcraft.engine import Result

if TYPE_CHECKING:
    from agentgym_envs.textcraft.engine import Game
    from agentgym_envs.textcraft.recipes import Recipe

#: AgentGym's reply to a response with more than one "Action:" (its client checks this).
MULTIPLE_ACTIONS = "Error: Only one 'Action' is allowed per response. Please adjust your response."

_CRAFT = re.compile(r"craft (.*) using (.*)")
_GET = re.compile(r"get ([0-9]+) (.*)")
_INVENTORY = re.compile(r"inventory")
_COUNTED = re.compile(r"([0-9]+) (.*)")
COUNT_RULE = "counts are whole numbers of at most 18 digits"


def client_action(action: str) -> str:
    """What AgentGym's client sends for an extracted action: letters, digits, commas and single spaces."""
    return " ".join(re.sub(r"[^A-Za-z0-9, ]+", "", action).split()).strip()


def minecraft_id(name: str) -> str:
    """'oak planks' -> 'minecraft:oak_planks' (the id AgentGym prints)."""
    return "minecraft:" + name.replace(" ", "_")


def execute(game: Game, action: str) -> Result:
    """Apply one command with AgentGym's rules to ``game``'s inventory."""
    if match := _CRAFT.match(action):
        return _craft(game, match.group(1), match.group(2))
    if match := _GET.match(action):
        count = parse_count(match.group(1))
        if count is None:  # beyond what upstream's int() survives (it raises past 4,300 digits)
            return Result(f"Could not execute {action}: {COUNT_RULE}", False)
        return _get(game, count, match.group(2))
    if _INVENTORY.match(action):
        return Result(describe_inventory(game), True)
    return Result(f"Could not execute {action}", False)


def describe_inventory(game: Game) -> str:
    """'Inventory: [oak planks] (4) ' in the order items were first added (AgentGym's format)."""
    if not game.inventory:
        return "Inventory: You are not carrying anything."
    return "Inventory: " + "".join(f"[{item}] ({count}) " for item, count in game.inventory.items())


def _is_tag(game: Game, name: str) -> bool:
    return name in game.book.tag_members


def _get(game: Game, count: int, name: str) -> Result:
    book = game.book
    if name in book.recipes or _is_tag(game, name) or name not in book.depth:
        return Result(f"Could not find {name}", False)
    game.inventory[name] = game.inventory.get(name, 0) + count
    return Result(f"Got {count} {name}", True)


def _craft(game: Game, output_text: str, inputs_text: str) -> Result:
    counted = _COUNTED.match(output_text)
    output, output_count = (counted.group(2), parse_count(counted.group(1))) if counted else (output_text, 1)
    if output_count is None:
        return Result(f"Wrong item format: {output_text}: {COUNT_RULE}", False)
    offered: list[tuple[int, str]] = []
    for part in inputs_text.split(","):
        counted = _COUNTED.match(part.strip())
        count = parse_count(counted.group(1)) if counted else None
        if count is None:
            return Result(f"Wrong item format: {part.strip()}", False)
        offered.append((count, counted.group(2)))
    output_id = None if _is_tag(game, output) else minecraft_id(output)
    # Ingredients count only under their exact name; a tag name is never carried.
    if any(_is_tag(game, name) or game.inventory.get(name, 0) < count for count, name in offered):
        return Result(f"Could not find enough items to craft {output_id}", False)
    for recipe in game.book.recipes.get(output, []) if output_id else []:
        if _matches(game, recipe, offered):
            for count, name in offered:
                game.inventory[name] -= count
                if game.inventory[name] == 0:
                    del game.inventory[name]
            game.inventory[recipe.output] = game.inventory.get(recipe.output, 0) + recipe.output_count
            return Result(f"Crafted {recipe.output_count} {minecraft_id(recipe.output)}", True)
    tag = minecraft_id(output) if output_id is None else None
    return Result(
        f"Could not find a valid recipe for ItemTagWithCount(item_tag=ItemTag(tag={tag!r}, item_id={output_id!r}), "
        f"count={output_count})",
        False,
    )


def _matches(game: Game, recipe: Recipe, offered: list[tuple[int, str]]) -> bool:
    """Each recipe slot takes the first offered entry that fits it, with exactly the slot's count."""
    remaining = list(offered)
    for slot in recipe.ingredients:
        accepted = game.book.accepts(slot) | {slot.name}
        entry = next((e for e in remaining if e[1] in accepted), None)
        if entry is None or entry[0] != slot.count:
            return False
        remaining.remove(entry)
    return not remaining
