"""The numbers the docs quote from ``benchmarks/results/*.json``, written into the pages by one command.

    python benchmarks/doc_numbers.py            # rewrite every quote in README.md and docs/ from the result files
    python benchmarks/doc_numbers.py --check    # list the quotes that are out of date and exit 1 (the tests do)

A quote sits between two markers, inline (``<!--q:learning.seed0.held_out-->49.8% [40.2, 59.2]<!--/q-->``, one
table cell at most) or as a block on lines of its own (a whole table), so prose around it stays hand-written and a
number is never typed by hand. ``quotes()`` names and formats each one from its result file, rounded half up as
printed (a file's 14.35 is 14.4).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from agentgym_envs.evaluation.metrics import half_up

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PAGES = ("README.md", "docs/results.md", "docs/training.md", "docs/engines.md", "docs/evaluation.md",
         "docs/development.md", "docs/learning_protocol_3.md")
MARKED = re.compile(r"<!--q:(?P<name>[\w.@-]+)-->(?P<text>.*?)<!--/q-->", re.S)


@dataclass(frozen=True)
class Quote:
    """One quoted number (or table) and the pages that show it."""

    name: str
    text: str
    pages: tuple[str, ...]

    @property
    def block(self) -> bool:
        """A whole table: its markers stand on lines of their own."""
        return "\n" in self.text


def result(name: str) -> dict:
    return json.loads((RESULTS / f"{name}.json").read_text(encoding="utf-8"))


num = half_up  # rounded half up, as the tables quoted here round too (a file's 14.35 is 14.4)


def pct(x: float) -> str:
    return num(100 * x)


def interval(entry: dict, low: str = "low", high: str = "high", signed: bool = False) -> str:
    return f"[{num(100 * entry[low], signed=signed)}, {num(100 * entry[high], signed=signed)}]"


def permutation_p(test: dict) -> str:
    """A Monte Carlo p; no resample as extreme gives the floor, printed "< 1/resamples"."""
    floor = 1 / (test["resamples"] + 1)
    return f"< {1 / test['resamples']:.2g}" if test["p_value"] <= floor * 1.000001 else f"{test['p_value']:.2g}"


def p_after_sign(text: str) -> str:
    """``permutation_p``'s text after "p": "< 1e-05" as it is, a value as "= 0.03"."""
    return text if text.startswith("<") else f"= {text}"


def learning_quotes() -> list[Quote]:
    """The first learning experiment (learning.json) and its re-make with zero-training controls."""
    from agentgym_trl.experiments import controls_table, markdown_table

    readme = ("README.md",)
    quotes = [Quote("learning.table", markdown_table(result("learning")), ("docs/results.md",))]
    learning = result("learning")["analysis"]
    for name, row in learning["success"].items():
        held = row["held_out"]
        quotes.append(Quote(f"learning.{name}.held_out",
                            f"{pct(held['mean'])}% {interval(held, 'bca_low', 'bca_high')}", readme))
    for name, change in {**learning["per_seed"], "pooled": learning["pooled"]}.items():
        diff = change["difference_interval"]
        quotes.append(Quote(f"learning.{name}.change", f"{num(100 * diff['mean'], 1, signed=True)} "
                                                       f"{interval(diff, 'bca_low', 'bca_high', signed=True)}", readme))
        p_value = permutation_p(learning["primary"] if name == "pooled" else change["within_item_permutation"])
        quotes.append(Quote(f"learning.{name}.p", f"**{p_value}**" if name == "pooled" else p_value, readme))
    pooled = sum(learning["success"][seed]["held_out"]["mean"] for seed in ("seed0", "seed1")) / 2
    quotes += [Quote("learning.start.mean", f"{pct(learning['success']['start']['held_out']['mean'])}%",
                     ("README.md",)),
               Quote("learning.pooled.mean", f"{pct(pooled)}%", ("README.md",))]
    runs = result("learning")["runs"]
    quotes.append(Quote("learning.step_s", " and ".join(
        f"{num(sum(run['curve']['step_s']) / len(run['curve']['step_s']), 0)} s" for run in runs.values()),
        ("docs/results.md",)))

    remade = result("learning_controls")
    quotes += [Quote("learning_controls.table", markdown_table(remade), ("docs/results.md",)),
               Quote("learning_controls.controls_table", controls_table(remade), ("docs/results.md",))]
    controls = remade["controls"]["analysis"]
    for seed in ("seed0", "seed1"):
        gain = controls["greedy_vs_greedy_start"][f"{seed}@greedy"]["difference_interval"]["mean"]
        quotes += [Quote(f"learning_controls.{seed}.greedy_gain", num(100 * gain, 1, signed=True), ("README.md",)),
                   Quote(f"learning_controls.{seed}.mean",
                         f"{pct(remade['analysis']['success'][seed]['held_out']['mean'])}%", ("README.md",))]
    quotes.append(Quote("learning_controls.start_greedy",
                        f"{pct(controls['success']['start@greedy']['held_out']['mean'])}%", ("README.md",)))
    return quotes


