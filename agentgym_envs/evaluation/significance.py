"""Did training beat the start? The tests of ``docs/learning_protocol.md``, computed from per-item outcomes.

Every input is ``{item key: [0/1 outcome of each sample]}`` (K samples of one model on one item), as
``benchmarks/results/learning.json`` stores them, so anyone can recompute every number from that file:

* ``within_item_permutation_test`` (the registered primary test): items held fixed, the question is
  whether these trained checkpoints beat the start *on these items*. Under the null hypothesis an
  item's start and trained samples are exchangeable, so the trained group's share of the item's
  successes is hypergeometric; the statistic is the mean over items of (trained rate - start rate).
* ``sign_flip_test`` (the generalisation claim, beside it): items as a sample of a population of
  items; each item's difference is as likely to be negative as positive under the null.
* ``mean_interval``: BCa bootstrap (and Student t) intervals of a mean over items.
* ``seed_permutation_test`` (seeds as replicates): each training seed's success is one number, and the
  question is whether one arm's seeds beat another's; exact, over every relabelling of the seeds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import combinations
from typing import Any

import numpy as np

from agentgym_envs.evaluation.metrics import _stats, sign_flip_p_value  # scipy.stats, imported when needed

Outcomes = Mapping[str, Sequence[int]]


def pooled(models: Sequence[Outcomes]) -> dict[str, list[int]]:
    """Every model's samples of each item together (the registered way to combine training seeds)."""
    keys = set.intersection(*(set(model) for model in models)) if models else set()
    return {key: [outcome for model in models for outcome in model[key]] for key in sorted(keys)}


def rates(outcomes: Outcomes, keys: Sequence[str]) -> np.ndarray:
    """The success rate of each key's outcomes, in the order of ``keys``."""
    return np.array([np.mean(outcomes[key]) for key in keys], dtype=float)


def within_item_permutation_test(start: Outcomes, trained: Outcomes, *, resamples: int = 100_000,
                                 seed: int = 0) -> dict[str, float]:
    """Two-sided Monte Carlo permutation test of (trained - start) success, permuting samples within each item.

    p = (1 + #{|T*| >= |T|}) / (1 + resamples), so it is never 0.
    """
    keys = sorted(set(start) & set(trained))
    if not keys:
        raise ValueError("the two models share no item")
    n_start = np.array([len(start[key]) for key in keys])
    n_trained = np.array([len(trained[key]) for key in keys])
    successes = np.array([sum(start[key]) + sum(trained[key]) for key in keys])
    observed = float(np.mean(rates(trained, keys) - rates(start, keys)))
    rng = np.random.default_rng(seed)
    # successes that land in the trained group, per resample and item, when labels carry no information
    to_trained = rng.hypergeometric(successes, n_start + n_trained - successes, n_trained,
                                    size=(resamples, len(keys)))
    null = np.mean(to_trained / n_trained - (successes - to_trained) / n_start, axis=1)
    extreme = int(np.sum(np.abs(null) >= abs(observed) - 1e-12))
    return {"items": len(keys), "difference": observed, "p_value": (1 + extreme) / (1 + resamples),
            "resamples": resamples, "seed": seed}


def sign_flip_test(start: Outcomes, trained: Outcomes, *, resamples: int = 100_000, seed: int = 0) -> dict[str, float]:
    """Two-sided sign-flip test over items of the per-item differences (scipy's one-sample permutation test)."""
    keys = sorted(set(start) & set(trained))
    differences = rates(trained, keys) - rates(start, keys)
    p_value = sign_flip_p_value(differences, resamples, np.random.default_rng(seed))
    return {"items": len(keys), "difference": float(differences.mean()), "p_value": p_value,
            "items_up": int(np.sum(differences > 0)), "items_down": int(np.sum(differences < 0))}


