"""Seeded generator of ALFWorld-style household games (``.tw-pddl`` files for TextWorld's PDDL engine).

ALFWorld's own game files are built from ALFRED trajectories and cannot be downloaded here, so we
build games of the same kind from what the ``alfworld`` package ships: the ALFRED floor plans
(which receptacles and object types each of the 120 rooms holds), ALFRED's rules for which object
may go in which receptacle and which objects can be cleaned, heated, cooled or switched on, the
PDDL domain ``alfred.pddl`` and the text grammar ``alfred.twl2``. One game is a pure function of
its item id: the task type is ``TASK_TYPES[item_id % 6]`` and everything else (room, target
object, target receptacle, where every object lies, the agent's start) comes from a generator
seeded with the item id. The goal is a PDDL condition the engine checks after every action.

A game file is the same JSON format ALFWorld uses (``pddl_domain``, ``grammar``,
``pddl_problem``, ``solvable``) plus an ``agentgym`` block describing the task, so our games and
real ALFWorld games play through the same code.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from agentgym_envs.core.cache import cache_root

#: Bump when the generator's output changes, so cached games of an older version are not reused.
GENERATOR_VERSION = 1

#: ALFWorld's six task types, in ALFWorld's order (its ids 1-6).
TASK_TYPES: tuple[str, ...] = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)

#: Short sub-task names (the keys of ``splits.json``), one per task type.
SUBTASK_OF_TYPE: dict[str, str] = {
    "pick_and_place_simple": "Pick",
    "look_at_obj_in_light": "Look",
    "pick_clean_then_place_in_recep": "Clean",
    "pick_heat_then_place_in_recep": "Heat",
    "pick_cool_then_place_in_recep": "Cool",
    "pick_two_obj_and_place": "PickTwo",
}

#: Which room kinds each task type is set in (ALFRED's rule).
ROOMS_OF_TYPE: dict[str, tuple[str, ...]] = {
    "pick_and_place_simple": ("Kitchen", "LivingRoom", "Bedroom", "Bathroom"),
    "look_at_obj_in_light": ("LivingRoom", "Bedroom"),
    "pick_clean_then_place_in_recep": ("Kitchen", "Bathroom"),
    "pick_heat_then_place_in_recep": ("Kitchen",),
    "pick_cool_then_place_in_recep": ("Kitchen",),
    "pick_two_obj_and_place": ("Kitchen", "LivingRoom", "Bedroom", "Bathroom"),
}

#: The appliance each state-changing task needs, and the PDDL property its object must have.
TOOL_OF_TYPE: dict[str, tuple[str, str]] = {
    "pick_clean_then_place_in_recep": ("SinkBasin", "cleanable"),
    "pick_heat_then_place_in_recep": ("Microwave", "heatable"),
    "pick_cool_then_place_in_recep": ("Fridge", "coolable"),
}

#: Goal sentences in ALFWorld's style (the engine only checks the PDDL goal, never this text).
GOAL_TEMPLATES: dict[str, tuple[str, ...]] = {
    "pick_and_place_simple": ("put a {obj} in {recep}", "put some {obj} on {recep}"),
    "look_at_obj_in_light": ("look at {obj} under the {toggle}", "examine the {obj} with the {toggle}"),
    "pick_clean_then_place_in_recep": ("put a clean {obj} in {recep}", "clean some {obj} and put it in {recep}"),
    "pick_heat_then_place_in_recep": ("put a hot {obj} in {recep}", "heat some {obj} and put it in {recep}"),
    "pick_cool_then_place_in_recep": ("put a cool {obj} in {recep}", "cool some {obj} and put it in {recep}"),
    "pick_two_obj_and_place": ("put two {obj} in {recep}", "find two {obj} and put them in {recep}"),
}

ROOM_OF_HUNDREDS = {0: "Kitchen", 2: "LivingRoom", 3: "Bedroom", 4: "Bathroom"}
LAMPS = ("DeskLamp", "FloorLamp")
#: Where a lamp stands (ALFRED's placement tables have no entry for lamps, which are not movable).
LAMP_HOSTS = ("Desk", "SideTable", "Dresser", "Shelf", "CoffeeTable", "TVStand", "ArmChair", "Sofa", "Bed", "Cabinet")
#: Receptacles that some rooms lack in the layout files but have in the room's object list.
EXTRA_RECEPTACLE_COUNTS = {"StoveBurner": 4}
#: Odds of 1, 2 or 3 instances of an object type (ALFRED places up to 3; most rooms hold one of a kind).
EXTRA_INSTANCE_ODDS = (0.6, 0.3, 0.1)


@dataclass(frozen=True)
class TaskInfo:
    """What a generated game asks for; stored in the game file's ``agentgym`` block."""

    item_id: int
    task_type: str
    floor_plan: int
    room: str
    object_type: str
    receptacle_type: str
    toggle_type: str
    goal: str
    generator_version: int = GENERATOR_VERSION


