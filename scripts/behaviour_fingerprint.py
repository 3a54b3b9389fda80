"""A fingerprint of what the project does, to show a refactor changed no behaviour.

Run it on the commit before a refactor and on the refactor, then compare the two JSON files
(``--compare old.json new.json`` names every entry that differs):

* episodes: every registered id, its first test item, played by the oracle and by the seeded
  random agent through the one loop (every record, less its wall-clock fields);
* the server: every family served, AgentGym's /create, /reset and /step replies of each client shape;
* generated data: ``collect``'s rows of a few ids;
* losses: two training steps of a tiny random Qwen2 for each estimator, credit mode and loss
  type, on the test suite's countdown env: the logged loss, grad norm, rewards and advantages
  of each step, and a hash of the weights after.

    PYTHONPATH=.:tests python scripts/behaviour_fingerprint.py --out before.json
    python scripts/behaviour_fingerprint.py --compare before.json after.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

WALL_CLOCK_KEYS = {"seconds", "time", "duration", "elapsed", "wall_s", "started", "finished", "date",
                   "created", "timestamp", "train_runtime", "train_samples_per_second",
                   "train_steps_per_second", "step_time", "total_flos", "agent/outside_model_frac"}


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _without_clock(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_clock(v) for k, v in value.items()
                if k not in WALL_CLOCK_KEYS and not k.endswith("_s") and "time" not in k}
    if isinstance(value, list):
        return [_without_clock(v) for v in value]
    return value


def episodes() -> dict[str, str]:
    """Oracle and random episodes of every id's first test item, as record digests."""
    import agentgym_envs
    from agentgym_envs.agents import make_agent
    from agentgym_envs.evaluation.runner import evaluate

    out: dict[str, str] = {}
    for spec in agentgym_envs.list_tasks():
        if not spec.extra_installed():
            continue
        for name, kwargs in (("oracle", {}), ("random", {"seed": 0})):
            with tempfile.TemporaryDirectory() as tmp:
                try:
                    evaluate(make_agent(name, **kwargs), [spec.env_id], tmp, limit=1, progress=False)
                    lines = Path(tmp, "trajectories.jsonl").read_text().splitlines()
                    out[f"{spec.env_id}/{name}"] = _digest([_without_clock(json.loads(x)) for x in lines])
                except Exception as error:  # an id that cannot play here is recorded as such
                    out[f"{spec.env_id}/{name}"] = f"error: {type(error).__name__}: {error}"[:200]
    return out


def server() -> dict[str, str]:
    """AgentGym-protocol replies of each family-wide id, for the body shapes its clients send."""
    import agentgym_envs
    import gymnasium as gym
    import requests
    from agentgym_envs import testing
    from agentgym_envs.server.app import LocalServer

    out: dict[str, str] = {}
    family_ids = [spec for spec in agentgym_envs.list_tasks() if spec.subtask is None and spec.extra_installed()]
    for spec in family_ids:
        item = spec.split("test")[0]
        replies: list[Any] = []
        try:
            with LocalServer([spec.env_id]) as srv:
                for create_body in (None, {"id": 0}, {"env_id": spec.env_id}):
                    created = requests.post(f"{srv.url}/create", json=create_body, timeout=120).json()
                    replies.append(created)
                number = created["env_idx"] if isinstance(created, dict) else created
                for key in ("data_idx", "idx", "session_id", "item_id", "game", "seed", "id"):
                    body = {key: item, ("env_idx" if key == "id" else "id"): number}
                    replies.append(_without_clock(requests.post(f"{srv.url}/reset", json=body, timeout=120).json()))
                local = gym.make(spec.env_id)
                local.reset(seed=0, options={"item_id": item})
                for turn in range(3):
                    action = testing.expert_or_random(local, turn)
                    local.step(action)
                    reply = requests.post(f"{srv.url}/step", json={"action": action, "id": number}, timeout=120)
                    replies.append(_without_clock(reply.json()))
                local.close()
                replies.append(requests.get(f"{srv.url}/observation?env_idx={number}", timeout=120).json())
                vocab = requests.get(f"{srv.url}/filtered_vocab?id={number}", timeout=120)
                replies.append([vocab.status_code, _digest(vocab.json())])
            out[spec.env_id] = _digest(replies)
        except Exception as error:
            out[spec.env_id] = f"error: {type(error).__name__}: {error}"[:200]
    return out


