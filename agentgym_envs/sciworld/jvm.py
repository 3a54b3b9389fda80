"""The ScienceWorld simulator in a JVM we own: lazy start, bounded memory, a timeout on every call.

We drive the simulator's ``PythonInterface`` over py4j ourselves instead of using
``scienceworld.ScienceWorldEnv``, whose ``step`` also asks Java for every valid action/object
combination (most of its cost) and for look/inventory/task texts on every turn. Here a step is one
trip to a worker thread that makes three small calls (step, score, completed).

Design decisions, and why:

* **One live episode per JVM.** The simulator has process-wide state: a ``scala.util.Random``
  reseeded at every load and drawn by wandering animals and bees, and an object id counter, reset
  at every load, on which object equality rests. Two episodes interleaved in one JVM change each
  other's worlds, so each env owns its JVM; the JVM is reused across that env's resets (a load
  takes ~50 ms, a JVM start ~1.5 s).
* **``-XX:hashCode=2``.** The simulator keeps objects in hash sets keyed by identity hash codes,
  which HotSpot draws from a per-thread random stream: room listings and the gold agent's choices
  then depended on everything the JVM had done before. A constant identity hash makes every
  episode a pure function of (task, variation, actions), in any JVM, and makes gold paths
  reproducible.
* **Bounded memory.** Fixed heap (``-Xms = -Xmx``, pre-touched so resident memory is flat from
  the start), capped metaspace and code cache, and ``ExitOnOutOfMemoryError`` so an exhausted heap
  ends as a crash we restart from, not a thrashing JVM.
* **Timeouts.** Every call runs on a worker thread and is awaited with a deadline; a call that
  misses it gets the JVM killed (the only way to stop it), which also unblocks the worker.
  ``--die-on-broken-pipe`` ends the JVM when this Python process dies, so none is orphaned.
"""

from __future__ import annotations

import atexit
import collections
import concurrent.futures as futures
import logging
import os
import select
import shutil
import subprocess
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

from agentgym_envs.core import require

T = TypeVar("T")


class SimulatorCrashed(RuntimeError):
    """The JVM died, missed a deadline or could not start: the episode it held is lost."""


class SimulatorRejected(RuntimeError):
    """The simulator raised a Java exception for one call; the JVM itself is fine."""


class JavaNotFound(SimulatorCrashed):
    """No ``java`` executable: ScienceWorld needs a Java 11+ runtime."""


def _env_number(name: str, default: float) -> float:
    value = os.environ.get(name)
    return float(value) if value else default


@dataclass(frozen=True)
class JvmConfig:
    """JVM size and deadlines; ``from_environment`` reads the ``AGENTGYM_SCIWORLD_*`` variables."""

    heap_mb: int = 256
    start_timeout: float = 60.0
    load_timeout: float = 60.0
    step_timeout: float = 20.0
    java: str | None = None

    @classmethod
    def from_environment(cls, **overrides: Any) -> "JvmConfig":
        """The defaults, then ``$AGENTGYM_SCIWORLD_*`` (heap, timeouts), then the ``overrides`` that are not None."""
        values: dict[str, Any] = {
            "heap_mb": int(_env_number("AGENTGYM_SCIWORLD_HEAP_MB", cls.heap_mb)),
            "start_timeout": _env_number("AGENTGYM_SCIWORLD_START_TIMEOUT", cls.start_timeout),
            "load_timeout": _env_number("AGENTGYM_SCIWORLD_LOAD_TIMEOUT", cls.load_timeout),
            "step_timeout": _env_number("AGENTGYM_SCIWORLD_STEP_TIMEOUT", cls.step_timeout),
        }
        values.update({key: value for key, value in overrides.items() if value is not None})
        return cls(**values)

    def java_executable(self) -> str:
        """The ``java`` to run: the configured one, else ``$JAVA_HOME``'s, else the one on PATH."""
        candidates = [self.java]
        if os.environ.get("JAVA_HOME"):
            candidates.append(os.path.join(os.environ["JAVA_HOME"], "bin", "java"))
        candidates.append(shutil.which("java"))
        for candidate in candidates:
            if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate
        raise JavaNotFound(
            "ScienceWorld runs on Java, and no `java` executable was found (PATH, JAVA_HOME). "
            "Install a Java 11+ runtime, e.g. `apt-get install -y default-jre-headless`."
        )

    def command(self, classpath: str) -> list[str]:
        """The command line that starts ScienceWorld's JVM with this heap and classpath."""
        heap = f"{int(self.heap_mb)}m"
        return [
            self.java_executable(),
            f"-Xms{heap}",
            f"-Xmx{heap}",
            "-XX:+AlwaysPreTouch",
            "-XX:+UseSerialGC",
            "-XX:MaxMetaspaceSize=128m",
            "-XX:ReservedCodeCacheSize=64m",
            "-XX:+ExitOnOutOfMemoryError",
            "-XX:+UnlockExperimentalVMOptions",
            "-XX:hashCode=2",
            "-Djava.awt.headless=true",
            "-cp",
            classpath,
            "py4j.GatewayServer",
            "--die-on-broken-pipe",
            "0",
        ]