def seed_permutation_test(these: Sequence[Outcomes], others: Sequence[Outcomes],
                          keys: Sequence[str]) -> dict[str, Any]:
    """Exact two-sided permutation test of two arms' seeds, each seed one replicate (its success: the mean over
    ``keys`` of its per-item rate). T = mean of ``these`` seeds' successes - mean of ``others``'; under the null the
    seeds' arm labels are exchangeable, so p = #{|T*| >= |T|} / C(n, len(these)) over every relabelling (4 + 4
    seeds: 70 of them, the smallest p 2/70). It asks whether the arm's training, not its samples, differs."""
    if not these or not others:
        raise ValueError("each arm needs at least one seed")
    keys = list(keys)
    values = np.array([float(np.mean(rates(model, keys))) for model in [*these, *others]])
    chosen = len(these)
    total = values.sum()

    def statistic(indices: Sequence[int]) -> float:
        picked = values[list(indices)].sum()
        return picked / chosen - (total - picked) / (len(values) - chosen)

    observed = statistic(range(chosen))
    relabellings = list(combinations(range(len(values)), chosen))
    extreme = sum(abs(statistic(indices)) >= abs(observed) - 1e-12 for indices in relabellings)
    return {"items": len(keys), "difference": observed, "p_value": extreme / len(relabellings),
            "relabellings": len(relabellings),
            "seed_success": {"these": values[:chosen].tolist(), "others": values[chosen:].tolist()}}


def mean_interval(values: Sequence[float], *, level: float = 0.95, resamples: int = 20_000,
                  seed: int = 0) -> dict[str, float]:
    """The mean with a BCa bootstrap interval and a Student t interval (both over items)."""
    values = np.asarray(values, dtype=float)
    mean = float(values.mean())
    if values.size < 2 or np.all(values == values[0]):
        return {"mean": mean, "bca_low": mean, "bca_high": mean, "t_low": mean, "t_high": mean}
    stats = _stats()
    bca = stats.bootstrap((values,), np.mean, confidence_level=level, n_resamples=resamples, method="BCa",
                          rng=np.random.default_rng(seed)).confidence_interval
    t_low, t_high = stats.t.interval(level, values.size - 1, loc=mean, scale=stats.sem(values))
    return {"mean": mean, "bca_low": float(bca.low), "bca_high": float(bca.high), "t_low": float(t_low),
            "t_high": float(t_high)}


def comparison(start: Outcomes, trained: Outcomes, keys: Sequence[str] | None = None) -> dict[str, Any]:
    """Both tests and the interval of the per-item difference, on ``keys`` (default: every shared item)."""
    keys = sorted(set(start) & set(trained)) if keys is None else list(keys)
    start, trained = {k: start[k] for k in keys}, {k: trained[k] for k in keys}
    return {
        "within_item_permutation": within_item_permutation_test(start, trained),
        "sign_flip_over_items": sign_flip_test(start, trained),
        "difference_interval": mean_interval(rates(trained, keys) - rates(start, keys)),
    }


def learning_report(result: Mapping[str, Any], alpha: float = 0.01) -> dict[str, Any]:
    """The registered analysis of a ``learning.json``: primary test on the seeds pooled (on every held-out item, or
    on the hard ones with ``"primary_items": "hard"``), each seed, hard items, and non-inferiority on the easy items
    when the result names a ``non_inferiority_margin``."""
    models, items, hard = result["models"], list(result["items"]), list(result.get("hard_items", []))
    start = models["start"]
    seeds = [name for name in models if name != "start"]
    success = {name: success_summary(model, items, hard) for name, model in models.items()}
    report: dict[str, Any] = {"alpha": alpha, "success": success}
    if not seeds:
        return report
    trained = pooled([models[name] for name in seeds])
    on = result.get("primary_items", "held_out")  # the registered test's items: every held-out item, or the hard
    tested = hard if on == "hard" else items
    primary = within_item_permutation_test({k: start[k] for k in tested}, {k: trained[k] for k in tested})
    report["primary"] = {**primary, "seeds": seeds, "on": on,
                         "rule": "seeds pooled per item (K per seed), two-sided",
                         "significant": primary["p_value"] < alpha and primary["difference"] > 0}
    margin = result.get("non_inferiority_margin")
    if margin:  # the easy items must not get worse by more than the margin (the interval's lower bound above it)
        hard_keys = set(hard)
        easy = [key for key in items if key not in hard_keys]
        change = comparison(start, trained, easy)
        report["non_inferiority"] = {"items": len(easy), "margin": margin, **change,
                                     "holds": change["difference_interval"]["bca_low"] > -margin}
    report["pooled"] = comparison(start, trained, items)
    report["per_seed"] = {name: comparison(start, models[name], items) for name in seeds}
    if hard:
        report["hard_items"] = {"pooled": comparison(start, trained, hard),
                                "per_seed": {name: comparison(start, models[name], hard) for name in seeds}}
    return report


