"""The ``agentgym`` command: ``list``, ``play``, ``solve`` (an agent over a whole split), ``serve``, ``collect``,
``eval``, ``view`` and ``plot`` (the last three live in ``agentgym_envs.evaluation.commands``)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

import gymnasium as gym

import agentgym_envs
from agentgym_envs.agents import make_agent
from agentgym_envs.core.episode import MAX_TURNS
from agentgym_envs.core.loop import Agent, BaseAgent, Episode, Reply, run_episode
from agentgym_envs.core.kwargs import add_env_kwargs_argument, add_env_option, add_opening_argument, check_env_kwargs
from agentgym_envs.core.tables import render_table
from agentgym_envs.core.tasks import import_env_module
from agentgym_envs.registration import REMOTE_ENV_ID


def cmd_list(args: argparse.Namespace) -> int:
    """``agentgym list``: every registered id with its splits, turn cap and extra (``--json`` for scripts)."""
    specs = agentgym_envs.list_tasks()
    if args.json:  # typed for scripts: counts are numbers, installed a boolean, the pip command when it is not
        print(json.dumps([{"id": spec.env_id, "scenario": spec.scenario, "sub-task": spec.subtask,
                           "train": len(spec.split("train")), "test": len(spec.split("test")),
                           "turns": spec.max_turns, "extra": spec.extra, "installed": spec.extra_installed(),
                           "install": None if spec.extra_installed() else spec.install_hint} for spec in specs]
                         + [{"id": REMOTE_ENV_ID, "scenario": "any id above, served by agentgym serve",
                             "sub-task": None, "train": None, "test": None, "turns": None, "extra": None,
                             "installed": True, "install": None}],  # the proxy: the served id's splits, cap
                         indent=1))
        return 0
    rows = []
    for spec in specs:
        installed = "yes" if spec.extra_installed() else f"no: {spec.install_hint}"
        rows.append((spec.env_id, spec.scenario, spec.subtask or "(all)", str(len(spec.split("train"))),
                     str(len(spec.split("test"))), str(spec.max_turns), installed))
    print(render_table(("id", "scenario", "sub-task", "train", "test", "turns", "installed"), rows,
                       justify=("left", "left", "left", "right", "right", "right", "left")))
    print(f"\nAlso {REMOTE_ENV_ID}: any id above, served by `agentgym serve` on another machine "
          f"(gym.make(\"{REMOTE_ENV_ID}\", url=..., env_id=...); docs/server.md).")
    return 0


class Narrated(BaseAgent):
    """Wraps the playing agent so the terminal shows the task before its first move."""

    def __init__(self, agent: Agent):
        self.agent = agent
        self.name = agent.name

    def begin(self, episodes: Sequence[Episode]) -> None:
        """Print the episode's task, instruction and first observation, then let the wrapped agent begin."""
        self.agent.begin(episodes)
        info = episodes[0].info
        print(f"# {info['task']}  item {info['item_id']} ({info['split']})\n")
        print(info["instruction"], "\n")
        print(episodes[0].observation)

    def act(self, episodes: Sequence[Episode]) -> list[Reply]:
        """The wrapped agent's replies (the play loop prints each step)."""
        return self.agent.act(episodes)


def cmd_play(args: argparse.Namespace) -> int:
    """``agentgym play``: one episode of an agent (a person at the terminal, or a scripted agent) printed turn by
    turn.
    """
    check_env_kwargs(args.env_id, args.env_kwargs)
    env = gym.make(args.env_id, render_mode="ansi", **args.env_kwargs)
    agent = make_agent(args.agent, seed=args.seed)
    item_id = args.item_id
    if item_id is None:  # the split's item this seed picks
        item_id = int(env.reset(seed=args.seed, options={"split": args.split})[1]["item_id"])

    def show(episode: Episode, observation: str, reward: float, ended: bool) -> None:
        if args.agent != "human":
            print(f"\n> {episode.trajectory.actions[-1]}")
        print(f"\n{observation}")
        if not episode.info.get("valid_action", True):
            print("(invalid action: nothing happened)")

    if args.agent == "human":
        print("(type a reply in the format the instruction asks, as a model would, e.g. 'Action: inventory', and "
              "press Enter; Ctrl-D or Ctrl-C stops: every line, 'quit' too, goes to the game)")
    try:
        trajectory = run_episode(env, Narrated(agent), item_id, seed=args.seed, on_step=show)
    except (EOFError, KeyboardInterrupt):
        print("\nstopped.")  # Ctrl-C, or Ctrl-D at the action prompt
        return 130
    finally:
        env.close()
    outcome = "success" if trajectory.success else ("out of turns" if trajectory.stop_reason == MAX_TURNS else "failed")
    print(f"\n# {outcome}: return {trajectory.reward:.2f}, score {trajectory.score}, {trajectory.turns} turns")
    return 0


