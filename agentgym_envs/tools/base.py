"""``ToolEnv``: the text env shared by the five tool-use envs.

A family member supplies a ``Service`` (its tools over SQLite) and a task generator that turns a
local item index into a ``ToolTask``: the question, how it is graded (a gold answer, or a target
state of the store) and the expert's plan of tool calls. The base handles the call syntax,
``finish``, grading and the oracle.

By default an episode reads as AgentGym's tool servers (``agentenv-tool``) write it: AgentGym's
instruction layout (its opening lines, each tool as ``Name:``/``Description:``/``Parameters:``/
``Returns:``, ``check_valid_actions`` and ``finish``, the env's hint and the response format), "Ok.",
the goal as "Now new trial starts. ...", every answer as "Observation: ...\nGive me one action."
and AgentGym's "Format error, ..." for a response without a call. AgentGym's step rules are the default too:
the whole response is read as its servers read it (``toolkit.agentgym_tool_action``: the call must end the
response, the last one wins, the tool follows ``Action:``), the Action Input is read as a Python literal
(``ast.literal_eval``; AgentGym ``eval``s it), errors read ``ERROR | ...`` (an unknown tool ``ERROR | Invalid
action: x.``), every successful tool result counts as ``finish``'s answer does (a result equal to the gold
answer wins), and an action containing "finish" ends the episode unless upstream's ``step`` raises on it (an
unreadable call, a missing argument: ``ERROR | KeyError('x')``, ``finish`` without an answer; Sheet's ``finish``
takes none and shows the sheet). The tools themselves are ours (SQLite
services in place of the web APIs), so their names, arguments and results follow our data.
``detailed_instruction=True`` gives our instruction, plain observations and our rules instead: our lenient
parser (a bare one-line call, prose after the call, an input over several lines, ``<tool_call>`` replies), JSON
Action Inputs, ``Error: ...`` explanations, only ``finish`` scores and ends.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Sequence, TypeVar

import numpy as np

from agentgym_envs.core import Outcome, ParsedAction, Start, TextEnv
from agentgym_envs.tools.answers import Gold
from agentgym_envs.tools.dbutil import clone
from agentgym_envs.tools.tasks import ENVS, ITEMS_PER_ENV
from agentgym_envs.tools.toolkit import (FINISH, Call, Service, Tool, ToolError, agentgym_read_error,
                                         agentgym_tool_action, parse_call, parse_response, python_call_parts,
                                         python_literal, unprintable)


@dataclass
class Step:
    """One step of the expert's plan: why, and which call."""

    thought: str
    call: Call


@dataclass
class ToolTask:
    """One generated episode.

    Exactly one of ``gold`` (a question: graded on the ``finish`` answer) and ``target`` (a change
    to make: graded on the service's ``state()``) is set.
    """

    template: str
    question: str
    plan: list[Step]
    gold: Gold | None = None
    target: Any = None
    context: dict[str, Any] = field(default_factory=dict)

    @property
    def changes_state(self) -> bool:
        """Whether the task is a change to make (graded on the stored data) rather than a question."""
        return self.gold is None


def step(thought: str, tool: str, **arguments: Any) -> Step:
    """One step of an expert plan.

    Args:
        thought: the reasoning the oracle writes before the call.
        tool: the tool's name.
        arguments: the call's arguments.

    Returns:
        The plan step.
    """
    return Step(thought, Call(tool, arguments))


def finish_step(answer: Any = None, thought: str = "I have everything I need.") -> Step:
    """The plan's last step: ``finish``, with ``answer`` when the task is a question (None: no answer)."""
    return step(thought, "finish", **({} if answer is None else {"answer": answer}))


Drawn = TypeVar("Drawn")


def draw_item(
    seed: int,
    local: int,
    templates: Sequence[Any],
    attempt: Callable[[Any, np.random.Generator], Drawn | None],
) -> Drawn:
    """Item ``local`` of a tool env: template ``local % len(templates)``, tried with the item's own random
    stream (seeded by ``[seed, local]``) until ``attempt`` returns something other than ``None``.

    Templates refuse a draw (``None``) when its answer would not be unique or well defined; the same
    stream then goes on, so every item is still a pure function of ``local``.
    """
    rng = np.random.default_rng([seed, local])
    template = templates[local % len(templates)]
    while True:
        drawn = attempt(template, rng)
        if drawn is not None:
            return drawn


Store = TypeVar("Store")


