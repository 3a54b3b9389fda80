"""Evaluation: Avg@K / Pass@K by hand, every agent type (oracle, random, tiny HF model, fake OpenAI server),
resume after an interruption, bad input, trajectory logs of training, and the plots."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import agentgym_envs  # noqa: E402, F401
from agentgym_envs.cli import main  # noqa: E402
from agentgym_envs.core.tasks import TaskSpec  # noqa: E402
from agentgym_envs.evaluation import (  # noqa: E402
    EvalError,
    avg_at_k,
    evaluate,
    pass_at_k,
    summarize,
)
from agentgym_envs.agents import OracleAgent, make_agent  # noqa: E402
from agentgym_envs.evaluation.metrics import format_table, summarize_run  # noqa: E402
from agentgym_envs.evaluation.plots import plot_run  # noqa: E402
from fake_chat import FakeChatServer  # noqa: E402

DEPTH1 = "AgentGym/TextCraft-Depth1-v0"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
RECORD_FIELDS = {"env_id", "subtask", "item_id", "sample", "max_turns", "agent", "messages", "actions", "rewards",
                 "valid", "return", "turns", "tokens", "info", "timing", "time"}


def record(item: int, success: bool, sample: int = 0, turns: int = 2, tokens: int | None = None,
           subtask: str = "A", env_id: str = "X") -> dict:
    return {"env_id": env_id, "subtask": subtask, "item_id": item, "sample": sample, "max_turns": 5,
            "return": float(success), "turns": turns, "tokens": tokens,
            "info": {"success": success, "score": float(success), "stop_reason": "terminated"}}


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def assert_png(path: Path, min_side: int = 100) -> None:
    from PIL import Image

    assert path.read_bytes()[:8] == PNG_MAGIC
    with Image.open(path) as image:
        image.verify()
    with Image.open(path) as image:
        assert min(image.size) >= min_side
        assert len(image.convert("RGB").getcolors(maxcolors=1 << 20)) > 20  # lines and text, not a blank canvas


# ---- metrics ------------------------------------------------------------------------------------
def test_avg_and_pass_at_k_match_hand_computed_values() -> None:
    samples = {"a": [True, False, False, True], "b": [False] * 4, "c": [True] * 4}
    assert avg_at_k(samples.values()) == pytest.approx((0.5 + 0 + 1) / 3)
    assert pass_at_k(samples.values()) == pytest.approx(2 / 3)
    records = [record(i, s, sample=k, subtask="A" if i < 2 else "B", turns=k + 1, tokens=10 * (k + 1))
               for i, successes in enumerate(samples.values()) for k, s in enumerate(successes)]
    metrics = summarize(records)
    assert (metrics["items"], metrics["episodes"], metrics["k"]) == (3, 12, 4)
    assert metrics["success"] == pytest.approx(6 / 12)
    assert metrics["avg_at_k"] == pytest.approx(0.5) and metrics["pass_at_k"] == pytest.approx(2 / 3)
    assert metrics["turns"] == pytest.approx(2.5) and metrics["tokens"] == pytest.approx(25.0)
    table = summarize_run(records)[0]["subtasks"]
    assert table["A"]["avg_at_k"] == pytest.approx(0.25) and table["A"]["pass_at_k"] == pytest.approx(0.5)
    assert table["B"]["avg_at_k"] == pytest.approx(1.0) and table["B"]["items"] == 1
    assert list(table) == ["A", "B", "overall"]


def test_avg_at_k_weights_items_not_episodes_when_sample_counts_differ() -> None:
    records = [record(0, True, 0), record(0, False, 1), record(1, False, 0)]
    metrics = summarize(records)
    assert metrics["success"] == pytest.approx(1 / 3)  # over episodes
    assert metrics["avg_at_k"] == pytest.approx((0.5 + 0.0) / 2)  # over items
    assert metrics["pass_at_k"] == pytest.approx(0.5)
    assert metrics["tokens"] is None  # scripted agents have no token counts


def test_table_looks_like_the_papers() -> None:
    records = [record(i, i % 2 == 0, sample=k, subtask=f"Depth{1 + i % 2}") for i in range(4) for k in range(2)]
    text = format_table(summarize_run(records)[0])
    lines = text.splitlines()
    assert "K=2" in lines[0] and "max turns 5" in lines[0]
    header = next(line for line in lines if line.startswith("sub-task"))
    assert "Avg@2" in header and "Pass@2" in header and "success %" in header
    assert any(line.startswith("Depth1") and "100.00" in line for line in lines)
    assert lines[-1].startswith("overall") and "50.00" in lines[-1] and set(lines[-2]) == {"-"}  # the footer


def test_intervals_and_p_values_match_the_plain_numpy_computation() -> None:
    """scipy.stats' percentile bootstrap and sign-flip test give what resampling items by hand gives."""
    import random

    import numpy as np

    from agentgym_envs.evaluation.metrics import compare_success, success_interval

    draw = random.Random(1)
    before = {item: [draw.random() < 0.3 for _ in range(4)] for item in range(33)}
    after = {item: [draw.random() < 0.45 for _ in range(4)] for item in range(33)}
    rates = np.array([np.mean(before[item]) for item in range(33)])
    changes = np.array([np.mean(after[item]) - np.mean(before[item]) for item in range(33)])
    rng = np.random.default_rng(0)
    means = rates[rng.integers(0, 33, size=(10_000, 33))].mean(axis=1)
    interval = success_interval(before)
    assert interval["mean"] == pytest.approx(rates.mean())
    assert (interval["low"], interval["high"]) == pytest.approx(tuple(np.percentile(means, [2.5, 97.5])), abs=0.02)
    rng = np.random.default_rng(0)
    changed = changes[rng.integers(0, 33, size=(10_000, 33))].mean(axis=1)
    flipped = (changes * rng.choice([-1.0, 1.0], size=(10_000, 33))).mean(axis=1)
    p_value = (1 + np.sum(np.abs(flipped) >= abs(changes.mean()) - 1e-12)) / 10_001
    comparison = compare_success(before, after)
    assert comparison["difference"] == pytest.approx(changes.mean())
    expected_interval = tuple(np.percentile(changed, [2.5, 97.5]))
    assert (comparison["low"], comparison["high"]) == pytest.approx(expected_interval, abs=0.02)
    assert comparison["p_value"] == pytest.approx(p_value, abs=0.01)
    # few items: every sign pattern is enumerated, so p is exact (3 items all better: 2 of 8 patterns as extreme)
    assert compare_success({1: [False], 2: [False], 3: [False]}, {1: [True], 2: [True], 3: [True]})["p_value"] == 0.25


