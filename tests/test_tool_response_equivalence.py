"""The tool envs' default response rule equals AgentGym's tool servers' (``agentenv-tool``).

AgentGym's tool clients send the whole model response; the server's ``extract_action_name_and_action_input``
finds ``<name> with Action Input: <input>`` and rebuilds that string, the env's ``parse_action`` reads the tool
after ``Action:`` and ``eval``s the input, and ``step`` ends the episode when the rebuilt action holds "finish".
``upstream`` below re-writes that path plainly from the code at WooooDyy/AgentGym 3ef9235
(``Toolusage/toolusage/utils/tool/helpers.py``, ``agentenv_*/*_environment.py``, ``environment/*_env.py``), with
``ast.literal_eval`` for ``eval`` (the documented adaptation), and is compared with ours on generated responses.
"""

from __future__ import annotations

import ast
import itertools
import random
import re

import gymnasium as gym

import agentgym_envs  # noqa: F401  (registers the ids)
from agentgym_envs.tools.base import AGENTGYM_FORMAT_ERROR
from agentgym_envs.tools.toolkit import ToolError, agentgym_tool_action, python_call_parts

Outcome = tuple


def upstream(message: str) -> Outcome:
    """AgentGym's server, then its env's ``parse_action``, for one ``/step`` message."""
    found = re.search(r"\s*(.*?)\s*with\s*Action Input:\s*(.*?)$", message)
    if not found:
        return ("format error",)
    action = found.group(1) + " with Action Input: " + found.group(2)
    ends = "Finish" in action or "finish" in action
    matched = re.match(r".*?Action:\s*(.*?)\s*with\s*Action Input:\s*(.*?)$", action, re.MULTILINE | re.DOTALL)
    try:
        if matched:
            action_type, params = matched.group(1), matched.group(2)
            try:
                params = ast.literal_eval(params)
            except Exception:
                raise Exception("Parameters in action input are not valid, please change your action input.")
        else:
            action_type, params = None  # the env unpacks parse_action's None
    except Exception as e:  # the env's step: returns before its "finish" test, the episode goes on
        return ("error", "ERROR | " + type(e).__name__ + "(" + str(e) + ")", False)
    if not isinstance(params, dict):
        return ("not a dict", action_type, ends)
    return ("call", action_type, params, ends)


def ours(message: str) -> Outcome:
    """Our default path: ``ToolEnv._parse`` (``agentgym_tool_action``) then ``python_call_parts``, as
    ``ToolEnv._act_as_agentgym`` reads the action."""
    action = agentgym_tool_action(message)
    if action is None:
        return ("format error",)
    ends = "Finish" in action or "finish" in action
    try:
        head, arguments = python_call_parts(action)
    except ToolError as error:
        return ("error", str(error), False)
    if not isinstance(arguments, dict):
        return ("not a dict", head, ends)
    return ("call", head, arguments, ends)


THOUGHTS = ["", "Thought: I need the date.\n\n", "  ", "Thought: a plan\nwith two lines.\n", "I think so.\n"]
MARKERS = ["Action: ", "Action:\n", "action: ", "ACTION: ", "", "**Action:** ", "Action:", "Action :  "]
TOOLS = ["get_user_current_date", "finish", "get_latitude_longitude", "`get_weather`", "get user", "Finish"]
JOINS = [" with Action Input: ", " with action input: ", "\nAction Input: ", " with Action Input:\n",
         "withAction Input:", " with Action_Input: ", " with  Action Input:   ", "\nwith Action Input: ", " (",
         " Action Input: "]
INPUTS = ["{}", "{'name': 'Lyon'}", '{"answer": 3}', '{"x": true}', "{\n  'name': 'Lyon'\n}", "", "Lyon",
          "[1, 2]", "{'answer': 'finish'}", "{'a': 1}  ", "```{}```"]
ENDINGS = ["", "\n", "\n\n", "\nObservation: done", " I hope this works.",
           "\nAction: finish with Action Input: {'answer': 1}",
           "\n\nThought: then\nAction: get_user_current_date with Action Input: {}", "</s>"]


def generated(count: int, seed: int = 0) -> list[str]:
    """``count`` responses drawn from every combination of the parts above (bare calls, two calls, prose around
    the call, multi-line inputs, a missing or misspelt ``Action Input``, case variations)."""
    every = list(itertools.product(THOUGHTS, MARKERS, TOOLS, JOINS, INPUTS, ENDINGS))
    rng = random.Random(seed)
    return ["".join(parts) for parts in rng.sample(every, count)]


