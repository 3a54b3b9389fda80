"""``TextEnv``: the Gymnasium env every AgentGym task is built on.

The base class owns everything the families share, so a family only writes its engine:

* item selection: ``reset(options={"item_id": 17})``, ``{"split": "test", "index": 3}``,
  ``{"split": "test"}`` (a random item of that split) or nothing (a random train item);
* the raw model response goes through the family's parser; an unparseable or invalid action
  never raises: the observation explains it, reward 0, ``info["valid_action"] = False``; an
  input error that escapes a family (``ACTION_ERRORS``) is answered the same way and marked
  ``info["action_error"]``, which the conformance checks treat as a bug to fix in the family;
* observations and info are always valid UTF-8 (``core.safety.valid_utf8``), whatever an
  engine echoes back of the agent's text; ``item_id`` and ``index`` must be ints;
* rewards are differences of a progress value, so an episode's rewards always sum to its final
  outcome on the scale upstream's server rewards it (0 to 1 for most families; ScienceWorld's
  points, -100 to 100; Maze's -1 on failure);
* ``info`` always carries ``task``, ``item_id``, ``split``, ``valid_action``, ``score``,
  ``success`` and ``turn`` (plus ``instruction`` after reset, ``available_actions`` where the
  action set is finite, and after each step ``parsed_action``: the action the parser took from the
  response and the engine was given, or None when none was, so a record can show what was played);
* ``render_mode="ansi"`` returns the last action and observation as text;
* ``close()`` ends the episode like Gymnasium's other envs: ``step`` then raises
  ``gym.error.ResetNeeded`` (as before the first ``reset``) for every id, and ``reset`` starts a
  new episode (engines are started again as needed).

A family subclass sets ``family`` and implements ``_start``, ``_act`` and, if it owns an engine
process, ``_release``. See ``agentgym_envs/textcraft/env.py`` for a complete small example.
"""

from __future__ import annotations

import copy
import importlib.util
import logging
import pickle
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from agentgym_envs.core.extras import MissingExtraError, not_installed
from agentgym_envs.core.parsers import ParsedAction, parse_react
from agentgym_envs.core.safety import valid_utf8
from agentgym_envs.core.spaces import TextSpace
from agentgym_envs.core.tasks import TaskSpec, get_task, load_splits

#: The feedback on an action holding a lone surrogate (half of a UTF-16 pair, U+D800-U+DFFF): it cannot be
#: encoded, so it never reaches an engine (ScienceWorld's JVM session died of one, a browser raised on it).
UNENCODABLE_ACTION = ("Your action contains a character that cannot be encoded (a lone surrogate, U+D800-U+DFFF). "
                      "Write the action in plain text.")

logger = logging.getLogger(__name__)

#: Errors a hostile action can raise deep inside an engine (``int()`` of a 5,000-digit number, an
#: index past a list's end, ...). ``step`` turns them into invalid-action feedback so the episode
#: goes on, logs them and marks ``info["action_error"]``: the conformance checks count that key,
#: so each such error is still fixed where it arises.
ACTION_ERRORS = (ValueError, ArithmeticError, RecursionError, LookupError, TypeError, UnicodeError)

#: A leading action marker in another case (``action: go north``), which ``action_response`` writes as ``Action:``.
_LOWER_MARKER = re.compile(r"^\s*action\s*:", re.IGNORECASE)


@dataclass
class Start:
    """What a family returns when an episode starts."""

    instruction: str
    observation: str
    info: dict[str, Any] = field(default_factory=dict)


class EnvCopyError(TypeError):
    """``copy.deepcopy`` or ``pickle`` of an env whose engine cannot be copied; the message names the id."""


@dataclass
class Outcome:
    """What a family returns for one action.

    ``progress`` is the outcome so far on the family's reward scale, in ``[min_progress, max_progress]``
    (the base turns its increase into the reward); ``score`` is the engine's native score (e.g.
    ScienceWorld's 0-100).
    ``valid=False`` marks an action the engine rejected; the observation must say why.
    """

    observation: str
    progress: float = 0.0
    score: float = 0.0
    done: bool = False
    success: bool = False
    valid: bool = True
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)



