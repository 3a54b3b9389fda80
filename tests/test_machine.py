"""The CPU's class decides precision and the engine's dtype, honours the variables that force the AVX2 path, and
``agentgym doctor`` says so."""

from __future__ import annotations

import json

import pytest
import torch

from agentgym_envs.cli import main as agentgym
from agentgym_envs.core.machine import class_cap, cpu_report, hardware_class, read_cpu_flags

EPYC_AVX512_BF16 = "processor\t: 0\nmodel name\t: AMD EPYC 9R14\nflags\t\t: fpu sse2 avx avx2 fma avx512f avx512_bf16\n"
LAPTOP_AVX2 = "processor\t: 0\nmodel name\t: Intel Core i5-8250U\nflags\t\t: fpu sse2 avx avx2 fma\n"


@pytest.mark.parametrize(("flags", "expected"), [
    ({"avx2", "fma", "avx512f", "avx512_bf16"}, "avx512-bf16"),
    ({"avx2", "avx512f", "amx_bf16", "amx_tile"}, "avx512-bf16"),
    ({"avx2", "fma", "avx512f"}, "avx512"),
    ({"avx2", "fma"}, "avx2"),
    ({"sse2", "avx"}, "older"),
])
def test_the_flags_decide_the_hardware_class(flags, expected):
    assert hardware_class(frozenset(flags)) == expected


@pytest.mark.parametrize(("environ", "expected"), [
    ({}, ("avx512-bf16", None)),
    ({"ATEN_CPU_CAPABILITY": "avx2"}, ("avx2", "ATEN_CPU_CAPABILITY=avx2")),
    ({"ATEN_CPU_CAPABILITY": "AVX512"}, ("avx512-bf16", None)),
    ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}, ("avx512", "ONEDNN_MAX_CPU_ISA=AVX512_CORE")),
    ({"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}, ("avx2", "ATEN_CPU_CAPABILITY=avx2")),
    ({"ATEN_CPU_CAPABILITY": "default"}, ("older", "ATEN_CPU_CAPABILITY=default")),
    ({"ONEDNN_MAX_CPU_ISA": "nonsense"}, ("avx512-bf16", None)),
])
def test_the_environment_caps_the_class(environ, expected):
    assert class_cap(environ) == expected


