"""``agentgym serve`` answers AgentGym's own env clients (``agentenv.envs.*``).

The clients here make exactly the HTTP calls AgentGym's SciWorld, SearchQA and WebArena clients
make (same paths, body keys, query names, and the same fields read back), written from their
protocol; each plays an episode against a local twin of the env and must see the same text,
rewards and end. The generic ``id``/``data_idx`` client is in test_server.py.
"""

from __future__ import annotations

import re
from typing import Any

import gymnasium as gym
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


def test_agentgym_sciworld_client() -> None:
    pytest.importorskip("scienceworld")
    from agentgym_envs.sciworld.catalog import agentgym_data_idx

    env_id = "AgentGym/SciWorld-v0"
    item = agentgym_envs.get_task(env_id).split("test")[0]
    with LocalServer("sciworld") as server:
        client, local = SciWorldClient(server.url), gym.make(env_id)
        try:
            first, info = local.reset(seed=0, options={"item_id": item})
            assert client.reset(agentgym_data_idx(item)) == first
            assert (client.task_name, client.var_num) == (info["sciworld_task"], info["variation"])
            remote, here = _play_both(client, local, 6)
            # the SciWorld client's reward is the simulator's score (0-100), ours its normalised change
            for (obs, score, done), (local_obs, _, local_done) in zip(remote, here, strict=True):
                assert obs == local_obs and done == local_done
            assert score == local.unwrapped._score
            client.close()
        finally:
            local.close()


def test_agentgym_searchqa_client() -> None:
    env_id = "AgentGym/Search-v0"
    item = agentgym_envs.get_task(env_id).split("test")[0]
    with LocalServer("search") as server:
        client, local = SearchQAClient(server.url), gym.make(env_id)
        try:
            first, _ = local.reset(seed=0, options={"item_id": item})
            client.reset(item)
            assert client.observe() == first
            remote, here = _play_both(client, local, 10)
            assert remote == here and here[-1][2]  # the oracle answers within the budget
            client.close()
        finally:
            local.close()
        assert server.manager.metrics()["live_envs"] == 0


def test_agentgym_webarena_client() -> None:
    pytest.importorskip("selenium")
    env_id = "AgentGym/WebArena-Shopping-v0"
    item = agentgym_envs.get_task(env_id).split("test")[0]
    with LocalServer("webarena") as server:
        client, local = WebArenaClient(server.url), gym.make(env_id)
        try:
            first, _ = local.reset(seed=0, options={"item_id": item})
            assert client.reset(item)["observation"] == first and client.observe() == first
            assert client.step("no backticks here") == (WebArenaClient.NO_ACTION, 0.0, False)
            remote, here = _play_both(client, local, 15)
            for (obs, reward, done), (local_obs, local_reward, local_done) in zip(remote, here, strict=True):
                assert obs == local_obs and done == local_done and reward == (local_reward if local_done else 0.0)
            client.close()
        finally:
            local.close()


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


def test_agentgym_alfworld_client() -> None:
    pytest.importorskip("textworld")
    env_id = "AgentGym/ALFWorld-v0"
    item = agentgym_envs.get_task(env_id).split("test")[0]
    with LocalServer("alfworld") as server:
        client, local = ALFWorldClient(server.url), gym.make(env_id)
        try:
            first, _ = local.reset(seed=0, options={"item_id": item})
            assert client.reset(item) == first
            remote, here = _play_both(client, local, 30)
            assert remote == here and here[-1][2]
        finally:
            local.close()


def test_agentgym_webshop_client() -> None:
    env_id = "AgentGym/WebShop-v0"
    item = agentgym_envs.get_task(env_id).split("test")[0]
    with LocalServer("webshop") as server:
        client, local = WebShopClient(server.url), gym.make(env_id)
        try:
            first, _ = local.reset(seed=0, options={"item_id": item})
            client.reset(item)
            assert client.observe() == first
            remote, here = _play_both(client, local, 15)
            assert remote == here
        finally:
            local.close()


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


@pytest.mark.parametrize("family, env_id, key", [("maze", "AgentGym/Maze-v0", "game"),
                                                 ("wordle", "AgentGym/Wordle-v0", "seed")])
def test_agentgym_lmrlgym_clients(family: str, env_id: str, key: str) -> None:
    if family == "wordle":
        pytest.importorskip("wordfreq")
        from agentgym_envs.wordle.env import FIRST_OBSERVATION
    else:
        from agentgym_envs.maze.env import FIRST_OBSERVATION
    item = agentgym_envs.get_task(env_id).split("test")[0]
    with LocalServer(family) as server:
        client, local = LMRLGymClient(server.url, key, FIRST_OBSERVATION), gym.make(env_id)
        try:
            first, _ = local.reset(seed=0, options={"item_id": item})
            assert client.reset(item) == first  # the rules appear once, as the client shows them
            remote, here = _play_both(client, local, 15)
            assert remote == here and here[-1][2] and here[-1][1] == 1.0  # the oracle wins through the client
        finally:
            local.close()
        response = requests.get(f"{server.url}/filtered_vocab?id=999", timeout=TIMEOUT)
        assert response.status_code == 404


class SqlGymClient(WebShopClient):
    """AgentGym's SqlGym (BIRD) client: WebShop's shape (the bare env number, ``env_idx``, ``state``) with
    ``item_id`` episodes, and the SQL cut out of the last ```` ```sql ```` block on the client side."""

    def reset(self, item: int) -> None:
        _post(f"{self.base}/reset", {"item_id": item, "env_idx": self.env_id})

    def step(self, response: str) -> tuple[str, float, bool]:
        return super().step(response.split("```sql")[-1].split("```")[0].strip())


# AgentGym's tool clients (Weather, Movie, Academia, TODOList, Sheet) speak SearchQA's shape: {"id": 0} to /create
# and the bare env number back, env_idx everywhere, the episode as "id" in /reset, the text as "observation".
@pytest.mark.parametrize("env_id", ["AgentGym/Weather-v0", "AgentGym/Movie-v0", "AgentGym/Academia-v0",
                                    "AgentGym/TODOList-v0", "AgentGym/Sheet-v0", "AgentGym/BIRD-v0"])
def test_agentgym_tool_and_sqlgym_clients(env_id: str) -> None:
    item = agentgym_envs.get_task(env_id).split("test")[0]
    with LocalServer([env_id]) as server:
        client = SqlGymClient(server.url) if env_id.endswith("BIRD-v0") else SearchQAClient(server.url)
        local = gym.make(env_id)
        try:
            first, _ = local.reset(seed=0, options={"item_id": item})
            client.reset(item)
            assert client.observe() == first
            remote, here = _play_both(client, local, 12)
            assert remote == here and here[-1][2] and here[-1][1] > 0  # the oracle solves it through the client
        finally:
            local.close()
