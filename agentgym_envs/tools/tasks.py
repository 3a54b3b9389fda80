"""Tool-use and SQL ids: five AgentGym tool envs on offline SQLite services, plus BIRD-style text-to-SQL.

Each id has its own sub-task in ``splits.json`` (20 test items each, like AgentGym, 400 train).
Item ids are unique across the family: every env owns a block of ``ITEMS_PER_ENV`` ids starting
at its offset, and any id inside the block is a valid (generated) episode.
"""

from agentgym_envs.core.tasks import NAMESPACE, TaskSpec

ITEMS_PER_ENV = 10_000

#: sub-task name -> (item id offset, entry point class, turn cap, description)
ENVS: dict[str, tuple[int, str, int, str]] = {
    "Weather": (10_000, "WeatherEnv", 20, "weather history, forecasts and air quality per city and date"),
    "Movie": (20_000, "MovieEnv", 20, "a film database: films, people, credits, ratings, companies"),
    "Academia": (30_000, "AcademiaEnv", 20, "a citation graph: papers, authors, venues, citations"),
    "Sheet": (40_000, "SheetEnv", 20, "spreadsheets: read, write, sort, filter, formulas; graded on the final sheets"),
    "TODOList": (50_000, "TodoEnv", 20, "a to-do service: projects, tasks, due dates, completion"),
    "BIRD": (60_000, "BirdEnv", 1, "text-to-SQL over generated SQLite databases, one read-only query"),
}

_MODULES = {
    "Weather": "weather",
    "Movie": "movie",
    "Academia": "academia",
    "Sheet": "sheet",
    "TODOList": "todo",
    "BIRD": "bird",
}

#: A typical tool call, which every other family's env must reject.
FOREIGN_ACTION = 'Thought: look it up.\nAction: get_latitude_longitude with Action Input: {"name": "Lyon"}'

TASKS = [
    TaskSpec.declare(
        env_id=f"{NAMESPACE}/{name}-v0",
        family="tools",
        scenario="sql" if name == "BIRD" else "tool use",
        subtask=name,
        entry_point=f"agentgym_envs.tools.{_MODULES[name]}:{cls}",
        max_turns=turns,
        extra="tools",
        requires=(),
        description=description,
        foreign_action=FOREIGN_ACTION,
        protocol="agentgym_envs.tools.protocol:" + ("SQLGYM_PROTOCOL" if name == "BIRD" else "PROTOCOL"),
    )
    for name, (offset, cls, turns, description) in ENVS.items()
]
