"""Wordle as a text Gymnasium env (``AgentGym/Wordle-v0``).

By default the game is AgentGym's (LMRL-Gym's Wordle behind AgentGym's ``agentenv-lmrlgym`` server):
the one-line instruction "You are an expert wordle player.", the acknowledgement, AgentGym's rules
with the complete vocabulary as the first observation, guesses written as letters (``c r a n e``;
the spaces are optional), feedback as five letters (``b y g g b``: absent, elsewhere in the word, in
place; LMRL-Gym marks every copy of a letter that the word holds elsewhere ``y``), "invalid word" for
anything not in the vocabulary, counted as one of the six attempts as LMRL-Gym counts it
(``free_invalid_guesses=True``: it costs a turn of the turn cap but no attempt). The vocabulary is
LMRL-Gym's ``tweet_words.txt`` (40 words) and item ``i`` is the server's ``seed``: the hidden word is
drawn afresh at every guess from the words that fit the feedback so far (``random.Random(i)``), and
the game is won when one word is left and it has been guessed (reward 1).

``vocabulary="ours"``: our 1,668 answers as vocabulary, the hidden word of item ``i`` fixed to
``answers()[i]`` and won by guessing it.

``extra_feedback=True`` gives our game: our instruction, feedback in words with Wordle's rule for
repeated letters, ``guess <word>`` over a full dictionary, and rejected guesses that cost no guess.
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from agentgym_envs.core import Outcome, ParsedAction, Start, TextEnv, normalize_command
from agentgym_envs.core.parsers import parse_react
from agentgym_envs.wordle.game import CORRECT, describe, score_guess, solver_guess
from agentgym_envs.wordle.lmrl import LmrlWordleGame, agentgym_feedback, tweet_words
from agentgym_envs.wordle.tasks import MAX_GUESSES
from agentgym_envs.wordle.words import ANSWERS_COUNT, WORD_LENGTH, allowed_guesses, answers

#: The vocabularies of AgentGym's game: LMRL-Gym's 40 words (AgentGym's server) or our answer list.
VOCABULARIES = ("agentgym", "ours")

#: AgentGym's instruction turn (``WordleEnvClient.conversation_start``).
AGENTGYM_INSTRUCTION = "You are an expert wordle player."

#: AgentGym's first observation (``WordleEnvClient.first_observation``, verbatim); its client puts
#: the vocabulary, one word a line, in place of ``{{vocab}}``.
FIRST_OBSERVATION = (
    'Welcome to the game of Wordle. Your objective is to guess a hidden 5 letter word. You have 6 '
    'attempts to guess it correctly and you should try to guess it in as few attempts as possible. When '
    'guessing the word, you should format your word as a space separated sequence of letters, like "s h '
    'i r e" for example. After guessing the word, you will receive feedback from the game environment '
    'in the form of a sequence of 5 space separated letters like "b y g g b", where each letter '
    'indicates some information about the hidden word. The environment will return one of three letters '
    '– "b", "g", or "y" – for each letter in the word you guessed. We describe the meaning of each '
    'letter below:\n'
    '\n'
    '"b": If the environment returns a "b", it means that the letter at that position in your guessed '
    'word is not in the hidden word.\n'
    '"y": If the environment returns a "y", it means that the letter at that position in your guessed '
    'word is in the hidden word but is not in the correct position.\n'
    '"g": If the environment returns a "g", it means that the letter at that position in your guessed '
    'word is in the hidden word and is in the correct position.\n'
    '\n'
    'As a note, if you guess an invalid word (e.g. not a 5 letter word or a word not in the '
    'vocabulary), the environment will respond with an "invalid word" message. In general though, you '
    'should use this information returned by the environment to update your belief about what the '
    'hidden word might be and adjust your next guess accordingly.\n'
    '\n'
    'Here is the complete list of valid vocabulary words that are accepted by the game:\n'
    '```\n'
    '{{vocab}}\n'
    '```\n'
    '\n'
    'Here is an example. If the current status of the game is given as:\n'
    '```\n'
    'guess 1: p a n i c\n'
    'feedback 1: b b y b b\n'
    'guess 2: f e l o n\n'
    'feedback 2: g b b y g\n'
    '```\n'
    'Based on the feedback from the environment, you know that the first letter is "f", the last letter '
    'is "n", and there is an "o" somewhere in the word, but it is not in the second to last position. '
    'You also know that there is not a "p", "a", "i", "c", "e", or "l" in the word. Knowing this, you '
    'might guess the next word to be:\n'
    'Thought:\n'
    'I know that the first letter is "f", the last letter is "n", and there is an "o" somewhere in the '
    'word, but it is not in the second to last position. I also know that there is not a "p", "a", "i", '
    '"c", "e", or "l" in the word. A good word from the vocabulary to try might therefore be "f r o w '
    'n", since it is in the vocabulary, meets all known letter constraints, and we get to gain more '
    'information about the position of "o". Therefore this is a good guess to try next.\n'
    '\n'
    'Action:\n'
    'f r o w n\n'
    '\n'
    'Formally, your return should be in this format:\n'
    'Thought:\n'
    '<Your Thought>\n'
    '\n'
    'Action:\n'
    '<The Word You Guess>\n'
    '\n'
    'The guessed word is in the vocabulary, meets all known letter constraints, and we get to gain more '
    'information about the position of "o", so it is a good guess to try next.\n'
    '\n'
    "Now let's start a new game. Remember, the word you guess should be strictly in the vocabulary. You "
    'should return your thought and your word strictly in the formation mentioned above.'
)

#: The LMRL-Gym server's answer to a guess outside the vocabulary.
INVALID_WORD = "invalid word"

#: Our instruction (``extra_feedback=True``).
INSTRUCTION = f"""You are playing Wordle. A hidden English word of {WORD_LENGTH} letters has been chosen; find it in \
at most {MAX_GUESSES} guesses.

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