# ---- ALFRED data from the alfworld package ------------------------------------------------------
@lru_cache(maxsize=1)
def alfworld_paths() -> tuple[Path, Path, Path]:
    """(PDDL domain, grammar, layouts folder) shipped inside the ``alfworld`` package."""
    import importlib.util

    spec = importlib.util.find_spec("alfworld")
    if spec is None or not spec.submodule_search_locations:
        from agentgym_envs.core import require

        require("alfworld", extra="alfworld")
        raise ImportError("alfworld is not importable")
    root = Path(list(spec.submodule_search_locations)[0])
    return root / "data" / "alfred.pddl", root / "data" / "alfred.twl2", root / "gen" / "layouts"


@lru_cache(maxsize=1)
def alfred_rules() -> dict[str, Any]:
    """ALFRED's placement and affordance tables (from ``alfworld.gen.constants``)."""
    from agentgym_envs.core import require

    constants = require("alfworld.gen.constants", extra="alfworld")
    sliced = {name for name in constants.OBJECTS if name.endswith("Sliced")}
    containers = {recep: set(objs) - sliced for recep, objs in constants.VAL_RECEPTACLE_OBJECTS.items()}
    movable = set(constants.MOVABLE_RECEPTACLES)
    static_receptacles = set(containers) - movable
    pickupable = set().union(*containers.values())
    actions = {key: set(value) - sliced for key, value in constants.VAL_ACTION_OBJECTS.items()}
    return {
        "containers": containers,
        "static_receptacles": static_receptacles,
        "movable_receptacles": movable,
        "pickupable": pickupable,
        "cleanable": actions["Cleanable"],
        "heatable": actions["Heatable"],
        "coolable": actions["Coolable"],
        "toggleable": actions["Toggleable"],
        "openable": set(constants.OPENABLE_CLASS_LIST),
    }


@dataclass(frozen=True)
class Receptacle:
    key: str  # ALFRED id, e.g. "Cabinet|+00.68|+00.50|-02.20"
    rtype: str
    location: str


@lru_cache(maxsize=None)
def floor_plan(number: int) -> tuple[tuple[Receptacle, ...], tuple[str, ...]]:
    """The receptacles (with their interaction spots) and the pickable object types of one ALFRED room."""
    rules = alfred_rules()
    layouts = alfworld_paths()[2]
    spots = json.loads((layouts / f"FloorPlan{number}-openable.json").read_text())
    names = json.loads((layouts / f"FloorPlan{number}-objects.json").read_text())
    receptacles = []
    for key, (x, z, rotation, horizon) in sorted(spots.items()):
        parts = key.split("|")
        rtype = parts[-1] if len(parts) > 4 else parts[0]
        if rtype not in rules["static_receptacles"]:
            continue
        receptacles.append(Receptacle(key, rtype, _location_name(x, z, rotation, horizon)))
    present = {r.rtype for r in receptacles}
    # receptacle types the room contains but the layout file gives no spot for: place them on a grid
    extra_rng = np.random.default_rng(number)
    for rtype in sorted(set(names) & rules["static_receptacles"] - present):
        count = EXTRA_RECEPTACLE_COUNTS.get(rtype, 1)
        location = _location_name(*extra_rng.uniform(-3, 3, size=2).round(2), int(extra_rng.integers(4)) * 90, 30)
        for index in range(count):
            if index == count // 2 and count > 1:  # burners come in two pairs, each pair at one spot
                location = _location_name(*extra_rng.uniform(-3, 3, size=2).round(2),
                                          int(extra_rng.integers(4)) * 90, 30)
            coords = extra_rng.uniform(-3, 3, size=3)
            receptacles.append(Receptacle(_alfred_key(rtype, coords), rtype, location))
    objects = tuple(sorted(name for name in set(names) if name in rules["pickupable"] or name in LAMPS))
    return tuple(receptacles), objects


