"""ALFWorld as a text Gymnasium env (``AgentGym/ALFWorld-v0``), on TextWorld's PDDL engine.

Item ``i`` is a generated game (``generator.py``) of task type ``TASK_TYPES[i % 6]``, cached on
disk on first use. The engine is ALFWorld's own: its PDDL domain, its grammar, TextWorld's PDDL
state and Fast Downward. The agent writes ALFWorld's commands (``go to``, ``take X from Y``,
``put X in/on Y``, ``open``, ``close``, ``use``, ``clean/heat/cool X with Y``, ``examine``,
``inventory``, ``look``); the admissible commands are in ``info["available_actions"]`` and, as in
AgentGym's ALFWorld, at the end of every observation.

Real ALFWorld games. If you have ALFWorld's data (``alfworld-download`` puts it under
``$ALFWORLD_DATA/json_2.1.1``), play its ``game.tw-pddl`` files with::

    env = gym.make("AgentGym/ALFWorld-v0", game_dir="~/.cache/alfworld/json_2.1.1/valid_unseen")
    obs, info = env.reset(options={"split": "test", "index": 0})

Every ``game.tw-pddl`` under ``game_dir`` (sorted by path) becomes item 0, 1, ... of the split
named by ``game_split`` (default ``"test"``); unsolvable games (``"solvable": false``) are skipped
and a goal left as ``UNKNOWN GOAL`` is filled in from the neighbouring ``traj_data.json``.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any, Collection

import numpy as np

from agentgym_envs.alfworld import generator
from agentgym_envs.alfworld.engine import AlfredEngine
from agentgym_envs.alfworld.expert import TOOLS, Goal, World, next_command, parse_goal
from agentgym_envs.core import Outcome, ParsedAction, Start, TextEnv, normalize_command, require
from agentgym_envs.core.parsers import parse_agentgym_react, react_response

INSTRUCTION = """Solve a task by interacting with a household. Imagine you are an intelligent agent in a household \
environment whose target is to carry out actions that complete the task goal. At the start you are given a detailed \
description of the environment and the goal to accomplish. Each turn you get a list of actions and choose one of them \
to perform. You can answer in one of two ways, "THOUGHT" or "ACTION". With "THOUGHT", first think about the current \
situation and plan your next actions, then give this turn's action; the output must follow exactly this format:"Thought:
your thoughts.

Action:
your next action"; with "ACTION", give the action directly; the output must follow exactly this format:"Action:
your next action". After each turn the environment gives you immediate feedback to plan your next steps with. If the \
environment answers "Nothing happened", the previous action was invalid and you should try other options.
 Reminder:
1. The action must be one of the available actions given. Any other action is illegal.
2. Think when needed; try to act directly more often."""

#: Our instruction, with ``extra_feedback=True``.
DETAILED_INSTRUCTION = """You are in a house and must complete a household task. The first observation describes the \
room and ends with your task.

Commands (use object and receptacle names exactly as shown, with their number, e.g. "apple 1", "countertop 2"):
- go to <receptacle>
- open <receptacle> / close <receptacle>
- take <object> from <receptacle>
- put <object> in/on <receptacle>
- use <object>   (switch a lamp on or off)
- clean <object> with <receptacle>   (at a sinkbasin)
- heat <object> with <receptacle>   (at a microwave)
- cool <object> with <receptacle>   (at a fridge)
- examine <object or receptacle>
- inventory
- look

You can carry one object at a time. You only see what is in a closed receptacle after opening it. Every observation \
ends with the actions available right now (AVAILABLE ACTIONS); an action that is not possible does nothing and is \
reported.

Every turn, answer in this format and give exactly one action:
Thought:
<your reasoning>

