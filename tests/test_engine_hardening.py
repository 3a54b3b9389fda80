"""The vLLM engine's process handling without vLLM (issue 47): ``tests/fake_vllm_worker.py`` speaks the worker's
protocol, so a long $TMPDIR, a crashed or killed engine, weight files and shutdown are tested in seconds."""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from pathlib import Path

import pytest

import agentgym_trl.vllm_engine as vllm_engine
from agentgym_trl.vllm_engine import SOCKET_PATH_MAX, EngineError, EngineOptions, VLLMEngine, socket_address

FAKE_WORKER = Path(__file__).with_name("fake_vllm_worker.py")


@pytest.fixture
def fake_engine(tmp_path, monkeypatch):
    """Start a ``VLLMEngine`` whose worker is the fake one (``FAKE_VLLM_MODE`` picks its behaviour)."""
    monkeypatch.setattr(vllm_engine, "WORKER_SCRIPT", FAKE_WORKER)
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    engines = []

    def start(mode: str = "serve", **options) -> VLLMEngine:
        monkeypatch.setenv("FAKE_VLLM_MODE", mode)
        engine = VLLMEngine(model, EngineOptions(python=sys.executable, start_timeout_s=30, **options))
        engines.append(engine)
        return engine

    yield start
    for engine in engines:
        engine.close()


def long_tmpdir(tmp_path: Path, monkeypatch) -> Path:
    """A $TMPDIR deep enough that an engine folder's socket would pass the Unix socket limit."""
    folder = tmp_path / ("deep-" * 14)
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    assert len(str(folder / "agentgym-vllm-4194304-abcdefgh/engine.sock")) > SOCKET_PATH_MAX
    return folder


def test_a_long_tmpdir_puts_the_socket_in_a_short_private_folder(tmp_path, monkeypatch) -> None:
    folder = long_tmpdir(tmp_path, monkeypatch)
    engine_folder = vllm_engine.engine_dir()
    assert engine_folder.parent == folder
    address, short = socket_address(engine_folder)
    try:
        assert len(os.fsencode(address)) <= SOCKET_PATH_MAX and address.parent == short
        assert short.parent == Path("/tmp") and stat.S_IMODE(short.stat().st_mode) == 0o700
        assert short.name.startswith(f"agentgym-vllm-{os.getpid()}-")
    finally:
        os.rmdir(short)
    assert socket_address(tmp_path) == (tmp_path / "engine.sock", None)  # a short one stays in the engine's folder
    with pytest.raises(EngineError, match="set TMPDIR to a shorter folder"):
        socket_address(engine_folder, short_root=tmp_path / "missing")


def test_an_engine_starts_and_closes_under_a_long_tmpdir(tmp_path, monkeypatch, fake_engine) -> None:
    long_tmpdir(tmp_path, monkeypatch)
    engine = fake_engine()
    assert engine.running and engine.generate([[5, 6, 7]], [2], temperature=1.0, stop_token_ids=[])[0]["ids"] == [5, 6]
    folders = [engine._dir, engine._socket_dir]
    assert all(folder.is_dir() for folder in folders)
    engine.close()
    assert not any(folder.exists() for folder in folders)


def test_an_engine_that_fails_to_start_says_how_it_ended_and_quotes_the_error_first(fake_engine) -> None:
    with pytest.raises(EngineError) as error:
        fake_engine("crash")
    message = str(error.value)
    assert message.startswith("the vLLM engine exited with code 1 while starting")
    # the traceback is older than the last 30 lines, yet quoted, and before them
    assert message.index("RuntimeError: the model's weights do not fit") < message.index("unrelated vLLM log line 39")
    assert "None" not in message


def test_an_engine_killed_while_starting_is_named_as_such(fake_engine) -> None:
    with pytest.raises(EngineError, match=r"killed by signal 9 \(SIGKILL: out of memory\?"):
        fake_engine("oom")


def test_an_engine_killed_mid_run_says_so_within_moments(fake_engine) -> None:
    import signal
    import time

    engine = fake_engine()
    os.kill(engine.pid, signal.SIGKILL)
    started = time.monotonic()
    with pytest.raises(EngineError) as error:
        engine.generate([[1, 2, 3]], [2], temperature=1.0, stop_token_ids=[])
    assert time.monotonic() - started < 1.5
    assert str(error.value).startswith("the vLLM engine stopped answering (killed by signal 9 (SIGKILL: out of memory?")


def test_exit_status_waits_for_the_process_to_be_reaped() -> None:
    import subprocess

    from agentgym_trl.vllm_engine import exit_status

    class Reaped:
        pid = 1234

        def __init__(self, code: int | None):
            self.code = code

        def poll(self):
            return None  # not reaped yet: what made the old message read "exit code None"

        def wait(self, timeout=None):
            if self.code is None:
                raise subprocess.TimeoutExpired("engine", timeout)
            return self.code

    assert exit_status(Reaped(1)) == "exited with code 1"
    assert exit_status(Reaped(-9)).startswith("killed by signal 9 (SIGKILL: out of memory?")
    assert exit_status(Reaped(-11)) == "killed by signal 11 (SIGSEGV)"
    assert exit_status(Reaped(None), wait_s=0.01) == "its process 1234 still runs"
