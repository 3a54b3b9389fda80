"""Run an agent over env splits, K samples per item, for one or more turn budgets; log and summarise.

``evaluate`` is agent-agnostic: it builds the list of episodes (env id x item x sample x budget),
skips the ones already in ``<out_dir>/trajectories.jsonl`` (resume), hands the rest to an
``EpisodeRunner`` in batches, appends each batch's records to the log at once and writes
``summary.json``, also when interrupted. Runners here play step by step (oracle, random, an
OpenAI-compatible endpoint); ``agentgym_trl.eval.ModelRunner`` plays batches with a local HF model.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

import gymnasium as gym
import numpy as np

from agentgym_envs.agents import close_quietly, first_messages
from agentgym_envs.core.tasks import get_task
from agentgym_envs.evaluation.metrics import summarize_run
from agentgym_envs.evaluation.records import TRAJECTORIES_FILE, TrajectoryLog, episode_key

SUMMARY_FILE = "summary.json"
RUN_FILE = "run.json"

# Why an episode ended (the same words as agentgym_trl.rollout).
TERMINATED = "terminated"
MAX_TURNS = "max_turns"
CONTEXT = "context"
ENV_ERROR = "env_error"


class EvalError(RuntimeError):
    """A problem the user can fix (bad model path, endpoint down, missing extra, empty split); one-line message."""


class ContextLengthError(EvalError):
    """The agent cannot answer because the conversation no longer fits its context: the episode ends there."""


@dataclass(frozen=True)
class EpisodeJob:
    """One episode to play: which item, which of its K samples, under which turn budget."""

    env_id: str
    item_id: int
    sample: int
    max_turns: int

    @property
    def key(self) -> tuple[str, int, int, int]:
        return (self.env_id, self.item_id, self.sample, self.max_turns)


class EpisodeRunner(Protocol):
    """Plays batches of episodes and returns one record per job (any order)."""

    batch_size: int

    def describe(self) -> dict[str, Any]:
        """What identifies the agent (stored in run.json; a resumed run must use the same agent)."""

    def run(self, jobs: Sequence[EpisodeJob]) -> list[dict[str, Any]]: ...

    def close(self) -> None: ...


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def make_record(job: EpisodeJob, agent: str, subtask: str | None, messages: list[dict[str, str]],
                actions: list[str], rewards: list[float], valid: list[bool], *, success: bool, score: float,
                stop_reason: str, tokens: int | None, timing: dict[str, float]) -> dict[str, Any]:
    """The JSON record of one evaluated episode (the schema of ``records.py``)."""
    return {
        "env_id": job.env_id,
        "subtask": subtask,
        "item_id": job.item_id,
        "sample": job.sample,
        "max_turns": job.max_turns,
        "agent": agent,
        "messages": messages,
        "actions": actions,
        "rewards": rewards,
        "valid": valid,
        "return": float(sum(rewards)),
        "turns": len(actions),
        "tokens": tokens,
        "info": {"success": bool(success), "score": float(score), "stop_reason": stop_reason},
        "timing": {name: round(value, 4) for name, value in timing.items()},
        "time": now_iso(),
    }


# ---- step-by-step agents --------------------------------------------------------------------------
@dataclass
class Reply:
    text: str
    tokens: int | None = None


class StepPolicy(Protocol):
    name: str

    def begin(self, job: EpisodeJob) -> None: ...

    def respond(
        self, env: gym.Env, observation: str, info: dict[str, Any], messages: list[dict[str, str]]
    ) -> Reply: ...


class OraclePolicy:
    """The env's expert: a ceiling for the metrics and a check that the pipeline works."""

    name = "oracle"

    def begin(self, job: EpisodeJob) -> None:
        pass

    def respond(self, env, observation, info, messages) -> Reply:
        return Reply(env.unwrapped.oracle_action())