Action:
<the action>"""

_PUT = re.compile(r"^(?:put|place|move|drop)\s+(.+?)\s+(?:in/on|in / on|into|onto|inside|in|on|to)\s+(?:the\s+)?(.+)$")
_TAKE = re.compile(r"^(?:take|pick up|pickup|get|grab)\s+(.+?)\s+(?:from|off|out of)\s+(?:the\s+)?(.+)$")
_TOOL = re.compile(r"^(clean|heat|cool|slice)\s+(.+?)\s+(?:with|using|in)\s+(?:the\s+)?(.+)$")
#: ALFWorld's two spellings of one command (``_resolve_as_agentgym``): exact words, no case folding
_AGENTGYM_PUT = re.compile(r"^put (.+) in/on (.+)$")
_AGENTGYM_MOVE = re.compile(r"^move (.+) to (.+)$")
_AGENTGYM_TOGGLE = re.compile(r"^toggle (.+)$")
_SINGLE = re.compile(r"^(go to|goto|open|close|use|toggle|turn on|turn off|switch on|switch off|examine|look at"
                     r"|inspect)\s+(?:the\s+)?(.+)$")


def find_game_files(game_dir: str | Path) -> list[Path]:
    """Every ALFWorld game file under ``game_dir``, sorted (``game.tw-pddl`` or ``*.tw-pddl``)."""
    root = Path(game_dir).expanduser()
    if not root.is_dir():
        raise FileNotFoundError(f"ALFWorld game directory {root} does not exist")
    return sorted(p for p in root.rglob("*.tw-pddl") if p.is_file())


def load_game_file(path: str | Path) -> dict[str, Any] | None:
    """A real ALFWorld game as a dict, its goal sentence filled in; ``None`` if marked unsolvable."""
    path = Path(path)
    data = json.loads(path.read_text())
    if data.get("solvable") is False:
        return None
    if "UNKNOWN GOAL" in data["grammar"]:
        traj = path.with_name("traj_data.json")
        if traj.exists():
            params = json.loads(traj.read_text())
            task_type = params.get("task_type", "")
            pddl = params.get("pddl_params", {})
            template = generator.GOAL_TEMPLATES.get(task_type, ("{obj}",))[0]
            goal = template.format(obj=pddl.get("object_target", "").lower(),
                                   recep=pddl.get("parent_target", "").lower(),
                                   toggle=pddl.get("toggle_target", "").lower())
            data["grammar"] = data["grammar"].replace("UNKNOWN GOAL", goal)
    return data


class ALFWorldEnv(TextEnv):
    """An ALFWorld household task on ALFWorld's PDDL domain and grammar through TextWorld.

    Actions:
        ALFWorld's commands (``go to X``, ``take X from Y``, ``put X in/on Y``, ``open X``, ``close X``, ``use X``,
        ``clean/heat/cool X with Y``, ``examine X``, ``inventory``, ``look``), run only as admissible commands
        are spelled; the admissible ones are in ``info["available_actions"]``. Anything else, an empty
        action included, gets TextWorld's "Nothing happens." (``extra_feedback=True``: an explanation).

    Rewards:
        1 when the task's goal holds (the episode ends), else 0.
    """

    family = "alfworld"

    def __init__(self, task_id: str, render_mode: str | None = None, game_dir: str | None = None,
                 game_split: str = "test", extra_feedback: bool = False):
        """By default the env answers as AgentGym's ALFWorld server: TextWorld's own feedback (the
        available actions only in the first observation), exact admissible commands. With
        ``extra_feedback=True`` the available actions end every observation, other spellings of a
        command are accepted and a refused command is explained."""
        super().__init__(task_id, render_mode=render_mode)
        self.extra_feedback = extra_feedback
        for module in self.task.requires:  # fail at make() with the pip hint, not at the first reset
            if importlib.util.find_spec(module) is None:
                require(module, extra=self.task.extra)
        self.engine = AlfredEngine(cache_dir=generator.cache_dir())
        self.game: dict[str, Any] = {}
        self.goal: Goal | None = None
        self._moves = 0
        self._plan: list[str] = []
        self._plan_basis = -1
        self.game_files: list[Path] = []
        if game_dir is not None:
            self._use_game_dir(game_dir, game_split)

    # ---- real ALFWorld games ------------------------------------------------------------------
    def _use_game_dir(self, game_dir: str, game_split: str) -> None:
        if game_split not in self._splits:
            raise ValueError(f"game_split must be one of {sorted(self._splits)}, got {game_split!r}")
        self._game_root = Path(game_dir).expanduser()
        files = find_game_files(game_dir)
        self.game_files = [p for p in files if json.loads(p.read_text()).get("solvable", True) is not False]
        if not self.game_files:
            raise FileNotFoundError(f"no solvable *.tw-pddl game files under {game_dir}")
        items = list(range(len(self.game_files)))
        self._splits = {name: (items if name == game_split else []) for name in self._splits}
        self._split_of = {item: game_split for item in items}
        self._subtask_of = {item: _task_type_of_path(p) for item, p in enumerate(self.game_files)}
        self.default_split = game_split

    # ---- episode ------------------------------------------------------------------------------
    def _start(self, item_id: int, rng: np.random.Generator) -> Start:
        if self.game_files:
            path = self.game_files[item_id]
            game = load_game_file(path)
            assert game is not None
            name = str(path.relative_to(self._game_root))
        else:
            game = generator.load_game(item_id)
            name = str(generator.game_file(item_id).relative_to(generator.cache_dir()))
        self.game = game
        self.engine.load(game)
        intro = self.engine.reset()
        self.goal = parse_goal(game["pddl_problem"])
        self._moves = 0
        self._plan, self._plan_basis = [], -1
        meta = game.get("agentgym", {})
        info = {
            "task_type": meta.get("task_type", self._subtask_of.get(item_id)),
            "goal": self.engine.goal,
            "game_file": name,  # relative, not absolute: replays are byte-identical on any machine
        }
        if self.extra_feedback:
            return Start(DETAILED_INSTRUCTION, self._with_actions(intro), info)
        # AgentGym joins the intro's paragraphs with one newline and lists the actions with commas
        intro = "\n".join(part for part in intro.split("\n\n"))
        return Start(INSTRUCTION, f"{intro}\nAVAILABLE ACTIONS: {','.join(self.engine.admissible_commands)}", info)

    def _parse(self, response: str) -> ParsedAction:
        """As AgentGym's client; ours with ``extra_feedback=True`` (``parse_agentgym_react``)."""
        return parse_agentgym_react(response, self.extra_feedback)

    def _act(self, action: str) -> Outcome:
        if not self.extra_feedback:
            return self._act_as_agentgym(action)
        command = self._resolve(normalize_command(action))
        feedback = self.engine.step(command) if command is not None else None
        if feedback is None:
            reason = self._explain(normalize_command(action))
            return Outcome(self._with_actions(f"Nothing happens: {reason}"), valid=False)
        self._moves += 1
        if self._plan and self._plan_basis == self._moves - 1 and self._plan[0] == command:
            self._plan, self._plan_basis = self._plan[1:], self._moves
        won = self.engine.won
        if won:
            feedback += "\nYou have completed the task."
        return Outcome(self._with_actions(feedback) if not won else feedback,
                       progress=float(won), score=float(won), done=won, success=won)

    def _act_as_agentgym(self, action: str) -> Outcome:
        """TextWorld's answer, as AgentGym's server passes it on: "Nothing happens." for a command
        that is not admissible (spelled exactly, see ``_resolve_as_agentgym``), the feedback alone
        otherwise, reward 1 and done once won."""
        command = self._resolve_as_agentgym(action)
        feedback = self.engine.step(command) if command is not None else None
        if feedback is None:
            return Outcome("Nothing happens.", valid=False)
        self._moves += 1
        won = self.engine.won
        return Outcome(feedback, progress=float(won), score=float(won), done=won, success=won)

    def _with_actions(self, text: str) -> str:
        return f"{text}\nAVAILABLE ACTIONS: {', '.join(self.engine.admissible_commands)}"

    # ---- commands: aliases and explanations ---------------------------------------------------
    @property
    def _put_template(self) -> str:
        for command in self.engine.admissible_commands:
            if command.startswith("move ") and " to " in command:
                return "move {o} to {r}"
        return "put {o} in/on {r}"

    def _resolve_as_agentgym(self, action: str) -> str | None:
        """The admissible command TextWorld runs for ``action`` on AgentGym's server: the text itself after
        ``strip()``, with no case folding, punctuation or other wording forgiven (TextWorld's PDDL env looks
        the command up exactly). The one adaptation: a command in ALFWorld's other spelling names the same
        command ("put X in/on Y" and "move X to Y", "toggle X" for "use X"), since AgentGym's data uses
        the older spelling and our generated games the newer one."""
        command = action.strip()
        admissible = self.engine.admissible_commands
        if command in admissible:
            return command
        candidates = []
        if match := _AGENTGYM_PUT.match(command):
            candidates.append("move {} to {}".format(*match.groups()))
        elif match := _AGENTGYM_MOVE.match(command):
            candidates.append("put {} in/on {}".format(*match.groups()))
        elif match := _AGENTGYM_TOGGLE.match(command):  # "toggle desklamp 1" or "toggle desklamp 1 desk 1"
            words = match.group(1).split(" ")
            candidates += [f"use {' '.join(words[:k])}" for k in range(len(words), 0, -1)]
        return next((c for c in candidates if c in admissible), None)

    def _resolve(self, command: str) -> str | None:
        """The admissible command the agent means, accepting ALFWorld's older and newer spellings."""
        admissible = self.engine.admissible_commands
        if command in admissible:
            return command
        candidates = []
        if match := _PUT.match(command):
            obj, recep = match.groups()
            candidates += [f"put {obj} in/on {recep}", f"move {obj} to {recep}"]
        elif match := _TAKE.match(command):
            candidates.append(f"take {match.group(1)} from {match.group(2)}")
        elif match := _TOOL.match(command):
            candidates.append(f"{match.group(1)} {match.group(2)} with {match.group(3)}")
        elif match := _SINGLE.match(command):
            verb, target = match.groups()
            verb = {"goto": "go to", "toggle": "use", "turn on": "use", "turn off": "use", "switch on": "use",
                    "switch off": "use", "look at": "examine", "inspect": "examine"}.get(verb, verb)
            candidates.append(f"{verb} {target}")
            if verb == "use":  # AgentGym's "toggle <object> <receptacle>"
                candidates += [f"use {' '.join(target.split()[:k])}" for k in range(len(target.split()) - 1, 0, -1)]
        elif command in ("look around", "l"):
            candidates.append("look")
        elif command in ("i", "inv", "check inventory"):
            candidates.append("inventory")
        return next((c for c in candidates if c in admissible), None)

    def _explain(self, command: str) -> str:
        """Why a command did nothing, in terms the agent can act on."""
        if not command:
            return "the action is empty."
        world = World(self.engine.facts())
        known = self.engine.entity_names()
        if match := _PUT.match(command):
            reason = _why_not_put(world, known, *match.groups())
        elif match := _TAKE.match(command):
            reason = _why_not_take(world, known, *match.groups())
        elif match := _TOOL.match(command):
            reason = _why_not_use_tool(world, known, *match.groups())
        elif match := _SINGLE.match(command):
            reason = _why_not_single(world, known, *match.groups())
        else:
            reason = _unknown_verb(command)
        return reason or f"'{command[:80]}' is not possible right now."

    # ---- helpers for agents -------------------------------------------------------------------
    def available_actions(self) -> list[str] | None:
        """The game's admissible commands now (None outside an episode)."""
        if self.item_id is None or not self.game:
            return None
        return list(self.engine.admissible_commands)

    def oracle_action(self) -> str:
        """The expert's next command: the hand-written expert's for the goal, else Fast Downward's plan."""
        assert self.game, "call reset() first"
        command = None
        if self.goal is not None:
            command = next_command(self.goal, World(self.engine.facts()), self._put_template)
        if command is None or command not in self.engine.admissible_commands:
            command = self._planned_command()
        return f"Thought:\nThis is the next step towards the task.\n\nAction:\n{command}"

    def _planned_command(self) -> str:
        """Fast Downward's next step (the fallback for goals the expert does not know)."""
        if self._plan_basis != self._moves or not self._plan or self._plan[0] not in self.engine.admissible_commands:
            self._plan, self._plan_basis = self.engine.plan(), self._moves
        return self._plan[0] if self._plan else "look"

    def random_action(self, rng: np.random.Generator) -> str:
        """One of the admissible commands other than ``help``, at random (``look`` when there is none)."""
        actions = [a for a in self.engine.admissible_commands if a != "help"] if self.game else []
        return react_response(actions[int(rng.integers(len(actions)))] if actions else "look")

    def accepts_item(self, item_id: int) -> bool:
        """Whether ``item_id`` is an item: an index of the given game files, else one of the split items."""
        if self.game_files:
            return 0 <= item_id < len(self.game_files)
        return super().accepts_item(item_id)  # the split items only: each id writes a game file to the cache

    def _release(self) -> None:
        self.engine.close()
        self.game = {}