def skill_quotes() -> list[Quote]:
    """The second experiment (a skill the start rarely uses, learning_2.json)."""
    from agentgym_trl.experiments import controls_table, markdown_table

    skill = result("learning_2")
    analysis = skill["analysis"]
    quotes = [Quote("learning_2.table", markdown_table(skill), ("docs/results.md",)),
              Quote("learning_2.controls_table", controls_table(skill), ("docs/results.md",))]
    quotes += [Quote(f"learning_2.{name}.hard", f"{pct(row['hard']['mean'])}%", ("README.md", "docs/results.md"))
               for name, row in analysis["success"].items()]
    gain = analysis["hard_items"]["pooled"]
    flip = gain["sign_flip_over_items"]
    quotes += [Quote("learning_2.gain", f"{num(100 * gain['difference_interval']['mean'], 1, signed=True)} points "
                                        f"{interval(gain['difference_interval'], 'bca_low', 'bca_high', signed=True)}",
                     ("README.md", "docs/results.md")),
               Quote("learning_2.items_up_down", f"{flip['items_up']} items up and {flip['items_down']} down",
                     ("README.md",))]
    easy = analysis["non_inferiority"]
    assert easy["holds"] and analysis["primary"]["significant"], "the docs say the registered tests passed"
    quotes.append(Quote("learning_2.easy_change",
                        f"{num(100 * easy['difference_interval']['mean'], 1, signed=True)} "
                        f"{interval(easy['difference_interval'], 'bca_low', 'bca_high', signed=True)}",
                        ("docs/results.md",)))
    quotes.append(Quote("learning_2.curves", "; ".join(
        f"{name[:-1]} {name[-1]} " + " and ".join(f"{pct(point['success'])}% at step {point['step']}"
                                                    for point in curve["steps"])
        for name, curve in skill["learning_curves"].items()), ("docs/results.md",)))
    quotes.append(Quote("learning_2.gate", f"{pct(skill['gate']['per_prefix']['0']['success'])}%",
                        ("docs/results.md",)))
    quotes.append(Quote("learning_2.train_minutes", " and ".join(
        f"{num(run['train_wall_s'] / 60, 0)}" for run in skill["runs"].values()) + " minutes", ("docs/results.md",)))
    return quotes + skill_gain_quotes(skill)


def ingredients(key: str) -> int:
    """How many ingredients a depth-1 TextCraft item's recipe takes: its oracle plan's ``get``s (``env id:item``)."""
    import numpy as np

    from agentgym_envs.textcraft.engine import make_game
    from agentgym_envs.textcraft.env import goals
    from agentgym_envs.textcraft.recipes import recipe_book

    item = int(key.rsplit(":", 1)[1])
    goal, depth = goals()[item]
    assert depth == 1, key
    game = make_game(recipe_book(), goal, np.random.default_rng(item), "agentgym")
    return sum(action.startswith("get ") for action in game.plan_actions(unit_crafts=True))