class RandomPolicy:
    """The env's plausible random actions, seeded per (item, sample) so a resumed run plays the same episodes."""

    name = "random"

    def __init__(self, seed: int = 0):
        self.seed = seed
        self.rng = np.random.default_rng(seed)

    def begin(self, job: EpisodeJob) -> None:
        self.rng = np.random.default_rng([self.seed, job.item_id, job.sample])

    def respond(self, env, observation, info, messages) -> Reply:
        return Reply(env.unwrapped.random_action(self.rng))


class UnfinishedBatch(EvalError):
    """An episode of a concurrent batch failed; ``finished`` holds the batch's episodes that did end."""

    def __init__(self, message: str, finished: list[dict[str, Any]]):
        super().__init__(message)
        self.finished = finished


class StepwiseRunner:
    """Plays episodes with a ``StepPolicy``, ``concurrency`` at a time (a batch each); every worker thread
    makes its envs once per (env id, budget) and keeps them, so envs are never shared by two episodes."""

    def __init__(self, policy: StepPolicy, description: dict[str, Any] | None = None,
                 env_kwargs: dict[str, Any] | None = None, concurrency: int = 1):
        if concurrency < 1:
            raise EvalError(f"--concurrency must be at least 1, got {concurrency}")
        self.policy = policy
        self.env_kwargs = dict(env_kwargs or {})
        self.description = with_env_kwargs(description or {"kind": policy.name}, self.env_kwargs)
        self.batch_size = concurrency
        self._local = threading.local()
        self._env_sets: list[dict[tuple[str, int], gym.Env]] = []  # every thread's envs, for close()
        self._lock = threading.Lock()
        self._workers: ThreadPoolExecutor | None = None

    def describe(self) -> dict[str, Any]:
        return dict(self.description)

    def _envs(self) -> dict[tuple[str, int], gym.Env]:
        envs = getattr(self._local, "envs", None)
        if envs is None:
            envs = self._local.envs = {}
            with self._lock:
                self._env_sets.append(envs)
        return envs

    def _env(self, env_id: str, max_turns: int) -> gym.Env:
        envs, key = self._envs(), (env_id, max_turns)
        if key not in envs:
            # jobs come budget by budget: release the envs of other budgets (browsers, JVMs) before making more
            for other in [k for k in envs if k[1] != max_turns]:
                self._drop(other)
            envs[key] = gym.make(env_id, max_episode_steps=max_turns, **self.env_kwargs)
        return envs[key]

    def _drop(self, key: tuple[str, int]) -> None:
        close_quietly(self._envs().pop(key))

    def run(self, jobs: Sequence[EpisodeJob]) -> list[dict[str, Any]]:
        if self.batch_size == 1:
            return [self.play(job) for job in jobs]
        if self._workers is None:  # long-lived threads, so their envs are reused from batch to batch
            self._workers = ThreadPoolExecutor(max_workers=self.batch_size, thread_name_prefix="agentgym-eval")
        futures = [self._workers.submit(self.play, job) for job in jobs]
        finished, failure = [], None
        try:
            for future in futures:  # in job order
                try:
                    finished.append(future.result())
                except EvalError as error:
                    failure = failure or error
        except BaseException:  # Ctrl-C: episodes not yet started are dropped, running ones end on their own
            for future in futures:
                future.cancel()
            raise
        if failure is not None:
            raise UnfinishedBatch(str(failure), finished) from failure
        return finished

    def play(self, job: EpisodeJob) -> dict[str, Any]:
        started = time.perf_counter()
        env = self._env(job.env_id, job.max_turns)
        try:
            observation, info = env.reset(seed=job.item_id, options={"item_id": job.item_id})
        except Exception as error:  # noqa: BLE001 (an engine that cannot start: a clear message, saved work kept)
            self._drop((job.env_id, job.max_turns))
            raise EvalError(f"{job.env_id} could not reset item {job.item_id}: {error}") from error
        messages = first_messages(info, observation)
        subtask = info.get("subtask")
        self.policy.begin(job)
        actions: list[str] = []
        rewards: list[float] = []
        valid: list[bool] = []
        tokens: int | None = None
        agent_s = 0.0
        success, score, stop_reason = False, 0.0, MAX_TURNS
        while len(actions) < job.max_turns:
            begin = time.perf_counter()
            try:
                reply = self.policy.respond(env, observation, info, messages)
            except ContextLengthError:
                stop_reason = CONTEXT  # as the local-model path ends an episode that outgrows the context
                break
            finally:
                agent_s += time.perf_counter() - begin
            if reply.tokens is not None:
                tokens = (tokens or 0) + reply.tokens
            actions.append(reply.text)
            messages.append({"role": "assistant", "content": reply.text})
            try:
                observation, reward, terminated, truncated, info = env.step(reply.text)
            except Exception as error:  # noqa: BLE001 (an engine crash ends this episode, not the evaluation)
                self._drop((job.env_id, job.max_turns))
                messages.append({"role": "user", "content": f"[the env raised {error!r}]"})
                rewards.append(0.0)
                valid.append(False)
                stop_reason = ENV_ERROR
                break
            rewards.append(float(reward))
            valid.append(bool(info.get("valid_action", True)))
            messages.append({"role": "user", "content": observation})
            success, score = bool(info.get("success", False)), float(info.get("score", 0.0))
            if terminated or truncated:
                stop_reason = TERMINATED if terminated else MAX_TURNS
                break
        total_s = time.perf_counter() - started
        return make_record(job, self.policy.name, subtask, messages, actions, rewards, valid, success=success,
                           score=score, stop_reason=stop_reason, tokens=tokens,
                           timing={"episode_s": total_s, "agent_s": agent_s, "env_s": total_s - agent_s})

    def close(self) -> None:
        if self._workers is not None:
            self._workers.shutdown(wait=True, cancel_futures=True)
            self._workers = None
        with self._lock:
            for envs in self._env_sets:
                for env in envs.values():
                    close_quietly(env)
                envs.clear()
        close_policy = getattr(self.policy, "close", None)
        if close_policy is not None:
            close_policy()


