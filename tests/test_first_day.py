"""Issue 37, a newcomer's first day: wrong output, late checks and missing dependencies (items 1, 2, 3, 11, 12, 13)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import gymnasium as gym
import pytest

import agentgym_envs
from agentgym_envs.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]


def requirement_names(extra: str) -> set[str]:
    return {requirement.split(">")[0].split("=")[0].split("<")[0].strip() for requirement in EXTRAS[extra]}


# 1. a folder of another agent's run: one error line, not that run's tables under this agent's command
def test_eval_into_another_agents_run_prints_no_results(tmp_path, capsys) -> None:
    out = str(tmp_path / "run")
    args = ["eval", "--env", "AgentGym/Maze-v0", "--limit", "2", "--out", out, "--no-progress"]
    assert main([*args, "--agent", "oracle"]) == 0
    capsys.readouterr()
    assert main([*args, "--agent", "random"]) == 2
    printed = capsys.readouterr()
    assert printed.out == ""  # none of the oracle's 100.00 rows
    assert "holds a run of another agent" in printed.err and "give another --out" in printed.err
    assert "rerun to resume" not in printed.err and len(printed.err.strip().splitlines()) == 1


# 2 and 3 need the trainer's parser (examples/grpo.py)
@pytest.fixture(scope="module")
def grpo():
    pytest.importorskip("trl")
    from agentgym_trl import train

    return train


def test_report_to_a_missing_integration_is_one_line_at_parse_time(grpo, monkeypatch) -> None:
    from transformers.integrations import integration_utils

    assert "tensorboard" in requirement_names("train")  # what the docs show is installed with the trainer
    monkeypatch.setattr(integration_utils, "is_tensorboard_available", lambda: False)
    with pytest.raises(SystemExit) as stopped:
        grpo.parse_args(["--report_to", "tensorboard"])
    assert str(stopped.value) == ("error: --report_to tensorboard needs the tensorboard package, which is not "
                                  "installed: pip install tensorboard")
    assert grpo.parse_args(["--report_to", "none"])[0].report_to in ("none", ["none"], [])


def test_command_line_budget_replaces_the_yaml_schedule(grpo, capsys) -> None:
    config = str(ROOT / "examples" / "configs" / "babyai.yaml")
    args, _, _ = grpo.parse_args(["--config", config, "--max_turns", "3"])
    assert args.max_turns == 3 and args.max_turns_schedule is None and args.turn_schedule().max_turns == 3
    assert "--max_turns on the command line replaces max_turns_schedule of the --config file" in capsys.readouterr().err
    args, _, _ = grpo.parse_args(["--config", config, "--turn_rounds", "2", "4", "--turn_round_steps", "5"])
    assert args.max_turns_schedule is None and args.turn_rounds == [2, 4]
    args, _, _ = grpo.parse_args(["--config", config])  # the file alone keeps its schedule
    assert args.max_turns_schedule == "0:6,100:13,200:20"
    with pytest.raises(SystemExit, match="give only one of max_turns_schedule, turn_rounds and max_turns"):
        grpo.parse_args(["--max_turns", "3", "--turn_rounds", "2", "4"])  # two on the command line: one line


# 11. a missing extra fails at make (Gymnasium's DependencyNotInstalled), and collect checks datasets first
def test_make_fails_without_the_extra() -> None:
    code = ("import sys; sys.modules['minigrid'] = None\n"
            "import gymnasium as gym, agentgym_envs\n"
            "try:\n"
            "    gym.make('AgentGym/BabyAI-v0')\n"
            "except gym.error.DependencyNotInstalled as error:\n"
            "    print(isinstance(error, agentgym_envs.MissingExtraError), error)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}).stdout
    assert out.startswith("True AgentGym/BabyAI-v0 needs the Python module 'minigrid', which is not installed.")
    assert "pip install 'agentgym-rl[babyai]'" in out


def test_collect_without_datasets_fails_before_playing(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)
    played = []
    monkeypatch.setattr("agentgym_envs.collect.collect", lambda *a, **k: played.append(1))
    out = tmp_path / "data"
    assert main(["collect", "--env", "AgentGym/Maze-v0", "--n", "2", "--out", str(out)]) == 2
    assert not played and not out.exists()
    assert "pip install 'agentgym-rl[collect]'" in capsys.readouterr().err


# 12. psutil reaps orphaned Chromium processes ([web]) and reads memory for /v1/metrics ([server])
def test_psutil_comes_with_web_and_server() -> None:
    assert "psutil" in requirement_names("web") and "psutil" in requirement_names("server")


# 13. the sub-envs of a vector env draw distinct items
@pytest.mark.parametrize("env_id", ["AgentGym/Maze-v0", "AgentGym/TextCraft-Depth1-v0"])
def test_vector_sub_envs_draw_distinct_items(env_id: str) -> None:
    envs = gym.make_vec(env_id, num_envs=4)
    try:
        for seed in range(5):
            _, info = envs.reset(seed=seed, options={"split": "test"})
            items = [int(item) for item in info["item_id"]]
            assert len(set(items)) == 4, (seed, items)
            assert set(items) <= set(agentgym_envs.get_task(env_id).split("test"))
        _, again = envs.reset(seed=4, options={"split": "test"})
        assert [int(item) for item in again["item_id"]] == items  # still reproducible
    finally:
        envs.close()


def test_a_whole_split_by_consecutive_seeds() -> None:
    env = gym.make("AgentGym/TextCraft-Depth1-v0")
    items = agentgym_envs.get_task("AgentGym/TextCraft-Depth1-v0").split("test")
    drawn = {env.reset(seed=seed, options={"split": "test"})[1]["item_id"] for seed in range(len(items))}
    assert drawn == set(items)


# 9. help that shows defaults and puts the project's options first; --env the same on eval and collect
def test_every_cli_option_shows_its_default() -> None:
    import argparse

    from agentgym_envs.cli import build_parser

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    missing = []
    for name, sub in commands.choices.items():
        text = " ".join(sub.format_help().split())
        for action in sub._actions:
            default = action.default
            if (not action.option_strings or default is None or default is False or default == {}
                    or default is argparse.SUPPRESS):
                continue
            shown = " ".join(map(str, default)) if isinstance(default, list) else str(default)
            if f"default: {shown}" not in text and "default" not in (action.help or "").lower():
                missing.append(f"{name} {action.option_strings[0]}")
    assert not missing, missing
    serve = " ".join(commands.choices["serve"].format_help().split())
    assert "(default: 8000)" in serve
    run = " ".join(commands.choices["eval"].format_help().split())
    assert "(default: 120.0)" in run and "(default: 4)" in run and "(default: 1)" in run


@pytest.mark.parametrize("command", [["eval", "--agent", "oracle"], ["collect", "--n", "1", "--out", "x"]])
def test_env_takes_the_same_form_on_eval_and_collect(command) -> None:
    from agentgym_envs.cli import build_parser

    parser = build_parser()
    assert parser.parse_args([*command, "--env", "A", "B"]).env == ["A", "B"]
    assert parser.parse_args([*command, "--env", "A", "--env", "B"]).env == ["A", "B"]


def test_grpo_help_groups_the_projects_options_first(grpo) -> None:
    parser = grpo.Parser(grpo.CONFIG_TYPES)
    titles = [group.title for group in parser._action_groups][2:]
    sections = [section.__name__ for section in grpo.SECTIONS]
    assert titles[:len(sections) + 3] == [grpo.GROUP_TITLES[name] for name in
                                          ("RunArguments", *sections, "AgentGRPOConfig", "StageArguments")]
    assert grpo.GROUP_TITLES["EnvOptions"] == "agentgym-rl: Envs and their items (EnvOptions)"
    assert set(grpo.GROUP_TITLES.values()) <= set(titles)
    text = parser.format_help()
    assert text.index("--preset") < text.index("--max_turns ") < text.index("--clone_episodes") < text.index(
        "--learning_rate ")
    assert "(default: " in text
    first = next(action for action in parser._action_groups[len(sections) + 2]._group_actions)
    assert "deprecated" not in (first.help or "").lower(), first.option_strings  # not --gradient_checkpointing
    text = " ".join(text.split())
    assert "'cpu-demo': the project's main job on 2 CPU cores" in text and "Default: none, the library's own" in text
    assert text.index("--env_ids") < text.index("--beta ") < text.index("--gradient_checkpointing ")


# 7. endpoint retries are logged, a refused connection fails at once
def test_endpoint_refused_fails_fast() -> None:
    pytest.importorskip("openai")
    import socket
    import time

    from agentgym_envs.evaluation.endpoint import endpoint_agent
    from agentgym_envs.evaluation.runner import EvalError

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(EvalError, match="cannot reach it \\(connection refused\\)"):
        endpoint_agent(f"http://127.0.0.1:{port}/v1", "m")
    assert time.monotonic() - started < 2


def test_endpoint_retries_are_logged(caplog) -> None:
    pytest.importorskip("openai")
    from agentgym_envs.evaluation.endpoint import ChatEndpoint
    from fake_chat import FakeChatServer

    with FakeChatServer("hi", usage=None, busy_first=1) as server:  # the first request: busy
        endpoint = ChatEndpoint(server.url, "m", retries=2)
        with caplog.at_level("WARNING", logger="agentgym_envs.endpoint"):
            assert endpoint.complete([{"role": "user", "content": "hello"}]).text == "hi"
        endpoint.close()
    lines = [record.getMessage() for record in caplog.records if record.name == "agentgym_envs.endpoint"]
    assert len(lines) == 1 and "HTTP 503; retry 1 of 2 in" in lines[0]


# 5. envs with different turn caps are no turn-scaling experiment
def test_two_envs_with_different_caps_print_no_scaling_table(tmp_path, capsys) -> None:
    out = tmp_path / "two"
    assert main(["eval", "--agent", "oracle", "--env", "AgentGym/Maze-v0", "AgentGym/TextCraft-Depth1-v0",
                 "--limit", "1", "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "success % by max turns" not in printed and "no scaling plot" not in printed
    assert main(["eval", "--agent", "oracle", "--env", "AgentGym/Maze-v0", "--max-turns", "2", "15",
                 "--limit", "1", "--out", str(tmp_path / "scaling"), "--no-progress"]) == 0
    assert "success % by max turns" in capsys.readouterr().out


# 14. the viewer names the flag, the truncation warning does not contradict itself, plots show reward and loss
def test_viewer_of_a_training_run_names_log_trajectories(tmp_path, capsys) -> None:
    (tmp_path / "agent_metrics.jsonl").write_text('{"step": 1, "agent/reward": 0.5}\n')
    assert main(["view", str(tmp_path)]) == 2
    assert "--log_trajectories true" in capsys.readouterr().err


def test_truncation_warning_says_which_episodes_a_limit_ended(caplog) -> None:
    pytest.importorskip("transformers")
    import logging

    from transformers import TrainerControl, TrainerState, TrainingArguments

    from agentgym_trl.curriculum import TRUNCATED_METRIC, TurnBudgetCallback, TurnSchedule

    callback = TurnBudgetCallback(TurnSchedule.fixed(5), truncation_warning_threshold=0.2)
    state = TrainerState()
    state.global_step = 3
    logs = {TRUNCATED_METRIC: 0.75, "agent/cut_turn_frac": 0.3, "agent/truncated_turn_tokens_frac": 0.0,
            "agent/truncated_context_frac": 0.0}
    with caplog.at_level(logging.WARNING, logger="agentgym_trl.curriculum"):
        callback.on_log(TrainingArguments(output_dir="unused", report_to="none"), state, TrainerControl(), logs=logs)
    text = " ".join(caplog.text.replace("!!", " ").split())
    assert "75% of the episodes at step 3 hit a token limit: 30% of all model turns were cut" in text
    assert "Episodes that a limit ended: 0% by the per-turn limit, 0% by the context limit; the others went on" in text


def test_training_plots_keep_reward_visible_and_show_loss() -> None:
    from agentgym_envs.evaluation.plots import training_panels

    panels = {panel.title: panel for panel in training_panels([{"step": 1}])}
    lines = {label: style for label, _, style in panels["Reward and success"].lines}
    assert lines["reward"]["linewidth"] > 1.8 and lines["success"]["linestyle"] == "--"  # success never hides reward
    assert [key for _, key, _ in panels["Loss, KL and entropy"].lines] == ["loss", "kl", "entropy"]


# 10. the bundled model behind `transformers serve` on the CPU, evaluated as an endpoint (docs/evaluation.md)
@pytest.mark.slow
def test_transformers_serve_route(tmp_path) -> None:
    import shutil
    import socket
    import time
    import urllib.request

    pytest.importorskip("openai")
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    if shutil.which("transformers") is None:
        pytest.skip("no transformers command")
    from agentgym_trl.models import default_model_path

    try:
        model = default_model_path()
    except Exception as error:  # noqa: BLE001 - the bundled model is not installed here
        pytest.skip(f"no default model: {error}")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen(["transformers", "serve", model, "--device", "cpu", "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while True:
            assert server.poll() is None, server.stderr.read()[-2000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                    break
            except OSError:
                assert time.monotonic() < deadline, "transformers serve did not answer /health"
                time.sleep(1)
        out = tmp_path / "served"
        assert main(["eval", "--endpoint", f"http://127.0.0.1:{port}/v1", "--model", model, "--env",
                     "AgentGym/TextCraft-Depth1-v0", "--limit", "2", "--max-turns", "2", "--max-turn-tokens", "16",
                     "--concurrency", "2", "--out", str(out), "--no-progress"]) == 0
        records = [line for line in (out / "trajectories.jsonl").read_text().splitlines() if line.strip()]
        assert len(records) == 2
    finally:
        server.terminate()
        server.wait(timeout=30)


# 6 (eval's side): progress turn by turn while a batch plays
def test_eval_bar_shows_turns_playing_episodes_and_tokens_per_second(tmp_path, monkeypatch) -> None:
    from types import SimpleNamespace

    from agentgym_envs.evaluation import runner

    shown = []
    bar = SimpleNamespace(set_postfix=lambda fields: shown.append(dict(fields)))
    progress = runner.TurnProgress(bar, interval=0.0)
    progress.postfix = {"success": "0.50"}
    progress.start_batch(2)
    first, second = (SimpleNamespace(trajectory=SimpleNamespace(actions=["a"], model_tokens=30)) for _ in range(2))
    progress(first, "obs", 0.0, False)
    progress(second, "obs", 1.0, True)
    assert shown[-1]["success"] == "0.50" and shown[-1]["turn"] == "1" and shown[-1]["playing"] == "1"
    assert float(shown[-1]["tok/s"]) > 0
    calls = []
    monkeypatch.setattr(runner.TurnProgress, "__call__", lambda self, *args: calls.append(args))
    assert main(["eval", "--agent", "oracle", "--env", "AgentGym/Maze-v0", "--limit", "1",
                 "--out", str(tmp_path / "bar")]) == 0
    assert calls  # the evaluation's bar is fed every env step



def test_eval_bar_moves_within_a_turn(tmp_path, monkeypatch) -> None:
    """Issue 49: a model's turn can take a minute; the bar ticks meanwhile, with the seconds since the last steps."""
    import time
    from types import SimpleNamespace

    from agentgym_envs.agents import make_agent
    from agentgym_envs.evaluation import runner

    shown = []
    progress = runner.TurnProgress(SimpleNamespace(set_postfix=lambda fields: shown.append(dict(fields))), 0.05)
    progress.start_batch(2)
    with progress.ticking():
        time.sleep(0.4)  # a slow turn: no env step ends
    assert len(shown) >= 3 and shown[-1]["turn"] == "0" and shown[-1]["last step"].endswith(" s ago")
    ticks = []
    monkeypatch.setattr(runner.TurnProgress, "tick", lambda self: ticks.append(1))
    monkeypatch.setattr(runner, "PROGRESS_INTERVAL_S", 0.01)
    slow = make_agent("oracle")
    act = slow.act
    slow.act = lambda episodes: (time.sleep(0.05), act(episodes))[1]
    runner.evaluate(slow, ["AgentGym/Maze-v0"], tmp_path, limit=1, progress=True)
    assert ticks  # evaluate ticks the bar while the agent thinks