def skill_gain_quotes(skill: dict) -> list[Quote]:
    """Where the second experiment's hard-item gain sits (added after the result, not registered): the two- and
    three-ingredient items apart, the two items that gain most, and the registered test without them; the start
    at T = 0.5 from ``learning_controls.json`` (the same start, ``ebf325f1789b2d7d``)."""
    from agentgym_envs.evaluation.significance import comparison, pooled, rates

    both = ("README.md", "docs/results.md")
    models, hard = skill["models"], list(skill["hard_items"])
    start = models["start"]
    trained = pooled([model for name, model in models.items() if name != "start"])
    gains = dict(zip(hard, rates(trained, hard) - rates(start, hard)))
    by_size = {size: [key for key in hard if ingredients(key) == size] for size in (2, 3)}
    assert sorted(len(keys) for keys in by_size.values()) == [1, 10], "the docs say one three-ingredient item"
    two = [gains[key] for key in by_size[2]]
    (three,) = by_size[3]
    quotes = [Quote("learning_2.two_ingredient",
                    f"{sum(g > 0 for g in two)} of {len(two)} up, {sum(g < 0 for g in two)} down", both),
              Quote("learning_2.three_ingredient", f"from {sum(start[three])} of {len(start[three])} samples to "
                                                   f"{sum(trained[three])} of {len(trained[three])}", both)]
    top = sorted(hard, key=lambda key: -gains[key])[:2]
    rest = [key for key in hard if key not in top]
    without = comparison(start, trained, rest)
    diff = without["difference_interval"]
    quotes += [Quote("learning_2.top_two.items", " and ".join(str(int(key.rsplit(":", 1)[1])) for key in top), both),
               Quote("learning_2.top_two.share", f"{num(100 * sum(gains[k] for k in top) / sum(gains.values()), 0)}%",
                     both),
               Quote("learning_2.without_top_two",
                     f"{num(100 * diff['mean'], 1, signed=True)} points {interval(diff, 'bca_low', 'bca_high', True)}, "
                     f"p {p_after_sign(permutation_p(without['within_item_permutation']))}", both)]
    remade = result("learning_controls")["controls"]["analysis"]["success"]
    quotes.append(Quote("learning_controls.start_t05.hard", f"{pct(remade['start@T0.5']['hard']['mean'])}%", both))
    return quotes


def gate_quotes() -> list[Quote]:
    """The ScalingInter gate (scalinginter_gate.json): the depth-2 start at 20 turns and the registered rule's
    decision."""
    gate = result("scalinginter_gate")
    decision, start = gate["start_gate"], gate["analysis"]["success"]["start"]["held_out"]
    pages = ("docs/results.md", "docs/learning_protocol_3.md")
    return [Quote("scalinginter_gate.success", f"{pct(decision['success'])}% "
                                               f"{interval(start, 'bca_low', 'bca_high')}", pages),
            Quote("scalinginter_gate.solved", f"{decision['items_solved_at_least_once']} of {decision['items']}",
                  pages),
            Quote("scalinginter_gate.decision", "passes" if decision["passes"] else "fails", pages),
            Quote("scalinginter_gate.weights", f"`{gate['weights']['start']}`", ("docs/learning_protocol_3.md",))]


