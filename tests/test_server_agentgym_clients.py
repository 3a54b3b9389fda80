"""``agentgym serve`` answers AgentGym's own env clients (``agentenv.envs.*``).

The clients here make exactly the HTTP calls AgentGym's SciWorld, SearchQA and WebArena clients
make (same paths, body keys, query names, and the same fields read back), written from their
protocol; each plays an episode against a local twin of the env and must see the same text,
rewards and end. The generic ``id``/``data_idx`` client is in test_server.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("fastapi")
requests = pytest.importorskip("requests")

import agentgym_envs  # noqa: E402
from agentgym_envs import testing  # noqa: E402
from agentgym_envs.server.app import LocalServer  # noqa: E402

TIMEOUT = 120


def _observation(base: str, env_idx: int) -> Any:
    """``GET /observation?env_idx=``, as the env_idx-style clients (SearchQA, WebArena, WebShop, SqlGym) ask."""
    response = requests.get(f"{base}/observation?env_idx={env_idx}", timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    return response.json()


def _post(url: str, body: dict[str, Any]) -> Any:
    response = requests.post(url, json=body, timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    return response.json()


class SciWorldClient:
    """AgentGym's SciWorld client: ``id`` in bodies, ``data_idx`` episodes, score as the reward."""

    def __init__(self, base: str):
        self.base = base
        created = requests.post(f"{base}/create", timeout=TIMEOUT)
        assert created.status_code == 200, created.text
        self.env_id = created.json()["id"]

    def reset(self, data_idx: int) -> str:
        reply = _post(f"{self.base}/reset", {"data_idx": data_idx, "id": self.env_id})
        self.task_name, self.var_num = reply["task_name"], reply["var_num"]
        return reply["task_description"] + "\n" + reply["observation"]

    def step(self, action: str) -> tuple[str, float, bool]:
        reply = _post(f"{self.base}/step", {"action": action, "id": self.env_id})
        return reply["observation"], reply["score"], reply["done"]

    def close(self) -> None:
        _post(f"{self.base}/close", {"id": self.env_id})


class SearchQAClient:
    """AgentGym's SearchQA client: the bare env number from ``/create``, ``env_idx`` everywhere,
    the episode named by ``id`` in ``/reset``."""

    def __init__(self, base: str):
        self.base = base
        created = requests.post(f"{base}/create", json={"id": 0}, timeout=TIMEOUT)
        assert created.status_code == 200, created.text
        self.env_id = created.json()

    def observe(self) -> Any:
        return _observation(self.base, self.env_id)

    def reset(self, item: int) -> Any:
        return _post(f"{self.base}/reset", {"id": item, "env_idx": self.env_id})

    def step(self, action: str) -> tuple[str, float, bool]:
        reply = _post(f"{self.base}/step", {"action": action, "env_idx": self.env_id})
        return reply["observation"], reply["reward"], reply["done"]

    def close(self) -> None:
        _post(f"{self.base}/close", {"env_idx": self.env_id})


class WebArenaClient:
    """AgentGym's WebArena client: ``env_idx`` from ``/create``, ``idx`` episodes, ``terminated``,
    and a response without a backtick block answered on the client side."""

    NO_ACTION = "Cannot parse action from response."

    def __init__(self, base: str):
        self.base = base
        created = requests.post(f"{base}/create", timeout=TIMEOUT)
        assert created.status_code == 200, created.text
        self.env_id = created.json()["env_idx"]

    def observe(self) -> Any:
        return _observation(self.base, self.env_id)

    def reset(self, idx: int) -> dict[str, Any]:
        reply = _post(f"{self.base}/reset", {"seed": 0, "idx": idx, "env_idx": self.env_id})
        assert reply["observation"] != "TimeoutError"
        return reply

    def step(self, response: str) -> tuple[str, float, bool]:
        if not re.findall(r"```(.*?)```", response, re.DOTALL):
            return self.NO_ACTION, 0.0, False
        reply = _post(f"{self.base}/step", {"action": response, "env_idx": self.env_id})
        return reply["observation"], (reply["reward"] if reply["terminated"] else 0.0), reply["terminated"]

    def close(self) -> None:
        _post(f"{self.base}/close", {"env_idx": self.env_id})


