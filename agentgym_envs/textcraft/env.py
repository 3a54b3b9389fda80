"""TextCraft as a text Gymnasium env (ids ``AgentGym/TextCraft-v0`` and ``-Depth1-v0`` ... ``-Depth4-v0``).

Item ids index ``goals()``: every craftable item of depth 1-4, ordered by (depth, name). An
episode is a pure function of its item id: the recipe choices and distractors are drawn from a
generator seeded with it.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from agentgym_envs.core import Outcome, Start, TextEnv
from agentgym_envs.core.parsers import ParsedAction, agentgym_action_lines, parse_react, react_response
from agentgym_envs.textcraft import rules
from agentgym_envs.textcraft.engine import Game, make_game
from agentgym_envs.textcraft.recipes import recipe_book
from agentgym_envs.textcraft.tasks import DEPTHS

INSTRUCTION = """You are crafting Minecraft items. You are shown a few useful crafting recipes; a crafting command has \
the form "craft [target object] using [input ingredients]".
Each round you get an observation and answer with your thought and one action based on it and the task. You can "get" \
an ingredient (from your inventory or the world), look at what you carry with "inventory", or "craft" a target with \
one of the crafting commands.
Follow this answer format exactly:"Thought:
your thoughts.

Action:
your next action"

Remember:
1. Give a quantity in every "get" and "craft" command. Example get: get 1 lapis lazuli - example craft: craft 1 blue \
dye using 1 lapis lazuli - another craft: craft 1 golden carrot using 8 gold nugget, 1 carrot
2. In a "get" command, do not say whether the item comes from your inventory or from the world.
3. Only the crafting commands shown may be used; do not invent your own. When a command names a generic ingredient \
such as "planks", write a specific kind of it instead, e.g. "dark oak planks".
"""

LENIENT_INSTRUCTION = """You are playing a Minecraft crafting game. Each episode shows a list of crafting commands and \
a goal item. Your job is to obtain the goal item.

Actions:
- get <count> <item>: gather a raw material (only items that no shown command produces can be gathered).
- craft <count> <item> using <count> <item>, <count> <item>, ...: use one of the crafting commands; you may scale \
every count by the same whole number.
- inventory: list what you carry.

A generic ingredient such as "planks" can be satisfied by any specific kind (for example oak planks). Some crafting \
commands are distractors that the goal does not need.

Every turn, answer in this format and give exactly one action:
Thought:
<your reasoning>

Action:
<the action>"""


@lru_cache(maxsize=1)
def goals() -> tuple[tuple[str, int], ...]:
    """(item, depth) for every goal, item id = position; stable for a given recipe data version."""
    book = recipe_book()
    return tuple(sorted(((item, d) for item, d in book.depth.items() if d in DEPTHS), key=lambda g: (g[1], g[0])))


class TextCraftEnv(TextEnv):
    """Craft a Minecraft goal item from the recipes shown in the first observation.

    Actions:
        ``get <n> <item>`` (an item no recipe makes), ``craft <n> <item> using <n> <item>, ...`` with exactly one
        recipe's quantities and the specific kind of a generic ingredient (``lenient_crafting=True``: scaled
        crafts, generic names, plurals), ``inventory``; after ``Action:`` in ReAct form (``Thought: ... Action: ...``).
        As AgentGym's client: one ``Action:`` line (several are refused), cleaned to letters, digits and
        commas; a response without one is the empty action (``lenient_crafting=True``: a bare one-line command).

    Rewards:
        1 when the goal item is in the inventory (the episode ends), else 0.
    """

    family = "textcraft"

    def __init__(self, task_id: str, render_mode: str | None = None, lenient_crafting: bool = False,
                 recipe_list: str = "agentgym"):
        """``lenient_crafting=True`` opts into our relaxed rules (scaled crafts, generic ingredient
        names, plurals, case-insensitive commands); the default is AgentGym's rules (``rules.py``).
        ``recipe_list``: the first observation's crafting commands: ``"agentgym"`` (default) every recipe
        of the goal's tree plus up to 10 distractors, as AgentGym's server lists them (our draw and order);
        ``"shallowest"`` one shallowest recipe per needed item plus 5-10 distractors."""
        super().__init__(task_id, render_mode=render_mode)
        if recipe_list not in ("agentgym", "shallowest"):
            raise ValueError(f"recipe_list must be 'agentgym' or 'shallowest', got {recipe_list!r}")
        self.lenient_crafting = lenient_crafting
        self.recipe_list = recipe_list
        self.game: Game | None = None

    def _start(self, item_id: int, rng: np.random.Generator) -> Start:
        goal, depth = goals()[item_id]
        self.game = make_game(recipe_book(), goal, np.random.default_rng(item_id), self.recipe_list)
        instruction = LENIENT_INSTRUCTION if self.lenient_crafting else INSTRUCTION
        return Start(instruction, self.game.intro(), {"goal": goal, "depth": depth})

    def _parse(self, response: str) -> ParsedAction:
        if self.lenient_crafting:  # ours: also a bare one-line command without "Action:"
            return parse_react(response)
        # AgentGym's client: one "Action:" line, cleaned; none sends the empty action (a wasted turn)
        found = agentgym_action_lines(response)
        if len(found) > 1:
            return ParsedAction(None, rules.MULTIPLE_ACTIONS)
        return ParsedAction(rules.client_action(found[-1] if found else ""))

    def _act(self, action: str) -> Outcome:
        assert self.game is not None
        if self.lenient_crafting:
            result = self.game.execute(action)
            won = self.game.won
            observation = result.message + (f"\nYou have crafted the goal: {self.game.goal}." if won else "")
        else:
            result = rules.execute(self.game, action)
            won = self.game.won
            observation = result.message
        return Outcome(observation, progress=float(won), score=float(won), done=won, success=won, valid=result.valid)

    def oracle_action(self) -> str:
        """The next step of a plan that crafts the goal (one unit per craft under AgentGym's rules)."""
        assert self.game is not None, "call reset() first"
        actions = self.game.plan_actions(unit_crafts=not self.lenient_crafting)
        if not actions:
            return "Thought:\nThe goal is in my inventory.\n\nAction:\ninventory"
        step = actions[0]
        reason = "I need this raw material." if step.startswith("get") else "I have the ingredients for this step."
        return f"Thought:\n{reason}\n\nAction:\n{step}"

    def random_action(self, rng: np.random.Generator) -> str:
        """A random ``get`` of a shown ingredient, a shown crafting command, or ``inventory``."""
        assert self.game is not None, "call reset() first"
        recipe = self.game.shown[int(rng.integers(len(self.game.shown)))]
        choice = int(rng.integers(3))
        if choice == 0:
            ingredient = recipe.ingredients[int(rng.integers(len(recipe.ingredients)))]
            return react_response(f"get {ingredient.count} {self.game.member(ingredient)}")
        return react_response(recipe.command() if choice == 1 else "inventory")

    def accepts_item(self, item_id: int) -> bool:
        """Whether ``item_id`` is a goal of this env's depth (any depth for the family env)."""
        if not 0 <= item_id < len(goals()):
            return False
        return self.task.subtask is None or self.task.subtask == f"Depth{goals()[item_id][1]}"
