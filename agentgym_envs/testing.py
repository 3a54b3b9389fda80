"""Conformance checks for text envs, public so authors of new AgentGym envs run what we run.

``check_text_env("AgentGym/MyEnv-v0")`` runs every check below; our own test suite calls them
for every registered id (``tests/test_registry.py``), so a new family is tested the moment it is
registered. Any text env Gymnasium can make is checked too (a plain ``gym.register``, as
``docs/own_env.md`` shows): without a ``TaskSpec`` its items are 0 and 1, its actions its oracle's or
random ones where it has them (else its action space's samples), and only what Gymnasium's API asks of
any env is held against it where ours promise more (the other families' actions refused, ``info``'s
fields, ``ResetNeeded`` after ``close``).
"""

from __future__ import annotations

import copy
import gc
import json
import os
import pickle
import re
import sys
import time
import tracemalloc
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import gymnasium as gym
import numpy as np
from gymnasium.utils.env_checker import check_env

from agentgym_envs.agents import random_response
from agentgym_envs.core.env import EnvCopyError
from agentgym_envs.core.episode import MAX_TURNS, Trajectory
from agentgym_envs.core.loop import BaseAgent, Episode, run_episode
from agentgym_envs.core.tasks import TaskSpec, get_task, import_env_module, list_tasks

#: Responses no env may crash on: each must give ``valid_action=False`` feedback.
BAD_RESPONSES: dict[str, str] = {
    "empty": "",
    "whitespace": "   \n\t  ",
    "huge": "go " * 40_000,
    "control bytes": "\x00\x01\x02\x1b[31m\x7f\x08",
    "other language": "思考：我应该向前走。行动：向前走到红色的门",
    "two actions": "Thought: two things at once.\nAction: inventory\nAction: look around",
    "thought only": "Thought: I am not sure what to do next, so I will think more about it.",
}


def foreign_actions() -> dict[str, str]:
    """A typical action of each registered family that declares one (``TaskSpec.foreign_action``), by family;
    an env must reject the other families' actions."""
    return {spec.family: spec.foreign_action for spec in list_tasks() if spec.foreign_action}


_VOLATILE_INFO_KEYS = {"timing", "elapsed", "time"}

#: What a hostile or broken model may put where an env expects a count, an id, a name, a query or
#: a tool argument. ``hostile_actions`` places each one into a well-formed action of the env.
HOSTILE_PAYLOADS: dict[str, str] = {
    "huge number": "9" * 5_000,
    "huge negative number": "-" + "9" * 400,
    "float overflow": "1e999",
    "not a number": "NaN",
    "Ethiopic digits": "\u1369\u136a",
    "Arabic-Indic digits": "\u0661\u0662",
    "superscript digits": "\u00b2\u00b3",
    "lone surrogates": "\ud800x\udfff",
    "control characters": "\x00\x07\x1b[2J\x7f\x85",
    "bidi and zero-width": "\u202eevil\u202c\u2066x\u2069\u200b\ufeff",
    "astral characters": "\U0001d54f\U0001f642" * 200,
    "SQL injection": "x'); DROP TABLE items; --",
    "SQLite printf bomb": "printf('%.*c', 2147483647, 'x')",
    "script injection": "<script>alert(1)</script><img src=x onerror=alert(1)>",
    "path traversal": "../../../../../../etc/passwd",
    "file URL": "file:///etc/passwd",
    "outside URL": "http://example.com/",
    "format string": "%s%n{0}{__class__}${HOME}",
    "regex metacharacters": "(a+)+$[\\",
    "long string": "A" * 15_000,
}

#: Raw JSON values for the argument of a JSON-taking action (tool calls).
HOSTILE_JSON_VALUES: dict[str, str] = {
    "deeply nested JSON": "[" * 5_000 + "]" * 5_000,
    "huge JSON integer": "9" * 5_000,
    "JSON float overflow": "1e999",
    "JSON NaN": "NaN",
    "JSON-escaped lone surrogate": '"\\ud800\\udc00\\udfff"',
    "JSON object as a string argument": '{"a": {"b": [1, 2, {"c": null}]}}',
}

#: A whole response far past every env's action length limit.
MEGABYTE_RESPONSE = "A" * 1_000_000

