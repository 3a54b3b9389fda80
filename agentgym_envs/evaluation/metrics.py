"""Evaluation metrics over episode records, and the paper-style terminal table.

A record is one evaluated episode (see ``records.py``). Items are evaluated ``K`` times
(``--n-samples``); the metrics follow the paper's definitions:

* ``success``: mean success over every episode;
* ``avg_at_k``: per item, the mean success over its K samples, then the mean over items
  (equal to ``success`` when every item has exactly K samples);
* ``pass_at_k``: the fraction of items with at least one success among their K samples.

``success_interval`` and ``compare_success`` put error bars on these: the K samples of one item
are correlated (an easy item is solved by most of them), so items, not episodes, are the unit that
is resampled.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import numpy as np

from agentgym_envs.core.episode import CONTEXT, TOKEN_LIMITS
from agentgym_envs.core.tables import render_table

OVERALL = "overall"


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def item_successes(records: Iterable[Mapping[str, Any]]) -> dict[tuple[str, int], list[bool]]:
    """Success of every sample, grouped by (env id, item id)."""
    grouped: dict[tuple[str, int], list[bool]] = defaultdict(list)
    for record in records:
        grouped[(record["env_id"], int(record["item_id"]))].append(bool(record["info"]["success"]))
    return grouped


def avg_at_k(successes_per_item: Iterable[Sequence[bool]]) -> float | None:
    """Mean over items of the mean success over that item's samples."""
    return _mean([sum(samples) / len(samples) for samples in successes_per_item if samples])


def pass_at_k(successes_per_item: Iterable[Sequence[bool]]) -> float | None:
    """Fraction of items solved by at least one of their samples."""
    return _mean([float(any(samples)) for samples in successes_per_item if samples])


