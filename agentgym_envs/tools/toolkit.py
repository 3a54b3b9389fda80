"""Documented tools, the call syntax, argument checking and the services behind the tools.

A ``Service`` owns one SQLite store and exposes its tools as methods named like the tools. A
call goes ``Action: <tool> with Action Input: <JSON object>`` (AgentGym's tool format); a
function-calling model's own forms work too: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
(Hermes / Qwen chat templates) or that JSON object alone (OpenAI's, ``arguments`` may be a JSON
string). ``Tool.schema()`` describes each tool in OpenAI's function-calling format (the JSON Schema
of its arguments, which ``check_arguments`` enforces with ``jsonschema``). Anything wrong with a call (unknown tool,
missing or extra arguments, wrong types, bad JSON, a row that does not exist) comes back as the
tool's error text, never as an exception.
"""

from __future__ import annotations

import ast
import difflib
import json
import re
import sqlite3
import sys
from dataclasses import dataclass, field
from functools import cache, cached_property
from importlib import resources
from typing import Any, ClassVar

import jsonschema

from agentgym_envs.core.parsers import ParsedAction, clean_text, find_action_line
from agentgym_envs.core.safety import decode_json_prefix

JSON_TYPES: dict[str, str] = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "array": "a JSON array",
    "object": "a JSON object",
    "any": "any JSON value",
}


# JSON Schema 2020-12 with strict integers: 7.0 is a number, not an integer (the tools compute with ints); and
# numbers that are JSON's: jsonschema takes any ``numbers.Number``, so a complex number (a Python literal in an
# Action Input) reached ``minimum``'s ``<`` and raised.
_ARGUMENTS_VALIDATOR = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine_many({
        "integer": lambda _checker, value: isinstance(value, int) and not isinstance(value, bool),
        "number": lambda _checker, value: isinstance(value, (int, float)) and not isinstance(value, bool),
    }),
)


class ToolError(Exception):
    """A tool refused a call; the message is shown to the agent as the observation."""


@dataclass(frozen=True)
class Param:
    """One documented argument of a tool."""

    name: str
    type: str
    description: str
    required: bool = True
    choices: tuple[Any, ...] = ()

    def problem(self, tool: str, value: Any, rule: str) -> str:
        """The agent-facing message for ``value`` breaking this parameter's schema ``rule`` (a JSON Schema keyword)."""
        if rule in ("minimum", "maximum"):
            return f"{tool}: argument '{self.name}' is out of range ({_literal(value)})."
        if rule == "enum":
            options = ", ".join(json.dumps(c) for c in self.choices)
            return f"{tool}: argument '{self.name}' must be one of {options}, got {_literal(value)}."
        return f"{tool}: argument '{self.name}' must be {JSON_TYPES[self.type]}, got {_describe(value)}."

    def schema(self) -> dict[str, Any]:
        """The JSON Schema of this argument (``any`` is any JSON value but null)."""
        schema: dict[str, Any] = {"not": {"type": "null"}} if self.type == "any" else {"type": self.type}
        if self.type in ("integer", "number"):  # what JSON numbers survive everywhere: |x| < 2^53
            schema.update(minimum=-(2**53) + 1, maximum=2**53 - 1)
        schema["description"] = self.description
        if self.choices:
            schema["enum"] = list(self.choices)
        return schema

    def doc(self) -> str:
        """The parameter as one line of the tool documentation: name, type, optional, description, choices."""
        flag = "" if self.required else ", optional"
        options = f" One of {', '.join(json.dumps(c) for c in self.choices)}." if self.choices else ""
        return f"{self.name} ({self.type}{flag}): {self.description}{options}"


