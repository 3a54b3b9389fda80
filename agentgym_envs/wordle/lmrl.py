"""LMRL-Gym's Wordle game as AgentGym's ``agentenv-lmrlgym`` server plays it (the default of ``AgentGym/Wordle-v0``).

Read from LMRL-Gym's ``llm_rl_scripts/wordle/env/{env,game}.py`` and AgentGym's
``agentenv_lmrlgym/wordle/environment.py`` (written anew here, not copied):

- the vocabulary is LMRL-Gym's ``tweet_words.txt`` (40 words, shipped beside this file with LMRL-Gym's MIT
  license); it is both the list of accepted guesses and the list of possible hidden words;
- ``/reset`` with ``seed`` seeds ``random.Random(seed)``; there is no hidden word fixed at the start: at every
  valid guess the game draws a word from the vocabulary words that fit everything learnt so far
  (``rng.choice`` over them, in file order) and answers the guess against it;
- what is learnt is kept per letter and position (here / not here / possible), as LMRL-Gym's ``CharState`` keeps
  it; a letter absent from the drawn word is "not here" everywhere;
- the game is won when exactly one vocabulary word fits and that word has been guessed; it is over after six
  guesses, invalid ones included (``free_invalid_guesses`` leaves those out).

Our item id is the server's ``seed``.
"""

from __future__ import annotations

import random
from functools import lru_cache
from pathlib import Path

WORD_LENGTH = 5
MAX_GUESSES = 6
_HERE, _NOT_HERE, _POSSIBLE = 2, 0, 1


@lru_cache(maxsize=1)
def tweet_words() -> tuple[str, ...]:
    """LMRL-Gym's ``tweet_words.txt`` in file order (lines of five characters, as its ``Vocabulary.from_file``)."""
    lines = (Path(__file__).with_name("tweet_words.txt").read_text().splitlines())
    return tuple(w.strip() for w in lines if len(w.strip()) == WORD_LENGTH)


def agentgym_feedback(guess: str, answer: str) -> str:
    """LMRL-Gym's feedback line: per letter ``g`` (in place), ``y`` (in the word elsewhere, every copy)
    or ``b`` (not in the word), space-separated and ending in a newline as its server sends it."""
    marks = ["g" if g == a else "y" if g in answer else "b" for g, a in zip(guess, answer)]
    return " ".join(marks) + "\n"


class LmrlWordleGame:
    """One game of LMRL-Gym's Wordle seeded as AgentGym's server seeds it."""

    def __init__(self, seed: int, vocabulary: tuple[str, ...] | None = None):
        self.vocabulary = vocabulary if vocabulary is not None else tweet_words()
        self._accepted = frozenset(self.vocabulary)
        self.rng = random.Random(seed)
        self.knowledge: dict[str, list[int]] = {}  # letter -> per position; a missing letter is all "possible"
        self.fitting: list[str] = list(self.vocabulary)
        self.guesses: list[str] = []  # every guess, invalid ones included (LMRL-Gym's action history)
        self.last_drawn = ""

    def valid(self, word: str) -> bool:
        return len(word) == WORD_LENGTH and all("a" <= c <= "z" for c in word) and word in self._accepted

    def _fits(self, word: str) -> bool:
        for letter, marks in self.knowledge.items():
            if all(m == _POSSIBLE for m in marks):
                continue
            if all(m == _NOT_HERE for m in marks):
                if letter in word:
                    return False
                continue
            for i, m in enumerate(marks):
                if (m == _HERE and word[i] != letter) or (m == _NOT_HERE and word[i] == letter):
                    return False
            if letter not in word:
                return False
        return True

    def guess(self, word: str, count_invalid: bool = True) -> tuple[str | None, bool, bool]:
        """(feedback line or None for an invalid word, won, over) after guessing ``word``."""
        if not self.valid(word):
            if count_invalid:
                self.guesses.append(word)
            return None, False, len(self.guesses) >= MAX_GUESSES
        drawn = self.rng.choice(self.fitting)
        self.last_drawn = drawn
        for i, letter in enumerate(word):
            marks = self.knowledge.setdefault(letter, [_POSSIBLE] * WORD_LENGTH)
            if letter == drawn[i]:
                marks[i] = _HERE
            elif letter in drawn:
                marks[i] = _NOT_HERE
            else:
                marks[:] = [_NOT_HERE] * WORD_LENGTH
        self.guesses.append(word)
        self.fitting = [w for w in self.vocabulary if self._fits(w)]
        won = len(self.fitting) == 1 and self.fitting[0] in self.guesses
        return agentgym_feedback(word, drawn), won, won or len(self.guesses) >= MAX_GUESSES

    def solver_guess(self) -> str:
        """A guess among the fitting words that splits them best by feedback (ties: the earlier word)."""
        if len(self.fitting) <= 2:
            return self.fitting[0]
        best, best_groups = self.fitting[0], -1
        for candidate in self.fitting:
            groups = len({agentgym_feedback(candidate, w) for w in self.fitting})
            if groups > best_groups:
                best, best_groups = candidate, groups
        return best