def ansi_frame(last_action: str | None, last_observation: str) -> str:
    """What ``render()`` shows in ``"ansi"`` mode, locally and through the server alike: the last
    action as ``> action`` (none before the first step), then the observation it produced."""
    action = "" if last_action is None else f"> {last_action}\n"
    return f"{action}{last_observation}\n"

class TextEnv(gym.Env[str, str]):
    """A text-in, text-out Gymnasium env over one task id (or a whole family)."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 4}
    family: ClassVar[str] = ""
    max_observation_length: ClassVar[int] = 64_000
    max_action_length: ClassVar[int] = 16_000
    #: The lowest and highest outcome an episode can have, on the scale AgentGym's server rewards it:
    #: [0, 1] for most families; a negative floor where the engine scores failures negatively and
    #: AgentGym passes that on (ScienceWorld, Maze); ScienceWorld's points by default.
    min_progress: float = 0.0
    max_progress: float = 1.0
    #: The assistant turn between the instruction and the first observation in AgentGym's
    #: conversations (``info["acknowledgement"]`` at reset; see ``agents.first_messages``).
    acknowledgement: ClassVar[str] = "OK. I'll follow your instructions and try my best to solve the task."

    def __init__(self, task_id: str, render_mode: str | None = None, default_split: str = "train"):
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']} or None, got {render_mode!r}")
        self.task: TaskSpec = get_task(task_id)
        if self.task.family != self.family:
            raise ValueError(f"{task_id} belongs to family {self.task.family!r}, not {self.family!r}")
        if not self.task.extra_installed():  # at make, not at the first reset (Gymnasium's convention)
            missing = [module for module in self.task.requires if importlib.util.find_spec(module) is None]
            needs = not_installed(missing) if missing else "a program that is not installed"  # e.g. Chromium
            raise MissingExtraError(f"{task_id} needs {needs}. Install it with: {self.task.install_hint}")
        self.render_mode = render_mode
        self.default_split = default_split
        self.observation_space = TextSpace(self.max_observation_length)
        self.action_space = TextSpace(self.max_action_length)
        self._splits = {name: self.task.split(name) for name in ("train", "test")}
        self._split_of = {item: name for name, items in self._splits.items() for item in items}
        table = load_splits(self.family)
        self._subtask_of = {item: sub for sub in self.task.subtasks
                            for ids in table.get(sub, {}).values() for item in ids}
        self.item_id: int | None = None
        self.split: str | None = None
        self._reset_seed: int | None = None
        self._progress = 0.0
        self._score = 0.0
        self._success = False
        self._done = False
        self._turn = 0
        self._last_action: str | None = None
        self._parsed_action: str | None = None
        self._last_observation = ""
        self._closed = False
        #: The turns this env's episodes run under: its ``TimeLimit``, told by ``TurnBudget`` when ``gym.make`` builds
        #: it (``max_episode_steps``, else the registered cap); None without a ``TimeLimit``.
        self.turn_budget: int | None = None

    # ---- family hooks -------------------------------------------------------------------------
    def _start(self, item_id: int, rng: np.random.Generator) -> Start:
        """Begin the episode of ``item_id``; must be a pure function of ``item_id`` (and ``rng``)."""
        raise NotImplementedError

    def _act(self, action: str) -> Outcome:
        """Apply one parsed action string to the engine."""
        raise NotImplementedError

    def _parse(self, response: str) -> ParsedAction:
        """Extract the action from a model response (ReAct format unless a family overrides)."""
        return parse_react(response)

    def action_response(self, action: str) -> str:
        """A response that carries ``action`` (the action alone, as ``info["parsed_action"]`` shows it) in this
        family's format, for a caller that holds only the action: TRL's ``act`` tool, whose argument is the action.
        ReAct by default: ``Action: <action>``; a text that has the ``Action:`` marker already is returned as it is.
        A family with another format (tags, backticks, a SQL block) overrides this with its own."""
        if "Action:" in action:
            return action
        return "Action: " + _LOWER_MARKER.sub("", action, count=1).strip()

    def available_actions(self) -> list[str] | None:
        """The actions allowed now, for families with a finite action set; ``None`` otherwise."""
        return None

    def oracle_action(self) -> str:
        """The expert's next response for the current state (used by the oracle agent and tests)."""
        raise NotImplementedError(f"{type(self).__name__} has no oracle")

    def random_action(self, rng: np.random.Generator) -> str:
        """A plausible action a random agent would take: one of the available actions if known."""
        actions = self.available_actions()
        if actions:
            return actions[int(rng.integers(len(actions)))]
        return self.action_space.sample()

    def _release(self) -> None:
        """Free engine resources (processes, browsers, indexes); must be safe to call twice."""

    def _budget_spent(self, outcome: Outcome) -> Outcome:
        """The outcome of a turn that used the last of ``turn_budget`` without ending the episode: a family that
        scores the final state at the budget (WebArena) returns it scored; by default it stays as it is."""
        return outcome

    def _shown(self, observation: str) -> str:
        """The observation of a turn as the agent sees it (a family that wraps every answer, as the tool envs do
        AgentGym's way, does it here rather than in its own ``step``)."""
        return observation

    def accepts_item(self, item_id: int) -> bool:
        """Whether ``item_id`` names an episode of this env (by default: it is in one of its splits)."""
        return item_id in self._split_of

    # ---- copies --------------------------------------------------------------------------------
    def __deepcopy__(self, memo: dict[int, Any]) -> TextEnv:
        """A copy that steps exactly as this env from here on (tree search, best-of-n); an env whose engine
        holds live resources (a process, a connection, a browser) raises ``EnvCopyError`` naming its id."""
        twin = type(self).__new__(type(self))
        memo[id(self)] = twin
        try:
            state = copy.deepcopy(self.__dict__, memo)
        except Exception as error:
            raise EnvCopyError(self._copy_refusal(error)) from error
        twin.__dict__.update(state)
        return twin

    def __getstate__(self) -> dict[str, Any]:
        """What pickling keeps (the env's whole state); an env that cannot be pickled says so by its id."""
        state = self.__dict__.copy()
        state.pop("_pickle_checking", None)
        if self.__dict__.get("_pickle_checking"):
            return state
        try:  # try now, so the error names the id rather than an inner object
            self._pickle_checking = True
            pickle.dumps(state)
        except Exception as error:
            raise EnvCopyError(self._copy_refusal(error)) from error
        finally:
            self.__dict__.pop("_pickle_checking", None)
        return state

    def _copy_refusal(self, error: BaseException) -> str:
        return (f"{self.task.env_id} cannot be copied or pickled: its engine holds live resources ({error}). To "
                "branch an episode, make a new env, reset it with the same item and seed, and replay the actions.")

    # ---- Gymnasium API ------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Start an episode: pick the item, start the engine's episode and show the first observation.

        Args:
            seed: seeds the env's ``np_random`` (the same item and seed give the same episode).
            options: ``{"item_id": id}``, or ``{"split": name, "index": i}``; without an index (or without options) an
                item of the split (default: the env's default split) drawn from the seed.

        Returns:
            The first observation and the info (``task``, ``item_id``, ``split``, ``instruction``, and the family's
            own keys).
        """
        super().reset(seed=seed)
        self._reset_seed = seed
        item_id, split = self._select_item(options or {})
        self._closed = False
        self.item_id, self.split = item_id, split
        self._progress = self._score = 0.0
        self._success = self._done = False
        self._turn = 0
        self._last_action = None
        start = self._start(self.item_id, self.np_random)
        self._last_observation = self._clip(start.observation)
        info = self._info(valid_action=True, instruction=start.instruction, acknowledgement=self.acknowledgement,
                          **start.info)
        return self._last_observation, info

    def require_episode(self) -> None:
        """``gym.error.ResetNeeded`` unless an episode is running: before the first ``reset`` and after
        ``close`` alike, for every family (a family that overrides ``step`` calls this first)."""
        if self._closed:
            raise gym.error.ResetNeeded(f"{self.task.env_id} was closed: call reset() to start a new episode")
        if self.item_id is None:
            raise gym.error.ResetNeeded("call reset() before step()")

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Play one turn: parse the model's response, carry out its action and report the outcome.

        An unparseable, invalid or failing action is no exception: the observation says what was wrong,
        ``info["valid_action"]`` is False and the reward 0.

        Args:
            action: the raw model response, parsed as the family's AgentGym client parses it (a bare
                action without ``Action:`` is taken only under the family's opt-in, e.g. ``extra_feedback=True``).

        Returns:
            (observation, reward, terminated, truncated, info); the rewards of an episode sum to its outcome score.
        """
        self.require_episode()
        if not isinstance(action, str):
            raise TypeError(f"actions are model responses (str), got {type(action).__name__}")
        self._last_action = action
        if self._done:
            return self._reply(self._shown("The episode is over. Call reset() to start a new one."), valid=False,
                               terminated=True)
        self._turn += 1
        self._parsed_action = None
        outcome = self._turn_outcome(action)
        if not outcome.done and self._turn == self.turn_budget:
            outcome = self._budget_spent(outcome)
        progress = float(np.clip(outcome.progress, self.min_progress, self.max_progress))
        reward = progress - self._progress
        self._progress = progress
        self._score = float(outcome.score)
        self._success = self._success or outcome.success
        self._done = outcome.done
        return self._reply(self._shown(outcome.observation), valid=outcome.valid, reward=reward,
                           terminated=outcome.done, truncated=outcome.truncated,
                           **{"parsed_action": self._parsed_action, **outcome.info})

    def _turn_outcome(self, action: str) -> Outcome:
        """One turn's outcome: the family's for a parsed action; for an overlong, unparseable or failing one, the
        feedback with the episode's progress and score unchanged (reward 0)."""
        if len(action) > self.max_action_length:
            return self._unchanged(f"Your response has {len(action)} characters; the limit is "
                                   f"{self.max_action_length}. Answer with a short reasoning and one action.")
        try:
            parsed = self._parse(action)
            if not parsed.ok:
                return self._unchanged(parsed.error or "Invalid action.")
            if parsed.action and valid_utf8(parsed.action) is not parsed.action:  # a lone surrogate in it
                return self._unchanged(UNENCODABLE_ACTION)
            self._parsed_action = parsed.action or ""
            return self._act(self._parsed_action)
        except ACTION_ERRORS as error:
            logger.warning("%s: action %r raised", self.task.env_id, action[:200], exc_info=True)
            return self._unchanged(
                f"Your action could not be carried out ({type(error).__name__}). Check its format and arguments.",
                action_error=type(error).__name__,
            )

    def _unchanged(self, observation: str, **info: Any) -> Outcome:
        """An invalid turn's outcome: the feedback, and the episode's progress and score as they were."""
        return Outcome(observation, progress=self._progress, score=self._score, valid=False, info=info)

    def render(self) -> str | None:
        """With ``render_mode="ansi"``: the last action and observation as a text frame; otherwise None."""
        return ansi_frame(self._last_action, self._last_observation) if self.render_mode == "ansi" else None

    def close(self) -> None:
        """End the episode and release the engine; ``step`` raises ``ResetNeeded`` until the next reset."""
        self._closed = True  # the episode is over: step raises ResetNeeded until the next reset
        self.item_id = None
        self._release()
        super().close()

    # ---- helpers ------------------------------------------------------------------------------
    def _select_item(self, options: dict[str, Any]) -> tuple[int, str]:
        unknown = set(options) - {"item_id", "split", "index"}
        if unknown:
            raise ValueError(f"unknown reset options {sorted(unknown)}; use item_id, or split with an optional index")
        if "item_id" in options:
            item_id = _integer_option(options, "item_id")
            if not 0 <= item_id < 2**63 or not self.accepts_item(item_id):  # ids are int64 everywhere
                raise ValueError(f"item_id {item_id} is not an item of {self.task.env_id}")
            return item_id, self._split_of.get(item_id, "custom")
        split = options.get("split", self.default_split)
        if split not in self._splits:
            raise ValueError(f"unknown split {split!r}; choose one of {sorted(self._splits)}")
        items = self._splits[split]
        if not items:
            raise ValueError(f"{self.task.env_id} has no {split} items")
        if "index" in options:
            index = _integer_option(options, "index")
            if not 0 <= index < len(items):
                raise ValueError(f"index {index} is out of range for the {len(items)} {split} items of "
                                 f"{self.task.env_id}")
        elif self._reset_seed is not None:
            index = self._seeded_index(split, self._reset_seed, len(items))
        else:
            index = int(self.np_random.integers(len(items)))
        return items[index], split

    def _seeded_index(self, split: str, seed: int, count: int) -> int:
        """The item a seeded reset draws: position ``seed`` of a fixed shuffle of the split.

        ``gym.make_vec(...).reset(seed=s)`` seeds sub-env ``i`` with ``s + i``, so the sub-envs of one
        batch draw distinct items (up to the split's size) rather than independent, colliding draws.
        Unseeded resets after it draw at random from the seeded ``np_random``, as before.
        """
        import zlib

        order = np.random.default_rng(zlib.crc32(f"{self.task.env_id}/{split}".encode())).permutation(count)
        return int(order[seed % count])

    def _clip(self, text: str) -> str:
        """The observation as returned: valid UTF-8 (whatever the agent made the engine echo) and
        at most ``max_observation_length`` characters."""
        limit = self.max_observation_length
        text = valid_utf8(text)
        return text if len(text) <= limit else text[: limit - 20] + "\n[... truncated]"

    def _info(self, valid_action: bool, **extra: Any) -> dict[str, Any]:
        info = {
            "task": self.task.env_id,
            "subtask": self._subtask_of.get(self.item_id, self.task.subtask),
            "item_id": self.item_id,
            "split": self.split,
            "valid_action": valid_action,
            "score": self._score,
            "success": self._success,
            "turn": self._turn,
        }
        actions = self.available_actions()
        if actions is not None:
            info["available_actions"] = actions
        info.update(valid_utf8(extra))  # extras may echo the agent (an answer, a query)
        return info

    def _reply(
        self,
        observation: str,
        valid: bool,
        reward: float = 0.0,
        terminated: bool = False,
        truncated: bool = False,
        **extra: Any,
    ) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self._last_observation = self._clip(observation)
        return self._last_observation, float(reward), bool(terminated), bool(truncated), self._info(valid, **extra)


class TurnBudget(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Tells a ``TextEnv`` the budget its ``TimeLimit`` enforces, so the env never takes the registry's cap for it.

    Every id registers it as an additional wrapper, which ``gym.make`` applies right after its ``TimeLimit``:
    ``gym.make(id, max_episode_steps=N)`` (the pool, the server and the curriculum make envs so) gives the env
    ``turn_budget = N``, a plain ``gym.make(id)`` the registered cap, ``max_episode_steps=-1`` none. The env then
    scores the final state and states its budget at that number. Steps and resets pass through unchanged.
    """

    def __init__(self, env: gym.Env):
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.Wrapper.__init__(self, env)
        if isinstance(env.unwrapped, TextEnv):
            env.unwrapped.turn_budget = time_limit_of(env)


def time_limit_of(env: gym.Env) -> int | None:
    """The ``max_episode_steps`` of the outermost ``TimeLimit`` around ``env``, or None without one (read from the
    wrapper itself: ``env.spec`` is None when a make kwarg cannot be deep-copied, e.g. a shared browser)."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, gym.wrappers.TimeLimit):
            return int(env.get_wrapper_attr("_max_episode_steps"))
        env = env.env
    return None


#: How the registry names ``TurnBudget`` in every id's ``additional_wrappers``.
TURN_BUDGET_WRAPPER = gym.envs.registration.WrapperSpec(
    name="TurnBudget", entry_point="agentgym_envs.core.env:TurnBudget", kwargs={})


def _integer_option(options: dict[str, Any], name: str) -> int:
    """``options[name]`` as an int; ``True``, ``1.5`` or ``"3"`` are refused rather than coerced to
    another item than the caller meant."""
    value = options[name]
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"reset option {name!r} must be an int, got {type(value).__name__} {value!r}")
    return int(value)