def with_env_kwargs(description: dict[str, Any], env_kwargs: dict[str, Any]) -> dict[str, Any]:
    """A runner's description with the env kwargs it makes its envs with: they change the episodes, so a
    run folder made with other kwargs is not resumed with these."""
    return {**description, "env_kwargs": env_kwargs} if env_kwargs else dict(description)


def scripted_runner(name: str, seed: int = 0, env_kwargs: dict[str, Any] | None = None) -> StepwiseRunner:
    """The oracle or the random agent as a runner (``env_kwargs`` go to every ``gym.make``)."""
    if name == "oracle":
        return StepwiseRunner(OraclePolicy(), {"kind": "oracle"}, env_kwargs)
    if name == "random":
        return StepwiseRunner(RandomPolicy(seed), {"kind": "random", "seed": seed}, env_kwargs)
    raise EvalError(f"unknown agent {name!r}; choose oracle or random, or give --model / --endpoint")


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
        return self.episodes >= self.expected


def plan_jobs(env_ids: Sequence[str], split: str, n_samples: int, max_turns: Sequence[int | None],
              limit: int | None = None) -> list[EpisodeJob]:
    """Every episode of the evaluation; checks env ids, extras and splits first (``EvalError`` on bad input)."""
    if n_samples < 1:
        raise EvalError(f"--n-samples must be at least 1, got {n_samples}")
    if not env_ids:
        raise EvalError("give at least one env id (--env AgentGym/TextCraft-v0)")
    jobs: list[EpisodeJob] = []
    for budget in max_turns or [None]:
        if budget is not None and budget < 1:
            raise EvalError(f"--max-turns must be at least 1, got {budget}")
        for env_id in env_ids:
            try:
                spec = get_task(env_id)
            except KeyError as error:
                raise EvalError(str(error.args[0])) from None
            if not spec.extra_installed():
                raise EvalError(f"{spec.env_id} needs its extra, which is not installed: {spec.install_hint}")
            try:
                items = spec.first_items(split, limit)
            except ValueError as error:
                raise EvalError(str(error)) from None
            if not items:
                hint = " (--limit 0)" if limit == 0 else ""
                raise EvalError(f"{spec.env_id} has no items in the {split!r} split{hint}")
            cap = budget if budget is not None else spec.max_turns
            jobs += [EpisodeJob(spec.env_id, int(item), sample, cap) for item in items for sample in range(n_samples)]
    return list(dict.fromkeys(jobs))  # an env or budget named twice (or None = the cap given again) plays once


