"""Run an agent over env splits, K samples per item, for one or more turn budgets; log and summarise.

``evaluate`` is agent-agnostic: it builds the list of episodes (env id x item x sample x budget),
skips the ones already in ``<out_dir>/trajectories.jsonl`` (resume), plays the rest in batches of
the agent's ``batch_size`` through the one episode loop (``core.loop.play_batch``), appends each
batch's records to the log at once and writes ``summary.json``, also when interrupted. Any
``Agent`` works: the scripted ones (``agentgym_envs.agents``), an OpenAI-compatible endpoint
(``evaluation.endpoint``) or a local model (the ``model`` agent that ``agentgym_trl`` installs).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym

from agentgym_envs.core.episode import Trajectory
from agentgym_envs.core.jsonl import write_atomically
from agentgym_envs.core.loop import Agent, EnvPool, EpisodeError, EpisodeStart, play_batch
from agentgym_envs.core.tasks import get_task
from agentgym_envs.evaluation.metrics import summarize_run
from agentgym_envs.evaluation.records import TRAJECTORIES_FILE, TrajectoryLog, episode_key, usable_key

SUMMARY_FILE = "summary.json"
RUN_FILE = "run.json"


class EvalError(RuntimeError):
    """A user-facing evaluation error: one clear line, no traceback."""


class ForeignRun(EvalError):
    """``--out`` holds the run of another agent or split: nothing there belongs to this evaluation."""


class UnfinishedBatch(EvalError):
    """A batch failed midway; ``finished`` holds the records of its episodes that did end (they are saved)."""

    def __init__(self, message: str, finished: list[dict[str, Any]]):
        super().__init__(message)
        self.finished = finished


#: how often the eval bar is refreshed, within a turn too
PROGRESS_INTERVAL_S = 1.0


class TurnProgress:
    """An ``on_step`` callback that shows a batch's progress turn by turn on the eval bar (turn, episodes still
    playing, model tokens per second), so a model taking seconds a turn never looks stuck at ``0/N``."""

    def __init__(self, bar: Any, interval: float = 1.0):
        self.bar, self.interval = bar, interval
        self.postfix: dict[str, str] = {}
        self.start_batch(0)

    def start_batch(self, size: int) -> None:
        """A new batch of ``size`` episodes: its clock, turn and token counts start again."""
        self.started = self.shown = self.turn_started = time.perf_counter()
        self.active, self.turn = size, 0
        self.tokens: dict[int, int] = {}

    def __call__(self, episode: Any, observation: str, reward: float, ended: bool) -> None:
        trajectory = episode.trajectory
        if len(trajectory.actions) > self.turn:  # the first step of a new turn: the next turn's clock starts
            self.turn, self.turn_started = len(trajectory.actions), time.perf_counter()
        self.tokens[id(episode)] = trajectory.model_tokens  # counted turn by turn, not only when it ends
        if ended:
            self.active -= 1
        now = time.perf_counter()
        if now - self.shown >= self.interval:
            self.shown = now
            self.show(now)

    def tick(self) -> None:
        """Between steps (``ticking``): show the progress again, with the seconds the running turn has taken."""
        now = time.perf_counter()
        if now - self.shown >= self.interval:
            self.shown = now
            self.show(now)

    @contextmanager
    def ticking(self) -> Iterator[None]:
        """While the block runs, ``tick`` every ``interval`` seconds from a thread, so the bar moves within a turn
        (a model's turn can take a minute) and not only when its steps end."""
        stop = threading.Event()

        def run() -> None:
            while not stop.wait(self.interval):
                self.tick()

        thread = threading.Thread(target=run, name="agentgym-eval-progress", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def show(self, now: float) -> None:
        """Update the progress bar: turns done, episodes playing, seconds since the last turn's steps, tokens/s."""
        fields = {**self.postfix, "turn": str(self.turn), "playing": str(self.active),
                  "last step": f"{now - self.turn_started:.0f} s ago"}
        tokens = sum(self.tokens.values())
        if tokens:
            fields["tok/s"] = f"{tokens / max(now - self.started, 1e-9):.1f}"
        self.bar.set_postfix(fields)


def play_records(agent: Agent, pool: EnvPool, jobs: Sequence[EpisodeStart],
                 merged_first_turn: bool = False, on_step: Any = None) -> list[dict[str, Any]]:
    """Play a batch of jobs and return their records; a failure keeps the records of the episodes that ended."""
    try:
        trajectories, stats = play_batch(jobs, agent, pool, agentgym_order=not merged_first_turn, on_step=on_step)
    except EpisodeError as error:
        raise UnfinishedBatch(str(error), [t.to_record() for t in error.finished]) from error
    except ValueError as error:  # e.g. a first prompt over the model's context: one line
        raise EvalError(str(error)) from error
    batch = {"batch_s": stats.total_s, "batch_agent_s": stats.agent_s, "batch_env_s": stats.env_s,
             "batch_size": float(len(jobs))}
    return [_record(trajectory, batch) for trajectory in trajectories]


def _record(trajectory: Trajectory, batch: dict[str, float]) -> dict[str, Any]:
    trajectory.timing.update(batch)
    return trajectory.to_record()


# ---- the evaluation loop --------------------------------------------------------------------------
@dataclass
class EvalReport:
    out_dir: Path
    results: list[dict[str, Any]]
    episodes: int
    expected: int
    interrupted: bool = False
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        """Whether every expected episode has been played."""
        return self.episodes >= self.expected


def plan_jobs(env_ids: Sequence[str], split: str, n_samples: int, max_turns: Sequence[int | None],
              limit: int | None = None, items: Sequence[int] | None = None,
              oracle_prefix: int = 0) -> list[EpisodeStart]:
    """Every episode of the evaluation; checks env ids, extras and splits first (``EvalError`` on bad input).

    ``items``: only these item ids of the split (e.g. a held-out part of the train split), in the given order.
    ``oracle_prefix``: every episode starts after the oracle's first k actions (``core/oracle_prefix.py``).
    """
    if n_samples < 1:
        raise EvalError(f"--n-samples must be at least 1, got {n_samples}")
    if oracle_prefix < 0:
        raise EvalError(f"--oracle-prefix must be at least 0, got {oracle_prefix}")
    if not env_ids:
        raise EvalError("give at least one env id (--env AgentGym/TextCraft-v0)")
    jobs: list[EpisodeStart] = []
    for budget in max_turns or [None]:
        if budget is not None and budget < 1:
            raise EvalError(f"--max-turns must be at least 1, got {budget}")
        for env_id in env_ids:
            try:
                spec = get_task(env_id)
            except KeyError as error:
                if env_id not in gym.registry:
                    raise EvalError(str(error.args[0])) from None
                jobs += _own_env_jobs(env_id, budget, n_samples, limit, items, oracle_prefix)
                continue
            if not spec.extra_installed():
                raise EvalError(f"{spec.env_id} needs its extra, which is not installed: {spec.install_hint}")
            try:
                chosen = spec.first_items(split, limit) if items is None else spec.named_items(split, items)
            except ValueError as error:
                raise EvalError(str(error)) from None
            if not chosen:
                hint = " (--limit 0)" if limit == 0 else ""
                raise EvalError(f"{spec.env_id} has no items in the {split!r} split{hint}")
            cap = budget if budget is not None else spec.max_turns
            jobs += [EpisodeStart(spec.env_id, int(item), cap, sample=sample, prefix=oracle_prefix)
                     for item in chosen for sample in range(n_samples)]
    return list(dict.fromkeys(jobs))  # an env or budget named twice (or None = the cap given again) plays once


def _own_env_jobs(env_id: str, budget: int | None, n_samples: int, limit: int | None, items: Sequence[int] | None,
                  oracle_prefix: int) -> list[EpisodeStart]:
    """The episodes of an env registered with ``gym.register`` alone: it has no splits, so its items are named
    (``--items``); its turn cap is its ``max_episode_steps``."""
    if items is None:
        raise EvalError(f"{env_id} has no splits (it is registered with gym.register, not as a family): name the "
                        "items to evaluate with --items, e.g. --items 0 1 2")
    cap = budget if budget is not None else gym.spec(env_id).max_episode_steps
    if cap is None:
        raise EvalError(f"{env_id} has no turn cap (max_episode_steps): give one with --max-turns")
    chosen = [int(item) for item in items][:limit]
    return [EpisodeStart(env_id, item, cap, sample=sample, prefix=oracle_prefix)
            for item in chosen for sample in range(n_samples)]


def run_differences(out_dir: str | Path, run_info: dict[str, Any], known_only: bool = False) -> list[str]:
    """How the run recorded in ``out_dir`` differs from ``run_info`` (``{"agent": ..., "split": ...}``): one
    ``"setting: was -> now"`` per differing setting, none when the folder holds no run or the same one.

    ``known_only`` compares only the settings ``run_info`` names (``agentgym eval`` checks the ones its flags say
    before it loads the agent, which adds the rest, e.g. the weights' fingerprint).
    """
    path = Path(out_dir) / RUN_FILE
    if not path.is_file():
        return []
    try:
        previous = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(previous, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as error:  # e.g. written empty when the disk was full
        raise EvalError(f"{path} is unreadable ({type(error).__name__}: {str(error)[:200]}): it should record the "
                        f"run in {out_dir}; delete it to resume the run with this command's settings, or give "
                        "another --out") from None
    was = {**(previous.get("agent") or {}), "split": previous.get("split")}
    now = {**run_info["agent"], "split": run_info["split"]}
    names = now if known_only else sorted(set(was) | set(now), key=lambda name: (name == "split", name))
    return [f"{name}: {_shown(was.get(name))} -> {_shown(now.get(name))}" for name in names
            if was.get(name) != now.get(name)]


def recorded_agent(out_dirs: Sequence[str | Path]) -> dict[str, Any]:
    """The agent that the evaluation runs in ``out_dirs`` recorded in their ``run.json`` when they ran: its settings
    and, for a model, the fingerprint of the weights it read. Outcomes pooled across runs must come from one
    agent, so every run must have recorded the same; ``EvalError`` names the settings that differ."""
    agents = [json.loads((Path(out_dir) / RUN_FILE).read_text(encoding="utf-8"))["agent"] for out_dir in out_dirs]
    first = agents[0]
    differing = sorted({key for agent in agents for key in {*agent, *first} if agent.get(key) != first.get(key)})
    if differing:
        raise EvalError(f"the evaluation runs in {', '.join(map(str, out_dirs))} ran different agents (they differ in "
                        f"{', '.join(differing)})")
    return first


def _shown(value: Any) -> str:
    text = "(unset)" if value is None else json.dumps(value) if isinstance(value, (dict, list)) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def foreign_run_error(out_dir: str | Path, changes: Sequence[str]) -> ForeignRun:
    """The refusal of a folder that holds another run, naming what differs."""
    return ForeignRun(f"{out_dir} holds a run of another agent or settings (it differs in {'; '.join(changes)}); "
                      "give another --out to start a new run, or the run's own settings to resume it")


def _check_run_file(out_dir: Path, run_info: dict[str, Any]) -> None:
    path = out_dir / RUN_FILE
    if path.is_file():
        changes = run_differences(out_dir, run_info)
        if changes:
            raise foreign_run_error(out_dir, changes)
    else:
        out_dir.mkdir(parents=True, exist_ok=True)
        write_atomically(path, json.dumps(run_info, indent=1) + "\n")


def _batches(jobs: Sequence[EpisodeStart], size: int) -> Iterator[Sequence[EpisodeStart]]:
    """Batches of at most ``size`` jobs, never mixing turn budgets (a budget's envs are released after it)."""
    batch: list[EpisodeStart] = []
    for job in jobs:
        if batch and (len(batch) >= max(1, size) or job.max_turns != batch[0].max_turns):
            yield batch
            batch = []
        batch.append(job)
    if batch:
        yield batch


def evaluate(agent: Agent, env_ids: Sequence[str], out_dir: str | Path, *, split: str = "test",
             n_samples: int = 1, max_turns: Sequence[int | None] = (None,), limit: int | None = None,
             progress: bool = True, env_kwargs: dict[str, Any] | None = None,
             merged_first_turn: bool = False, items: Sequence[int] | None = None,
             make_env: Callable[..., Any] | None = None, oracle_prefix: int = 0) -> EvalReport:
    """Evaluate ``agent`` and write trajectories.jsonl + summary.json into ``out_dir``; resumes a previous run.

    ``max_turns``: one or more turn budgets (``None`` = each env's evaluation cap); several budgets
    measure test-time interaction scaling. ``env_kwargs`` go to every ``gym.make``;
    ``merged_first_turn`` opens episodes with one user turn (as a model trained that way saw them);
    ``oracle_prefix=k`` starts each episode after the oracle's first k actions (success per k of a reverse
    curriculum; at least one action is left, and the k replayed turns are not part of the budget).
    These change the episodes, so they are part of the run's identity; ``make_env`` (what makes the envs
    instead of ``gym.make``, e.g. ``server.hosts.RemoteEnvFactory`` for envs on servers) does not: a served
    id plays as the local one, so a run may resume on other hosts. An interruption (Ctrl-C, a
    failing endpoint) keeps every finished episode and still writes the summary before re-raising.
    """
    from tqdm import tqdm

    out = Path(out_dir)
    jobs = plan_jobs(env_ids, split, n_samples, list(max_turns), limit, items, oracle_prefix)
    description = run_description(agent, env_kwargs, merged_first_turn, oracle_prefix)
    _check_run_file(out, {"agent": description, "split": split})
    pool = EnvPool(make_env=make_env, **(env_kwargs or {}))
    log = TrajectoryLog(out / TRAJECTORIES_FILE)
    wanted = {job.key for job in jobs}
    saved = [record for record in log.records() if usable_key(record, str(log.path)) in wanted]
    done = {episode_key(record) for record in saved}
    pending = [job for job in jobs if job.key not in done]
    successes, finished = sum(bool(r["info"]["success"]) for r in saved), len(saved)
    interrupted = False
    bar = tqdm(total=len(jobs), initial=len(jobs) - len(pending), desc="eval", unit="ep", disable=not progress)
    turns = TurnProgress(bar, PROGRESS_INTERVAL_S) if progress else None
    try:
        for batch in _batches(pending, agent.batch_size):
            pool.drop_other_budgets({batch[0].max_turns})
            if turns is not None:
                turns.start_batch(len(batch))
            try:
                with turns.ticking() if turns is not None else nullcontext():
                    records = play_records(agent, pool, batch, merged_first_turn, on_step=turns)
            except UnfinishedBatch as error:  # the episodes that ended are kept: a rerun plays only the others
                log.append(error.finished)
                raise
            log.append(records)
            successes += sum(bool(r["info"]["success"]) for r in records)
            finished += len(records)
            bar.update(len(records))
            bar.set_postfix(success=f"{successes / finished:.2f}", refresh=False)
            if turns is not None:
                turns.postfix = {"success": f"{successes / finished:.2f}"}
    except BaseException:
        interrupted = True
        raise
    finally:
        bar.close()
        pool.close()
        report = write_summary(out, jobs, split, n_samples, description, interrupted)
    return report


def run_description(agent: Agent, env_kwargs: dict[str, Any] | None, merged_first_turn: bool,
                    oracle_prefix: int = 0) -> dict[str, Any]:
    """What identifies a run: the agent, and the env kwargs, opening and oracle prefix that change its episodes."""
    description = agent.describe()
    if env_kwargs:
        description["env_kwargs"] = dict(env_kwargs)
    if merged_first_turn:
        description["merged_first_turn"] = True
    if oracle_prefix:
        description["oracle_prefix"] = oracle_prefix
    return description


def write_summary(out: Path, jobs: Sequence[EpisodeStart], split: str, n_samples: int, agent: dict[str, Any],
                  interrupted: bool = False) -> EvalReport:
    """Summarise the saved episodes of ``jobs`` into summary.json (and the scaling plot for several budgets)."""
    wanted = {job.key for job in jobs}
    log = TrajectoryLog(out / TRAJECTORIES_FILE)
    records = {episode_key(r): r for r in log.records() if usable_key(r, str(log.path)) in wanted}
    results = summarize_run(list(records.values()))
    summary = {
        "agent": agent,
        "split": split,
        "n_samples": n_samples,
        "episodes": len(records),
        "expected_episodes": len(jobs),
        "complete": len(records) >= len(jobs),
        "results": results,
    }
    out.mkdir(parents=True, exist_ok=True)
    write_atomically(out / SUMMARY_FILE, json.dumps(summary, indent=1) + "\n")
    return EvalReport(out, results, len(records), len(jobs), interrupted, summary)