def cmd_solve(args: argparse.Namespace) -> int:
    """Run an agent over a split and print the success rate (the README's smoke job)."""
    from tqdm import tqdm

    check_env_kwargs(args.env_id, args.env_kwargs)
    env = gym.make(args.env_id, **args.env_kwargs)
    agent = make_agent(args.agent, seed=args.seed)
    items = agentgym_envs.get_task(args.env_id).first_items(args.split, args.limit)
    try:
        results = [run_episode(env, agent, int(item)) for item in tqdm(items, desc=f"{args.agent} on {args.env_id}")]
    finally:
        env.close()
    by_subtask: dict[str, list[bool]] = {}
    for result in results:
        by_subtask.setdefault(str(result.subtask), []).append(result.success)

    def counts(successes: Sequence[bool]) -> list[str]:
        return [str(sum(successes)), str(len(successes)), f"{100 * sum(successes) / max(1, len(successes)):.1f}"]

    rows = [[subtask, *counts(successes)] for subtask, successes in sorted(by_subtask.items())]
    overall = ["overall", *counts([result.success for result in results])]
    print(render_table(("sub-task", "solved", "episodes", "success %"), rows,
                       justify=("left", "right", "right", "right"), footer=overall))
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    """Host envs over HTTP (AgentGym's protocol plus /v1); stops on Ctrl-C / SIGTERM, closing every env."""
    from agentgym_envs.server.app import serve

    serve(args.env, host=args.host, port=args.port, max_envs=args.max_envs, idle_timeout=args.idle_timeout,
          max_body_bytes=args.max_body_bytes, log_level=args.log_level, token=args.token,
          request_timeout=args.request_timeout, allowed_hosts=args.allowed_host)
    return 0


def cmd_collect(args: argparse.Namespace) -> int:
    """Play train episodes with a scripted agent and save the kept ones as a chat dataset (behaviour cloning data)."""
    from pathlib import Path

    from agentgym_envs.collect import JOURNAL_FILE, KeepRule, check_datasets_installed, collect, save_trajectories
    from agentgym_envs.evaluation.commands import os_error_text
    from agentgym_envs.server.hosts import served_envs

    check_datasets_installed()  # before playing every episode, not when saving them
    out = Path(args.out)
    journal = out / JOURNAL_FILE
    if args.overwrite:
        journal.unlink(missing_ok=True)
    elif out.exists() and not journal.is_file() and (out.is_file() or any(out.iterdir())):
        print(f"agentgym: error: {out} exists and holds no collection to resume; pass --overwrite to replace it",
              file=sys.stderr)
        return 2
    keep = KeepRule(min_reward=args.min_reward, keep_failures=args.keep_failures)
    env_ids, env_kwargs, make_env = served_envs(args.env, args.env_kwargs, args.servers)  # or local envs
    for env_id in env_ids if make_env is None else ():
        check_env_kwargs(env_id, env_kwargs)
    try:
        rows, counts = collect(env_ids, args.n, split=args.split, agent=args.agent, keep=keep, seed=args.seed,
                               allow_held_out=args.allow_held_out_split, journal=journal, env_kwargs=env_kwargs,
                               merged_first_turn=args.merged_first_turn, make_env=make_env)
    except ValueError as error:  # a journal of other settings
        print(f"agentgym: error: {error}", file=sys.stderr)
        return 2
    except ConnectionError:  # a served env that is down: main's one line
        raise
    except OSError as error:  # a full disk: the journal keeps every episode that reached it
        print(f"agentgym: error: {os_error_text(error)} (writing {journal}); the episodes played so far are kept "
              "there: free space and rerun the same command to resume", file=sys.stderr)
        return 1
    for env_id, count in counts.items():
        resumed = f", {count['resumed']} from the journal" if count["resumed"] else ""
        print(f"{env_id}: kept {count['kept']}/{count['played']} episodes ({count['success']} solved{resumed}) "
              f"in {count['seconds']:.1f} s")
    try:
        path = save_trajectories(rows, args.out)
    except OSError as error:
        print(f"agentgym: error: {os_error_text(error)} (saving the dataset in {out}); every episode is kept in "
              f"{journal}: free space and rerun the same command to save them", file=sys.stderr)
        return 1
    print(f"wrote {len(rows)} conversations to {path}")
    return 0