# ---- scripted agents, resume ----------------------------------------------------------------------
def test_limit_spreads_over_the_sub_tasks(tmp_path) -> None:
    """--limit N of a family-wide id evaluates every sub-task (TextCraft test: depth 1-4 with 31/41/25/3 items)."""
    spec = agentgym_envs.get_task("AgentGym/TextCraft-v0")
    by_depth = {depth: agentgym_envs.get_task(f"AgentGym/TextCraft-Depth{depth}-v0").split("test")
                for depth in range(1, 5)}
    for limit, counts in ((4, [1, 1, 1, 1]), (8, [2, 2, 2, 2]), (14, [4, 4, 3, 3]), (1000, [31, 41, 25, 3])):
        items = spec.first_items("test", limit)
        assert [len(set(items) & set(by_depth[depth])) for depth in range(1, 5)] == counts
        assert items == [item for item in spec.split("test") if item in items]  # in split order
        assert all(set(items) & set(by_depth[depth][: count]) == set(by_depth[depth][: count])
                   for depth, count in zip(range(1, 5), counts))  # each sub-task's first items
    assert agentgym_envs.get_task(DEPTH1).first_items("test", 3) == agentgym_envs.get_task(DEPTH1).split("test")[:3]
    assert main(["eval", "--env", "AgentGym/TextCraft-v0", "--agent", "oracle", "--limit", "4", "--out",
                 str(tmp_path / "mixed"), "--no-progress"]) == 0
    summary = json.loads((tmp_path / "mixed" / "summary.json").read_text())
    assert {"Depth1", "Depth2", "Depth3", "Depth4"} <= set(summary["results"][0]["subtasks"])