def arms_quotes() -> list[Quote]:
    """The third experiment (learning_3.json): the kept start, each arm evaluated so far against it (secondary),
    and each registered comparison (with Holm's decision for the primary ones) once both its arms are evaluated."""
    arms = result("learning_3")
    analysis = arms["analysis"]
    pages = ("docs/results.md",)
    quotes = [Quote("learning_3.start_weights", f"`{arms['weights']['start']}`", ("docs/learning_protocol_3.md",)),
              Quote("learning_3.start.hard", f"{pct(analysis['success']['start']['hard']['mean'])}%", pages)]
    for arm, success in analysis["arm_success"].items():
        change = analysis["secondary"]["arm_vs_start"][arm]
        easy = analysis["secondary"]["non_inferiority"]["per_arm"][arm]["difference_interval"]
        quotes += [Quote(f"learning_3.{arm}.hard", f"{pct(success['hard']['mean'])}% "
                                                   f"{interval(success['hard'], 'bca_low', 'bca_high')}", pages),
                   Quote(f"learning_3.{arm}.vs_start",
                         f"{num(100 * change['difference_interval']['mean'], 1, signed=True)} points "
                         f"{interval(change['difference_interval'], 'bca_low', 'bca_high', signed=True)}, "
                         f"p {p_after_sign(permutation_p(change['within_item_permutation']))}", pages),
                   Quote(f"learning_3.{arm}.easy", f"{num(100 * easy['mean'], 1, signed=True)} "
                                                   f"{interval(easy, 'bca_low', 'bca_high', signed=True)}", pages)]
    for name, success in analysis["success"].items():  # each trained model alone: the seeds' spread
        if name != "start":
            quotes.append(Quote(f"learning_3.{name}.hard", f"{pct(success['hard']['mean'])}%", pages))
    for arm, cost in analysis["secondary"].get("cost", {}).items():
        quotes.append(Quote(f"learning_3.{arm}.train_min", f"{num(cost['train_wall_s'] / 60, 1)} minutes", pages))
        if cost["episodes_played"] is not None:
            quotes.append(Quote(f"learning_3.{arm}.episodes", f"{cost['episodes_played']:,} episodes", pages))
    for arm, declared in arms["arms"].items():  # each RL arm's training: success of all episodes drawn
        curves = [arms["runs"][name]["curve"]["drawn_success"] for name in declared["runs"]
                  if arms["runs"].get(name, {}).get("curve")]
        if curves:
            first, last = [c[0] for c in curves], [x for c in curves for x in c[-5:]]
            spread = [pct(min(values)) if pct(min(values)) == pct(max(values)) else
                      f"{pct(min(values))}-{pct(max(values))}" for values in (first, last)]
            quotes.append(Quote(f"learning_3.{arm}.drawn_success",
                                f"{spread[0]}% at the first step and {spread[1]}% over the last five", pages))
    for pair, test in analysis["secondary"].get("without_items", {}).get("comparisons", {}).items():
        change = num(100 * test["difference_interval"]["mean"], 1, signed=True)
        quotes.append(Quote(f"learning_3.{pair}.without", f"{change} points", pages))
    tests = {**analysis["primary"], **analysis["secondary"]["comparisons"]}
    for pair, test in tests.items():  # the registered comparisons, once both arms are evaluated
        change = test["difference_interval"]
        quotes.append(Quote(f"learning_3.{pair}", f"{num(100 * change['mean'], 1, signed=True)} points "
                                                  f"{interval(change, 'bca_low', 'bca_high', signed=True)}, p "
                                                  f"{p_after_sign(permutation_p(test['within_item_permutation']))}",
                            ("README.md", *pages) if pair in analysis["primary"] else pages))  # README: the claims
        seeds = test["seed_permutation"]
        quotes.append(Quote(f"learning_3.{pair}.seed_level", f"{seeds['relabellings']} relabellings and cannot reject "
                                                             f"anything (it gives p = {num(seeds['p_value'], 2)}"
                            if seeds["p_value"] >= 0.05 else f"p = {num(seeds['p_value'], 2)}", pages))
        if pair in analysis["primary"] and test["holm_rejected"] is not None:  # once the family is complete
            quotes.append(Quote(f"learning_3.{pair}.holm", "rejects" if test["holm_rejected"] else "keeps", pages))
    return quotes


