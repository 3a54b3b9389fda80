"""``agentgym plot RUN``: PNG figures of a training run's metrics and of test-time turn scaling.

Training: ``<run>/agent_metrics.jsonl`` (written by the trainer's ``TurnBudgetCallback``) becomes
five panels over optimizer steps: reward and success (overall, per env when several, eval when
logged), turn budget against turns used, model tokens per episode, generation against env
time per rollout, and TRL's loss, KL and entropy. Evaluation: a ``summary.json`` holding several turn budgets
(``agentgym eval
--max-turns 5 10 20``) becomes success against the budget. Beside the PNGs, ``plots.json`` lists
every drawn line (label, x, y), read back from the figures, so tests and scripts can check what a
figure shows without looking at pixels.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from agentgym_envs.core.jsonl import read_jsonl
from agentgym_envs.evaluation.metrics import has_scaling

METRICS_FILE = "agent_metrics.jsonl"
SUMMARY_FILE = "summary.json"
SIDECAR_FILE = "plots.json"
OVERVIEW_FILE = "training_curves.png"
SCALING_FILE = "turn_scaling.png"


class PlotError(ValueError):
    """Nothing to plot, or matplotlib is missing (one-line message)."""


@dataclass
class PlotResult:
    """Written files and, per figure, per panel title, the lines drawn: ``{label: {"x": [...], "y": [...]}}``."""

    files: list[Path] = field(default_factory=list)
    lines: dict[str, dict[str, dict[str, dict[str, list[float]]]]] = field(default_factory=dict)


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise PlotError("plots need matplotlib: pip install 'agentgym-rl[train]' (or pip install matplotlib)") from None
    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    return plt


def read_metrics(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The rows of a metrics file that have a numeric ``step`` (cut, damaged or step-less lines are skipped)."""
    return [row for _, row in read_jsonl(path)
            if isinstance(row, dict) and isinstance(row.get("step"), (int, float))
            and not isinstance(row["step"], bool)]


def series(rows: Sequence[Mapping[str, Any]], key: str) -> tuple[list[float], list[float]]:
    """(steps, values) of one metric over the rows that logged it."""
    points = [(float(r["step"]), float(r[key])) for r in rows if isinstance(r.get(key), (int, float))]
    return [x for x, _ in points], [y for _, y in points]


def _short(env_id: str) -> str:
    return env_id.removeprefix("AgentGym/").removesuffix("-v0")