def _task_type_of_path(path: Path) -> str | None:
    """ALFWorld keeps each game in a folder named ``<task_type>-<object>-...``."""
    for part in reversed(path.parts):
        for task_type, name in generator.SUBTASK_OF_TYPE.items():
            if part.startswith(task_type):
                return name
    return None


# ---- why a command did nothing (TextEnv feedback for ALFWorld's silent "Nothing happens.") ----------


def _unknown(name: str, known: Collection[str]) -> str | None:
    """The problem with an object name, or ``None`` when it names something here."""
    if name in known:
        return None
    numbered = sorted(n for n in known if n.rsplit(" ", 1)[0] == name)
    if numbered:
        return f"name the {name} with its number, e.g. '{numbered[0]}'."
    return f"there is no '{name}' here."


def _why_not_put(world: World, known: Collection[str], obj: str, recep: str) -> str | None:
    problem = _unknown(obj, known) or _unknown(recep, known)
    if problem:
        return problem
    held = world.held
    if held != obj:
        return f"you are not carrying the {obj}." + (f" You are carrying the {held}." if held else "")
    if not world.at(recep):
        return f"you are not at the {recep}; go to it first."
    if world.closed(recep):
        return f"the {recep} is closed; open it first."
    if not world.fits(obj, recep):
        return f"the {obj} does not go in/on the {recep}."
    return None