def draw_store_item(
    seed: int,
    local: int,
    templates: Sequence[Callable[[Any], ToolTask | None]],
    make: Callable[[np.random.Generator], tuple[Store, Any]],
    context: Callable[[Store], dict[str, Any]],
    discard: Callable[[Store], None] = lambda store: None,
) -> tuple[Store, ToolTask]:
    """Item ``local`` of an env whose every item has a store of its own: ``make(rng)`` builds the store
    and what the templates read; a refused draw discards that store and the same stream builds another.
    ``context(store)`` is the task's context (what the instruction needs besides the question)."""

    def attempt(template: Callable[[Any], ToolTask | None], rng: np.random.Generator) -> tuple[Store, ToolTask] | None:
        store, drawn = make(rng)
        task = template(drawn)
        if task is None:
            discard(store)
            return None
        task.context = context(store)
        return store, task

    return draw_item(seed, local, templates, attempt)


def template_generator(
    seed: int, templates: Sequence[Callable[[Any], ToolTask | None]], draw: Callable[[Any, np.random.Generator], Any]
) -> Callable[[Any, int], ToolTask]:
    """The ``generate_task`` of a shared-world env whose templates each read one ``draw(service, rng)``
    (a ``TaskDraw``): item ``local`` is ``draw_item(seed, local, templates, ...)``."""

    def generate(service: Any, local: int) -> ToolTask:
        return draw_item(seed, local, templates, lambda template, rng: template(draw(service, rng)))

    return generate


class TaskDraw:
    """What a task template reads while it draws: the service (``s``) with its store, and the item's ``rng``."""

    def __init__(self, service: Any, rng: np.random.Generator):
        self.s, self.rng = service, rng

    def pick(self, rows: Sequence[Any]) -> Any:
        """One of ``rows`` at random (``None`` when there is none)."""
        return rows[int(self.rng.integers(len(rows)))] if rows else None

    def one(self, sql: str, *args: Any) -> Any:
        """The first row of ``sql`` on the service's store (``args`` bound to its ``?``), or None."""
        return self.s.db.execute(sql, args).fetchone()

    def all(self, sql: str, *args: Any) -> list[Any]:
        """All rows of ``sql`` on the service's store (``args`` bound to its ``?``)."""
        return self.s.db.execute(sql, args).fetchall()


FORMAT_RULES = """Every turn, think briefly, then call exactly one tool, in this format:
Thought: <your reasoning>

Action: <tool name> with Action Input: <JSON object with the arguments>

For example:
Action: {example}

The tool's result comes back as the next observation (an error message if the call was wrong: fix it and try again). \
{finish_rule}"""


#: AgentGym's tool instructions open with these lines (``agentenv/envs/{weather,movie,...}.py``).
AGENTGYM_PREAMBLE = (
    "You are an autonomous intelligent agent. You can use actions to help people solve problems.\n"
    "We detail name, description, input(parameters) and output(returns) of each action as follows:\n"
)
#: AgentGym's entry for ``check_valid_actions`` (listed before ``finish``).
AGENTGYM_CHECK_VALID_ACTIONS = (
    "Name: check_valid_actions()\n"
    "Description: Get supported actions for current tool.\n"
    "Returns:\n"
    "- actions (Type: array): Supported actions for current tool."
)
#: AgentGym's ``finish`` for question envs (Weather, Movie, Academia) ...
AGENTGYM_FINISH = (
    "Name: finish(answer)\n"
    "Description: Return an answer and finish the task\n"
    "Parameters:\n"
    "- answer (Type: ['string', 'number', 'array']): The answer to be returned"
)
#: ... and for envs whose tasks change data (TODOList's wording; used for Sheet too).
AGENTGYM_FINISH_OPERATION = (
    "Name: finish(answer)\n"
    "Description: Call this action, when find the answer for the current task or complete essential operations.\n"
    "Parameters:\n"
    "- answer (Type: ['string', 'number', 'array']): If the task is a question answering task, this is the answer "
    "to be returned. If the task is an operation task, the answer in 'done'"
)
#: AgentGym's response rules after the env's hint (its worked example follows them upstream).
AGENTGYM_FORMAT = (
    "Please refer to the format of examples below to solve the requested goal. Please provide your thought to "
    "solve the question. You should give the thought with no more than 3 sentences. You need to give your thought "
    "together with your action!\n"
    "\n"
    "Your response must be in the format of:\n"
    "Thought: [your thought]\n"
    "\n"
    "Action: [your action] with Action Input: [your action input]\n"
)
#: The tool servers' reply to a response without ``<tool> with Action Input: <input>`` (sic).
AGENTGYM_FORMAT_ERROR = (
    'Format error, please response in the format of  "Action: [your action] with Action Input: [your action input]'
)


