"""The model card of a trained agent: the real base model, the envs, the turn curriculum and the eval results.

TRL's card names the base model only when the model was loaded from a hub id; an agent trained
from a local folder (the default SmolLM2 copy, a warm-up checkpoint) would say ``None``. So the
base model's hub id travels in the checkpoint's ``config.json`` (``agentgym_base_model``, set when
the default model is built and kept by every ``save_pretrained`` after it), and the card adds what
an agent's user needs: which envs it was trained on, with what turn budgets, and how it scored.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from agentgym_trl.metrics import EVAL_PREFIX, SUCCESS
from agentgym_trl.models import BASE_MODEL_ATTRIBUTE, DEFAULT_MODEL_HUB_ID, DEFAULT_MODEL_NAME, model_cache_dir

#: written by examples/grpo.py (agentgym_trl.stages.report_stages): held-out success per stage
STAGES_FILE = "stages.json"


def base_model_of(config: Any, override: str | None = None) -> str | None:
    """The hub id the model started from: ``override``, the id its checkpoints carry, or its own hub id."""
    if override:
        return override
    carried = getattr(config, BASE_MODEL_ATTRIBUTE, None)
    if carried:
        return str(carried)
    name = str(getattr(config, "_name_or_path", "") or "")
    if name and Path(name).resolve() == (model_cache_dir() / DEFAULT_MODEL_NAME).resolve():
        return DEFAULT_MODEL_HUB_ID  # the default copy built before checkpoints carried the id
    return name if name and not os.path.isdir(name) else None


def agent_section(env_ids: list[str], schedule: str, output_dir: str | os.PathLike,
                  log_history: list[dict[str, Any]]) -> str:
    """Markdown: the envs, the turn budget schedule, and the held-out results the run recorded."""
    lines = ["## AgentGym training", "",
             f"- Environments: {', '.join(f'`{env_id}`' for env_id in env_ids)}",
             f"- Turn budget schedule (`step:max_turns`, ScalingInter-RL): `{schedule}`"]
    stages_path = Path(output_dir) / STAGES_FILE
    if stages_path.is_file():
        stages = json.loads(stages_path.read_text(encoding="utf-8"))
        lines += ["", "| stage | held-out success | 95% interval | episodes |", "|---|---|---|---|"]
        for name, stage in stages.items():
            low, high = stage.get("ci95", [None, None])
            interval = f"[{100 * low:.1f}, {100 * high:.1f}]" if low is not None else ""
            lines.append(f"| {name} | {100 * stage['success']:.1f}% | {interval} | {stage.get('episodes', '')} |")
    evals = [entry for entry in log_history if EVAL_PREFIX + SUCCESS in entry]
    if evals:  # the trainer's own evaluation (eval_dataset), the last one
        last = evals[-1]
        lines += ["", f"Evaluation at step {last.get('step', '?')}: success {100 * last[EVAL_PREFIX + SUCCESS]:.1f}%"]
    return "\n".join(lines).rstrip() + "\n"


def complete_model_card(card_path: str | os.PathLike, base_model: str | None, section: str,
                        model_id: str | None = None) -> None:
    """Put ``base_model`` into the card's metadata and text, name the model in its quick start (``model_id``:
    the hub id it is pushed to, else the card's folder), and append the AgentGym section."""
    from huggingface_hub import ModelCard

    card = ModelCard.load(card_path)
    card.text = card.text.replace('model="None"', f'model="{model_id or Path(card_path).resolve().parent}"')
    if base_model:  # TRL renders a local base model as [None](https://huggingface.co/None)
        card.data.base_model = base_model
        card.text = card.text.replace("[None](https://huggingface.co/None)",
                                      f"[{base_model}](https://huggingface.co/{base_model})")
    card.text = card.text.rstrip() + "\n\n" + section
    card.save(card_path)
