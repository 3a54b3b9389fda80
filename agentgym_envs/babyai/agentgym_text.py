"""AgentGym's BabyAI text layer, rebuilt: what its env server shows and how it runs each text action.

AgentGym's server (``agentenv-babyai``) describes one MiniGrid level through the agent's 7x7 view
and rebuilds its action table after every step. This module follows its rules, so an id steps and
scores as that server does (``text_layer="agentgym"``, the default; ``world.py`` is our own layer):

* **What is seen**: every cell of MiniGrid's egocentric view (occlusion applied, the agent's own
  cell skipped, cells with a negative grid coordinate skipped) that holds a door, key, ball, box,
  goal, lava or wall. Doors are named with their state ("grey locked door"). The list is sorted by
  Manhattan distance (stable: farthest view row first, left to right, among equals), and objects of
  one name are numbered 1, 2, ... in that order, anew at every step. Nothing is remembered.
* **The text**: "In front of you in this room, you can see several objects: " and one
  "There is a <name> <k> <where>.  " per non-wall object, or "You cannot see any objects within
  sight." when the view holds nothing; then "The room has walls around you. ", the nearest wall or
  box straight ahead ("You are facing a wall 3 steps away. "), and what is carried.
* **Paths** are found by a breadth-first search over (cell, heading) inside the view's bounding
  box, with forward, left, right in that order; walls, boxes, balls, keys (and lava) block, doors do
  not. The search marks a pose as visited when it is taken from the queue, so a pose can be queued
  (and its parent overwritten) several times; the path read back follows the last parent written.
* **Actions** (rebuilt every step, each a list of primitives): turn left/right; move forward unless
  a wall or box is right ahead; "pickup <obj> <k>" (path to face it + pickup) when the hands are
  empty; "drop" when carrying and the cell ahead holds no wall/box/ball/key; "go through <open
  door> <k>" (path onto the door cell); "toggle and go through <closed or locked door> <k>" (path
  to face it + toggle + forward: it stops on the door cell), a locked door only with a key of its
  colour; "toggle" when already facing such a door; "go to goal"; "go to <obj> <k>" for every
  non-wall object; "check available actions". Actions without a path get an error message.
* **Running an action**: its primitives are stepped one by one, stopping after the first one that
  leaves the egocentric image unchanged (a blocked move). The reward and end flag are those of the
  last primitive stepped. An action with no primitives ("go to" an object already faced) takes no
  step: "No change in state.". An action outside the table gets its error message, or "The action
  is not recognized. Please check valid actions."; an empty one "No change in state.".
* **Reward and end**: the reward is MiniGrid's reward of the last primitive (an invalid action
  keeps the previous one); the episode ends only when MiniGrid ends it with a reward above 0.5
  ("The task is completed." is added to the text whenever MiniGrid ends it). MiniGrid's own step
  limit is not enforced.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from typing import Any

import numpy as np

# MiniGrid's encodings (minigrid.core.constants), by index
_TYPES = ("unseen", "empty", "wall", "floor", "door", "key", "ball", "box", "goal", "lava", "agent")
_COLORS = ("red", "green", "blue", "purple", "yellow", "grey")
_DOOR_STATES = ("open", "closed", "locked")
_HEADINGS = ((1, 0), (0, 1), (-1, 0), (0, -1))
_SEEN_TYPES = frozenset({"door", "key", "ball", "box", "goal", "lava", "wall"})
_BLOCKING = ("wall", "box", "lava", "ball", "key")
LEFT, RIGHT, FORWARD, PICKUP, DROP, TOGGLE = range(6)

NOT_RECOGNIZED = "The action is not recognized. Please check valid actions."
NO_CHANGE = "No change in state."
COMPLETED = "\n The task is completed."


def agentgym_goal(mission: str) -> str:
    """The goal line AgentGym shows: MiniGrid's mission with every "then" and "after you" made "and"."""
    if "then" in mission:
        mission = mission.replace("then", "and")
    if "after you" in mission:
        mission = mission.replace("after you", "and")
    return mission


def client_action(action: str) -> str:
    """An action as AgentGym's client sends it and its server reads it: only letters, digits, commas and
    spaces kept, runs of whitespace made one space, lower case."""
    kept = "".join(ch for ch in action if (ch.isascii() and ch.isalnum()) or ch in ", ")
    return " ".join(kept.split()).lower()