def test_the_default_rule_equals_agentgyms_tool_servers_on_generated_responses() -> None:
    responses = generated(4000) + ["", "\n", "with Action Input: {}", "Action: with Action Input: {}",
                                   "Action: a with Action Input: b with Action Input: {}",
                                   "Action: a with Action Input: {}\nwith Action Input: {'x': 1}",
                                   # long lines around the call: ours searches only where a match can start
                                   "x" * 3000 + "\nAction: a with Action Input: {}",
                                   "x" * 3000 + " with Action Input: {}",
                                   "Action: a with Action Input: {} " + "x" * 3000 + "\nmore",
                                   "Thought:\n\n  \t" + "y " * 500 + "\n \n with Action Input: {'a': 1}\n",
                                   "Action: a with Action Input: " * 100 + "\n{}",
                                   "\u00a0\nAction: a\u2028with Action Input:\x85{}"]
    kinds: dict[str, int] = {}
    for response in responses:
        expected = upstream(response)
        assert ours(response) == expected, response
        kinds[expected[0]] = kinds.get(expected[0], 0) + 1
    assert min(kinds.values()) > 10 and len(kinds) == 4, kinds  # every outcome is exercised


def test_the_rules_named_cases() -> None:
    """What a model meets by default, case by case (and the whole step through a Weather env)."""
    assert ours("Action: get_user_current_date with Action Input: {}")[:3] == ("call", "get_user_current_date", {})
    no_action = ("error", "ERROR | TypeError(cannot unpack non-iterable NoneType object)", False)
    assert ours("get_user_current_date with Action Input: {}") == no_action  # a bare call
    assert ours("action: get_user_current_date with Action Input: {}") == no_action  # "Action:" is case-sensitive
    assert ours("Action:\nget_user_current_date with Action Input: {}") == no_action  # "Action:" on its own line
    assert ours("Action: a with Action Input: {}\nAction: b with Action Input: {}")[1] == "b"  # the last call
    assert ours("Action: a with Action Input: {}\nI hope this works.") == ("format error",)  # prose after
    assert ours("Action: a with Action Input: {\n 'x': 1\n}") == ("format error",)  # an input over lines
    assert ours("Action: a with action input: {}") == ("format error",)
    assert ours("Action: a") == ("format error",)  # no Action Input
    assert ours("Thought: x.\nAction: a with Action Input:\n{'x': 1}")[:3] == ("call", "a", {"x": 1})
    env = gym.make("AgentGym/Weather-v0")
    env.reset(options={"split": "test", "index": 0})
    obs, _, terminated, _, info = env.step("Thought: go.\nfinish with Action Input: {'answer': 1}")
    assert obs == f"Observation: {no_action[1]}\nGive me one action." and not terminated and not info["valid_action"]
    obs, _, terminated, _, _ = env.step("Thought: go.\nAction: finish with Action Input: {'answer': 1")
    assert obs.startswith("Observation: ERROR | Exception(Parameters") and not terminated  # the episode goes on
    obs, _, terminated, _, _ = env.step("Action: finish with Action Input: {}")  # upstream: a KeyError, caught
    assert obs == "Observation: ERROR | KeyError('answer')\nGive me one action." and not terminated
    obs, _, terminated, _, _ = env.step("Action: get_user_current_date with Action Input: {}\nDone.")
    assert obs == AGENTGYM_FORMAT_ERROR and not terminated
    env.close()


def test_our_lenient_rule_is_the_detailed_instruction_opt_in() -> None:
    env = gym.make("AgentGym/Weather-v0", detailed_instruction=True)
    env.reset(options={"split": "test", "index": 0})
    today = env.unwrapped.service.today.isoformat()
    for response in ["get_user_current_date", "Action: get_user_current_date with Action Input: {}\nDone.",
                     '<tool_call>{"name": "get_user_current_date", "arguments": {}}</tool_call>']:
        obs, _, _, _, info = env.step(response)
        assert obs == today and info["valid_action"], response
    obs, _, _, _, info = env.step("Action: a with Action Input: {}\nAction: b with Action Input: {}")
    assert "more than one 'Action:' line" in obs and not info["valid_action"]
    env.close()
