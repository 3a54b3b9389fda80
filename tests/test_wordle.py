"""Wordle: the word lists, AgentGym's game (our wording opt-in), the feedback rules, bad guesses, the solver, the
splits."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import agentgym_envs
from agentgym_envs.wordle import build_splits, words
from agentgym_envs.wordle.lmrl import tweet_words
from agentgym_envs.wordle.game import (ABSENT, CORRECT, PRESENT, _answer_codes, _code, _patterns, score_guess,
                                       solver_guess)

# conftest.py makes the `env` (AgentGym's wording) and `ours` (extra_feedback=True) fixtures of it.
ENV_ID = "AgentGym/Wordle-v0"


def test_the_conversation_opens_as_agentgyms_wordle_client(env) -> None:
    obs, info = env.reset(options={"split": "test", "index": 0})
    assert info["instruction"] == "You are an expert wordle player."
    assert info["acknowledgement"] == "OK. I'll follow your instructions and try my best to solve the task."
    assert obs.startswith("Welcome to the game of Wordle. Your objective is to guess a hidden 5 letter word. You have "
                          "6 attempts to guess it correctly")
    assert '"b": If the environment returns a "b", it means that the letter at that position in your guessed word ' \
           "is not in the hidden word.\n" in obs
    vocabulary = "\n".join(tweet_words())  # LMRL-Gym's tweet_words.txt, in file order
    assert len(tweet_words()) == 40 and tweet_words()[:3] == ("panic", "solar", "shire")
    assert ("Here is the complete list of valid vocabulary words that are accepted by the game:\n```\n"
            f"{vocabulary}\n```\n\nHere is an example.") in obs
    assert obs.endswith("Now let's start a new game. Remember, the word you guess should be strictly in the "
                        "vocabulary. You should return your thought and your word strictly in the formation mentioned "
                        "above.")


@pytest.mark.parametrize("guess, answer, feedback", [
    ("crane", "crane", "g g g g g\n"),
    ("speed", "abide", "b b y y y\n"),  # LMRL-Gym marks every e that is elsewhere in the word
    ("eerie", "there", "y y y b g\n"),
    ("llama", "hello", "y y b b b\n"),
])
def test_feedback_is_lmrl_gyms_letters(guess: str, answer: str, feedback: str) -> None:
    from agentgym_envs.wordle.env import agentgym_feedback

    assert agentgym_feedback(guess, answer) == feedback


def test_agentgym_game_guesses_invalid_words_and_the_six_attempts() -> None:
    from agentgym_envs.wordle.env import agentgym_feedback

    env = gym.make(ENV_ID, vocabulary="ours")
    env.reset(options={"split": "test", "index": 2})
    answer = env.unwrapped.answer
    guess = "crane" if answer != "crane" else "house"
    obs, reward, terminated, _, info = env.step(f"Thought:\nA common opener.\n\nAction:\n{' '.join(guess)}")
    assert obs == agentgym_feedback(guess, answer) and info["valid_action"] and reward == 0.0 and not terminated
    for response in ("guess crane", "CRANE", "cat", "qzxvw"):
        obs, reward, terminated, _, info = env.step(response)
        assert obs == "invalid word" and not info["valid_action"] and reward == 0.0 and not terminated
    assert info["guesses_left"] == 1  # an invalid word uses an attempt, as in LMRL-Gym
    obs, reward, terminated, _, info = env.step("Action: c r a n e s")  # the sixth attempt ends the game
    assert obs == "invalid word" and terminated and not info["success"] and reward == 0.0


def test_free_invalid_guesses_keeps_the_six_attempts_for_words() -> None:
    from agentgym_envs.wordle.env import agentgym_feedback

    env = gym.make("AgentGym/Wordle-v0", free_invalid_guesses=True, vocabulary="ours").unwrapped
    env.reset(options={"split": "test", "index": 2})
    answer = env.answer
    for response in ("guess crane", "CRANE", "cat", "qzxvw", "Action: c r a n e s", "house!"):
        obs, reward, terminated, _, info = env.step(response)
        assert obs == "invalid word" and not info["valid_action"] and reward == 0.0 and not terminated
    assert info["guesses_left"] == 6
    wrong = [w for w in ["house", "water", "apple", "light", "music", "world", "crane"] if w != answer][:6]
    for word in wrong:
        obs, reward, terminated, _, info = env.step(" ".join(word))
    assert obs == agentgym_feedback(wrong[-1], answer) and terminated and not info["success"] and reward == 0.0


def test_agentgym_game_is_won_by_the_hidden_word() -> None:
    env = gym.make(ENV_ID, vocabulary="ours")
    env.reset(options={"split": "test", "index": 5})
    answer = env.unwrapped.answer
    obs, reward, terminated, _, info = env.step(f"Action: {answer}")  # the spaces are optional
    assert obs == "g g g g g\n" and reward == 1.0 and terminated and info["success"] and info["score"] == 1.0


def test_agentgym_game_draws_the_word_afresh_from_the_items_seed(env) -> None:
    """AgentGym's server: item i is ``seed`` i; each valid guess is answered against a word drawn with
    ``random.Random(i)`` from the words that fit so far; won when one word fits and it was guessed."""
    import random

    env.reset(options={"item_id": 7})
    drawn = random.Random(7).choice(tweet_words())  # the first draw: every word fits
    guess = "panic" if drawn != "panic" else "solar"
    obs, reward, terminated, _, info = env.step(f"Action: {' '.join(guess)}")
    from agentgym_envs.wordle.env import agentgym_feedback
    assert obs == agentgym_feedback(guess, drawn) and reward == 0.0 and not terminated and info["guesses_left"] == 5
    obs, _, _, _, info = env.step("Action: c r a n e")  # not in the 39 words
    assert obs == "invalid word" and not info["valid_action"] and info["guesses_left"] == 4
    game = env.unwrapped.game
    while not game.fitting == [game.fitting[0]] or game.fitting[0] not in game.guesses:
        obs, reward, terminated, _, info = env.step(" ".join(game.fitting[0]))
        if terminated:
            break
    assert terminated and info["success"] == (reward == 1.0)


def test_word_lists_come_from_the_installed_dictionaries() -> None:
    from english_words import get_english_words_set

    answers = words.answers()
    assert len(answers) == words.ANSWERS_COUNT == 1668 and list(answers) == sorted(answers)
    assert words._fingerprint(answers) == words.ANSWERS_SHA256
    allowed = words.allowed_guesses()
    assert len(allowed) > 10_000 and set(answers) <= allowed
    web2 = get_english_words_set(["web2"], lower=False, alpha=True)
    assert all(w in web2 for w in answers[:200])  # every answer is a dictionary entry
    assert {"crane", "house", "water", "apple"} <= set(answers)
    assert {"aalii", "zymic"} <= allowed and not {"aalii", "zymic"} & set(answers)  # rare words: guesses only


def test_answer_list_built_from_packages_matches_the_disk_cache(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AGENTGYM_CACHE_DIR", str(tmp_path))
    rebuilt = words._build_lists()
    assert tuple(w for w, _ in rebuilt["answers"]) == words.answers()
    assert set(rebuilt["allowed"]) | set(words.answers()) == words.allowed_guesses()


@pytest.mark.parametrize("guess, answer, expected", [
    ("crane", "crane", (2, 2, 2, 2, 2)),
    ("speed", "abide", (0, 0, 1, 0, 1)),  # one e in the answer: only the first e is marked
    ("eerie", "there", (1, 0, 1, 0, 2)),  # the green e uses up one e, the first e gets the other
    ("llama", "hello", (1, 1, 0, 0, 0)),
    ("abbey", "babes", (1, 1, 2, 2, 0)),
    ("geese", "eerie", (0, 2, 1, 0, 2)),
])
def test_feedback_follows_wordle_rules_for_repeated_letters(guess: str, answer: str, expected: tuple) -> None:
    assert score_guess(guess, answer) == expected


def test_vectorised_feedback_equals_the_rule() -> None:
    codes = _answer_codes()
    rng = np.random.default_rng(0)
    for guess in ["speed", "eerie", "llama", "mamma", "crane", *rng.choice(words.answers(), 10)]:
        expected = [_code(score_guess(guess, answer)) for answer in words.answers()]
        assert _patterns(guess, codes).tolist() == expected


def test_our_feedback_text_per_letter_and_guess_count(ours) -> None:
    env = ours
    env.reset(options={"split": "test", "index": 0})
    answer = env.unwrapped.answer
    guess = "crane" if answer != "crane" else "house"
    obs, reward, terminated, _, info = env.step(f"Thought: a common opener.\nAction: guess {guess}")
    pattern = score_guess(guess, answer)
    labels = {CORRECT: "in the word and in the correct position", PRESENT: "in the word but in the wrong position",
              ABSENT: "not in the word"}
    lines = obs.splitlines()
    assert lines[0] == f"Guess 1 of 6: {guess}"
    assert lines[1:6] == [f"{letter}: {labels[mark]}" for letter, mark in zip(guess, pattern)]
    assert "5 guesses left" in obs and info["guesses_left"] == 5 and info["valid_action"] and not terminated


@pytest.mark.parametrize("response, message", [
    ("guess cat", "has 3 letters"),
    ("guess elephant", "has 8 letters"),
    ("guess qzxvw", "not in the word list"),
    ("guess ab1de", "letters a-z only"),
    ("guess crâne", "letters a-z only"),
    ("I think the answer is crane", "not a guess"),
])
def test_our_bad_guesses_cost_no_guess(ours, response: str, message: str) -> None:
    env = ours
    env.reset(options={"split": "test", "index": 0})
    obs, reward, terminated, _, info = env.step(response)
    assert not info["valid_action"] and message in obs and "still have 6 guesses" in obs
    assert info["guesses_left"] == 6 and reward == 0.0 and not terminated


def test_our_six_wrong_guesses_lose_and_reveal_the_word(ours) -> None:
    env = ours
    env.reset(options={"split": "test", "index": 2})
    answer = env.unwrapped.answer
    wrong = [w for w in ["crane", "house", "water", "apple", "light", "music", "world"] if w != answer][:6]
    for word in wrong:
        obs, reward, terminated, truncated, info = env.step(f"guess {word}")
    assert terminated and not info["success"] and reward == 0.0 and f"The word was '{answer}'" in obs


@pytest.mark.parametrize("response",
                         ["guess CRANE.", "Guess: crane", "crane", "guess 'crane'", "Action: guess [crane]"])
def test_our_guess_spellings(ours, response: str) -> None:
    env = ours
    env.reset(options={"split": "test", "index": 0})
    obs, _, _, _, info = env.step(response)
    assert info["valid_action"] and "crane" in obs.splitlines()[0]


@pytest.mark.parametrize("extra_feedback", [False, True])
def test_solver_finds_every_test_word_within_six_guesses(make_env, extra_feedback: bool) -> None:
    env = make_env(ENV_ID, extra_feedback=extra_feedback)
    spec = agentgym_envs.get_task(ENV_ID)
    for index in range(len(spec.split("test"))):
        env.reset(options={"split": "test", "index": index})
        total = 0.0
        while True:
            _, reward, terminated, truncated, info = env.step(env.unwrapped.oracle_action())
            total += reward
            if terminated or truncated:
                break
        assert info["success"] and total == 1.0 and info["turn"] <= 6


def test_solver_on_a_sample_of_train_words() -> None:
    rng = np.random.default_rng(1)
    answers = words.answers()
    for answer in rng.choice(answers, 60, replace=False):
        history = []
        for left in range(6, 0, -1):
            guess = solver_guess(history, left)
            history.append((guess, score_guess(guess, answer)))
            if guess == answer:
                break
        assert history[-1][0] == answer


@pytest.mark.parametrize("kwargs, most", [({}, 8), ({"vocabulary": "ours"}, 2), ({"extra_feedback": True}, 2)])
def test_random_guesser_rarely_wins(make_env, kwargs: dict, most: int) -> None:
    """Over LMRL-Gym's 40 words a random guesser wins ~15% of games (74 of 500 items), over our 1,668 ~0.2%."""
    env = make_env(ENV_ID, **kwargs)
    rng = np.random.default_rng(0)
    wins = 0
    for index in range(25):
        env.reset(options={"split": "test", "index": index})
        while True:
            _, _, terminated, truncated, info = env.step(env.unwrapped.random_action(rng))
            if terminated or truncated:
                break
        wins += info["success"]
    assert wins <= most


def test_splits_25_test_words_rest_train() -> None:
    spec = agentgym_envs.get_task(ENV_ID)
    assert len(spec.split("test")) == 25
    assert sorted(spec.split("train") + spec.split("test")) == list(range(len(words.answers())))
    assert build_splits.build() == agentgym_envs.core.load_splits("wordle")
