"""Wordle id: one family-wide id over the answer list (``splits.json`` has a single sub-task)."""

from agentgym_envs.core.tasks import NAMESPACE, TaskSpec

MAX_TURNS = 8
MAX_GUESSES = 6

TASKS = [
    TaskSpec(
        env_id=f"{NAMESPACE}/Wordle-v0",
        family="wordle",
        scenario="digital game",
        subtask=None,
        entry_point="agentgym_envs.wordle.env:WordleEnv",
        max_turns=MAX_TURNS,
        extra="wordle",
        requires=("english_words", "wordfreq"),
        description="guess a hidden five-letter English word in six tries from per-letter feedback",
    )
]
