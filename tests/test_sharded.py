"""Sharded training on 2 CPU ranks (gloo, FSDP2 ``fully_shard``): the engine's weight copy gathers whole tensors,
synced generation cannot hang when ranks finish at different turns; and where the weight file goes when /dev/shm
is small (``shutil.disk_usage`` patched: no real tmpfs needed)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import pytest
import torch

from agentgym_trl.engines import vllm_process as vllm_engine
from agentgym_trl.engines.hf import HFGenerator, generation_synced
from agentgym_trl.engines.vllm_process import EngineError, checkpoint_bytes, remove_stale_weights, weights_folder

ROOT = Path(__file__).resolve().parents[1]
WORKER = Path(__file__).with_name("sharded_worker.py")
Usage = namedtuple("Usage", "total used free")
MiB = 2**20


def run_two_ranks(case: str, timeout: int = 240) -> subprocess.CompletedProcess:
    """``torchrun --nproc_per_node 2 sharded_worker.py case``; a hang is killed (its whole process group) and fails."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "HF_HUB_OFFLINE": "1",
           "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               str(WORKER), case]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        pytest.fail(f"2-rank {case} run hung for {timeout} s:\n{output[-4000:]}")
    return subprocess.CompletedProcess(command, process.returncode, output, "")


@pytest.mark.parametrize("case", ["weights", "generate", "rollout", "refill"])
def test_two_rank_fsdp2(case: str) -> None:
    # weights: the copy of a fully_shard model (plain and LoRA) is whole, safetensors writes it, it equals the
    # unsharded weights. generate: rank 0 plays 3 episodes for 4 turns, rank 1 one for 2 turns with fewer tokens;
    # both finish, each with what an unsharded model gives it. rollout: the same through run_rollout's episode
    # loop. refill: dynamic sampling, one rank refilling twice, the other joining with empty batches. (The whole
    # trainer cannot run FSDP on CPUs: Accelerate turns FSDP on only for GPU-type launches, and a CPU launch with
    # an FSDP config trains as DDP.)
    result = run_two_ranks(case)
    assert result.returncode == 0, result.stdout[-6000:]
    assert "rank 0 ok" in result.stdout and "rank 1 ok" in result.stdout, result.stdout[-6000:]


def test_one_process_generation_is_local() -> None:
    # no process group: no collective in any_active, no dummy call for an empty batch
    from tiny_model import tiny_model, tiny_tokenizer
    from transformers import GenerationConfig

    tokenizer = tiny_tokenizer()
    model = tiny_model(tokenizer)
    generator = HFGenerator(model, GenerationConfig(do_sample=False), tokenizer.pad_token_id, [tokenizer.eos_token_id])
    assert not generation_synced(model) and not generator.synced
    calls = []
    model.generate = lambda *args, **kwargs: calls.append(kwargs)
    with generator.session():
        assert generator.any_active(1) and not generator.any_active(0)
        assert generator.generate([], []) == [] and calls == []


# ---- where the weight file goes --------------------------------------------------------------------------------
@pytest.fixture
def folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, dict[str, int]]:
    """A stand-in /dev/shm and a disk folder whose free bytes the test sets."""
    shm, disk = tmp_path / "shm", tmp_path / "disk"
    shm.mkdir()
    disk.mkdir()
    free = {"shm": 64 * MiB, "disk": 10_000 * MiB}
    monkeypatch.setattr(vllm_engine.shutil, "disk_usage",
                        lambda path: Usage(0, 0, free["shm" if Path(path) == shm else "disk"]))
    monkeypatch.setattr(vllm_engine, "_SHM_WARNED", False)
    return shm, disk, free


def test_weights_go_to_shm_when_they_fit(folders, caplog) -> None:
    shm, disk, _ = folders
    with caplog.at_level(logging.WARNING, logger=vllm_engine.__name__):
        assert weights_folder(30 * MiB, disk, shm) == shm
        assert weights_folder(None, disk, shm) == shm  # size unknown (a hub id): the fast path
    assert not caplog.records


def test_too_small_shm_falls_back_to_disk_with_one_warning(folders, caplog) -> None:
    shm, disk, _ = folders
    with caplog.at_level(logging.WARNING, logger=vllm_engine.__name__):
        for _ in range(3):  # engine start, then every sync: one warning only
            assert weights_folder(270 * MiB, disk, shm) == disk
    warnings = [record.getMessage() for record in caplog.records]
    assert len(warnings) == 1 and "--shm-size" in warnings[0] and str(disk) in warnings[0], warnings