# 4. the flag the docs name gives the feedback an invalid action lacks by default
@pytest.mark.parametrize("env_id, kwargs", [("AgentGym/Maze-v0", {"extra_feedback": True}),
                                            ("AgentGym/TextCraft-Depth1-v0", {"lenient_crafting": True})])
def test_the_documented_flag_explains_an_invalid_action(env_id, kwargs) -> None:
    for flag in (False, True):
        env = gym.make(env_id, **(kwargs if flag else {}))
        env.reset(seed=0)
        observation, _, _, _, info = env.step("hello there")
        env.close()
        assert info["valid_action"] is False
        assert ("Valid actions" in observation) is flag  # terse as AgentGym by default, explained with the flag
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"`{next(iter(kwargs))}=True`" in readme or f"{next(iter(kwargs))}=True" in readme


# Libraries users trust: the server's metrics in Prometheus' format beside the JSON
def test_server_exposes_prometheus_metrics_beside_the_json() -> None:
    pytest.importorskip("fastapi")
    pytest.importorskip("prometheus_client")
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    from agentgym_envs.server.app import LocalServer

    assert "prometheus_client" in requirement_names("server")
    with LocalServer("textcraft") as server:
        session = httpx.post(f"{server.url}/v1/sessions", json={"env_id": "AgentGym/TextCraft-Depth1-v0"}).json()
        httpx.post(f"{server.url}/v1/sessions/{session['session']}/reset", json={})
        answer = httpx.get(f"{server.url}/metrics")
        as_json = httpx.get(f"{server.url}/v1/metrics").json()
        schema = httpx.get(f"{server.url}/openapi.json").json()
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain")
    samples = {sample.name + str(sorted(sample.labels.items())): sample.value
               for family in text_string_to_metric_families(answer.text) for sample in family.samples}
    assert samples["agentgym_live_envs[]"] == as_json["live_envs"] == 1
    assert samples["agentgym_envs_resets_total[]"] == as_json["resets_total"] == 1
    assert samples["agentgym_http_responses_total[('status', '201')]"] >= 1
    assert "/metrics" not in schema["paths"]  # text, not part of the JSON API's schema
