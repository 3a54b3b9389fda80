"""Which MiniGrid BabyAI level and seed an item id stands for (light: no engine import).

Item ids follow AgentGym's numbering: item ``i`` is level ``AGENTGYM_LEVELS[i % 40]`` reset with
seed ``i // 40``. The table keeps AgentGym's 40 levels in their order so ids mean the same level
as there; only the levels of our six sub-tasks are playable. AgentGym's fourth level,
``BabyAI-GoToObjS6-v0``, is registered by the MiniGrid it pins (``minigrid<2.5``) with
``room_size=4`` (MiniGrid's registry bug; MiniGrid 3.2 drops the id and adds ``GoToObjS6-v1`` with
size 6); the same class with the same arguments is ``BabyAI-GoToObjS4-v0`` in MiniGrid 3.2, which
the table names, so those items are AgentGym's episodes.
"""

from __future__ import annotations

NUM_LEVELS = 40

AGENTGYM_LEVELS: tuple[str, ...] = (
    "BabyAI-GoToRedBallGrey-v0",
    "BabyAI-GoToRedBall-v0",
    "BabyAI-GoToRedBallNoDists-v0",
    "BabyAI-GoToObjS4-v0",  # AgentGym: "BabyAI-GoToObjS6-v0", GoToObj(room_size=4) in minigrid<2.5
    "BabyAI-GoToLocalS8N7-v0",
    "BabyAI-GoToObjMazeS7-v0",
    "BabyAI-GoToImpUnlock-v0",
    "BabyAI-GoToSeqS5R2-v0",
    "BabyAI-GoToRedBlueBall-v0",
    "BabyAI-GoToDoor-v0",
    "BabyAI-GoToObjDoor-v0",
    "BabyAI-Open-v0",
    "BabyAI-OpenRedDoor-v0",
    "BabyAI-OpenDoorLoc-v0",
    "BabyAI-OpenRedBlueDoorsDebug-v0",
    "BabyAI-OpenDoorsOrderN4Debug-v0",
    "BabyAI-Pickup-v0",
    "BabyAI-UnblockPickup-v0",
    "BabyAI-PickupLoc-v0",
    "BabyAI-PickupDistDebug-v0",
    "BabyAI-PickupAbove-v0",
    "BabyAI-PutNextLocalS6N4-v0",
    "BabyAI-PutNextS7N4Carrying-v0",
    "BabyAI-Unlock-v0",
    "BabyAI-UnlockLocalDist-v0",
    "BabyAI-KeyInBox-v0",
    "BabyAI-UnlockPickupDist-v0",
    "BabyAI-BlockedUnlockPickup-v0",
    "BabyAI-UnlockToUnlock-v0",
    "BabyAI-ActionObjDoor-v0",
    "BabyAI-FindObjS7-v0",
    "BabyAI-KeyCorridorS6R3-v0",
    "BabyAI-OneRoomS20-v0",
    "BabyAI-MoveTwoAcrossS8N9-v0",
    "BabyAI-SynthS5R2-v0",
    "BabyAI-SynthLoc-v0",
    "BabyAI-SynthSeq-v0",
    "BabyAI-MiniBossLevel-v0",
    "BabyAI-BossLevel-v0",
    "BabyAI-BossLevelNoUnlock-v0",
)
assert len(AGENTGYM_LEVELS) == NUM_LEVELS

#: The paper's six embodied sub-tasks; GoTo and Pickup cover AgentGym's GoTo* and Pickup* groups.
SUBTASK_LEVELS: dict[str, tuple[str, ...]] = {
    "GoTo": AGENTGYM_LEVELS[0:11],
    "Pickup": AGENTGYM_LEVELS[16:21],
    "ActionObjDoor": ("BabyAI-ActionObjDoor-v0",),
    "FindObjS7": ("BabyAI-FindObjS7-v0",),
    "OneRoomS20": ("BabyAI-OneRoomS20-v0",),
    "SynthLoc": ("BabyAI-SynthLoc-v0",),
}

#: Test seeds per level: 11 GoTo levels x 5 = 55, 5 Pickup levels x 3 = 15, the others 5 each (90 items).
TEST_SEEDS_PER_LEVEL: dict[str, int] = {"GoTo": 5, "Pickup": 3, "ActionObjDoor": 5, "FindObjS7": 5, "OneRoomS20": 5,
                                        "SynthLoc": 5}

#: Train seeds start after every test seed, so the splits can never overlap.
TRAIN_FIRST_SEED = 100
TRAIN_SEEDS_PER_LEVEL = 250

_SUBTASK_OF_LEVEL = {level: subtask for subtask, levels in SUBTASK_LEVELS.items() for level in levels}


def item_id(level: str, seed: int) -> int:
    """The item id of ``level`` reset with ``seed``."""
    return seed * NUM_LEVELS + AGENTGYM_LEVELS.index(level)


def level_and_seed(item: int) -> tuple[str, int]:
    """The (MiniGrid level id, reset seed) an item id stands for."""
    if item < 0:
        raise ValueError(f"item ids are non-negative, got {item}")
    return AGENTGYM_LEVELS[item % NUM_LEVELS], item // NUM_LEVELS


def subtask_of(item: int) -> str | None:
    """The sub-task an item belongs to, or ``None`` for AgentGym levels outside our six sub-tasks."""
    if item < 0:
        return None
    return _SUBTASK_OF_LEVEL.get(AGENTGYM_LEVELS[item % NUM_LEVELS])
