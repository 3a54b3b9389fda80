"""The GPU install (``pip install -e '.[gpu]'``, docs/gpu.md) resolves, and the trainer works with its transformers.

The ``[gpu]`` extra puts TRL, vLLM and the trainer in one environment: vllm 0.31.0 (the newest TRL 1.16 takes) pins
torch 2.13.0 and transformers < 5.18, so the extra pins transformers 5.17.0 where ``[train]`` (the CPU path) has
5.23.0. Three checks, none of which needs a GPU:

- the extra's pins, read from pyproject.toml (no network);
- pip's resolver on the whole extra, as a dry run (``--report``): it must resolve, to exactly the pinned torch, vllm,
  trl and transformers. A dry run downloads no wheel where the index serves PEP 658 metadata (PyPI does); where it
  does not, ``--use-feature=fast-deps`` reads each wheel's metadata with HTTP range requests instead of fetching the
  wheel (the CUDA wheels are GBs). 30-60 s on 2 busy cores;
- the trainer's own tests under transformers 5.17.0: an overlay virtual environment (``--system-site-packages``, so
  only transformers and what it strictly needs differ from this one), built once in the cache folder, runs
  ``OVERLAY_TESTS``. About 15 s to build, 1-2 min to run on 2 busy cores.

Outside CI the network checks skip when the package index cannot be reached; in CI (``CI`` set) they fail instead.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PINNED = ("torch", "vllm", "trl", "transformers")
#: the trainer's tests that run again under the [gpu] extra's transformers (the TRL adapter, the rollout, training)
OVERLAY_TESTS = ("tests/test_trl_surface.py", "tests/test_trainer.py", "tests/test_rollout.py",
                 "tests/test_estimators.py", "tests/test_stages.py", "tests/test_trl_vllm.py")
#: what pip prints when it cannot reach the index (as opposed to a resolution that fails)
UNREACHABLE = re.compile(r"NewConnectionError|Max retries exceeded|Temporary failure in name resolution|"
                         r"Network is unreachable|Could not fetch URL|ConnectTimeout|ReadTimeout")


def extra(name: str) -> list[str]:
    """The requirements of one optional-dependency group of pyproject.toml."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project["optional-dependencies"][name]


def pins(requirements: list[str]) -> dict[str, str]:
    """``name -> version`` of the ``name[extras]==version`` requirements among ``requirements``."""
    found = {}
    for requirement in requirements:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==([^;\s]+)", requirement.strip())
        if match:
            found[match.group(1).lower()] = match.group(2)
    return found


def offline_or_fail(output: str, what: str) -> None:
    """Skip (outside CI) when ``output`` says the package index was unreachable; in CI that is a failure."""
    if UNREACHABLE.search(output):
        if os.environ.get("CI"):
            pytest.fail(f"CI could not reach the package index for {what}:\n{output[-3000:]}")
        pytest.skip(f"the package index is unreachable ({what}); CI runs this")


def pip_dry_run(report: Path, *requirements: str) -> subprocess.CompletedProcess:
    """``pip install --dry-run --ignore-installed --report`` of ``requirements``: resolve, install nothing."""
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
               "--disable-pip-version-check", "--progress-bar", "off", "--report", str(report), *requirements]
    # metadata by HTTP range requests where the index has no PEP 658 files (never a whole wheel): an older or newer
    # pip without the feature resolves the same way without it
    result = subprocess.run([*command[:4], "--use-feature=fast-deps", *command[4:]], capture_output=True, text=True,
                            timeout=600)
    if result.returncode and "invalid choice" in result.stderr and "fast-deps" in result.stderr:
        result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    return result


def test_the_gpu_extra_pins_one_consistent_set() -> None:
    gpu, train = pins(extra("gpu")), pins(extra("train"))
    assert {name: gpu.get(name) for name in PINNED} == {"torch": "2.13.0", "vllm": "0.31.0", "trl": "1.16.0",
                                                         "transformers": "5.17.0"}
    assert gpu["torch"] == train["torch"] and gpu["trl"] == train["trl"], "one torch and one TRL for both paths"
    assert "trl[vllm]==1.16.0" in extra("gpu"), "TRL's own vLLM integration: its [vllm] extra"
    assert not any("[train]" in requirement for requirement in extra("gpu")), "[train] pins another transformers"
    (everything,) = extra("all")
    assert "gpu" not in re.findall(r"\w+", everything.split("[", 1)[1]), "[all] is the CPU path: no [gpu] in it"


def setup_gpu(**settings: str) -> subprocess.CompletedProcess:
    """``scripts/setup_gpu.sh`` as a dry run (it prints its commands and runs none) with ``settings`` set."""
    env = {key: value for key, value in os.environ.items() if key not in ("CUDA", "ALLOW_CUDA_MISMATCH")}
    return subprocess.run(["bash", str(ROOT / "scripts" / "setup_gpu.sh")], capture_output=True, text=True,
                          env={**env, "DRY_RUN": "1", **settings}, timeout=60)


