"""Which tool-env steps end an episode, and with what reward: AgentGym's tool servers' rule by default.

``upstream`` re-writes, from reading WooooDyy/AgentGym's ``agentenv-tool`` (``agentenv_*/*_environment.py``
``step``, ``Toolusage/toolusage/environment/*_env.py`` ``step``, ``utils/*/*_tools.py``), what decides a step's
kind, ``done`` and reward:

- the server rebuilds ``<name> with Action Input: <input>`` (no call: its format error, not done);
- the env's ``parse_action`` reads the tool after ``Action:`` and ``eval``s the input; when that raises (no
  ``Action:``, an unreadable input) ``step``'s first ``except`` returns the error, not done, reward unchanged;
- the tool is picked by name; its branch indexes the input by the arguments it reads (``params["x"]``) before the
  tool runs: a missing one (``KeyError``) or a non-dict input (``TypeError``) raises inside the second ``try``,
  whose ``except`` returns too: not done, reward unchanged. ``finish`` reads ``answer``, except Sheet's ``finish()``
  (no argument); Sheet has no ``check_valid_actions``;
- an unknown tool gets ``ERROR | Invalid action: x.`` without raising; a tool's own refusal is returned as a value
  (``return False, "..."``, caught exceptions in Academia and Sheet, the web APIs' error text);
- then ``done = "Finish" in action or "finish" in action`` (Sheet: ``"finish" in action.lower()``), and the reward
  rises only by a recorded subgoal (a failed call records none).

Our envs are driven through the same erroring actions, a fresh episode each, and compared on
(observation kind, done, reward).
"""

from __future__ import annotations

import ast
import re
from typing import Any

import gymnasium as gym
import pytest

import agentgym_envs  # noqa: F401  (registers the ids)
from agentgym_envs.tools.base import AGENTGYM_FORMAT_ERROR

FAMILIES = ["Weather", "Movie", "Academia", "Sheet", "TODOList"]


def upstream(family: str, message: str, reads: dict[str, tuple[str, ...]]) -> tuple[str, bool]:
    """(kind, done) of one ``/step`` on AgentGym's ``family`` server; ``reads``: each tool and the arguments its
    branch of ``step`` indexes. Kinds: format, raised, invalid, listed, answered (a tool ran or ``finish``)."""
    found = re.search(r"\s*(.*?)\s*with\s*Action Input:\s*(.*?)$", message)
    if not found:
        return "format", False
    action = found.group(1) + " with Action Input: " + found.group(2)
    try:
        matched = re.match(r".*?Action:\s*(.*?)\s*with\s*Action Input:\s*(.*?)$", action, re.MULTILINE | re.DOTALL)
        if not matched:
            raise TypeError("cannot unpack non-iterable NoneType object")
        action_type = matched.group(1)
        try:
            params: Any = ast.literal_eval(matched.group(2))
        except Exception:
            raise Exception("Parameters in action input are not valid, please change your action input.") from None
    except Exception:
        return "raised", False
    try:
        if action_type == "finish":
            if family != "Sheet":
                params["answer"]
            kind = "answered"
        elif action_type == "check_valid_actions" and family != "Sheet":
            kind = "listed"
        elif action_type in reads:
            for name in reads[action_type]:
                params[name]
            kind = "answered"  # the tool ran: a result, or its refusal returned as a value
        else:
            kind = "invalid"
    except Exception:
        return "raised", False
    done = "finish" in action.lower() if family == "Sheet" else ("Finish" in action or "finish" in action)
    return kind, done


def kind_of(observation: str) -> str:
    """Our default observation's kind, as ``upstream`` names them."""
    if observation == AGENTGYM_FORMAT_ERROR:
        return "format"
    body = observation.removeprefix("Observation: ").removesuffix("\nGive me one action.")
    if re.match(r"ERROR \| (KeyError|TypeError|Exception)\(", body):
        return "raised"
    if body.startswith("ERROR | Invalid action: "):
        return "invalid"
    if body.startswith("You can use following valid actions: "):
        return "listed"
    return "answered"