@dataclass(frozen=True)
class Tool:
    """A tool as the agent sees it: name, what it does, its parameters and what it returns."""

    name: str
    description: str
    params: tuple[Param, ...]
    returns: str

    def doc(self, index: int) -> str:
        """The tool's entry in the numbered tool list of the detailed instruction (``index``: its number)."""
        lines = [f"{index}. {self.name}: {self.description}"]
        if self.params:
            lines.append("   Parameters: " + "; ".join(p.doc() for p in self.params))
        else:
            lines.append("   Parameters: none (use {})")
        lines.append(f"   Returns: {self.returns}")
        return "\n".join(lines)

    def schema(self) -> dict[str, Any]:
        """The tool in OpenAI's function-calling format (also what TRL and chat templates take as ``tools``)."""
        parameters = {
            "type": "object",
            "properties": {param.name: param.schema() for param in self.params},
            "required": [param.name for param in self.params if param.required],
            "additionalProperties": False,
        }
        description = f"{self.description} Returns: {self.returns}"
        return {"type": "function", "function": {"name": self.name, "description": description,
                                                 "parameters": parameters}}

    @cached_property
    def validator(self) -> Any:
        """The JSON Schema validator of ``schema()``'s parameters: the schema the env exposes is the one enforced."""
        return _ARGUMENTS_VALIDATOR(self.schema()["function"]["parameters"])

    def check_arguments(self, arguments: dict[str, Any]) -> None:
        """``ToolError`` with one message for the agent: unknown arguments first, then missing ones, then the first
        parameter (in declaration order) whose value breaks its schema (type before range before choices)."""
        for name, value in arguments.items():  # jsonschema's messages print the value: a ValueError on this one
            reason = unprintable(value)
            if reason is not None:
                raise ToolError(f"{self.name}: argument '{name}' cannot be used: {reason}.")
        errors = list(self.validator.iter_errors(arguments))
        if not errors:
            return
        known = {p.name for p in self.params}
        unknown = sorted(set(arguments) - known)
        if unknown:
            allowed = ", ".join(sorted(known)) or "none"
            raise ToolError(
                f"{self.name}: unknown argument(s) {', '.join(repr(u) for u in unknown)}; "
                f"its parameters are: {allowed}."
            )
        for param in self.params:
            if param.required and param.name not in arguments:
                raise ToolError(f"{self.name}: missing required argument '{param.name}' ({JSON_TYPES[param.type]}).")
        for param in self.params:
            rules = {error.validator for error in errors if list(error.path)[:1] == [param.name]}
            for rule in ("type", "not", "minimum", "maximum", "enum"):
                if rule in rules:
                    raise ToolError(param.problem(self.name, arguments[param.name], rule))
        raise ToolError(f"{self.name}: {errors[0].message}")

@cache
def _declarations() -> dict[str, Any]:
    with resources.files(__package__).joinpath("tools.json").open("r", encoding="utf-8") as handle:
        return json.load(handle)


def _param(declared: dict[str, Any]) -> Param:
    return Param(declared["name"], declared["type"], declared["description"], declared.get("required", True),
                 tuple(declared.get("choices", ())))


def load_tools(service: str, **values: Any) -> tuple[Tool, ...]:
    """The tools of ``service`` as declared in ``tools.json``: the declarations are data, kept apart from the code.

    A parameter given by name is one of the service's ``shared_params``; ``values`` fill the
    ``{name}`` placeholders of the tools' descriptions (limits the code also enforces).
    """
    declared = _declarations()[service]
    shared = {param["name"]: _param(param) for param in declared["shared_params"]}
    tools = []
    for tool in declared["tools"]:
        params = tuple(shared[param] if isinstance(param, str) else _param(param) for param in tool["params"])
        tools.append(Tool(tool["name"], _fill(tool["description"], values), params, tool["returns"]))
    return tuple(tools)


def load_env_texts(service: str, **values: Any) -> tuple[str, str, str]:
    """The ``intro``, ``example_call`` and ``agentgym_hint`` of ``service``'s env as declared in ``tools.json``
    (the hint is AgentGym's wording); ``values`` fill the intro's ``{name}`` placeholders."""
    declared = _declarations()[service]
    return _fill(declared["intro"], values), declared["example_call"], declared["agentgym_hint"]