def test_setup_gpu_installs_cuda_torch_first_then_the_gpu_extra() -> None:
    result = setup_gpu()
    assert result.returncode == 0, result.stderr
    assert "warning" not in result.stderr
    commands = [line[2:] for line in result.stdout.splitlines() if line.startswith("+ ")]
    torch_at = next(i for i, c in enumerate(commands) if "torch==2.13.0" in c)
    extra_at = next(i for i, c in enumerate(commands) if "-e .[gpu," in c)
    assert torch_at < extra_at
    assert "--index-url https://download.pytorch.org/whl/cu130" in commands[torch_at]


def test_setup_gpu_refuses_a_torch_cuda_that_pypis_vllm_is_not_built_for() -> None:
    """Issue 62 item 9: ``CUDA=cu128`` would pair torch's cu128 build with PyPI's cu130 vLLM, which docs/gpu.md
    says does not work: refused before anything is installed, unless the user says they bring their own vLLM."""
    refused = setup_gpu(CUDA="cu128")
    assert refused.returncode == 2 and "+ " not in refused.stdout
    assert "CUDA=cu128" in refused.stderr and "cu130" in refused.stderr and "ALLOW_CUDA_MISMATCH=1" in refused.stderr
    allowed = setup_gpu(CUDA="cu128", ALLOW_CUDA_MISMATCH="1")
    assert allowed.returncode == 0, allowed.stderr
    assert "warning" in allowed.stderr and "vLLM built for cu128" in allowed.stderr
    assert "--index-url https://download.pytorch.org/whl/cu128" in allowed.stdout


def test_pip_resolves_the_gpu_extra_to_the_pinned_versions(tmp_path) -> None:
    report = tmp_path / "report.json"
    result = pip_dry_run(report, f"{ROOT}[gpu]")
    if result.returncode:
        offline_or_fail(result.stdout + result.stderr, "the [gpu] dry run")
    assert result.returncode == 0, f"pip cannot resolve .[gpu]:\n{result.stderr[-5000:]}"
    resolved = {item["metadata"]["name"].lower(): item["metadata"]["version"]
                for item in json.loads(report.read_text())["install"]}
    expected = pins(extra("gpu"))
    # a local build label (2.13.0+cu130, +cpu where a CPU wheel is found first) is the same release
    assert {name: resolved.get(name, "").split("+")[0] for name in PINNED} == {name: expected[name] for name in PINNED}


def overlay_python(version: str) -> Path:
    """A virtual environment over this one with only ``transformers==version`` (and what it needs) its own, made
    once in the cache folder; returns its Python."""
    from agentgym_envs.core.cache import cache_root

    tag = f"py{sys.version_info.major}{sys.version_info.minor}"
    folder = cache_root() / "overlays" / f"transformers-{version}-{tag}"
    python = folder / "bin" / "python"
    stamp = folder / "ready"
    if stamp.exists() and python.exists():
        return python
    # without a pip of its own (no ensurepip needed): this environment's pip, seen through the system site-packages,
    # installs into the overlay when the overlay's Python runs it
    subprocess.run([sys.executable, "-m", "venv", "--clear", "--without-pip", "--system-site-packages", str(folder)],
                   check=True, timeout=300)
    result = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                             f"transformers=={version}"], capture_output=True, text=True, timeout=600)
    if result.returncode:
        offline_or_fail(result.stdout + result.stderr, f"transformers {version}")
    assert result.returncode == 0, f"cannot install transformers {version}:\n{result.stderr[-5000:]}"
    stamp.write_text(version + "\n")
    return python


@pytest.mark.slow
def test_the_trainer_tests_pass_with_the_gpu_extras_transformers() -> None:
    import transformers

    version = pins(extra("gpu"))["transformers"]
    if transformers.__version__ == version:
        pytest.skip(f"this environment already has transformers {version}: the suite itself is that check")
    python = overlay_python(version)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    probe = subprocess.run([str(python), "-c", "import agentgym_trl, transformers; print(transformers.__version__, "
                            "agentgym_trl.__file__)"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert probe.returncode == 0, probe.stderr[-3000:]
    assert probe.stdout.split()[0] == version and probe.stdout.split()[1].startswith(str(ROOT)), probe.stdout
    result = subprocess.run([str(python), "-m", "pytest", "-q", "-rf", "-p", "no:cacheprovider", *OVERLAY_TESTS],
                            capture_output=True, text=True, env={**env, "COLUMNS": "400"}, cwd=ROOT, timeout=900)
    assert result.returncode == 0, f"the trainer's tests under transformers {version}:\n{result.stdout[-8000:]}"