def _check_run_file(out_dir: Path, run_info: dict[str, Any]) -> None:
    path = out_dir / RUN_FILE
    if path.is_file():
        previous = json.loads(path.read_text(encoding="utf-8"))
        if previous.get("agent") != run_info["agent"] or previous.get("split") != run_info["split"]:
            raise EvalError(
                f"{out_dir} holds a run of another agent or split ({previous.get('agent')}, {previous.get('split')}); "
                "give another --out to start a new run"
            )
    else:
        out_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(run_info, indent=1) + "\n", encoding="utf-8")


def _batches(jobs: Sequence[EpisodeJob], size: int) -> Iterator[Sequence[EpisodeJob]]:
    for start in range(0, len(jobs), max(1, size)):
        yield jobs[start : start + max(1, size)]


def evaluate(runner: EpisodeRunner, env_ids: Sequence[str], out_dir: str | Path, *, split: str = "test",
             n_samples: int = 1, max_turns: Sequence[int | None] = (None,), limit: int | None = None,
             progress: bool = True) -> EvalReport:
    """Evaluate ``runner`` and write trajectories.jsonl + summary.json into ``out_dir``; resumes a previous run.

    ``max_turns``: one or more turn budgets (``None`` = each env's evaluation cap); several budgets
    measure test-time interaction scaling. An interruption (Ctrl-C, a failing endpoint) keeps every
    finished episode and still writes the summary of what was saved before re-raising.
    """
    from tqdm import tqdm

    out = Path(out_dir)
    jobs = plan_jobs(env_ids, split, n_samples, list(max_turns), limit)
    _check_run_file(out, {"agent": runner.describe(), "split": split})
    log = TrajectoryLog(out / TRAJECTORIES_FILE)
    wanted = {job.key for job in jobs}
    saved = [record for record in log.records() if episode_key(record) in wanted]
    done = {episode_key(record) for record in saved}
    pending = [job for job in jobs if job.key not in done]
    successes, finished = sum(bool(r["info"]["success"]) for r in saved), len(saved)
    interrupted = False
    bar = tqdm(total=len(jobs), initial=len(jobs) - len(pending), desc="eval", unit="ep", disable=not progress)
    try:
        for batch in _batches(pending, runner.batch_size):
            try:
                records = runner.run(batch)
            except UnfinishedBatch as error:  # the episodes that ended are kept: a rerun plays only the others
                log.append(error.finished)
                raise
            log.append(records)
            successes += sum(bool(r["info"]["success"]) for r in records)
            finished += len(records)
            bar.update(len(records))
            bar.set_postfix(success=f"{successes / finished:.2f}", refresh=False)
    except BaseException:
        interrupted = True
        raise
    finally:
        bar.close()
        report = write_summary(out, jobs, split, n_samples, runner.describe(), interrupted)
    return report


def write_summary(out: Path, jobs: Sequence[EpisodeJob], split: str, n_samples: int, agent: dict[str, Any],
                  interrupted: bool = False) -> EvalReport:
    """Summarise the saved episodes of ``jobs`` into summary.json (and the scaling plot for several budgets)."""
    wanted = {job.key for job in jobs}
    records = {episode_key(r): r for r in TrajectoryLog(out / TRAJECTORIES_FILE).records() if episode_key(r) in wanted}
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
    (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return EvalReport(out, results, len(records), len(jobs), interrupted, summary)

