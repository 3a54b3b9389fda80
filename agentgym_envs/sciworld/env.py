"""ScienceWorld as a text Gymnasium env (``AgentGym/SciWorld-v0`` and five sub-task ids).

An item id names a (task type, variation) pair (see ``catalog.py``). The first observation is the
task description and the room the agent starts in; then every action's text from the simulator.
``info["score"]`` is the simulator's 0-100 score, the reward its increase in points as AgentGym's server
sends it (``normalized_reward=True``: in hundredths, so rewards sum to score / 100), and
``info["success"]`` is set when the simulator declares the task completed.

The simulator runs in a JVM owned by the env (``jvm.py``): started at the first reset, reused by
the following ones, stopped by ``close()``. If it dies or hangs, the episode in flight ends
truncated with ``info["engine_error"]``, and the next reset starts a new JVM.
"""

from __future__ import annotations

import difflib
import json
from collections import OrderedDict
from functools import lru_cache
from importlib import resources
from typing import Any

import numpy as np

from agentgym_envs.core import Outcome, ParsedAction, Start, TextEnv, normalize_command, require
from agentgym_envs.core.parsers import parse_agentgym_react, react_response
from agentgym_envs.sciworld.catalog import TaskType, decode
from agentgym_envs.sciworld.jvm import JvmConfig, ScienceWorldJvm, SimulatorCrashed, SimulatorRejected

INSTRUCTION = """You are an agent in ScienceWorld. Each round you receive an observation and must answer with one \
action, based on that observation, that moves you toward finishing the task. These are the actions you can take (OBJ \
is an object, LOC a location):
- open OBJ / close OBJ: open or close a container
- activate OBJ / deactivate OBJ: switch a device on or off
- connect OBJ to OBJ: connect electrical components
- disconnect OBJ: disconnect electrical components
- use OBJ [on OBJ]: use a device or an item
- look around: describe the room you are in
- look at OBJ: describe an object in detail
- look in OBJ: describe what a container holds
- read OBJ: read a note or a book
- move OBJ to OBJ: move an object into a container
- pick up OBJ: put an object in your inventory
- put down OBJ: drop an item from your inventory
- pour OBJ into OBJ: pour a liquid into a container
- dunk OBJ into OBJ: dunk a container into a liquid
- mix OBJ: chemically mix a container
- go to LOC: move to another location
- eat OBJ: eat a food
- flush OBJ: flush a toilet
- focus on OBJ: signal that this object is the one the task is about
- wait: do nothing for 10 iterations
- wait1: do nothing for 1 iteration
- examine OBJ: describe the objects on or in a receptacle
- task: describe the current task
- inventory: list your inventory
Answer in this format:
Thought:
your thoughts.

Action:
your next action"""

#: Our longer instruction, shown with ``extra_feedback=True`` (it describes the extra feedback).
FEEDBACK_INSTRUCTION = (
    "You are a scientist in ScienceWorld, a text simulation of a house with a kitchen, a workshop, a greenhouse, "
    "an art studio and other rooms. Each episode gives you one science task (measuring a melting point, testing "
    "electrical conductivity, finding a living thing, mixing chemicals, comparing lifespans, ...). Complete it by "
    "exploring and using the objects around you. Partial progress earns partial score."
    """

Commands (OBJ and LOC are names as they appear in the text):
- look around: describe the room you are in
- look at OBJ / look in OBJ / examine OBJ / read OBJ: inspect something
- go to LOC: walk to an adjacent room (its door must be open)
- open OBJ / close OBJ
- pick up OBJ / put down OBJ / move OBJ to OBJ: carry or place things
- pour OBJ into OBJ / dunk OBJ into OBJ / mix OBJ
- activate OBJ / deactivate OBJ: switch devices such as a stove or a sink on or off
- connect OBJ to OBJ / disconnect OBJ: wire up electrical components
- use OBJ on OBJ: use a tool, e.g. a thermometer on a substance
- eat OBJ / flush OBJ
- focus on OBJ: declare the object the task is about. Focus only on what the task asks for: focusing on the
  wrong object fails the task.
- wait / wait1: let 10 steps / 1 step of time pass
- inventory / task: show what you carry / repeat the task
- check valid actions: list every command that works right now

If the simulator asks which of several objects you meant, answer with the number of your choice; any other
command cancels the question.

Every turn, answer in this format and give exactly one command:
Thought:
<your reasoning>

Action:
<the command>"""
)