def agentgym_goal(question: str) -> str:
    """The tool servers' first observation (``/observation`` after ``/reset``)."""
    return f"Now new trial starts.\nYou should perform actions to accomplish the goal: {question}\nGive me one action."


def agentgym_observation(text: str) -> str:
    """How the tool servers wrap every tool result (and ``finish``'s answer)."""
    return f"Observation: {text}\nGive me one action."


def agentgym_tool_doc(tool: Tool) -> str:
    """One tool in AgentGym's instruction layout: ``Name: tool(a, b)``, ``Description:``, ``Parameters:``
    (``- a (Type: string): ...``, with ``Enum: [...]`` for fixed choices) and ``Returns:``."""
    lines = [f"Name: {tool.name}({', '.join(p.name for p in tool.params)})", f"Description: {tool.description}"]
    if tool.params:
        lines.append("Parameters:")
        for param in tool.params:
            kind = param.type + ("" if param.required else ", optional")
            if param.choices:
                kind += f", Enum: [{', '.join(str(c) for c in param.choices)}]"
            lines.append(f"- {param.name} (Type: {kind}): {param.description}")
    lines += ["Returns:", tool.returns]
    return "\n".join(lines)


def agentgym_answer(answer: Any) -> str:
    """``finish``'s observation on AgentGym's tool servers: the answer as Python prints it, a list sorted."""
    if isinstance(answer, list):
        try:
            answer = sorted(answer)
        except TypeError:  # mixed types: AgentGym's server would fail here; show the list as given
            pass
    return str(answer)