def test_oracle_eval_on_the_command_line_with_several_turn_budgets(tmp_path, capsys) -> None:
    out = tmp_path / "oracle"
    code = main(["eval", "--env", DEPTH1, "--agent", "oracle", "--limit", "3", "--max-turns", "1", "10",
                 "--out", str(out), "--no-progress"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "Avg@1" in printed and "Pass@1" in printed and "success % by max turns" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] and summary["episodes"] == 6
    by_budget = {e["max_turns"]: e["subtasks"]["overall"] for e in summary["results"]}
    assert by_budget[10]["success"] == 1.0 and by_budget[10]["pass_at_k"] == 1.0
    assert by_budget[1]["success"] == 0.0  # no depth-1 goal is one action away
    records = read_jsonl(out / "trajectories.jsonl")
    assert len(records) == 6 and all(RECORD_FIELDS <= set(r) for r in records)
    solved = next(r for r in records if r["max_turns"] == 10)
    assert solved["subtask"] == "Depth1" and solved["agent"] == "oracle"
    assert len(solved["actions"]) == len(solved["rewards"]) == solved["turns"]
    assert sum(solved["rewards"]) == pytest.approx(1.0) and solved["info"]["success"] is True
    roles = [m["role"] for m in solved["messages"]]
    # AgentGym's opening: instruction, acknowledgement, first observation; then the turns
    assert roles[:3] == ["user", "assistant", "user"] and solved["messages"][1]["content"].startswith("OK.")
    assert roles[3::2] == ["assistant"] * solved["turns"] and roles[4::2] == ["user"] * (solved["turns"] - 1)
    assert solved["final_observation"].startswith("Crafted")  # the env's verdict on the last action
    assert "Crafting commands" in solved["messages"][2]["content"]
    sidecar = json.loads((out / "plots" / "plots.json").read_text())
    line = sidecar["figures"]["turn_scaling.png"]["Success vs turn budget"]["TextCraft-Depth1"]
    assert line == {"x": [1.0, 10.0], "y": [0.0, 100.0]}
    assert_png(out / "plots" / "turn_scaling.png")


def test_random_agent_samples_k_times_and_is_reproducible(tmp_path) -> None:
    reports = []
    for name in ("first", "second"):
        agent = make_agent("random", seed=3)
        reports.append(evaluate(agent, [DEPTH1], tmp_path / name, n_samples=3, max_turns=[8], limit=4, progress=False))
        agent.close()
    overall = reports[0].results[0]["subtasks"]["overall"]
    assert overall["k"] == 3 and overall["episodes"] == 12
    assert overall["avg_at_k"] == pytest.approx(overall["success"])  # every item has all K samples
    assert overall["pass_at_k"] >= overall["avg_at_k"]
    first, second = (read_jsonl(tmp_path / n / "trajectories.jsonl") for n in ("first", "second"))
    assert [r["actions"] for r in first] == [r["actions"] for r in second]
    assert len({tuple(r["actions"]) for r in first if r["item_id"] == first[0]["item_id"]}) > 1  # samples differ


class CountingAgent(OracleAgent):
    """The oracle, counting the episodes it plays and interrupting itself after ``stop_after`` of them."""

    def __init__(self, stop_after: int | None = None):
        self.played: list[tuple] = []
        self.stop_after = stop_after

    def begin(self, episodes) -> None:
        if self.stop_after is not None and len(self.played) >= self.stop_after:
            raise KeyboardInterrupt
        self.played += [episode.start.key for episode in episodes]


def test_an_interrupted_run_keeps_its_episodes_and_resumes_where_it_stopped(tmp_path) -> None:
    out = tmp_path / "run"
    interrupted = CountingAgent(stop_after=2)
    with pytest.raises(KeyboardInterrupt):
        evaluate(interrupted, [DEPTH1], out, n_samples=2, limit=3, max_turns=[10], progress=False)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] == 2 and summary["expected_episodes"] == 6 and not summary["complete"]
    with open(out / "trajectories.jsonl", "a", encoding="utf-8") as handle:
        handle.write('{"env_id": "cut off by a cra')  # a write interrupted mid-line is ignored
    resumed = CountingAgent()
    report = evaluate(resumed, [DEPTH1], out, n_samples=2, limit=3, max_turns=[10], progress=False)
    assert len(resumed.played) == 4 and not set(resumed.played) & set(interrupted.played)
    assert report.complete and report.results[0]["subtasks"]["overall"]["episodes"] == 6
    again = CountingAgent()
    evaluate(again, [DEPTH1], out, n_samples=2, limit=3, max_turns=[10], progress=False)
    assert again.played == []  # nothing left to do


def test_a_run_folder_of_another_agent_is_not_mixed_in(tmp_path) -> None:
    evaluate(make_agent("oracle"), [DEPTH1], tmp_path, limit=1, progress=False)
    with pytest.raises(EvalError, match="another agent"):
        evaluate(make_agent("random"), [DEPTH1], tmp_path, limit=1, progress=False)


def test_a_folder_of_other_settings_is_refused_before_the_agent_loads(tmp_path, monkeypatch, capsys) -> None:
    """`agentgym eval` names each differing setting and never loads the model for a refusal (issue 49)."""
    from agentgym_envs.evaluation import commands

    out = tmp_path / "run"
    (out).mkdir()
    model = {"kind": "model", "model": "/m", "weights": "abc", "temperature": 0.0, "engine": "hf",
             "max_turn_tokens": 256, "max_context_tokens": 4096, "bf16": False}
    (out / "run.json").write_text(json.dumps({"agent": model, "split": "test"}))

    class Loaded(Exception):
        pass

    def load(args):
        raise Loaded

    monkeypatch.setattr(commands, "make_eval_agent", load)
    command = ["eval", "--model", "/m", "--env", DEPTH1, "--out", str(out), "--no-progress"]
    assert main([*command, "--n-samples", "4", "--max-turn-tokens", "64", "--split", "train"]) == 2
    error = capsys.readouterr().err
    assert "temperature: 0.0 -> 1.0" in error and "max_turn_tokens: 256 -> 64" in error
    assert "split: test -> train" in error and "engine" not in error
    with pytest.raises(Loaded):  # the same settings pass (the agent then checks the weights)
        main(command)
    assert main(["eval", "--agent", "random", "--env", DEPTH1, "--out", str(out), "--no-progress"]) == 2
    assert "kind: model -> random" in capsys.readouterr().err