#: Simulator replies that mean the command was not understood (nothing happened).
_NOT_UNDERSTOOD = ("No known action matches that input.", "Unknown action.")
_AMBIGUOUS = "Ambiguous request"
#: The simulator's command verbs, longest first so 'look around' wins over 'look'.
_VERBS = sorted(
    ["activate", "close", "connect", "deactivate", "disconnect", "dunk", "eat", "examine", "flush", "focus on", "go to",
     "inventory", "look around", "look at", "look in", "mix", "move", "open", "pick up", "pour", "put down", "read",
     "task", "use", "wait", "wait1"],
    key=len,
    reverse=True,
)
_LIST_COMMANDS = {
    "check valid actions", "check valid action", "valid actions", "check available actions", "available actions",
}
_MAX_COMMAND_LENGTH = 300
_GOLD_CACHE_SIZE = 4096
_generated_gold: OrderedDict[tuple[str, int], tuple[str, ...]] = OrderedDict()


@lru_cache(maxsize=1)
def stored_gold() -> dict[int, tuple[str, ...]]:
    """Gold action sequences shipped for the test items (``gold.json``, built by ``build_splits``)."""
    path = resources.files("agentgym_envs.sciworld").joinpath("gold.json")
    with path.open("r", encoding="utf-8") as handle:
        return {int(item): tuple(actions) for item, actions in json.load(handle).items()}


