"""The one episode loop: many envs, one ``Agent``, one rule for when an episode ends.

``play`` resets a batch of envs, then plays turns: the agent answers every still-running
episode at once (a model generates one batch, an endpoint sends its requests concurrently, a
scripted agent plans each), the envs step concurrently in a thread pool (a slow JVM, browser or
remote server does not serialise the batch), and each answer is recorded on the episode's
``Trajectory``. The trainer's rollout, ``agentgym eval``, ``agentgym collect`` and ``agentgym play``
all run this loop; only their agents differ.

One budget rule: the turn budget is the env's own ``TimeLimit`` (``EnvPool`` makes each env with
``max_episode_steps`` = the episode's budget), so nothing counts turns twice. An oracle prefix
(``EpisodeStart.prefix``, ``core/oracle_prefix.py``) is replayed right after the reset as history; the env's step
budget is then the agent's turns plus the prefix. An episode ends when

* the env terminates it (``terminated``), or truncates it (``max_turns`` when the budget is used up,
  else ``env_truncated``);
* the agent says so in its reply (``Reply.stop``: a token limit, an over-long context);
* the env raises (``env_error``: the env is dropped, the episode keeps what it earned).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, ContextManager, Protocol, runtime_checkable

import gymnasium as gym

from agentgym_envs.core.episode import ENV_ERROR, ENV_TRUNCATED, MAX_TURNS, TERMINATED, Trajectory
from agentgym_envs.core.oracle_prefix import PrefixStep, clamp_prefixes, env_step_budget, replay_prefix

logger = logging.getLogger(__name__)


class EpisodeError(RuntimeError):
    """An episode could not be played (an env that cannot reset, an agent that failed).

    ``finished`` holds the batch's trajectories that had ended before, so no finished work is lost.
    """

    def __init__(self, message: str, finished: Sequence[Trajectory] = ()):
        super().__init__(message)
        self.finished = list(finished)


@dataclass(frozen=True)
class EpisodeStart:
    """Which episode to play: env id, item, reset seed (default: the item id), sample index and turn budget.

    ``prefix``: the oracle's first actions replayed after the reset, as history the agent sees but did not play
    (a reverse curriculum; ``core/oracle_prefix.py``): they are not part of ``max_turns``.
    """

    env_id: str
    item_id: int | None  # None: the env's own choice (a plain reset)
    max_turns: int
    seed: int | None = None
    sample: int = 0
    prefix: int = 0

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {self.max_turns}")
        if self.prefix < 0:
            raise ValueError(f"prefix must be at least 0, got {self.prefix}")

    @property
    def env_steps(self) -> int:
        """The env's step budget (its ``TimeLimit``): the agent's turns plus the replayed oracle prefix."""
        return env_step_budget(self.max_turns, self.prefix)

    @property
    def key(self) -> tuple[str, int | None, int, int]:
        """(env id, item, sample, turn budget): what names an episode in a run's results and resumes."""
        return (self.env_id, self.item_id, self.sample, self.max_turns)

    @property
    def reset_seed(self) -> int | None:
        """The seed ``reset`` gets: ``seed`` when given, else the item id (the same item plays the same)."""
        return self.item_id if self.seed is None else self.seed


@dataclass
class Episode:
    """A running episode as an agent sees it: its env, what it has played, the last observation and info."""

    env: gym.Env
    start: EpisodeStart
    trajectory: Trajectory
    observation: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    prefix_steps: list[PrefixStep] = field(default_factory=list)  # the replayed oracle turns (start.prefix > 0)


@dataclass
class Reply:
    """An agent's answer for one episode.

    ``text`` is the response sent to the env (``None``: the agent has none). ``stop`` ends the
    episode here instead of stepping the env (e.g. ``turn_tokens``, ``context``); the text, if any,
    is still recorded as the last action. ``tokens`` counts the model tokens of the turn when known.
    ``cut``: a token limit cut the text (an endpoint's ``finish_reason`` "length"); the turn is recorded
    as cut (``Trajectory.cut``) and still played, unless ``stop`` ends the episode.
    ``error``: the agent could not answer this episode (an endpoint that failed for one request);
    the episode is abandoned unrecorded while the others play on, then the batch raises ``EpisodeError``.
    """

    text: str | None
    stop: str | None = None
    tokens: int | None = None
    error: BaseException | None = None
    cut: bool = False