def _play_both(client: Any, local: gym.Env, turns: int) -> tuple[list, list]:
    """The same responses to the client and the local twin; their (observation, reward, done) per turn."""
    remote, here = [], []
    for step in range(turns):
        action = testing.expert_or_random(local, step)
        observation, reward, terminated, truncated, _ = local.step(action)
        here.append((observation, reward, terminated))
        remote.append(client.step(action))
        if terminated or truncated:
            break
    return remote, here


class ALFWorldClient:
    """AgentGym's ALFWorld client: ``id`` envs, ``game`` episodes, the action list from the reply."""

    def __init__(self, base: str):
        self.base = base
        created = requests.post(f"{base}/create", timeout=TIMEOUT)
        assert created.status_code == 200, created.text
        self.env_id = created.json()["id"]

    def reset(self, game: int) -> str:
        reply = _post(f"{self.base}/reset", {"game": game, "world_type": "Text", "id": self.env_id})
        return f"{reply['observation']}\nAVAILABLE ACTIONS: {','.join(reply['available_actions'])}"

    def step(self, action: str) -> tuple[str, float, bool]:
        reply = _post(f"{self.base}/step", {"action": action, "id": self.env_id})
        assert isinstance(reply["available_actions"], list)
        return reply["observation"], reply["reward"], reply["done"]


class WebShopClient:
    """AgentGym's WebShop client: the bare env number, ``env_idx``, ``session_id`` episodes, ``state``."""

    def __init__(self, base: str):
        self.base = base
        created = requests.post(f"{base}/create", timeout=TIMEOUT)
        assert created.status_code == 200, created.text
        self.env_id = created.json()

    def reset(self, idx: int) -> None:
        _post(f"{self.base}/reset", {"session_id": idx, "env_idx": self.env_id})

    def observe(self) -> Any:
        return _observation(self.base, self.env_id)

    def step(self, action: str) -> tuple[str, float, bool]:
        reply = _post(f"{self.base}/step", {"action": action, "env_idx": self.env_id})
        return reply["state"], reply["reward"], reply["done"]


class LMRLGymClient:
    """AgentGym's LMRL-Gym clients (Maze, Wordle): ``id`` from ``/create``, ``game`` / ``seed`` episodes, the action
    after ``Action:``; Maze puts its own rules before the server's first observation, Wordle writes its rules with
    the vocabulary from ``GET /filtered_vocab``."""

    def __init__(self, base: str, episode_key: str, rules: str):
        self.base, self.episode_key, self.rules = base, episode_key, rules
        created = requests.post(f"{base}/create", timeout=TIMEOUT)
        assert created.status_code == 200, created.text
        self.env_id = created.json()["id"]

    def vocabulary(self) -> list[str]:
        response = requests.get(f"{self.base}/filtered_vocab?id={self.env_id}", timeout=TIMEOUT)
        assert response.status_code == 200, response.text
        return response.json()

    def reset(self, index: int) -> str:
        reply = _post(f"{self.base}/reset", {self.episode_key: index, "id": self.env_id})
        if self.episode_key == "game":  # Maze: the client's rules, then the server's description
            return self.rules + "\n" + reply["observation"]
        return self.rules.replace("{{vocab}}", "\n".join(self.vocabulary()))  # Wordle: the client's own text

    def step(self, action: str) -> tuple[str, float, bool]:
        action = action.split("Action:")[1].strip() if "Action:" in action else action.strip()
        reply = _post(f"{self.base}/step", {"action": action, "id": self.env_id})
        return reply["observation"], reply["reward"], reply["done"]


class SqlGymClient(WebShopClient):
    """AgentGym's SqlGym (BIRD) client: WebShop's shape (the bare env number, ``env_idx``, ``state``) with
    ``item_id`` episodes, and the SQL cut out of the last ```` ```sql ```` block on the client side."""

    def reset(self, item: int) -> None:
        _post(f"{self.base}/reset", {"item_id": item, "env_idx": self.env_id})

    def step(self, response: str) -> tuple[str, float, bool]:
        return super().step(response.split("```sql")[-1].split("```")[0].strip())


# ---- what each client sees at the start and at the end ------------------------------------------------------------
def reset_returns_the_first_observation(client: Any, item: int, first: str, info: dict[str, Any]) -> None:
    """ALFWorld, Maze, Wordle: ``/reset``'s reply is the text the client shows first."""
    assert client.reset(item) == first  # (Maze, Wordle: the rules appear once, as the client shows them)


