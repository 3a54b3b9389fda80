"""Parsing WebArena actions (the text inside the backticks) into commands.

Grammar, as in WebArena: ``click [id]``, ``type [id] [text] [1|0]`` (1 = press Enter after, the
default), ``hover [id]``, ``press [key+comb]``, ``scroll [up|down]``, ``new_tab``,
``tab_focus [index]``, ``close_tab``, ``goto [url]``, ``go_back``, ``go_forward``,
``stop [answer]``. Solution scripts may write ``<role "name">`` in place of ``[id]``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agentgym_envs.core.safety import parse_count

ACTION_HELP = (
    "click [id], type [id] [text] [1|0], hover [id], press [key_comb], scroll [up|down], new_tab, "
    "tab_focus [tab_index], close_tab, goto [url], go_back, go_forward, stop [answer]"
)
NO_ARGUMENT = {"new_tab", "close_tab", "go_back", "go_forward"}
_BRACKETS = re.compile(r"\[(.*?)\](?=\s*\[|\s*$)", re.DOTALL)


@dataclass(frozen=True)
class Command:
    name: str
    element: int | None = None
    text: str = ""
    enter: bool = True


def parse_command(action: str) -> Command | str:
    """The command, or an error message for the agent."""
    action = action.strip()
    match = re.match(r"^([a-z_]+)\s*(.*)$", action, re.DOTALL)
    if not match:
        return f"Unknown action {action[:80]!r}. Valid actions: {ACTION_HELP}."
    name, rest = match.group(1), match.group(2).strip()
    if name in NO_ARGUMENT:
        return Command(name) if not rest else f"{name} takes no argument. Valid actions: {ACTION_HELP}."
    arguments = [a.strip() for a in _BRACKETS.findall(rest)] if rest.startswith("[") else []
    if name == "stop":
        if not rest:
            return Command("stop", text="")
        return Command("stop", text=rest[1:-1].strip() if rest.startswith("[") and rest.endswith("]") else rest)
    if name in ("click", "hover"):
        return _element(name, arguments, 1) or Command(name, parse_count(arguments[0]))
    if name == "type":
        if len(arguments) not in (2, 3):
            return f"Usage: type [id] [text] [1|0] (1 = press Enter after typing). Valid actions: {ACTION_HELP}."
        error = _element(name, arguments[:1], 1)
        if error:
            return error
        enter = arguments[2] if len(arguments) == 3 else "1"
        if enter not in ("0", "1"):
            return "The last argument of type must be 1 (press Enter) or 0 (do not press Enter)."
        return Command("type", parse_count(arguments[0]), arguments[1], enter == "1")
    if name == "press":
        if len(arguments) == 1 and arguments[0]:
            return Command("press", text=arguments[0])
        return "Usage: press [key_comb], e.g. press [Control+a] or press [Enter]."
    if name == "scroll":
        direction = arguments[0].lower() if len(arguments) == 1 else ""
        if direction in ("up", "down"):
            return Command("scroll", text=direction)
        return "Usage: scroll [up] or scroll [down]."
    if name == "tab_focus":
        if len(arguments) == 1 and parse_count(arguments[0]) is not None:
            return Command("tab_focus", parse_count(arguments[0]))
        return "Usage: tab_focus [tab_index], e.g. tab_focus [0]."
    if name == "goto":
        return Command("goto", text=arguments[0]) if len(arguments) == 1 and arguments[0] else "Usage: goto [url]."
    return f"Unknown action {name!r}. Valid actions: {ACTION_HELP}."


def _element(name: str, arguments: list[str], count: int) -> str | None:
    if len(arguments) < count or parse_count(arguments[0]) is None:
        return f"Usage: {name} [id], where id is the number in brackets before an element of the page."
    return None


_SCRIPT_REF = re.compile(r'<([A-Za-z]+) "((?:[^"\\]|\\.)*)">')


def script_references(step: str) -> list[tuple[str, str]]:
    """The ``<role "name">`` references of a solution step."""
    return [(role, name.replace('\\"', '"')) for role, name in _SCRIPT_REF.findall(step)]


def resolve_script_step(step: str, find) -> str | None:
    """Replace each ``<role "name">`` with ``[id]`` using ``find(role, name) -> id | None``."""
    missing = False

    def substitute(match: re.Match[str]) -> str:
        nonlocal missing
        node_id = find(match.group(1), match.group(2).replace('\\"', '"'))
        if node_id is None:
            missing = True
            return match.group(0)
        return f"[{node_id}]"

    resolved = _SCRIPT_REF.sub(substitute, step)
    return None if missing else resolved