@dataclass(frozen=True)
class StepResult:
    """What one simulator step returns: its text, the raw score (0-1, negative once failed) and completion."""

    observation: str
    score: float
    completed: bool


_LIVE: "weakref.WeakSet[ScienceWorldJvm]" = weakref.WeakSet()
_WORKER_PREFIX = "sciworld-jvm"


class _OwnCallsFilter(logging.Filter):
    """Drop py4j's tracebacks for calls made by our worker threads: a dead JVM is reported by us, once."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.threadName.startswith(_WORKER_PREFIX)


_PY4J_LOGGER = logging.getLogger("py4j.java_gateway")
_PY4J_LOGGER.addFilter(_OwnCallsFilter())


class _Py4JRootLogging:
    """Stands in for the ``logging`` module inside ``py4j.java_gateway``.

    py4j reports a connection lost mid-call with module-level ``logging.exception(...)``: on the
    root logger, which also runs ``logging.basicConfig()`` in a program that configured no logging,
    changing how the whole process logs. This routes those calls to py4j's own (quiet) logger.
    """

    def __getattr__(self, name: str) -> Any:
        return getattr(logging, name)

    def debug(self, message: str, *args: Any, **kwargs: Any) -> None:
        _PY4J_LOGGER.debug(message, *args, **kwargs)

    def info(self, message: str, *args: Any, **kwargs: Any) -> None:
        _PY4J_LOGGER.info(message, *args, **kwargs)

    def warning(self, message: str, *args: Any, **kwargs: Any) -> None:
        _PY4J_LOGGER.warning(message, *args, **kwargs)

    def error(self, message: str, *args: Any, **kwargs: Any) -> None:
        _PY4J_LOGGER.error(message, *args, **kwargs)

    def exception(self, message: str, *args: Any, exc_info: Any = True, **kwargs: Any) -> None:
        _PY4J_LOGGER.error(message, *args, exc_info=exc_info, **kwargs)


def _quiet_py4j_root_logging(java_gateway: Any) -> None:
    if not isinstance(getattr(java_gateway, "logging", None), _Py4JRootLogging):
        java_gateway.logging = _Py4JRootLogging()


class ScienceWorldJvm:
    """One simulator JVM; every method is thread-safe and bounded by a deadline.

    ``load`` starts the JVM if it is not running (lazily, and again after a crash); every other
    call raises ``SimulatorCrashed`` when the JVM is gone, so the caller learns that its episode
    was lost instead of silently getting a fresh world.
    """

    def __init__(self, config: JvmConfig | None = None):
        self.config = config or JvmConfig.from_environment()
        self._lock = threading.RLock()
        self._process: subprocess.Popen | None = None
        self._gateway: Any = None
        self._interface: Any = None
        self._executor: futures.ThreadPoolExecutor | None = None
        self._output_tail: collections.deque[str] = collections.deque(maxlen=30)
        self._finalizer: weakref.finalize | None = None
        self.starts = 0
        self.last_failure: str | None = None
        _LIVE.add(self)

    # ---- lifecycle -------------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        """The JVM's process id, or None when none is running."""
        process = self._process
        return None if process is None else process.pid

    @property
    def running(self) -> bool:
        """Whether the JVM is alive and connected."""
        process = self._process
        return process is not None and process.poll() is None and self._interface is not None

    def start(self) -> None:
        """Launch the JVM unless it is running; raises ``SimulatorCrashed`` if it cannot start in time."""
        with self._lock:
            if self.running:
                return
            self._teardown(graceful=False)
            scienceworld_constants = require("scienceworld.constants", extra="sciworld")
            java_gateway = require("py4j.java_gateway", extra="sciworld")
            _quiet_py4j_root_logging(java_gateway)
            py4j_jar = ""
            try:
                py4j_jar = java_gateway.find_jar_path()
            except Exception:  # the scienceworld jar bundles py4j's server classes as a fallback
                pass
            classpath = os.pathsep.join(path for path in (py4j_jar, scienceworld_constants.JAR_PATH) if path)
            deadline = time.monotonic() + self.config.start_timeout
            self._output_tail.clear()
            try:
                process = subprocess.Popen(
                    self.config.command(classpath),
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    cwd=scienceworld_constants.BASEPATH,
                    start_new_session=True,  # a Ctrl-C meant for Python must not kill the JVM behind our back
                )
            except OSError as error:
                self.last_failure = f"the JVM could not be launched: {error}"
                raise SimulatorCrashed(self.last_failure) from error
            self._process = process
            self._finalizer = weakref.finalize(self, _kill_process, process)
            self.starts += 1
            try:
                port = self._read_port(process, deadline)
            except SimulatorCrashed:
                self._teardown(graceful=False)
                raise
            for stream in (process.stdout, process.stderr):
                threading.Thread(target=_drain, args=(stream, self._output_tail), daemon=True).start()
            self._gateway = java_gateway.JavaGateway(
                gateway_parameters=java_gateway.GatewayParameters(port=port, auto_convert=False, eager_load=False),
                java_process=process,
            )
            self._executor = futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=_WORKER_PREFIX)
            gateway = self._gateway
            future = self._executor.submit(lambda: gateway.jvm.scienceworld.runtime.pythonapi.PythonInterface())
            try:
                self._interface = future.result(timeout=max(1.0, deadline - time.monotonic()))
                self.last_failure = None
            except futures.TimeoutError:
                self._fail(f"the JVM did not answer within {self.config.start_timeout:g} s of starting")
                raise SimulatorCrashed(self.last_failure) from None
            except Exception as error:
                self._fail(f"the JVM failed to start: {error}")
                raise SimulatorCrashed(self.last_failure) from error

    def kill(self) -> None:
        """Kill the JVM at once (as a crash would); the next ``load`` starts a new one."""
        process = self._process
        if process is not None and process.poll() is None:
            process.kill()
        with self._lock:
            self._teardown(graceful=False)

    def close(self) -> None:
        """Stop the JVM and free its memory; safe to call twice. A later ``load`` starts a new one."""
        with self._lock:
            if self._process is not None:
                self.last_failure = "the simulator was closed"
            self._teardown(graceful=True)

    # ---- simulator calls -------------------------------------------------------------------
    def load(self, task: str, variation: int, simplifications: str = "", gold: bool = False) -> None:
        """Load (task, variation) into a fresh world; ``gold=True`` also has the gold agent plan its path."""
        self.start()

        def call(interface: Any) -> str:
            return interface.load(task, int(variation), simplifications, bool(gold))

        self._run(f"loading {task} variation {variation}", self.config.load_timeout, call)

    def start_episode(self, task: str, variation: int, free_look: bool = True) -> tuple[str, str]:
        """Load (task, variation) and return (task description, look around) in one trip to the worker; the look
        is free (``freeActionLook``) or, with ``free_look=False``, a step, as AgentGym's ``/reset`` takes it."""
        self.start()

        def call(interface: Any) -> tuple[str, str]:
            interface.load(task, int(variation), "", False)
            description = str(interface.getTaskDescription())
            look = interface.freeActionLook() if free_look else interface.step("look around")
            return description, str(look)

        return self._run(f"loading {task} variation {variation}", self.config.load_timeout, call)

    def step(self, command: str) -> StepResult:
        """Send one command; the observation, the score and whether the task is complete (bounded by the step
        timeout).
        """
        def call(interface: Any) -> StepResult:
            observation = interface.step(command)
            return StepResult(str(observation), float(interface.getScore()), bool(interface.getCompleted()))

        return self._run("a step", self.config.step_timeout, call)

    def look(self) -> str:
        """'look around' without spending a move."""
        return self._run("look around", self.config.step_timeout, lambda interface: str(interface.freeActionLook()))

    def task_description(self) -> str:
        """The current task's description, as the simulator writes it."""
        return self._run("the task description", self.config.step_timeout, lambda i: str(i.getTaskDescription()))

    def gold_actions(self) -> list[str]:
        """The gold agent's action sequence for the loaded world (after ``load(..., gold=True)``)."""
        return self._run("the gold path", self.config.step_timeout, lambda i: list(map(str, i.getGoldActionSequence())))

    def valid_actions(self) -> list[str]:
        """Every valid action/object combination in the current state (tens of ms: only on demand)."""
        def call(interface: Any) -> list[str]:
            return [str(action) for action in interface.getValidActionObjectCombinations()]

        return self._run("the valid actions", self.config.step_timeout, call)

    def moves(self) -> int:
        """How many moves the current episode has taken."""
        return self._run("the move count", self.config.step_timeout, lambda interface: int(interface.getNumMoves()))

    def variations(self, task: str) -> dict[str, list[int]]:
        """ScienceWorld's own train/dev/test variation indices of a task type."""
        self.load(task, 0)

        def call(interface: Any) -> dict[str, list[int]]:
            return {
                "train": [int(v) for v in interface.getVariationsTrain()],
                "dev": [int(v) for v in interface.getVariationsDev()],
                "test": [int(v) for v in interface.getVariationsTest()],
            }

        return self._run(f"the variations of {task}", self.config.step_timeout, call)

    def unguarded_interface(self) -> Any:
        """The py4j proxy of the simulator's ``PythonInterface`` with no deadline or crash handling.

        Only for benchmarks that time the bare simulator next to this wrapper, in the same JVM.
        """
        self.start()
        return self._interface

    # ---- internals -------------------------------------------------------------------------
    def _run(self, what: str, timeout: float, call: Callable[[Any], T]) -> T:
        java_gateway = require("py4j.java_gateway", extra="sciworld")
        protocol = require("py4j.protocol", extra="sciworld")
        with self._lock:
            if not self.running:
                if self._process is not None:
                    self._fail(self._death_note())
                raise SimulatorCrashed(f"{what} failed: {self.last_failure or 'the simulator is not running'}")
            assert self._executor is not None
            future = self._executor.submit(call, self._interface)
            try:
                return future.result(timeout=timeout)
            except futures.TimeoutError:
                self._fail(f"no answer within {timeout:g} s, so the JVM was stopped")
                raise SimulatorCrashed(f"{what} failed: {self.last_failure}") from None
            except protocol.Py4JJavaError as error:
                if self._process is not None and self._process.poll() is None:
                    raise SimulatorRejected(f"{what}: {error.java_exception}") from None
                self._fail(self._death_note())
                raise SimulatorCrashed(f"{what} failed: {self.last_failure}") from error
            except (java_gateway.Py4JError, OSError, EOFError) as error:
                self._fail(self._death_note())
                raise SimulatorCrashed(f"{what} failed: {self.last_failure}") from error

    def _death_note(self) -> str:
        """Why the JVM stopped answering: its exit code and the last error line it printed."""
        process = self._process
        code = None if process is None else process.poll()
        if code is None and process is not None:
            try:
                code = process.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                pass
        state = "the JVM is unresponsive" if code is None else f"the JVM exited with code {code}"
        tail = [line for line in self._output_tail if "Error" in line or "Exception" in line or "Killed" in line]
        return state + (f" ({tail[-1].strip()[:200]})" if tail else "")

    def _fail(self, reason: str) -> None:
        self.last_failure = reason
        self._teardown(graceful=False)

    def _teardown(self, graceful: bool) -> None:
        process, self._process = self._process, None
        gateway, self._gateway = self._gateway, None
        executor, self._executor = self._executor, None
        self._interface = None
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if process is not None:
            _stop_process(process, graceful)
        if gateway is not None:
            client = getattr(gateway, "_gateway_client", None)
            if client is not None:
                client.is_connected = False  # proxies collected later must not try to reach a dead JVM
            try:
                gateway.close(keep_callback_server=False, close_callback_server_connections=False)
            except Exception:
                pass
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)

    def _read_port(self, process: subprocess.Popen, deadline: float) -> int:
        """py4j's gateway prints its port on the first stdout line; wait for it with a deadline."""
        assert process.stdout is not None
        fd = process.stdout.fileno()
        buffer = b""
        while b"\n" not in buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SimulatorCrashed(f"the JVM did not start within {self.config.start_timeout:g} s")
            ready, _, _ = select.select([fd], [], [], min(remaining, 0.5))
            if ready:
                chunk = os.read(fd, 4096)
                if not chunk:
                    error = b""
                    if process.stderr is not None:
                        try:
                            process.wait(timeout=2)
                            error = process.stderr.read() or b""
                        except Exception:
                            pass
                    detail = error.decode("utf-8", "replace").strip().splitlines()
                    raise SimulatorCrashed("the JVM exited while starting" + (f": {detail[0][:300]}" if detail else ""))
                buffer += chunk
        line, _, rest = buffer.partition(b"\n")
        if rest:
            self._output_tail.append(rest.decode("utf-8", "replace"))
        try:
            return int(line.strip())
        except ValueError:
            raise SimulatorCrashed(f"the JVM printed {line[:200]!r} instead of its port") from None


