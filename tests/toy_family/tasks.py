"""The toy family's ids (light: no env import), with what other rooms need to know of it."""

from agentgym_envs.core.tasks import family_tasks

MAX_TURNS = 10

TASKS = family_tasks(
    "Toy", "toy", "toy game", "FrogEnv", MAX_TURNS, package=__package__, extra="dev",
    description="a frog hops along a row of stones to the stone its item id names",
    subtasks={"Short": "rows of at most four stones", "Long": "rows of seven or eight stones"},
    weight=2,
    foreign_action="Thought: one more.\nAction: hop",
    protocol=f"{__package__}.protocol:PROTOCOL",
)