def summarize(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Metrics of a group of episodes (one env id and one turn budget, or any subset of them)."""
    per_item = item_successes(records)
    tokens = [r["tokens"] for r in records if r.get("tokens") is not None]
    return {
        "items": len(per_item),
        "episodes": len(records),
        "k": max((len(samples) for samples in per_item.values()), default=0),
        "success": _mean([float(r["info"]["success"]) for r in records]),
        "avg_at_k": avg_at_k(per_item.values()),
        "pass_at_k": pass_at_k(per_item.values()),
        "return": _mean([float(r["return"]) for r in records]),
        "score": _mean([float(r["info"]["score"]) for r in records]),
        "turns": _mean([float(r["turns"]) for r in records]),
        "tokens": _mean([float(t) for t in tokens]),
        # replies a token limit cut (``cut``: a turn's reply hit max_turn_tokens; its episode may have played on)
        "cut_turns": sum(len(r.get("cut") or ()) for r in records),
        "cut_episodes": sum(bool(r.get("cut")) or r["info"].get("stop_reason") in TOKEN_LIMITS for r in records),
        "context_stops": sum(r["info"].get("stop_reason") == CONTEXT for r in records),  # max_context_tokens ended
    }


def token_limit_warnings(entries: Sequence[Mapping[str, Any]], max_turn_tokens: int,
                         max_context_tokens: int | None) -> list[str]:
    """What ``agentgym eval`` warns of after its table: replies cut at the turn's token limit (their actions are
    what a cut reply held) and episodes the context limit ended, each with the flag that raises the limit."""
    overall = [entry["subtasks"][OVERALL] for entry in entries]
    cut = sum(o.get("cut_turns", 0) for o in overall)
    turns = sum(round(o["turns"] * o["episodes"]) for o in overall if o["turns"] is not None)
    stopped = sum(o.get("context_stops", 0) for o in overall)
    episodes = sum(o["episodes"] for o in overall)
    warnings = []
    if cut:
        warnings.append(f"{cut} of {turns} replies were cut at {max_turn_tokens} tokens, the limit of one turn: the "
                        "results are a cut model's; raise --max-turn-tokens to what the model was trained with (the "
                        "recipes in examples/configs: 512 tokens a turn, SciWorld 200)")
    if stopped and max_context_tokens is not None:
        warnings.append(f"{stopped} of {episodes} episodes ended at {max_context_tokens} tokens, the limit of a whole "
                        "episode: raise --max-context-tokens (the recipes: 8192 to 16384)")
    return warnings


def _item_rates(per_item: Mapping[Any, Sequence[bool]]) -> dict[Any, float]:
    return {key: sum(samples) / len(samples) for key, samples in per_item.items() if samples}


def _stats() -> Any:
    """``scipy.stats`` (in the ``[train]`` extra, like everything that reports intervals)."""
    try:
        from scipy import stats
    except ImportError:
        raise ImportError("confidence intervals need scipy: pip install 'agentgym-rl[train]' (or pip install scipy)"
                          ) from None
    return stats


def _bootstrap_interval(values: Any, level: float, resamples: int, rng: Any) -> tuple[float, float]:
    """The central ``level`` percentile interval of the mean of ``values`` over ``resamples`` bootstrap resamples."""
    if values.size < 2:  # nothing to resample: the interval is the value itself
        return float(values.mean()), float(values.mean())
    result = _stats().bootstrap((values,), np.mean, confidence_level=level, n_resamples=resamples,
                                method="percentile", rng=rng)
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def success_interval(per_item: Mapping[Any, Sequence[bool]], *, level: float = 0.95, resamples: int = 10_000,
                     seed: int = 0) -> dict[str, float]:
    """Avg@K with a bootstrap confidence interval over items (``{"mean", "low", "high"}``)."""
    rates = np.array(list(_item_rates(per_item).values()), dtype=float)
    if rates.size == 0:
        raise ValueError("no items to put an interval on")
    low, high = _bootstrap_interval(rates, level, resamples, np.random.default_rng(seed))
    return {"mean": float(rates.mean()), "low": low, "high": high}


def compare_success(before: Mapping[Any, Sequence[bool]], after: Mapping[Any, Sequence[bool]], *,
                    level: float = 0.95, resamples: int = 10_000, seed: int = 0) -> dict[str, float]:
    """Paired comparison of two evaluations on their shared items: the change in Avg@K, its bootstrap
    interval over items, and a two-sided sign-flip permutation p-value (no change = every item's
    difference is as likely negative as positive; exact when the 2^items sign patterns are at most
    ``resamples``, and never 0 otherwise, since the observed pattern counts as one of them)."""
    rates_before, rates_after = _item_rates(before), _item_rates(after)
    shared = sorted(set(rates_before) & set(rates_after))
    if not shared:
        raise ValueError("the two evaluations share no item")
    differences = np.array([rates_after[key] - rates_before[key] for key in shared])
    rng = np.random.default_rng(seed)
    low, high = _bootstrap_interval(differences, level, resamples, rng)
    return {"items": len(shared), "difference": float(differences.mean()), "low": low, "high": high,
            "p_value": sign_flip_p_value(differences, resamples, rng)}


def sign_flip_p_value(differences: Any, resamples: int, rng: Any) -> float:
    """Two-sided sign-flip permutation p of the mean of per-item ``differences`` (no change = each difference is
    as likely negative as positive); exact when the 2^items sign patterns are at most ``resamples``."""
    if differences.size < 2:  # one item: its two sign patterns are equally extreme
        return 1.0
    # one sample with permutation_type="samples" is scipy's sign-flip test
    return float(_stats().permutation_test((differences,), np.mean, permutation_type="samples",
                                           n_resamples=resamples, alternative="two-sided", rng=rng).pvalue)


def outcome_lists(per_item: Mapping[tuple[str, int], Sequence[bool]]) -> dict[str, list[int]]:
    """``item_successes`` as result files keep it: ``{"env id:item id": [0/1 per sample]}``, so anyone can
    recompute every interval and p-value from the file."""
    return {f"{env_id}:{item}": [int(bool(x)) for x in samples] for (env_id, item), samples in sorted(per_item.items())}


def summarize_by_subtask(records: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """``{sub-task: metrics, ..., "overall": metrics}``, sub-tasks in name order."""
    groups: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for record in records:
        groups[str(record.get("subtask") or "-")].append(record)
    table = {name: summarize(group) for name, group in sorted(groups.items())}
    table[OVERALL] = summarize(records)
    return table


def summarize_run(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One entry per (env id, turn budget): its per-sub-task and overall metrics."""
    groups: dict[tuple[str, int], list[Mapping[str, Any]]] = defaultdict(list)
    for record in records:
        groups[(record["env_id"], int(record["max_turns"]))].append(record)
    return [
        {"env_id": env_id, "max_turns": max_turns, "subtasks": summarize_by_subtask(group)}
        for (env_id, max_turns), group in sorted(groups.items())
    ]