def _drain(stream: Any, tail: collections.deque) -> None:
    """Read a JVM pipe until it closes (a full pipe would block the JVM), keeping the last lines."""
    fd = stream.fileno()
    pending = b""
    try:
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines[-5:]:
                tail.append(line.decode("utf-8", "replace"))
            pending = pending[-4096:]
    except OSError:
        pass
    finally:
        try:
            stream.close()
        except OSError:
            pass


def _stop_process(process: subprocess.Popen, graceful: bool) -> None:
    if process.poll() is None:
        if graceful:
            try:
                if process.stdin is not None:
                    process.stdin.close()  # --die-on-broken-pipe: the JVM exits on its own
                process.wait(timeout=2)
            except Exception:
                pass
        if process.poll() is None:
            process.kill()
    _reap(process)
    if process.stdin is not None:
        try:
            process.stdin.close()
        except OSError:
            pass


def _kill_process(process: subprocess.Popen) -> None:
    """Finalizer: a JVM whose owner was garbage-collected or a process at exit."""
    if process.poll() is None:
        process.kill()
        _reap(process)


def _reap(process: subprocess.Popen) -> None:
    """Wait (up to 5 s) for a stopped or killed JVM to exit, so it leaves no zombie behind."""
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


@atexit.register
def _close_all() -> None:
    for jvm in list(_LIVE):
        try:
            jvm.kill()
        except Exception:
            pass