def _fill(text: str, values: dict[str, Any]) -> str:
    for key, value in values.items():
        text = text.replace("{" + key + "}", str(value))
    return text


FINISH = Tool(
    "finish",
    "End the task. For a question, give your final answer; for a task that changes data, call it once the change is "
    "made.",
    (Param("answer", "any", "the final answer: a number, a string, true/false, or a list of strings", required=False),),
    "nothing: the episode ends and is graded",
)


_VALUE_NAMES: dict[type, str] = {
    str: "a string",
    bool: "a boolean",
    int: "an integer",
    float: "a number",
    list: "an array",
    dict: "an object",
    # Python literals JSON has no form for (the default rule reads an Action Input as Python)
    bytes: "bytes",
    set: "a set",
    frozenset: "a frozenset",
    complex: "a complex number",
    type(Ellipsis): "the literal",
}


def unprintable(value: Any) -> str | None:
    """Why Python cannot print ``value``, or None: an int past its int-to-text limit (``0x`` and 4,000 hex digits
    read as one), alone or inside a list, set or dict; ``str``, ``repr`` and ``json.dumps`` raise ``ValueError`` on
    it, so it is refused with this reason rather than escaping a step."""
    try:
        str(value)
    except ValueError:
        return f"it holds an integer of more than {sys.get_int_max_str_digits()} digits, too long to print"
    return None


def _literal(value: Any, ensure_ascii: bool = True) -> str:
    """``value`` as JSON, or as Python writes it where JSON cannot (bytes, a set, a complex number, Ellipsis), or
    the reason it cannot be printed at all; never raises (an error message must not)."""
    reason = unprintable(value)
    if reason is not None:
        return f"({reason})"
    try:
        return json.dumps(value, ensure_ascii=ensure_ascii)
    except (TypeError, ValueError):
        return repr(value)


def _describe(value: Any) -> str:
    """A value as an error message names it: its kind and its first 60 characters (``_literal``)."""
    if value is None:
        return "null"
    return f"{_VALUE_NAMES.get(type(value), type(value).__name__)} {_literal(value, ensure_ascii=False)[:60]}"


# ---- the call syntax --------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """A parsed tool call."""

    tool: str
    arguments: dict[str, Any] = field(default_factory=dict)

    def render(self) -> str:
        """The call as the agent writes it: ``<tool> with Action Input: <JSON arguments>``."""
        return f"{self.tool} with Action Input: {json.dumps(self.arguments, ensure_ascii=False)}"

    def key(self) -> str:
        """The call as a comparable string (arguments in key order): how the oracle recognises its own next step."""
        return json.dumps([self.tool, self.arguments], sort_keys=True, ensure_ascii=False)


CALL_HINT = (
    "Write one tool call per turn in the format:\nThought: <your reasoning>\n\nAction: <tool name> with Action Input: "
    '<JSON object of arguments>\nfor example: Action: finish with Action Input: {"answer": "42"}'
)

_INPUT_SPLIT = re.compile(r"\s*(?:with\s+)?action[\s_]*input\s*:\s*", re.IGNORECASE)
_TOOL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


_TOOL_CALL_TAG = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)


def function_call(text: str) -> str | None:
    """A function-calling model's call as ``<tool> with Action Input: {...}``, or ``None`` if ``text`` holds none.

    Reads ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` (the first one) or a response that is
    just such a JSON object; ``arguments`` may be an object or a JSON string of one (OpenAI's wire format).
    """
    tagged = _TOOL_CALL_TAG.search(text)
    raw = tagged.group(1) if tagged else text
    if not raw.startswith("{"):
        return None
    try:
        call, _ = decode_json_prefix(raw)
    except ValueError:  # JSONDecodeError included
        return None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return None
    arguments = call.get("arguments", call.get("parameters", {}))
    if isinstance(arguments, str):
        return f"{call['name']} with Action Input: {arguments}"
    return f"{call['name']} with Action Input: {json.dumps(arguments, ensure_ascii=False)}"


