"""Deep Search ids: retrieval-augmented QA in seven dataset styles (paper: 50 test items each, Musique 100)."""

from agentgym_envs.core.tasks import family_tasks

MAX_TURNS = 10
SUBTASKS = ("NQ", "TriviaQA", "PopQA", "HotpotQA", "2Wiki", "Musique", "Bamboogle")
TEST_SIZES = {**{name: 50 for name in SUBTASKS}, "Musique": 100}
TRAIN_SIZE = 2000
#: Item id = ITEM_BLOCK * (position of the sub-task in SUBTASKS) + index of the question.
ITEM_BLOCK = 100_000

_DESCRIPTIONS = {
    "NQ": "single-hop factoid questions about well-known entities, phrased as search queries",
    "TriviaQA": "single-hop trivia: identify an entity from clues, or recall one fact",
    "PopQA": "single-hop relation questions about long-tail entities",
    "HotpotQA": "two-hop bridge questions and two-entity comparisons",
    "2Wiki": "compositional, comparison, bridge-comparison and inference questions",
    "Musique": "chains of 2 to 4 hops composed from single-hop questions",
    "Bamboogle": "two-hop compositional questions",
}

TASKS = family_tasks("Search", "search", "deep search", "SearchEnv", MAX_TURNS, requires=("bm25s",),
                     description="questions of all seven dataset styles",
                     subtasks={s: _DESCRIPTIONS[s] for s in SUBTASKS},
                     foreign_action="<search>the capital of the kingdom of Ostrava</search>",
                     protocol="agentgym_envs.search.protocol:PROTOCOL")
