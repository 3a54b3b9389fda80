"""The vLLM engine's process handling without vLLM (issue 47): ``tests/fake_vllm_worker.py`` speaks the worker's
protocol, so a long $TMPDIR, a crashed or killed engine, weight files and shutdown are tested in seconds."""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from pathlib import Path

import pytest

import agentgym_trl.engines.vllm_process as vllm_engine
from agentgym_trl.engines.vllm_process import SOCKET_PATH_MAX, EngineError, EngineOptions, VLLMEngine, socket_address

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


def test_a_starting_engine_says_so_until_it_is_ready(fake_engine, monkeypatch, capfd) -> None:
    """No silence while vLLM starts (issue 49): a line when it starts, one every STARTING_NOTE_S, one when ready."""
    monkeypatch.setattr(vllm_engine, "STARTING_NOTE_S", 0.2)
    monkeypatch.setenv("FAKE_VLLM_START_DELAY", "0.7")
    engine = fake_engine()
    err = capfd.readouterr().err
    assert f"starting the vLLM engine process for {engine.model}" in err and str(engine._log_path) in err
    assert "still starting the vLLM engine" in err and "the vLLM engine is ready" in err.splitlines()[-1]


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


def test_agentgym_eval_names_the_signal_of_a_killed_engine_and_quotes_no_chatter(tmp_path, monkeypatch,
                                                                                 capsys) -> None:
    """Issue 61 item 19: the engine killed mid-eval (the OOM killer, kill -9): `agentgym eval` names the signal,
    never "exit code None", and quotes a few log lines said to be no cause, not 30 lines of vLLM's chatter."""
    from tiny_model import save_tiny

    from agentgym_envs.cli import main
    from agentgym_trl.engines.vllm_process import close_shared_engine

    monkeypatch.setattr(vllm_engine, "WORKER_SCRIPT", FAKE_WORKER)
    monkeypatch.setenv(vllm_engine.ENV_VARIABLE, sys.executable)
    monkeypatch.setenv("FAKE_VLLM_MODE", "serve")
    monkeypatch.setenv("FAKE_VLLM_KILL_AT", "2")  # the second turn's request
    model = save_tiny(tmp_path / "tiny")
    try:
        code = main(["eval", "--model", str(model), "--engine", "vllm-process", "--env", "AgentGym/Maze-v0",
                     "--limit", "2", "--out", str(tmp_path / "out"), "--no-progress"])
    finally:
        close_shared_engine()
    err = capsys.readouterr().err
    assert code != 0
    assert "killed by signal 9 (SIGKILL: out of memory? killed, e.g. by the kernel's out-of-memory killer" in err
    assert "None" not in err and "no error line (a process killed by a signal writes none)" in err
    quoted = [line for line in err.splitlines() if "unrelated vLLM log line" in line]
    assert len(quoted) == vllm_engine.KILLED_TAIL and "unrelated vLLM log line 39" in quoted[-1]


def test_exit_status_waits_for_the_process_to_be_reaped() -> None:
    import subprocess

    from agentgym_trl.engines.vllm_process import exit_status

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


def dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    import subprocess

    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_engine_folders_of_dead_processes_are_removed_and_others_kept(tmp_path, monkeypatch, fake_engine) -> None:
    root = tmp_path / "tmp"
    root.mkdir()
    dead = root / f"agentgym-vllm-{dead_pid()}-k2j4h1x0"
    (dead / "weights").mkdir(parents=True)
    (dead / "engine.log").write_text("log")
    live = root / f"agentgym-vllm-{os.getpid()}-a8s7d6f5"
    old_style = root / "agentgym-vllm-q1w2e3r4"  # named before folders carried a pid: whose, nobody can tell
    for folder in (live, old_style):
        folder.mkdir()
    not_a_folder = root / f"agentgym-vllm-{dead_pid()}-file"
    not_a_folder.write_text("")
    assert vllm_engine.remove_stale_engine_dirs([root]) == [dead]
    assert live.is_dir() and old_style.is_dir() and not_a_folder.is_file()

    again = root / f"agentgym-vllm-{dead_pid()}-z9x8c7v6"
    again.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    fake_engine()  # an engine start cleans up after killed trainers
    assert not again.exists() and live.is_dir()


