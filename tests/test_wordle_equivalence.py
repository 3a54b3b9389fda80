"""Wordle step by step against AgentGym's Wordle server, written out from its code as read.

AgentGym's ``agentenv-lmrlgym`` server wraps LMRL-Gym's ``WordleEnvironment`` in
``ReformatWordleEnvironment``. Read as code, one step of it does this:

- the client sends the text after the first ``Action:`` (the whole response if there is none), stripped;
- the reformatting wrapper drops the spaces of the action;
- LMRL-Gym's game records every guess, valid or not, and the game is over after six guesses or
  at the hidden word. A guess outside the vocabulary gets an empty transition and the bad-word
  reward -1; a valid guess gets its letter marks (``g`` in place, ``y`` in the word elsewhere,
  ``b`` absent), reward 0 for the word and -1 otherwise;
- the wrapper writes the marks as ``b y g g b`` and a newline; the server turns an empty
  observation into ``invalid word`` and adds 1 to a reward <= 0.

The hidden word is ours (item ``i`` is ``answers()[i]``): LMRL-Gym draws it from the words that fit
the feedback, the same distribution (``docs/fidelity.md``).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

import agentgym_envs  # noqa: F401 (registers the ids)
from agentgym_envs.wordle.words import answers

INVALID = ["", "crane!", "guess crane", "CRANE", "cat", "qzxvw", "c r a n e s", "Action: hello world", "12345"]


class UpstreamWordle:
    """AgentGym's Wordle server over LMRL-Gym's game, as its code reads."""

    def __init__(self, answer: str, vocabulary: frozenset[str]):
        self.answer = answer
        self.vocabulary = vocabulary
        self.guesses: list[str] = []

    def step(self, response: str) -> tuple[str, float, bool]:
        parts = response.split("Action:")
        word = (parts[1] if len(parts) > 1 else parts[0]).strip().replace(" ", "")
        self.guesses.append(word)
        over = len(self.guesses) >= 6
        if word not in self.vocabulary:
            return "invalid word", -1.0 + 1, over
        marks = ["g" if g == a else "y" if g in self.answer else "b" for g, a in zip(word, self.answer)]
        reward = 0.0 if word == self.answer else -1.0
        return " ".join(marks) + "\n", reward + 1, over or word == self.answer


def _response(env: gym.Env, rng: np.random.Generator) -> str:
    draw = rng.random()
    if draw < 0.6:
        return env.unwrapped.oracle_action()
    if draw < 0.8:
        return "Thought:\nTry a word.\n\nAction:\n" + env.unwrapped.random_action(rng)
    return f"Thought:\nLet me try this.\n\nAction:\n{INVALID[int(rng.integers(len(INVALID)))]}"


def test_wordle_matches_lmrl_gyms_game_step_for_step() -> None:
    env = gym.make("AgentGym/Wordle-v0").unwrapped  # the server has no turn cap but the six attempts
    vocabulary = frozenset(answers())
    rng = np.random.default_rng(0)
    equal = steps = solved = 0
    for episode in range(100):  # each of the 25 test items four times, with different random and invalid guesses
        env.reset(options={"split": "test", "index": episode % 25})
        upstream = UpstreamWordle(env.answer, vocabulary)
        for _ in range(10):
            response = _response(env, rng)
            observation, reward, terminated, _, info = env.step(response)
            expected = upstream.step(response)
            steps += 1
            equal += (observation, reward, terminated) == expected
            if terminated or expected[2]:
                solved += info["success"]
                break
    env.close()
    print(f"wordle: {equal}/{steps} steps equal")
    assert equal / steps >= 0.995, f"{equal}/{steps} steps equal"
    assert solved >= 30