COLUMNS = (
    ("items", "items", "{:d}"),
    ("episodes", "episodes", "{:d}"),
    ("success", "success %", "pct"),
    ("avg_at_k", "Avg@{k}", "pct"),
    ("pass_at_k", "Pass@{k}", "pct"),
    ("return", "return", "{:.3f}"),
    ("score", "score", "{:.3f}"),
    ("turns", "turns", "{:.1f}"),
    ("tokens", "tokens", "{:.0f}"),
    ("cut_turns", "cut turns", "{:d}"),
)


def half_up(x: float, digits: int = 1, signed: bool = False) -> str:
    """``x`` rounded half up to ``digits`` places, as people round and as every table and quote here prints a
    number: 31.25 gives 31.3 (Python's format rounds the binary value half to even, 31.2), so a table and an inline
    quote of one number never disagree."""
    text = str(Decimal(repr(float(x))).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP))
    return ("+" if signed and not text.startswith("-") else "") + text


def _cell(value: Any, style: str) -> str:
    if value is None:  # a summary.json written before the column existed too (``row`` reads it with .get)
        return "-"
    if style == "pct":
        return f"{100 * value:.2f}"
    return style.format(value)


def format_table(entry: Mapping[str, Any], split: str = "test") -> str:
    """A paper-like table of one (env id, turn budget) entry of ``summarize_run``: one row per sub-task and the
    overall row as the footer."""
    subtasks = entry["subtasks"]
    k = subtasks[OVERALL]["k"]
    header = ["sub-task", *(title.format(k=k) for _, title, _ in COLUMNS)]

    def row(name: str) -> list[str]:
        return [name, *(_cell(subtasks[name].get(key), style) for key, _, style in COLUMNS)]

    body = [row(name) for name in subtasks if name != OVERALL]
    title = f"{entry['env_id']}  ({split} split, K={k}, max turns {entry['max_turns']})"
    table = render_table(header, body, justify=["left", *["right"] * len(COLUMNS)], footer=row(OVERALL))
    return f"{title}\n{table}"


def has_scaling(entries: Sequence[Mapping[str, Any]]) -> bool:
    """Whether some env id was evaluated at several turn budgets (envs with different caps alone are not)."""
    budgets: dict[str, set[int]] = defaultdict(set)
    for entry in entries:
        budgets[entry["env_id"]].add(entry["max_turns"])
    return any(len(values) > 1 for values in budgets.values())


def format_scaling(entries: Sequence[Mapping[str, Any]]) -> str:
    """Success against the turn budget, one line per env id (test-time interaction scaling)."""
    by_env: dict[str, dict[int, float | None]] = defaultdict(dict)
    for entry in entries:
        by_env[entry["env_id"]][entry["max_turns"]] = entry["subtasks"][OVERALL]["success"]
    budgets = sorted({entry["max_turns"] for entry in entries})
    header = ["success % by max turns", *(str(budget) for budget in budgets)]
    rows = [[env_id, *(_cell(values.get(budget), "pct") for budget in budgets)]
            for env_id, values in sorted(by_env.items())]
    return render_table(header, rows, justify=["left", *["right"] * len(budgets)], column_gap=1)