def main_job_quotes() -> list[Quote]:
    """The main job's time, memory and stages (main_job.json, main_job_mb1024.json)."""
    main_job = result("main_job")
    stages = main_job["stage_time_and_memory"]
    minutes, seconds = main_job["wall_clock"].split(":")  # GNU time's m:ss
    training = ("docs/training.md",)
    quotes = [Quote("main_job.wall", f"{minutes} min {int(seconds)} s", training),
              Quote("main_job.peak_rss", f"{main_job['peak_rss_gb']} GB", training),
              Quote("main_job.max_rss", f"{main_job['gnu_time_max_rss_gb']} GB", ("docs/training.md",
                                                                                  "docs/results.md")),
              Quote("main_job_mb1024.max_rss", f"{result('main_job_mb1024')['gnu_time_max_rss_gb']} GB",
                    ("docs/training.md", "docs/results.md"))]
    for stage, name in (("base evaluation", "base_eval"), ("grpo", "grpo")):
        quotes.append(Quote(f"main_job.{name}", f"{num(stages[stage]['seconds'], 0)} s "
                                                f"({num(stages[stage]['total_gb'], 1)} GB)", training))
    for stage in ("warm-up", "grpo"):
        entry = main_job["stages"][stage]
        solved = round(entry["success"] * entry["episodes"])
        key = f"main_job.{stage.replace('-', '')}"
        quotes += [Quote(f"{key}.success", f"{solved}/{entry['episodes']} = {num(100 * entry['success'], 0)}%",
                         training),
                   Quote(f"{key}.ci95", f"[{num(100 * entry['ci95'][0], 0)}, {num(100 * entry['ci95'][1], 0)}]",
                         training),
                   Quote(f"{key}.valid", f"{num(100 * entry['valid_action_rate'], 0)}%", training)]
    return quotes


def comparison_quotes() -> list[Quote]:
    """The estimators compared (algorithms.json) and the turn-budget arms (turn_budget.json)."""
    results = ("docs/results.md",)
    quotes = []
    for arm, entry in result("algorithms")["arms"].items():
        versus = entry["change_vs_start"]
        quotes += [Quote(f"algorithms.{arm}.test", f"{pct(entry['test']['mean'])}% {interval(entry['test'])}",
                         results),
                   Quote(f"algorithms.{arm}.vs_start", f"{num(100 * versus['difference'], 1, signed=True)} points "
                                                       f"{interval(versus, signed=True)}, "
                                                       f"p = {num(versus['p_value'], 2)}", results),
                   Quote(f"algorithms.{arm}.step_s", str(entry["step_s_mean"]), results),
                   Quote(f"algorithms.{arm}.peak_rss", num(entry["peak_rss_mb"], 0), results)]
        if arm != "grpo":
            versus = entry["change_vs_grpo"]
            quotes.append(Quote(f"algorithms.{arm}.vs_grpo", f"{num(100 * versus['difference'], 1, signed=True)} "
                                                             f"points {interval(versus, signed=True)}, "
                                                             f"p = {num(versus['p_value'], 2)}", results))
    for arm, entry in result("turn_budget")["arms"].items():
        change = entry["change_vs_start"]
        quotes += [Quote(f"turn_budget.{arm}.test", f"{pct(entry['test']['mean'])}% {interval(entry['test'])}",
                         results),
                   Quote(f"turn_budget.{arm}.change", f"{num(100 * change['difference'], 1, signed=True)} "
                                                      f"{interval(change, signed=True)}", results),
                   Quote(f"turn_budget.{arm}.p", num(change["p_value"], 3), results),
                   Quote(f"turn_budget.{arm}.turns", num(entry["test"]["turns"], 2), results),
                   Quote(f"turn_budget.{arm}.minutes", str(entry["train_minutes"]), results)]
    draws = result("item_draws")["arms"]
    for arm, entry in draws.items():
        quotes += [Quote(f"item_draws.{arm}.drawn", num(entry["groups_drawn"], 0), results),
                   Quote(f"item_draws.{arm}.teaching", f"{num(entry['groups_teaching'], 0)} "
                                                       f"({num(100 * entry['teaching_frac_of_drawn'], 0)}%)", results),
                   Quote(f"item_draws.{arm}.episodes", num(entry["episodes"], 0), results),
                   Quote(f"item_draws.{arm}.kept", num(entry["groups_kept"], 0), results),
                   Quote(f"item_draws.{arm}.episodes_per_kept", num(entry["episodes"] / entry["groups_kept"], 1),
                         results)]
    return quotes


