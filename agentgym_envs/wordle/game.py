"""Wordle's rules (per-letter feedback with repeated letters) and an information-gain solver."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from agentgym_envs.wordle.words import WORD_LENGTH, answers, frequency_rank

ABSENT, PRESENT, CORRECT = 0, 1, 2
_WEIGHTS = np.array([3 ** (WORD_LENGTH - 1 - i) for i in range(WORD_LENGTH)], dtype=np.int32)
#: How many of the most common answers the solver also considers as probe guesses.
PROBE_POOL = 150


def score_guess(guess: str, answer: str) -> tuple[int, ...]:
    """Wordle feedback: CORRECT where letters match; PRESENT for a letter the answer holds elsewhere,
    counted so a letter is never marked more often than the answer has it left over; else ABSENT."""
    result = [ABSENT] * WORD_LENGTH
    leftover: dict[str, int] = {}
    for i, (g, a) in enumerate(zip(guess, answer)):
        if g == a:
            result[i] = CORRECT
        else:
            leftover[a] = leftover.get(a, 0) + 1
    for i, g in enumerate(guess):
        if result[i] != CORRECT and leftover.get(g, 0) > 0:
            result[i] = PRESENT
            leftover[g] -= 1
    return tuple(result)


def describe(guess: str, pattern: tuple[int, ...]) -> list[str]:
    """One line per letter, e.g. ``r: in the word but in the wrong position``."""
    words = {CORRECT: "in the word and in the correct position", PRESENT: "in the word but in the wrong position",
             ABSENT: "not in the word"}
    return [f"{letter}: {words[mark]}" for letter, mark in zip(guess, pattern)]


@lru_cache(maxsize=1)
def _answer_codes() -> np.ndarray:
    return np.array([[ord(c) - 97 for c in w] for w in answers()], dtype=np.int8)


def _patterns(guess: str, codes: np.ndarray) -> np.ndarray:
    """Base-3 feedback codes of ``guess`` against every row of ``codes`` (vectorised ``score_guess``)."""
    g = np.array([ord(c) - 97 for c in guess], dtype=np.int8)
    green = codes == g
    marks = green.astype(np.int32) * CORRECT
    leftover = {letter: ((codes == letter) & ~green).sum(axis=1) for letter in set(g.tolist())}
    for i, letter in enumerate(g.tolist()):
        yellow = ~green[:, i] & (leftover[letter] > 0)
        marks[:, i] = np.where(yellow, PRESENT, marks[:, i])
        leftover[letter] = leftover[letter] - yellow
    return marks @ _WEIGHTS


def _code(pattern: tuple[int, ...]) -> int:
    return int(np.dot(pattern, _WEIGHTS))


def candidates(history: list[tuple[str, tuple[int, ...]]]) -> np.ndarray:
    """Indices of the answers consistent with every (guess, feedback) so far."""
    codes = _answer_codes()
    index = np.arange(len(codes))
    for guess, pattern in history:
        index = index[_patterns(guess, codes[index]) == _code(pattern)]
    return index


def _best_guess(pool: list[str], remaining: np.ndarray) -> str:
    """The pool word whose feedback splits the remaining answers most evenly (highest entropy);
    a word that may itself be the answer gets a small bonus, ties go to the more common word."""
    codes = _answer_codes()[remaining]
    words = answers()
    remaining_words = {words[i] for i in remaining}
    rank = frequency_rank()
    best, best_score = pool[0], -1.0
    for word in pool:
        counts = np.bincount(_patterns(word, codes), minlength=3**WORD_LENGTH)
        counts = counts[counts > 0] / len(remaining)
        score = float(-(counts * np.log2(counts)).sum()) + (1.0 / len(remaining) if word in remaining_words else 0.0)
        if score > best_score + 1e-12 or (abs(score - best_score) <= 1e-12 and rank[word] < rank[best]):
            best, best_score = word, score
    return best


@lru_cache(maxsize=1)
def _common_answers() -> tuple[str, ...]:
    rank = frequency_rank()
    return tuple(sorted(answers(), key=rank.__getitem__))


@lru_cache(maxsize=1)
def opening_guess() -> str:
    """The first guess: the common answer that best splits all answers (computed once)."""
    pool = list(_common_answers()[: 2 * PROBE_POOL])
    return _best_guess(pool, np.arange(len(answers())))


def solver_guess(history: list[tuple[str, tuple[int, ...]]], guesses_left: int) -> str:
    """The solver's next guess given the feedback so far."""
    if not history:
        return opening_guess()
    remaining = candidates(history)
    words = answers()
    rank = frequency_rank()
    if len(remaining) == 0:  # the answer is outside the list (cannot happen for list items)
        return opening_guess()
    ordered = sorted((words[i] for i in remaining), key=rank.__getitem__)
    if len(ordered) <= 2 or guesses_left <= 1:
        return ordered[0]
    consistent = set(ordered)
    pool = ordered + [w for w in _common_answers()[:PROBE_POOL] if w not in consistent]
    return _best_guess(pool, remaining)
