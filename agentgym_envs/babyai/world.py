"""A BabyAI level seen and played through text.

``TextWorld`` wraps one MiniGrid ``RoomGridLevel`` and adds what a text agent needs:

* a memory of every cell the agent has seen (MiniGrid's own 7x7 egocentric view with occlusion);
* stable names for objects: ``<colour> <type> <k>``, numbered per colour and type in the order the
  agent first sees them, so "red ball 2" keeps meaning the same ball all episode;
* an egocentric description (visible objects with steps ahead / behind / left / right, objects
  seen earlier, the cell in front, the nearest walls, what is carried, the actions available now);
* high-level actions compiled into MiniGrid primitives by a shortest-path search over the poses
  the agent can reach through cells it has seen. An action that cannot be done is refused with an
  explanation and no primitive is executed.
"""

from __future__ import annotations

import contextlib
import io
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentgym_envs.babyai.planner import (
    DIRECTION_VECTORS,
    DONE,
    DROP,
    FORWARD,
    LEFT,
    PICKUP,
    RIGHT,
    TOGGLE,
    Pose,
    Routes,
)

OBJECT_TYPES = ("ball", "box", "key", "door")
_COLORS = "red|green|blue|purple|yellow|grey|gray"
_DOOR_IN_ACTION = re.compile(rf"\b(?:{_COLORS}) door \d+$")
_DOOR_STATE = re.compile(rf"\b({_COLORS}) (?:open|closed|locked) door\b")
_NAME = re.compile(r"^(?:(?:the|a|an) )?(?:(red|green|blue|purple|yellow|grey|gray) )?(ball|box|key|door)"
                   r"(?: ([0-9]{1,9}))?$")

PRIMITIVE_COMMANDS = {
    "turn left": LEFT,
    "left": LEFT,
    "turn right": RIGHT,
    "right": RIGHT,
    "move forward": FORWARD,
    "go forward": FORWARD,
    "forward": FORWARD,
}
CHECK_COMMANDS = ("check available actions", "check actions", "available actions")


@dataclass
class Result:
    """What one text action did: the feedback line, and whether the engine accepted it."""

    message: str
    valid: bool = True
    primitives: list[int] = field(default_factory=list)


def _refuse(message: str) -> Result:
    return Result(message, valid=False)


def steps(n: int) -> str:
    """``1 step`` or ``n steps``."""
    return f"{n} step" if n == 1 else f"{n} steps"