_NUMBER_RUN = re.compile(r"\d+")
_BRACKETED = re.compile(r"\[([^\[\]]*)\]")
_TAGGED = re.compile(r"<(\w+)>(.*?)</\1>", re.DOTALL)
_JSON_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


def task_of(env_id: str) -> TaskSpec | None:
    """The id's ``TaskSpec``, or None for an env registered without one (``gym.register`` alone); an id Gymnasium
    does not know either raises its ``NameNotFound`` / ``NamespaceNotFound`` (``module:EnvId`` imports the module)."""
    gym.spec(env_id)
    try:
        return get_task(env_id)
    except KeyError:
        return None


def first_items(env_id: str) -> list[int]:
    """The items the checks play: the first test and train items of a ``TaskSpec``'s splits, else 0 and 1."""
    spec = task_of(env_id)
    if spec is None:
        return [0, 1]
    return [ids[0] for ids in (spec.split("test"), spec.split("train")) if ids]


def first_options(env_id: str) -> dict[str, Any]:
    """The reset options of the checks' one episode: the first test item (item 0 of an env without splits)."""
    return {"split": "test", "index": 0} if task_of(env_id) is not None else {"item_id": 0}


def check_text_env(env_id: str, memory_resets: int | None = None) -> None:
    """Run every conformance check on ``env_id`` (any registered text env; Gymnasium's ``module:EnvId`` imports the
    module first); raises ``AssertionError`` on the first failure."""
    env_id = import_env_module(env_id)
    check_gymnasium_api(env_id)
    check_determinism(env_id)
    check_bad_actions(env_id)
    check_hostile_actions(env_id)
    check_close_twice(env_id)
    check_step_after_close(env_id)
    check_reset_memory(env_id, resets=memory_resets)


def check_gymnasium_api(env_id: str) -> None:
    """Gymnasium's own ``check_env``; any warning it raises about the env is a failure."""
    env = gym.make(env_id)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            check_env(env.unwrapped)
        problems = [str(w.message) for w in caught if "gymnasium" in str(w.filename) or "env_checker" in str(w.message)]
        assert not problems, f"{env_id}: check_env warned: {problems}"
    finally:
        env.close()


def play(env: gym.Env, item_id: int, policy: Callable[[gym.Env, int], str], max_steps: int) -> list[tuple]:
    """Reset to ``item_id`` and play ``policy``; returns every (obs, reward, terminated, truncated, info)."""
    obs, info = env.reset(seed=0, options={"item_id": item_id})
    trace: list[tuple] = [(obs, 0.0, False, False, _stable(info))]
    for step in range(max_steps):
        obs, reward, terminated, truncated, info = env.step(policy(env, step))
        trace.append((obs, reward, terminated, truncated, _stable(info)))
        if terminated or truncated:
            break
    return trace


def expert_or_random(env: gym.Env, step: int) -> str:
    """The env's oracle if it has one, else a seeded random action (same sequence for equal envs): the env's
    ``random_action``, or a sample of its action space for an env that has neither."""
    base = env.unwrapped
    try:
        return base.oracle_action()
    except (NotImplementedError, AttributeError):
        return random_response(env, np.random.default_rng(step))


def check_copy(env_id: str) -> None:
    """``copy.deepcopy`` and a pickle round trip of an env in mid-episode: each copy answers the next action
    exactly as the original does (observation, reward, end), or copying raises ``EnvCopyError`` naming the id."""
    env = gym.make(env_id)
    copies = []
    try:
        env.reset(seed=0, options=first_options(env_id))
        env.step(expert_or_random(env, 0))
        action = expert_or_random(env, 1)
        for how in (copy.deepcopy, lambda original: pickle.loads(pickle.dumps(original))):
            try:
                copies.append(how(env))
            except EnvCopyError as error:
                assert env_id in str(error), f"{env_id}: the copy error does not name the id: {error}"
        expected = env.step(action)
        for twin in copies:
            assert twin.step(action)[:4] == expected[:4], f"{env_id}: a copy stepped differently from the original"
    finally:
        for twin in copies:
            twin.close()
        env.close()


