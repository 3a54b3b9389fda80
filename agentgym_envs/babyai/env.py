"""BabyAI as a text Gymnasium env (ids ``AgentGym/BabyAI-v0`` and ``-GoTo-v0`` ... ``-SynthLoc-v0``).

Item ``i`` is MiniGrid level ``AGENTGYM_LEVELS[i % 40]`` reset with seed ``i // 40`` (AgentGym's
numbering, see ``levels.py``). The level runs unmodified. Two text layers describe it and compile
text actions into MiniGrid primitives: AgentGym's server's (``text_layer="agentgym"``, the default,
``agentgym_text.py``) and ours (``text_layer="ours"``, ``world.py``: remembered objects with stable
names, planning over seen cells, explained refusals). The outcome is MiniGrid's own success reward
``1 - 0.9 * steps / max_steps`` (steps = primitive moves), 0 on failure.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agentgym_envs.babyai.levels import SUBTASK_LEVELS, level_and_seed, subtask_of
from agentgym_envs.babyai.agentgym_text import AgentGymBabyAI, client_action
from agentgym_envs.babyai.world import Result, TextWorld
from agentgym_envs.core import Outcome, Start, TextEnv, normalize_command, require
from agentgym_envs.core.parsers import ParsedAction, agentgym_action_lines, parse_react, react_response

ONE_ACTION_ONLY = "Error: Only one 'Action' is allowed per response. Please adjust your response."

#: AgentGym's BabyAI prompt, word for word (the default text layer's instruction).
AGENTGYM_INSTRUCTION = (
    "You are an exploration master that wants to finish every goal you are given. Every round I will give you an "
    "observation, and you have to respond an action and your thought based on the observation to finish the given "
    "task. You are placed in a room and you need to accomplish the given goal with actions.\n\nYou can use the "
    "following actions: \n\n- turn right \n\n- turn left \n\n- move forward \n\n- go to <obj> <id> \n\n- pick up "
    "<obj> <id> \n\n- go through <door> <id>: <door> must be an open door. \n\n- toggle and go through <door> <id>: "
    "<door> can be a closed door or a locked door. If you want to open a locked door, you need to carry a key that is "
    "of the same color as the locked door. \n\n- toggle: there is a closed or locked door right in front of you and "
    "you can toggle it.\nYour response should use the following format:\nThought:\n<Your Thought>\n\nAction:\n"
    "<Your Action>"
)

INSTRUCTION = """You are an explorer who wants to reach every goal you are given. Each round you get an observation \
and answer with your thought and one action, based on that observation, to complete the task. You are in a room and \
must reach the given goal with actions.

The actions you can use:

- turn right

- turn left

- move forward

- go to <obj> <id>

- pick up <obj> <id>

- go through <door> <id>: the <door> must be open.

- toggle and go through <door> <id>: the <door> may be closed or locked. To open a locked door you must carry a key of \
the same colour as the door.

- toggle: a closed or locked door is right in front of you and you can toggle it.
Answer in this format:
Thought:
<Your Thought>

Action:
<Your Action>"""

DETAILED_INSTRUCTION = """You are an agent in a grid world of rooms (BabyAI). Complete the goal given in each \
observation.

Every observation tells you the goal, the objects you can see with their positions relative to you, objects you saw \
earlier that are now out of sight, what is right in front of you, how far the nearest walls are, what you carry, and \
the actions you can take now. Positions count steps from your own cell, e.g. "3 steps ahead and 1 step to your left". \
Objects of the same colour and type are numbered in the order you first see them (red ball 1, red ball 2); a number \
stays with its object for the whole episode. Doors are shown with their state: open, closed or locked.

Actions:
- turn left / turn right: turn 90 degrees on the spot.
- move forward: step into the cell in front of you (walls, closed doors and objects block you).
- go to <object>: walk the shortest way through places you have already seen until you stand next to the object, \
facing it; closed doors on the way are opened. Works for doors as well.
- pick up <object>: go to the object and pick it up. You can carry one object at a time.
- drop: put the object you carry on the empty cell in front of you.
- toggle: open or close the door right in front of you (a locked door opens only while you carry a key of its colour), \
or open the box in front of you.
- go through <door>: walk through an open door into the next room.
- toggle and go through <door>: open a closed door, then walk through it.
- check available actions: list the actions you can take now.
Name objects exactly as the observation does, e.g. "go to red ball 1". An action that cannot be done now is refused \
with an explanation and changes nothing.