class ToolEnv(TextEnv):
    """Base of Weather, Movie, Academia, Sheet and TODOList (``family = "tools"``).

    Actions:
        ``Action: <tool> with Action Input: <JSON arguments>`` calling one of the env's tools (listed in the
        instruction; ``tool_schemas()`` in OpenAI's format), or ``finish`` with the answer, read as AgentGym's
        tool servers read it (the call ends the response); with ``detailed_instruction=True`` a bare call and
        function-calling ``<tool_call>`` replies are taken too.

    Rewards:
        1 when ``finish``'s answer (by default also any tool's result) equals the gold answer (Python's ``==``,
        lists sorted; ``lenient_answers=True`` forgives case, units and spellings) or the store reaches the target
        state; else 0. By default an action containing "finish" ends the episode unless AgentGym's ``step`` raises on
        it (an unreadable call, a missing argument, ``finish`` without an answer but in Sheet); our tools' refusals
        end it too, as upstream's tools return theirs. With ``detailed_instruction=True`` only ``finish`` scores and
        ends.
    """

    #: AgentGym's tool conversations answer the instruction with this.
    acknowledgement: ClassVar[str] = "Ok."

    family = "tools"
    subtask: ClassVar[str] = ""
    #: who the agent is and what the service holds (first paragraph of the instruction)
    intro: ClassVar[str] = ""
    #: an example call shown in the instruction
    example_call: ClassVar[str] = ""
    #: whether tasks of this env change data (graded on the final state) rather than ask questions
    stateful: ClassVar[bool] = False
    #: the env's advice after the tool list in AgentGym's instruction (e.g. Weather's "you must call
    #: get_latitude_longitude"), naming our tools
    agentgym_hint: ClassVar[str] = 'If you are finished, you will call "finish" action.'

    def __init__(self, task_id: str, render_mode: str | None = None, detailed_instruction: bool = False,
                 lenient_answers: bool | None = None):
        """``detailed_instruction=True``: our instruction (what the service holds, how answers are graded)
        and plain observations instead of AgentGym's. ``lenient_answers=True``: ``finish`` answers are
        graded by our forgiving rule (``Gold.matches``: case, punctuation, units, number tolerances, lists
        as text) instead of AgentGym's ``==`` (``Gold.matches_as_agentgym``); left out, it follows
        ``detailed_instruction``, whose instruction describes our rule."""
        super().__init__(task_id, render_mode=render_mode)
        self.detailed_instruction = detailed_instruction
        self.lenient_answers = detailed_instruction if lenient_answers is None else bool(lenient_answers)
        self.offset = ENVS[self.subtask][0]
        self.service: Service | None = None
        self.current: ToolTask | None = None
        self._cursor = 0
        self._diverged = False
        self._reached = 0.0  # AgentGym's reward so far: the gold subgoal met by a tool result or finish

    # ---- hooks ----------------------------------------------------------------------------------
    def _open(self, local: int) -> Service:
        """The service for item ``local``, in its initial state for that item."""
        raise NotImplementedError

    def _generate(self, local: int, service: Service) -> ToolTask:
        """The task of item ``local`` (a pure function of ``local``)."""
        raise NotImplementedError

    def _replan(self) -> list[Step]:
        """For stateful envs: a plan from the current state once the agent left the expert's path."""
        return [finish_step()]

    # ---- TextEnv --------------------------------------------------------------------------------
    def accepts_item(self, item_id: int) -> bool:
        """Whether ``item_id`` is one of this env's items (each tool env owns its own block of ids)."""
        return self.offset <= item_id < self.offset + ITEMS_PER_ENV

    def _start(self, item_id: int, rng: np.random.Generator) -> Start:
        local = item_id - self.offset
        self.service = self._open(local)
        self.current = self._generate(local, self.service)
        self._cursor = 0
        self._diverged = False
        self._reached = 0.0
        label = "Task" if self.current.changes_state else "Question"
        question = self.current.question
        first = f"{label}: {question}" if self.detailed_instruction else agentgym_goal(question)
        return Start(self.instruction(), first, {"template": self.current.template})

    def instruction(self) -> str:
        """The episode's instruction: AgentGym's tool list and wording by default, or with ``detailed_instruction``
        our intro, the tools' documentation and the format rules.
        """
        assert self.service is not None
        if not self.detailed_instruction:
            tools = [agentgym_tool_doc(tool) for tool in self.service.TOOLS]
            tools += [AGENTGYM_CHECK_VALID_ACTIONS] if self.agentgym_check_valid_actions else []
            tools.append(self._agentgym_finish_doc())
            return AGENTGYM_PREAMBLE + "\n\n".join(tools) + f"\n\n{self.agentgym_hint}\n{AGENTGYM_FORMAT}"
        if self.stateful:
            finish_rule = (
                "When the task asks for a change, make it with the tools; the task is graded on the data you leave "
                "behind and ends as soon as the data is right, or when you call finish. When the task is a question, "
                'answer it with finish with Action Input: {"answer": <your answer>}.'
            )
        else:
            finish_rule = (
                'When you know the answer, call finish with Action Input: {"answer": <your answer>}: give only the '
                "value (a number without units, a name, a date as YYYY-MM-DD, yes/no, or a JSON list of names). "
                "finish ends the episode."
            )
        rules = FORMAT_RULES.format(example=self.example_call, finish_rule=finish_rule)
        return f"{self.intro}\n\nTools:\n{self.service.tool_docs()}\n\n{rules}"

    #: whether AgentGym's server of this env has ``check_valid_actions`` (Sheet's has not: "Invalid action" there)
    agentgym_check_valid_actions: ClassVar[bool] = True

    def _agentgym_finish_doc(self) -> str:
        """``finish`` in AgentGym's instruction: the question envs' wording, or TODOList's for envs that change data."""
        return AGENTGYM_FINISH_OPERATION if self.stateful else AGENTGYM_FINISH

    def _agentgym_invalid_action(self, head: str) -> str:
        """AgentGym's reply to an unknown tool (not raised: the "finish" test still follows)."""
        return f"ERROR | Invalid action: {head}."

    def tool_schemas(self) -> list[dict[str, Any]]:
        """This env's tools in OpenAI's function-calling format, for function-calling models: pass them as
        ``tools=`` to a chat template or an API; the env accepts the ``<tool_call>`` replies they write."""
        if self.service is None:
            raise RuntimeError("call reset() first: the tools are those of the episode's service")
        return self.service.tool_schemas()

    def _parse(self, response: str) -> ParsedAction:
        """By default AgentGym's tool servers' rule on the whole response (``agentgym_tool_action``: no call ending
        the response is their format error; the rest is read in ``_act_as_agentgym``); ``detailed_instruction=True``:
        our lenient parser (one ``Action:`` line, a bare one-line call, an input over several lines, prose after
        the call, function-calling ``<tool_call>`` replies)."""
        if self.detailed_instruction:
            return parse_response(response)
        action = agentgym_tool_action(response)
        return ParsedAction(None, AGENTGYM_FORMAT_ERROR) if action is None else ParsedAction(action)

    def _shown(self, observation: str) -> str:
        """By default every answer but the format error wrapped as AgentGym's servers do."""
        if not self.detailed_instruction and observation != AGENTGYM_FORMAT_ERROR:
            return agentgym_observation(observation)
        return observation

    #: whether AgentGym's server ends an episode on "finish" in any case (Sheet) or only "finish"/"Finish"
    agentgym_finish_any_case: ClassVar[bool] = False

    def _agentgym_ends(self, action: str) -> bool:
        """AgentGym's tool envs end an episode on any action whose text contains "finish" or "Finish"."""
        if self.agentgym_finish_any_case:
            return "finish" in action.lower()
        return "finish" in action or "Finish" in action

    def _act(self, action: str) -> Outcome:
        assert self.service is not None and self.current is not None, "call reset() first"
        if not self.detailed_instruction:
            return self._act_as_agentgym(action)
        try:
            call = parse_call(action)
        except ToolError as error:
            return Outcome(f"Error: {error}", valid=False)
        if call.tool == "check_valid_actions":  # AgentGym's tool servers list their actions
            names = [tool.name for tool in self.service.TOOLS] + ["check_valid_actions", "finish"]
            return Outcome(f"You can use following valid actions: {names}", info={"tool": call.tool})
        if call.tool == "finish":
            return self._finish(call)
        result = self.service.call(call)
        self._follow(call, result.ok, result.wrote)
        if result.ok and result.wrote and self.current.changes_state and self._state_reached():
            return Outcome(f"{result.text}\nThe task is complete.", progress=1.0, score=1.0, done=True, success=True)
        return Outcome(result.text, valid=result.ok, info={"tool": call.tool})

    def _act_as_agentgym(self, action: str) -> Outcome:
        """AgentGym's tool step, in its order: the Action Input read as a Python literal; the tool picked by name (an
        unknown one ``ERROR | Invalid action: x.``); the input indexed by the arguments the tool reads (a missing one
        is upstream's ``KeyError``, a non-dict input its ``TypeError``: raised inside its ``try``, whose ``except``
        returns before the "finish" test, so the episode goes on with the reward unchanged); then the tool runs on
        the arguments it reads (others are ignored, as upstream passes only those). Every other answer, our tools'
        refusals included (upstream's tools return theirs as values), ends the episode when the action contains
        "finish" (``_agentgym_ends``). Every successful tool result is recorded as a subgoal, so a result equal to
        the gold answer wins as ``finish`` with it does."""
        assert self.service is not None and self.current is not None
        ends = self._agentgym_ends(action)
        try:
            head, arguments = python_call_parts(action)
        except ToolError as error:  # AgentGym's env returns before its "finish" test: the episode goes on
            return self._agentgym_outcome(str(error), False, valid=False, parsed=False)
        if head == "check_valid_actions" and self.agentgym_check_valid_actions:
            names = [tool.name for tool in self.service.TOOLS] + ["check_valid_actions", "finish"]
            return self._agentgym_outcome(f"You can use following valid actions: {names}", ends,
                                          info={"tool": head})
        tool = self.service.tool(head)
        if tool is None:
            return self._agentgym_outcome(self._agentgym_invalid_action(head), ends, valid=False)
        raised = agentgym_read_error(arguments, self._agentgym_reads(tool))
        if raised is not None:
            return self._agentgym_outcome(raised, False, valid=False, info={"tool": head})
        known = {param.name for param in tool.params}
        call = Call(head, {k: v for k, v in arguments.items() if k in known} if isinstance(arguments, dict) else {})
        if tool is FINISH:
            return self._finish_as_agentgym(call, ends)
        result = self.service.call(call)
        self._follow(call, result.ok, result.wrote)
        if not result.ok:  # our tool's refusal: upstream's tools return theirs, so "finish" still ends
            return self._agentgym_outcome("ERROR | " + result.text.removeprefix("Error: "), ends, valid=False,
                                          info={"tool": head})
        gold = self.current.gold
        if gold is not None and self._agentgym_subgoal_met(result.value):
            self._reached = 1.0
        if result.wrote and self.current.changes_state and self._state_reached() and self._ends_when_state_reached:
            return Outcome(f"{result.text}\nThe task is complete.", progress=1.0, score=1.0, done=True, success=True)
        return self._agentgym_outcome(result.text, ends, info={"tool": head})

    #: whether AgentGym's ``finish`` reads an ``answer`` (Weather, Movie, Academia, TODOList); Sheet's takes none
    agentgym_finish_takes_answer: ClassVar[bool] = True

    def _agentgym_reads(self, tool: Tool) -> tuple[str, ...]:
        """The arguments AgentGym's ``step`` indexes the Action Input by (``params["x"]``) before the tool runs: our
        tool's required ones (upstream reads each tool's own), ``finish``'s ``answer`` unless Sheet."""
        if tool is FINISH:
            return ("answer",) if self.agentgym_finish_takes_answer else ()
        return tuple(param.name for param in tool.params if param.required)

    #: whether a state task ends as soon as the data is right (Sheet's kept rule); TODOList: at finish
    _ends_when_state_reached: ClassVar[bool] = True

    def _agentgym_subgoal_met(self, value: Any) -> bool:
        """Whether a tool result (or ``finish``'s answer) equals the gold subgoal, as AgentGym compares them."""
        gold = self.current.gold if self.current else None
        if gold is None or isinstance(value, bool):
            return False
        return bool(value == gold.agentgym_subgoal)

    def _agentgym_outcome(self, text: str, ends: bool, valid: bool = True,
                          info: dict[str, Any] | None = None, parsed: bool = True) -> Outcome:
        """A step's outcome with AgentGym's reward so far; ``ends``: the action said "finish"; ``parsed=False``: the
        call could not be read (upstream's ``step`` returned at once)."""
        won = self._reached >= 1.0
        return Outcome(text, progress=self._reached, score=self._reached, done=ends, success=won, valid=valid,
                       info=info or {})

    def _finish(self, call: Call, ends: bool = True) -> Outcome:
        task = self.current
        assert task is not None
        if not self.detailed_instruction:
            return self._finish_as_agentgym(call, ends)
        try:
            FINISH.check_arguments(call.arguments)
        except ToolError as error:
            return Outcome(f"Error: {error}", valid=False)
        answer = call.arguments.get("answer")
        if task.gold is not None:
            if answer is None:
                return Outcome(
                    "Error: finish: this question needs an answer; "
                    'call finish with Action Input: {"answer": <your answer>}.',
                    valid=False,
                )
            success = task.gold.matches(answer) if self.lenient_answers else task.gold.matches_as_agentgym(answer)
            verdict = (
                "correct" if success else f"not correct (expected {json.dumps(task.gold.value, ensure_ascii=False)})"
            )
            text = f"Episode finished. Your answer {json.dumps(answer, ensure_ascii=False)} is {verdict}."
        else:
            success = self._state_reached()
            text = "Episode finished. " + (
                "The data matches the task." if success else "The data does not match what the task asked for."
            )
        if not self.detailed_instruction:
            text = agentgym_answer(answer)
        return Outcome(text, progress=float(success), score=float(success), done=True, success=success)

    def _finish_as_agentgym(self, call: Call, ends: bool) -> Outcome:
        """AgentGym's ``finish``: its answer (a list sorted) is recorded as a subgoal and shown (Sheet: the open sheet,
        ``_agentgym_finish_text``). A missing answer is upstream's ``KeyError``, raised inside its ``try``, whose
        ``except`` returns before the "finish" test, so the episode goes on (Sheet's ``finish`` reads no answer).
        Question tasks are won by an answer ``==`` the gold (``lenient_answers=True``: our rule)."""
        if self.agentgym_finish_takes_answer and "answer" not in call.arguments:
            return self._agentgym_outcome("ERROR | KeyError('answer')", False, valid=False)
        answer = call.arguments.get("answer")
        reason = unprintable(answer) if self.agentgym_finish_takes_answer else None
        if reason is not None:  # upstream's print of it raises inside its try: an error, the episode goes on
            return self._agentgym_outcome(f"ERROR | finish: the answer cannot be used: {reason}.", False, valid=False)
        if self._finish_meets_subgoal(answer):
            self._reached = 1.0
        return self._agentgym_outcome(self._agentgym_finish_text(answer), ends)

    def _agentgym_finish_text(self, answer: Any) -> str:
        """What AgentGym's ``finish`` answers: the answer as Python prints it (a list sorted)."""
        return agentgym_answer(answer)

    def _finish_meets_subgoal(self, answer: Any) -> bool:
        """Whether ``finish``'s answer meets the task's subgoal: the gold answer for a question (AgentGym's ``==``
        or, with ``lenient_answers=True``, our rule); for a change, the data being right (Sheet's kept rule)."""
        task = self.current
        if task.gold is not None:
            return task.gold.matches(answer) if self.lenient_answers else task.gold.matches_as_agentgym(answer)
        return self._state_reached()

    def _state_reached(self) -> bool:
        assert self.service is not None and self.current is not None
        return self.service.state() == self.current.target

    # ---- oracle ---------------------------------------------------------------------------------
    def _follow(self, call: Call, ok: bool, wrote: bool) -> None:
        """Advance the expert's plan when the agent made its next call; note writes that leave it."""
        plan = self.current.plan if self.current else []
        if ok and self._cursor < len(plan) and plan[self._cursor].call.key() == call.key():
            self._cursor += 1
        elif ok and wrote:
            self._diverged = True

    def oracle_action(self) -> str:
        """The expert's next call: the task's plan in order, or, once the agent changed the data its own way, a plan
        made again from the current state (``_replan``).
        """
        assert self.current is not None, "call reset() first"
        if self._diverged:
            self.current.plan = self._replan()
            self._cursor = 0
            self._diverged = False
        plan = self.current.plan
        next_step = plan[self._cursor] if self._cursor < len(plan) else plan[-1]
        return f"Thought: {next_step.thought}\n\nAction: {self._render(next_step.call)}"

    def _render(self, call: Call) -> str:
        """A call as the agent writes it: a Python literal as Action Input by default (AgentGym's servers read
        Python), JSON with ``detailed_instruction=True``."""
        if self.detailed_instruction:
            return call.render()
        return f"{call.tool} with Action Input: {python_literal(call.arguments)}"

    def random_action(self, rng: np.random.Generator) -> str:
        """A random tool with plausible argument values drawn from the service's data."""
        assert self.service is not None, "call reset() first"
        tools = (*self.service.TOOLS, FINISH)
        tool = tools[int(rng.integers(len(tools)))]
        arguments = {
            p.name: self.service.example_value(p, rng) for p in tool.params if p.required or rng.random() < 0.5
        }
        return f"Thought: Let me try {tool.name}.\n\nAction: {self._render(Call(tool.name, arguments))}"

    def _release(self) -> None:
        if self.service is not None:
            self.service.close()
            self.service = None