def _why_not_take(world: World, known: Collection[str], obj: str, recep: str) -> str | None:
    problem = _unknown(obj, known) or _unknown(recep, known)
    if problem:
        return problem
    if world.held:
        return f"you are already carrying the {world.held}; you can carry only one object, so put it somewhere first."
    if not world.at(recep):
        return f"you are not at the {recep}; go to it first."
    if world.closed(recep):
        return f"the {recep} is closed; open it first."
    if world.inside.get(obj) != recep:
        return f"there is no {obj} in/on the {recep}."
    if not world.has(obj, "pickupable"):
        return f"the {obj} cannot be picked up."
    return None


def _why_not_use_tool(world: World, known: Collection[str], verb: str, obj: str, recep: str) -> str:
    problem = _unknown(obj, known) or _unknown(recep, known)
    if problem:
        return problem
    if verb == "slice":
        return "slicing is not part of these tasks."
    appliance = TOOLS[verb][0]
    if world.type_of.get(recep) != appliance:
        return f"you can only {verb} things with a {appliance}."
    if world.held != obj:
        return f"you must be carrying the {obj} to {verb} it."
    if not world.at(recep):
        return f"you are not at the {recep}; go to it first."
    return f"the {obj} cannot be {verb}ed." if verb != "heat" else f"the {obj} cannot be heated."


