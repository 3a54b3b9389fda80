"""TextCraft ids: Minecraft crafting goals grouped by recipe-tree depth (paper: 31/41/25/3 test items)."""

from agentgym_envs.core.tasks import family_tasks

MAX_TURNS = 30
DEPTHS = (1, 2, 3, 4)

TASKS = family_tasks(
    "TextCraft",
    family="textcraft",
    scenario="digital game",
    entry_point="agentgym_envs.textcraft.env:TextCraftEnv",
    max_turns=MAX_TURNS,
    extra="textcraft",
    requires=("textcraft",),
    description="crafting goals of every depth",
    subtasks={f"Depth{depth}": f"crafting goals whose recipe tree is {depth} level(s) deep" for depth in DEPTHS},
)