def check_determinism(env_id: str, steps: int = 8) -> None:
    """Two envs given the same item id and the same actions produce identical episodes."""
    items = first_items(env_id)
    first, second = gym.make(env_id), gym.make(env_id)
    try:
        for item_id in items:
            one = play(first, item_id, expert_or_random, steps)
            two = play(second, item_id, expert_or_random, steps)
            assert one == two, f"{env_id}: item {item_id} played twice gave different episodes"
            again = play(first, item_id, expert_or_random, steps)
            assert again == one, f"{env_id}: resetting the same env to item {item_id} gave a different episode"
    finally:
        first.close()
        second.close()


class _Repeating(BaseAgent):
    """Answers every turn with the same response (the budget check's: one the env refuses before its engine)."""

    name = "repeating"

    def __init__(self, response: str):
        self.response = response

    def act_one(self, episode: Episode) -> str:
        """The same response, whatever the observation."""
        return self.response


def check_turn_budget(env_id: str, budget: int, make: Callable[..., gym.Env] | None = None) -> Trajectory:
    """An episode made with ``max_episode_steps=budget`` (by ``gym.make`` or ``make``, e.g. a served env's) runs
    exactly ``budget`` turns and ends by the budget (the record says ``max_turns``); a ``TextEnv`` was told its
    budget (``turn_budget``), whatever the registered cap.

    Args:
        env_id: the id.
        budget: the turn budget to make it with.
        make: how to make it (``gym.make`` by default), called as ``make(env_id, max_episode_steps=budget)``.

    Returns:
        The episode's record.
    """
    env = (make or gym.make)(env_id, max_episode_steps=budget)
    try:
        told = getattr(env.unwrapped, "turn_budget", budget)
        assert told == budget, f"{env_id} made with max_episode_steps={budget} thinks its budget is {told}"
        overlong = "go " * 40_000  # refused before any engine sees it: the check costs the resets only
        item = first_items(env_id)[0]
        trajectory = run_episode(env, _Repeating(overlong), item_id=item)
        assert trajectory.turns == budget, f"{env_id}: {trajectory.turns} turns under a budget of {budget}"
        assert trajectory.stop_reason == MAX_TURNS, f"{env_id}: ended by {trajectory.stop_reason!r}, not the budget"
        assert trajectory.max_turns == budget
        return trajectory
    finally:
        env.close()


def check_bad_actions(env_id: str) -> None:
    """Malformed and foreign responses give ``valid_action=False`` feedback; the episode stays playable. An env
    without a ``TaskSpec`` gets the malformed responses only (the other families' actions are our families' rule),
    and ``valid_action`` is held against it where its ``info`` has that key."""
    spec = task_of(env_id)
    env = gym.make(env_id).unwrapped  # no TimeLimit: the episode must survive all the bad turns
    kwargs = getattr(type(env), "bad_action_check_kwargs", {})
    if kwargs:  # an upstream game that counts bad actions as moves: checked with its option that does not
        env.close()
        env = gym.make(env_id, **kwargs).unwrapped
    try:
        obs, info = env.reset(seed=0, options=first_options(env_id))
        responses = dict(BAD_RESPONSES)
        if spec is not None:
            foreign = foreign_actions()
            responses.update({f"{family} action": action for family, action in foreign.items()
                              if family != spec.family})
        for name, response in responses.items():
            obs, reward, terminated, truncated, info = env.step(response)
            assert isinstance(obs, str) and obs.strip(), f"{env_id}: {name!r} gave an empty observation"
            valid = info["valid_action"] if spec is not None else info.get("valid_action", False)
            assert valid is False, f"{env_id}: {name!r} was accepted as valid: {obs[:200]!r}"
            assert reward == 0.0 and not terminated, f"{env_id}: {name!r} changed the episode (reward {reward})"
            assert env.observation_space.contains(obs), f"{env_id}: observation for {name!r} is outside the space"
        try:
            env.oracle_action()
        except (NotImplementedError, AttributeError):
            return
        for _ in range((gym.spec(env_id).max_episode_steps or 100) * 3):
            obs, reward, terminated, truncated, info = env.step(env.oracle_action())
            if terminated or truncated:
                break
        assert info.get("success", reward > 0), (
            f"{env_id}: after bad actions the oracle could not finish the episode: {obs[:300]!r}")
    finally:
        env.close()