def success_summary(model: Outcomes, items: Sequence[str], hard: Sequence[str]) -> dict[str, Any]:
    """A model's held-out success and hard-item success (BCa over items), and the hard items it ever solves."""
    return {"held_out": mean_interval(rates(model, items)),
            "hard": mean_interval(rates(model, hard)) if hard else None,
            "hard_items_solved_at_least_once": int(sum(any(model[k]) for k in hard))}


def control_report(result: Mapping[str, Any]) -> dict[str, Any]:
    """The zero-training controls of a ``learning.json`` (its ``controls`` part), beside the registered analysis.

    * ``trained_vs_start_at``: the trained seeds pooled (sampling seed 0, T of the protocol) against the start
      decoded otherwise (a lower temperature, greedy): is the gain more than sharpening the start's sampling gives?
    * ``greedy_vs_greedy_start``: each trained model greedy against the start greedy (decoding matched).
    * ``other_sampling_seed``: the registered primary test again, every model sampled with another seed.
    * ``same_model``: each model against itself under another sampling seed (the draw-to-draw noise).
    """
    controls, items = result["controls"], list(result["items"])
    runs, outcomes = controls["runs"], controls["models"]
    hard = list(result.get("hard_items", []))
    seeds = [name for name in result["models"] if name != "start"]
    report: dict[str, Any] = {"success": {name: success_summary(model, items, hard)
                                          for name, model in outcomes.items()}}
    if seeds:
        trained = pooled([result["models"][name] for name in seeds])
        report["trained_vs_start_at"] = {name: comparison(outcomes[name], trained, items) for name, run in runs.items()
                                         if run["model"] == "start" and run["sampling_seed"] == 0}
    if "start@greedy" in outcomes:  # decoding matched: each trained model greedy against the start greedy
        report["greedy_vs_greedy_start"] = {
            name: comparison(outcomes["start@greedy"], outcomes[name], items) for name, run in runs.items()
            if run["model"] != "start" and run["temperature"] == 0 and run["sampling_seed"] == 0}
    report["other_sampling_seed"] = {}
    for sampling_seed in sorted({run["sampling_seed"] for run in runs.values()} - {0}):
        names = {run["model"]: name for name, run in runs.items() if run["sampling_seed"] == sampling_seed}
        if "start" in names and all(seed in names for seed in seeds) and seeds:
            start, trained = outcomes[names["start"]], pooled([outcomes[names[seed]] for seed in seeds])
            report["other_sampling_seed"][str(sampling_seed)] = {
                "primary": within_item_permutation_test(start, {k: trained[k] for k in items}),
                "pooled": comparison(start, trained, items)}
    report["same_model"] = {name: comparison(result["models"][run["model"]], outcomes[name], items)
                            for name, run in runs.items()
                            if run["sampling_seed"] != 0 and run["model"] in result["models"]}
    return report


def holm(p_values: Mapping[str, float], alpha: float) -> dict[str, bool]:
    """Holm's step-down correction: the i-th smallest p (from 0, of m) is rejected iff it is below alpha / (m - i)
    and every smaller p was rejected. Family-wise error at most alpha over the tests."""
    order = sorted(p_values, key=lambda name: p_values[name])
    rejected, going = {}, True
    for i, name in enumerate(order):
        going = going and p_values[name] < alpha / (len(order) - i)
        rejected[name] = going
    return rejected


#: ``primary_test`` of an arms result -> the test its primary comparisons are decided by
PRIMARY_TESTS = {"items": "within_item_permutation", "seeds": "seed_permutation"}


def arm_pair(pair: str) -> tuple[str, str]:
    """``"d-a"``: arm d against arm a (d minus a)."""
    this, _, other = pair.partition("-")
    if not this or not other:
        raise ValueError(f"an arm comparison is 'x-y' (arm x against arm y), got {pair!r}")
    return this, other


