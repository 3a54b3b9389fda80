"""One rank of the 2-process CPU FSDP2 checks in ``test_sharded.py`` (launched with ``torchrun --nproc_per_node 2``).

``weights``: the engine's weight copy of a ``fully_shard`` model (and of a LoRA model under it) gives whole tensors
that safetensors writes and that equal the unsharded weights. ``generate``: ``HFGenerator`` on a ``fully_shard``
model, rank 0 with more episodes, turns and tokens than rank 1, runs to the end and gives each rank what an
unsharded model gives it. ``rollout``: the same through the real episode loop (``run_rollout``: ``ModelAgent``,
``play_batch``) on the Countdown test env, rank 0's episodes lasting 3 turns and rank 1's 1 and 2.
``refill``: dynamic sampling with that rollout, rank 0 refilling twice and rank 1 never (it plays empty batches).
Each rank asserts and prints ``rank N ok``; a hang ends in gloo's 90 s timeout.
"""

from __future__ import annotations

import copy
import sys
import tempfile
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from transformers import GenerationConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tiny_model import tiny_model, tiny_tokenizer  # noqa: E402

from agentgym_trl.engines.hf import HFGenerator, generation_synced  # noqa: E402
from agentgym_trl.engines.vllm_process import EngineOptions, EngineStats, VLLMEngine, sync_policy  # noqa: E402
from agentgym_trl.engines.weights import whole_tensor  # noqa: E402


def shard(model: torch.nn.Module, mesh) -> torch.nn.Module:
    """FSDP2 as Accelerate applies it: one unit per decoder layer, then the root."""
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def file_engine(folder: Path) -> tuple[VLLMEngine, dict]:
    """A ``VLLMEngine`` whose process is replaced by reading the weight file back (the real write path)."""
    from safetensors.torch import load_file

    engine = VLLMEngine.__new__(VLLMEngine)
    engine.options, engine.stats, engine._dir, engine.weights_changed = EngineOptions(dtype="float32"), \
        EngineStats(), folder, False
    loaded: dict = {}
    engine._request = lambda message: loaded.update(load_file(message["path"])) or {}
    return engine, loaded