def hostile_actions(seed_action: str) -> dict[str, str]:
    """Hostile variants of a well-formed action: each payload of ``HOSTILE_PAYLOADS`` on its own,
    as a ReAct action, in place of the numbers, the last bracketed argument, the tag content and
    each JSON argument of ``seed_action``; and ``HOSTILE_JSON_VALUES`` as JSON arguments.

    Built from one action of the env (its oracle's or a random one), so an env of any syntax gets
    its hostile input where its parser and engine actually read it.
    """
    actions = {"megabyte response": MEGABYTE_RESPONSE}
    json_match = _JSON_OBJECT.search(seed_action)
    try:
        arguments = json.loads(json_match.group(0)) if json_match else None
    except ValueError:
        arguments = None
    if not isinstance(arguments, dict) or not arguments:
        arguments = None

    def with_json(key: str, raw_value: str) -> str:
        """The seed action with one JSON argument replaced by ``raw_value`` (the others stay valid)."""
        assert json_match is not None and arguments is not None
        raw = ", ".join(f"{json.dumps(k)}: {raw_value if k == key else json.dumps(v)}" for k, v in arguments.items())
        return seed_action[: json_match.start()] + "{" + raw + "}" + seed_action[json_match.end() :]

    for name, payload in HOSTILE_PAYLOADS.items():
        actions[f"{name}: bare"] = payload
        actions[f"{name}: as action"] = f"Thought: let me try this.\nAction: {payload}"
        if _NUMBER_RUN.search(seed_action) and arguments is None:
            actions[f"{name}: as numbers"] = _NUMBER_RUN.sub(lambda _: payload, seed_action)
        brackets = list(_BRACKETED.finditer(seed_action))
        for number, bracket in enumerate(brackets, 1):  # every argument: type [id] [TEXT] [1|0] types its text
            label = "in brackets" if number == len(brackets) else f"in bracket {number}"
            actions[f"{name}: {label}"] = f"{seed_action[: bracket.start(1)]}{payload}{seed_action[bracket.end(1) :]}"
        tag = _TAGGED.search(seed_action)
        if tag:
            actions[f"{name}: in a tag"] = f"{seed_action[: tag.start(2)]}{payload}{seed_action[tag.end(2) :]}"
        for key in arguments or {}:
            actions[f"{name}: as JSON argument {key!r}"] = with_json(key, json.dumps(payload))  # ASCII: \\ud800
            if re.fullmatch(r"-?[0-9]+", payload):
                actions[f"{name}: as JSON number {key!r}"] = with_json(key, payload)
        if arguments is None and not (brackets or tag):
            actions[f"{name}: as last word"] = seed_action.rsplit(" ", 1)[0] + " " + payload
    for name, raw in HOSTILE_JSON_VALUES.items():
        for key in arguments or {}:
            actions[f"{name}: as JSON argument {key!r}"] = with_json(key, raw)
    return actions


@dataclass
class HostileReport:
    """What ``run_hostile_actions`` saw on one env id."""

    env_id: str
    steps: int = 0
    exceptions: list[str] = field(default_factory=list)
    invalid_observations: list[str] = field(default_factory=list)
    max_step_seconds: float = 0.0
    slowest: str = ""

    @property
    def clean(self) -> bool:
        """True when no hostile action raised or produced an invalid observation."""
        return not self.exceptions and not self.invalid_observations


def _seed_actions(env: gym.Env, family: str | None) -> list[str]:
    """Well-formed actions of the env to mutate: its oracle's first move, a random action, and the
    family's typical action."""
    base = env.unwrapped
    seeds = []
    try:
        seeds.append(base.oracle_action())
    except (NotImplementedError, AttributeError):
        pass
    seeds.append(random_response(env, np.random.default_rng(0)))
    tree = getattr(base, "_tree", None)  # a browser page: typing into its first text field too
    fields = [node.id for node in getattr(tree, "nodes", ()) if node.role in ("textbox", "searchbox", "combobox")]
    if fields:
        seeds.append(f"```type [{fields[0]}] [hello] [0]```")
    own_action = foreign_actions().get(family)
    if own_action:
        seeds.append(own_action)
    return list(dict.fromkeys(seeds))


