"""TRL's private members that AgentGRPOTrainer relies on still exist, with the parameters it uses.

The list is ``agentgym_trl.trl_surface.TRL_PRIVATE_MEMBERS`` (also written out in that module's docstring); a TRL
upgrade that removes or changes one of them fails here, by name, instead of somewhere inside a training step.
"""

from __future__ import annotations

import importlib
import inspect
import re

import pytest
import transformers
import trl
from trl.generation.vllm_generation import VLLMGeneration

from agentgym_trl import trl_surface as adapter
from agentgym_trl.trl_surface import TRL_PRIVATE_MEMBERS, TrlMember

OWNERS = {"GRPOTrainer": trl.GRPOTrainer, "Trainer": transformers.Trainer, "VLLMGeneration": VLLMGeneration}


def member_source(member: TrlMember) -> str:
    """Where a member must show up: the class's source for attributes, the scoring method's for batch keys."""
    if member.owner == "batch":
        return inspect.getsource(trl.GRPOTrainer._generate_and_score_completions)
    return inspect.getsource(OWNERS[member.owner])


def callable_of(member: TrlMember):
    owner = OWNERS.get(member.owner) or importlib.import_module(member.owner)
    found = getattr(owner, member.name, None)
    assert found is not None, f"{member.owner}.{member.name} is gone from this TRL ({trl.__version__})"
    return found


@pytest.mark.parametrize("member", TRL_PRIVATE_MEMBERS, ids=lambda m: f"{m.owner}.{m.name}")
def test_each_private_member_the_adapter_relies_on_exists(member: TrlMember) -> None:
    if member.parameters:  # a method or function: it exists and takes the parameters the adapter uses
        found = callable_of(member)
        parameters = inspect.signature(found).parameters
        missing = [name for name in member.parameters if name not in parameters]
        assert not missing, f"{member.owner}.{member.name} lost its parameters {missing} (TRL {trl.__version__})"
    elif member.owner == "batch":  # a key of TRL's scored batch
        assert f'output["{member.name}"]' in member_source(member), (
            f"TRL {trl.__version__}'s _generate_and_score_completions no longer outputs {member.name!r}")
    else:  # an attribute TRL's trainer sets or reads
        assert f"self.{member.name}" in member_source(member), (
            f"{member.owner}.{member.name} is gone from TRL {trl.__version__}")


def test_the_trainer_docstring_lists_exactly_these_members() -> None:
    doc = adapter.__doc__
    section = doc[doc.index("TRL's private members"):]
    for member in TRL_PRIVATE_MEMBERS:
        written = f"``{member.name}``" if member.owner == "batch" else f"``{member.owner}.{member.name}``"
        assert written in section, f"the docstring of agentgym_trl/trl_surface.py does not list {written}"
    named = set(re.findall(r"``(?:GRPOTrainer|Trainer|VLLMGeneration|trl\.trainer\.utils)\.(\w+)``", section))
    assert named == {m.name for m in TRL_PRIVATE_MEMBERS if m.owner != "batch"}


def test_the_pin_is_the_version_these_members_were_checked_against() -> None:
    from pathlib import Path

    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert f'"trl=={trl.__version__}"' in pyproject, "TRL was upgraded: check TRL_PRIVATE_MEMBERS, then the pin"
    # every extra that installs TRL ([train]; [gpu] as trl[vllm]) pins this one version
    assert set(re.findall(r'"trl(?:\[[^\]]*\])?==([^"]+)"', pyproject)) == {trl.__version__}