Every turn, answer in this format and give exactly one action:
Thought:
<your reasoning>

Action:
<the action>"""


def _make_level(level: str) -> Any:
    """A fresh, unwrapped MiniGrid BabyAI level (no Gymnasium wrappers: the text layer drives it)."""
    gym = require("gymnasium", extra="babyai")
    require("minigrid", extra="babyai")  # registers the BabyAI-* ids
    from gymnasium.envs.registration import load_env_creator

    spec = gym.spec(level)
    return load_env_creator(spec.entry_point)(**spec.kwargs)


class _PlanningWorld(TextWorld):
    """Our text layer as the oracle's memory beside AgentGym's: it sees what the agent sees after every
    primitive, and compiles a command into primitives without running them."""

    def _run(self, primitives: list[int], message: str) -> Result:
        return Result(message, valid=True, primitives=list(primitives))


TEXT_LAYERS = ("agentgym", "ours")


class BabyAIEnv(TextEnv):
    """A MiniGrid BabyAI level described in text, played with high-level actions compiled to MiniGrid's.

    Actions:
        By default AgentGym's server's action table, rebuilt every step from what is in view (objects numbered
        by distance): ``turn left``, ``turn right``, ``move forward``, ``go to <object> <k>``, ``pickup <object>
        <k>``, ``go through <open door> <k>``, ``toggle and go through <closed or locked door> <k>`` (stops on the
        door cell), ``toggle``, ``drop``, ``check available actions``; anything else is answered "The action is
        not recognized. Please check valid actions." (or the table's reason). ``text_layer="ours"``: our
        layer, with objects remembered and named by first sight, planned over seen cells. The actions
        available now are in ``info["available_actions"]``.

    Rewards:
        MiniGrid's ``1 - 0.9 * steps / max_steps`` (steps: primitive moves) when the mission is done, else 0. By
        default, as AgentGym's server, the episode ends only when that reward is above 0.5.
    """

    family = "babyai"

    def __init__(
        self,
        task_id: str,
        render_mode: str | None = None,
        text_layer: str = "agentgym",
        agentgym_names: bool = True,
        detailed_instruction: bool = False,
    ):
        """``text_layer="ours"``: our text layer (``world.py``) instead of AgentGym's; with it,
        ``agentgym_names=False`` lists actions in our spelling ("pick up red ball 1", "grey door 1") and
        ``detailed_instruction=True`` explains our observation format in the instruction."""
        super().__init__(task_id, render_mode=render_mode)
        if text_layer not in TEXT_LAYERS:
            raise ValueError(f"text_layer must be one of {TEXT_LAYERS}, got {text_layer!r}")
        if text_layer == "agentgym" and (not agentgym_names or detailed_instruction):
            raise ValueError("agentgym_names and detailed_instruction are options of text_layer='ours'")
        self.text_layer = text_layer
        self.agentgym_names = agentgym_names
        self.detailed_instruction = detailed_instruction
        self._levels = {level for subtask in self.task.subtasks for level in SUBTASK_LEVELS[subtask]}
        self._engines: dict[str, Any] = {}
        self.world: TextWorld | None = None
        self.layer: AgentGymBabyAI | None = None

    def _start(self, item_id: int, rng: np.random.Generator) -> Start:
        level, seed = level_and_seed(item_id)
        engine = self._engines.get(level)
        if engine is None:
            engine = self._engines[level] = _make_level(level)
        if self.text_layer == "agentgym":
            self.world = _PlanningWorld(engine)
            self.layer = AgentGymBabyAI(engine, on_primitive=self.world.refresh)
            observation = self.layer.reset(seed)
            self.world.mission = engine.mission
            self.world.refresh(forget=True)
            instruction = AGENTGYM_INSTRUCTION
        else:
            self.layer = None
            self.world = TextWorld(engine, agentgym_names=self.agentgym_names)
            self.world.reset(seed)
            observation = self.world.describe()
            instruction = DETAILED_INSTRUCTION if self.detailed_instruction else INSTRUCTION
        info = {"subtask": subtask_of(item_id), "level": level, "seed": seed, "mission": self.world.mission}
        info.update(self._engine_info())
        return Start(instruction, observation, info)

    def _parse(self, response: str) -> ParsedAction:
        if self.text_layer != "agentgym":
            return parse_react(response)
        # AgentGym's client: the rest of the line after "Action:", refused when there are several
        found = agentgym_action_lines(response)
        if len(found) > 1:
            return ParsedAction(None, ONE_ACTION_ONLY)
        # no "Action:" at all: the empty action, as AgentGym's client sends (text_layer="ours": a bare command)
        return ParsedAction(found[-1] if found else "")

    def _act(self, action: str) -> Outcome:
        if self.layer is not None:
            return self._act_agentgym(action)
        world = self._require_world()
        command = normalize_command(action).strip("'\"`[]()<> ").strip()
        if world.over:
            return Outcome(
                "The episode is over. Call reset() to start a new one.",
                progress=world.reward,
                score=world.reward,
                valid=False,
                info=self._engine_info(),
            )
        result = world.execute(command)
        if not result.valid:
            observation = f"{result.message}\nAvailable actions: {', '.join(world.shown_actions())}."
        elif command in ("check available actions", "check actions", "available actions"):
            observation = result.message
        else:
            observation = f"{result.message}\n\n{world.describe()}"
        return Outcome(
            observation,
            progress=world.reward,
            score=world.reward,
            done=world.success or world.failed,
            success=world.success,
            valid=result.valid,
            truncated=world.truncated,
            info={"primitive_actions": len(result.primitives), **self._engine_info()},
        )

    def _act_agentgym(self, action: str) -> Outcome:
        layer = self.layer
        before = int(layer.env.step_count)
        observation, valid = layer.step(client_action(action))
        return Outcome(
            observation,
            progress=layer.reward,
            score=layer.reward,
            done=layer.done,
            success=layer.done,
            valid=valid,
            info={"primitive_actions": int(layer.env.step_count) - before, **self._engine_info()},
        )

    def _engine_info(self) -> dict[str, Any]:
        world = self._require_world()
        return {"primitive_steps": int(world.env.step_count), "max_primitive_steps": int(world.env.max_steps)}

    def available_actions(self) -> list[str] | None:
        """The actions the observation lists now (None outside an episode)."""
        if self.layer is not None:
            return list(self.layer.actions)
        return None if self.world is None else self.world.shown_actions()

    def random_action(self, rng: np.random.Generator) -> str:
        """One of the listed actions at random, after ``Action:`` as the prompt asks."""
        return react_response(super().random_action(rng))

    def oracle_action(self) -> str:
        """The oracle's next command with its reason, written as the agent would write it."""
        from agentgym_envs.babyai.oracle import next_command

        world = self._require_world()
        command, reason = next_command(world)
        if self.layer is not None:
            return f"Thought:\n{reason}\n\nAction:\n{self._agentgym_command(command)}"
        return f"Thought:\n{reason}\n\nAction:\n{world.spell(command)}"

    def _agentgym_command(self, command: str) -> str:
        """The action of AgentGym's table that best follows our oracle's ``command``: the same verb on the same
        object when it is listed and starts as planned, else the listed action whose primitives are the longest
        start of the planned ones, else a turn. Either way the first planned primitive is taken, so the oracle's
        cost-to-go drops every turn."""
        world, layer = self._require_world(), self.layer
        plan = world.execute(command).primitives
        for ours, theirs in (
            ("go to ", "go to "),
            ("pick up ", "pickup "),
            ("toggle and go through ", "toggle and go through "),
            ("go through ", "go through "),
        ):
            if command.startswith(ours):
                obj, _ = world.resolve(command[len(ours) :])
                cell = None if obj is None else world.position(obj)
                for name, target in layer.targets.items():
                    if name.startswith(theirs) and target == cell and layer.actions[name][:1] == plan[:1]:
                        return name
                break
        best, length = None, 0
        for name, primitives in layer.actions.items():
            if primitives and len(primitives) > length and plan[: len(primitives)] == primitives:
                best, length = name, len(primitives)
        return best or "turn left"

    def accepts_item(self, item_id: int) -> bool:
        """Whether ``item_id`` encodes a seed of one of this env's levels."""
        return item_id >= 0 and level_and_seed(item_id)[0] in self._levels

    def _release(self) -> None:
        for engine in self._engines.values():
            engine.close()
        self._engines.clear()
        self.world = None
        self.layer = None

    def _require_world(self) -> TextWorld:
        if self.world is None:
            raise RuntimeError("call reset() first")
        return self.world