def _observation_problem(obs: Any, info: dict[str, Any], space: Any) -> str | None:
    """Why a step's output could not be sent to an agent as UTF-8 JSON, or ``None``."""
    if not isinstance(obs, str) or not obs.strip():
        return "empty or non-string observation"
    if not space.contains(obs):
        return "observation outside the observation space"
    try:
        obs.encode("utf-8")
        json.dumps(info, ensure_ascii=False).encode("utf-8")
    except (UnicodeEncodeError, TypeError, ValueError) as error:
        return f"not valid UTF-8 JSON: {error}"[:200]
    return None


def run_hostile_actions(env_id: str, env: gym.Env | None = None) -> HostileReport:
    """Play every hostile action of ``hostile_actions`` on ``env_id`` (on the test item 0, starting
    a new episode when one ends) and report exceptions, unencodable observations and step times.
    Never raises because of the env: the benchmark counts what this records."""
    spec = task_of(env_id)
    options = first_options(env_id)
    report = HostileReport(env_id)
    owned = env is None
    env = env if env is not None else gym.make(env_id).unwrapped
    try:
        env.reset(seed=0, options=options)
        actions: dict[str, str] = {}
        for seed in _seed_actions(env, spec.family if spec is not None else None):
            actions.update(hostile_actions(seed))
        for name, action in actions.items():
            started = time.perf_counter()
            try:
                obs, _, terminated, truncated, info = env.step(action)
            except Exception as error:  # what this check exists to find
                report.exceptions.append(f"{name}: {type(error).__name__}: {str(error)[:120]}")
                terminated, info, obs = True, {}, ""
            else:
                problem = _observation_problem(obs, info, env.observation_space)
                if problem:
                    report.invalid_observations.append(f"{name}: {problem}")
                if "action_error" in info:
                    report.exceptions.append(f"{name}: {info['action_error']} (caught by TextEnv.step)")
            elapsed = time.perf_counter() - started
            report.steps += 1
            if elapsed > report.max_step_seconds:
                report.max_step_seconds, report.slowest = elapsed, name
            if terminated or truncated:
                try:
                    env.reset(seed=0, options=options)
                except Exception as error:
                    report.exceptions.append(f"reset after {name}: {type(error).__name__}: {str(error)[:120]}")
    finally:
        if owned:
            env.close()
    return report


def check_hostile_actions(env_id: str, max_step_seconds: float = 15.0) -> None:
    """No hostile action raises (in the env or inside its engine), every observation is valid
    UTF-8 and every step ends within ``max_step_seconds``."""
    report = run_hostile_actions(env_id)
    assert not report.exceptions, f"{env_id}: hostile actions raised: {report.exceptions[:5]}"
    assert not report.invalid_observations, f"{env_id}: invalid observations: {report.invalid_observations[:5]}"
    assert report.max_step_seconds <= max_step_seconds, (
        f"{env_id}: {report.slowest!r} took {report.max_step_seconds:.1f} s (bound {max_step_seconds} s)"
    )


def check_close_twice(env_id: str) -> None:
    """``close()`` may be called twice, before or after an episode."""
    unused = gym.make(env_id)
    unused.close()
    unused.close()
    env = gym.make(env_id)
    env.reset(seed=0)
    env.step(expert_or_random(env, 0))
    env.close()
    env.close()


def check_step_after_close(env_id: str) -> None:
    """After ``close()`` every id follows one rule (Gymnasium's): ``step`` raises ``gym.error.ResetNeeded``
    without touching an engine (no browser or JVM is started again), and ``reset`` starts a new episode. An env
    without a ``TaskSpec`` is held to the second half only (Gymnasium asks no more of a closed env)."""
    ours = task_of(env_id) is not None
    options = first_options(env_id)
    env = gym.make(env_id)
    try:
        env.reset(seed=0, options=options)
        env.step(expert_or_random(env, 0))
        env.close()
        for _ in range(2 if ours else 0):
            try:
                env.step("look")
            except gym.error.ResetNeeded:
                pass
            else:
                raise AssertionError(f"{env_id}: step after close() did not raise gym.error.ResetNeeded")
        assert getattr(env.unwrapped, "_browser", None) is None, f"{env_id}: step after close() started a browser"
        obs, info = env.reset(seed=0, options=options)
        assert isinstance(obs, str) and (not ours or info["item_id"] is not None)
        observation, _, _, _, info = env.step(expert_or_random(env, 0))
        assert isinstance(observation, str), f"{env_id}: no observation after close() and reset()"
        assert not ours or info["turn"] == 1, f"{env_id}: the episode after close() and reset() did not start afresh"
    finally:
        env.close()


