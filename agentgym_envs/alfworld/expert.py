"""A full-knowledge expert for ALFWorld's six task types, reading the engine's true facts.

It plays like ALFWorld's planner expert (it knows where everything is) but decides in
microseconds: fetch a target object (opening its receptacle if needed), clean / heat / cool it
at the sink basin / microwave / fridge, carry it to a receptacle of the goal type and put it
there (twice for pick-two), or take it to a lamp and switch the lamp on. The goal comes from the
PDDL goal text, so real ALFWorld games work too. It returns ``None`` when it has no answer (an
unknown goal shape); the env then asks Fast Downward's planner instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TOOLS = {"clean": ("sinkbasin", "isclean", "clean"), "heat": ("microwave", "ishot", "heat"),
         "cool": ("fridge", "iscool", "cool")}


@dataclass(frozen=True)
class Goal:
    """What a game asks for, read from its PDDL goal."""

    kind: str  # "place", "clean", "heat", "cool", "two" or "look"
    object_type: str  # e.g. "apple"
    receptacle_type: str = ""  # e.g. "countertop" ("" for look)
    toggle_type: str = ""  # e.g. "desklamp" (look only)


def parse_goal(problem: str) -> Goal | None:
    """The goal of an ALFWorld PDDL problem (our generated ones and ALFWorld's own)."""
    start = problem.lower().find("(:goal")
    if start < 0:
        return None
    text = problem.lower()[start:]
    obj = re.search(r"\(objecttype \?o1? (\w+?)type\)", text)
    if obj is None:
        return None
    toggle = re.search(r"\(objecttype \?ot (\w+?)type\)", text)
    if toggle is not None and "istoggled" in text:
        return Goal("look", obj.group(1), toggle_type=toggle.group(1))
    recep = re.search(r"\(receptacletype \?r (\w+?)type\)", text)
    if recep is None or "issliced" in text or "inreceptacleobject" in text:
        return None
    if "?o2" in text:
        return Goal("two", obj.group(1), recep.group(1))
    for kind, (_, prop, _) in TOOLS.items():
        if f"({prop} ?o)" in text:
            return Goal(kind, obj.group(1), recep.group(1))
    return Goal("place", obj.group(1), recep.group(1))


class World:
    """Indexes over the engine's facts (display names) that the expert reasons with."""

    def __init__(self, facts: set[tuple[str, ...]]):
        self.location_of: dict[str, str] = {}
        self.inside: dict[str, str] = {}  # object -> receptacle
        self.type_of: dict[str, str] = {}
        self.props: dict[str, set[str]] = {}
        self.can_contain: set[tuple[str, str]] = set()
        self.agent_at = ""
        self.held = ""
        for fact in facts:
            name, args = fact[0], fact[1:]
            if name == "receptacleatlocation":
                self.location_of[args[0]] = args[1]
            elif name == "inreceptacle":
                self.inside[args[0]] = args[1]
            elif name in ("objecttype", "receptacletype"):
                self.type_of[args[0]] = args[1].removesuffix("type")
            elif name == "atlocation":
                self.agent_at = args[1]
            elif name == "holds":
                self.held = args[1]
            elif name == "cancontain":
                self.can_contain.add((args[0].removesuffix("type"), args[1].removesuffix("type")))
            elif len(args) == 1:
                self.props.setdefault(args[0], set()).add(name)

    def has(self, entity: str, prop: str) -> bool:
        """Whether ``entity`` has the property ``prop`` (openable, opened, ...)."""
        return prop in self.props.get(entity, ())

    def receptacles(self, rtype: str | None = None) -> list[str]:
        """Every receptacle, or those of type ``rtype``, sorted."""
        return sorted(r for r in self.location_of if rtype is None or self.type_of.get(r) == rtype)

    def objects(self, otype: str) -> list[str]:
        """The objects of type ``otype`` that are not receptacles, sorted."""
        return sorted(o for o, t in self.type_of.items() if t == otype and o not in self.location_of)

    def at(self, receptacle: str) -> bool:
        """Whether the agent stands at ``receptacle``'s location."""
        return self.location_of.get(receptacle) == self.agent_at

    def closed(self, receptacle: str) -> bool:
        """Whether ``receptacle`` can be opened and is not open."""
        return self.has(receptacle, "openable") and not self.has(receptacle, "opened")

    def fits(self, obj: str, receptacle: str) -> bool:
        """Whether an object of ``obj``'s type can go into a receptacle of ``receptacle``'s type."""
        return (self.type_of.get(receptacle, ""), self.type_of.get(obj, "")) in self.can_contain


def next_command(goal: Goal, world: World, put_verb: str = "put {o} in/on {r}") -> str | None:
    """The expert's next command, or ``None`` if it has nothing sensible to say."""
    if goal.kind == "look":
        return _look(goal, world, put_verb)
    return _place(goal, world, put_verb)


def _go_then(world: World, receptacle: str, command: str) -> str:
    """Go to ``receptacle`` first if needed, open it if it is closed, then ``command``."""
    if not world.at(receptacle):
        return f"go to {receptacle}"
    if world.closed(receptacle):
        return f"open {receptacle}"
    return command


def _fetch(world: World, candidates: list[str]) -> str | None:
    """Take the candidate object that costs the fewest actions to pick up."""
    def cost(obj: str) -> tuple[int, str]:
        holder = world.inside.get(obj, "")
        return (0 if world.at(holder) else 1) + (1 if world.closed(holder) else 0), obj

    reachable = [o for o in candidates if o in world.inside and world.has(o, "pickupable")]
    if not reachable:
        return None
    obj = min(reachable, key=cost)
    holder = world.inside[obj]
    return _go_then(world, holder, f"take {obj} from {holder}")


def _drop(world: World, put_verb: str, avoid: set[str]) -> str | None:
    """Put down a held object that is in the way, as close as possible (never in ``avoid``)."""
    obj = world.held
    spots = [r for r in world.receptacles() if world.fits(obj, r) and r not in avoid]
    if not spots:
        return None
    spot = min(spots, key=lambda r: ((0 if world.at(r) else 1) + (1 if world.closed(r) else 0), r))
    return _go_then(world, spot, put_verb.format(o=obj, r=spot))


def _place(goal: Goal, world: World, put_verb: str) -> str | None:
    targets = world.receptacles(goal.receptacle_type)
    if not targets:
        return None
    needed = 2 if goal.kind == "two" else 1
    tool = TOOLS.get(goal.kind)
    ready = (lambda o: world.has(o, tool[1])) if tool else (lambda o: True)
    placed = {r: [o for o in world.objects(goal.object_type) if world.inside.get(o) == r and ready(o)] for r in targets}
    # the receptacle to fill: the one already holding the most finished objects
    target = max(targets, key=lambda r: (len(placed[r]), -targets.index(r)))
    if len(placed[target]) >= needed:
        return "look"  # already done (the engine reports the win)
    held = world.held
    if held and world.type_of.get(held) == goal.object_type:
        if tool and not ready(held):
            appliances = world.receptacles(tool[0])
            if not appliances:
                return None
            appliance = min(appliances, key=lambda r: (0 if world.at(r) else 1, r))
            if not world.at(appliance):
                return f"go to {appliance}"
            return f"{tool[2]} {held} with {appliance}"
        return _go_then(world, target, put_verb.format(o=held, r=target))
    if held:
        return _drop(world, put_verb, avoid={target})
    candidates = [o for o in world.objects(goal.object_type) if o not in placed[target]]
    return _fetch(world, candidates)


def _look(goal: Goal, world: World, put_verb: str) -> str | None:
    lamps = [o for o in world.objects(goal.toggle_type) if o in world.inside]
    if not lamps:
        return None
    held = world.held
    if held and world.type_of.get(held) != goal.object_type:
        return _drop(world, put_verb, avoid=set())
    if not held:
        return _fetch(world, world.objects(goal.object_type))
    lamp = min(lamps, key=lambda o: (0 if world.at(world.inside[o]) else 1, o))
    holder = world.inside[lamp]
    if not world.at(holder):
        return f"go to {holder}"
    return f"use {lamp}"