# ---- a local HF model through run_rollout --------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory) -> Path:
    import torch
    from tiny_model import save_tiny

    torch.set_num_threads(1)
    return save_tiny(tmp_path_factory.mktemp("tiny") / "model")


def test_tiny_hf_model_is_evaluated_in_batches_through_the_model_agent(tmp_path, tiny_model_dir, monkeypatch,
                                                                        capsys) -> None:
    from agentgym_trl.agent import ModelAgent

    calls = []
    original = ModelAgent.begin

    def spy(self, episodes):
        calls.append(len(episodes))
        return original(self, episodes)

    monkeypatch.setattr(ModelAgent, "begin", spy)
    out = tmp_path / "model"
    code = main(["eval", "--model", str(tiny_model_dir), "--env", DEPTH1, "--limit", "2", "--n-samples", "2",
                 "--max-turns", "2", "--max-turn-tokens", "12", "--max-context-tokens", "2048", "--batch-size", "4",
                 "--out", str(out), "--no-progress"])
    assert code == 0
    assert calls == [4]  # one batched rollout for the 4 episodes
    assert "episodes sampled with HF generate" in capsys.readouterr().err  # the machine's choice, said once
    records = read_jsonl(out / "trajectories.jsonl")
    first, second = agentgym_envs.get_task(DEPTH1).split("test")[:2]
    assert sorted((r["item_id"], r["sample"]) for r in records) == [(first, 0), (first, 1), (second, 0), (second, 1)]
    for r in records:
        assert RECORD_FIELDS <= set(r) and r["agent"] == "model" and r["subtask"] == "Depth1"
        assert r["turns"] == 2 and r["tokens"] > 0 and len(r["rewards"]) == len(r["actions"]) == 2
        assert r["info"]["stop_reason"] == "max_turns" and r["timing"]["batch_size"] == 4
        # AgentGym's opening (instruction, acknowledgement, first observation), two turns, and the env's verdict
        assert [m["role"] for m in r["messages"]] == ["user", "assistant", "user", "assistant", "user", "assistant"]
        assert r["prompt_messages"] == 3 and [r["messages"][3]["content"], r["messages"][5]["content"]] == r["actions"]
        assert r["final_observation"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["agent"]["kind"] == "model" and summary["agent"]["temperature"] == 1.0  # K > 1 samples
    assert summary["results"][0]["subtasks"]["overall"]["tokens"] > 0


def test_a_run_folder_of_other_weights_under_the_same_path_is_refused(tmp_path, tiny_model_dir, capsys) -> None:
    """Retrained into the same folder, a model is another agent: its rerun must not report the old weights' results."""
    import shutil

    from tiny_model import save_tiny

    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    command = ["eval", "--model", str(model), "--env", DEPTH1, "--limit", "1", "--max-turns", "1",
               "--max-turn-tokens", "8", "--max-context-tokens", "2048", "--out", str(tmp_path / "run"),
               "--no-progress"]
    assert main(command) == 0
    assert main(command) == 0  # the same weights: the finished run is reused
    save_tiny(model, seed=3)  # "retrained" into the same folder
    capsys.readouterr()
    assert main(command) != 0
    error = capsys.readouterr().err
    assert "differs in weights" in error.strip().splitlines()[-1] and "Traceback" not in error


def test_training_with_log_trajectories_writes_episodes_and_plots(tmp_path, capsys) -> None:
    import torch
    from tiny_model import tiny_model, tiny_tokenizer

    from agentgym_trl import AgentGRPOConfig, AgentGRPOTrainer

    torch.set_num_threads(1)
    torch.manual_seed(0)
    tokenizer = tiny_tokenizer("chatml")
    args = AgentGRPOConfig(output_dir=str(tmp_path / "train"), env_ids=[DEPTH1], max_turns_schedule="0:1,1:2",
                           max_turn_tokens=8, max_context_tokens=1024, per_device_train_batch_size=4,
                           num_generations=4, max_items_per_env=4, max_steps=2, beta=0.0, save_strategy="no",
                           report_to="none", seed=0, use_cpu=True, dataloader_num_workers=0, truncated_turn="step",
                           log_trajectories=True, metrics_file="agent_metrics.jsonl")
    AgentGRPOTrainer(tiny_model(tokenizer), args=args, processing_class=tokenizer).train()
    run = tmp_path / "train"
    records = read_jsonl(run / "trajectories.jsonl")
    assert len(records) == 8 and {r["step"] for r in records} == {1, 2}  # the steps the metrics are logged at
    metrics = {row["step"]: row for row in read_jsonl(run / "agent_metrics.jsonl") if "agent/max_turns" in row}
    assert all(metrics[r["step"]]["agent/max_turns"] == r["max_turns"] for r in records)
    assert [r["max_turns"] for r in records] == [1] * 4 + [2] * 4  # the curriculum's budget per step
    # the budget is the env's limit, so an episode it ends says so (step 2's budget of 2 turns: all used)
    assert metrics[2]["agent/budget_exhausted_frac"] == pytest.approx(
        sum(r["info"]["stop_reason"] == "max_turns" for r in records[4:]) / 4)
    assert all(r["subtask"] == "Depth1" and r["mode"] == "train" for r in records)
    assert all(r["messages"][0]["role"] == "user" and r["tokens"] > 0 for r in records)
    assert sorted(r["sample"] for r in records[:4]) == [0, 1, 2, 3]  # one GRPO group of 4 rollouts of an item

    assert main(["plot", str(run)]) == 0 and main(["view", str(run)]) == 0
    assert "<!DOCTYPE html>" in (run / "trajectories.html").read_text()
    sidecar = json.loads((run / "plots" / "plots.json").read_text())["figures"]
    turns = sidecar["training_curves.png"]["Turn budget vs turns used"]
    assert turns["turn budget"]["y"] == [1.0, 2.0] and set(turns) == {"turn budget", "turns used"}
    assert turns["turn budget"]["x"] == [1.0, 2.0]
    assert set(sidecar["training_curves.png"]) == {"Reward and success", "Turn budget vs turns used",
                                                   "Response length", "Rollout time", "Loss, KL and entropy"}
    assert_png(run / "plots" / "training_curves.png", min_side=400)


# ---- an OpenAI-compatible endpoint -------------------------------------------------------------------
def test_openai_compatible_endpoint_gets_the_whole_conversation(tmp_path) -> None:
    out = tmp_path / "endpoint"
    with FakeChatServer() as server:
        code = main(["eval", "--endpoint", server.url, "--model", "fake-model", "--api-key", "k3y", "--env", DEPTH1,
                     "--limit", "2", "--max-turns", "3", "--temperature", "0.7", "--out", str(out), "--no-progress"])
    assert code == 0
    assert len(server.requests) == 6  # 2 episodes x 3 turns
    first, third = server.requests[0], server.requests[2]
    assert first["path"] == "/v1/chat/completions" and first["model"] == "fake-model" and first["temperature"] == 0.7
    assert [m["role"] for m in first["messages"]] == ["user", "assistant", "user"]  # AgentGym's opening
    assert [m["role"] for m in third["messages"]] == ["user", "assistant", "user"] + ["assistant", "user"] * 2
    assert "Crafting commands" in first["messages"][2]["content"]
    assert {name.lower(): value for name, value in server.headers[0].items()}["authorization"] == "Bearer k3y"
    records = read_jsonl(out / "trajectories.jsonl")
    assert [r["tokens"] for r in records] == [21, 21] and all(r["actions"][0].endswith("inventory") for r in records)
    assert all(r["valid"] == [True, True, True] and not r["info"]["success"] for r in records)


def test_an_endpoint_reply_cut_at_max_tokens_is_a_cut_turn(tmp_path) -> None:
    """Issue 49: a reply the endpoint ended at ``max_tokens`` (``finish_reason`` "length") is marked in the record's
    ``cut`` (the viewer shows it), and still played."""
    out = tmp_path / "cut"
    with FakeChatServer(finish_reason="length") as server:
        assert main(["eval", "--endpoint", server.url, "--model", "m", "--env", DEPTH1, "--limit", "1",
                     "--max-turns", "2", "--out", str(out), "--no-progress"]) == 0
    (record,) = read_jsonl(out / "trajectories.jsonl")
    assert record["cut"] == [1, 2] and record["parsed_actions"] == ["inventory", "inventory"]


def test_eval_counts_cut_turns_and_warns_with_the_flag_to_raise(tmp_path, capsys) -> None:
    """Issue 62: every reply cut at max_tokens, and eval printed a normal table. The cut turns are in summary.json
    and the table, and a warning names --max-turn-tokens; a run without cut turns has no warning."""
    out = tmp_path / "cut"
    with FakeChatServer(finish_reason="length") as server:
        assert main(["eval", "--endpoint", server.url, "--model", "m", "--env", DEPTH1, "--limit", "2",
                     "--max-turns", "3", "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr()
    overall = json.loads((out / "summary.json").read_text())["results"][0]["subtasks"]["overall"]
    assert overall["cut_turns"] == 6 and overall["cut_episodes"] == 2
    header, *_, footer = [line for line in printed.out.splitlines() if line.startswith(("sub-task", "overall"))]
    assert header.split()[-2:] == ["cut", "turns"] and footer.split()[-1] == "6"
    assert "6 of 6 replies were cut at 256 tokens" in printed.err and "--max-turn-tokens" in printed.err
    with FakeChatServer() as server:
        assert main(["eval", "--endpoint", server.url, "--model", "m", "--env", DEPTH1, "--limit", "1",
                     "--max-turns", "1", "--out", str(tmp_path / "whole"), "--no-progress"]) == 0
    printed = capsys.readouterr()
    assert "warning" not in printed.err and printed.out.count("overall") == 1


def test_eval_sends_its_seed_to_the_endpoint(tmp_path) -> None:
    """Issue 62: --seed was not sent, so an endpoint's Avg@K at T = 1 could not be repeated. Every request carries a
    seed drawn from (--seed, item, sample, turn): a rerun sends the same ones, an item's K samples differ."""
    def seeds(out: str, seed: str) -> list[int]:
        with FakeChatServer() as server:
            assert main(["eval", "--endpoint", server.url, "--model", "m", "--env", DEPTH1, "--limit", "1",
                         "--n-samples", "2", "--max-turns", "2", "--seed", seed, "--out", str(tmp_path / out),
                         "--no-progress"]) == 0
        return sorted(request["seed"] for request in server.requests)

    first = seeds("a", "3")
    assert len(set(first)) == 4 and first == seeds("b", "3") and first != seeds("c", "4")
    assert json.loads((tmp_path / "a" / "run.json").read_text())["agent"]["seed"] == 3


def test_concurrent_episodes_against_an_endpoint(tmp_path) -> None:
    out = tmp_path / "concurrent"
    argv = ["eval", "--endpoint", "URL", "--model", "m", "--env", DEPTH1, "--limit", "6", "--max-turns", "2",
            "--concurrency", "3", "--out", str(out), "--no-progress"]
    with FakeChatServer(delay=0.2) as server:
        assert main([server.url if arg == "URL" else arg for arg in argv]) == 0
    assert len(server.requests) == 12 and server.most_in_flight == 3  # three episodes at a time, never more
    records = read_jsonl(out / "trajectories.jsonl")
    assert sorted(r["item_id"] for r in records) == sorted(agentgym_envs.get_task(DEPTH1).split("test")[:6])
    assert all(r["actions"] == ["Thought: look.\n\nAction:\ninventory"] * 2 for r in records)


def test_a_failing_concurrent_batch_keeps_the_episodes_that_ended(tmp_path, capsys) -> None:
    out = tmp_path / "o"
    with FakeChatServer(fail_after=5) as server:  # one turn each: 5 episodes end, then every request fails
        code = main(["eval", "--endpoint", server.url, "--model", "m", "--env", DEPTH1, "--limit", "8",
                     "--max-turns", "1", "--concurrency", "4", "--retries", "0", "--out", str(out), "--no-progress"])
    line = error_line(capsys)
    assert code == 2 and "HTTP 400" in line and "5 episodes saved" in line
    assert len(read_jsonl(out / "trajectories.jsonl")) == 5


def test_an_episode_that_outgrows_the_endpoints_context_ends_and_the_evaluation_goes_on(tmp_path) -> None:
    out = tmp_path / "context"
    with FakeChatServer(fail_after=2, failure="This model's maximum context length is 2048 tokens") as server:
        code = main(["eval", "--endpoint", server.url, "--model", "fake-model", "--env", DEPTH1, "--limit", "2",
                     "--max-turns", "3", "--out", str(out), "--no-progress"])
    assert code == 0
    records = read_jsonl(out / "trajectories.jsonl")
    assert len(records) == 2 and {r["info"]["stop_reason"] for r in records} == {"context"}
    assert [len(r["actions"]) for r in records] == [2, 0]


# ---- bad input: one line, exit code != 0, partial results kept --------------------------------------------
def error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("agentgym: error: ") and "Traceback" not in err[0]
    return err[0]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_model_path_that_does_not_exist(tmp_path, capsys) -> None:
    code = main(["eval", "--model", str(tmp_path / "nope"), "--env", DEPTH1, "--out", str(tmp_path / "o")])
    assert code == 2 and "does not exist" in error_line(capsys)


def test_an_endpoint_that_is_down(tmp_path, capsys) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    code = main(["eval", "--endpoint", url, "--model", "m", "--env", DEPTH1, "--limit", "1",
                 "--out", str(tmp_path / "o"), "--no-progress"])
    assert code == 2 and "cannot reach" in error_line(capsys)


def test_an_endpoint_failing_midway_keeps_the_finished_episodes(tmp_path, capsys) -> None:
    out = tmp_path / "o"
    with FakeChatServer(fail_after=2) as server:
        code = main(["eval", "--endpoint", server.url, "--model", "m", "--env", DEPTH1, "--limit", "3",
                     "--max-turns", "2", "--out", str(out), "--no-progress"])
    line = error_line(capsys)
    assert code == 2 and "HTTP 400" in line and "1 episodes saved" in line
    assert len(read_jsonl(out / "trajectories.jsonl")) == 1


def test_an_env_whose_extra_is_missing(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(TaskSpec, "extra_installed", lambda self: False)
    code = main(["eval", "--agent", "oracle", "--env", "AgentGym/BabyAI-GoTo-v0", "--out", str(tmp_path / "o")])
    assert code == 2 and "pip install 'agentgym-rl[babyai]'" in error_line(capsys)


@pytest.mark.parametrize("args, message", [
    (["--limit", "0"], "has no items"),
    (["--env", "AgentGym/NoSuchEnv-v0"], "unknown env id"),
    (["--n-samples", "0"], "at least 1"),
])
def test_empty_split_and_other_bad_arguments(tmp_path, capsys, args, message) -> None:
    base = ["eval", "--agent", "oracle", "--env", DEPTH1, "--out", str(tmp_path / "o")]
    if "--env" in args:
        base = base[:3] + base[5:]
    assert main(base + args) == 2 and message in error_line(capsys)


def test_view_and_plot_of_a_folder_without_runs(tmp_path, capsys) -> None:
    assert main(["view", str(tmp_path)]) == 2 and "no trajectories" in error_line(capsys)
    assert main(["plot", str(tmp_path)]) == 2 and "agent_metrics.jsonl" in error_line(capsys)
    assert main(["plot", str(tmp_path / "missing")]) == 2 and "no run folder" in error_line(capsys)


# ---- plots of training metrics -----------------------------------------------------------------------------------
def test_a_short_run_is_plotted_as_marked_points() -> None:
    """One to three steps are points with markers (a line of one point draws nothing); long runs are lines."""
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from agentgym_envs.evaluation.plots import MARKED_POINTS, _draw_panel, training_panels

    for steps, marked in ((1, True), (3, True), (MARKED_POINTS + 1, False)):
        rows = [{"step": s + 1, "agent/success": 0.5, "agent/reward": 0.5, "agent/max_turns": 2,
                 "agent/turns_mean": 1.5} for s in range(steps)]
        fig, ax = plt.subplots()
        try:
            _draw_panel(ax, rows, training_panels(rows)[0])
            assert ax.lines and all((line.get_marker() == "o") == marked for line in ax.lines)
        finally:
            plt.close(fig)


def test_training_plots_show_every_metric_and_env(tmp_path) -> None:
    envs = ["AgentGym/TextCraft-v0", "AgentGym/BabyAI-v0"]
    rows = []
    for step in range(1, 7):
        row = {"step": step, "loss": 0.1, "agent/max_turns": 2 if step < 4 else 4, "agent/turns_mean": 1.5 + step / 10,
               "agent/reward": step / 10, "agent/success": step / 12, "agent/model_tokens_mean": 40 + step,
               "agent/generation_s": 3.0, "agent/env_s": 0.2, "agent/rollout_s": 3.3}
        for index, env_id in enumerate(envs):
            row[f"agent/{env_id}/success"] = step / (10 + index)
            row[f"agent/{env_id}/reward"] = step / (10 + index)
        rows.append(row)
    rows.append({"step": 6, "train_runtime": 12.0})  # the trainer's final log line has no agent metrics
    (tmp_path / "agent_metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = plot_run(tmp_path)
    names = {path.name for path in result.files}
    assert names == {"training_curves.png", "reward_and_success.png", "turn_budget_vs_turns_used.png",
                     "response_length.png", "rollout_time.png", "loss_kl_and_entropy.png"}
    for path in result.files:
        assert_png(path)
    overview = result.lines["training_curves.png"]
    outcome = overview["Reward and success"]
    assert set(outcome) == {"reward", "success", "TextCraft success", "TextCraft reward", "BabyAI success",
                            "BabyAI reward"}
    assert outcome["BabyAI success"]["y"] == pytest.approx([step / 11 for step in range(1, 7)])
    assert overview["Turn budget vs turns used"]["turn budget"]["y"] == [2, 2, 2, 4, 4, 4]
    assert overview["Response length"]["model tokens"]["x"] == [1, 2, 3, 4, 5, 6]
    assert set(overview["Rollout time"]) == {"generation", "env steps"}
    assert set(overview["Loss, KL and entropy"]) == {"loss"}  # kl and entropy were not logged: no line
    assert json.loads((tmp_path / "plots" / "plots.json").read_text())["figures"] == result.lines


def test_ctrl_c_on_the_command_line_keeps_the_episodes_and_a_rerun_finishes(tmp_path, capsys, monkeypatch) -> None:
    from agentgym_envs.evaluation import commands

    out = tmp_path / "o"
    argv = ["eval", "--agent", "oracle", "--env", DEPTH1, "--limit", "3", "--out", str(out), "--no-progress"]
    monkeypatch.setattr(commands, "make_agent", lambda name, seed=0: CountingAgent(stop_after=1))
    assert main(argv) == 130
    assert "interrupted; 1 of 3 episodes saved" in error_line(capsys)
    monkeypatch.setattr(commands, "make_agent", lambda name, seed=0: CountingAgent())
    assert main(argv) == 0
    assert len(read_jsonl(out / "trajectories.jsonl")) == 3


WITHOUT_TRAIN_EXTRA = """
import sys
for name in ("torch", "transformers", "trl", "matplotlib"):
    sys.modules[name] = None  # as if the [train] extra were not installed
from agentgym_envs.cli import main
out = sys.argv[1]
assert main(["eval", "--agent", "oracle", "--env", "AgentGym/TextCraft-Depth1-v0", "--limit", "2", "--out", out,
             "--no-progress"]) == 0
assert main(["view", out]) == 0
assert main(["eval", "--model", "default", "--env", "AgentGym/TextCraft-Depth1-v0", "--out", out + "-model"]) == 2
assert main(["plot", out]) == 2
import json, pathlib
train = pathlib.Path(out + "-train")
train.mkdir()
(train / "agent_metrics.jsonl").write_text(json.dumps({"step": 1, "agent/success": 0.5}))
assert main(["plot", str(train)]) == 2
"""


def test_scripted_eval_and_viewer_work_without_the_train_extra(tmp_path) -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", WITHOUT_TRAIN_EXTRA, str(tmp_path / "run")], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("agentgym: error:")]
    assert "pip install 'agentgym-rl[train]'" in errors[0]  # the local model needs the trainer extra
    assert "no run folder" not in errors[1] and "agent_metrics.jsonl" in errors[1]
    assert "plots need matplotlib: pip install 'agentgym-rl[train]'" in errors[2]
    assert (tmp_path / "run" / "trajectories.html").is_file()


def test_sigterm_stops_an_eval_like_ctrl_c(tmp_path) -> None:
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "run"
    command = [sys.executable, "-m", "agentgym_envs.cli", "eval", "--agent", "random", "--env", DEPTH1,
               "--n-samples", "500", "--out", str(out), "--no-progress"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (out / "trajectories.jsonl").is_file() and time.monotonic() < deadline:
            time.sleep(0.1)
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130 and "rerun the same command to resume" in stderr
    summary = json.loads((out / "summary.json").read_text())
    assert 0 < summary["episodes"] < summary["expected_episodes"] == 31 * 500
    assert summary["episodes"] == len(read_jsonl(out / "trajectories.jsonl"))


# ---- credentials in the endpoint URL ---------------------------------------------------------------------
def _saved_text(out: Path) -> str:
    return "".join(path.read_text(encoding="utf-8",
                                  errors="replace") for path in sorted(out.rglob("*")) if path.is_file())


def test_credentials_in_the_endpoint_url_are_sent_properly_and_never_saved_or_printed(tmp_path, capsys) -> None:
    pytest.importorskip("openai")
    with FakeChatServer() as server:
        port = server.url.split(":")[2].split("/")[0]
        user_info = tmp_path / "user-info"
        code = main(["eval", "--endpoint", f"http://bob:sk-X@127.0.0.1:{port}/v1", "--model", "m", "--env", DEPTH1,
                     "--limit", "1", "--max-turns", "1", "--out", str(user_info), "--no-progress"])
        assert code == 0
        query = tmp_path / "query"
        code = main(["eval", "--endpoint", f"http://127.0.0.1:{port}/v1/?api_key=sk-Q&api-version=2", "--model", "m",
                     "--env", DEPTH1, "--limit", "1", "--max-turns", "1", "--out", str(query), "--no-progress"])
        assert code == 0
    headers = {name.lower(): value for name, value in server.headers[0].items()}
    assert headers["authorization"] == "Bearer sk-X"  # user info: the API key, not a Basic header or a path
    assert server.requests[0]["path"] == "/v1/chat/completions"
    assert server.requests[1]["path"] == "/v1/chat/completions?api_key=sk-Q&api-version=2"  # the query intact
    printed = capsys.readouterr()
    for out in (user_info, query):
        saved = _saved_text(out)
        assert "sk-X" not in saved and "bob" not in saved and "sk-Q" not in saved and "api_key" not in saved
        assert json.loads((out / "run.json").read_text())["agent"]["url"].startswith(f"http://127.0.0.1:{port}/v1")
    assert "sk-" not in printed.out + printed.err
    # errors: the URL appears without its credentials
    code = main(["eval", "--endpoint", f"http://bob:sk-X@127.0.0.1:{free_port()}/v1?token=sk-T", "--model", "m",
                 "--env", DEPTH1, "--limit", "1", "--out", str(tmp_path / "down"), "--no-progress"])
    line = error_line(capsys)
    assert code == 2 and "cannot reach" in line and "sk-" not in line and "bob" not in line
    assert "sk-" not in _saved_text(tmp_path / "down")
    # a query the client would change is refused, in one line that does not repeat it
    for url in (f"http://127.0.0.1:{port}/v1?key=sk-A&key=sk-B", f"http://127.0.0.1:{port}/v1?=sk-A",
                f"http://127.0.0.1:{port}/v1#sk-A"):
        code = main(["eval", "--endpoint", url, "--model", "m", "--env", DEPTH1, "--limit", "1",
                     "--out", str(tmp_path / "refused"), "--no-progress"])
        line = error_line(capsys)
        assert code == 2 and "--endpoint" in line and "sk-" not in line, line
