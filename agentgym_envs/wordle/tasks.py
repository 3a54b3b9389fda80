"""Wordle id: one family-wide id over the answer list (``splits.json`` has a single sub-task)."""

from agentgym_envs.core.tasks import family_tasks

MAX_TURNS = 8
MAX_GUESSES = 6

TASKS = family_tasks("Wordle", "wordle", "digital game", "WordleEnv", MAX_TURNS, requires=("english_words", "wordfreq"),
                     description="guess a hidden five-letter English word in six tries from per-letter feedback",
                     protocol="agentgym_envs.wordle.protocol:PROTOCOL")