@runtime_checkable
class Agent(Protocol):
    """Answers a batch of running episodes. ``BaseAgent`` gives the defaults."""

    name: str
    #: how many episodes it plays at once (an evaluation's batch)
    batch_size: int

    def describe(self) -> dict[str, Any]:
        """What the agent is, for a run's records (its kind, and e.g. the model and sampling settings)."""

    def session(self) -> ContextManager[Any]:
        """A context held around a whole batch (a model keeps its weights gathered and its caches ready)."""

    def begin(self, episodes: Sequence[Episode]) -> None:
        """Called once the batch's episodes are reset, before the first ``act``."""

    def more_turns(self, active: int) -> bool:
        """Whether to play another turn while ``active`` episodes of this process run."""

    def act(self, episodes: Sequence[Episode]) -> list[Reply]:
        """One reply per running episode, in order: the turn's responses (or stops) for the whole batch."""

    def close(self) -> None:
        """Release what the agent holds (a model, a client, a process)."""


class BaseAgent:
    """Defaults of the ``Agent`` protocol; a scripted agent only writes ``act_one`` (or ``act``)."""

    name = "agent"
    batch_size = 1

    def describe(self) -> dict[str, Any]:
        """The agent's kind (``name``); agents with settings add them."""
        return {"kind": self.name}

    def session(self) -> ContextManager[Any]:
        """Held around a whole batch (a model keeps its weights gathered / caches ready)."""
        return nullcontext()

    def begin(self, episodes: Sequence[Episode]) -> None:
        """The episodes have just been reset (their trajectories hold the opening)."""

    def more_turns(self, active: int) -> bool:
        """Whether to play another turn; a multi-process model keeps turning while any process has episodes."""
        return active > 0

    def act(self, episodes: Sequence[Episode]) -> list[Reply]:
        """``act_one`` for each episode in turn."""
        return [Reply(self.act_one(episode)) for episode in episodes]

    def act_one(self, episode: Episode) -> str:
        """The response to one episode's last observation; scripted agents implement it."""
        raise NotImplementedError

    def close(self) -> None:
        """Nothing to release by default."""
        pass


def close_quietly(env: gym.Env) -> None:
    """Close an env that is being dropped, e.g. after its engine crashed (closing it may raise too)."""
    try:
        env.close()
    except Exception:  # noqa: BLE001 (the env is dropped either way; the error is logged, not raised)
        logger.exception("closing %s raised", env)


class EnvPool:
    """Envs kept per (env id, turn budget) across batches, so a run makes each env a few times, not per episode.

    Each env is made with ``max_episode_steps`` = its budget: the budget is the env's ``TimeLimit``
    and the loop never counts turns itself. ``make_kwargs`` go to every ``gym.make``.

    Args:
        make_env: what makes an env instead of ``gym.make``, called the same way (``make_env(env_id,
            max_episode_steps=n, **make_kwargs)``): e.g. ``agentgym_envs.server.hosts.RemoteEnvFactory``, whose
            envs run on env servers (injected, as the core does not know the server).
        make_kwargs: keyword arguments for every env.
    """

    def __init__(self, *, make_env: Callable[..., gym.Env] | None = None, **make_kwargs: Any):
        self.make_env = make_env if make_env is not None else gym.make
        self.make_kwargs = make_kwargs
        self._free: dict[tuple[str, int], list[gym.Env]] = defaultdict(list)
        self._lock = threading.Lock()
        self.oracle_prefixes: dict[tuple, int] = {}  # clamped oracle prefixes per (id, item, seed, k): clamp_prefixes

    def acquire(self, env_id: str, max_turns: int) -> gym.Env:
        """An idle env of this id and budget, or a new one (``make_env``, by default ``gym.make``, with
        ``max_episode_steps=max_turns``).

        Args:
            env_id: the registered id.
            max_turns: the turn budget, the env's ``TimeLimit``.

        Returns:
            The env; give it back with ``release``.
        """
        with self._lock:
            if self._free[(env_id, max_turns)]:
                return self._free[(env_id, max_turns)].pop()
        return self.make_env(env_id, **{**self.make_kwargs, "max_episode_steps": int(max_turns)})

    def release(self, env_id: str, max_turns: int, env: gym.Env) -> None:
        """Give an env back for later episodes of the same id and budget."""
        with self._lock:
            self._free[(env_id, max_turns)].append(env)

    def drop_other_budgets(self, keep: Collection[int]) -> None:
        """Close the idle envs of every budget not in ``keep`` (a finished curriculum stage, an evaluation's
        previous budget): engines such as JVMs and browsers are heavy."""
        with self._lock:
            keys = [key for key in self._free if key[1] not in keep]
            envs = [env for key in keys for env in self._free.pop(key)]
        for env in envs:
            close_quietly(env)

    def close(self) -> None:
        """Close every idle env (the engines they hold are released)."""
        with self._lock:
            envs = [env for envs in self._free.values() for env in envs]
            self._free.clear()
        for env in envs:
            close_quietly(env)


