"""The ``agentgym eval | view | plot`` subcommands (registered by ``agentgym_envs.cli``).

Every user error ends with one ``agentgym: error: ...`` line and a non-zero exit code, never a
traceback; what an interrupted evaluation finished is kept and a rerun resumes it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from agentgym_envs.agents import AgentSetupError, make_agent
from agentgym_envs.core.kwargs import add_env_kwargs_argument, add_env_option, add_opening_argument, check_env_kwargs
from agentgym_envs.core.loop import Agent
from agentgym_envs.evaluation.metrics import format_scaling, format_table, has_scaling, token_limit_warnings
from agentgym_envs.evaluation.plots import PlotError, plot_run
from agentgym_envs.evaluation.runner import (
    SUMMARY_FILE,
    EvalError,
    ForeignRun,
    evaluate,
    foreign_run_error,
    run_differences,
)
from agentgym_envs.evaluation.viewer import write_viewer
from agentgym_envs.server.hosts import SERVERS_VARIABLE, served_envs

INTERRUPTED = 130


def fail(message: str, code: int = 2) -> int:
    """Print ``agentgym: error: <message>`` on stderr and return the exit code (2: a usage error)."""
    print(f"agentgym: error: {message}", file=sys.stderr)
    return code


def os_error_text(error: OSError) -> str:
    """An OSError in words, without Python's ``[Errno N]`` prefix (``No space left on device: 'out/x.html'``), for
    the one error line a full disk or a read-only folder gets instead of a traceback."""
    text = error.strerror or str(error) or type(error).__name__
    return f"{text}: {str(error.filename)!r}" if error.filename else text


def default_out_dir(args: argparse.Namespace) -> Path:
    """``runs/eval/<agent>``: a fixed place per agent, so rerunning the same command resumes."""
    if args.model:
        label = "default-model" if args.model == "default" else Path(args.model.rstrip("/")).name or args.model
    else:
        label = args.agent
    return Path("runs") / "eval" / re.sub(r"[^A-Za-z0-9_.-]+", "-", label)


def temperature_of(args: argparse.Namespace) -> float:
    """Greedy for a single sample, T=1 for K samples, unless --temperature says otherwise."""
    if args.temperature is not None:
        return args.temperature
    return 0.0 if args.n_samples == 1 else 1.0


def flag_settings(args: argparse.Namespace, env_kwargs: dict[str, Any] | None) -> dict[str, Any]:
    """The run settings the flags alone say (a subset of what the agent will describe, known before it loads), so a
    folder that holds another run is refused at once instead of after a model loads."""
    temperature = temperature_of(args)
    if args.endpoint:
        settings: dict[str, Any] = {"kind": "endpoint", "model": args.model, "temperature": temperature,
                                    "max_tokens": args.max_turn_tokens, "seed": args.seed}
    elif args.model:
        settings = {"kind": "model", "temperature": temperature, "engine": args.engine,
                    "max_turn_tokens": args.max_turn_tokens, "max_context_tokens": args.max_context_tokens}
        if args.bf16 is not None:
            settings["bf16"] = args.bf16
    else:
        settings = {"kind": args.agent, **({"seed": args.seed} if args.agent == "random" else {})}
    settings["env_kwargs"] = dict(env_kwargs) if env_kwargs else None
    settings["merged_first_turn"] = True if args.merged_first_turn else None
    settings["oracle_prefix"] = args.oracle_prefix or None
    return settings


def make_eval_agent(args: argparse.Namespace) -> Agent:
    """The agent the flags name: an endpoint, a local model (the trainer extra's ``model`` agent) or a scripted one."""
    temperature = temperature_of(args)
    if args.endpoint:
        if not args.model:
            raise EvalError("--endpoint needs --model NAME (the model name the server serves)")
        from agentgym_envs.evaluation.endpoint import endpoint_agent

        return endpoint_agent(args.endpoint, args.model, temperature=temperature, max_tokens=args.max_turn_tokens,
                              api_key=args.api_key or os.environ.get("OPENAI_API_KEY"), timeout=args.timeout,
                              retries=args.retries, concurrency=args.concurrency, seed=args.seed)
    if args.model:
        # before transformers is imported (huggingface_hub reads it once): nothing reaches the hub unless
        # the user asked with HF_HUB_OFFLINE=0
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        agent = make_agent("model", model=args.model, temperature=temperature, batch_size=args.batch_size,
                           max_turn_tokens=args.max_turn_tokens, max_context_tokens=args.max_context_tokens,
                           seed=args.seed, bf16=args.bf16, engine=args.engine,
                           progress=False if args.no_progress else None)
        if hasattr(agent, "choice_line"):  # e.g. "CPU AVX2 only (...): fp32 weights ...; episodes sampled with ..."
            print(agent.choice_line(), file=sys.stderr)
        return agent
    return make_agent(args.agent, seed=args.seed)


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _stop_on_sigterm() -> Any:
    """Treat SIGTERM (kill, a job scheduler's time limit) like Ctrl-C: the summary of what was saved is written."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, _raise_interrupt)


def print_summary(out: Path) -> dict[str, Any] | None:
    """Print an evaluation folder's result tables (and its turn-scaling table); None when it has no summary."""
    path = out / SUMMARY_FILE
    if not path.is_file():
        return None
    summary = json.loads(path.read_text(encoding="utf-8"))
    for entry in summary["results"]:
        print("\n" + format_table(entry, summary["split"]))
    if has_scaling(summary["results"]):
        print("\n" + format_scaling(summary["results"]))
    return summary


def cmd_eval(args: argparse.Namespace) -> int:
    """``agentgym eval``: evaluate an agent, a local model or an endpoint on envs, resuming a folder's earlier run."""
    if args.agent is None and not args.model and not args.endpoint:
        return fail("say what to evaluate: --model PATH|default, --endpoint URL --model NAME, or --agent oracle|random")
    out = Path(args.out) if args.out else default_out_dir(args)
    if out.exists() and not out.is_dir():
        return fail(f"--out {out} is a file; give a folder (a new one, or an earlier run's to resume it)")
    try:  # --servers / $AGENTGYM_SERVERS, or --env AgentGym/Remote-v0: the ids run on env servers
        env_ids, env_kwargs, make_env = served_envs(args.env, args.env_kwargs, args.servers)
        for env_id in env_ids if make_env is None else ():
            check_env_kwargs(env_id, env_kwargs)
    except ValueError as error:
        return fail(str(error))
    try:
        changes = run_differences(out, {"agent": flag_settings(args, env_kwargs), "split": args.split},
                                  known_only=True)
    except EvalError as error:  # an unreadable run.json, named
        return fail(str(error))
    if changes:  # before a model loads (tens of seconds), not after
        return fail(str(foreign_run_error(out, changes)))
    agent = None
    previous_handler = _stop_on_sigterm()
    try:
        agent = make_eval_agent(args)
        report = evaluate(agent, env_ids, out, split=args.split, n_samples=args.n_samples,
                          max_turns=args.max_turns or [None], limit=args.limit, progress=not args.no_progress,
                          env_kwargs=env_kwargs, merged_first_turn=args.merged_first_turn, make_env=make_env,
                          oracle_prefix=args.oracle_prefix, items=args.items)
    except KeyboardInterrupt:
        summary = print_summary(out)
        saved = f"{summary['episodes']} of {summary['expected_episodes']} episodes" if summary else "finished episodes"
        return fail(f"interrupted; {saved} saved in {out}; rerun the same command to resume", INTERRUPTED)
    except ForeignRun as error:  # another run's results: printing them would read as this agent's
        return fail(str(error))
    except ConnectionError:  # a served env that is down: main's one line
        raise
    except OSError as error:  # a full disk, a folder made read-only: what reached the log is kept
        return fail(f"{os_error_text(error)}; the finished episodes are kept in {out}: free space (or fix what the "
                    "error names) and rerun the same command to resume", 1)
    except (EvalError, AgentSetupError) as error:
        summary = print_summary(out) if (out / SUMMARY_FILE).is_file() else None
        saved = summary["episodes"] if summary else 0
        kept = f" ({saved} episodes saved in {out}; rerun to resume)" if saved else ""
        return fail(f"{error}{kept}")
    finally:
        if agent is not None:
            agent.close()
        if previous_handler is not None:
            signal.signal(signal.SIGTERM, previous_handler)
    print_summary(out)
    context_limit = args.max_context_tokens if args.model and not args.endpoint else None  # a local model's
    for warning in token_limit_warnings(report.results, args.max_turn_tokens, context_limit):
        print(f"\nagentgym: warning: {warning}", file=sys.stderr)
    if has_scaling(report.results):
        try:
            for path in plot_run(out).files:
                print(f"plot: {path}")
        except PlotError as error:
            print(f"(no scaling plot: {error})")
    print(f"\n{report.episodes} episodes in {out / 'trajectories.jsonl'}; summary in {out / SUMMARY_FILE}; "
          f"read them with: agentgym view {out}")
    return 0


def cmd_view(args: argparse.Namespace) -> int:
    """``agentgym view``: write a run's trajectories as one HTML page."""
    return _report_written(lambda: [write_viewer(args.run_dir, args.out)], "(open it in a browser)")


def cmd_plot(args: argparse.Namespace) -> int:
    """``agentgym plot``: write a run's plots (evaluation or training curves)."""
    return _report_written(lambda: plot_run(args.run_dir, args.out).files)


def _report_written(write: Any, note: str = "") -> int:
    """Run ``write`` (returns the files it wrote) and print them, or one error line for a missing / empty run."""
    try:
        paths = write()
    except (PlotError, FileNotFoundError, ValueError) as error:
        return fail(str(error))
    except OSError as error:  # --out on a full disk, in a read-only folder, or /dev/full
        return fail(os_error_text(error), 1)
    for path in paths:
        print(f"wrote {path}" + (f" {note}" if note else ""))
    return 0


def add_servers_argument(parser: argparse.ArgumentParser) -> None:
    """``--servers SPEC``: play the ids on ``agentgym serve`` hosts (eval and collect)."""
    parser.add_argument("--servers", metavar="SPEC", default=None,
                        help="run the envs on agentgym serve hosts: 'ENV_ID=URL,URL;*=URL' (or a bare 'URL,URL' for "
                             f"every id); default ${SERVERS_VARIABLE}. Episodes spread over the hosts and move to "
                             "another when one dies; ids, splits and results are the local ones")


def add_commands(commands: Any) -> None:
    """Register eval, view and plot on the ``agentgym`` subparsers."""
    run = commands.add_parser("eval", help="evaluate a model, an endpoint or a scripted agent: success, Avg@K, Pass@K")

    add_env_option(run, "env ids to evaluate on (--env A B, or --env A --env B)")
    run.add_argument("--model", help="a local HF model folder, 'default' (SmolLM2-135M-Instruct), or with "
                                     "--endpoint the served model's name")
    run.add_argument("--endpoint", help="base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1")
    run.add_argument("--api-key", help="bearer token for --endpoint (default: $OPENAI_API_KEY)")
    run.add_argument("--agent", choices=["oracle", "random"], help="a scripted agent instead of a model")
    run.add_argument("--split", default="test", choices=["train", "test"], help="the items to evaluate on")
    run.add_argument("--n-samples", type=int, default=1, metavar="K", help="episodes per item (Avg@K, Pass@K)")
    run.add_argument("--temperature", type=float, default=None,
                     help="sampling temperature (default: 0 = greedy for K=1, 1.0 for K>1)")
    run.add_argument("--max-turns", type=int, nargs="+", metavar="M",
                     help="turn budget(s); several values measure success against the budget (default: the env's cap)")
    run.add_argument("--limit", type=int, default=None,
                     help="only N items of each env's split, spread evenly over its sub-tasks (the first of each)")
    run.add_argument("--items", type=int, nargs="+", metavar="ID",
                     help="only these item ids of the split, in this order (an env registered with gym.register "
                          "alone has no splits: its items are these)")
    run.add_argument("--out", help="run folder (default runs/eval/<agent>); an existing run there is resumed")
    run.add_argument("--batch-size", type=int, default=8, help="episodes per batched rollout (local model)")
    run.add_argument("--max-turn-tokens", type=int, default=256, help="token limit of one model turn")
    run.add_argument("--max-context-tokens", type=int, default=4096,
                     help="token limit of a whole episode (local model)")
    run.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None,
                     help="local model, hf engine: sample under bf16 autocast (default: as the trainer does, i.e. "
                          "where the hardware runs bf16 natively: GPUs, CPUs with AVX512-BF16 or AMX)")
    run.add_argument("--engine", choices=["hf", "vllm-process", "vllm"], default="hf",
                     help="local model: generate with transformers in this process (hf) or with the vLLM engine "
                          "process (vllm-process, or vllm; scripts/setup_vllm.sh installs it; several times faster)")
    add_opening_argument(run)
    run.add_argument("--oracle-prefix", type=int, default=0, metavar="K",
                     help="start every episode after the env oracle's first K actions, shown as the conversation so "
                          "far (success per K of a reverse curriculum; at least one action is left to the agent)")
    run.add_argument("--timeout", type=float, default=120.0, help="seconds per endpoint request")
    run.add_argument("--retries", type=int, default=4,
                     help="endpoint: retries of a failed request (connection errors, timeouts, 408/409/429/5xx), with "
                          "exponential backoff and the server's Retry-After")
    run.add_argument("--concurrency", type=int, default=1, metavar="N",
                     help="endpoint: episodes played at the same time (each with its own envs)")
    run.add_argument("--seed", type=int, default=0,
                     help="sampling and the random agent's seed (an endpoint gets a seed per request from it)")
    add_env_kwargs_argument(run)
    add_servers_argument(run)
    run.add_argument("--no-progress", action="store_true", help="no progress bars")
    run.set_defaults(run=cmd_eval)

    view = commands.add_parser("view", help="write a self-contained HTML viewer of a run's trajectories")
    view.add_argument("run_dir", metavar="RUN", help="a run folder (eval or training) or a trajectories .jsonl file")
    view.add_argument("--out", help="the HTML file to write (default: <run>/trajectories.html)")
    view.set_defaults(run=cmd_view)

    plot = commands.add_parser("plot", help="PNG figures of a training run's metrics or of an eval's turn scaling")
    plot.add_argument("run_dir", metavar="RUN",
                      help="a training output_dir (agent_metrics.jsonl) or an eval run folder")
    plot.add_argument("--out", help="folder for the PNGs and plots.json (default: <run>/plots)")
    plot.set_defaults(run=cmd_plot)
