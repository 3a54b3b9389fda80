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
                if k not in WALL_CLOCK_KEYS and not k.endswith(("_s", "_per_second", "outside_model_frac"))
                and "time" not in k}
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
    # the training features: item draws, refills, the oracle prefix, the critic in micro-batches
    "learnability": {"item_draws": "learnability", "beta": 0.0},
    "learnability_dynamic": {"item_draws": "learnability", "dynamic_sampling": True, "beta": 0.0},
    "oracle_prefix": {"oracle_prefix_schedule": "0:2,1:0", "beta": 0.0},
    "oracle_prefix_success": {"oracle_prefix_schedule": "0:2,5:1,9:0", "oracle_prefix_success": 0.01,
                              "oracle_prefix_window": 1, "dynamic_sampling": True, "beta": 0.0},
    "gae_micro_batch": {"advantage_estimator": "gae", "value_head": "shared", "micro_batch_tokens": 64},
    "remax_micro_batch": {"advantage_estimator": "remax", "micro_batch_tokens": 64},
}

# runs that evaluate after training (the evaluation's turn budget: eval_max_turns, else the env's cap)
EVALUATED_RUNS: dict[str, dict[str, Any]] = {"eval_cap": {}, "eval_max_turns": {"eval_max_turns": 2}}

# runs saved after each step and resumed from the first checkpoint: the features' own state round-trips
RESUMED_RUNS: dict[str, dict[str, Any]] = {
    "resumed_features": {"item_draws": "learnability", "oracle_prefix_schedule": "0:2,5:1,9:0",
                         "oracle_prefix_success": 0.01, "oracle_prefix_window": 1, "dynamic_sampling": True,
                         "beta": 0.0},
    "resumed_gae": {"advantage_estimator": "gae", "value_head": "shared", "micro_batch_tokens": 64},
}


def _trained(trainer: Any, resume_from: str | None = None) -> dict[str, Any]:
    """Train, then the logged numbers of each step (and of an evaluation) and the weights' digest."""
    trainer.train(resume_from_checkpoint=resume_from)
    logged = [_without_clock(entry) for entry in trainer.state.log_history]
    if trainer.eval_dataset is not None:
        logged.append(_without_clock(trainer.evaluate()))
    weights = hashlib.sha256()
    for key, tensor in sorted(trainer.model.state_dict().items()):
        weights.update(key.encode())
        weights.update(tensor.detach().float().cpu().numpy().tobytes())
    trainer.close_envs()
    return {"log": logged, "weights": weights.hexdigest()[:16]}


def _checkpoint_state(folder: Path) -> dict[str, Any]:
    """A checkpoint's file names and the features' own state in it (JSON contents, tensors' values)."""
    import torch

    state: dict[str, Any] = {"files": sorted(p.name for p in folder.iterdir())}
    for path in sorted(folder.glob("*.json")):
        if path.name in ("item_estimates.json", "oracle_prefix.json"):
            state[path.name] = json.loads(path.read_text())
    for path in sorted(folder.glob("value_head*")):
        tensors = torch.load(path, map_location="cpu")
        state[path.name] = {k: _digest(v.float().numpy().tolist()) for k, v in sorted(tensors.items())}
    return state


def losses(names: list[str] | None) -> dict[str, Any]:
    """Two steps per trainer configuration: the logged numbers of each step and the weights' digest; for the
    resumed runs also the first checkpoint's feature state and the resumed run's second step."""
    import torch
    from test_trainer import countdown_rows, make_config, make_trainer, tiny_model, tiny_tokenizer  # tests/

    from agentgym_trl import AgentGRPOTrainer

    common = dict(max_steps=2, truncated_turn="step", max_turn_tokens=10)

    def trained(tmp: Path, overrides: dict) -> Any:
        return _trained(make_trainer(tmp, **common, **overrides))

    def evaluated(tmp: Path, overrides: dict) -> Any:
        tokenizer = tiny_tokenizer("chatml")
        return _trained(AgentGRPOTrainer(
            tiny_model(tokenizer), processing_class=tokenizer,
            args=make_config(tmp, **common, per_device_eval_batch_size=8, **overrides),
            train_dataset=countdown_rows(range(12)), eval_dataset=countdown_rows([1, 2])))

    def resumed(tmp: Path, overrides: dict) -> Any:
        first = _trained(make_trainer(tmp, **common, **overrides, save_strategy="steps", save_steps=1))
        checkpoint = Path(tmp, "run", "checkpoint-1")
        saved = _checkpoint_state(checkpoint)
        again = _trained(make_trainer(tmp, **common, **overrides), str(checkpoint))
        return {"first": first, "checkpoint": saved, "resumed": again}

    out: dict[str, Any] = {}
    for runs, play in ((TRAINER_RUNS, trained), (EVALUATED_RUNS, evaluated), (RESUMED_RUNS, resumed)):
        for name, overrides in runs.items():
            if names and name not in names:
                continue
            with tempfile.TemporaryDirectory() as tmp:
                try:
                    out[name] = play(Path(tmp), overrides)
                except Exception as error:  # a run that cannot train here is recorded as such
                    out[name] = f"error: {type(error).__name__}: {error}"[:300]
            torch.set_num_threads(1)
    return out


def compare(old_path: str, new_path: str) -> int:
    old, new = json.loads(Path(old_path).read_text()), json.loads(Path(new_path).read_text())
    differences = 0
    for part in sorted(set(old) & set(new)):  # the parts both files hold
        a, b = old.get(part, {}), new.get(part, {})
        for key in sorted(set(a) | set(b)):  # (wall-clock fields an older fingerprint kept are left out here too)
            if _without_clock(a.get(key)) != _without_clock(b.get(key)):
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