def check_reset_memory(env_id: str, resets: int | None = None, python_limit_mb: float = 4.0,
                       rss_limit_mb: float = 64.0, time_budget_s: float | None = 20.0) -> None:
    """Repeated resets (each with a step) do not grow Python memory, resident memory or child processes.

    ``resets=None`` picks 200 for envs whose reset takes under 50 ms and 20 otherwise, so slow
    engines keep the test suite fast; benchmarks run the full count. Traced resets are several times slower than
    the warm-up's, so past ``time_budget_s`` the check stops after at least 20 (an env near the 50 ms line once took
    4.5 minutes of CI for 200); ``None``: every one.
    """
    psutil = _psutil()
    _quit_idle_browsers()
    env = gym.make(env_id)
    try:
        rng = np.random.default_rng(0)
        started = time.perf_counter()
        for seed in range(10):  # warm-up: caches, lazily started engines
            env.reset(seed=seed)
            env.step(random_response(env, rng))
        if resets is None:
            resets = 200 if (time.perf_counter() - started) / 10 < 0.05 else 20
        gc.collect()
        process = psutil.Process(os.getpid())
        rss_before, children_before = _rss(process), len(process.children(recursive=True))
        tracemalloc.start()
        python_before = tracemalloc.get_traced_memory()[0]
        traced_from = time.perf_counter()
        for seed in range(resets):
            env.reset(seed=1000 + seed)
            env.step(random_response(env, rng))
            if time_budget_s is not None and seed + 1 >= 20 and time.perf_counter() - traced_from > time_budget_s:
                resets = seed + 1
                break
        gc.collect()
        python_growth = (tracemalloc.get_traced_memory()[0] - python_before) / 2**20
        tracemalloc.stop()
        rss_growth = (_rss(process) - rss_before) / 2**20
        children_after = len(process.children(recursive=True))
        assert python_growth < python_limit_mb, (
            f"{env_id}: Python memory grew {python_growth:.1f} MB over {resets} resets")
        assert rss_growth < rss_limit_mb, f"{env_id}: resident memory grew {rss_growth:.1f} MB over {resets} resets"
        assert children_after <= children_before, (
            f"{env_id}: child processes grew from {children_before} to {children_after}")
    finally:
        if tracemalloc.is_tracing():
            tracemalloc.stop()
        env.close()


def _quit_idle_browsers() -> None:
    """Quit the browsers that closed envs parked for reuse (``web.browser.BROWSER_POOL``).

    They belong to no env under test, yet they are this process's children and Chromium starts
    helper processes on its own schedule, which would read as growth of the env being measured.
    Nothing is imported: without a browser env made earlier there is nothing parked.
    """
    browser_module = sys.modules.get("agentgym_envs.web.browser")
    if browser_module is not None:
        browser_module.BROWSER_POOL.clear()


def _rss(process: Any) -> int:
    """Resident memory of this process and its children (engines run as subprocesses)."""
    total = process.memory_info().rss
    for child in process.children(recursive=True):
        try:
            total += child.memory_info().rss
        except Exception:  # a child that exited meanwhile
            pass
    return total


def _psutil() -> Any:
    try:
        import psutil
    except ImportError as error:
        raise ImportError("check_reset_memory needs psutil: pip install 'agentgym-rl[dev]'") from error
    return psutil


def _stable(info: dict[str, Any]) -> dict[str, Any]:
    """``info`` without wall-clock fields, for comparing episodes."""
    return {key: value for key, value in info.items() if key not in _VOLATILE_INFO_KEYS}