def reset_then_observe(client: Any, item: int, first: str, info: dict[str, Any]) -> None:
    """SearchQA, WebShop, the tool envs, SqlGym: ``/reset``, then the first text from ``GET /observation``."""
    client.reset(item)
    assert client.observe() == first


def sciworld_start(client: Any, item: int, first: str, info: dict[str, Any]) -> None:
    """SciWorld resets by AgentGym's ``data_idx`` and reads the task's name and variation back."""
    from agentgym_envs.sciworld.catalog import agentgym_data_idx

    assert client.reset(agentgym_data_idx(item)) == first
    assert (client.task_name, client.var_num) == (info["sciworld_task"], info["variation"])


def webarena_start(client: Any, item: int, first: str, info: dict[str, Any]) -> None:
    """WebArena: the first text both in ``/reset``'s reply and from ``/observation``; a response without a backtick
    block is answered by the client itself."""
    assert client.reset(item)["observation"] == first and client.observe() == first
    assert client.step("no backticks here") == (WebArenaClient.NO_ACTION, 0.0, False)


def same_turns(remote: list, here: list, local: gym.Env) -> None:
    assert remote == here


def same_turns_to_the_end(remote: list, here: list, local: gym.Env) -> None:
    assert remote == here and here[-1][2]  # the oracle finishes within the budget


def oracle_wins(remote: list, here: list, local: gym.Env) -> None:
    assert remote == here and here[-1][2] and here[-1][1] == 1.0  # the oracle wins through the client


def oracle_solves(remote: list, here: list, local: gym.Env) -> None:
    assert remote == here and here[-1][2] and here[-1][1] > 0  # the oracle solves it through the client


def tool_turns(remote: list, here: list, local: gym.Env) -> None:
    """AgentGym's tool servers reply with the reward so far (their env's ``reward``), ours per step: the oracle
    solves it, and every reply's reward is the sum of ours up to that turn."""
    so_far = np.cumsum([reward for _, reward, _ in here])
    assert [(obs, done) for obs, _, done in remote] == [(obs, done) for obs, _, done in here]
    assert [reward for _, reward, _ in remote] == pytest.approx(list(so_far)) and remote[-1][2] and remote[-1][1] > 0


def sciworld_turns(remote: list, here: list, local: gym.Env) -> None:
    """The SciWorld client's reward is the simulator's score (0-100), ours its change in points."""
    for (obs, score, done), (local_obs, _, local_done) in zip(remote, here, strict=True):
        assert obs == local_obs and done == local_done
    assert score == local.unwrapped._score


def webarena_turns(remote: list, here: list, local: gym.Env) -> None:
    """The WebArena client reports the reward only once the episode has terminated."""
    for (obs, reward, done), (local_obs, local_reward, local_done) in zip(remote, here, strict=True):
        assert obs == local_obs and done == local_done and reward == (local_reward if local_done else 0.0)


def no_live_envs(server: LocalServer) -> None:
    assert server.manager.metrics()["live_envs"] == 0


def unknown_env_vocabulary_is_404(server: LocalServer) -> None:
    response = requests.get(f"{server.url}/filtered_vocab?id=999", timeout=TIMEOUT)
    assert response.status_code == 404


def maze_client(base: str) -> LMRLGymClient:
    from agentgym_envs.maze.env import FIRST_OBSERVATION

    return LMRLGymClient(base, "game", FIRST_OBSERVATION)


def wordle_client(base: str) -> LMRLGymClient:
    from agentgym_envs.wordle.env import FIRST_OBSERVATION

    return LMRLGymClient(base, "seed", FIRST_OBSERVATION)


@dataclass(frozen=True)
class ClientCase:
    """One AgentGym client against ``agentgym serve``: the env it plays, how it starts and what must match."""

    env_id: str
    served: str | list[str]  # LocalServer's argument: a family, or a list of env ids
    client: Callable[[str], Any]  # the server's URL -> the client
    turns: int
    start: Callable[[Any, int, str, dict[str, Any]], None]  # resets the client, checks its first text
    check: Callable[[list, list, gym.Env], None]  # the client's and the local env's (observation, reward, done)
    requires: str | None = None  # the module the env needs
    closes: bool = False  # the client closes its env at the end
    after: Callable[[LocalServer], None] | None = None  # checks the server once the client is done