@lru_cache(maxsize=1)
def floor_plan_numbers() -> tuple[int, ...]:
    """The numbers of the AI2-THOR floor plans ALFWorld ships layouts for, sorted."""
    layouts = alfworld_paths()[2]
    numbers = (int(m.group(1)) for p in layouts.glob("FloorPlan*-openable.json")
               if (m := re.match(r"FloorPlan(\d+)-", p.name)))
    return tuple(sorted(numbers))


def room_of(number: int) -> str:
    """The room kind of a floor plan: its hundreds digit (kitchen, living room, bedroom, bathroom)."""
    return ROOM_OF_HUNDREDS[number // 100]


# ---- names in ALFRED's mangled PDDL form --------------------------------------------------------
def _alfred_key(name: str, coords: np.ndarray) -> str:
    return "|".join([name] + [f"{value:+06.2f}" for value in coords])


def _location_name(x: float, z: float, rotation: float, horizon: float) -> str:
    parts = [round(float(x) / 0.25), round(float(z) / 0.25), int(rotation) // 90 % 4, int(horizon)]
    return "loc|" + "|".join(str(p) for p in parts)


def mangle(key: str) -> str:
    """ALFRED id -> PDDL name: ``Cabinet|+00.68|-02.20`` -> ``Cabinet_bar__plus_00_dot_68_bar__minus_02_dot_20``."""
    for plain, coded in (("|", "_bar_"), ("+", "_plus_"), ("-", "_minus_"), (".", "_dot_"), (",", "_comma_")):
        key = key.replace(plain, coded)
    return key


# ---- the generator ------------------------------------------------------------------------------
class GenerationError(RuntimeError):
    """The drawn room cannot host the drawn task (the generator then draws again)."""


def generate_game(item_id: int) -> dict[str, Any]:
    """The game of ``item_id`` as a ``.tw-pddl`` JSON dict (deterministic)."""
    task_type = TASK_TYPES[item_id % len(TASK_TYPES)]
    rng = np.random.default_rng([GENERATOR_VERSION, item_id])
    rooms = ROOMS_OF_TYPE[task_type]
    plans = [n for n in floor_plan_numbers() if room_of(n) in rooms]
    for _attempt in range(200):
        number = int(plans[int(rng.integers(len(plans)))])
        try:
            return _build(item_id, task_type, number, rng)
        except GenerationError:
            continue
    raise RuntimeError(f"could not generate a {task_type} game for item {item_id}")


def _build(item_id: int, task_type: str, number: int, rng: np.random.Generator) -> dict[str, Any]:
    rules = alfred_rules()
    receptacles, object_types = floor_plan(number)
    rtypes_present = sorted({r.rtype for r in receptacles})
    movable_types = [t for t in object_types if t not in LAMPS]
    tool = TOOL_OF_TYPE.get(task_type)
    if tool and tool[0] not in rtypes_present:
        raise GenerationError("room lacks the appliance")
    # --- the target object, receptacle and lamp
    toggle_type = ""
    if task_type == "look_at_obj_in_light":
        lamps = [t for t in object_types if t in LAMPS]
        if not lamps:
            raise GenerationError("no lamp")
        toggle_type = lamps[int(rng.integers(len(lamps)))]
        candidates = [t for t in movable_types if _hosts(t, receptacles)]
        if not candidates:
            raise GenerationError("nothing to look at")
        object_type = candidates[int(rng.integers(len(candidates)))]
        receptacle_type = ""
    else:
        if tool:
            movable_types = [t for t in movable_types if t in rules[tool[1]]]
        pairs = [
            (obj, rtype)
            for obj in movable_types
            for rtype in rtypes_present
            if obj in rules["containers"][rtype] and (tool is None or rtype != tool[0])
            and any(r.rtype != rtype and obj in rules["containers"][r.rtype] for r in receptacles)
        ]
        if not pairs:
            raise GenerationError("no object/receptacle pair")
        object_type, receptacle_type = pairs[int(rng.integers(len(pairs)))]
    # --- scatter the objects over the receptacles that may hold them
    placements: list[tuple[str, str, Receptacle]] = []  # (object key, type, receptacle)
    used_keys: set[str] = set()
    for otype in object_types:
        if otype in LAMPS:
            if otype != toggle_type and rng.random() < 0.5:
                continue
            hosts = [r for r in receptacles if r.rtype in LAMP_HOSTS and r.rtype not in rules["openable"]]
            count = 1
        else:
            hosts = [r for r in receptacles if otype in rules["containers"][r.rtype]]
            if otype == object_type and receptacle_type:
                hosts = [r for r in hosts if r.rtype != receptacle_type]  # the goal is never met at the start
            minimum = 2 if (otype == object_type and task_type == "pick_two_obj_and_place") else 1
            count = max(minimum, 1 + int(rng.choice(len(EXTRA_INSTANCE_ODDS), p=EXTRA_INSTANCE_ODDS)))
        if not hosts:
            if otype in (object_type, toggle_type):
                raise GenerationError("target has nowhere to lie")
            continue
        for _ in range(count):
            host = hosts[int(rng.integers(len(hosts)))]
            key = _alfred_key(otype, rng.uniform(-3, 3, size=3))
            if key in used_keys:
                continue
            used_keys.add(key)
            placements.append((key, otype, host))
    if task_type == "pick_two_obj_and_place" and sum(1 for _, t, _ in placements if t == object_type) < 2:
        raise GenerationError("pick two needs two objects")
    templates = GOAL_TEMPLATES[task_type]
    goal = templates[int(rng.integers(len(templates)))].format(
        obj=object_type.lower(), recep=receptacle_type.lower(), toggle=toggle_type.lower()
    )
    start = _location_name(*rng.uniform(-4, 4, size=2).round(2), int(rng.integers(4)) * 90, 30)
    if start in {r.location for r in receptacles}:
        raise GenerationError("start spot taken")
    info = TaskInfo(item_id, task_type, number, room_of(number), object_type, receptacle_type, toggle_type, goal)
    domain_path, grammar_path, _ = alfworld_paths()
    problem = _problem_text(info, receptacles, placements, start)
    return {
        "pddl_domain": domain_path.read_text(),
        "grammar": grammar_with_goal(grammar_path.read_text(), goal),
        "pddl_problem": problem,
        "solvable": True,
        "agentgym": asdict(info),
    }


def _hosts(otype: str, receptacles: tuple[Receptacle, ...]) -> bool:
    containers = alfred_rules()["containers"]
    return any(otype in containers[r.rtype] for r in receptacles)


def grammar_with_goal(grammar: str, goal: str) -> str:
    """ALFWorld's grammar with the goal sentence filled in and ALFWorld's original put command.

    alfworld 0.4.2 renamed ``put X in/on Y`` to ``move X to Y``; AgentGym's agents were trained on
    the original wording, so generated games use it (the env accepts both spellings either way).
    """
    grammar = grammar.replace("UNKNOWN GOAL", goal)
    grammar = grammar.replace('template :: "move {o} to {r}";', 'template :: "put {o} in/on {r}";')
    return grammar.replace('"rhs": "You move the {o.name} to the {r.name}."',
                           '"rhs": "You put the {o.name} in/on the {r.name}."')


def _problem_text(info: TaskInfo, receptacles: tuple[Receptacle, ...], placements: list[tuple[str, str, Receptacle]],
                  start: str) -> str:
    rules = alfred_rules()
    object_types = sorted({otype for _, otype, _ in placements})
    rtypes = sorted({r.rtype for r in receptacles})
    locations = sorted({r.location for r in receptacles} | {start})
    declarations = ["agent1 - agent"]
    declarations += [f"{mangle(key)} - object" for key, _, _ in sorted(placements)]
    declarations += [f"{mangle(r.key)} - receptacle" for r in receptacles]
    declarations += [f"{mangle(loc)} - location" for loc in locations]
    declarations += [f"{t}Type - otype" for t in object_types]
    declarations += [f"{t}Type - rtype" for t in rtypes]
    facts = [f"(atLocation agent1 {mangle(start)})"]
    for r in receptacles:
        name = mangle(r.key)
        facts.append(f"(receptacleType {name} {r.rtype}Type)")
        facts.append(f"(receptacleAtLocation {name} {mangle(r.location)})")
        if r.rtype in rules["openable"]:
            facts.append(f"(openable {name})")
    for key, otype, host in sorted(placements):
        name = mangle(key)
        facts.append(f"(objectType {name} {otype}Type)")
        facts.append(f"(inReceptacle {name} {mangle(host.key)})")
        facts.append(f"(objectAtLocation {name} {mangle(host.location)})")
        if otype in rules["pickupable"]:
            facts.append(f"(pickupable {name})")
        if otype in rules["movable_receptacles"]:
            facts.append(f"(isReceptacleObject {name})")
        for prop in ("cleanable", "heatable", "coolable", "toggleable"):
            if otype in rules[prop]:
                facts.append(f"({prop} {name})")
    for rtype in rtypes:
        for otype in object_types:
            if otype in rules["containers"].get(rtype, ()):
                facts.append(f"(canContain {rtype}Type {otype}Type)")
    body = "\n        ".join(declarations)
    init = "\n        ".join(facts)
    return (
        f"(define (problem agentgym_alfworld_{info.item_id})\n"
        f"    (:domain alfred)\n"
        f"    (:objects\n        {body}\n    )\n"
        f"    (:init\n        {init}\n    )\n"
        f"    (:goal\n{goal_pddl(info)}\n    )\n)\n"
    )


def goal_pddl(info: TaskInfo) -> str:
    """The PDDL goal of a task (the same conditions ALFWorld checks for its six task types)."""
    obj, recep, toggle = f"{info.object_type}Type", f"{info.receptacle_type}Type", f"{info.toggle_type}Type"
    if info.task_type == "look_at_obj_in_light":
        return (
            "        (and\n"
            f"            (exists (?ot - object ?r - receptacle ?a - agent ?l - location)\n"
            f"                (and (objectType ?ot {toggle}) (toggleable ?ot) (isToggled ?ot)\n"
            "                     (receptacleAtLocation ?r ?l) (atLocation ?a ?l) (inReceptacle ?ot ?r)))\n"
            f"            (exists (?o - object ?a - agent) (and (objectType ?o {obj}) (holds ?a ?o))))"
        )
    if info.task_type == "pick_two_obj_and_place":
        return (
            f"        (exists (?r - receptacle ?o1 - object ?o2 - object)\n"
            f"            (and (receptacleType ?r {recep}) (not (= ?o1 ?o2))\n"
            f"                 (objectType ?o1 {obj}) (inReceptacle ?o1 ?r)\n"
            f"                 (objectType ?o2 {obj}) (inReceptacle ?o2 ?r)))"
        )
    state = {
        "pick_clean_then_place_in_recep": "(cleanable ?o) (isClean ?o) ",
        "pick_heat_then_place_in_recep": "(heatable ?o) (isHot ?o) ",
        "pick_cool_then_place_in_recep": "(coolable ?o) (isCool ?o) ",
    }.get(info.task_type, "")
    return (
        f"        (exists (?r - receptacle ?o - object)\n"
        f"            (and {state}(objectType ?o {obj}) (receptacleType ?r {recep}) (inReceptacle ?o ?r)))"
    )


# ---- the disk cache -----------------------------------------------------------------------------
def cache_dir() -> Path:
    """Where generated games are kept: ``$AGENTGYM_CACHE_DIR/alfworld`` (``~/.cache/agentgym/alfworld`` on
    Linux by default)."""
    return cache_root() / "alfworld" / f"games-v{GENERATOR_VERSION}"


def game_file(item_id: int) -> Path:
    """Where the game of ``item_id`` is cached (it may not exist yet)."""
    return cache_dir() / f"{item_id // 1000:04d}" / f"game-{item_id}.tw-pddl"


def game_path(item_id: int) -> Path:
    """The cached game file of ``item_id``, generated on first use (atomic write, safe across processes)."""
    path = game_file(item_id)
    if path.exists():
        return path
    _write_game(path, generate_game(item_id))
    return path


def load_game(item_id: int) -> dict[str, Any]:
    """The game of ``item_id`` from the disk cache; a missing, damaged or foreign file is regenerated."""
    path = game_file(item_id)
    try:
        data = json.loads(path.read_text())
        meta = data["agentgym"]
        if meta["item_id"] == item_id and meta["generator_version"] == GENERATOR_VERSION:
            return data
    except (OSError, ValueError, KeyError, TypeError):
        pass
    data = generate_game(item_id)
    _write_game(path, data)
    return data


def _write_game(path: Path, data: dict[str, Any]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, path)
    except OSError:  # a read-only cache only costs the generation time
        pass