class SharedWorldEnv(ToolEnv):
    """A tool env whose tasks only read one seeded world: the service is built on the first reset and
    reused by every later episode of this env (building it costs far more than an episode).

    A member declares ``service_class``, ``build_world`` (the cached master copy of the world; each env
    serves a clone) and ``generate_task(service, local)``; this class does the rest.
    """

    service_class: ClassVar[type[Service]] = Service
    build_world: ClassVar[Callable[[], sqlite3.Connection]]
    generate_task: ClassVar[Callable[[Any, int], ToolTask]]

    def __init__(self, task_id: str, render_mode: str | None = None, detailed_instruction: bool = False,
                 lenient_answers: bool | None = None):
        super().__init__(task_id, render_mode=render_mode, detailed_instruction=detailed_instruction,
                         lenient_answers=lenient_answers)
        self._shared: Service | None = None

    def _make_service(self) -> Service:
        """A fresh service over a clone of this env's world."""
        return self.service_class(clone(type(self).build_world()))

    def _generate(self, local: int, service: Service) -> ToolTask:
        assert isinstance(service, self.service_class)
        return type(self).generate_task(service, local)

    def _open(self, local: int) -> Service:
        if self._shared is None:
            self._shared = self._make_service()
        return self._shared

    def _release(self) -> None:
        if self._shared is not None:
            self._shared.close()
        self._shared = None
        self.service = None


class ItemWorldEnv(ToolEnv):
    """A tool env whose every item has a store of its own (its tasks change data): the store and the
    task are generated together by ``_open_item``, the store is replaced at every reset."""

    def _open_item(self, local: int) -> tuple[Service, ToolTask]:
        """The service for item ``local`` in its initial state, and the item's task."""
        raise NotImplementedError

    def _open(self, local: int) -> Service:
        self._release()
        service, self._pending = self._open_item(local)
        return service

    def _generate(self, local: int, service: Service) -> ToolTask:
        return self._pending