def test_no_room_anywhere_fails_in_one_line(folders) -> None:
    shm, disk, free = folders
    free["disk"] = 100 * MiB
    with pytest.raises(EngineError) as error:
        weights_folder(270 * MiB, disk, shm)
    message = str(error.value)
    assert "\n" not in message and "270 MiB" in message and "--shm-size" in message


def test_missing_shm_uses_disk_silently(tmp_path: Path, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger=vllm_engine.__name__):
        assert weights_folder(MiB, tmp_path, tmp_path / "no-shm") == tmp_path
    assert not caplog.records


def test_engine_fails_before_starting_when_nothing_fits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the check runs before the engine process is started: no vLLM needed to see it fail
    from tiny_model import save_tiny

    model_dir = save_tiny(tmp_path / "tiny")
    monkeypatch.setattr(vllm_engine.shutil, "disk_usage", lambda path: Usage(0, 0, 0))
    started = []
    monkeypatch.setattr(vllm_engine.VLLMEngine, "_start", lambda self: started.append(self))
    with pytest.raises(EngineError, match="no room for the engine's"):
        vllm_engine.VLLMEngine(model_dir)
    assert started == []


def test_checkpoint_bytes_reads_the_headers(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    save_file({"a": torch.zeros(10, 4), "agent_value_head.weight": torch.zeros(3)}, str(tmp_path / "model.safetensors"))
    assert checkpoint_bytes(tmp_path, "bfloat16") == 80  # the value head is never sent to the engine
    assert checkpoint_bytes(tmp_path, "auto") == 160
    assert checkpoint_bytes(tmp_path / "missing") is None


def test_stale_weight_files_of_dead_writers_are_removed(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f"agentgym-weights-{dead.pid}-abc.safetensors"
    live = tmp_path / f"agentgym-weights-{os.getpid()}-def.safetensors"
    unknown = tmp_path / "agentgym-weights-xyz.safetensors"  # no pid in the name: left alone
    for path in (stale, live, unknown):
        path.write_bytes(b"x")
    assert remove_stale_weights(tmp_path) == [stale]
    assert not stale.exists() and live.exists() and unknown.exists()


def test_weight_file_is_named_for_its_writer_and_unlinked(tmp_path: Path) -> None:
    engine = vllm_engine.VLLMEngine.__new__(vllm_engine.VLLMEngine)
    engine.options, engine.stats, engine._dir = vllm_engine.EngineOptions(), vllm_engine.EngineStats(), tmp_path
    seen = []
    engine._request = lambda message: seen.append(Path(message["path"])) or {}
    engine.load_weights({"w": torch.ones(2, 2)})
    assert seen[0].name.startswith(f"agentgym-weights-{os.getpid()}-") and not seen[0].exists()


# ---- two syncs at once, and whose file is live (issue 61 item 12) ------------------------------------------------
def test_the_weight_file_is_safetensors_of_exactly_its_reserved_size(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    tensors = {"b": torch.randn(3, 5).to(torch.bfloat16), "f": torch.randn(7), "i": torch.arange(4),
               "flag": torch.tensor([True, False]), "scalar": torch.tensor(2.5), "empty": torch.zeros(0, 3)}
    header, nbytes = vllm_engine.safetensors_header(tensors)
    with vllm_engine.weight_file(nbytes, tmp_path / "disk", shm=tmp_path) as (path, descriptor):
        assert os.fstat(descriptor).st_size == nbytes and path.parent == tmp_path
        vllm_engine.write_safetensors(descriptor, header, tensors)
        loaded = load_file(str(path))
        assert os.path.getsize(path) == nbytes
    assert not path.exists()
    assert loaded.keys() == tensors.keys()
    assert all(torch.equal(loaded[name], tensor) for name, tensor in tensors.items())


@pytest.fixture
def reserving_shm(folders, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, dict[str, int]]:
    """A stand-in /dev/shm whose free-space check sees ``free['shm']`` bytes, as before any reservation (two syncs
    that checked at once), while allocating in it takes from ``left['shm']`` and fails when that runs out."""
    import errno

    shm, disk, free = folders
    left = {"shm": free["shm"]}
    allocate = os.posix_fallocate

    def reserve(descriptor: int, offset: int, length: int) -> None:
        if Path(os.readlink(f"/proc/self/fd/{descriptor}")).parent == shm:
            if length > left["shm"]:
                raise OSError(errno.ENOSPC, "No space left on device")
            left["shm"] -= length
        allocate(descriptor, offset, length)

    monkeypatch.setattr(vllm_engine.os, "posix_fallocate", reserve)
    return shm, disk, left


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/fd")
def test_two_syncs_that_each_fit_alone_do_not_both_take_shm(reserving_shm, monkeypatch, caplog) -> None:
    """Each file fits the free room alone, not both: the second sync, checked before the first reserved, goes to
    disk with the warning instead of failing half-written."""
    shm, disk, left = reserving_shm
    left["shm"] = 3 * MiB
    monkeypatch.setattr(vllm_engine, "SHM", shm)
    engines = []
    for _ in range(2):
        engine = vllm_engine.VLLMEngine.__new__(vllm_engine.VLLMEngine)
        engine.options, engine.stats, engine._dir = vllm_engine.EngineOptions(dtype="float32"), \
            vllm_engine.EngineStats(), disk
        engines.append(engine)
    written: list[Path] = []

    def first(message):  # while the first engine reads its file, the other rank syncs
        written.append(Path(message["path"]))
        engines[1].load_weights({"w": torch.ones(MiB // 2)})
        return {}

    engines[0]._request = first
    engines[1]._request = lambda message: written.append(Path(message["path"])) or {}
    with caplog.at_level(logging.WARNING, logger=vllm_engine.__name__):
        engines[0].load_weights({"w": torch.ones(MiB // 2)})  # 2 MiB of float32: fits 3 MiB, twice it does not
    assert [path.parent for path in written] == [shm, disk]
    assert not any(path.exists() for path in written)
    warnings = [record.getMessage() for record in caplog.records]
    assert len(warnings) == 1 and "could not reserve" in warnings[0] and "--shm-size" in warnings[0], warnings


def test_no_room_to_reserve_anywhere_fails_in_one_line(reserving_shm, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    shm, disk, left = reserving_shm
    left["shm"] = 0

    def full(descriptor: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(vllm_engine.os, "posix_fallocate", full)
    with pytest.raises(EngineError) as error:
        with vllm_engine.weight_file(2 * MiB, disk, shm):
            pass
    assert "\n" not in str(error.value) and "no room for the engine's 2 MiB weight file" in str(error.value)
    assert not list(shm.iterdir()) and not list(disk.iterdir())


def test_a_locked_weight_file_is_live_whatever_its_pid_says(tmp_path: Path) -> None:
    """Across PID namespaces (``docker --ipc=host``) a live writer's pid may read as dead here: the lock its writer
    holds keeps its file; once nobody holds it, it is stale."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with vllm_engine.weight_file(16, tmp_path / "disk", shm=tmp_path) as (path, _):  # this process's own lock
        foreign = path.with_name(f"agentgym-weights-{dead.pid}-ours.safetensors")
        path.rename(foreign)
        assert remove_stale_weights(tmp_path) == [] and foreign.exists()
        foreign.rename(path)
    other = tmp_path / f"agentgym-weights-{dead.pid}-other.safetensors"
    other.write_bytes(b"x")
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time\n"
                               "f = open(sys.argv[1], 'rb'); fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True)\n"
                               "time.sleep(60)", str(other)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert remove_stale_weights(tmp_path) == [] and other.exists()  # another process's lock
    finally:
        holder.kill()
        holder.wait()
    assert remove_stale_weights(tmp_path) == [other]  # its writer gone: stale


def test_a_partial_weight_file_is_removed_only_once_old(tmp_path: Path) -> None:
    import time

    from agentgym_trl.engines.lifecycle import PARTIAL_AGE_S, PARTIAL_PREFIX

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    partial = tmp_path / f"{PARTIAL_PREFIX}{dead.pid}-abc.safetensors"
    partial.write_bytes(b"x")
    assert remove_stale_weights(tmp_path) == []  # maybe its writer, between creating and locking it
    old = time.time() - PARTIAL_AGE_S - 1
    os.utime(partial, (old, old))
    assert remove_stale_weights(tmp_path) == [partial]
