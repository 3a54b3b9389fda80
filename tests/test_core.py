"""The shared core: text space, parsers, lazy registration, missing extras, item selection."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

from agentgym_envs.core import MissingExtraError, Outcome, TextSpace, parse_backtick, parse_react, parse_tags, require


def test_text_space_accepts_any_string_up_to_its_length() -> None:
    space = TextSpace(max_length=10, seed=0)
    assert space.contains("héllo\n世界!") and space.contains("")
    assert not space.contains("x" * 11) and not space.contains(b"bytes") and not space.contains(5)
    samples = [space.sample() for _ in range(50)]
    assert all(space.contains(s) for s in samples) and len(set(samples)) > 40
    again = TextSpace(max_length=10, seed=0)
    assert [again.sample() for _ in range(50)] == samples


def test_text_space_in_shared_memory_round_trips_any_string() -> None:
    from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory

    space = TextSpace(12)
    memory = create_shared_memory(space, n=3)
    view = read_from_shared_memory(space, memory, n=3)
    texts = ["héllo\n☃", "\x00a\x00", "\ud800 x"]
    for index, text in enumerate(texts):
        write_to_shared_memory(space, index, text, memory)
    assert view == tuple(texts) and view[1:] == tuple(texts[1:])  # a live view: it shows what was written
    write_to_shared_memory(space, 0, "short", memory)
    assert view[0] == "short" and list(view) == ["short", *texts[1:]]
    write_to_shared_memory(space, 2, "x" * 12, memory)
    assert view[2] == "x" * 12


def test_async_vector_envs_work_with_shared_memory() -> None:
    """make_vec's async mode (shared memory by default) gives what the sync mode gives."""
    actions = ("inventory", "Thought: é ☃ \x00\n\nAction:\nget 1 oak logs")
    results = {}
    for mode in ("sync", "async"):
        envs = gym.make_vec("AgentGym/TextCraft-Depth1-v0", num_envs=2, vectorization_mode=mode)
        try:
            first, _ = envs.reset(seed=0, options={"item_id": 0})
            then, rewards, *_ = envs.step(actions)
            results[mode] = (tuple(first), tuple(then), rewards.tolist())
        finally:
            envs.close()
    assert results["async"] == results["sync"] and results["sync"][1][1] == "Got 1 oak logs"


@pytest.mark.parametrize(
    "response, action",
    [
        ("Thought: I need wood.\n\nAction:\nget 1 oak logs", "get 1 oak logs"),
        ("Thought: x\nAction: craft 1 stick using 2 bamboo", "craft 1 stick using 2 bamboo"),
        ("**Action:** inventory", "inventory"),
        ("get 2 oak logs", "get 2 oak logs"),
        ("Thought: go\nAction:\n`move forward`", "move forward"),
    ],
)
def test_react_parser_extracts_one_action(response: str, action: str) -> None:
    assert parse_react(response).action == action


@pytest.mark.parametrize(
    "response, message",
    [
        ("", "empty"),
        ("Thought: a\nAction: one\nAction: two", "more than one"),
        ("Thought: only thinking\nstill thinking", "No 'Action:'"),
        ("Thought: x\nAction:", "empty"),
    ],
)
def test_react_parser_explains_what_is_wrong(response: str, message: str) -> None:
    parsed = parse_react(response)
    assert parsed.action is None and message in parsed.error and "Action:" in parsed.error


def test_tag_parser() -> None:
    assert parse_tags("I think.<search> who founded X </search>", ("search", "answer")) == ("search", "who founded X")
    assert parse_tags("<answer>Paris</answer><search>q</search>", ("search", "answer")) == ("answer", "Paris")
    assert "not closed" in parse_tags("<answer>Paris", ("search", "answer")).error
    assert "empty" in parse_tags("<search>  </search>", ("search", "answer")).error
    assert "No action tag" in parse_tags("Paris", ("search", "answer")).error


def test_backtick_parser() -> None:
    assert parse_backtick("Let's click.\n```click [12]```").action == "click [12]"
    assert parse_backtick("```\ntype [3] [hello] [1]\n```").action == "type [3] [hello] [1]"
    assert "triple backticks" in parse_backtick("click [12]").error


def test_require_names_the_pip_command() -> None:
    with pytest.raises(MissingExtraError, match=r"pip install 'agentgym-rl\[babyai\]'"):
        require("a_module_that_is_not_installed", extra="babyai")


def test_making_an_env_whose_engine_is_missing_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['textcraft'] = None\n"
        "import gymnasium as gym, agentgym_envs\n"
        "try:\n"
        "    gym.make('AgentGym/TextCraft-Depth1-v0').reset(seed=0)\n"
        "except agentgym_envs.MissingExtraError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "pip install 'agentgym-rl[textcraft]'" in out