def agentgym_client_action(response: str) -> str:
    """The guess AgentGym's LMRL-Gym client sends: the text after the first ``Action:`` (the whole
    response if there is none), stripped; its server then drops the spaces (``f r o w n`` -> frown)."""
    parts = response.split("Action:")
    return (parts[1] if len(parts) > 1 else parts[0]).strip()


class WordleEnv(TextEnv):
    """Guess a hidden five-letter word in six attempts from per-letter feedback.

    Actions:
        A guess written as letters (``c r a n e``; spaces optional; ``extra_feedback=True``: ``guess crane``).
        A word outside the vocabulary gets "invalid word" and uses one of the six attempts, as in
        LMRL-Gym (``free_invalid_guesses=True``: it uses none).

    Rewards:
        1 when the word is found (the episode ends); 0 when the attempts run out.

    Options:
        ``vocabulary="ours"``: our 1,668 common words instead of LMRL-Gym's 40, one fixed hidden word per item.
    """

    #: What ``agentgym_envs.testing.check_bad_actions`` makes: a bad action must leave the episode playable.
    bad_action_check_kwargs = {"free_invalid_guesses": True}

    family = "wordle"

    def __init__(self, task_id: str, render_mode: str | None = None, extra_feedback: bool = False,
                 free_invalid_guesses: bool = False, vocabulary: str = "agentgym"):
        """``extra_feedback=True``: our instruction, feedback in words, ``guess <word>`` over a full
        dictionary and rejected guesses that cost no guess, instead of AgentGym's game (with our answers).
        ``free_invalid_guesses=True``: in AgentGym's game an invalid word uses no attempt (LMRL-Gym
        counts it as one of the six, and the sixth ends the episode).
        ``vocabulary``: ``"agentgym"`` (LMRL-Gym's ``tweet_words.txt``, the hidden word drawn at every guess
        from the item's seed, as AgentGym's server plays) or ``"ours"`` (our answer list, the hidden word of
        item ``i`` fixed to ``answers()[i]``)."""
        super().__init__(task_id, render_mode=render_mode)
        if vocabulary not in VOCABULARIES:
            raise ValueError(f"vocabulary must be one of {VOCABULARIES}, not {vocabulary!r}")
        self.free_invalid_guesses = free_invalid_guesses
        answers()  # load the word lists now: a missing extra fails at make() with the pip hint
        self.extra_feedback = extra_feedback
        self.vocabulary = vocabulary
        #: LMRL-Gym's game of the item (the default); None when the hidden word is fixed (``vocabulary="ours"``,
        #: ``extra_feedback=True``).
        self.game: LmrlWordleGame | None = None
        self.answer = ""
        self.history: list[tuple[str, tuple[int, ...]]] = []
        self.attempts = 0

    @property
    def _drawn_afresh(self) -> bool:
        """Whether the episode plays LMRL-Gym's game over its 40 words (the default)."""
        return self.vocabulary == "agentgym" and not self.extra_feedback

    def vocabulary_words(self) -> tuple[str, ...]:
        """The words AgentGym's game accepts, in the order its first observation lists them."""
        return tweet_words() if self._drawn_afresh else answers()

    def _start(self, item_id: int, rng: np.random.Generator) -> Start:
        self.history = []
        self.attempts = 0
        if self._drawn_afresh:
            self.game = LmrlWordleGame(item_id)
            self.answer = ""
        else:
            self.game = None
            self.answer = answers()[item_id]
        if not self.extra_feedback:
            first = FIRST_OBSERVATION.replace("{{vocab}}", "\n".join(self.vocabulary_words()))
            return Start(AGENTGYM_INSTRUCTION, first, {"guesses_left": MAX_GUESSES})
        intro = (f"A new game has started: the hidden word has {WORD_LENGTH} letters and you have {MAX_GUESSES} "
                 "guesses. Make your first guess.")
        return Start(INSTRUCTION, intro, {"guesses_left": MAX_GUESSES})

    def _parse(self, response: str) -> ParsedAction:
        if self.extra_feedback:
            return parse_react(response)
        return ParsedAction(agentgym_client_action(response))

    def _act(self, action: str) -> Outcome:
        if not self.extra_feedback:
            return self._act_as_agentgym(action)
        word, problem = self._word_of(action)
        left = MAX_GUESSES - len(self.history)
        if problem is not None:
            return Outcome(f"{problem} This did not use a guess; you still have {left} "
                           f"guess{'es' if left != 1 else ''}.",
                           valid=False, info={"guesses_left": left})
        pattern = score_guess(word, self.answer)
        self.history.append((word, pattern))
        left -= 1
        lines = [f"Guess {len(self.history)} of {MAX_GUESSES}: {word}", *describe(word, pattern)]
        if all(mark == CORRECT for mark in pattern):
            lines.append(f"You found the word '{self.answer}' in {len(self.history)} "
                         f"guess{'es' if len(self.history) > 1 else ''}!")
            return Outcome("\n".join(lines), progress=1.0, score=1.0, done=True, success=True,
                           info={"guesses_left": left})
        if left == 0:
            lines.append(f"You have used all {MAX_GUESSES} guesses. The word was '{self.answer}'.")
            return Outcome("\n".join(lines), done=True, info={"guesses_left": 0})
        lines.append(f"You have {left} guess{'es' if left != 1 else ''} left.")
        return Outcome("\n".join(lines), info={"guesses_left": left})

    def _act_as_agentgym(self, action: str) -> Outcome:
        """LMRL-Gym's step: the guess without spaces must be five letters a-z from the vocabulary,
        else "invalid word", which uses an attempt as in LMRL-Gym (the sixth ends the episode with
        reward 0) unless ``free_invalid_guesses``."""
        word = action.replace(" ", "")
        if self.game is not None:
            return self._act_as_lmrl_gym(word)
        if len(word) != WORD_LENGTH or not all("a" <= c <= "z" for c in word) or word not in _vocabulary():
            if self.free_invalid_guesses:
                return Outcome(INVALID_WORD, valid=False, info={"guesses_left": MAX_GUESSES - self.attempts})
            self.attempts += 1
            left = MAX_GUESSES - self.attempts
            return Outcome(INVALID_WORD, valid=False, done=left == 0, info={"guesses_left": left})
        self.attempts += 1
        left = MAX_GUESSES - self.attempts
        out_of_attempts = left == 0
        self.history.append((word, score_guess(word, self.answer)))  # Wordle's marks: what the solver reads
        if word == self.answer:
            return Outcome(agentgym_feedback(word, self.answer), progress=1.0, score=1.0, done=True, success=True,
                           info={"guesses_left": left})
        return Outcome(agentgym_feedback(word, self.answer), done=out_of_attempts, info={"guesses_left": left})

    def _act_as_lmrl_gym(self, word: str) -> Outcome:
        """A guess in LMRL-Gym's game: drawn against a word that fits the feedback so far."""
        game = self.game
        feedback, won, over = game.guess(word, count_invalid=not self.free_invalid_guesses)
        left = MAX_GUESSES - len(game.guesses)
        self.attempts = len(game.guesses)
        self.answer = game.last_drawn
        if feedback is None:
            return Outcome(INVALID_WORD, valid=False, done=over, info={"guesses_left": left})
        if won:
            return Outcome(feedback, progress=1.0, score=1.0, done=True, success=True, info={"guesses_left": left})
        return Outcome(feedback, done=over, info={"guesses_left": left})

    @staticmethod
    def _word_of(action: str) -> tuple[str, str | None]:
        """The guessed word, or an explanation of why the action is not a valid guess."""
        match = _GUESS.match(normalize_command(action))
        if match is None:
            return "", (f"'{action[:80]}' is not a guess. Answer with: guess <word> "
                        f"(one {WORD_LENGTH}-letter English word).")
        word = match.group(1)
        if not word.isascii() or not word.isalpha():
            return "", f"'{word[:40]}' is not a word: use the letters a-z only."
        if len(word) != WORD_LENGTH:
            return "", f"'{word[:40]}' has {len(word)} letters; guesses must have exactly {WORD_LENGTH}."
        if word not in allowed_guesses():
            return "", f"'{word}' is not in the word list; guess a real {WORD_LENGTH}-letter English word."
        return word, None

    def oracle_action(self) -> str:
        """The solver's next guess, written as AgentGym's client writes it (spaced letters) or ``guess <word>``."""
        if self.game is not None:
            return ("Thought:\nThis guess splits the words that fit the feedback so far.\n\nAction:\n"
                    + " ".join(self.game.solver_guess()))
        used = len(self.history) if self.extra_feedback else self.attempts
        guess = solver_guess(self.history, MAX_GUESSES - used)
        written = f"guess {guess}" if self.extra_feedback else " ".join(guess)
        return f"Thought:\nThis guess narrows down the words that fit all feedback so far.\n\nAction:\n{written}"

    def random_action(self, rng: np.random.Generator) -> str:
        """A random vocabulary word as a guess."""
        words = self.vocabulary_words() if not self.extra_feedback else answers()
        word = words[int(rng.integers(len(words)))]
        return f"guess {word}" if self.extra_feedback else " ".join(word)

    def accepts_item(self, item_id: int) -> bool:
        """Whether ``item_id`` is an item: a seed of AgentGym's game or the index of one of our answer words (the
        same 1,668 ids)."""
        return 0 <= item_id < ANSWERS_COUNT


@lru_cache(maxsize=1)
def _vocabulary() -> frozenset[str]:
    """The words AgentGym's game accepts: its vocabulary is also the list of possible hidden words."""
    return frozenset(answers())
