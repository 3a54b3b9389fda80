"""Scripted agents that solve the embedded questions by searching and reading, without the gold answer.

Each is an ``Agent`` of the episode loop: the solver is a generator that yields its next action
(a search, then the answer) and receives the env's observation back. They show that the tasks are solvable with the
env's own retriever and that multi-hop questions
need several searches:

* ``single_search``: one search with the question text, then an answer read from those three
  passages only (a chain is followed as far as the retrieved passages allow).
* ``iterative``: one search per step of the question's decomposition ("<entity> <keyword>"),
  reading each fact from the retrieved passage whose title is the entity.

Both see only the question, the question's ``program`` (its decomposition into relations, what a
question-decomposition model would produce; no entity but the ones named in the question, no
answer) and the env's observations; facts are read with the regular expressions compiled from the
article templates (``articles.read_fact``).
"""

from __future__ import annotations

import re
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from agentgym_envs.core.loop import BaseAgent, Episode, run_episode
from agentgym_envs.search.articles import read_fact
from agentgym_envs.search.schema import relation

_DOC_LINE = re.compile(r"^Doc \d+\(Title: (.*?)\) (.*)$")


@dataclass
class Passage:
    title: str
    text: str


@dataclass
class EpisodeResult:
    success: bool
    searches: int
    turns: int
    answer: str


class _OutOfTurns(Exception):
    pass


def parse_information(observation: str) -> list[Passage]:
    """The passages of an ``<information>`` block, as the env formats them."""
    body = observation.partition("<information>")[2].partition("</information>")[0]
    return [Passage(m.group(1), m.group(2)) for m in map(_DOC_LINE.match, body.splitlines()) if m]


# A solver step: yields an action, receives the env's observation, returns what it found.
Steps = Generator[str, str, Any]


class _Solver:
    """One episode's search plan: ``answering()`` yields each action and finally ``<answer>...</answer>``."""

    def __init__(self, question: Any, max_turns: int, single_search: bool):
        self.question, self.max_turns, self.single_search = question, max_turns, single_search
        self.turns = self.searches = 0
        self.first_results: list[Passage] = []
        self.answer = "unknown"

    def answering(self) -> Steps:
        try:
            self.answer = (yield from self._solve(self.question.question,
                                                  self.question.metadata["program"])) or "unknown"
        except _OutOfTurns:
            self.answer = "unknown"
        while True:  # an answer the env refuses (e.g. empty) is given again until the episode ends
            self.turns += 1
            yield f"<answer>{self.answer}</answer>"

    # ---- env I/O ------------------------------------------------------------------------------
    def _search(self, query: str) -> Steps:
        if self.single_search and self.searches >= 1:
            return self.first_results
        if self.turns >= self.max_turns - 1:  # keep the last turn for the answer
            raise _OutOfTurns
        observation = yield f"<search>{query}</search>"
        self.turns += 1
        self.searches += 1
        passages = parse_information(observation)
        if self.searches == 1:
            self.first_results = passages
        return passages

    def _read(self, entity: str, kind: str, key: str) -> Steps:
        """Find ``key`` of ``entity``: in passages titled ``entity`` from searches for it."""
        queries = [f"{entity} {relation(kind, key).keyword}", entity]
        for query in queries[: 1 if self.single_search else 2]:
            for passage in (yield from self._search(query)):
                if passage.title == entity:
                    value = read_fact(passage.text, kind, key)
                    if value is not None:
                        return value
        return None

    def _follow(self, entity: str, kind: str, keys: list[str]) -> Steps:
        for key in keys:
            value = yield from self._read(entity, kind, key)
            if value is None:
                return None
            entity, kind = value, relation(kind, key).target
        return entity

    # ---- programs -----------------------------------------------------------------------------
    def _solve(self, question: str, program: dict[str, Any]) -> Steps:
        op = program["op"]
        if self.single_search:
            yield from self._search(question)
        if op == "chain":
            return (yield from self._follow(program["start"], program["start_kind"], program["relations"]))
        if op == "identify":
            for query in (question, " ".join(program["clues"].values())):
                for passage in (yield from self._search(query)):
                    if all(read_fact(passage.text, program["kind"], k) == v for k, v in program["clues"].items()):
                        return passage.title
            return None
        if op in ("compare", "same"):
            return (yield from self._compare(op, program))
        raise ValueError(f"unknown program op {op!r}")

    def _compare(self, op: str, program: dict[str, Any]) -> Steps:
        values = []
        for name in program["entities"]:
            end = (yield from self._follow(name, program["kind"], program["path"])) if program["path"] else name
            kind = program["kind"]
            for step in program["path"]:
                kind = relation(kind, step).target
            value = None if end is None else (yield from self._read(end, kind, program["attribute"]))
            if value is None:
                return None
            values.append(value)
        if op == "same":
            return "yes" if values[0] == values[1] else "no"
        numbers = [int(re.sub(r"\D", "", v) or 0) for v in values]
        if numbers[0] == numbers[1]:
            return None
        pick = min if program["pick"] == "min" else max
        return program["entities"][numbers.index(pick(numbers))]


class ScriptedAgent(BaseAgent):
    """Answers embedded questions by searching and reading; ``single_search=True`` allows one search only."""

    def __init__(self, single_search: bool = False):
        self.single_search = single_search
        self.name = "single_search" if single_search else "iterative"
        self._solvers: dict[int, tuple[_Solver, Steps]] = {}

    def begin(self, episodes: Sequence[Episode]) -> None:
        """A solver per episode, from its question and turn budget."""
        for episode in episodes:
            solver = _Solver(episode.env.unwrapped.question, episode.start.max_turns, self.single_search)
            self._solvers[id(episode.trajectory)] = (solver, solver.answering())

    def act_one(self, episode: Episode) -> str:
        """The episode's solver's next response, after it has read the last observation."""
        _, steps = self._solvers[id(episode.trajectory)]
        return next(steps) if not episode.trajectory.actions else steps.send(episode.observation)

    def run(self, env: gym.Env, item_id: int) -> EpisodeResult:
        """One episode on ``env`` (made with ``gym.make``: its turn limit is the budget), with its search counts."""
        trajectory = run_episode(env, self, item_id)
        solver, _ = self._solvers.pop(id(trajectory))
        return EpisodeResult(trajectory.success, solver.searches, solver.turns, solver.answer)