def test_import_is_light() -> None:
    code = (
        "import sys, agentgym_envs\nheavy = [m for m in ('torch', 'transformers', 'trl', 'minigrid', 'scienceworld', "
        "'selenium', 'bm25s', 'textcraft') if m in sys.modules]\nprint(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_make_by_module_prefix_in_a_fresh_process() -> None:
    code = ("import gymnasium as gym; env = gym.make('agentgym_envs:AgentGym/TextCraft-Depth1-v0'); "
            "print(env.spec.max_episode_steps)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "30"


def test_reset_without_options_draws_a_train_item_from_the_seed() -> None:
    import agentgym_envs

    env = gym.make("AgentGym/TextCraft-v0")
    train = set(agentgym_envs.get_task("AgentGym/TextCraft-v0").split("train"))
    items = [env.reset(seed=seed)[1]["item_id"] for seed in range(20)]
    assert set(items) <= train and len(set(items)) > 10
    assert items == [env.reset(seed=seed)[1]["item_id"] for seed in range(20)]
    assert env.reset(options={"split": "test"})[1]["split"] == "test"
    env.close()


def test_step_before_reset_and_non_text_actions_are_clear_errors() -> None:
    env = gym.make("AgentGym/TextCraft-v0").unwrapped
    with pytest.raises(gym.error.ResetNeeded):
        env.step("inventory")
    env.reset(seed=0)
    with pytest.raises(TypeError, match="str"):
        env.step(np.int64(3))


def test_step_info_names_the_parsed_action() -> None:
    """``info["parsed_action"]``: what the parser took from the reply and the engine got (the record's
    ``parsed_actions``, shown by the viewer); None when the parser found nothing to play."""
    env = gym.make("AgentGym/TextCraft-Depth1-v0")
    env.reset(seed=0)
    assert env.step("Thought: look.\nAction: inventory")[4]["parsed_action"] == "inventory"
    assert env.step("Thought: hm.\nno action line")[4]["parsed_action"] == ""  # as AgentGym's client: nothing
    env.close()
    env = gym.make("AgentGym/Maze-v0", extra_feedback=True)  # the strict ReAct parser
    env.reset(seed=0)
    info = env.step("Thought: no action here.\nI am thinking.")[4]
    assert info["parsed_action"] is None and info["valid_action"] is False
    env.close()


def test_render_ansi_shows_last_action_and_observation() -> None:
    env = gym.make("AgentGym/TextCraft-Depth1-v0", render_mode="ansi")
    env.reset(seed=0)
    env.step("Action: inventory")
    assert env.render() == "> Action: inventory\nInventory: You are not carrying anything.\n"
    env.close()


def test_a_response_without_action_follows_each_client_and_the_bare_command_is_opt_in() -> None:
    """AgentGym's TextCraft and BabyAI clients send the empty action for a response without ``Action:``
    and refuse two ``Action:`` lines; our single-line rule is behind the family's opt-in."""
    textcraft = gym.make("AgentGym/TextCraft-Depth1-v0")
    textcraft.reset(seed=0)
    assert textcraft.step("inventory")[0] == "Could not execute "  # the empty action, as AgentGym's server answers
    two = textcraft.step("Action: inventory\nAction: inventory")
    assert two[0].startswith("Error: Only one 'Action'") and not two[4]["valid_action"]
    assert textcraft.step("Thought: hm\nAction:\n\n inventory")[0].startswith("Inventory:")
    lenient = gym.make("AgentGym/TextCraft-Depth1-v0", lenient_crafting=True)
    lenient.reset(seed=0)
    assert lenient.step("inventory")[0].startswith("Inventory:")
    babyai = gym.make("AgentGym/BabyAI-GoTo-v0")
    babyai.reset(seed=0)
    babyai.unwrapped._act = lambda action: Outcome(action or "<empty>")  # what reaches the layer
    assert babyai.step("turn left")[0] == "<empty>" and babyai.step("Action: turn left")[0] == "turn left"
    ours = gym.make("AgentGym/BabyAI-GoTo-v0", text_layer="ours")
    ours.reset(seed=0)
    ours.unwrapped._act = lambda action: Outcome(action or "<empty>")
    assert ours.step("turn left")[0] == "turn left"
    webshop = gym.make("AgentGym/WebShop-v0")  # its client: without "Action:", only a search[ or click[ text
    webshop.reset(seed=0)
    webshop.unwrapped._act = lambda action: Outcome(action or "<empty>")
    assert webshop.step("search[red shoes]")[0] == "search[red shoes]" and webshop.step("buy it")[0] == "<empty>"
    assert webshop.step("Action: a\nAction: click[b]")[0] == "click[b]"
    for env in (textcraft, lenient, babyai, ours, webshop):
        env.close()


def test_a_missing_module_is_named_in_grammatical_english() -> None:
    """Issue 49: "needs 'a', 'b', which is not installed" and a server told "this environment needs 'fastapi'"."""
    from agentgym_envs.core.extras import MissingExtraError, not_installed, require

    assert not_installed(["english_words", "wordfreq"]) == (
        "the Python modules 'english_words' and 'wordfreq', which are not installed")
    assert not_installed(["wordfreq"]) == "the Python module 'wordfreq', which is not installed"
    with pytest.raises(MissingExtraError) as error:
        require("agentgym_no_such_module", extra="server")
    assert str(error.value).startswith("The Python module 'agentgym_no_such_module' is not installed (it comes with "
                                       "the [server] extra). Install it with: pip install 'agentgym-rl[server]'")


def test_textspace_holds_any_text_where_gymnasiums_text_does_not() -> None:
    """docs/envs/index.md: why the spaces are TextSpace, not spaces.Text."""
    from gymnasium import spaces

    from agentgym_envs.core import TextSpace

    reply = "Thought: wood first.\nAction: get 1 oak log — ok?"
    assert TextSpace(100).contains(reply) and not spaces.Text(100).contains("Action: get 1 oak log")
    assert not TextSpace(10).contains(reply) and not TextSpace(100).contains(b"bytes")
    sample = TextSpace(100, seed=0).sample()
    assert sample.replace("\n", " ").isprintable() and len(sample) <= 64