class TextWorld:
    """One MiniGrid BabyAI level played through text (see the module docstring)."""

    def __init__(self, level_env: Any, agentgym_names: bool = True):
        """``agentgym_names``: list actions as AgentGym's BabyAI server names them ("pickup red ball 1",
        "go through grey open door 1"); commands are accepted in either spelling."""
        self.env = level_env
        self.agentgym_names = agentgym_names
        self.mission = ""
        self.reward = 0.0
        self.success = False
        self.failed = False
        self.truncated = False
        self._version = 0
        self._routes_cache: tuple[int, Routes] | None = None
        self._actions_cache: tuple[int, list[str]] | None = None

    # ---- episode ------------------------------------------------------------------------------
    def reset(self, seed: int) -> None:
        # some levels print "Sampling rejected: ..." while generating; keep stdout clean
        """Start the level's episode for ``seed`` (its generator's chatter kept off stdout) and forget what was seen."""
        with contextlib.redirect_stdout(io.StringIO()):
            obs, _ = self.env.reset(seed=seed)
        self.mission = self.env.mission
        self._forget()
        self.reward = 0.0
        self.success = self.failed = self.truncated = False
        self._touch()
        self._observe(obs["image"])

    def _forget(self) -> None:
        self.width, self.height = self.env.grid.width, self.env.grid.height
        self.seen = bytearray(self.width * self.height)
        self._name_of: dict[int, str] = {}
        self._objects: dict[str, Any] = {}
        self._counts: dict[tuple[str, str], int] = {}
        self.visible: list[str] = []
        self.notes: dict[str, Any] = {}  # scratch space for an expert that plans over several turns (the oracle)

    @property
    def over(self) -> bool:
        """Whether the episode has ended: success, failure or the level's own step limit."""
        return self.success or self.failed or self.truncated

    @property
    def pose(self) -> Pose:
        """The agent's cell and facing direction."""
        x, y = self.env.agent_pos
        return Pose(int(x), int(y), int(self.env.agent_dir))

    @property
    def carrying(self) -> Any:
        """The object the agent carries, or None."""
        return self.env.carrying

    def refresh(self, forget: bool = False) -> None:
        """Re-read the agent's view after the grid was changed from outside (tests set up scenes this way).

        ``forget`` also drops what the agent had seen and the object names, as at the start of an episode.
        """
        if forget:
            self._forget()
        self._touch()
        self._observe(self.env.gen_obs()["image"])

    def _touch(self) -> None:
        self._version += 1

    # ---- copies (deepcopy, pickle) ----------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        """The state without what is keyed by ``id()`` (names are re-attached to the copied objects)."""
        state = self.__dict__.copy()
        state.pop("_name_of", None)
        state["_routes_cache"] = state["_actions_cache"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if "_objects" in state:
            self._name_of = {id(obj): name for name, obj in self._objects.items()}

    # ---- perception ---------------------------------------------------------------------------
    def _observe(self, image: np.ndarray) -> None:
        """Mark the visible cells as seen, name newly seen objects and list the visible ones.

        ``image`` is MiniGrid's egocentric encoding: view cell (i, j) lies ``size - 1 - j`` steps ahead
        and ``i - size // 2`` steps to the right of the agent; cells outside the view mask are 0.
        """
        size = self.env.agent_view_size
        pose = self.pose
        fx, fy = DIRECTION_VECTORS[pose.direction]
        cells, width, height = self.env.grid.grid, self.width, self.height
        fresh, visible = [], []
        columns, rows = np.nonzero(image[:, :, 0])
        for i, j in zip(columns.tolist(), rows.tolist()):
            ahead, right = size - 1 - j, i - size // 2
            x, y = pose.x + fx * ahead - fy * right, pose.y + fy * ahead + fx * right
            if not (0 <= x < width and 0 <= y < height):
                continue
            self.seen[y * width + x] = 1
            obj = cells[y * width + x]
            if obj is None or (ahead == 0 and right == 0) or obj.type not in OBJECT_TYPES:
                continue
            entry = (abs(ahead) + abs(right), ahead, right, obj)
            visible.append(entry)
            if id(obj) not in self._name_of:
                fresh.append(entry)
        for *_, obj in sorted(fresh, key=lambda e: e[:3]):
            self._name(obj)
        if self.carrying is not None and id(self.carrying) not in self._name_of:
            self._name(self.carrying)
        self.visible = [self._name_of[id(e[3])] for e in sorted(visible, key=lambda e: e[:3])]

    def _name(self, obj: Any) -> str:
        key = (obj.color, obj.type)
        self._counts[key] = self._counts.get(key, 0) + 1
        name = f"{obj.color} {obj.type} {self._counts[key]}"
        self._name_of[id(obj)] = name
        self._objects[name] = obj
        return name

    def name_of(self, obj: Any) -> str | None:
        """The name the observations give ``obj`` (``red ball 1``), or None when it has not been seen."""
        return self._name_of.get(id(obj))

    def object_named(self, name: str) -> Any:
        """The object the observations call ``name``, or None."""
        return self._objects.get(name)

    def position(self, obj: Any) -> tuple[int, int] | None:
        """Where ``obj`` lies on the grid now, or ``None`` if carried or gone (an opened box vanishes)."""
        if obj is self.carrying or obj.cur_pos is None:
            return None
        x, y = (int(v) for v in obj.cur_pos)
        if not (0 <= x < self.width and 0 <= y < self.height) or self.env.grid.get(x, y) is not obj:
            return None
        return x, y

    def known_objects(self) -> list[tuple[str, Any, tuple[int, int]]]:
        """(name, object, cell) of every named object lying on the grid, in naming order."""
        known = []
        for name, obj in self._objects.items():
            cell = self.position(obj)
            if cell is not None:
                known.append((name, obj, cell))
        return known

    def relative(self, x: int, y: int) -> tuple[int, int]:
        """(steps ahead, steps to the right) of cell (x, y) from the agent; negative = behind / left."""
        pose = self.pose
        fx, fy = DIRECTION_VECTORS[pose.direction]
        dx, dy = x - pose.x, y - pose.y
        return dx * fx + dy * fy, dx * -fy + dy * fx

    def where(self, x: int, y: int) -> str:
        """Where a cell is from the agent, in words: steps ahead or behind, to the left or right."""
        ahead, right = self.relative(x, y)
        parts = []
        if ahead > 0:
            parts.append(f"{steps(ahead)} ahead")
        elif ahead < 0:
            parts.append(f"{steps(-ahead)} behind you")
        if right > 0:
            parts.append(f"{steps(right)} to your right")
        elif right < 0:
            parts.append(f"{steps(-right)} to your left")
        return " and ".join(parts)

    def label(self, obj: Any) -> str:
        """An object's name with a door's state: 'grey door 1 (locked)'."""
        name = self.name_of(obj) or f"{obj.color} {obj.type}"
        if obj.type == "door":
            return f"{name} ({door_state(obj)})"
        return name

    # ---- description --------------------------------------------------------------------------
    def describe(self) -> str:
        """The observation text: goal, what is visible, what was seen before, walls, carried object, actions."""
        lines = [f"Goal: {self.mission}."]
        visible = set(self.visible)
        if self.visible:
            lines.append("You see:")
            for name in self.visible:
                obj = self._objects[name]
                lines.append(f"- {self.label(obj)}: {self.where(*self.position(obj))}")
        else:
            lines.append("You see no objects.")
        remembered = [(n, o, c) for n, o, c in self.known_objects() if n not in visible]
        if remembered:
            lines.append("Out of sight, you remember:")
            for name, obj, cell in sorted(remembered, key=lambda e: (sum(map(abs, self.relative(*e[2]))), e[0])):
                lines.append(f"- {self.label(obj)}: {self.where(*cell)}")
        lines.append(f"In front of you: {self.front_text()}.")
        walls = self.wall_distances()
        if walls:
            lines.append("Nearest walls: " + ", ".join(walls) + ".")
        carried = self.carrying
        lines.append("You are not carrying anything." if carried is None
                     else f"You are carrying the {self.label(carried)}.")
        lines.append("Available actions: " + (", ".join(self.shown_actions()) or "none, the episode is over") + ".")
        return "\n".join(lines)

    def front_text(self) -> str:
        """What is right in front of the agent, in words (a wall, empty floor, an object, a door and its state)."""
        fx, fy = self.pose.front
        if not (0 <= fx < self.width and 0 <= fy < self.height):
            return "a wall"
        obj = self.env.grid.get(fx, fy)
        if obj is None:
            return "empty floor"
        if obj.type == "wall":
            return "a wall"
        return f"the {self.label(obj)}"

    def wall_distances(self) -> list[str]:
        """Steps to the first wall straight ahead / left / right / behind, where the agent has seen that far."""
        pose = self.pose
        fx, fy = DIRECTION_VECTORS[pose.direction]
        rays = (("ahead", (fx, fy)), ("to your left", (fy, -fx)),
                ("to your right", (-fy, fx)), ("behind you", (-fx, -fy)))
        found = []
        for label, (dx, dy) in rays:
            x, y = pose.x, pose.y
            for distance in range(1, max(self.width, self.height)):
                x, y = x + dx, y + dy
                if not (0 <= x < self.width and 0 <= y < self.height) or not self.seen[y * self.width + x]:
                    break
                obj = self.env.grid.get(x, y)
                if obj is not None and obj.type == "door":
                    break  # the wall line has a door here: the door itself is listed with the objects
                if obj is not None and obj.type == "wall":
                    found.append(f"{steps(distance)} {label}")
                    break
        return found

    # ---- planning -----------------------------------------------------------------------------
    def known_costs(self) -> list[int]:
        """Entry cost of each cell for the agent's planner: only seen cells; objects and walls block."""
        carried = self.carrying
        costs = [0] * (self.width * self.height)
        for index, cell in enumerate(self.env.grid.grid):
            if not self.seen[index]:
                continue
            if cell is None:
                costs[index] = 1
            elif cell.type == "door":
                if cell.is_open:
                    costs[index] = 1
                elif not cell.is_locked:
                    costs[index] = 2
                elif carried is not None and carried.type == "key" and carried.color == cell.color:
                    costs[index] = 2
        pose = self.pose
        costs[pose.y * self.width + pose.x] = max(costs[pose.y * self.width + pose.x], 1)
        return costs

    def routes(self) -> Routes:
        """Shortest paths from the agent's pose over seen cells (cached until the state changes)."""
        if self._routes_cache is None or self._routes_cache[0] != self._version:
            self._routes_cache = (self._version, Routes(self.width, self.height, self.known_costs(), self.pose))
        return self._routes_cache[1]

    def _approach(self, cell: tuple[int, int]) -> list[int] | None:
        """Primitives that bring the agent next to ``cell``, facing it (``[]`` if it already does)."""
        routes = self.routes()
        target = routes.facing([cell])
        return None if target is None else routes.primitives_to(target)

    # ---- actions ------------------------------------------------------------------------------
    def spell(self, action: str) -> str:
        """An action as shown to the agent: with ``agentgym_names``, AgentGym's spelling ("pickup
        red ball 1", a door named with its state: "toggle and go through grey locked door 1")."""
        if not self.agentgym_names:
            return action
        if action.startswith("pick up "):
            action = "pickup " + action[len("pick up "):]
        match = _DOOR_IN_ACTION.search(action)
        door = self.object_named(match.group(0)) if match else None
        if door is not None and door.type == "door":
            color, _, index = match.group(0).split(" ")
            action = action[: match.start()] + f"{color} {door_state(door)} door {index}" + action[match.end():]
        return action

    def shown_actions(self) -> list[str]:
        """``available_actions`` in the spelling shown to the agent."""
        return [self.spell(action) for action in self.available_actions()]

    def available_actions(self) -> list[str]:
        """Every action that would be accepted now (object actions only for reachable known objects)."""
        if self._actions_cache is not None and self._actions_cache[0] == self._version:
            return list(self._actions_cache[1])
        actions: list[str] = []
        if not self.over:
            actions = ["turn left", "turn right"]
            front = self._front_object()
            if self._front_passable():
                actions.append("move forward")
            if self._toggle_problem(front) is None:
                actions.append("toggle")
            if self.carrying is not None and self._front_empty_floor():
                actions.append("drop")
            routes = self.routes()
            in_doorway = self._standing_in_doorway()
            for name, obj, cell in self.known_objects():
                target = routes.facing([cell])
                if target is None:
                    continue
                actions.append(f"go to {name}")
                if obj.type != "door":
                    if self.carrying is None:
                        actions.append(f"pick up {name}")
                elif obj is in_doorway:
                    if self._front_passable():
                        actions.append(f"go through {name}")
                elif obj.is_open:
                    if self._beyond_door(target, cell) is not False:
                        actions.append(f"go through {name}")
                elif not obj.is_locked or self._has_key_for(obj):
                    if self._beyond_door(target, cell) is not False:
                        actions.append(f"toggle and go through {name}")
            actions.append("check available actions")
        self._actions_cache = (self._version, actions)
        return list(actions)

    def execute(self, command: str) -> Result:
        """Run one normalised text command; never raises on bad input."""
        command = _DOOR_STATE.sub(r"\1 door", command)  # "grey locked door 1" (AgentGym) names "grey door 1"
        if self.over:
            return Result("The episode is over.", valid=False)
        if command in PRIMITIVE_COMMANDS:
            return self._primitive(PRIMITIVE_COMMANDS[command])
        if command in CHECK_COMMANDS:
            return Result("Available actions: " + ", ".join(self.shown_actions()) + ".")
        if command == "drop" or command.startswith("drop "):
            return self._drop(command[len("drop"):].strip())
        if command == "toggle" or (command.startswith("toggle ") and not command.startswith("toggle and go through")):
            return self._toggle(command[len("toggle"):].strip())
        for prefix, handler in (
            ("toggle and go through ", self._toggle_and_go_through),
            ("go through ", self._go_through),
            ("go to ", self._go_to),
            ("pick up ", self._pick_up),
            ("pickup ", self._pick_up),
        ):
            if command.startswith(prefix):
                return handler(command[len(prefix):].strip())
        if command in ("pick up", "pickup"):
            return self._pick_up("")
        return Result(
            f"Unknown action '{command}'. Actions have the forms: turn left, turn right, move forward, go to <object>, "
            "pick up <object>, drop, toggle, go through <door>, toggle and go through <door>, check available actions.",
            valid=False,
        )

    def resolve(self, text: str, doors: bool | None = None) -> tuple[Any, str | None]:
        """The known object a reference like 'red ball 2', 'the red ball' or 'grey door 1' names."""
        text = text.strip("<>[]'\"` ")
        match = _NAME.match(text)
        if match is None:
            return None, (f"'{text}' is not an object name. Name objects as shown in the observation, "
                          "e.g. 'red ball 1' or 'grey door 2'.")
        color, kind, index = match.groups()
        color = "grey" if color == "gray" else color
        if doors is True and kind != "door":
            return None, f"'{text}' is not a door."
        if doors is False and kind == "door":
            return None, f"'{text}' is a door; doors cannot be picked up."
        candidates = [
            (name, obj)
            for name, obj in self._objects.items()
            if obj.type == kind and color in (None,
                                              obj.color) and (self.position(obj) is not None or obj is self.carrying)
        ]
        if index is not None:
            candidates = [(name, obj) for name, obj in candidates if name.endswith(f" {int(index)}")]
        if len(candidates) == 1:
            return candidates[0][1], None
        known = ", ".join(name for name, _, _ in self.known_objects()) or "none yet"
        if not candidates:
            return None, f"You have not seen any '{text}'. Objects you know of: {known}."
        names = ", ".join(name for name, _ in candidates)
        return None, f"'{text}' could mean {names}; add the number to say which."

    # ---- single actions ------------------------------------------------------------------------
    def _front_object(self) -> Any:
        fx, fy = self.pose.front
        if not (0 <= fx < self.width and 0 <= fy < self.height):
            return None
        return self.env.grid.get(fx, fy)

    def _front_passable(self) -> bool:
        fx, fy = self.pose.front
        if not (0 <= fx < self.width and 0 <= fy < self.height):
            return False
        obj = self.env.grid.get(fx, fy)
        return obj is None or obj.can_overlap()

    def _front_empty_floor(self) -> bool:
        fx, fy = self.pose.front
        return 0 <= fx < self.width and 0 <= fy < self.height and self.env.grid.get(fx, fy) is None

    def _has_key_for(self, door: Any) -> bool:
        carried = self.carrying
        return carried is not None and carried.type == "key" and carried.color == door.color

    def _standing_in_doorway(self) -> Any:
        pose = self.pose
        obj = self.env.grid.get(pose.x, pose.y)
        return obj if obj is not None and obj.type == "door" else None

    def _toggle_problem(self, front: Any) -> str | None:
        """Why 'toggle' cannot be done now, or ``None`` if it can."""
        if front is None:
            return ("There is nothing in front of you to toggle "
                    "(toggle opens or closes the door or box right in front of you).")
        if front.type == "wall":
            return "You are facing a wall; toggle works on a door or box right in front of you."
        if front.type == "door":
            if front.is_locked and not self._has_key_for(front):
                return f"The {self.label(front)} is locked; you need to carry a {front.color} key to open it."
            return None
        if front.type == "box":
            return None
        return f"The {self.label(front)} cannot be toggled; only doors and boxes can."

    def _primitive(self, action: int) -> Result:
        if action == FORWARD and not self._front_passable():
            return Result(f"You cannot move forward: {self.front_text()} is in front of you.", valid=False)
        if action == LEFT:
            return self._run([action], "You turned left.")
        if action == RIGHT:
            return self._run([action], "You turned right.")
        return self._run([action], "You moved forward one step.")

    def _drop(self, reference: str) -> Result:
        carried = self.carrying
        if carried is None:
            return Result("You are not carrying anything to drop.", valid=False)
        if reference:
            obj, error = self.resolve(reference, doors=False)
            if error is not None or obj is not carried:
                return Result(f"You can only drop what you carry: the {self.label(carried)}.", valid=False)
        if not self._front_empty_floor():
            return _refuse(f"You cannot drop the {self.label(carried)} here: {self.front_text()} is in front of you. "
                           "Face an empty cell first.")
        return self._run([DROP], f"You dropped the {self.label(carried)} in front of you.")

    def _toggle(self, reference: str) -> Result:
        front = self._front_object()
        if reference:
            obj, error = self.resolve(reference)
            if error is not None:
                return Result(error, valid=False)
            if obj is not front:
                return _refuse(f"The {self.label(obj)} is not right in front of you; go to it first, then toggle.")
        problem = self._toggle_problem(front)
        if problem is not None:
            return Result(problem, valid=False)
        name = self.label(front)
        if front.type == "box":
            return self._run([TOGGLE], f"You opened the {name}; it was empty and is gone.")
        verb = "unlocked and opened" if front.is_locked else ("closed" if front.is_open else "opened")
        return self._run([TOGGLE], f"You {verb} the {self.name_of(front)}.")

    def _go_to(self, reference: str) -> Result:
        obj, error = self.resolve(reference)
        if error is not None:
            return Result(error, valid=False)
        cell = self.position(obj)
        if cell is None:
            return Result(f"You are carrying the {self.label(obj)}.", valid=False)
        moves = self._approach(cell)
        if moves is None:
            return self._no_path(obj)
        if not moves:
            # MiniGrid's no-op 'done' lets the level check 'go to' when the agent already faces the object
            return self._run([DONE], f"You are already facing the {self.label(obj)}.")
        return self._run(moves, f"You walked to the {self.label(obj)} and now face it.")

    def _pick_up(self, reference: str) -> Result:
        if reference:
            obj, error = self.resolve(reference, doors=False)
            if error is not None:
                return Result(error, valid=False)
        else:
            obj = self._front_object()
            if obj is None or not obj.can_pickup():
                return _refuse(f"There is nothing to pick up in front of you ({self.front_text()}). "
                               "Name an object: pick up <object>.")
        if obj is self.carrying:
            return Result(f"You are already carrying the {self.label(obj)}.", valid=False)
        if self.carrying is not None:
            return _refuse(f"Your hands are full: you carry the {self.label(self.carrying)}. Drop it first.")
        cell = self.position(obj)
        moves = self._approach(cell)
        if moves is None:
            return self._no_path(obj)
        return self._run(moves + [PICKUP], f"You picked up the {self.label(obj)}.")

    def _go_through(self, reference: str) -> Result:
        door, error = self.resolve(reference, doors=True)
        if error is not None:
            return Result(error, valid=False)
        if self._standing_in_doorway() is door:
            if not self._front_passable():
                return _refuse(f"You stand in the doorway of the {self.label(door)}, "
                               f"but {self.front_text()} blocks the way ahead.")
            return self._run([FORWARD], f"You stepped out of the doorway of the {self.label(door)}.")
        if not door.is_open:
            hint = "use 'toggle and go through' to open it first"
            if door.is_locked:
                hint = f"you need a {door.color} key, then use 'toggle and go through'"
            return Result(f"The {self.label(door)} is not open; {hint}.", valid=False)
        return self._through(door, [])

    def _toggle_and_go_through(self, reference: str) -> Result:
        door, error = self.resolve(reference, doors=True)
        if error is not None:
            return Result(error, valid=False)
        if door.is_open:
            return _refuse(f"The {self.label(door)} is already open; use 'go through {self.name_of(door)}'.")
        if door.is_locked and not self._has_key_for(door):
            return _refuse(f"The {self.label(door)} is locked; you need to carry a {door.color} key to open it.")
        return self._through(door, [TOGGLE])

    def _through(self, door: Any, opening: list[int]) -> Result:
        cell = self.position(door)
        routes = self.routes()
        target = routes.facing([cell])
        if target is None:
            return self._no_path(door)
        if self._beyond_door(target, cell) is False:
            bx, by = 2 * cell[0] - target.x, 2 * cell[1] - target.y
            inside = 0 <= bx < self.width and 0 <= by < self.height
            blocker = self.env.grid.get(bx, by) if inside else None
            other_side = "leads nowhere" if blocker is None else f"is blocked by the {self.label(blocker)}"
            return _refuse(f"You cannot pass the {self.label(door)}: its other side {other_side}.")
        moves = routes.primitives_to(target) + opening + [FORWARD, FORWARD]
        return self._run(moves, f"You went through the {self.name_of(door)}.")

    def _beyond_door(self, facing: Pose, cell: tuple[int, int]) -> bool | None:
        """Whether the cell past the door (seen from ``facing``) is free: True, False (blocked), None (unseen)."""
        bx, by = 2 * cell[0] - facing.x, 2 * cell[1] - facing.y
        if not (0 <= bx < self.width and 0 <= by < self.height):
            return False
        if not self.seen[by * self.width + bx]:
            return None
        obj = self.env.grid.get(bx, by)
        return obj is None or obj.can_overlap()

    def _no_path(self, obj: Any) -> Result:
        return Result(
            f"You know no way to the {self.label(obj)}: every route passes through places you have not seen yet, "
            "or is blocked by walls, objects or locked doors. Explore first (turn, move, go through doors).",
            valid=False,
        )

    # ---- engine --------------------------------------------------------------------------------
    def _run(self, primitives: list[int], message: str) -> Result:
        """Step MiniGrid through ``primitives``, stopping early when the level ends or a move is blocked."""
        executed: list[int] = []
        notes: list[str] = []
        for action in primitives:
            before = self.pose
            obs, reward, terminated, truncated, _ = self.env.step(action)
            executed.append(action)
            self._touch()
            self._observe(obs["image"])
            if terminated:
                if reward > 0:
                    self.success, self.reward = True, float(reward)
                else:
                    self.failed = True
                break
            if truncated:
                self.truncated = True
                break
            if action == FORWARD and self.pose == before:
                notes.append(f"You were stopped: {self.front_text()} blocks the way.")
                break
        if self.success:
            notes.append("You completed the task!")
        elif self.failed:
            notes.append("That broke the task's rules: the task has failed.")
        elif self.truncated:
            notes.append(f"The level's limit of {self.env.max_steps} moves is used up: the episode is over.")
        text = " ".join([message] + notes).strip()
        return Result(text, valid=True, primitives=executed)


def door_state(door: Any) -> str:
    """A door's state in words: open, closed or locked."""
    if door.is_open:
        return "open"
    return "locked" if door.is_locked else "closed"