def _why_not_single(world: World, known: Collection[str], verb: str, target: str) -> str:
    if verb == "toggle" and target not in known:
        target = next((" ".join(target.split()[:k]) for k in range(len(target.split()), 0, -1)
                       if " ".join(target.split()[:k]) in known), target)
    problem = _unknown(target, known)
    if problem:
        return problem
    if verb in ("go to", "goto"):
        if target not in world.location_of:
            return f"the {target} is not a place to go to; go to a receptacle (see AVAILABLE ACTIONS)."
        return f"you are already at the {target}."
    if verb in ("open", "close"):
        if target not in world.location_of or not world.has(target, "openable"):
            return f"the {target} cannot be opened or closed."
        if not world.at(target):
            return f"you are not at the {target}; go to it first."
        return f"the {target} is already {'open' if verb == 'open' else 'closed'}."
    if verb in ("use", "toggle", "turn on", "turn off", "switch on", "switch off"):
        if not world.has(target, "toggleable"):
            return f"the {target} cannot be switched on or off."
        return f"you are not next to the {target}; go to the {world.inside.get(target, 'place where it is')} first."
    return f"you cannot see the {target} from here."


def _unknown_verb(command: str) -> str | None:
    verb = command.split()[0]
    known_verbs = ("go", "take", "put", "move", "open", "close", "use", "clean", "heat", "cool", "examine",
                   "inventory", "look", "help")
    if verb not in known_verbs:
        return (f"'{command[:80]}' is not a command of this game. Commands: go to, open, close, take ... from, "
                "put ... in/on, use, clean/heat/cool ... with, examine, inventory, look.")
    return None