def env_ids_in(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Env ids with per-env metrics (``agent/<env id>/success``; env ids themselves contain a slash)."""
    found = set()
    for row in rows:
        for key in row:
            if key.startswith("agent/") and key.endswith("/success") and key.count("/") >= 3:
                found.add(key[len("agent/") : -len("/success")])
    return sorted(found)


ENV_COLOURS = ("tab:orange", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan", "tab:red", "tab:gray")
class Panel(NamedTuple):
    title: str
    ylabel: str
    lines: list[tuple[str, str, dict[str, Any]]]  # (label, metric key, matplotlib style)
    ylim: tuple[float, float] | None = None


def training_panels(rows: Sequence[Mapping[str, Any]]) -> list[Panel]:
    """What each training panel draws; lines whose metric was never logged are left out when drawing."""
    # reward drawn wide and pale under a dashed success: with an outcome reward of 0/1 the two coincide, and
    # one line must not hide the other
    outcome = [("reward", "agent/reward", {"color": "tab:blue", "linewidth": 4.0, "alpha": 0.45}),
               ("success", "agent/success", {"color": "tab:green", "linestyle": "--"})]
    envs = env_ids_in(rows)
    if len(envs) > 1:  # one colour per env: success dashed, reward dotted
        for index, env_id in enumerate(envs):
            colour = ENV_COLOURS[index % len(ENV_COLOURS)]
            outcome.append((f"{_short(env_id)} success", f"agent/{env_id}/success",
                            {"linestyle": "--", "color": colour, "linewidth": 1.2}))
            outcome.append((f"{_short(env_id)} reward", f"agent/{env_id}/reward",
                            {"linestyle": ":", "color": colour, "linewidth": 1.2}))
    outcome += [("eval reward", "eval_agent/reward", {"color": "tab:blue", "marker": "o", "linestyle": ":"}),
                ("eval success", "eval_agent/success", {"color": "tab:green", "marker": "o", "linestyle": ":"})]
    return [
        Panel("Reward and success", "mean per episode", outcome, ylim=(-0.03, 1.03)),
        Panel("Turn budget vs turns used", "turns", [
            ("turn budget", "agent/max_turns", {"drawstyle": "steps-post", "color": "tab:red"}),
            ("turns used", "agent/turns_mean", {"color": "tab:purple", "marker": "."}),
        ]),
        Panel("Response length", "model tokens per episode", [
            ("model tokens", "agent/model_tokens_mean", {"color": "tab:orange", "marker": "."}),
        ]),
        Panel("Rollout time", "seconds per rollout", [
            ("generation", "agent/generation_s", {"color": "tab:blue", "marker": "."}),
            ("env steps", "agent/env_s", {"color": "tab:brown", "marker": "."}),
        ]),
        Panel("Loss, KL and entropy", "per token", [  # TRL's own logs (kl only with beta > 0)
            ("loss", "loss", {"color": "tab:red", "marker": "."}),
            ("KL", "kl", {"color": "tab:purple", "marker": "."}),
            ("entropy", "entropy", {"color": "tab:gray", "marker": "."}),
        ]),
    ]


#: up to this many points a line also marks each one: a run of 1-3 steps is otherwise invisible or unreadable
MARKED_POINTS = 30


def point_style(points: int) -> dict[str, Any]:
    """Markers for a short series (a single step is a point, not a line of zero length)."""
    return {"marker": "o", "markersize": 4} if points <= MARKED_POINTS else {}


def _draw_panel(ax: Any, rows: Sequence[Mapping[str, Any]], panel: Panel) -> None:
    from matplotlib.ticker import MaxNLocator

    title, ylabel, lines, ylim = panel
    for label, key, style in lines:
        xs, ys = series(rows, key)
        if xs:
            ax.plot(xs, ys, label=label, **{"linewidth": 1.8, **style, **point_style(len(xs))})
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # optimizer steps are whole numbers
    ax.set_ylabel(ylabel)
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.grid(True, alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes, color="gray")


def _lines_of(fig: Any) -> dict[str, dict[str, dict[str, list[float]]]]:
    """The lines actually on a figure's axes, by panel title (what plots.json records)."""
    panels = {}
    for ax in fig.axes:
        panels[ax.get_title()] = {
            line.get_label(): {"x": [float(v) for v in line.get_xdata()], "y": [float(v) for v in line.get_ydata()]}
            for line in ax.lines
        }
    return panels


def _save(fig: Any, path: Path, result: PlotResult) -> None:
    fig.savefig(path, dpi=110, bbox_inches="tight")
    result.files.append(path)
    result.lines[path.name] = _lines_of(fig)


def plot_training(metrics_path: str | os.PathLike, out_dir: str | os.PathLike,
                  title: str | None = None) -> PlotResult:
    """The overview (2 x 3 panels) plus one PNG per panel of a training run's metrics."""
    plt = _pyplot()
    rows = [r for r in read_metrics(metrics_path) if any(k.startswith(("agent/", "eval_agent/")) for k in r)]
    if not rows:
        raise PlotError(f"{metrics_path} has no agent/... metrics to plot")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    result = PlotResult()
    panels = training_panels(rows)
    fig, axes = plt.subplots(2, 3, figsize=(16, 7.5))
    for ax, panel in zip(axes.flat, panels):
        _draw_panel(ax, rows, panel)
    for ax in list(axes.flat)[len(panels):]:
        ax.remove()
    fig.suptitle(title or f"Training run {Path(metrics_path).resolve().parent.name}")
    fig.tight_layout()
    _save(fig, out / OVERVIEW_FILE, result)
    plt.close(fig)
    for panel in panels:
        fig, ax = plt.subplots(figsize=(6, 4))
        _draw_panel(ax, rows, panel)
        fig.tight_layout()
        _save(fig, out / f"{_slug(panel.title)}.png", result)
        plt.close(fig)
    return result


def _slug(title: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in title.lower()).strip("_").replace("__", "_")


def plot_scaling(summary: Mapping[str, Any], out_dir: str | os.PathLike) -> PlotResult:
    """Success (%) against the turn budget, one line per env id, from an eval ``summary.json``."""
    plt = _pyplot()
    by_env: dict[str, list[tuple[int, float]]] = {}
    by_subtask: dict[tuple[str, str], list[tuple[int, float]]] = {}
    try:
        for entry in summary.get("results") or []:
            success = entry["subtasks"]["overall"]["success"]
            if success is not None:
                by_env.setdefault(entry["env_id"], []).append((int(entry["max_turns"]), 100 * float(success)))
            subtasks = {name: m for name, m in entry["subtasks"].items()
                        if name != "overall" and m["success"] is not None}
            if len(subtasks) > 1:  # a family-wide id: one thin line per sub-task under the overall line
                for name, metrics in subtasks.items():
                    by_subtask.setdefault((entry["env_id"], name), []).append(
                        (int(entry["max_turns"]), 100 * float(metrics["success"])))
    except (KeyError, TypeError, ValueError, AttributeError) as error:  # a hand-edited summary.json
        raise PlotError(f"the summary's results are not as agentgym eval writes them ({type(error).__name__}: "
                        f"{error}); rerun agentgym eval to rewrite it") from None
    if not any(len(points) > 1 for points in by_env.values()):
        raise PlotError("turn scaling needs an evaluation with several --max-turns values")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for env_id, points in sorted(by_env.items()):
        points.sort()
        ax.plot([b for b, _ in points], [s for _, s in points], marker="o", linewidth=2.2, label=_short(env_id))
    for (env_id, name), points in sorted(by_subtask.items()):
        points.sort()
        ax.plot([b for b, _ in points], [s for _, s in points], marker=".", linestyle="--", linewidth=1,
                alpha=0.8, label=f"{_short(env_id)} {name}")
    ax.set_title("Success vs turn budget")
    ax.set_xticks(sorted({b for points in by_env.values() for b, _ in points}))
    ax.set_xlabel("max turns")
    ax.set_ylabel("success %")
    ax.set_ylim(-2, 102)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, title=_agent_label(summary), title_fontsize=8)
    fig.tight_layout()
    result = PlotResult()
    _save(fig, out / SCALING_FILE, result)
    plt.close(fig)
    return result


