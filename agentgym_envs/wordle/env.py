"""Wordle as a text Gymnasium env (``AgentGym/Wordle-v0``).

The hidden word of item ``i`` is ``answers()[i]``. A guess must be a five-letter word from the
allowed list; anything else (wrong length, digits, unknown words) is rejected with feedback and
costs no guess, though it does use one of the 8 turns. After each guess every letter is marked
correct, present elsewhere, or absent, following Wordle's rule for repeated letters. Six guesses;
reward 1 for finding the word.
"""

from __future__ import annotations

import re

import numpy as np

from agentgym_envs.core import Outcome, Start, TextEnv, normalize_command
from agentgym_envs.wordle.game import CORRECT, describe, score_guess, solver_guess
from agentgym_envs.wordle.tasks import MAX_GUESSES
from agentgym_envs.wordle.words import WORD_LENGTH, allowed_guesses, answers

INSTRUCTION = f"""You are playing Wordle. A hidden English word of {WORD_LENGTH} letters has been chosen; find it in at most {MAX_GUESSES} guesses.

Each guess must be a real {WORD_LENGTH}-letter English word. After a guess, every letter gets feedback:
- "in the word and in the correct position": the hidden word has this letter in this position;
- "in the word but in the wrong position": the hidden word has this letter, but elsewhere;
- "not in the word": the hidden word has no (more) copies of this letter.
A letter guessed twice is marked present only as many times as the hidden word contains it.

Action: guess <word>   (for example: guess plant)
A guess that is not a known {WORD_LENGTH}-letter word is rejected and does not count against your {MAX_GUESSES} guesses.

Every turn, answer in this format:
Thought:
<your reasoning>

Action:
guess <word>"""

_GUESS = re.compile(r"^(?:guess\s*:?\s*)?[\"'\[(<]?([^\s\"'\])>]+)[\"'\])>]?$")


class WordleEnv(TextEnv):
    family = "wordle"

    def __init__(self, task_id: str, render_mode: str | None = None):
        super().__init__(task_id, render_mode=render_mode)
        answers()  # load the word lists now: a missing extra fails at make() with the pip hint
        self.answer = ""
        self.history: list[tuple[str, tuple[int, ...]]] = []

    def _start(self, item_id: int, rng: np.random.Generator) -> Start:
        self.answer = answers()[item_id]
        self.history = []
        intro = f"A new game has started: the hidden word has {WORD_LENGTH} letters and you have {MAX_GUESSES} guesses. Make your first guess."
        return Start(INSTRUCTION, intro, {"guesses_left": MAX_GUESSES})

    def _act(self, action: str) -> Outcome:
        word, problem = self._word_of(action)
        left = MAX_GUESSES - len(self.history)
        if problem is not None:
            return Outcome(f"{problem} This did not use a guess; you still have {left} guess{'es' if left != 1 else ''}.",
                           valid=False, info={"guesses_left": left})
        pattern = score_guess(word, self.answer)
        self.history.append((word, pattern))
        left -= 1
        lines = [f"Guess {len(self.history)} of {MAX_GUESSES}: {word}", *describe(word, pattern)]
        if all(mark == CORRECT for mark in pattern):
            lines.append(f"You found the word '{self.answer}' in {len(self.history)} guess{'es' if len(self.history) > 1 else ''}!")
            return Outcome("\n".join(lines), progress=1.0, score=1.0, done=True, success=True, info={"guesses_left": left})
        if left == 0:
            lines.append(f"You have used all {MAX_GUESSES} guesses. The word was '{self.answer}'.")
            return Outcome("\n".join(lines), done=True, info={"guesses_left": 0})
        lines.append(f"You have {left} guess{'es' if left != 1 else ''} left.")
        return Outcome("\n".join(lines), info={"guesses_left": left})

    @staticmethod
    def _word_of(action: str) -> tuple[str, str | None]:
        """The guessed word, or an explanation of why the action is not a valid guess."""
        match = _GUESS.match(normalize_command(action))
        if match is None:
            return "", f"'{action[:80]}' is not a guess. Answer with: guess <word> (one {WORD_LENGTH}-letter English word)."
        word = match.group(1)
        if not word.isascii() or not word.isalpha():
            return "", f"'{word[:40]}' is not a word: use the letters a-z only."
        if len(word) != WORD_LENGTH:
            return "", f"'{word[:40]}' has {len(word)} letters; guesses must have exactly {WORD_LENGTH}."
        if word not in allowed_guesses():
            return "", f"'{word}' is not in the word list; guess a real {WORD_LENGTH}-letter English word."
        return word, None

    def oracle_action(self) -> str:
        guess = solver_guess(self.history, MAX_GUESSES - len(self.history))
        return f"Thought:\nThis guess narrows down the words that fit all feedback so far.\n\nAction:\nguess {guess}"

    def random_action(self, rng: np.random.Generator) -> str:
        words = answers()
        return f"guess {words[int(rng.integers(len(words)))]}"

    def accepts_item(self, item_id: int) -> bool:
        return 0 <= item_id < len(answers())
