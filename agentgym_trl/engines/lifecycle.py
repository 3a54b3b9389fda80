"""What outlives an engine process, and how a process ends with one running.

The engine process writes files other processes must not keep: its folder (log, socket, weights on disk) and the
weight file in ``/dev/shm`` it reloads after each optimizer step. Each name holds the writer's pid; an engine that
starts removes those whose writer is gone (``remove_stale_weights``, ``remove_stale_engine_dirs``). A pid alone
cannot say so for ``/dev/shm``, which containers in other PID namespaces may share (``docker --ipc=host``): a weight
file's writer holds a lock on it from birth to removal (``lock_file``), and a locked file is live. And a SIGTERM
(kill, a scheduler's time limit) must end the process through its ``finally`` blocks and ``atexit`` so the engine
is stopped and its files go: ``install_sigterm_exit``, installed when an engine process starts, not before.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

SHM = Path("/dev/shm")
WEIGHTS_PREFIX = "agentgym-weights-"  # + the writing process's pid + "-" + random + ".safetensors"
#: a weight file before it is locked and named (``"." + WEIGHTS_PREFIX + ...``): it exists for microseconds
PARTIAL_PREFIX = "." + WEIGHTS_PREFIX
#: a partial file younger than this may be its writer's, between its creation and its lock: never removed
PARTIAL_AGE_S = 60.0
ENGINE_DIR_PREFIX = "agentgym-vllm-"  # + the owning process's pid + "-" + random: log, socket, weights on disk
SHORT_ROOT = Path("/tmp")  # where the socket goes when $TMPDIR makes its path too long


def remove_stale_weights(shm: str | os.PathLike = SHM) -> list[Path]:
    """Delete the weight files in ``shm`` whose writer is gone (a trainer killed mid-sync leaves its file, and
    /dev/shm is memory). A file is stale when nobody holds its lock and its writer's pid is dead here: a writer in
    another PID namespace (``docker --ipc=host`` shares /dev/shm, not pids) holds the lock, so its file stays however
    its pid looks. Files without a pid in their name stay; a partial file (``PARTIAL_PREFIX``: created, not yet
    locked) stays until it is ``PARTIAL_AGE_S`` old.

    Args:
        shm: the shared-memory folder.

    Returns:
        The files removed.
    """
    removed = []
    folder = Path(shm)
    candidates = [(path, len(WEIGHTS_PREFIX)) for path in folder.glob(f"{WEIGHTS_PREFIX}*")]
    candidates += [(path, len(PARTIAL_PREFIX)) for path in folder.glob(f"{PARTIAL_PREFIX}*")]
    for path, start in candidates:
        pid_text = path.name[start:].split("-", 1)[0]
        if not pid_text.isdigit() or process_alive(int(pid_text)):
            continue
        try:
            if start == len(PARTIAL_PREFIX) and time.time() - path.lstat().st_mtime < PARTIAL_AGE_S:
                continue
            descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            continue
        try:
            if not try_lock(descriptor):  # its writer is alive, wherever its pid lives
                continue
            path.unlink()  # under the lock: no writer can be taking it now
            removed.append(path)
        except OSError:
            continue
        finally:
            os.close(descriptor)
    if removed:
        logger.info("removed %d stale weight file(s) from %s", len(removed), shm)
    return removed


def lock_file(descriptor: int) -> None:
    """Hold an exclusive lock on an open file (``flock``: it belongs to the open file, so it is seen across PID
    namespaces and is released when the writer's last descriptor closes, however the writer ends)."""
    import fcntl

    fcntl.flock(descriptor, fcntl.LOCK_EX)


def try_lock(descriptor: int) -> bool:
    """Take the lock of ``lock_file`` without waiting; False when another open file holds it (a live writer)."""
    import fcntl

    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def remove_stale_engine_dirs(roots: Sequence[str | os.PathLike] | None = None) -> list[Path]:
    """Delete the engine folders (``agentgym-vllm-<pid>-*``: log, socket, weights on disk) whose owner is dead, in
    ``roots`` (default $TMPDIR and ``SHORT_ROOT``): a trainer killed with ``kill -9`` cannot remove its own. Folders
    of live processes, of other users, or without a pid in their name stay.

    Args:
        roots: the folders to look in.

    Returns:
        The folders removed.
    """
    import stat

    removed = []
    folders = {Path(root) for root in (roots if roots is not None else (tempfile.gettempdir(), SHORT_ROOT))}
    for root in folders:
        for path in root.glob(f"{ENGINE_DIR_PREFIX}*-*"):
            pid_text = path.name[len(ENGINE_DIR_PREFIX):].split("-", 1)[0]
            if not pid_text.isdigit() or process_alive(int(pid_text)):
                continue
            try:
                info = path.lstat()
                if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
                    continue
                shutil.rmtree(path)
                removed.append(path)
            except OSError:
                continue
    if removed:
        logger.info("removed %d engine folder(s) of dead processes: %s", len(removed), ", ".join(map(str, removed)))
    return removed


def install_sigterm_exit() -> bool:
    """Make SIGTERM end this process through ``SystemExit`` (exit code 143), so ``finally`` blocks and ``atexit``
    run: the engine is stopped, its folders and a weight file being synced are removed. Python's default ends the
    process on the spot and leaves them (the weight file is model-sized and in memory). A handler that was there
    before is kept and called instead (``agentgym eval`` turns SIGTERM into Ctrl-C); an ignored SIGTERM stays
    ignored; a second SIGTERM ends the process at once. Only the main thread can install one.

    Returns:
        Whether SIGTERM now goes through this handler.
    """
    if threading.current_thread() is not threading.main_thread():
        return False
    previous = signal.getsignal(signal.SIGTERM)
    if getattr(previous, "agentgym_sigterm", False):
        return True
    if previous in (signal.SIG_IGN, None):  # ignored, or set outside Python: not ours to change
        return False

    received = []

    def exit_cleanly(signum: int, frame: Any) -> None:
        if callable(previous):  # the handler before ours decides (it may raise, or stop the job its own way)
            previous(signum, frame)
            return
        if received:  # a second SIGTERM: the first one's exit was caught (a test runner, a REPL) or hangs; end now
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        received.append(signum)
        raise SystemExit(128 + signum)

    exit_cleanly.agentgym_sigterm = True  # type: ignore[attr-defined]
    signal.signal(signal.SIGTERM, exit_cleanly)
    return True


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one of another user counts as alive), so only orphaned files go."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