def _agent_label(summary: Mapping[str, Any]) -> str:
    """"random agent, test split, K=4" (the legend title says what was measured)."""
    agent = summary.get("agent") or {}
    kind = agent.get("kind", "agent")
    name = Path(str(agent["model"])).name if agent.get("model") else f"{kind} agent"
    return f"{name}, {summary.get('split', 'test')} split, K={summary.get('n_samples', 1)}"


def plot_run(run: str | os.PathLike, out_dir: str | os.PathLike | None = None) -> PlotResult:
    """Every figure a run folder supports (training metrics, turn scaling); writes plots.json beside them."""
    folder = Path(run)
    if not folder.is_dir():
        raise PlotError(f"no run folder at {folder}")
    out = Path(out_dir) if out_dir is not None else folder / "plots"
    makers: list[Callable[[], PlotResult]] = []
    if (folder / METRICS_FILE).is_file():
        makers.append(lambda: plot_training(folder / METRICS_FILE, out))
    summary_path = folder / SUMMARY_FILE
    if summary_path.is_file():
        summary = _read_summary(summary_path)
        if has_scaling(summary["results"]):
            makers.append(lambda: plot_scaling(summary, out))
    if not makers:
        raise PlotError(f"{folder} has neither {METRICS_FILE} (a training run) nor a {SUMMARY_FILE} with several "
                        "turn budgets (agentgym eval --max-turns 5 10 20)")
    result = PlotResult()
    for make in makers:
        part = make()
        result.files += part.files
        result.lines.update(part.lines)
    (out / SIDECAR_FILE).write_text(json.dumps({"figures": result.lines}, indent=1) + "\n", encoding="utf-8")
    return result


def _read_summary(path: Path) -> dict[str, Any]:
    """An eval run's summary.json, or ``PlotError`` saying what is wrong with it (it is only read)."""
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise PlotError(f"{path} is not valid JSON ({type(error).__name__}); rerun agentgym eval to rewrite it"
                        ) from None
    results = summary.get("results") if isinstance(summary, dict) else None
    if not isinstance(results, list) or not all(
            isinstance(entry, dict) and "max_turns" in entry and "env_id" in entry for entry in results):
        raise PlotError(f"{path} has no list of results with an env_id and a max_turns each; rerun agentgym eval "
                        "to rewrite it")
    try:
        {(entry["env_id"], entry["max_turns"]) for entry in results}
    except TypeError:
        raise PlotError(f"{path}: a result's env_id or max_turns is not a plain value; rerun agentgym eval to "
                        "rewrite it") from None
    return summary


COMPARISON_FILE = "comparison.png"


def _rolling_mean(values: Sequence[float], window: int) -> list[float]:
    """Trailing mean over up to ``window`` points (a GRPO step's success over a few rollouts is noisy)."""
    return [sum(values[max(0, i - window + 1): i + 1]) / len(values[max(0, i - window + 1): i + 1])
            for i in range(len(values))]