@dataclass
class PlayStats:
    """Where a batch's time went: the agent (generation), the envs, and everything."""

    total_s: float = 0.0
    agent_s: float = 0.0
    env_s: float = 0.0
    turns_played: int = 0

    @property
    def outside_agent_s(self) -> float:
        """Everything but the agent: env steps, chat templates, tokenisation, Python."""
        return max(self.total_s - self.agent_s, 0.0)


StepCallback = Callable[[Episode, str, float, bool], None]


def _timed(call: Callable[..., Any]) -> Callable[..., tuple[Any, BaseException | None, float]]:
    def run(*args: Any) -> tuple[Any, BaseException | None, float]:
        begin = time.perf_counter()
        try:
            return call(*args), None, time.perf_counter() - begin
        except Exception as error:  # noqa: BLE001 (an env must not take the batch down; its episode ends)
            return None, error, time.perf_counter() - begin

    return run


def _reset(episode: Episode) -> None:
    item_id = episode.start.item_id
    options = None if item_id is None else {"item_id": int(item_id)}
    observation, info = episode.env.reset(seed=episode.start.reset_seed, options=options)
    episode.observation, episode.info = observation, dict(info)
    episode.prefix_steps = replay_prefix(episode.env, episode.start.prefix) if episode.start.prefix else []


