"""Run by tests/test_trl_vllm.py under ``torchrun --nproc_per_node 2`` (gloo): TRLVLLMGenerator over a stand-in for
TRL's server-mode ``VLLMGeneration``, whose call is a collective that slices the answers back by rank.

Rank 0 plays 3 episodes for 3 turns, rank 1 one episode for 1 turn: the ranks must keep calling together until
neither has an episode, every call must carry as many contexts on each rank, and each context must get its own
answer. Prints ``RANK <r> OK <calls>`` on success.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from agentgym_trl.engines import Sampling
from agentgym_trl.engines.trl_vllm import TRLVLLMGenerator

STOP = 99


class ServerModeStandIn:
    """TRL's server mode as far as ranks see it: every rank's prompts gathered, answered on rank 0, broadcast, and
    sliced back by ``rank * len(prompts)`` (so unequal counts would hand rows to the wrong rank)."""

    mode = "server"

    def __init__(self) -> None:
        self.max_completion_length = 16
        self.temperature = 1.0
        self.top_p = 1.0
        self.top_k = 0
        self.generation_kwargs: dict = {}
        self.enable_sleep_mode = False

    def generate(self, prompts, images, num_generations):
        counts = [None] * dist.get_world_size()
        dist.all_gather_object(counts, len(prompts))
        assert len(set(counts)) == 1, f"ranks sent {counts} prompts: TRL would slice answers to the wrong rank"
        gathered = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, prompts)
        everything = [prompt for part in gathered for prompt in part]
        # each answer starts with its prompt's last token + 1, so a row can tell it got its own
        answers = [[prompt[-1] + 1, STOP] for prompt in everything]
        start = dist.get_rank() * len(prompts)
        mine = answers[start : start + len(prompts)]
        return prompts, mine, [[[-0.5]] * len(answer) for answer in mine], None


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    generator = TRLVLLMGenerator(ServerModeStandIn(), Sampling(temperature=0), [STOP], collective=True, filler_id=0)
    episodes = {0: [[10], [20], [30]], 1: [[40]]}[rank]
    turns_left = {0: [3, 3, 3], 1: [1]}[rank]
    while generator.any_active(sum(1 for left in turns_left if left > 0)):
        playing = [i for i, left in enumerate(turns_left) if left > 0]
        outputs = generator.generate([episodes[i] for i in playing], [8] * len(playing))
        assert len(outputs) == len(playing)
        for i, output in zip(playing, outputs):
            assert output.ids == [episodes[i][-1] + 1, STOP] and output.stopped, (rank, i, output)
            assert output.logprobs == [-0.5, -0.5]
            episodes[i] = episodes[i] + output.ids + [episodes[i][-1] + 5]  # the reply and an observation
            turns_left[i] -= 1
    total = torch.tensor([generator.calls])
    dist.all_reduce(total)
    assert generator.calls == 3, f"rank {rank} called {generator.calls} times; every rank must join each call"
    print(f"RANK {rank} OK {generator.calls} padded {generator.padded_rows}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