def check_weights(rank: int, mesh) -> None:
    tokenizer = tiny_tokenizer()
    model = tiny_model(tokenizer)
    reference = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    shard(model, mesh)
    assert any(type(t).__name__ == "DTensor" for t in model.state_dict().values()), "the model must be sharded"
    with tempfile.TemporaryDirectory() as folder:
        engine, loaded = file_engine(Path(folder))
        sync_policy(engine, model)  # every rank owns an engine and joins each gather
        assert set(loaded) == set(reference), set(loaded) ^ set(reference)
        for name, tensor in reference.items():
            assert torch.equal(loaded[name], tensor), name

    # LoRA under FSDP2: the adapters merged into the gathered base weights, their own tensors left out
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(1)
    base = tiny_model(tokenizer)
    peft_model = get_peft_model(base, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    merged = copy.deepcopy(peft_model).merge_and_unload().state_dict()
    for layer in peft_model.base_model.model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(peft_model, mesh=mesh)
    before = {name: whole_tensor(tensor).clone() for name, tensor in peft_model.state_dict().items()}
    with tempfile.TemporaryDirectory() as folder:
        engine, loaded = file_engine(Path(folder))
        sync_policy(engine, peft_model)
        assert sorted(loaded) == sorted(merged), set(loaded) ^ set(merged)
        for name, tensor in merged.items():
            assert torch.allclose(loaded[name], tensor, atol=1e-6), name
    after = {name: whole_tensor(tensor) for name, tensor in peft_model.state_dict().items()}
    for name, tensor in before.items():  # the adapters unmerged again: training goes on from the same weights
        assert torch.allclose(after[name], tensor, atol=1e-6), name


def check_generate(rank: int, mesh) -> None:
    tokenizer = tiny_tokenizer()
    stop_ids = [tokenizer.eos_token_id]
    config = GenerationConfig(do_sample=False)
    plain = tiny_model(tokenizer)
    sharded = shard(tiny_model(tokenizer), mesh)
    fsdp = HFGenerator(sharded, config, tokenizer.pad_token_id, stop_ids, progress=False)
    local = HFGenerator(plain, config, tokenizer.pad_token_id, stop_ids, progress=False, share_prompt_prefill=False)
    assert generation_synced(sharded) and not generation_synced(plain)
    # rank 0: 3 episodes over 4 turns of up to 9 tokens; rank 1: 1 episode, 2 turns of up to 3 tokens (its first
    # turn's states, kept for the second, come from a generate that went on stepping for rank 0)
    prompts = [tokenizer.encode(text) for text in ("craft 3 acacia wood", "go to red ball 1", "inventory:", "tick")]
    episodes = [[list(p) for p in prompts[:3]], [list(prompts[3])]][rank]
    turns, limit = [(4, 9), (2, 3)][rank]
    results = {}
    for name, generator in (("fsdp", fsdp), ("local", local)):
        contexts = [list(c) for c in episodes]
        played, steps, empty_calls = [], 0, 0
        with generator.session():
            while generator.any_active(len(contexts) if steps < turns else 0):
                current = contexts if steps < turns else []
                empty_calls += not current
                outputs = generator.generate(current, [limit - i % 2 for i in range(len(current))])
                for context, output in zip(current, outputs, strict=True):
                    context.extend(output.ids + tokenizer.encode(" ok"))  # the reply and an observation
                played.append([output.ids for output in outputs])
                steps += 1
        results[name] = (played, empty_calls)
    fsdp_played, fsdp_empty = results["fsdp"]
    local_played, _ = results["local"]
    assert fsdp_played[:turns] == local_played, (fsdp_played, local_played)
    assert all(turn == [] for turn in fsdp_played[turns:])
    # rank 1 kept stepping in the synced loop while rank 0 still played: empty calls there, none on rank 0
    assert fsdp_empty == (0 if rank == 0 else 2), fsdp_empty
    assert all(len(ids) <= limit for turn in fsdp_played for ids in turn)


def check_rollout(rank: int, mesh) -> None:
    import agent_envs

    from agentgym_trl import ChatEncoder, EnvPool, run_rollout

    agent_envs.register()
    tokenizer = tiny_tokenizer()
    encoder = ChatEncoder(tokenizer, [tokenizer.eos_token_id])
    config = GenerationConfig(do_sample=False)
    sharded = shard(tiny_model(tokenizer), mesh)
    fsdp = HFGenerator(sharded, config, tokenizer.pad_token_id, encoder.stop_ids, progress=False)
    local = HFGenerator(tiny_model(tokenizer), config, tokenizer.pad_token_id, encoder.stop_ids, progress=False,
                        share_prompt_prefill=False)
    empty = []
    step_in_sync = fsdp._step_in_sync
    fsdp._step_in_sync = lambda model: empty.append(1) or step_in_sync(model)
    rows = [{"env_id": agent_envs.COUNTDOWN, "item_id": item} for item in ([2, 5, 8] if rank == 0 else [0, 1])]
    pool = EnvPool()
    try:
        results = [run_rollout(rows, generator, encoder, pool, max_turns=5, max_turn_tokens=[10, 4][rank],
                               max_context_tokens=600, truncated_turn="step") for generator in (fsdp, local)]
    finally:
        pool.close()
    played, expected = (result.trajectories for result in results)
    assert [t.completion_ids for t in played] == [t.completion_ids for t in expected]
    assert [len(t.actions) for t in played] == ([3, 3, 3] if rank == 0 else [1, 2])
    assert len(empty) == (0 if rank == 0 else 1), len(empty)  # rank 1 stepped through rank 0's third turn


def check_refill(rank: int, mesh) -> None:
    from types import SimpleNamespace

    import agent_envs

    from agentgym_trl import ChatEncoder, EnvPool, run_rollout
    from agentgym_trl.dynamic_sampling import fill_informative_groups
    from agentgym_trl.rollout import RolloutResult

    agent_envs.register()
    tokenizer = tiny_tokenizer()
    encoder = ChatEncoder(tokenizer, [tokenizer.eos_token_id])
    sharded = shard(tiny_model(tokenizer), mesh)
    generator = HFGenerator(sharded, GenerationConfig(do_sample=False), tokenizer.pad_token_id, encoder.stop_ids,
                            progress=False)
    pool = EnvPool()
    # the first batch: rank 0's one group scored alike (it refills), rank 1's varies (it does not)
    rows = [{"env_id": agent_envs.COUNTDOWN, "item_id": 2, "prompt": []} for _ in range(2)]
    first = RolloutResult(trajectories=[SimpleNamespace(reward=float(rank and i), success=False) for i in range(2)])
    played = []

    def play(new_rows):  # real synced episodes; rank 0's first refill scores alike again, its second varies
        played.append(len(new_rows))
        result = run_rollout(new_rows, generator, encoder, pool, max_turns=3, max_turn_tokens=6,
                             max_context_tokens=600, truncated_turn="step")
        assert len(result.trajectories) == len(new_rows)
        return RolloutResult(trajectories=[SimpleNamespace(reward=float(len(played) == 2 and index == 0), success=False)
                                           for index in range(len(new_rows))])

    draws = iter([[(agent_envs.COUNTDOWN, 5)], [(agent_envs.COUNTDOWN, 7)]])
    try:
        stats = fill_informative_groups(rows, first, 2, play, lambda count: next(draws)[:count], max_groups=4,
                                        more=generator.any_active)
    finally:
        pool.close()
    assert played == ([2, 2] if rank == 0 else [0, 0]), played
    assert stats.groups_kept == 1 and [row["item_id"] for row in rows] == ([7, 7] if rank == 0 else [2, 2])


def main() -> None:
    case = sys.argv[1]
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=90))
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    try:
        checks = {"weights": check_weights, "generate": check_generate, "rollout": check_rollout,
                  "refill": check_refill}
        checks[case](rank, mesh)
        dist.barrier()
        print(f"rank {rank} ok", flush=True)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