def last_per_step(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per step (the last logged): a resumed run logs the steps after its checkpoint again."""
    by_step: dict[float, dict[str, Any]] = {}
    for row in rows:
        if any(key.startswith("agent/") for key in row):
            by_step[float(row["step"])] = dict(row)
    return [by_step[step] for step in sorted(by_step)]


class ComparisonPanel(NamedTuple):
    """One panel of ``plot_comparison``: a metric per step for every run."""

    title: str
    key: str
    ylabel: str
    ylim: tuple[float, float] | None = None
    smoothed: bool = False  # noisy per-step rates: the raw line faint, a trailing mean on top
    style: str = "line"  # "line" (with markers) or "steps" (a budget that holds until it changes)


def comparison_panels(window: int) -> list[ComparisonPanel]:
    """What a comparison of training runs shows: outcome, behaviour, budget and the steps that taught nothing."""
    return [
        ComparisonPanel(f"Rollout success (mean of {window} steps)", "agent/success", "success", (-0.03, 1.03), True),
        ComparisonPanel(f"Rollout reward (mean of {window} steps)", "agent/reward", "reward", None, True),
        ComparisonPanel("Valid-action rate", "agent/valid_action_rate", "valid actions / turns", (-0.03, 1.03), True),
        ComparisonPanel("Turns used", "agent/turns_mean", "turns per episode"),
        ComparisonPanel("Turn budget", "agent/max_turns", "max turns", style="steps"),
        ComparisonPanel("Response length", "agent/model_tokens_mean", "model tokens per episode"),
        ComparisonPanel("Zero-advantage groups", "frac_reward_zero_std", "share of GRPO groups", (-0.03, 1.03)),
    ]


def plot_comparison(runs: Mapping[str, str | os.PathLike], out_dir: str | os.PathLike, *, window: int = 5,
                    evals: Sequence[Mapping[str, Any]] = (), title: str | None = None,
                    file_name: str = COMPARISON_FILE) -> PlotResult:
    """Training runs side by side (label -> run folder or metrics file), one panel per ``comparison_panels``
    metric (rates as a trailing mean over ``window`` steps); with ``evals`` (``{"label", "mean", "low",
    "high"}`` each, e.g. from ``success_interval``) a last panel of test success with its interval."""
    plt = _pyplot()
    panels = comparison_panels(window)
    count = len(panels) + (1 if evals else 0)
    columns = 4
    rows_of_panels = -(-count // columns)
    fig, grid = plt.subplots(rows_of_panels, columns, figsize=(4.6 * columns, 4.0 * rows_of_panels), squeeze=False)
    axes = list(grid.flat)
    for ax in axes[count:]:
        ax.set_visible(False)
    for index, (label, run) in enumerate(runs.items()):
        path = Path(run) / METRICS_FILE if Path(run).is_dir() else Path(run)
        rows = last_per_step(read_metrics(path))
        if not rows:
            raise PlotError(f"{path} has no agent/... metrics to plot")
        colour = ENV_COLOURS[index % len(ENV_COLOURS)]
        for ax, panel in zip(axes, panels):
            steps, values = series(rows, panel.key)
            if not steps:
                continue
            marks = point_style(len(steps))  # a run of a few steps shows its points
            if panel.smoothed:
                ax.plot(steps, values, color=colour, alpha=0.25, linewidth=1)
                ax.plot(steps, _rolling_mean(values, window), color=colour, linewidth=2, label=label, **marks)
            elif panel.style == "steps":
                ax.plot(steps, values, color=colour, linewidth=2, drawstyle="steps-post", label=label, **marks)
            else:
                ax.plot(steps, values, color=colour, linewidth=1.6, label=label, **{"marker": ".", **marks})
    for ax, panel in zip(axes, panels):
        ax.set_title(panel.title)
        ax.set_xlabel("step")
        ax.set_ylabel(panel.ylabel)
        if panel.ylim:
            ax.set_ylim(*panel.ylim)
        ax.grid(True, alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
        else:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes, color="gray")
    if evals:
        ax = axes[len(panels)]
        labels = [str(entry["label"]) for entry in evals]
        means = [100 * float(entry["mean"]) for entry in evals]
        errors = [[100 * (float(e["mean"]) - float(e["low"])) for e in evals],
                  [100 * (float(e["high"]) - float(e["mean"])) for e in evals]]
        ax.bar(range(len(evals)), means, yerr=errors, capsize=5, color="tab:blue", alpha=0.75, label="test success")
        ax.set_xticks(range(len(evals)), labels, rotation=20, fontsize=8)
        ax.set_title("Held-out test success (95% CI)")
        ax.set_ylabel("success %")
        ax.set_ylim(0, 100)
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle(title or "Training runs compared")
    fig.tight_layout()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    result = PlotResult()
    _save(fig, out / file_name, result)
    plt.close(fig)
    return result


def plot_learning(result: Mapping[str, Any], path: str | os.PathLike, window: int = 3) -> PlotResult:
    """The learning experiment from its result file alone (``benchmarks/results/learning.json``): each seed's
    success over every episode it played, the groups it drew and kept per step, and held-out success per model
    and per zero-training control (all held-out items, and the hard ones) with BCa 95% intervals, each bar pair's
    samples per item (K) under its name (a greedy control's is 1). With a reverse
    curriculum, the scheduled k per step (dotted, right axis); with kept checkpoints (``learning_curves``), a
    fourth panel: hard-item success at each checkpoint, the start's at step 0."""
    plt = _pyplot()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    curves = result.get("learning_curves", {})
    fig, axes = plt.subplots(1, 4 if curves else 3, figsize=(21 if curves else 16, 4.2))
    prefix_axis = None
    for index, (name, run) in enumerate(result.get("runs", {}).items()):
        if "curve" not in run:  # a cloning arm's run: no episodes played
            continue
        colour = ENV_COLOURS[index % len(ENV_COLOURS)]
        curve = run["curve"]
        steps = curve["step"]
        drawn = [v if v is not None else float("nan") for v in curve["drawn_success"]]
        axes[0].plot(steps, drawn, color=colour, alpha=0.25, linewidth=1)
        axes[0].plot(steps, _rolling_mean(drawn, window), color=colour, linewidth=2, label=name)
        axes[1].plot(steps, curve["groups_drawn"], color=colour, linewidth=1.6, marker=".", label=f"{name} drawn")
        axes[1].plot(steps, curve["groups_kept"], color=colour, linewidth=1.6, linestyle="--", label=f"{name} kept")
        if "oracle_prefix_k" in curve:
            prefix_axis = prefix_axis or axes[0].twinx()
            prefix_axis.step(steps, curve["oracle_prefix_k"], where="post", color=colour, linestyle=":", linewidth=1.4)
            prefix_axis.set_ylabel("oracle prefix k (dotted)")
    axes[0].set_title(f"training: success of every episode played (mean of {window})")
    axes[0].set_ylim(0, 1)
    axes[1].set_title("dynamic sampling: groups drawn and kept per step")
    analysis = result.get("analysis", {}).get("success", {})
    # the zero-training controls (other temperatures, greedy, other sampling seeds) beside the models
    analysis = {**analysis, **result.get("controls", {}).get("analysis", {}).get("success", {})}
    names = list(analysis)
    for offset, (part, label) in enumerate((("held_out", "all held-out items"), ("hard", "hard items"))):
        values = [analysis[name][part] for name in names]
        if any(v is None for v in values):
            continue
        x = np.arange(len(names)) + (offset - 0.5) * 0.38
        means = np.array([v["mean"] for v in values])
        errors = np.array([[v["mean"] - v["bca_low"] for v in values], [v["bca_high"] - v["mean"] for v in values]])
        axes[2].bar(x, means, width=0.36, yerr=errors, capsize=4, label=label, color=ENV_COLOURS[offset])
    # each bar's samples per item under its name: a control's own K (greedy: 1), else the models' K (hard items' K)
    control_k = {name: run.get("k") for name, run in result.get("controls", {}).get("runs", {}).items()}
    models_k = f"K={result.get('k')}" + (f"/{result['hard_k']}" if result.get("hard_k") else "")
    ticks = [f"{name}\nK={control_k[name]}" if control_k.get(name) is not None else f"{name}\n{models_k}"
             for name in names]
    axes[2].set_xticks(np.arange(len(names)), ticks, rotation=30 if len(names) > 4 else 0, fontsize=8)
    axes[2].set_ylim(0, 1)
    per_bar = "samples per item under each name" + (", K=easy/hard items" if result.get("hard_k") else "")
    axes[2].set_title(f"held-out success (BCa 95%; {per_bar})", fontsize=10)
    start_hard = (analysis.get("start") or {}).get("hard")
    for index, (name, curve) in enumerate(curves.items()):
        points = [(0, start_hard["mean"])] if start_hard else []
        points += [(point["step"], point["success"]) for point in curve["steps"]]
        axes[3].plot(*zip(*points), color=ENV_COLOURS[index % len(ENV_COLOURS)], marker="o", label=name)
    if curves:
        axes[3].set_title(f"hard held-out items at each checkpoint (K={next(iter(curves.values()))['k']})")
        axes[3].set_xlabel("step")
        axes[3].set_ylim(0, 1)
    for ax in axes:
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    for ax in axes[:2]:
        ax.set_xlabel("step")
    fig.tight_layout()
    plot = PlotResult()
    _save(fig, path, plot)
    plt.close(fig)
    return plot