def generated_data() -> dict[str, str]:
    """``collect``'s dataset rows (oracle, kept on success) of a few ids."""
    from agentgym_envs.collect import collect

    out: dict[str, str] = {}
    for env_id in ("AgentGym/TextCraft-v0", "AgentGym/BabyAI-v0", "AgentGym/Maze-v0", "AgentGym/Weather-v0"):
        rows, counts = collect([env_id], episodes=4, progress=False)
        out[env_id] = _digest(_without_clock([rows, counts]))
    return out


TRAINER_RUNS: dict[str, dict[str, Any]] = {
    "grpo": {},
    "grpo_bnpo": {"loss_type": "bnpo"},
    "grpo_dr_grpo": {"loss_type": "dr_grpo"},
    "grpo_dapo": {"loss_type": "dapo"},
    "grpo_cispo": {"loss_type": "cispo"},
    "grpo_beta": {"beta": 0.05},
    "grpo_per_turn": {"turn_credit": "per_turn"},
    "grpo_step_level": {"turn_credit": "step_level"},
    "grpo_score_delta": {"turn_credit": "per_turn", "turn_reward": "score_delta"},
    "rloo": {"advantage_estimator": "rloo"},
    "remax": {"advantage_estimator": "remax"},
    "reinforce_pp": {"advantage_estimator": "reinforce_pp", "beta": 0.05},
    "reinforce_pp_nokl": {"advantage_estimator": "reinforce_pp", "beta": 0.0},
    "gae_shared": {"advantage_estimator": "gae", "value_head": "shared"},
    "gae_detached": {"advantage_estimator": "gae", "value_head": "detached"},
    "skip_zero": {"skip_zero_advantage": True, "beta": 0.0},
    "dynamic": {"dynamic_sampling": True, "skip_zero_advantage": True, "beta": 0.0},
    "micro_batch": {"micro_batch_tokens": 64},
}


def losses(names: list[str] | None) -> dict[str, Any]:
    """Two steps per trainer configuration: the logged numbers of each step and the weights' digest."""
    import torch
    from test_trainer import make_trainer  # tests/ on sys.path

    out: dict[str, Any] = {}
    for name, overrides in TRAINER_RUNS.items():
        if names and name not in names:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            try:
                trainer = make_trainer(Path(tmp), max_steps=2, truncated_turn="step", max_turn_tokens=10,
                                       **overrides)
                trainer.train()
                logged = [_without_clock(entry) for entry in trainer.state.log_history]
                weights = hashlib.sha256()
                for key, tensor in sorted(trainer.model.state_dict().items()):
                    weights.update(key.encode())
                    weights.update(tensor.detach().float().cpu().numpy().tobytes())
                out[name] = {"log": logged, "weights": weights.hexdigest()[:16]}
                trainer.close_envs()
            except Exception as error:
                out[name] = f"error: {type(error).__name__}: {error}"[:300]
        torch.set_num_threads(1)
    return out


def compare(old_path: str, new_path: str) -> int:
    old, new = json.loads(Path(old_path).read_text()), json.loads(Path(new_path).read_text())
    differences = 0
    for part in sorted(set(old) & set(new)):  # the parts both files hold
        a, b = old.get(part, {}), new.get(part, {})
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                differences += 1
                print(f"{part}/{key}:\n  before {json.dumps(a.get(key))[:400]}\n"
                      f"  after  {json.dumps(b.get(key))[:400]}")
        print(f"{part}: {len(set(a) | set(b))} entries compared")
    print("identical" if differences == 0 else f"entries that differ: {differences}")
    return 1 if differences else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", help="write the fingerprint here")
    parser.add_argument("--parts", default="episodes,server,generated_data,losses")
    parser.add_argument("--runs", default="", help="comma-separated trainer runs (default: all)")
    parser.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"))
    args = parser.parse_args()
    if args.compare:
        return compare(*args.compare)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    import torch

    torch.set_num_threads(1)
    parts = {"episodes": episodes, "server": server, "generated_data": generated_data}
    result: dict[str, Any] = {}
    for part in args.parts.split(","):
        print(f"fingerprint: {part}", flush=True)
        result[part] = losses([r for r in args.runs.split(",") if r]) if part == "losses" else parts[part]()
    Path(args.out).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