def parse_response(response: str) -> ParsedAction:
    """Extract ``<tool> with Action Input: {...}`` from a ReAct response (the JSON may span lines).

    Also accepted: the input on its own ``Action Input:`` line, a bare one-line call, and a
    function-calling model's ``<tool_call>`` or JSON call object (``function_call``).
    """
    text = clean_text(response).strip()
    called = function_call(text)  # None for an empty response
    if called is not None:
        return ParsedAction(called)
    found = find_action_line(text, "call exactly one tool per turn.", CALL_HINT)
    if isinstance(found, ParsedAction):
        return found
    if found.index is not None:
        body = found.body.strip()
    elif len(found.lines) == 1 and not text.lower().startswith("thought"):
        body = text
    else:
        return ParsedAction(None, "No 'Action:' line found in your response. " + CALL_HINT)
    body = body.strip().strip("`").strip()
    if not body:
        return ParsedAction(None, "The 'Action:' line is empty. " + CALL_HINT)
    return ParsedAction(body)


#: AgentGym's tool envs' reply to an Action Input that Python cannot read (``helpers.parse_action``).
AGENTGYM_BAD_INPUT = "ERROR | Exception(Parameters in action input are not valid, please change your action input.)"


def python_literal(value: Any) -> str:
    """``value`` written as a Python literal in JSON's layout (``True``/``False``/``None`` for JSON's
    ``true``/``false``/``null``): what AgentGym's tool servers read from an Action Input."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{python_literal(k)}: {python_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(python_literal(v) for v in value) + "]"
    if value is True or value is False or value is None:
        return repr(value)
    return json.dumps(value, ensure_ascii=False)


#: The reply of AgentGym's tool envs to a call without ``Action:`` before the tool's name: their ``parse_action``
#: finds nothing and unpacking its ``None`` fails (``helpers.parse_action``, then ``step``'s ``except``).
AGENTGYM_NO_ACTION = "ERROR | TypeError(cannot unpack non-iterable NoneType object)"

#: Step 1 of AgentGym's tool servers (``extract_action_name_and_action_input``, case-sensitive, no flags): the
#: first ``with Action Input:`` from which only white space and one last line remain; the name is the rest of its
#: line (or of the line above when ``with`` opens a line), the input that last line. Upstream writes the name as
#: ``(.*?)\s*with``; the lazy name can only end where no white space precedes (else ending one character earlier
#: would match too), so ``((?:.*?\S)??)`` is the same rule, without re-scanning a run of white space from each of
#: its characters (quadratic: a 20,000-space run took a second).
_AGENTGYM_SERVER_CALL = re.compile(r"\s*((?:.*?\S)??)\s*with\s*Action Input:\s*(.*?)$")
#: Step 2, the env's ``parse_action`` on the rebuilt ``<name> with Action Input: <input>``: the tool is what
#: follows the first ``Action:`` (case-sensitive) up to ``with Action Input:`` (the name as in step 1).
_AGENTGYM_ENV_CALL = re.compile(r".*?Action:\s*((?:.*?\S)??)\s*with\s*Action Input:\s*(.*?)$",
                                re.DOTALL | re.MULTILINE)
#: A ``with Action Input:`` and the white space after it, where a match of step 1 can end.
_AGENTGYM_INPUT_MARK = re.compile(r"with\s*Action Input:\s*")


def agentgym_tool_action(response: str) -> str | None:
    """What AgentGym's tool server hands its env for the whole ``response`` (its client sends it unparsed):
    ``<name> with Action Input: <input>`` rebuilt from step 1, or ``None`` when step 1 finds no call (the
    server's format error). Written from the rule so that a model trained against AgentGym's servers meets the
    same refusals here: a call must end the response (prose after it, or an input over several lines, is a
    format error), the last call wins, and the name keeps its ``Action:`` (a bare call fails in step 2)."""
    tail = _first_call_tail(response)
    if tail is None:  # no match can end the response: step 1 finds no call
        return None
    # the same search from where its leftmost match can start at the earliest: searched from 0, every start on a long
    # line before the call scans that line to its end (a 16,000-character line took 2-4 s)
    found = _AGENTGYM_SERVER_CALL.search(response, _call_region_start(response, tail))
    assert found is not None  # one starts at the tail itself
    return f"{found.group(1)} with Action Input: {found.group(2)}"


def _first_call_tail(text: str) -> int | None:
    """Where the first ``with`` stands after which step 1's ``\\s*(.*?)$`` can end the text, in one pass: the input
    after ``with Action Input:`` and its white space must hold no newline but a final one. None: there is none."""
    end = len(text) - 1 if text.endswith("\n") else len(text)
    last_newline = text.rfind("\n", 0, end)
    for mark in _AGENTGYM_INPUT_MARK.finditer(text):
        if mark.end() > last_newline:
            return mark.start()
    return None


def _call_region_start(text: str, tail: int) -> int:
    """A position no match of step 1 starts before, given the first ``with`` that can end one (``tail``): a match
    spans white space, one line's text and white space up to its ``with``, which is ``tail`` or later, so its
    start lies within the white space, line and white space that precede ``tail``."""
    start = tail
    while start > 0 and text[start - 1].isspace():
        start -= 1
    while start > 0 and text[start - 1] != "\n":
        start -= 1
    while start > 0 and text[start - 1].isspace():
        start -= 1
    return start


def python_call_parts(action: str) -> tuple[str, Any]:
    """AgentGym's env ``parse_action`` on ``Action: <tool> with Action Input: <input>``: the tool that follows
    ``Action:`` and the input read as a Python literal (its servers ``eval`` it; ``ast.literal_eval`` takes the
    same literals without running code), whatever its type: upstream's ``step`` picks the tool first and only
    then indexes the input by the arguments that tool reads. Raises ``ToolError`` with AgentGym's error text."""
    found = _AGENTGYM_ENV_CALL.match(action)
    if found is None:
        raise ToolError(AGENTGYM_NO_ACTION)
    head, raw = found.group(1), found.group(2)
    try:
        return head, ast.literal_eval(raw)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise ToolError(AGENTGYM_BAD_INPUT) from None


def agentgym_read_error(arguments: Any, names: tuple[str, ...]) -> str | None:
    """AgentGym's error when its ``step`` indexes the Action Input by ``names`` in turn (``params["x"]``), or None:
    ``ERROR | KeyError('x')`` for a missing argument, a ``TypeError`` for an input that is not a dict. Python's own
    exception is taken, so the text is the one upstream's ``except`` writes."""
    for name in names:
        try:
            arguments[name]
        except (KeyError, TypeError, IndexError) as error:
            return f"ERROR | {type(error).__name__}({error})"
    return None


def parse_call(action: str) -> Call:
    """Split ``tool with Action Input: {...}`` into a ``Call``; raises ``ToolError`` with the reason."""
    parts = _INPUT_SPLIT.split(action, maxsplit=1)
    head = parts[0].strip().strip("`'\"").strip()
    if head.endswith("()"):
        head = head[:-2]
    if not _TOOL_NAME.match(head):
        raise ToolError(f"'{head[:80]}' is not a tool name. " + CALL_HINT)
    if len(parts) == 1 or not parts[1].strip():
        return Call(head, {})
    raw = parts[1].strip().strip("`").strip()
    if raw.lower().startswith("json"):
        raw = raw[4:].strip()
    try:
        arguments, _ = decode_json_prefix(raw)
    except json.JSONDecodeError as error:
        raise ToolError(
            f"The Action Input of {head} is not valid JSON ({error.msg} at character {error.pos}). " + CALL_HINT
        ) from None
    except ValueError as error:  # too deep, a number too large: see decode_json_prefix
        raise ToolError(f"The Action Input of {head} cannot be used: {error}. " + CALL_HINT) from None
    if not isinstance(arguments, dict):
        raise ToolError(
            f"The Action Input of {head} must be a JSON object of named arguments, got {_describe(arguments)}."
        )
    return Call(head, arguments)


# ---- services ---------------------------------------------------------------------------------


@dataclass
class CallResult:
    """What a tool call produced: the observation text, whether it worked, whether it wrote data."""

    text: str
    ok: bool
    wrote: bool = False
    #: the tool's result as a value (what AgentGym's tool servers record as a subgoal), None on an error
    value: Any = None


class Service:
    """A tool backend over one SQLite connection; each tool is the method of the same name.

    Subclasses list their tools in ``TOOLS`` (without ``finish``, which the env handles; the five tool
    envs declare theirs in ``tools.json``, see ``load_tools``) and set ``WRITE_TOOLS`` to the names of
    the tools that change stored data.
    """

    TOOLS: ClassVar[tuple[Tool, ...]] = ()
    WRITE_TOOLS: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, db: sqlite3.Connection):
        self.db = db

    @classmethod
    def tool(cls, name: str) -> Tool | None:
        """The tool named ``name`` (``finish`` included), or None when there is none."""
        for tool in (*cls.TOOLS, FINISH):
            if tool.name == name:
                return tool
        return None

    @classmethod
    def tool_schemas(cls) -> list[dict[str, Any]]:
        """Every tool, ``finish`` last, in OpenAI's function-calling format."""
        return [tool.schema() for tool in (*cls.TOOLS, FINISH)]

    @classmethod
    def tool_docs(cls) -> str:
        """The numbered documentation of every tool, ``finish`` last (the detailed instruction's tool list)."""
        return "\n".join(tool.doc(i) for i, tool in enumerate((*cls.TOOLS, FINISH), start=1))

    def call(self, call: Call) -> CallResult:
        """Run one call; every problem becomes the error text of the result."""
        tool = self.tool(call.tool)
        if tool is None or tool is FINISH:
            names = [t.name for t in self.TOOLS] + ["finish"]
            close = difflib.get_close_matches(call.tool, names, n=1)
            hint = f" Did you mean {close[0]}?" if close else ""
            return CallResult(
                f"Error: unknown tool '{call.tool}'.{hint} Available tools: {', '.join(names)}.", ok=False
            )
        try:
            tool.check_arguments(call.arguments)
            result = getattr(self, tool.name)(**call.arguments)
        except ToolError as error:
            return CallResult(f"Error: {error}", ok=False)
        except (
            OverflowError,
            ValueError,
            sqlite3.Error,
        ) as error:  # values the store cannot hold (e.g. a huge product)
            self.db.rollback()
            return CallResult(f"Error: {tool.name}: {error}.", ok=False)
        text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
        return CallResult(text, ok=True, wrote=tool.name in self.WRITE_TOOLS, value=result)

    def state(self) -> Any:
        """The stored data a state-changing task is graded on (``None`` for read-only services)."""
        return None

    def example_strings(self) -> list[str]:
        """Names a random agent may try as string arguments (cities, titles, ...)."""
        return ["example"]

    def example_value(self, param: Param, rng: Any) -> Any:
        """A plausible random value for ``param`` (the random agent's arguments)."""
        if param.choices:
            return param.choices[int(rng.integers(len(param.choices)))]
        if param.type == "integer":
            return int(rng.integers(1, 60))
        if param.type == "number":
            return round(float(rng.uniform(-60, 60)), 2)
        if param.type == "boolean":
            return bool(rng.integers(2))
        if param.type == "array":
            return []
        strings = self.example_strings()
        return strings[int(rng.integers(len(strings)))]

    def close(self) -> None:
        """Close the store; safe to call twice."""
        self.db.close()


def suggest(name: str, candidates: list[str]) -> str:
    """' Did you mean X?' for a near miss, or ''."""
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.75)
    return f" Did you mean '{close[0]}'?" if close else ""