def _step(episode: Episode, text: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
    return episode.env.step(text)


def _reset_all(episodes: Sequence[Episode], executor: Executor, agentgym_order: bool, stats: PlayStats) -> None:
    begin = time.perf_counter()
    outcomes = list(executor.map(_timed(_reset), episodes))
    stats.env_s += time.perf_counter() - begin
    for episode, (_, error, _) in zip(episodes, outcomes):
        if error is not None:
            start = episode.start
            raise EpisodeError(f"{start.env_id} could not reset item {start.item_id}: {error}") from error
        episode.trajectory.open(episode.info, episode.observation, agentgym_order)
        for step in episode.prefix_steps:  # the oracle's replayed turns: history, all of it prompt
            episode.trajectory.replay(step.action, step.observation, step.reward)
            episode.observation, episode.info = step.observation, {**episode.info, **step.info}


def _step_all(episodes: Sequence[Episode], actions: Sequence[str], executor: Executor, stats: PlayStats,
              on_step: StepCallback | None, broken: list[Episode]) -> None:
    """Step each episode's env with its action and record the outcome on its trajectory."""
    begin = time.perf_counter()
    outcomes = list(executor.map(_timed(_step), episodes, actions))
    stats.env_s += time.perf_counter() - begin
    for episode, (outcome, error, seconds) in zip(episodes, outcomes, strict=True):
        trajectory = episode.trajectory
        trajectory.timing["env_s"] = trajectory.timing.get("env_s", 0.0) + seconds
        if error is not None:
            logger.warning("%s item %s raised during step; the episode ends: %r", trajectory.env_id,
                           trajectory.item_id, error)
            trajectory.observe(f"[the env raised {error!r}]", 0.0, {"valid_action": False}, last=True)
            trajectory.end(ENV_ERROR)
            broken.append(episode)
            continue
        observation, reward, terminated, truncated, info = outcome
        episode.observation, episode.info = observation, dict(info)
        ended = bool(terminated or truncated)
        trajectory.observe(observation, float(reward), info, last=ended)
        if terminated:
            trajectory.end(TERMINATED)
        elif truncated:
            trajectory.end(MAX_TURNS if trajectory.turns >= episode.start.max_turns else ENV_TRUNCATED)
        if on_step is not None:
            on_step(episode, observation, float(reward), ended)


def play(
    episodes: Sequence[Episode],
    agent: Agent,
    *,
    executor: Executor | None = None,
    agentgym_order: bool = True,
    on_step: StepCallback | None = None,
) -> PlayStats:
    """Reset the episodes' envs and play them to the end with ``agent``; their trajectories fill in place.

    ``agentgym_order``: open with AgentGym's instruction / acknowledgement / first observation turns
    (else one merged user turn). ``on_step(episode, observation, reward, ended)`` is called after each
    env step (the CLI's play prints there). Envs that raised are left closed and marked: the caller
    (``play_batch``) discards them. An agent that raises ends the batch with ``EpisodeError``.
    """
    stats = PlayStats()
    started = time.perf_counter()
    own_executor = executor is None
    executor = executor or ThreadPoolExecutor(max_workers=min(32, max(1, len(episodes))))
    broken: list[Episode] = []
    failures: dict[int, BaseException] = {}  # episodes the agent could not answer, by id
    try:
        _reset_all(episodes, executor, agentgym_order, stats)
        with agent.session():
            agent.begin(episodes)
            while True:
                active = [e for e in episodes if not e.trajectory.done and id(e) not in failures]
                if not agent.more_turns(len(active)):
                    break
                stats.turns_played += 1
                begin = time.perf_counter()
                try:
                    replies = agent.act(active)
                except Exception as error:
                    finished = [e.trajectory for e in episodes if e.trajectory.done]
                    raise EpisodeError(str(error), finished) from error
                stats.agent_s += time.perf_counter() - begin
                if len(replies) != len(active):
                    raise RuntimeError(f"{agent.name} answered {len(replies)} of {len(active)} episodes")
                to_step = []
                for episode, reply in zip(active, replies):
                    trajectory = episode.trajectory
                    if reply.error is not None:
                        failures[id(episode)] = reply.error
                        continue
                    if reply.tokens is not None:
                        trajectory.tokens = (trajectory.tokens or 0) + reply.tokens
                    if reply.text is not None:
                        trajectory.act(reply.text)
                        if reply.cut:
                            trajectory.cut_turns += 1
                            trajectory.cut.append(trajectory.turns)
                    if reply.stop is not None:
                        trajectory.end(reply.stop)
                    elif reply.text is None:
                        raise RuntimeError(f"{agent.name} gave no action and no stop reason")
                    else:
                        to_step.append(episode)
                _step_all(to_step, [e.trajectory.actions[-1] for e in to_step], executor, stats, on_step, broken)
        if failures:
            error = next(iter(failures.values()))
            finished = [e.trajectory for e in episodes if e.trajectory.done]
            raise EpisodeError(str(error), finished) from error
    finally:
        for episode in broken:
            close_quietly(episode.env)
        if own_executor:
            executor.shutdown(wait=True)
        stats.total_s = time.perf_counter() - started
    return stats


def play_batch(
    starts: Sequence[EpisodeStart],
    agent: Agent,
    pool: EnvPool,
    *,
    executor: Executor | None = None,
    agentgym_order: bool = True,
    on_step: StepCallback | None = None,
) -> tuple[list[Trajectory], PlayStats]:
    """Play one episode per start with envs from ``pool`` (returned to it afterwards; crashed ones closed).

    Starts with an oracle ``prefix`` are clamped first so that at least one action remains
    (``core/oracle_prefix.clamp_prefixes``).
    """
    episodes: list[Episode] = []
    if any(start.prefix for start in starts):
        starts = clamp_prefixes(starts, pool.acquire, pool.release, pool.oracle_prefixes)
    try:
        for start in starts:
            episodes.append(Episode(pool.acquire(start.env_id, start.env_steps), start, new_trajectory(start, agent)))
        stats = play(episodes, agent, executor=executor, agentgym_order=agentgym_order, on_step=on_step)
    except EpisodeError:
        for episode in episodes:  # an env that failed to reset may be half-started: drop them all
            close_quietly(episode.env)
        episodes = []
        raise
    finally:
        for episode in episodes:
            if episode.trajectory.stop_reason != ENV_ERROR:
                pool.release(episode.start.env_id, episode.start.env_steps, episode.env)
    return [episode.trajectory for episode in episodes], stats


def run_episode(env: gym.Env, agent: Agent, item_id: int | None = None, *, seed: int | None = None,
                sample: int = 0, agentgym_order: bool = True, on_step: StepCallback | None = None) -> Trajectory:
    """Play one episode on an env you made (``gym.make(id)``; its ``TimeLimit`` is the budget).

    An env that cannot reset or an agent that fails raises its own exception (no batch to keep).
    """
    limit = env.spec.max_episode_steps if env.spec is not None else None
    if not limit:
        raise ValueError("the env has no TimeLimit (make it with gym.make(id) or pass max_episode_steps=...)")
    start = EpisodeStart(env.spec.id, item_id, int(limit), seed=seed, sample=sample)
    trajectory = new_trajectory(start, agent)
    try:
        play([Episode(env, start, trajectory)], agent, agentgym_order=agentgym_order, on_step=on_step)
    except EpisodeError as error:  # one episode: the env's or the agent's own exception says it best
        raise (error.__cause__ or error) from None
    return trajectory


def new_trajectory(start: EpisodeStart, agent: Agent) -> Trajectory:
    """The empty record of an episode about to start, named by its start and the agent.

    Args:
        start: which episode.
        agent: who plays it (its ``name`` is recorded).

    Returns:
        The trajectory; ``item_id`` is -1 until the env names the item of a plain reset.
    """
    item = -1 if start.item_id is None else int(start.item_id)  # a plain reset: the env's info names the item
    return Trajectory(start.env_id, item, seed=start.reset_seed, sample=start.sample, max_turns=start.max_turns,
                      agent=agent.name)