def installed_version() -> str:
    """The version of the installed ``agentgym-rl`` distribution (what a bug report should name)."""
    from importlib import metadata

    try:
        return metadata.version("agentgym-rl")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default, unless the help already says it (or there is none to show)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        empty = default is None or default is False or default is argparse.SUPPRESS or default == {} or default == []
        if ("default" in text.lower() or empty or not action.option_strings
                or isinstance(action, (argparse._HelpAction, argparse._VersionAction))):
            return text
        shown = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else "%(default)s"
        return f"{text} (default: {shown})".strip()


class Subcommands(argparse._SubParsersAction):
    """Subcommands whose help shows every default (``add_parser`` passes the formatter on)."""

    def add_parser(self, name: str, **kwargs):
        """Every subcommand shows its defaults in ``--help`` too."""
        kwargs.setdefault("formatter_class", DefaultsHelpFormatter)
        return super().add_parser(name, **kwargs)


#: the entry point group under which an installed trainer package adds its rows to ``agentgym doctor``
DOCTOR_ENTRY_POINT_GROUP = "agentgym.doctor"


def cmd_doctor(args: argparse.Namespace) -> int:
    """``agentgym doctor``: this machine's CPU class and the flags that decide it, and (with the trainer installed)
    the precision and engine a run gets here; ``--measure`` adds a matmul's GFLOP/s in fp32 and bf16."""
    from importlib.metadata import entry_points

    from agentgym_envs.core.machine import CPU_CLASSES, cpu_report

    report = cpu_report()
    rows: list[tuple[str, object]] = [
        ("CPU", f"{report.model}, {report.cores} cores usable"),
        ("deciding flags", " ".join(report.flags) or "none of " + " ".join(CPU_CLASSES)),
        ("class", report.describe()),
    ]
    trainer_rows = []
    for point in entry_points(group=DOCTOR_ENTRY_POINT_GROUP):
        try:  # the envs-only install has the trainer's package but not its stack (torch, TRL)
            trainer_rows += point.load()(measure=args.measure)
        except ImportError as error:
            trainer_rows.append(("training", f"the trainer stack is not installed ({error.name} is missing): "
                                             "pip install 'agentgym-rl[train]'"))
    rows += trainer_rows or [("training", "the trainer is not installed: pip install 'agentgym-rl[train]'")]
    if args.json:
        print(json.dumps({**report.to_dict(), "rows": {name: str(value) for name, value in rows}}, indent=1))
    else:
        print(render_table(("", "this machine"), [(name, str(value)) for name, value in rows]))
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``agentgym`` command line: list, play, solve, serve, collect, doctor, eval, view and plot."""
    parser = argparse.ArgumentParser(prog="agentgym", description="AgentGym environments for LLM agents",
                                     formatter_class=DefaultsHelpFormatter)
    parser.register("action", "parsers", Subcommands)
    parser.add_argument("--version", action="version", version=f"%(prog)s {installed_version()}")
    commands = parser.add_subparsers(dest="command", required=True)

    listing = commands.add_parser("list", help="every registered env id with its splits and turn cap")
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
    listing.set_defaults(run=cmd_list)

    play = commands.add_parser("play", help="play one episode (as a human in the terminal, or watch an agent)")
    play.add_argument("env_id", help="an env id (agentgym list)")
    play.add_argument("--item-id", type=int, default=None, help="the item to play (default: a random one of --split)")
    play.add_argument("--split", default="test", choices=["train", "test"], help="the split --seed draws from")
    play.add_argument("--agent", default="human", choices=["human", "random", "oracle"], help="who plays")
    play.add_argument("--seed", type=int, default=0, help="picks the item and seeds the random agent")
    add_env_kwargs_argument(play)
    play.set_defaults(run=cmd_play)

    solve = commands.add_parser("solve", help="run a scripted agent over a split and report the success rate")
    solve.add_argument("env_id", help="an env id (agentgym list)")
    solve.add_argument("--split", default="test", choices=["train", "test"], help="the items to play")
    solve.add_argument("--agent", default="oracle", choices=["random", "oracle"], help="the scripted agent")
    solve.add_argument("--limit", type=int, default=None, help="only N items, spread evenly over the sub-tasks")
    solve.add_argument("--seed", type=int, default=0, help="the random agent's seed")
    add_env_kwargs_argument(solve)
    solve.set_defaults(run=cmd_solve)

    serve = commands.add_parser("serve", help="host envs over HTTP for remote rollouts (AgentGym protocol + /v1 API)")
    serve.add_argument("--env", required=True, help="an env id, or a family name to serve all its ids")
    serve.add_argument("--host", default="127.0.0.1", help="interface to listen on (default: loopback only)")
    serve.add_argument("--port", type=int, default=8000, help="TCP port to listen on")
    serve.add_argument("--max-envs", type=int, default=256,
                       help="live envs at most, by weight (SciWorld and browser envs count 8); more get HTTP 429")
    serve.add_argument("--idle-timeout", type=float, default=600.0, help="seconds after which an unused env is closed")
    serve.add_argument("--max-body-bytes", type=int, default=1 << 20, help="larger requests get HTTP 413")
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"],
                       help="uvicorn's log level")
    serve.add_argument("--token", default=None,
                       help="require 'Authorization: Bearer TOKEN' (default $AGENTGYM_SERVER_TOKEN); "
                            "needed to bind anything but loopback")
    serve.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                       help="a host name clients may use in the Host header besides the bound address and loopback "
                            "names (repeat for several); others are refused, against DNS rebinding")
    serve.add_argument("--request-timeout", type=float, default=10.0,
                       help="seconds a client may take to send a request; silent connections are dropped")
    serve.set_defaults(run=cmd_serve)

    gather = commands.add_parser("collect", help="save a scripted agent's train episodes as a chat dataset for SFT")
    add_env_option(gather, "env ids to play: a mixture (--env A B, or --env A --env B)")
    gather.add_argument("--n", type=int, required=True, help="episodes to play per env id")
    gather.add_argument("--out", required=True, help="folder for the datasets.save_to_disk output")
    gather.add_argument("--split", default="train", help="item split to play (anything but train needs "
                        "--allow-held-out-split)")
    gather.add_argument("--agent", default="oracle", choices=["oracle", "random"], help="the scripted agent")
    gather.add_argument("--min-reward", type=float, default=None,
                        help="keep episodes whose return reaches this, solved or not (default: solved ones only)")
    gather.add_argument("--keep-failures", action="store_true", help="keep every episode")
    gather.add_argument("--allow-held-out-split", action="store_true",
                        help="allow collecting from a held-out split such as test (contaminates evaluation)")
    gather.add_argument("--seed", type=int, default=0, help="item order and the random agent's seed")
    add_opening_argument(gather)
    gather.add_argument("--overwrite", action="store_true",
                        help="replace what --out holds (by default a rerun resumes its collection and anything "
                             "else there is refused)")
    add_env_kwargs_argument(gather)
    from agentgym_envs.evaluation.commands import add_commands, add_servers_argument  # eval, view, plot

    add_servers_argument(gather)
    gather.set_defaults(run=cmd_collect)

    doctor = commands.add_parser("doctor", help="this machine's CPU class, and the precision and engine a run gets")
    doctor.add_argument("--measure", action="store_true", help="also time a matmul in fp32 and bf16 (about 2 s)")
    doctor.add_argument("--json", action="store_true", help="print JSON instead of a table")
    doctor.set_defaults(run=cmd_doctor)

    add_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``agentgym`` with ``argv`` (default: the process's arguments).

    Returns:
        The exit code: 0 when the command succeeded, 2 for a usage error (an unknown id, a bad setting, a missing
        extra, a service that is down: one line on stderr, no traceback).
    """
    args = build_parser().parse_args(argv)
    try:
        if args.command in ("serve", "eval", "collect", "play"):  # Gymnasium's module:EnvId imports the module
            env = args.env_id if args.command == "play" else args.env
            env = import_env_module(env) if isinstance(env, str) else [import_env_module(one) for one in env]
            setattr(args, "env_id" if args.command == "play" else "env", env)
        return args.run(args)
    # a wrong id or setting, a missing extra, a service that is down (e.g. a real WebArena site): one line
    except (KeyError, ValueError, ConnectionError, agentgym_envs.MissingExtraError, gym.error.Error) as error:
        print(f"agentgym: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