def arms_report(result: Mapping[str, Any]) -> dict[str, Any]:
    """The analysis of arms trained from one start (``docs/learning_protocol_3.md``), from the result file alone.

    * ``primary``: each of ``comparisons`` ("x-y") on the primary items (every held-out item, or the hard ones):
      x minus y by the result's ``primary_test``, the within-item permutation test with each arm's seeds pooled
      (``items``, the default) or the exact seed-level test with each seed one replicate (``seeds``), then Holm
      over the comparisons at ``family_alpha``; ``supported`` iff rejected and x > y. Every comparison carries
      both tests (the one not chosen is secondary). Arms not yet evaluated in every seed are left out, and
      while a primary comparison waits for its arms (``primary_waiting_for``) none is decided (None).
    * ``secondary``: each of ``secondary_comparisons`` the same way (no correction); each arm against the start on
      the primary items; each arm alone per seed; each primary comparison without ``robustness_drop_items``;
      non-inferiority of each arm on the easy items when the result names a ``non_inferiority_margin``; what
      each arm's training cost (episodes and turns played, wall time), from its runs' records.
    """
    models, items, hard = result["models"], list(result["items"]), list(result.get("hard_items", []))
    tested = hard if result.get("primary_items") == "hard" else items
    done = {arm: [models[run] for run in spec["runs"]] for arm, spec in result["arms"].items()
            if all(run in models for run in spec["runs"])}
    arms = {arm: pooled(runs) for arm, runs in done.items()}
    start = models["start"]
    alpha = result.get("family_alpha", 0.05)
    chosen = PRIMARY_TESTS[result.get("primary_test", "items")]
    rule = ("each seed one replicate (its success: the mean over items of its rate); T = mean over x's seeds - mean "
            "over y's; exact two-sided p over every relabelling of the seeds" if chosen == "seed_permutation" else
            "each arm's seeds pooled per item; T = mean over items of (x rate - y rate); two-sided within-item "
            "permutation p")
    report: dict[str, Any] = {
        "family_alpha": alpha, "on": result.get("primary_items", "held_out"), "items": len(tested),
        "test": chosen, "rule": f"{rule}; Holm over the primary comparisons",
        "success": {name: success_summary(model, items, hard) for name, model in models.items()},
        "arm_success": {arm: success_summary(outcomes, items, hard) for arm, outcomes in arms.items()},
    }

    def against(pair: str, keys: Sequence[str]) -> dict[str, Any] | None:
        this, other = arm_pair(pair)
        if this not in arms or other not in arms:
            return None
        return {**comparison(arms[other], arms[this], keys),
                "seed_permutation": seed_permutation_test(done[this], done[other], keys)}

    primary = {pair: test for pair in result.get("comparisons", []) if (test := against(pair, tested))}
    # Holm's thresholds depend on the whole family: no decision until every primary comparison has its arms
    waiting = [pair for pair in result.get("comparisons", []) if pair not in primary]
    rejected = {} if waiting else holm({pair: test[chosen]["p_value"] for pair, test in primary.items()}, alpha)
    for pair, test in primary.items():
        test["holm_rejected"] = rejected.get(pair)
        test["supported"] = None if waiting else rejected[pair] and test[chosen]["difference"] > 0
    report["primary"] = primary
    report["primary_waiting_for"] = waiting
    secondary: dict[str, Any] = {
        "comparisons": {pair: test for pair in result.get("secondary_comparisons", [])
                        if (test := against(pair, tested))},
        "arm_vs_start": {arm: comparison(start, outcomes, tested) for arm, outcomes in arms.items()},
        "run_vs_start": {run: comparison(start, models[run], tested)
                         for arm in arms for run in result["arms"][arm]["runs"]},
    }
    dropped = set(result.get("robustness_drop_items", []))  # item keys
    if dropped:
        kept = [key for key in tested if key not in dropped]
        secondary["without_items"] = {"dropped": sorted(dropped & set(tested)), "comparisons": {
            pair: test for pair in primary if (test := against(pair, kept))}}
    margin = result.get("non_inferiority_margin")
    if margin:
        easy = [key for key in items if key not in set(hard)]
        secondary["non_inferiority"] = {"items": len(easy), "margin": margin, "per_arm": {}}
        for arm, outcomes in arms.items():
            change = comparison(start, outcomes, easy)
            secondary["non_inferiority"]["per_arm"][arm] = {
                **change, "holds": change["difference_interval"]["bca_low"] > -margin}
    costs = {arm: [result["runs"][run] for run in result["arms"][arm]["runs"]] for arm in arms
             if all(run in result.get("runs", {}) for run in result["arms"][arm]["runs"])}
    if costs:
        secondary["cost"] = {arm: training_cost(records) for arm, records in costs.items()}
    report["secondary"] = secondary
    return report


def training_cost(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What an arm's runs cost in all: optimizer steps, episodes and turns played (every episode dynamic sampling
    drew, those it discarded included), training wall time. A total is None when a run did not record it."""

    def total(key: str) -> float | None:
        values = [run.get(key) for run in runs]
        return None if any(value is None for value in values) else round(sum(values), 1)

    return {"runs": len(runs), **{key: total(key) for key in ("steps", "episodes_played", "turns_played",
                                                                 "train_wall_s")}}
