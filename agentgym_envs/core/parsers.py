"""Action parsers: turn a raw model response into one action, or say what was wrong.

Every family picks one of these. A parser never raises on model output: it returns a
``ParsedAction`` whose ``error`` is a message meant for the agent.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass


@dataclass(frozen=True)
class ParsedAction:
    """The action extracted from a response, or ``error`` explaining why there is none."""

    action: str | None
    error: str | None = None

    @property
    def ok(self) -> bool:
        """Whether an action was found."""
        return self.error is None


def clean_text(text: str) -> str:
    """Drop control characters (keeping newlines and tabs) and normalise Unicode width forms."""
    text = unicodedata.normalize("NFKC", text)
    return "".join(ch for ch in text if ch in "\n\t" or unicodedata.category(ch)[0] != "C")


def normalize_command(text: str) -> str:
    """Lower-case, trim, collapse white space, strip trailing punctuation: 'Get 1  Oak Log.' -> 'get 1 oak log'."""
    return re.sub(r"\s+", " ", text).strip().strip(".!;").strip().lower()


_ACTION_LINE = re.compile(r"^[\s*_#]*action[\s*_]*:[\s*_]*(.*)$", re.IGNORECASE)


@dataclass(frozen=True)
class ActionLine:
    """A response's lines and where its one ``Action:`` line stands (``index`` is ``None`` when it has none)."""

    lines: list[str]
    index: int | None = None

    @property
    def first(self) -> str:
        """What follows ``Action:`` on its own line."""
        return _ACTION_LINE.match(self.lines[self.index]).group(1)

    @property
    def following(self) -> list[str]:
        """The lines after the ``Action:`` line."""
        return self.lines[self.index + 1 :]

    @property
    def body(self) -> str:
        """The rest of the ``Action:`` line and every line after it (a tool call or a query may span lines)."""
        return "\n".join([self.first, *self.following])


def find_action_line(text: str, one_only: str, hint: str) -> ActionLine | ParsedAction:
    """Where the one ``Action:`` line of a cleaned response stands, or the error for the agent.

    The ReAct, tool-call and SQL parsers share this so that an empty response and a response with
    several ``Action:`` lines get the same answer everywhere; ``one_only`` says what one action is
    in that family ("give exactly one action per turn."), ``hint`` shows the format.
    """
    if not text:
        return ParsedAction(None, "Your response was empty. " + hint)
    lines = text.splitlines()
    action_lines = [i for i, line in enumerate(lines) if _ACTION_LINE.match(line)]
    if len(action_lines) > 1:
        return ParsedAction(None, f"Your response has more than one 'Action:' line; {one_only} " + hint)
    return ActionLine(lines, action_lines[0] if action_lines else None)


def parse_react(response: str) -> ParsedAction:
    """ReAct format: ``Thought: ...`` then ``Action:`` followed by exactly one action.

    The action may follow the colon on the same line or stand on the next non-empty line. A
    response with no ``Action:`` line is taken as a bare action when it is a single short line (our
    lenient rule: each family's default is its AgentGym client's own rule, this one is behind its
    opt-in, e.g. ``extra_feedback=True``).
    """
    text = clean_text(response).strip()
    found = find_action_line(text, "give exactly one action per turn.", REACT_HINT)
    if isinstance(found, ParsedAction):
        return found
    if found.index is None:
        if len(found.lines) == 1 and len(text) <= 200 and not text.lower().startswith("thought"):
            return ParsedAction(text)
        return ParsedAction(None, "No 'Action:' line found in your response. " + REACT_HINT)
    action = found.first.strip()
    if not action:
        following = [line.strip() for line in found.following if line.strip()]
        action = following[0] if following else ""
    action = action.strip("`").strip()
    if not action:
        return ParsedAction(None, "The 'Action:' line is empty. " + REACT_HINT)
    return ParsedAction(action)


#: How AgentGym's TextCraft and BabyAI clients find the action: the rest of each line holding
#: ``Action:`` (case-sensitive), white space and empty lines after the colon skipped.
_AGENTGYM_ACTION_LINE = re.compile(r"Action:\s*(.*?)(?=\n|$)", re.DOTALL)


def agentgym_action_lines(response: str) -> list[str]:
    """Every action AgentGym's TextCraft and BabyAI clients find in ``response``. Their rule: several
    are refused ("Only one 'Action' is allowed"), one is sent, none sends the empty action (a bare
    command without ``Action:`` is not taken)."""
    return _AGENTGYM_ACTION_LINE.findall(response)


def react_response(action: str, thought: str = "This is my next step.") -> str:
    """``action`` written the way AgentGym's ReAct prompts ask for it (scripted and random agents)."""
    return f"Thought:\n{thought}\n\nAction:\n{action}"


def agentgym_react_action(response: str) -> str:
    """The action AgentGym's ReAct client sends its server for ``response``: the text after the last
    ``Action:``, stripped; with no ``Action:`` at all, nothing (the whole text when it holds ``search[``
    or ``click[``). An empty result is still sent, and the server's engine answers it. The SciWorld,
    ALFWorld and WebShop clients first cut a trailing ``</s>`` with the character before it."""
    if response.endswith("</s>"):
        response = response[:-5]
    before, marker, after = response.rpartition("Action:")
    if not marker:
        return response.strip() if "search[" in response or "click[" in response else ""
    return after.strip()


def parse_agentgym_react(response: str, extra_feedback: bool) -> ParsedAction:
    """SciWorld's and ALFWorld's reading of a response: as AgentGym's client (``agentgym_react_action``: the text
    after the last ``Action:``, several lines included; without one the empty command, which the engine answers);
    with ``extra_feedback``, our ReAct parser (one ``Action:`` line; a bare one-line command is taken; anything else
    is explained)."""
    return parse_react(response) if extra_feedback else ParsedAction(agentgym_react_action(response))


REACT_HINT = "Answer in the format:\nThought: <your reasoning>\n\nAction:\n<one action>"


def parse_tags(response: str, tags: tuple[str, ...]) -> tuple[str, str] | ParsedAction:
    """Tag format (``<search>q</search>`` / ``<answer>a</answer>``): the first complete tag wins.

    Returns ``(tag, content)`` on success or a ``ParsedAction`` carrying the error.
    """
    text = clean_text(response)
    names = "|".join(re.escape(t) for t in tags)
    match = re.search(rf"<({names})>(.*?)</\1>", text, re.DOTALL | re.IGNORECASE)
    usage = " or ".join(f"<{t}>...</{t}>" for t in tags)
    if match is None:
        opened = re.search(rf"<({names})>", text, re.IGNORECASE)
        if opened:
            return ParsedAction(None, f"The <{opened.group(1).lower()}> tag is not closed. Write {usage}.")
        return ParsedAction(None, f"No action tag found. Write {usage}.")
    content = match.group(2).strip()
    if not content:
        return ParsedAction(None, f"The <{match.group(1).lower()}> tag is empty. Write {usage}.")
    return match.group(1).lower(), content


_BACKTICK_BLOCK = re.compile(r"```(?:[a-zA-Z]*\n)?(.*?)```", re.DOTALL)


def parse_backtick(response: str) -> ParsedAction:
    """WebArena format: the action is the content of the first triple-backtick block."""
    text = clean_text(response)
    blocks = [b.strip() for b in _BACKTICK_BLOCK.findall(text)]
    blocks = [b for b in blocks if b]
    if not blocks:
        return ParsedAction(None, "No action found. Put exactly one action inside triple backticks, e.g. ```click "
                                  "[12]```.")
    return ParsedAction(blocks[0])