def erroring_messages(tool: str, required: tuple[str, ...]) -> list[str]:
    """Missing arguments, "finish" inside an argument, a non-dict input, bad values, unknown tools, an unreadable
    input, no ``Action:``, ``finish`` with and without an answer, case variants of "finish"."""
    bad_values = "{" + ", ".join(f"'{name}': 'Finish Line'" for name in required) + "}"
    return [
        f"Action: {tool} with Action Input: {{}}",
        f"Thought: done soon.\nAction: {tool} with Action Input: {{'note': 'finish'}}",
        f"Action: {tool} with Action Input: ['Finish']",
        f"Action: {tool} with Action Input: {bad_values}",
        f"Action: {tool} with Action Input: {bad_values[:-1]}, 'extra': 'finish'}}",
        "Action: finish_task with Action Input: {}",
        "Action: lookup with Action Input: {}",
        f"Action: {tool} with Action Input: {{'{required[0]}': 1",
        f"{tool} with Action Input: {{'x': 'finish'}}",
        "Action: finish with Action Input: {}",
        "Action: finish with Action Input: {'answer': 'x'}",
        "Action: finish with Action Input: {'result': 'x'}",
        "Action: finish with Action Input: None",
        "Action: FINISH with Action Input: {}",
        "Action: check_valid_actions with Action Input: {}",
        f"Action: {tool} with Action Input: {{}}\nI will finish after this.",
    ]


@pytest.mark.parametrize("family", FAMILIES)
def test_erroring_steps_end_and_score_as_agentgyms_tool_servers(family: str) -> None:
    env = gym.make(f"AgentGym/{family}-v0").unwrapped
    env.reset(options={"split": "test", "index": 0})
    reads = {tool.name: tuple(p.name for p in tool.params if p.required) for tool in env.service.TOOLS}
    tool = next(name for name, required in reads.items() if required)
    try:
        for message in erroring_messages(tool, reads[tool]):
            env.reset(options={"split": "test", "index": 0})
            observation, reward, terminated, truncated, info = env.step(message)
            expected_kind, expected_done = upstream(family, message, reads)
            assert (kind_of(observation), terminated) == (expected_kind, expected_done), (message, observation)
            assert reward == 0.0 and info["score"] == 0.0 and not truncated, message  # no subgoal recorded
    finally:
        env.close()


def test_an_error_keeps_the_reward_reached_and_a_finish_after_it_ends() -> None:
    """A raised error neither ends nor lowers what was reached (upstream returns its ``self.reward``)."""
    from agentgym_envs.tools.answers import Gold

    env = gym.make("AgentGym/Weather-v0").unwrapped
    env.reset(options={"split": "test", "index": 0})
    env.current.gold = Gold(env.service.today.isoformat())
    _, reward, terminated, _, info = env.step("Action: get_user_current_date with Action Input: {}")
    assert reward == 1.0 and not terminated
    observation, reward, terminated, _, info = env.step("Action: get_latitude_longitude with Action Input: "
                                                        "{'finish': True}")
    assert observation == "Observation: ERROR | KeyError('name')\nGive me one action."
    assert reward == 0.0 and info["score"] == 1.0 and not terminated and not info["valid_action"]
    _, reward, terminated, _, info = env.step("Action: finish with Action Input: {'answer': 'x'}")
    assert terminated and info["success"] and info["score"] == 1.0
    env.close()


def test_sheets_finish_takes_no_answer_and_shows_the_sheet() -> None:
    env = gym.make("AgentGym/Sheet-v0").unwrapped
    _, info = env.reset(options={"split": "test", "index": 0})
    assert "\n\nName: finish()\nDescription: Return an answer and finish the task\nReturns:\n" in info["instruction"]
    assert "check_valid_actions" not in info["instruction"]
    sheet = env.current.context["sheet"]
    env.step(f"Action: open_sheet with Action Input: {{'sheet_name': '{sheet}'}}")
    values = str(env.service.get_all_values())
    for finish in ("{}", "{'answer': 'done'}"):
        env.reset(options={"split": "test", "index": 0})
        env.step(f"Action: open_sheet with Action Input: {{'sheet_name': '{sheet}'}}")
        observation, reward, terminated, _, info = env.step(f"Action: finish with Action Input: {finish}")
        assert observation == f"Observation: {values}\nGive me one action." and terminated and reward == 0.0
    env.reset(options={"split": "test", "index": 0})
    observation, _, terminated, _, _ = env.step("Action: finish with Action Input: {}")  # no sheet open
    assert observation == "Observation: Please open a sheet before operating it\nGive me one action." and terminated
    env.close()


def test_our_rule_stays_behind_detailed_instruction() -> None:
    """``detailed_instruction=True``: only ``finish`` ends; our explanations; Sheet's ``finish`` grades the data."""
    env = gym.make("AgentGym/Sheet-v0", detailed_instruction=True).unwrapped
    env.reset(options={"split": "test", "index": 0})
    observation, _, terminated, _, _ = env.step("Action: finish_task with Action Input: {}")
    assert observation.startswith("Error: unknown tool 'finish_task'") and not terminated
    observation, _, terminated, _, _ = env.step('Action: open_sheet with Action Input: {"note": "finish"}')
    assert "unknown argument(s) 'note'" in observation and not terminated
    observation, _, terminated, _, _ = env.step("Action: finish with Action Input: {}")
    assert observation.startswith("Episode finished.") and terminated
    env.close()
