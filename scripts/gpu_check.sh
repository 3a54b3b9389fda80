#!/usr/bin/env bash
# Check the trainer's CUDA path (bf16, HF generation, LoRA, a few GRPO steps with a tiny model, then SmolLM2 if
# installed, and the vLLM engine where scripts/setup_vllm.sh made one). Results: runs/gpu_check/gpu_check.json.
#
#   bash scripts/gpu_check.sh                    # all parts, 8 steps each
#   bash scripts/gpu_check.sh --parts tiny --steps 2
#   bash scripts/gpu_check.sh --bench            # first scripts/gpu_bench.py (/dev/shm, weight-sync and generation
#                                                # throughput at Qwen2 shapes; no TRL needed): runs/gpu_check/gpu_bench.json
#   BENCH_ARGS="--device cpu --quick" bash scripts/gpu_check.sh --bench --device cpu --steps 1   # both, on a CPU
#   WHEELS=/path/to/wheels bash scripts/gpu_check.sh   # a machine without a registry: install carried wheels first
#
# Any other argument goes to scripts/gpu_check.py (--help lists them; its parts are skipped, and say so, without
# TRL). Exit code: 0 all parts ok or skipped, 1 a part failed, 2 no CUDA device.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if [ -n "${WHEELS:-}" ]; then
    python -m pip install -q --no-index --find-links "$WHEELS" --no-deps "$WHEELS"/*.whl
fi
# the project itself from this checkout, whatever is installed
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
rc=0
if [ "${1:-}" = --bench ]; then
    shift
    # shellcheck disable=SC2086  # BENCH_ARGS is a list of arguments
    python scripts/gpu_bench.py ${BENCH_ARGS:-} || rc=$?
fi
python scripts/gpu_check.py "$@" || { status=$?; [ "$rc" -ne 0 ] || rc=$status; }
exit "$rc"