def speed_quotes() -> list[Quote]:
    """Memory and speed of a training step, rollouts and the robustness sweep."""
    results = ("docs/results.md",)
    memory = result("step_memory")["runs"]
    quotes = [Quote(f"step_memory.{run}.peak", num(memory[run]["step_peak_rss_gb"], 2), results)
              for run in ("ours", "trl")]
    quotes += [Quote(f"step_memory.{run}.bytes_per_token", f"{memory[run]['working_bytes_per_token'] / 1000:,.0f} k",
                     results) for run in ("ours", "trl")]
    train_step = result("train_step")
    peak = train_step["matmul_peak_gflops"]["bf16"]
    for config_name, config in train_step["configs"].items():
        step = config["steps"][1]
        phases = step["phases_s"]
        key = f"train_step.{config_name}"
        quotes += [Quote(f"{key}.step_s", f"{num(step['step_s'], 1)} s", results),
                   Quote(f"{key}.rollout", f"{num(phases['rollout'], 1)} s ({num(phases['decode'], 1)} s)", results),
                   Quote(f"{key}.training", f"{num(phases['reference_forward'], 1)} + "
                                            f"{num(phases['policy_forward'], 1)} + {num(phases['backward'], 1)} s",
                         results),
                   Quote(f"{key}.peak_share", f"{num(100 * step['training_gflops_per_s'] / peak, 0)}%", results),
                   Quote(f"{key}.rss", f"{num(step['peak_rss_gb'], 1)} GB", results)]
    for env, entry in train_step["episodes_per_hour_at_6_turns"].items():
        train = entry["train"]
        quotes.append(Quote(f"train_step.{env.removeprefix('AgentGym/')}.episodes_per_hour",
                            f"{train['episodes_per_hour']} ({num(train['step_s'], 0)} s a step, "
                            f"{num(train['real_tokens_per_step'] / 1000, 1)}k tokens)", results))
    rollout = result("rollout")
    quotes += [Quote(f"rollout.run{index}", f"{num(run['seconds'], 1)} s ({run['tokens_per_s']} tok/s)",
                     ("docs/engines.md",)) for index, run in enumerate(rollout["runs"])]
    for index, run in enumerate(rollout["eval"]):
        quotes += [Quote(f"rollout.eval{index}.tokens_per_s", str(run["tokens_per_s"]), ("docs/engines.md",)),
                   Quote(f"rollout.eval{index}.agent_s", f"{run['agent_s']} s", ("docs/engines.md",))]
    scaling = result("turn_scaling_random")["results"]
    quotes.append(Quote("turn_scaling_random.success", " / ".join(
        num(100 * entry["subtasks"]["overall"]["success"], 2) for entry in scaling) + " % with " + " / ".join(
        str(entry["max_turns"]) for entry in scaling) + " turns", ("docs/evaluation.md",)))
    robustness = result("robustness")["totals"]
    quotes.append(Quote("robustness.totals", f"{robustness['exceptions']}, {robustness['invalid_observations']}, "
                                             f"{robustness['max_step_s']} s ({robustness['steps']:,} steps)",
                        ("docs/development.md",)))
    return quotes


