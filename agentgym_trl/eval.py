"""Evaluation of a local HF model: ``agentgym eval`` with the ``ModelAgent`` (the exact token path training uses).

    from agentgym_trl.eval import evaluate_model
    report = evaluate_model("default", ["AgentGym/TextCraft-Depth1-v0"], "runs/eval", n_samples=4)
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentgym_envs.evaluation.runner import EvalError, EvalReport, evaluate
from agentgym_trl.agent import ModelAgent, ModelLoadError


def evaluate_model(model: str, env_ids: Sequence[str], out_dir: str | Path, *, split: str = "test",
                   n_samples: int = 1, max_turns: Sequence[int | None] = (None,), limit: int | None = None,
                   temperature: float = 1.0, batch_size: int = 8, max_turn_tokens: int = 256,
                   max_context_tokens: int = 4096, seed: int = 0, progress: bool = True,
                   chat_template_kwargs: dict[str, Any] | None = None, bf16: bool | None = None,
                   merged_first_turn: bool = False, engine: str = "hf", engine_options: Any = None,
                   items: Sequence[int] | None = None, oracle_prefix: int = 0) -> EvalReport:
    """Evaluate a local HF model (``"default"`` = SmolLM2-135M-Instruct) and write the run into ``out_dir``.

    ``engine="vllm-process"`` samples with the shared vLLM engine process (see ``ModelAgent.from_name``); ``bf16=None``
    samples as the trainer does by default; ``oracle_prefix=k`` starts every episode after the oracle's first k
    actions (as the reverse curriculum trains).
    """
    try:
        agent = ModelAgent.from_name(model, temperature=temperature, batch_size=batch_size,
                                     max_turn_tokens=max_turn_tokens, max_context_tokens=max_context_tokens,
                                     seed=seed, chat_template_kwargs=chat_template_kwargs, bf16=bf16,
                                     engine=engine, engine_options=engine_options,
                                     progress=None if progress else False)
    except ModelLoadError as error:
        raise EvalError(str(error)) from None
    try:
        return evaluate(agent, env_ids, out_dir, split=split, n_samples=n_samples, max_turns=max_turns,
                        limit=limit, progress=progress, merged_first_turn=merged_first_turn, items=items,
                        oracle_prefix=oracle_prefix)
    finally:
        agent.close()