def test_a_forced_avx512_machine_reports_the_avx2_class_and_what_forced_it(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(EPYC_AVX512_BF16)
    native = cpu_report({}, cpuinfo)
    assert (native.model, native.flags, native.cpu_class, native.forced_by) == (
        "AMD EPYC 9R14", ("avx2", "fma", "avx512f", "avx512_bf16"), "avx512-bf16", None)
    forced = cpu_report({"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}, cpuinfo)
    assert (forced.hardware_class, forced.cpu_class) == ("avx512-bf16", "avx2")
    assert forced.describe() == "AVX2 only (AVX512-BF16 hardware, forced by ATEN_CPU_CAPABILITY=avx2)"
    assert json.loads(json.dumps(forced.to_dict()))["flags"] == ["avx2", "fma", "avx512f", "avx512_bf16"]


def test_a_cap_above_the_hardware_changes_nothing(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(LAPTOP_AVX2)
    report = cpu_report({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}, cpuinfo)
    assert (report.cpu_class, report.forced_by, report.describe()) == ("avx2", None, "AVX2 only")


def test_without_cpuinfo_the_class_is_unknown(tmp_path):
    assert read_cpu_flags(tmp_path / "absent") is None
    report = cpu_report({}, tmp_path / "absent")
    assert report.cpu_class is None and report.describe() == "unknown (no /proc/cpuinfo)"


def test_forcing_avx2_makes_training_and_the_engine_choose_fp32(monkeypatch):
    from agentgym_trl.engines.vllm_process import EngineOptions, default_engine_dtype
    from agentgym_trl.fast_training import bf16_is_fast
    from agentgym_trl.hardware import choice_line

    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    if torch.cuda.is_available():
        pytest.skip("a GPU decides bf16 by itself")
    assert not bf16_is_fast()
    assert default_engine_dtype() == "float32" and EngineOptions().dtype == "float32"
    assert EngineOptions(dtype="bfloat16").dtype == "bfloat16"  # a named dtype is kept
    line = choice_line("hf", bf16=False)
    assert "AVX2 only" in line and "fp32 weights (bf16 is emulated here)" in line and "HF generate in fp32" in line


def test_the_config_leaves_the_engine_dtype_to_the_machine(tmp_path, monkeypatch):
    from agentgym_trl.config import AgentGRPOConfig
    from agentgym_trl.engines.vllm_process import EngineOptions

    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    config = AgentGRPOConfig(output_dir=str(tmp_path), engine="vllm-process", use_cpu=True)
    assert config.vllm_dtype is None and not config.bf16
    assert EngineOptions.from_config(config, slots=4).dtype == "float32"
    named = AgentGRPOConfig(output_dir=str(tmp_path), engine="vllm-process", vllm_dtype="bfloat16", use_cpu=True)
    assert EngineOptions.from_config(named, slots=4).dtype == "bfloat16"


def test_the_engine_worker_takes_the_avx2_kernels_when_torch_is_capped(monkeypatch):
    from agentgym_trl.engines import vllm_worker

    probes = ("_is_avx512_supported", "_is_avx512_bf16_supported", "_is_amx_tile_supported")
    for probe in probes:  # restored after the test
        monkeypatch.setattr(torch.cpu, probe, lambda: True)
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    vllm_worker.honour_isa_cap()
    assert all(getattr(torch.cpu, probe)() for probe in probes)
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    vllm_worker.honour_isa_cap()
    assert not any(getattr(torch.cpu, probe)() for probe in probes)


def test_doctor_names_the_class_flags_precision_and_engine(capsys, monkeypatch):
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    assert agentgym(["doctor", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    if report["cpu_class"] is None:
        pytest.skip("no /proc/cpuinfo here")
    assert report["cpu_class"] in ("avx2", "older")
    rows = report["rows"]
    assert "class" in rows and "deciding flags" in rows
    assert rows["training precision"].startswith("fp32")  # the trainer's rows, through its entry point
    assert "float32" in rows["vLLM engine process"]
    assert rows["faster sampling"].startswith("none measured")  # HF fp32 kept pace with the engine on this class
    assert agentgym(["doctor", "--measure"]) == 0
    assert "GFLOP/s" in capsys.readouterr().out


def test_doctor_without_the_trainer_stack_says_what_to_install(capsys, monkeypatch):
    from importlib import metadata

    class Missing:
        def load(self):
            raise ModuleNotFoundError("No module named 'torch'", name="torch")

    monkeypatch.setattr(metadata, "entry_points", lambda group: [Missing()])
    assert agentgym(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "torch is missing" in out and "agentgym-rl[train]" in out


def test_where_the_flags_cannot_be_read_training_and_the_engine_ask_torch_alike(monkeypatch):
    from agentgym_envs.core import machine
    from agentgym_trl.engines.vllm_process import default_engine_dtype
    from agentgym_trl.fast_training import bf16_is_fast

    if torch.cuda.is_available():
        pytest.skip("a GPU decides bf16 by itself")
    monkeypatch.setattr(machine, "cpu_class", lambda environ=None: None)
    for native in (True, False):
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda native=native: native)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
        assert machine.bf16_is_native() is native and bf16_is_fast() is native
        assert default_engine_dtype() == ("bfloat16" if native else "float32")


def test_the_start_line_names_the_engine_dtype_a_run_asked_for():
    from agentgym_trl.hardware import choice_line

    assert choice_line("vllm-process", bf16=False, vllm_dtype="float16").endswith("the vLLM engine process in float16")