#: the CPU classes measured (bench_cpu_class.py), best first, with the heading each gets in the docs' table
CPU_CLASS_COLUMNS = (("avx512-bf16", "AVX512-BF16"), ("avx2", "AVX2 only"))


def cpu_class_cell(entry: dict | None, key: str) -> str:
    """One cell of the per-class table: an eval variant's tok/s (and its share of the class's peak), or why not."""
    if entry is None:
        return "not measured"
    rows = {row["variant"]: row for row in entry.get("eval", [])}
    row = rows.get(key)
    if row is None:
        return "not measured"
    if "skipped" in row:
        return "skipped: bf16 emulated"
    if "timed_out_after_s" in row:
        return f"over {num(row['timed_out_after_s'], 0)} s"
    if "failed" in row:
        return "failed"
    mark = " (default)" if entry.get("default_variant") == key else ""
    return f"{row['tokens_per_s']} tok/s{mark}"


def default_eval_row(entry: dict | None) -> dict | None:
    """The eval row of the variant a class gets by default (None where not measured)."""
    if entry is None:
        return None
    return next((row for row in entry.get("eval", []) if row["variant"] == entry.get("default_variant")), None)


def speedup_cell(entry: dict | None) -> str:
    """The default variant's tok/s over its 91e3954 path's, measured in the same run."""
    speedup = (entry or {}).get("default_speedup_over_91e3954")
    return "not measured" if speedup is None else f"{num(speedup, 2)}x"


def time_split_cell(entry: dict | None) -> str:
    """Seconds of the default variant's agent and env time by part (``against_limit`` of bench_cpu_class)."""
    row = default_eval_row(entry)
    if not row or "against_limit" not in row:
        return "not measured"
    seconds = row["against_limit"]["seconds"]
    return " / ".join(f"{num(seconds[part], 1)}" for part in ("prefill", "decode", "rest_of_generator", "env")) + " s"


def decode_limit_cell(entry: dict | None) -> str:
    """The default variant's decode positions per second against the class's limit (matmul peak / 2 per parameter)."""
    row = default_eval_row(entry)
    if not row or "against_limit" not in row:
        return "not measured"
    limit = row["against_limit"]
    return (f"{num(limit['decode_positions_per_s'], 0)} of {num(limit['limit_positions_per_s'], 0)} "
            f"({limit['decode_share_of_limit']:.0%})")


def cpu_class_quotes() -> list[Quote]:
    """Speed per CPU class (cpu_class_*.json): the matmul yardstick, eval tok/s per engine, the main job."""
    pages = ("docs/results.md",)
    found = {name: result(f"cpu_class_{name}") for name, _ in CPU_CLASS_COLUMNS
             if (RESULTS / f"cpu_class_{name}.json").exists()}
    forced = {name: bool(entry["class"].get("forced_by")) for name, entry in found.items()}
    lines = ["| | " + " | ".join(f"{title}{' (forced)' if forced.get(name) else ''}"
                                  for name, title in CPU_CLASS_COLUMNS) + " |",
             "|---|" + "---|" * len(CPU_CLASS_COLUMNS)]

    def row(label: str, cell) -> None:
        lines.append(f"| {label} | " + " | ".join(cell(found.get(name)) for name, _ in CPU_CLASS_COLUMNS) + " |")

    def matmul(entry: dict | None) -> str:  # the peak the eval figures were divided by (re-measured by later parts)
        if entry is None:
            return "not measured"
        peak = entry.get("eval_matmul") or entry["matmul"]
        return f"{peak['fp32_gflops']} / {peak['bf16_gflops']} GFLOP/s"

    row("matmul 1024x1024, fp32 / bf16 (in the eval run)", matmul)
    for variant in ("hf fp32", "hf bf16", "vllm fp32", "vllm bf16"):
        row(f"eval, {variant}", lambda e, v=variant: cpu_class_cell(e, v))
    row("eval, the default as HF generated at 91e3954 (same run)", lambda e: "not measured" if e is None else
        cpu_class_cell(e, f"{e.get('default_variant')} (91e3954 path)").replace(" (default)", ""))
    row("the default's speed-up over 91e3954", speedup_cell)
    row("the default's time: prefill / decode / rest of the generator / env", time_split_cell)
    row("the default's decode, positions/s of the class's limit", decode_limit_cell)

    def main_job(entry: dict | None) -> str:
        job = (entry or {}).get("main_job")
        if not job or "wall_s" not in job:
            return "not measured"
        return f"{int(job['wall_s'] // 60)} min {int(job['wall_s'] % 60)} s, {job['peak_rss_gb']} GB"

    row("main job (wall, peak memory)", main_job)
    quotes = [Quote("cpu_class.table", "\n" + "\n".join(lines) + "\n", pages)]
    jobs = {name: entry["main_job"] for name, entry in found.items() if "wall_s" in entry.get("main_job", {})}
    for name, job in jobs.items():
        quotes.append(Quote(f"cpu_class.{name}.main_job", f"{int(job['wall_s'] // 60)} min", ("README.md", *pages)))
    for name, entry in found.items():
        if entry.get("default_speedup_over_91e3954") is not None:
            quotes.append(Quote(f"cpu_class.{name}.eval_speedup", speedup_cell(entry), pages))
    if len(jobs) == len(CPU_CLASS_COLUMNS):
        ratio = jobs["avx2"]["wall_s"] / jobs["avx512-bf16"]["wall_s"]
        quotes.append(Quote("cpu_class.main_job_ratio", f"{num(ratio, 2)}x", pages))
    return quotes