def _blocks(name: str) -> bool:
    return any(kind in name for kind in _BLOCKING)


class AgentGymBabyAI:
    """One MiniGrid BabyAI level, shown and played as AgentGym's BabyAI server does (module docstring)."""

    def __init__(self, level_env: Any, on_primitive: Callable[[], None] | None = None):
        self.env = level_env
        self.on_primitive = on_primitive  # told after every primitive stepped (the oracle's memory listens)
        self.goal = ""
        self.reward = 0.0
        self.done = False
        self.steps = 0
        self.state = ""
        self.actions: dict[str, list[int]] = {}
        self.errors: dict[str, str] = {}
        self.targets: dict[str, tuple[int, int]] = {}  # the cell each object action aims at
        self._image: np.ndarray | None = None

    # ---- episode -------------------------------------------------------------------------------
    def reset(self, seed: int) -> str:
        """Start the level's episode for ``seed``; the first observation as the server's reset shows it."""
        with contextlib.redirect_stdout(io.StringIO()):  # some levels print while sampling
            obs, _ = self.env.reset(seed=seed)
        self.goal = agentgym_goal(self.env.mission)
        self.state = self._read(obs)
        self._image = obs["image"]
        self.reward, self.done, self.steps = 0.0, False, 0
        return f"Your goal: {self.goal}\n{self.state}{self.action_list()}"

    def action_list(self) -> str:
        """The server's suffix: the action table's keys as a JSON-like list."""
        names = ", ".join(f'"{name}"' for name in self.actions)
        return f"\nAvailable actions: [{names}]" if names else "\nAvailable actions: ["

    def step(self, action: str) -> tuple[str, bool]:
        """Run one (already cleaned) action; (observation, whether the server took it as valid)."""
        action = action.lower().strip()
        valid = True
        if "check" in action:
            self.state = "You can take the following actions: " + ", ".join(self.actions)
        elif action == "" or action not in self.actions:
            self.state = NO_CHANGE if action == "" else self.errors.get(action, NOT_RECOGNIZED)
            valid = False
        elif not self.actions[action]:
            self.state = NO_CHANGE
        else:
            self._run(self.actions[action])
        self.steps += 1
        return self.state + self.action_list(), valid

    def _run(self, primitives: list[int]) -> None:
        for primitive in primitives:
            obs, reward, terminated, _, _ = self.env.step(primitive)
            if self.on_primitive is not None:
                self.on_primitive()
            changed = bool((obs["image"] != self._image).any())
            if not changed:
                break
            self._image = obs["image"]
        text = self._read(obs)
        if terminated:
            text += COMPLETED
        self.reward = float(reward)
        self.done = bool(terminated) and self.reward > 0.5
        self.state = text

    # ---- the view --------------------------------------------------------------------------------
    def _read(self, obs: dict[str, Any]) -> str:
        """The description of ``obs`` (MiniGrid's egocentric observation); rebuilds the action table."""
        env = self.env
        size = env.agent_view_size
        pos = np.array(env.agent_pos)
        ahead, right = np.array(env.dir_vec), np.array(env.right_vec)
        heading = int(obs["direction"])
        corner = pos + ahead * (size - 1) - right * (size // 2)
        far = corner + size * (right - ahead)
        xs = range(far[0], corner[0] + 1) if far[0] < corner[0] else range(corner[0], far[0])
        ys = range(far[1], corner[1] + 1) if far[1] < corner[1] else range(corner[1], far[1])
        image = obs["image"]
        seen: list[dict[str, Any]] = []
        barriers: list[tuple[str, tuple[int, int], int]] = []
        face = _HEADINGS[heading]
        for row in range(size):
            for column in range(size):
                x, y = corner - ahead * row + right * column
                distance = abs(pos[0] - x) + abs(pos[1] - y)
                if x < 0 or y < 0 or distance == 0:
                    continue
                kind = _TYPES[image[column, row, 0]]
                if kind not in _SEEN_TYPES:
                    continue
                color = _COLORS[image[column, row, 1]]
                name = f"{color} {_DOOR_STATES[image[column, row, 2]]} door" if kind == "door" else f"{color} {kind}"
                cell = (x, y)
                seen.append({"name": name, "cell": cell, "distance": distance})
                if kind in ("box", "wall"):
                    dx, dy = x - pos[0], y - pos[1]
                    if face[0] * dy - face[1] * dx == 0:
                        barriers.append((kind, cell, face[0] * dx + face[1] * dy))
        seen.sort(key=lambda obj: obj["distance"])
        barriers.sort(key=lambda barrier: barrier[2])
        carrying = env.carrying
        text = self._objects_text(seen, pos, heading) + "The room has walls around you. "
        if barriers:
            text += f"You are facing a {barriers[0][0]} {barriers[0][2]} steps away. "
        if carrying is None:
            text += "You are not carrying anything."
        else:
            text += f"You are carrying a {carrying.color} {carrying.type}."
        self._build_actions(seen, barriers, pos, heading, xs, ys, carrying)
        return text

    @staticmethod
    def _objects_text(seen: list[dict[str, Any]], pos: np.ndarray, heading: int) -> str:
        if not seen:
            return "You cannot see any objects within sight."
        text = "In front of you in this room, you can see several objects: "
        counts: dict[str, int] = {}
        face, side = _HEADINGS[heading], _HEADINGS[(heading + 1) % 4]
        for obj in seen:
            if "wall" in obj["name"]:
                continue
            dx, dy = obj["cell"][0] - pos[0], obj["cell"][1] - pos[1]
            front = int(face[0] * dx + face[1] * dy)
            lateral = int(side[0] * dx + side[1] * dy)
            if lateral == 0:
                where = f"right in front of you {front} steps away. "
            elif lateral > 0:
                where = f"{front} steps in front of you and {lateral} steps to your right. "
            else:
                where = f"{front} steps in front of you and {-lateral} steps to your left. "
            counts[obj["name"]] = counts.get(obj["name"], 0) + 1
            text += f"There is a {obj['name']} {counts[obj['name']]} {where} "
        return text

    # ---- the action table ------------------------------------------------------------------------
    def _build_actions(
        self,
        seen: list[dict[str, Any]],
        barriers: list,
        pos: np.ndarray,
        heading: int,
        xs: range,
        ys: range,
        carrying: Any,
    ) -> None:
        actions: dict[str, list[int]] = {"turn left": [LEFT], "turn right": [RIGHT]}
        errors: dict[str, str] = {}
        targets: dict[str, tuple[int, int]] = {}
        start = (int(pos[0]), int(pos[1]))
        obstacles = {obj["cell"] for obj in seen if _blocks(obj["name"])}
        obstacles.update(cell for kind, cell, _ in barriers)
        any_things = bool(seen) or bool(barriers)

        def path(goal: tuple[int, int], onto: bool) -> list[int] | None:
            return _search(start, heading, goal, obstacles, any_things, xs, ys, onto)

        if not barriers or barriers[0][2] > 1:
            actions["move forward"] = [FORWARD]
        else:
            errors["move forward"] = "There is a barrier in front of you, you can't move forward."
        if carrying is None:
            counts: dict[str, int] = {}
            for obj in seen:
                name = obj["name"]
                if "wall" in name or "door" in name or "goal" in name:
                    continue
                route = path(obj["cell"], onto=False)
                k = counts.get(name, 0) + 1  # the number the next listed one would get
                if route is not None:
                    counts[name] = k
                    actions[f"pickup {name} {k}"] = route + [PICKUP]
                    targets[f"pickup {name} {k}"] = obj["cell"]
                else:
                    errors[f"pickup {name} {k}"] = f"You cannot pickup {name} {k}, as there is no path leading to it."
            errors["drop"] = "You cannot drop the object, as you are not carrying anything."
        else:
            front = (start[0] + _HEADINGS[heading][0], start[1] + _HEADINGS[heading][1])
            if any(obj["cell"] == front and _blocks(obj["name"]) for obj in seen):
                errors["drop"] = "You cannot drop the object, as there is already an object in front of you."
            else:
                actions["drop"] = [DROP]
        self._door_actions(seen, carrying, path, actions, errors, targets)
        for obj in seen:
            if "goal" in obj["name"]:
                route = path(obj["cell"], onto=True)
                if route is not None:
                    actions["go to goal"] = route
                else:
                    errors["go to goal"] = "You cannot go to the goal, as there is no path leading to it."
        counts = {}
        for obj in seen:
            name = obj["name"]
            if "wall" in name or "goal" in name:
                continue
            route = path(obj["cell"], onto=False)
            k = counts.get(name, 0) + 1
            if route is not None:
                counts[name] = k
                actions[f"go to {name} {k}"] = route
                targets[f"go to {name} {k}"] = obj["cell"]
            else:
                errors[f"go to {name} {k}"] = f"You cannot go to {name} {k}, as there is no path leading to it."
        actions["check available actions"] = []
        self.actions, self.errors, self.targets = actions, errors, targets

    @staticmethod
    def _door_actions(
        seen: list[dict[str, Any]],
        carrying: Any,
        path: Callable,
        actions: dict[str, list[int]],
        errors: dict[str, str],
        targets: dict[str, tuple[int, int]],
    ) -> None:
        counts: dict[str, int] = {}
        for obj in seen:
            name = obj["name"]
            if "door" not in name:
                continue
            counts[name] = counts.get(name, 0) + 1
            label = f"{name} {counts[name]}"
            if "open door" in name:
                route = path(obj["cell"], onto=True)
                if route is not None:
                    actions[f"go through {label}"] = route
                    targets[f"go through {label}"] = obj["cell"]
                else:
                    errors[f"go through {label}"] = f"You cannot go through {label}, as there is no path leading to it."
                continue
            if "locked door" in name:
                if carrying is None or carrying.type != "key":
                    errors[f"toggle and go through {label}"] = (
                        f"You cannot toggle and go through {label}, as you are not carrying a key."
                    )
                    continue
                if carrying.color != name.split(" ")[0]:
                    errors[f"toggle and go through {label}"] = (
                        f"You cannot toggle and go through {label}, as the color of the key you are carrying does not "
                        "match the color of door."
                    )
                    continue
            route = path(obj["cell"], onto=False)
            if route is not None:
                actions[f"toggle and go through {label}"] = route + [TOGGLE, FORWARD]
                targets[f"toggle and go through {label}"] = obj["cell"]
            else:
                # AgentGym prints its whole per-name door count here, a dict, where the number belongs
                errors[f"toggle and go through {label}"] = (
                    f"You cannot toggle and go through {name} {counts}, as there is no path leading to it."
                )
            if route == []:
                actions["toggle"] = [TOGGLE]
            if "closed door" in name:
                errors[f"go through {label}"] = (
                    f"You cannot go through {label}, as it is closed. You should toggle it first."
                )


def _search(
    start: tuple[int, int],
    heading: int,
    goal: tuple[int, int],
    obstacles: set[tuple[int, int]],
    any_things: bool,
    xs: range,
    ys: range,
    onto: bool,
) -> list[int] | None:
    """AgentGym's path search (see the module docstring): the primitives from (start, heading) to stand on
    ``goal`` (``onto``) or to face it, or None. Poses are marked visited when dequeued; a parent is the last
    one written."""
    parent: dict[tuple[tuple[int, int], int], tuple[tuple[tuple[int, int], int], int]] = {}
    visited: set[tuple[tuple[int, int], int]] = set()
    queue = [(start, heading)]
    head = 0
    while head < len(queue):
        pose = queue[head]
        head += 1
        visited.add(pose)
        cell, facing = pose
        step = _HEADINGS[facing]
        if (cell == goal) if onto else (goal[0] - cell[0] == step[0] and goal[1] - cell[1] == step[1]):
            route = []
            while pose != (start, heading):
                pose, move = parent[pose]
                route.append(move)
            return route[::-1]
        for move in (FORWARD, LEFT, RIGHT):
            if move == FORWARD:
                nxt = ((cell[0] + step[0], cell[1] + step[1]), facing)
            else:
                nxt = (cell, (facing - 1) % 4 if move == LEFT else (facing + 1) % 4)
            if any_things and (nxt[0][0] not in xs or nxt[0][1] not in ys or nxt in visited or nxt[0] in obstacles):
                continue
            queue.append(nxt)
            parent[nxt] = (pose, move)
    return None
