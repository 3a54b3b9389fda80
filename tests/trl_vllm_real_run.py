"""Run by tests/test_trl_vllm_real.py with the Python of the vLLM environment (scripts/setup_vllm.sh puts TRL 1.16 and
the project's trainer beside vLLM's CPU build): TRL's real ``VLLMGeneration`` on a CPU, with a tiny random Qwen2.

``colocate``: ``AgentGRPOTrainer(use_vllm=True, vllm_engine='trl', vllm_mode='colocate')`` builds TRL's in-process
engine and trains a few GRPO steps, multi-turn. At every rollout (before the first optimizer step and after each one)
it records every tensor of the engine against the policy's, cast to the engine's dtype (vLLM's CPU linear layers keep
their weights only packed for their GEMM library, so each one is read back by multiplying an identity matrix through
the layer's own kernel: exact, one non-zero product per output), and the engine's log-prob of each sampled token
against the trainer's own forward of the same token stream; then the same under the first weights, which is what a
missed sync would show. vLLM's CPU layers repack their weights after loading, so TRL's colocate sync
(``model.load_weights``, one tensor at a time) cannot load into them: here, and only here, the sync goes through vLLM's
``reload_weights`` with TRL's own parameter iterator (``_iter_named_params``). At the end TRL's unchanged sync is
tried once and its error recorded, so the test notices the day it works.

``server``: vLLM's OpenAI server started with what TRL 1.16's client needs (``VLLM_SERVER_DEV_MODE=1``,
``--weight-transfer-config '{"backend": "nccl"}'``, ``--logprobs-mode processed_logprobs``), TRL's ``VLLMClient``
and a server-mode ``VLLMGeneration`` against it, and multi-turn episodes through ``TRLVLLMGenerator``. What a CPU
cannot do is recorded, not worked around: the weight transfer (NCCL, CUDA only) and ``trl vllm-serve``.

Each writes a JSON report to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

#: vLLM on 2 shared cores: a small KV cache, every core for its threads, no compilation. TRL passes vLLM no
#: enforce_eager; VLLM_CPU_CI_ENV makes vLLM's CPU platform trace with the eager backend and skip its warm-up, and
#: TORCHDYNAMO_DISABLE then skips the tracing too: the colocate trainer is built in ~2 s and its first rollout takes
#: ~2 s, against 55 s and 14 s with inductor's compile (17 s for the first rollout with VLLM_CPU_CI_ENV alone).
VLLM_ENV = {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_CI_ENV": "1", "TORCHDYNAMO_DISABLE": "1",
            "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "TOKENIZERS_PARALLELISM": "false",
            "TRL_EXPERIMENTAL_SILENCE": "1", "VLLM_LOGGING_LEVEL": "WARNING",
            "VLLM_CPU_OMP_THREADS_BIND": ",".join(map(str, sorted(os.sched_getaffinity(0))))}
for _name, _value in VLLM_ENV.items():
    os.environ.setdefault(_name, _value)

import torch  # noqa: E402

#: items of the suite's countdown env that take 3 turns; a random model's rewards vary within a group there (even or
#: odd reply length), so every step has a gradient and the weights move between syncs
ITEMS = (2, 5, 8)
SERVER_START_S = 300.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["colocate", "server"])
    parser.add_argument("--out", required=True, help="the JSON report")
    parser.add_argument("--steps", type=int, default=2, help="colocate: GRPO steps")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report: dict = {"mode": args.mode, "ok": False}
    started = time.perf_counter()
    try:
        import trl
        import vllm

        report["versions"] = {"trl": trl.__version__, "vllm": vllm.__version__, "torch": torch.__version__}
        with tempfile.TemporaryDirectory(prefix=f"trl-vllm-{args.mode}-") as work:
            (run_colocate if args.mode == "colocate" else run_server)(args, report, Path(work))
        report["ok"] = True
    except BaseException as error:  # noqa: BLE001 - the report says what failed
        report["error"] = f"{type(error).__name__}: {error}"
        report["traceback"] = traceback.format_exc()[-6000:]
    report["wall_s"] = round(time.perf_counter() - started, 1)
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    return 0 if report["ok"] else 1


def save_tiny_model(folder: Path, dtype: str) -> None:
    """The suite's tiny chat model with a head size vLLM's CPU attention takes (64), its config naming ``dtype`` (what
    vLLM's default dtype 'auto' reads; the trainer loads fp32 whatever it says)."""
    from tiny_model import tiny_model, tiny_tokenizer

    tokenizer = tiny_tokenizer("chatml")
    tiny_model(tokenizer, hidden_size=128, num_attention_heads=2).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    config_path = folder / "config.json"
    config = json.loads(config_path.read_text())
    config["dtype"] = dtype
    config_path.write_text(json.dumps(config))


def load_policy(folder: Path) -> tuple:
    from transformers import PreTrainedTokenizerFast, Qwen2ForCausalLM

    policy = Qwen2ForCausalLM.from_pretrained(folder, dtype=torch.float32)
    return policy, PreTrainedTokenizerFast.from_pretrained(folder)


def compare_logprobs(trajectories: list, policy: torch.nn.Module, temperature: float = 1.0) -> dict:
    """The engine's log-prob of every sampled token against the policy's forward of the same stream (fp32)."""
    gaps: list[float] = []
    turns = []
    with torch.no_grad():
        for trajectory in trajectories:
            ids = list(trajectory.prompt_ids) + list(trajectory.completion_ids)
            logits = policy(input_ids=torch.tensor([ids])).logits[0].float() / temperature
            scores = torch.log_softmax(logits, dim=-1)
            start = len(trajectory.prompt_ids)
            for offset, (token, mask, engine) in enumerate(zip(trajectory.completion_ids, trajectory.env_mask,
                                                               trajectory.logprobs)):
                if mask and not math.isnan(engine):
                    gaps.append(abs(scores[start + offset - 1, token].item() - engine))
            turns.append(len(trajectory.turn_ends))
    return {"tokens": len(gaps), "mean_abs_gap": sum(gaps) / max(1, len(gaps)), "max_abs_gap": max(gaps, default=0.0),
            "turns": turns}


# ---- colocate --------------------------------------------------------------------------------------------------
def engine_runner(vllm_generation: object) -> object:
    """The model runner of TRL's in-process engine (where its colocate sync writes)."""
    return vllm_generation.llm.llm_engine.model_executor.driver_worker.model_runner


class CPUSyncMixin:
    """TRL's ``sync_weights`` with its colocate load routed through vLLM's ``reload_weights`` (see the module's
    docstring); everything else, and the parameter iterator, stays TRL's."""

    syncs = 0

    def sync_weights(self) -> None:
        if self.mode != "colocate":
            return super().sync_weights()
        engine_runner(self).reload_weights(weights_iterator=self._iter_named_params())
        self.llm.reset_prefix_cache()
        type(self).syncs += 1


def read_linear(module: torch.nn.Module) -> torch.Tensor:
    """A CPU linear layer's weight as vLLM's kernel applies it: the identity through ``cpu_linear`` is W^T."""
    weight = module.weight
    dtype = weight.dtype if weight.numel() else module.params_dtype
    eye = torch.eye(module.input_size_per_partition, dtype=dtype)
    return module.cpu_linear(eye, module.weight, None).t().contiguous()


def engine_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every weight and bias of the engine's model, packed linear layers read back through their kernel."""
    tensors = {}
    for module_name, module in model.named_modules():
        for param_name, param in module.named_parameters(recurse=False):
            name = f"{module_name}.{param_name}" if module_name else param_name
            if param_name == "weight" and hasattr(module, "cpu_linear") and param.numel() == 0:
                tensors[name] = read_linear(module)
            else:
                tensors[name] = param.detach().clone()
    return tensors


def compare_weights(engine: torch.nn.Module, policy: torch.nn.Module) -> dict:
    """Every policy tensor against the engine's (fused q/k/v and gate/up taken apart by vLLM's own mapping)."""
    packed = getattr(engine, "packed_modules_mapping", {})
    mine = engine_tensors(engine)
    dtype = next(t for t in mine.values() if t.is_floating_point()).dtype
    theirs = {name: param.detach() for name, param in policy.named_parameters()}
    parameters = len(theirs)
    compared, unequal, max_diff = 0, [], 0.0
    for name, tensor in mine.items():
        parts = [name]
        for fused, pieces in packed.items():
            if f".{fused}." in name:
                parts = [name.replace(f".{fused}.", f".{piece}.") for piece in pieces]
        expected = torch.cat([theirs.pop(part) for part in parts]).to(dtype)
        got = tensor[: expected.shape[0]]  # the engine pads the vocabulary to a multiple of 64
        if got.shape != expected.shape:
            raise AssertionError(f"{name}: the engine's {tuple(got.shape)}, the policy's {tuple(expected.shape)}")
        compared += len(parts)
        max_diff = max(max_diff, (got.float() - expected.float()).abs().max().item())
        if not torch.equal(got, expected):
            unequal.append(name)
    return {"engine_tensors": len(mine), "policy_parameters": parameters, "policy_tensors": compared,
            "left_out": sorted(theirs), "unequal": unequal,
            "max_abs_diff": max_diff, "dtype": str(dtype).removeprefix("torch.")}


def run_colocate(args: argparse.Namespace, report: dict, work: Path) -> None:
    import trl.trainer.grpo_trainer as grpo_module
    from agent_envs import COUNTDOWN  # registers the suite's small envs
    from datasets import Dataset

    from agentgym_trl import AgentGRPOConfig, AgentGRPOTrainer
    from agentgym_trl.engines.trl_vllm import TRLVLLMGenerator

    save_tiny_model(work / "tiny", "bfloat16")  # the engine samples in bf16, as with SmolLM2's config
    policy, tokenizer = load_policy(work / "tiny")
    base = grpo_module.VLLMGeneration
    routed = type("CPUSyncVLLMGeneration", (CPUSyncMixin, base), {})
    grpo_module.VLLMGeneration = routed
    first = {name: p.detach().clone() for name, p in policy.named_parameters()}  # the weights before any step
    checks: list[dict] = []

    class Checked(AgentGRPOTrainer):
        """Checks the engine against the policy at each rollout, after TRL's sync and before the optimizer step."""

        def _agent_rollout(self, prompts, trainer=None):
            output = super()._agent_rollout(prompts, trainer)
            engine = engine_runner(self.vllm_generation).model
            policy = self.accelerator.unwrap_model(self.model)
            trajectories = self._batch.rollout.trajectories
            check = {"step": self.state.global_step, "syncs": routed.syncs,
                     "weights": compare_weights(engine, policy),
                     "logprobs": compare_logprobs(trajectories, policy, self.temperature),
                     "policy_moved": any(not torch.equal(first[n], p) for n, p in policy.named_parameters())}
            if check["policy_moved"]:  # the same tokens under the first weights: what a missed sync would show
                current = {n: p.detach().clone() for n, p in policy.named_parameters()}
                with torch.no_grad():
                    for n, p in policy.named_parameters():
                        p.copy_(first[n])
                    check["stale_weights"] = compare_weights(engine, policy)
                    check["stale_logprobs"] = compare_logprobs(trajectories, policy, self.temperature)
                    for n, p in policy.named_parameters():
                        p.copy_(current[n])
            checks.append(check)
            return output

    config = AgentGRPOConfig(
        output_dir=str(work / "run"), env_ids=[COUNTDOWN], max_turns=3, max_turn_tokens=16, max_context_tokens=512,
        per_device_train_batch_size=4 * len(ITEMS), num_generations=4, max_steps=args.steps, learning_rate=1e-2,
        beta=0.0, save_strategy="no", report_to="none", logging_steps=1, seed=0, use_cpu=True,
        dataloader_num_workers=0, use_vllm=True, vllm_engine="trl", vllm_mode="colocate", truncated_turn="step",
    )
    rows = Dataset.from_list([{"env_id": COUNTDOWN, "item_id": item} for item in ITEMS])
    built = time.perf_counter()
    trainer = Checked(policy, args=config, processing_class=tokenizer, train_dataset=rows)
    report["trainer_init_s"] = round(time.perf_counter() - built, 1)
    vllm_generation = trainer.vllm_generation
    report["vllm_generation_classes"] = [f"{c.__module__}.{c.__qualname__}" for c in type(vllm_generation).__mro__]
    report["generator"] = type(trainer.generator).__name__
    if not isinstance(trainer.generator, TRLVLLMGenerator):
        raise AssertionError(f"the trainer generates with {report['generator']}, not TRLVLLMGenerator")
    trained = time.perf_counter()
    trainer.train()
    report["train_s"] = round(time.perf_counter() - trained, 1)
    report["checks"] = checks
    logs = [log for log in trainer.state.log_history if "loss" in log]
    for key, name in (("losses", "loss"), ("grad_norms", "grad_norm"), ("reward_std", "reward_std"),
                      ("sampling_logp_difference", "sampling/sampling_logp_difference/mean"),
                      ("step_s", "step_time"), ("rollout_s", "agent/rollout_s")):
        report[key] = [log.get(name) for log in logs]
    report["generator_calls"] = trainer.generator.calls
    # TRL's own colocate sync, unchanged, once at the end (it may leave the engine half-loaded)
    try:
        base.sync_weights(vllm_generation)
        report["trl_sync"] = "ok"
    except Exception as error:  # noqa: BLE001 - what it raises is the finding
        report["trl_sync"] = f"{type(error).__name__}: {error}"
    trainer.close_envs()


# ---- server ----------------------------------------------------------------------------------------------------
#: what TRL 1.16's VLLMClient needs of `vllm serve` (trl/scripts/vllm_serve.py builds the same): its weight-transfer
#: and prefix-cache endpoints behind VLLM_SERVER_DEV_MODE=1, an NCCL weight-transfer engine, log-probs after
#: temperature
TRL_SERVER_FLAGS = ["--weight-transfer-config", '{"backend": "nccl"}', "--logprobs-mode", "processed_logprobs",
                    "--max-logprobs", "-1"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until_up(process: subprocess.Popen, url: str, timeout: float) -> float:
    """Seconds until ``url``/health answers; raises if the process ends first or the time runs out."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with code {process.returncode} before it answered")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                if response.status == 200:
                    return time.monotonic() - started
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"the server did not answer within {timeout:.0f} s")


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def tail(path: Path, lines: int = 15) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def start_trl_vllm_serve(folder: Path, work: Path) -> tuple[subprocess.Popen, str, Path]:
    """``trl vllm-serve`` as TRL documents it, started beside the other server (it fails while importing, on a CPU)."""
    port = free_port()
    log = work / "trl-vllm-serve.log"
    command = [str(Path(sys.executable).with_name("trl")), "vllm-serve", "--model", str(folder), "--host", "127.0.0.1",
               "--port", str(port), "--max_model_len", "512", "--enforce_eager", "true"]
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    return process, f"http://127.0.0.1:{port}", log


def outcome(process: subprocess.Popen, url: str, log: Path) -> str:
    """'ok' if the server at ``url`` answers, else how its process ended (the log's last error line)."""
    try:
        wait_until_up(process, url, SERVER_START_S)
        return "ok"
    except (RuntimeError, TimeoutError) as error:
        errors = [line for line in tail(log, 40).splitlines() if "Error" in line]
        return f"{error}: {errors[-1] if errors else tail(log, 3)}"
    finally:
        stop(process)


def run_server(args: argparse.Namespace, report: dict, work: Path) -> None:
    from accelerate import Accelerator
    from agent_envs import COUNTDOWN  # registers the suite's small envs
    from trl.generation.vllm_generation import VLLMGeneration

    from agentgym_envs.core.loop import EnvPool
    from agentgym_trl.chat import ChatEncoder
    from agentgym_trl.engines import Sampling
    from agentgym_trl.engines.trl_vllm import TRLVLLMGenerator, check_server_context
    from agentgym_trl.rollout import run_rollout

    folder = work / "tiny"
    save_tiny_model(folder, "float32")
    policy, tokenizer = load_policy(folder)
    trl_serve = start_trl_vllm_serve(folder, work)

    # vLLM's own server, as `VLLM_SERVER_DEV_MODE=1 vllm serve ...` starts it; vllm-cpu's `vllm` command fails the
    # same way `trl vllm-serve` does, so through the module the command runs
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = work / "vllm-serve.log"
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder), "--host",
               "127.0.0.1", "--port", str(port), "--dtype", "float32", "--max-model-len", "512", "--enforce-eager",
               *TRL_SERVER_FLAGS]
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                   env={**os.environ, "VLLM_SERVER_DEV_MODE": "1"})
    try:
        try:
            report["server_start_s"] = round(wait_until_up(process, url, SERVER_START_S), 1)
        except (RuntimeError, TimeoutError) as error:
            raise RuntimeError(f"{error}; its log ends:\n{tail(log)}") from error

        class NoWeightTransfer(VLLMGeneration):
            """TRL's server-mode VLLMGeneration, recording (not raising) the one CUDA-only step of its start."""

            def _init_vllm(self):
                try:
                    super()._init_vllm()
                    report["weight_transfer"] = "ok"
                except NotImplementedError as error:
                    report["weight_transfer"] = f"{type(error).__name__}: {error}"

        accelerator = Accelerator(cpu=True)
        vllm_generation = NoWeightTransfer(policy, accelerator, tokenizer, mode="server", server_base_url=url,
                                           server_timeout=30)
        client = vllm_generation.vllm_client
        info = client.get_server_info()
        report["server_info"] = {"weight_transfer_config": info.get("weight_transfer_config"),
                                 "max_model_len": info.get("model_config", {}).get("max_model_len")}
        check_server_context(vllm_generation, 512)
        try:
            check_server_context(vllm_generation, 513)
            report["short_server_refused"] = False
        except ValueError as error:
            report["short_server_refused"] = str(error)

        chat = ChatEncoder(tokenizer, [tokenizer.eos_token_id])
        sampling = Sampling(temperature=1.0)
        generator = TRLVLLMGenerator(vllm_generation, sampling, chat.stop_ids, collective=False,
                                     filler_id=tokenizer.pad_token_id)
        rows = [{"env_id": COUNTDOWN, "item_id": item} for item in ITEMS for _ in range(2)]
        started = time.perf_counter()
        result = run_rollout(rows, generator, chat, EnvPool(), max_turns=3, max_turn_tokens=16,
                             max_context_tokens=400, truncated_turn="step")
        report["rollout_s"] = round(time.perf_counter() - started, 2)
        report["generator_calls"] = generator.calls
        report["logprobs"] = compare_logprobs(result.trajectories, policy)
        client.reset_prefix_cache()
        report["prefix_cache_reset"] = True
        report["trl_vllm_serve"] = outcome(*trl_serve)
    finally:
        stop(process)
        stop(trl_serve[0])


if __name__ == "__main__":
    sys.exit(main())