# AgentGym's tool clients (Weather, Movie, Academia, TODOList, Sheet) speak SearchQA's shape: {"id": 0} to /create
# and the bare env number back, env_idx everywhere, the episode as "id" in /reset, the text as "observation".
TOOL_ENVS = ["Weather", "Movie", "Academia", "TODOList", "Sheet"]
CASES = [
    pytest.param(ClientCase("AgentGym/SciWorld-v0", "sciworld", SciWorldClient, 6, sciworld_start, sciworld_turns,
                            requires="scienceworld", closes=True), id="sciworld"),
    pytest.param(ClientCase("AgentGym/Search-v0", "search", SearchQAClient, 10, reset_then_observe,
                            same_turns_to_the_end, closes=True, after=no_live_envs), id="searchqa"),
    pytest.param(ClientCase("AgentGym/WebArena-Shopping-v0", "webarena", WebArenaClient, 15, webarena_start,
                            webarena_turns, requires="selenium", closes=True), id="webarena"),
    pytest.param(ClientCase("AgentGym/ALFWorld-v0", "alfworld", ALFWorldClient, 30,
                            reset_returns_the_first_observation, same_turns_to_the_end, requires="textworld"),
                 id="alfworld"),
    pytest.param(ClientCase("AgentGym/WebShop-v0", "webshop", WebShopClient, 15, reset_then_observe, same_turns),
                 id="webshop"),
    pytest.param(ClientCase("AgentGym/Maze-v0", "maze", maze_client, 15, reset_returns_the_first_observation,
                            oracle_wins, after=unknown_env_vocabulary_is_404), id="maze"),
    pytest.param(ClientCase("AgentGym/Wordle-v0", "wordle", wordle_client, 15, reset_returns_the_first_observation,
                            oracle_wins, requires="wordfreq", after=unknown_env_vocabulary_is_404), id="wordle"),
    *(pytest.param(ClientCase(f"AgentGym/{name}-v0", [f"AgentGym/{name}-v0"], SearchQAClient, 12, reset_then_observe,
                              tool_turns), id=name.lower()) for name in TOOL_ENVS),
    pytest.param(ClientCase("AgentGym/BIRD-v0", ["AgentGym/BIRD-v0"], SqlGymClient, 12, reset_then_observe,
                            oracle_solves), id="sqlgym"),
]


def test_a_tool_task_won_before_finish_reads_as_won_in_the_last_reply() -> None:
    """A Weather question whose tool result equals the gold is won before the oracle's ``finish``: that step's reward
    is 0 here, but AgentGym's server replies with the reward so far, and AgentGym-RL trains on the last reply's."""
    env_id = "AgentGym/Weather-v0"
    local = gym.make(env_id)
    won_early = None
    for item in agentgym_envs.get_task(env_id).split("test"):
        local.reset(options={"item_id": item})
        rewards = []
        for _ in range(12):
            _, reward, terminated, truncated, _ = local.step(local.unwrapped.oracle_action())
            rewards.append(reward)
            if terminated or truncated:
                break
        if rewards[-1] == 0.0 and sum(rewards) == 1.0:
            won_early = item
            break
    assert won_early is not None
    with LocalServer([env_id]) as server:
        client = SearchQAClient(server.url)
        first, info = local.reset(options={"item_id": won_early})
        reset_then_observe(client, won_early, first, info)
        remote, here = _play_both(client, local, 12)
        client.close()
    local.close()
    assert here[-1][1] == 0.0 and remote[-1][1] == 1.0 and remote[-1][2]


@pytest.mark.parametrize("case", CASES)
def test_agentgym_client_plays_like_the_local_env(case: ClientCase) -> None:
    """The client's episode through ``agentgym serve`` matches the same episode played on a local twin of the env."""
    if case.requires:
        pytest.importorskip(case.requires)
    item = agentgym_envs.get_task(case.env_id).split("test")[0]
    with LocalServer(case.served) as server:
        client, local = case.client(server.url), gym.make(case.env_id)
        try:
            first, info = local.reset(seed=0, options={"item_id": item})
            case.start(client, item, first, info)
            remote, here = _play_both(client, local, case.turns)
            case.check(remote, here, local)
            if case.closes:
                client.close()
        finally:
            local.close()
        if case.after is not None:
            case.after(server)