class SciWorldEnv(TextEnv):
    """A ScienceWorld task (type and variation) in the simulator's own text, in a JVM the env owns.

    Actions:
        ScienceWorld's commands (``look around``, ``open door to kitchen``, ``pick up thermometer``,
        ``focus on ...``, ``wait``, ...) as the simulator parses them. As on AgentGym's server, the episode
        starts with a ``look around`` move (some tasks score it), and every command reaches the simulator as
        AgentGym's client extracts it (the text after the last ``Action:``; none: the empty command): the
        empty command, ``check valid actions``, ``reset task``, any length or language; after "Ambiguous
        request" the next command is the simulator's answer. ``extra_feedback=True``: the first look is free,
        a bare one-line command is taken, commands are lower-cased and trimmed, an empty, over-long
        (300 characters) or non-ASCII command and ``reset task`` are refused with an explanation,
        ``check valid actions`` lists the valid commands, and a command other than a number cancels a
        pending question.

    Rewards:
        The increase of the simulator's 0-100 score, in points, as AgentGym's server sends it: an episode's rewards
        sum to its final score (-100 for a failed task; ``nonnegative_reward=True`` floors it at 0), the reward
        AgentGym-RL trains on. ``normalized_reward=True``: the same divided by 100 (rewards sum to score / 100,
        in [-1, 1]), on the 0-1 scale of the other families.
    """

    family = "sciworld"
    #: AgentGym's client runs the last of two ``Action:`` lines (a real command): the bad-response check uses ours
    bad_action_check_kwargs = {"extra_feedback": True}

    def __init__(
        self,
        task_id: str,
        render_mode: str | None = None,
        heap_mb: int | None = None,
        step_timeout: float | None = None,
        load_timeout: float | None = None,
        start_timeout: float | None = None,
        extra_feedback: bool = False,
        nonnegative_reward: bool = False,
        normalized_reward: bool = False,
    ):
        """By default the env answers as AgentGym's ScienceWorld server: the simulator's own text,
        and its score's increase in points as the reward, a failed task's negative score passed on (rewards
        sum to the score, -100 on failure). ``extra_feedback=True`` adds our notes (closest valid commands for
        a command the simulator does not understand, "the task is complete" / "has failed");
        ``nonnegative_reward=True`` floors the outcome at 0; ``normalized_reward=True`` divides rewards by 100
        (one scale with the other families, for estimators that are not scale-free). ``info["score"]`` is the
        simulator's score (-100..100) either way."""
        super().__init__(task_id, render_mode=render_mode)
        self.extra_feedback = extra_feedback
        self.points_per_reward = 100.0 if normalized_reward else 1.0
        self.max_progress = 100.0 / self.points_per_reward
        self.min_progress = 0.0 if nonnegative_reward else -self.max_progress
        require("scienceworld", extra="sciworld")
        self._jvm_config = JvmConfig.from_environment(
            heap_mb=heap_mb, step_timeout=step_timeout, load_timeout=load_timeout, start_timeout=start_timeout
        )
        self._jvm: ScienceWorldJvm | None = None
        self._task_type: TaskType | None = None
        self._variation = 0
        self._sent: list[tuple[str, bool]] = []  # (command, from the agent?) sent to the simulator this episode
        self._gold: tuple[str, ...] | None = None
        self._awaiting_choice = False
        self._lost: str | None = None
        self._valid_cache: tuple[int, list[str]] | None = None

    # ---- episode ------------------------------------------------------------------------------
    @property
    def jvm(self) -> ScienceWorldJvm:
        """This env's simulator JVM (created lazily; the process itself starts at the first load)."""
        if self._jvm is None:
            self._jvm = ScienceWorldJvm(self._jvm_config)
        return self._jvm

    def _start(self, item_id: int, rng: np.random.Generator) -> Start:
        task, variation = decode(item_id)
        self._task_type, self._variation = task, variation
        self._sent = []
        self._gold = stored_gold().get(item_id) or _generated_gold.get((task.name, variation))
        self._awaiting_choice = False
        self._lost = None
        self._valid_cache = None
        failure: Exception | None = None
        for _ in range(2):  # a JVM found dead here is restarted once before giving up
            try:
                # AgentGym's /reset steps "look around" (a move, which some tasks score); ours is free
                description, room = self.jvm.start_episode(task.name, variation, free_look=self.extra_feedback)
                break
            except SimulatorCrashed as error:
                failure = error
        else:
            raise RuntimeError(f"ScienceWorld could not start item {item_id}: {failure}") from failure
        if not self.extra_feedback:
            self._sent.append(("look around", False))
        info = {"sciworld_task": task.name, "sciworld_task_number": task.number, "variation": variation,
                "task_description": description, "first_look": room.rstrip()}  # AgentGym's /reset sends these apart
        if self.extra_feedback:
            return Start(FEEDBACK_INSTRUCTION, f"{description.strip()}\n\n{room.strip()}", info)
        # as AgentGym's client joins them; its "look around" step has no trailing newline
        return Start(INSTRUCTION, f"{description}\n{room.rstrip()}", info)

    def _parse(self, response: str) -> ParsedAction:
        """As AgentGym's client; ours with ``extra_feedback=True`` (``parse_agentgym_react``)."""
        return parse_agentgym_react(response, self.extra_feedback)

    def _act(self, action: str) -> Outcome:
        if self._lost is not None:
            return self._lost_outcome()
        if self.extra_feedback:
            command = normalize_command(action)
            problem = self._reject(command)
            if problem is not None:
                return self._keep(problem, valid=False)
            if command in _LIST_COMMANDS:
                return self._list_valid_actions()
        else:  # AgentGym's server sends every command to the simulator as its client extracted it
            command = action
        try:
            if self._awaiting_choice and self.extra_feedback and not command.isdigit():
                self._send("", by_agent=False)  # a blank line cancels the simulator's "which one did you mean?"
            result = self._send(command, by_agent=True)
        except SimulatorCrashed as error:
            self._lost = str(error)
            return self._lost_outcome()
        except SimulatorRejected as error:
            message = f"The simulator could not carry out '{command}' ({error}). Try another command."
            return self._keep(message, valid=False)
        refusal = next((reply for reply in _NOT_UNDERSTOOD if result.observation.startswith(reply)), None)
        understood = refusal is None
        self._awaiting_choice = result.observation.startswith(_AMBIGUOUS)
        score = int(round(100 * result.score))
        failed = score < 0
        success = result.completed and not failed
        observation = result.observation
        if self.extra_feedback:
            observation = observation.strip()
            if not understood:
                observation = f"{refusal} {self._hint(command)}"
            elif success:
                observation += "\n\nThe task is complete."
            elif failed:
                observation += "\n\nThat was not what the task asked for: the task has failed and the episode is over."
        return Outcome(
            observation,
            progress=score / self.points_per_reward,
            score=float(score),
            done=success or failed,
            success=success,
            valid=understood,
        )

    def _send(self, command: str, by_agent: bool) -> Any:
        self._sent.append((command, by_agent))
        self._valid_cache = None
        return self.jvm.step(command)

    # ---- the text interface's own rules -------------------------------------------------------
    @staticmethod
    def _reject(command: str) -> str | None:
        """Why a command cannot be sent to the simulator, or ``None`` if it can."""
        if not command:
            return "The command is empty. Write one ScienceWorld command, e.g. 'look around'."
        if len(command) > _MAX_COMMAND_LENGTH:
            return (
                f"That command is {len(command)} characters long; ScienceWorld commands are short "
                "(e.g. 'open door to kitchen'). Write one command."
            )
        if not command.isascii():
            return (
                "ScienceWorld understands plain English commands made of words and numbers, "
                "e.g. 'pick up thermometer' or 'go to kitchen'. Send 'check valid actions' to list them."
            )
        if command == "reset task":
            return "'reset task' is not available: each episode is one attempt. Continue with another command."
        return None

    def _hint(self, command: str) -> str:
        """A pointer to the closest valid commands (valid actions are computed only here, on demand).

        The verb is matched first ('opne door' -> 'open'), then the closest commands with that verb:
        comparing whole strings would mostly suggest 'connect ...', the largest group.
        """
        try:
            valid = self.valid_actions()
        except (SimulatorCrashed, SimulatorRejected):
            valid = []
        target = command
        verb = next((v for v in _VERBS if command == v or command.startswith(v + " ")), None)
        if verb is None:
            first = command.split(" ", 1)
            guess = difflib.get_close_matches(first[0], [v for v in _VERBS if " " not in v], n=1, cutoff=0.6)
            if guess:
                verb = guess[0]
                target = " ".join([verb, *first[1:]])
        same_verb = [a for a in valid if verb is not None and (a == verb or a.startswith(verb + " "))]
        pool = same_verb or valid
        close = difflib.get_close_matches(target, pool, n=3, cutoff=0.5)
        suggestion = f" Did you mean: {', '.join(repr(c) for c in close)}?" if close else ""
        return (
            f"'{command}' is not a command ScienceWorld understands here.{suggestion} "
            "Send 'check valid actions' to list every command that works now."
        )

    def _list_valid_actions(self) -> Outcome:
        try:
            actions = self.valid_actions()
        except SimulatorCrashed as error:
            self._lost = str(error)
            return self._lost_outcome()
        except SimulatorRejected as error:
            return self._keep(f"The simulator could not list its valid actions ({error}).", valid=False)
        return self._keep("Valid actions:\n" + "\n".join(actions), valid=True)

    def _keep(self, observation: str, valid: bool) -> Outcome:
        """An outcome that leaves the episode as it is (no simulator step)."""
        return Outcome(observation, progress=self._progress, score=self._score, valid=valid)

    def _lost_outcome(self) -> Outcome:
        return Outcome(
            f"The ScienceWorld simulator stopped ({self._lost}). "
            "This episode cannot continue; call reset() to start a new one.",
            progress=self._progress,
            score=self._score,
            valid=False,
            truncated=True,
            info={"engine_error": self._lost},
        )

    # ---- actions on demand, oracle, random agent ----------------------------------------------
    def valid_actions(self) -> list[str]:
        """Every command that works in the current state, sorted (asks the simulator: tens of ms)."""
        if self._lost is not None:
            raise SimulatorCrashed(self._lost)
        if self._valid_cache is None or self._valid_cache[0] != len(self._sent):
            self._valid_cache = (len(self._sent), sorted(set(self.jvm.valid_actions()) - {"reset task"}))
        return list(self._valid_cache[1])

    def gold_actions(self) -> tuple[str, ...]:
        """The simulator's gold action sequence for this episode (shipped for test items, else planned once)."""
        assert self._task_type is not None, "call reset() first"
        if self._gold is None:
            key = (self._task_type.name, self._variation)
            self.jvm.load(key[0], key[1], gold=True)
            gold = tuple(self.jvm.gold_actions())
            # reload without the planner and replay this episode so far: the world is exactly as before
            self.jvm.load(key[0], key[1])
            for command, _ in self._sent:
                self.jvm.step(command)
            self._valid_cache = None
            _generated_gold[key] = gold
            while len(_generated_gold) > _GOLD_CACHE_SIZE:
                _generated_gold.popitem(last=False)
            self._gold = gold
        return self._gold

    def oracle_action(self) -> str:
        """The next gold action, counting the gold actions this episode has sent in order.

        A gold action counts once sent, understood or not: the gold agent's plan contains a few
        commands the simulator refuses at that point (e.g. naming a substance by a state it has not
        reached yet), and the plan still succeeds without them.
        """
        assert self._task_type is not None, "call reset() first"
        if self._lost is not None:
            return "Thought:\nThe simulator stopped; nothing I do will count.\n\nAction:\nlook around"
        try:
            gold = self.gold_actions()
        except (SimulatorCrashed, SimulatorRejected) as error:
            self._lost = str(error)
            return "Thought:\nThe simulator stopped; nothing I do will count.\n\nAction:\nlook around"
        position = 0
        for command, by_agent in self._sent:
            if by_agent and position < len(gold) and normalize_command(command) == normalize_command(gold[position]):
                position += 1
        if position >= len(gold):
            return "Thought:\nI have carried out the whole plan.\n\nAction:\nlook around"
        return f"Thought:\nStep {position + 1} of {len(gold)} of my plan.\n\nAction:\n{gold[position]}"

    def random_action(self, rng: np.random.Generator) -> str:
        """A valid command: first a random verb, then a random command using it (so 'connect' does not dominate)."""
        try:
            actions = self.valid_actions()
        except (SimulatorCrashed, SimulatorRejected):
            return react_response("look around")
        if not actions:
            return react_response("look around")
        by_verb: dict[str, list[str]] = {}
        for action in actions:
            by_verb.setdefault(action.split(" ", 1)[0], []).append(action)
        verbs = sorted(by_verb)
        choices = by_verb[verbs[int(rng.integers(len(verbs)))]]
        return react_response(choices[int(rng.integers(len(choices)))])

    def accepts_item(self, item_id: int) -> bool:
        """Whether ``item_id`` decodes to a variation of one of this env's task types."""
        try:
            task, _ = decode(item_id)
        except KeyError:
            return False
        return task.subtask in self.task.subtasks

    def _release(self) -> None:
        if self._jvm is not None:
            self._jvm.close()
            self._jvm = None
        self._lost = None
