"""Wordle step by step against AgentGym's Wordle server, written out from its code as read.

AgentGym's ``agentenv-lmrlgym`` server wraps LMRL-Gym's ``WordleEnvironment`` in
``ReformatWordleEnvironment`` over ``tweet_words.txt``. Read as code, one step of it does this:

- the client sends the text after the first ``Action:`` (the whole response if there is none), stripped;
- the reformatting wrapper drops the spaces of the action;
- ``/reset`` with ``seed`` sets the vocabulary's ``random.Random(seed)``; LMRL-Gym's game records every
  guess, valid or not. A guess outside the vocabulary gets an empty transition and the bad-word reward -1;
  a valid guess draws a word from the words that fit the state (``rng.choice``), updates the state per
  letter (``correct_pos`` / ``wrong_pos`` / ``not_used``), refilters the vocabulary and reads the marks back
  from the state (``transition_sequence``: ``<g>``, ``<b>``, ``<y>``); reward 0 when one word fits and it
  was guessed, else -1; over after six guesses or at reward 0;
- the wrapper writes the marks as ``b y g g b`` and a newline; the server turns an empty observation into
  ``invalid word`` and adds 1 to a reward <= 0.
"""

from __future__ import annotations

import random

import gymnasium as gym
import numpy as np

import agentgym_envs  # noqa: F401 (registers the ids)
from agentgym_envs.wordle.lmrl import tweet_words
from agentgym_envs.wordle.words import answers

INVALID = ["", "crane!", "guess crane", "CRANE", "cat", "qzxvw", "c r a n e s", "Action: hello world", "12345"]
NOT_HERE, POSSIBLE, HERE = 0, 1, 2


class UpstreamWordle:
    """AgentGym's Wordle server over LMRL-Gym's game (``WordleGame``, ``WordleState``, ``CharState``), as its code
    reads: the state is 26 letters x 5 positions."""

    def __init__(self, seed: int, vocabulary: tuple[str, ...]):
        self.vocab = list(vocabulary)
        self.rng = random.Random(seed)
        self.state = [[POSSIBLE] * 5 for _ in range(26)]
        self.filtered = list(self.vocab)
        self.history: list[str] = []

    def _satisfies(self, index: int, word: str) -> bool:
        knowledge, c = self.state[index], chr(97 + index)
        if all(k == POSSIBLE for k in knowledge):
            return True
        if all(k == NOT_HERE for k in knowledge):
            return c not in word
        for i in range(5):
            if knowledge[i] == HERE and c != word[i]:
                return False
            if knowledge[i] == NOT_HERE and c == word[i]:
                return False
        return c in word

    def step(self, response: str) -> tuple[str, float, bool]:
        parts = response.split("Action:")
        action = (parts[1] if len(parts) > 1 else parts[0]).strip().replace(" ", "")
        self.history.append(action)
        if len(action) != 5 or not all("a" <= c <= "z" for c in action) or action not in self.vocab:
            return "invalid word", -1.0 + 1, len(self.history) == 6
        target = self.rng.choice(self.filtered)
        new = [list(k) for k in self.state]
        for i, c in enumerate(action):
            k = new[ord(c) - 97]
            if c == target[i]:
                k[i] = HERE
            elif c in target:
                k[i] = NOT_HERE
            else:
                k[:] = [NOT_HERE] * 5
        self.state = new
        self.filtered = [w for w in self.vocab if all(self._satisfies(j, w) for j in range(26))]
        marks = []
        for i, c in enumerate(action):
            k = self.state[ord(c) - 97]
            if k[i] == HERE:
                marks.append("g")
            elif all(x == NOT_HERE for x in k):
                marks.append("b")
            elif k[i] == NOT_HERE:
                marks.append("y")
        reward = int(len(self.filtered) == 1 and self.filtered[0] in self.history) - 1
        return " ".join(marks) + "\n", reward + 1.0, len(self.history) == 6 or reward == 0


class FixedWordWordle:
    """``vocabulary="ours"``: AgentGym's step rules with our answers and one fixed hidden word per item."""

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


def _compare(env: gym.Env, make_upstream, episodes: int) -> tuple[int, int, int]:
    rng = np.random.default_rng(0)
    equal = steps = solved = 0
    for episode in range(episodes):  # the 25 test items, each with different random and invalid guesses
        env.reset(options={"split": "test", "index": episode % 25})
        upstream = make_upstream(env)
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
    return equal, steps, solved


def test_wordle_matches_lmrl_gyms_game_step_for_step() -> None:
    env = gym.make("AgentGym/Wordle-v0").unwrapped  # the server has no turn cap but the six attempts
    equal, steps, solved = _compare(env, lambda e: UpstreamWordle(e.item_id, tweet_words()), 200)
    print(f"wordle: {equal}/{steps} steps equal")
    assert equal == steps, f"{equal}/{steps} steps equal"
    assert solved >= 60


def test_vocabulary_ours_keeps_one_hidden_word_per_item() -> None:
    env = gym.make("AgentGym/Wordle-v0", vocabulary="ours").unwrapped
    vocabulary = frozenset(answers())
    equal, steps, solved = _compare(env, lambda e: FixedWordWordle(e.answer, vocabulary), 25)
    assert equal == steps, f"{equal}/{steps} steps equal"
    assert solved >= 8
