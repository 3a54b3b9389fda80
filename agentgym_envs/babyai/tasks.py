"""BabyAI ids: six embodied sub-tasks on MiniGrid's BabyAI levels (paper: 55/15/5/5/5/5 test items)."""

from agentgym_envs.core.tasks import family_tasks

MAX_TURNS = 20
SUBTASKS = ("GoTo", "Pickup", "ActionObjDoor", "FindObjS7", "OneRoomS20", "SynthLoc")

_DESCRIPTIONS = {
    "GoTo": "go to an object or door (11 GoTo* levels: single rooms, mazes, a locked room, sequences)",
    "Pickup": "pick up an object (5 Pickup* levels: mazes, blocked paths, relative locations)",
    "ActionObjDoor": "pick up, go to or open an object or door in the current room",
    "FindObjS7": "find and pick up an object hidden in one of nine rooms",
    "OneRoomS20": "pick up the ball in one large 20x20 room",
    "SynthLoc": "go to / pick up / open / put next to, with location words, in a nine-room maze",
}

TASKS = family_tasks("BabyAI", "babyai", "embodied", "BabyAIEnv", MAX_TURNS, requires=("minigrid",),
                     description="all six BabyAI sub-tasks", subtasks={s: _DESCRIPTIONS[s] for s in SUBTASKS},
                     foreign_action="Thought: go.\nAction: go to red ball 1",
                     protocol="agentgym_envs.core.agentgym_protocol:EXTRACTING_CLIENT")
