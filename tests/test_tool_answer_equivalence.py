"""The tool envs' ``finish`` grading against AgentGym's tool servers (``agentenv-tool``), case by case.

AgentGym's ``Toolusage`` envs evaluate the Action Input as Python, record ``finish``'s answer (a
list sorted first) as a subgoal, and win when ``gold_subgoal in recorded_subgoals``, i.e. under
Python's ``==``. The rule is re-implemented small below from that code; the cases are every question
item of the test splits and the first train items of Weather, Movie, Academia, Sheet and TODOList,
each answered 9-13 ways (the gold itself, case, punctuation, units, rounding, numbers as text, lists
reordered or as text, yes/no spellings). By default the env must agree with the rule on every case;
``lenient_answers=True`` (our forgiving grading, the default before issue 38) is measured too.
"""

from __future__ import annotations

import ast
import json
from typing import Any, Iterator

import gymnasium as gym
import pytest

import agentgym_envs
from agentgym_envs.tools.answers import Gold

QUESTION_ENVS = ["Weather", "Movie", "Academia", "Sheet", "TODOList"]
TRAIN_ITEMS_PER_ENV = 20


def agentgym_wins(action_input: str, gold: Gold) -> bool:
    """AgentGym's verdict on ``finish with Action Input: <action_input>``.

    Its env ``eval``s the input (``literal_eval`` here: the same values for literals; JSON's
    ``true``/``false``/``null`` are names Python does not know, an error that wins nothing), its
    ``finish`` sorts a list answer (mixed types: an error), and the task is won when the recorded
    answer equals the gold subgoal. Its data stores gold lists sorted; our yes/no questions ask for
    the words "yes"/"no", which are the subgoal here.
    """
    try:
        answer = ast.literal_eval(action_input)["answer"]
        if type(answer) == list:  # noqa: E721 - AgentGym's own test
            answer = sorted(answer)
    except Exception:
        return False
    subgoal = ("yes" if gold.value else "no") if gold.kind == "bool" else gold.value
    if type(subgoal) == list:  # noqa: E721
        subgoal = sorted(subgoal)
    return subgoal in [answer]


def near_misses(gold: Gold) -> Iterator[Any]:
    """The gold and answers an agent might give instead of it, most of them wrong under ``==``."""
    value = gold.value
    if gold.kind == "number":
        number = float(value)
        yield from (value, number, str(value), f"{value} units", [value], number + 1, -number if number else 1)
        if number.is_integer():
            yield from (int(number), f"{int(number):,}", f"{number:.1f}")
        else:
            yield from (round(number, 1), round(number), f"{number:.2f}")
        if gold.tolerance:
            yield from (number + gold.tolerance * 0.5, number - gold.tolerance * 0.9, number + gold.tolerance * 3)
    elif gold.kind == "list":
        names = list(value)
        yield from (names, names[::-1], sorted(names), ", ".join(names), [n.lower() for n in names], names[:-1],
                    names + names[:1], " and ".join(names), [n.upper() for n in names])
    elif gold.kind == "bool":
        word = "yes" if value else "no"
        yield from (word, word.capitalize(), word.upper(), f"{word}.", value, str(value).lower(),
                    "no" if value else "yes", f"{word}, it does", [word])
    else:
        text = str(value)
        yield from (text, text.lower(), text.upper(), text.title(), f"{text}.", f"The {text}", f" {text} ",
                    text.replace(" ", "  "), text[:-1], f'"{text}"', [text], text + "s")


def question_golds(name: str) -> Iterator[tuple[int, Gold]]:
    """(item id, gold) of every question item among the test split and the first train items."""
    env_id = f"AgentGym/{name}-v0"
    task = agentgym_envs.get_task(env_id)
    items = [int(i) for i in task.split("test")] + [int(i) for i in task.split("train")[:TRAIN_ITEMS_PER_ENV]]
    env = gym.make(env_id)
    try:
        for item in items:
            env.reset(options={"item_id": item})
            gold = env.unwrapped.current.gold
            if gold is not None:
                yield item, gold
    finally:
        env.close()


@pytest.fixture(scope="module")
def cases() -> list[tuple[str, Gold, str]]:
    """(env, gold, JSON action input) for every near miss of every question gold."""
    found = []
    for name in QUESTION_ENVS:
        for _, gold in question_golds(name):
            for answer in near_misses(gold):
                found.append((name, gold, json.dumps({"answer": answer}, ensure_ascii=False)))
    return found


def agreement(cases: list[tuple[str, Gold, str]], lenient: bool) -> tuple[int, list[tuple[str, Gold, str]]]:
    """How many cases the project's grading decides as AgentGym does, and the others."""
    differ = []
    for name, gold, action_input in cases:
        answer = json.loads(action_input)["answer"]
        ours = gold.matches(answer) if lenient else gold.matches_as_agentgym(answer)
        if ours != agentgym_wins(action_input, gold):
            differ.append((name, gold, action_input))
    return len(cases) - len(differ), differ


def test_default_grading_equals_agentgyms_on_every_case(cases: list[tuple[str, Gold, str]]) -> None:
    equal, differ = agreement(cases, lenient=False)
    print(f"\ntool answers, default: {equal} of {len(cases)} cases equal AgentGym's verdict")
    assert len(cases) > 1500 and not differ, [(n, g.value, a) for n, g, a in differ[:10]]
    wins = sum(agentgym_wins(action_input, gold) for _, gold, action_input in cases)
    assert 0 < wins < len(cases) / 3  # the cases are mostly near misses, and the gold itself wins


def test_lenient_answers_is_our_forgiving_rule_and_differs_measurably(cases: list[tuple[str, Gold, str]]) -> None:
    equal, differ = agreement(cases, lenient=True)
    print(f"\ntool answers, lenient_answers=True: {equal} of {len(cases)} cases equal AgentGym's verdict")
    by_env = {name: sum(1 for n, _, _ in differ if n == name) for name in QUESTION_ENVS}
    print("  differing per env:", by_env)
    assert differ and all(  # every difference is a win only the forgiving rule gives
        not agentgym_wins(action_input, gold) for _, gold, action_input in differ
    )


@pytest.mark.parametrize("name", ["Weather", "Academia"])
def test_the_env_grades_finish_as_agentgym_by_default_and_ours_on_request(name: str) -> None:
    env_id = f"AgentGym/{name}-v0"
    for lenient in (False, True):
        env = gym.make(env_id, lenient_answers=lenient)
        for item, gold in list(question_golds(name))[:6]:
            for answer in list(near_misses(gold))[:6]:
                env.reset(options={"item_id": item})
                action_input = json.dumps({"answer": answer})
                response = f"Thought: done.\n\nAction: finish with Action Input: {action_input}"
                _, reward, terminated, _, info = env.step(response)
                expected = gold.matches(answer) if lenient else agentgym_wins(action_input, gold)
                assert terminated and info["success"] is expected and reward == float(expected), (item, answer)
        env.close()


def test_lenient_answers_follows_detailed_instruction_unless_given() -> None:
    assert gym.make("AgentGym/Movie-v0").unwrapped.lenient_answers is False
    assert gym.make("AgentGym/Movie-v0", detailed_instruction=True).unwrapped.lenient_answers is True
    strict = gym.make("AgentGym/Movie-v0", detailed_instruction=True, lenient_answers=False)
    assert strict.unwrapped.lenient_answers is False