def test_the_worker_deletes_the_weight_file_once_read(tmp_path) -> None:
    import torch
    from safetensors.torch import save_file

    from agentgym_trl.engines import vllm_worker

    class Runner:
        def reload_weights(self, weights_iterator):
            self.names = [name for name, _ in weights_iterator]

    class LLM:
        runner = Runner()

        def __init__(self):
            self.llm_engine = type("E", (), {"model_executor": type("X", (), {"driver_worker": type(
                "D", (), {"worker": type("W", (), {"model_runner": self.runner})})})})

        def reset_prefix_cache(self):
            pass

    path = tmp_path / "agentgym-weights-1-x.safetensors"
    save_file({"w": torch.zeros(4)}, str(path))
    llm = LLM()
    assert vllm_worker.load_weights(llm, {"path": str(path)})["tensors"] == 1
    assert llm.runner.names == ["w"] and not path.exists()


def test_sigterm_during_a_weight_sync_exits_cleanly_and_leaves_nothing(tmp_path) -> None:
    """SIGTERM (kill, a scheduler's time limit) while the engine reloads: exit code 143, and no weight file, engine
    folder or engine process is left (Python's default would end the trainer on the spot)."""
    import json
    import signal
    import subprocess
    import time

    from agentgym_trl.engines.lifecycle import SHM, process_alive

    script = tmp_path / "train.py"
    script.write_text(
        "import json, sys\nfrom pathlib import Path\nimport torch\nimport agentgym_trl.engines.vllm_process as ve\n"
        "ve.WORKER_SCRIPT = Path(sys.argv[1])\n"
        "engine = ve.VLLMEngine(sys.argv[2], ve.EngineOptions(python=sys.executable, dtype='float32'))\n"
        "print(json.dumps({'dir': str(engine._dir), 'worker': engine.pid}), flush=True)\n"
        "engine.load_weights({'w': torch.zeros(1 << 16)})\n"
        "print('synced', flush=True)\n")
    (tmp_path / "model").mkdir()
    (tmp_path / "tmp").mkdir()
    source = str(Path(vllm_engine.__file__).parents[1])  # this checkout, whatever the installed copy is
    env = {**os.environ, "FAKE_VLLM_MODE": "serve", "FAKE_VLLM_LOAD_DELAY": "2", "TMPDIR": str(tmp_path / "tmp"),
           "PYTHONPATH": os.pathsep.join([source, os.environ.get("PYTHONPATH", "")])}
    trainer = subprocess.Popen([sys.executable, str(script), str(FAKE_WORKER), str(tmp_path / "model")], env=env,
                               stdout=subprocess.PIPE, text=True)
    try:
        started = json.loads(trainer.stdout.readline())
        folder = Path(started["dir"])
        pattern = f"agentgym-weights-{trainer.pid}-*"
        deadline = time.monotonic() + 30
        while not (list(SHM.glob(pattern)) + list(folder.glob(pattern))) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert list(SHM.glob(pattern)) + list(folder.glob(pattern)), "no weight file was written"
        trainer.send_signal(signal.SIGTERM)
        assert trainer.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        trainer.kill()
        trainer.wait()
    assert "synced" not in trainer.stdout.read()
    assert not list(SHM.glob(pattern)) and not folder.exists()
    deadline = time.monotonic() + 10
    while process_alive(started["worker"]) and not zombie(started["worker"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not process_alive(started["worker"]) or zombie(started["worker"])


def zombie(pid: int) -> bool:
    """Whether ``pid`` has ended but is not reaped yet (an orphan whose new parent has not waited for it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def test_sigterm_goes_to_a_handler_set_before() -> None:
    import signal
    import time

    from agentgym_trl.engines.lifecycle import install_sigterm_exit

    calls = []

    def before(signum, frame):
        calls.append(signum)
        raise KeyboardInterrupt  # what agentgym eval's handler does

    old = signal.signal(signal.SIGTERM, before)
    try:
        assert install_sigterm_exit()
        assert signal.getsignal(signal.SIGTERM) is not before
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(2)
        assert calls == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, old)
