"""ScienceWorld ids: five science sub-tasks on the Java simulator (paper: 53/83/44/5/15 test items)."""

from agentgym_envs.core.tasks import family_tasks

MAX_TURNS = 30

_SUBTASKS = {
    "Measure": "measure the melting point of a known or unknown substance with a thermometer",
    "TestConductivity": "test whether a known or unknown substance conducts electricity with a circuit",
    "Find": "find a living thing, a plant or an animal and move it to a box",
    "ChemMix": "mix chemicals or paints to make a target substance or colour",
    "Lifespan": "identify the longest- and/or shortest-lived animal",
}

TASKS = family_tasks("SciWorld", "sciworld", "science", "SciWorldEnv", MAX_TURNS, requires=("scienceworld",),
                     description="all five ScienceWorld sub-tasks", subtasks=_SUBTASKS,
                     weight=8,  # a ScienceWorld JVM holds ~320 MB
                     foreign_action="Thought: heat it.\nAction: activate stove in kitchen",
                     protocol="agentgym_envs.sciworld.protocol:PROTOCOL")