def quotes() -> dict[str, Quote]:
    """Every quote, by name."""
    every = (learning_quotes() + skill_quotes() + gate_quotes() + arms_quotes() + main_job_quotes()
             + comparison_quotes() + speed_quotes() + cpu_class_quotes())
    named = {quote.name: quote for quote in every}
    assert len(named) == len(every), "two quotes share a name"
    return named


def fill(text: str, known: dict[str, Quote]) -> tuple[str, list[str]]:
    """``text`` with every marked quote rewritten from ``known``; and the names it marks that ``known`` lacks."""
    unknown = []

    def rewrite(match: re.Match) -> str:
        quote = known.get(match["name"])
        if quote is None:
            unknown.append(match["name"])
            return match[0]
        body = f"\n\n{quote.text}\n\n" if quote.block else quote.text
        return f"<!--q:{quote.name}-->{body}<!--/q-->"

    return MARKED.sub(rewrite, text), unknown


def stale_pages(root: Path = ROOT, write: bool = False) -> list[str]:
    """Problems of the pages' quotes: a stale quote, a marker of no known quote, a quote no page of it shows (and
    with ``write``, the stale ones rewritten first)."""
    known, problems = quotes(), []
    shown: dict[str, set[str]] = {}
    for page in PAGES:
        path = root / page
        text = path.read_text(encoding="utf-8")
        filled, unknown = fill(text, known)
        problems += [f"{page}: no quote named {name!r}" for name in unknown]
        for match in MARKED.finditer(text):
            shown.setdefault(match["name"], set()).add(page)
        if filled != text:
            if write:
                path.write_text(filled, encoding="utf-8")
            else:
                stale = [m["name"] for m in MARKED.finditer(text) if fill(m[0], known)[0] != m[0]]
                problems.append(f"{page}: out of date: {', '.join(stale)}")
    for name, quote in known.items():
        missing = set(quote.pages) - shown.get(name, set())
        problems += [f"{page}: does not show {name!r}" for page in sorted(missing)]
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="list what is out of date; write nothing")
    args = parser.parse_args(argv)
    problems = stale_pages(write=not args.check)
    for problem in problems:
        print(problem, file=sys.stderr)
    print(f"{len(quotes())} quotes; {len(problems)} problem(s)" + ("" if args.check else " after rewriting"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
