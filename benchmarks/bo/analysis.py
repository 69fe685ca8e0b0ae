"""Pure functions that turn run traces (``Trace.to_json()`` dicts) into benchmark numbers.

Simple regret is the incumbent's final-epoch error minus the table's best.
Before a run's first completed trial there is no incumbent; its regret is
then defined as the regret of the table's *median* final error (what one
random full run would give in expectation of rank), so curves start at a
common, finite value and means over seeds stay defined.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.stats import wilcoxon

THRESHOLD = 0.005  # regret target: 0.5 percentage points of error
BUDGETS = (100, 300, 1000)


def regret_curve(trace: dict, best: float, before: float, grid: Sequence[int]) -> np.ndarray:
    """Simple regret after each number of epochs in ``grid`` (a step function).

    Args:
        trace: A ``Trace.to_json()`` dict (``epochs``: cumulative epochs at each
            completion, ``incumbent_error`` after it).
        best: The table's best final error.
        before: Regret used before the first completion.
        grid: ``G`` epoch counts.

    Returns:
        ``G`` regrets; after the run's last completion the last value holds.
    """
    epochs = np.asarray(trace["epochs"], dtype=float)
    regret = np.asarray(trace["incumbent_error"], dtype=float) - best
    index = np.searchsorted(epochs, np.asarray(grid, dtype=float), side="right") - 1
    return np.where(index >= 0, regret[np.maximum(index, 0)] if len(regret) else before, before)


def chosen_quality_regret(trace: dict, error: np.ndarray, quality: np.ndarray) -> float:
    """Regret of a run's final choice measured by ``quality`` instead of the noisy
    final error that chose it: ``quality`` of the incumbent minus the table's best.

    The incumbent is the completed trial (trained to the last epoch) with the lowest
    final error; ties (discrete errors) count with their mean quality, as a random
    tie-break would in expectation.

    Args:
        trace: A ``Trace.to_json()`` dict (its ``trials``: setting and epochs each).
        error: ``N x E`` the table's errors per epoch (the last column chooses).
        quality: ``N`` a less noisy measure of the same settings (e.g. noise-free
            final errors).

    Returns:
        The regret, or NaN without a completed trial.
    """
    num_epochs = error.shape[-1]
    done = sorted({t["setting"] for t in trace["trials"] if t["epochs"] == num_epochs})
    if not done:
        return math.nan
    final = error[done, -1]
    tied = [s for s, e in zip(done, final) if e == final.min()]
    return float(quality[tied].mean() - quality.min())


def budget_spending(trace: dict, error: np.ndarray) -> dict[str, float]:
    """Where a run spent its epochs, and how far it took the table's best setting.

    Tells a search that never tried the best setting from one that tried it and left
    it paused or stopped (a promotion the model got wrong).

    Args:
        trace: A ``Trace.to_json()`` dict (its ``trials``: setting and epochs each; a
            setting resumed in several trials counts with its furthest epoch).
        error: ``N x E`` the table's errors per epoch; the best setting is the one with
            the lowest final error (ties: any of them).

    Returns:
        ``tried`` (settings started), ``finished`` (trained to the last epoch),
        ``best_epochs`` (the furthest epoch any best setting reached; 0 if never
        started), ``top10_finished`` (settings among the table's 10 best by final error
        trained to the end).
    """
    furthest: dict[int, int] = {}
    for trial in trace["trials"]:
        furthest[trial["setting"]] = max(furthest.get(trial["setting"], 0), trial["epochs"])
    final = error[:, -1]
    best = set(np.flatnonzero(final == final.min()).tolist())
    top10 = set(np.argsort(final, kind="stable")[:10].tolist())
    num_epochs = error.shape[-1]
    return {
        "tried": len(furthest),
        "finished": sum(e == num_epochs for e in furthest.values()),
        "best_epochs": max((e for s, e in furthest.items() if s in best), default=0),
        "top10_finished": sum(e == num_epochs for s, e in furthest.items() if s in top10),
    }


#: Bins of a run's standing at a checkpoint (the share of the table's settings with a
#: lower error there) for ``late_promotions``: its top 10 %, the next 15 %, the rest.
STANDING_BINS = (0.10, 0.25)


def late_promotions(trace: dict, error: np.ndarray, checkpoints: Sequence[int]) -> np.ndarray:
    """How often a search trained on the runs that stood well at its last two decisions.

    At each checkpoint before the last two steps (``checkpoints[-3]`` and
    ``checkpoints[-2]``), every run that reached it is placed by its standing there: the
    share of the table's settings with a lower error at that checkpoint (the table's, not
    the search's, so that searches with different pools are compared on one scale). A
    run is continued if it reached the next checkpoint; one that had not when the budget
    ran out (paused, or still training) counts as not continued.

    Args:
        trace: A ``Trace.to_json()`` dict (``trials``: setting and epochs each; a
            setting resumed in several trials counts with its furthest epoch).
        error: ``N x E`` the table's errors per epoch.
        checkpoints: The increasing epochs at which runs report (at least three).

    Returns:
        ``len(STANDING_BINS) + 1`` x 2 counts: per standing bin, runs continued and runs
        that reached one of the two checkpoints.
    """
    if len(checkpoints) < 3:
        raise ValueError(f"late_promotions needs at least three checkpoints; got {list(checkpoints)}.")
    furthest: dict[int, int] = {}
    for trial in trace["trials"]:
        furthest[trial["setting"]] = max(furthest.get(trial["setting"], 0), trial["epochs"])
    counts = np.zeros((len(STANDING_BINS) + 1, 2), dtype=int)
    for at, following in zip(checkpoints[-3:-1], checkpoints[-2:]):
        column = np.sort(error[:, at - 1])
        for setting, epochs in furthest.items():
            if epochs < at:
                continue
            standing = np.searchsorted(column, error[setting, at - 1], side="left") / len(column)
            row = int(np.searchsorted(STANDING_BINS, standing, side="right"))
            counts[row] += (epochs >= following, 1)
    return counts


def mean_se(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard error over the first axis (``S x G`` -> two ``G`` arrays).

    The standard error is ``std(ddof=1) / sqrt(S)`` (0 for a single seed).
    """
    values = np.asarray(values, dtype=float)
    n = values.shape[0]
    se = values.std(axis=0, ddof=1) / math.sqrt(n) if n > 1 else np.zeros(values.shape[1:])
    return values.mean(axis=0), se


def regret_at(
    trace: dict, best: float, before: float, budgets: Sequence[int], budget: int
) -> list[float]:
    """Regret after each of ``budgets`` epochs, each clipped to the run's ``budget``."""
    return [float(v) for v in regret_curve(trace, best, before, [min(b, budget) for b in budgets])]


def epochs_to_threshold(trace: dict, best: float, threshold: float = THRESHOLD) -> float:
    """Epochs consumed when regret first reached ``<= threshold`` (NaN if never)."""
    for epochs, error in zip(trace["epochs"], trace["incumbent_error"]):
        if error - best <= threshold:
            return float(epochs)
    return math.nan


def final_loss(trace: dict) -> float:
    """Validation loss of the run's final incumbent (NaN without a completion)."""
    return float(trace["incumbent_loss"][-1]) if trace["incumbent_loss"] else math.nan


def overhead(trace: dict, observed: int = 200) -> dict[str, float]:
    """Seconds the method spent deciding.

    Returns:
        ``suggest_mean``/``suggest_max``: per suggest call; ``suggest_at_200``:
        mean over calls made with ``>= observed`` trials with data (NaN if
        none); ``stop_mean``: per ``should_stop`` call (NaN if none).
    """
    suggest = np.asarray(trace["suggest_seconds"], dtype=float)
    late = suggest[np.asarray(trace["suggest_observed"]) >= observed] if len(suggest) else suggest
    stop = np.asarray(trace["stop_seconds"], dtype=float)

    def mean(a: np.ndarray) -> float:
        return float(a.mean()) if len(a) else math.nan

    return {
        "suggest_mean": mean(suggest),
        "suggest_max": float(suggest.max()) if len(suggest) else math.nan,
        "suggest_at_200": mean(late),
        "stop_mean": mean(stop),
    }


def wilcoxon_less(a: Sequence[float], b: Sequence[float]) -> float:
    """p-value of the paired one-sided Wilcoxon signed-rank test that ``a`` < ``b``.

    Pairs are seeds. All-equal pairs give no evidence: p = 1.
    """
    diff = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    if not np.any(diff != 0):
        return 1.0
    return float(wilcoxon(a, b, alternative="less").pvalue)


def censored_epochs(traces: Sequence[dict], best: float, budget: int) -> tuple[float, int]:
    """Mean epochs to regret <= ``THRESHOLD`` over seeds, and how many seeds reached it.

    A seed that never reached it counts as ``budget`` epochs, so the mean is a
    lower bound whenever some seed did not reach the threshold.
    """
    epochs = np.array([epochs_to_threshold(t, best) for t in traces])
    reached = int(np.isfinite(epochs).sum())
    return float(np.where(np.isfinite(epochs), epochs, budget).mean()), reached


def summarize(
    runs: dict[str, list[dict]],
    best: float,
    before: float,
    budget: int,
    budgets: Sequence[int] = BUDGETS,
) -> list[dict]:
    """One row per method: regret at budgets (mean, SE), epochs to 0.5%, loss, overhead.

    Args:
        runs: Traces by method name.
        best: The table's best final error.
        before: Regret before the first completion.
        budget: The runs' epoch budget (budgets beyond it are clipped to it).
        budgets: Epoch budgets to report the regret at.
    """
    rows = []
    for method, traces in runs.items():
        regrets = np.array([regret_at(t, best, before, budgets, budget) for t in traces])
        mean, se = mean_se(regrets)
        epochs, reached = censored_epochs(traces, best, budget)
        costs = [overhead(t) for t in traces]
        row: dict = {"method": method, "seeds": len(traces)}
        for b, m, s in zip(budgets, mean, se):
            row[f"regret@{min(b, budget)}"] = float(m)
            row[f"se@{min(b, budget)}"] = float(s)
        row["epochs_to_0.5%"] = epochs
        row["reached_0.5%"] = f"{reached}/{len(traces)}"
        losses = [v for v in (final_loss(t) for t in traces) if not math.isnan(v)]
        row["final_val_loss"] = float(np.mean(losses)) if losses else math.nan
        for key in ("suggest_mean", "suggest_at_200", "stop_mean"):
            values = [c[key] for c in costs if not math.isnan(c[key])]
            row[f"{key}_s"] = float(np.mean(values)) if values else math.nan
        row["suggest_max_s"] = float(max(c["suggest_max"] for c in costs))
        rows.append(row)
    return rows


def spending(runs: dict[str, list[dict]], final_error: Sequence[float]) -> list[dict]:
    """How each method spent its epochs: trials, stops, and stops that were mistakes.

    Args:
        runs: Traces by method name.
        final_error: The table's final-epoch error of every setting (indexed by setting).

    Returns:
        One row per method, means over seeds: trials started, the share stopped
        early, epochs per trial, trials trained to the last epoch, and *wrong
        stops*: stopped trials whose final error is lower than the best final
        error the run ended with (stopping them cost the run regret).
    """
    rows = []
    for method, traces in runs.items():
        per_seed = []
        for trace in traces:
            trials = trace["trials"]
            stopped = [t for t in trials if t["status"] == "stopped"]
            ended_with = trace["incumbent_error"][-1] if trace["incumbent_error"] else math.inf
            per_seed.append(
                (
                    len(trials),
                    len(stopped) / max(len(trials), 1),
                    float(np.mean([t["epochs"] for t in trials])) if trials else math.nan,
                    sum(t["status"] == "completed" for t in trials),
                    sum(final_error[t["setting"]] < ended_with for t in stopped),
                )
            )
        mean = np.mean(np.array(per_seed, dtype=float), axis=0)
        keys = ("trials", "stopped_share", "epochs_per_trial", "completed", "wrong_stops")
        rows.append({"method": method, **{k: float(v) for k, v in zip(keys, mean)}})
    return rows


def paired(runs: dict[str, list[dict]], a: str, b: str) -> tuple[list[dict], list[dict]]:
    """The traces of methods ``a`` and ``b`` on the seeds both have, in seed order."""
    by_seed = {m: {t["seed"]: t for t in runs[m]} for m in (a, b)}
    seeds = sorted(set(by_seed[a]) & set(by_seed[b]))
    return [by_seed[a][s] for s in seeds], [by_seed[b][s] for s in seeds]


def comparisons(
    runs: dict[str, list[dict]],
    best: float,
    before: float,
    budget: int,
    reference: str = "gpar_es",
    budgets: Sequence[int] = (300, 1000),
) -> list[dict]:
    """Paired one-sided Wilcoxon tests that ``reference`` has lower regret than each method.

    Returns:
        One row per (other method, budget): seeds paired, mean regrets and p-value.
    """
    rows = []
    for other in runs:
        if other == reference or reference not in runs:
            continue
        mine, theirs = paired(runs, reference, other)
        for b in sorted({min(b, budget) for b in budgets}):  # clipping may repeat a budget
            r_mine = [regret_at(t, best, before, [b], budget)[0] for t in mine]
            r_theirs = [regret_at(t, best, before, [b], budget)[0] for t in theirs]
            rows.append(
                {
                    "reference": reference,
                    "other": other,
                    "budget": b,
                    "seeds": len(mine),
                    "reference_regret": float(np.mean(r_mine)) if mine else math.nan,
                    "other_regret": float(np.mean(r_theirs)) if mine else math.nan,
                    "p_less": wilcoxon_less(r_mine, r_theirs) if mine else math.nan,
                }
            )
    return rows


def check_targets(
    runs: dict[str, list[dict]], best: float, before: float, budget: int, alpha: float = 0.05
) -> list[dict]:
    """The issue's targets, each with the measured value and whether it is met.

    ``met`` is None when a target cannot be evaluated (a method did not run,
    or no suggest call saw 200 observed trials).
    """
    targets = []
    if {"gpar_es", "ax_default"} <= set(runs):
        mine, reached = censored_epochs(runs["gpar_es"], best, budget)
        theirs, _ = censored_epochs(runs["ax_default"], best, budget)
        ratio = mine / theirs
        targets.append(
            {
                "target": "gpar_es epochs to regret <= 0.5% at most half of ax_default's",
                "value": f"ratio {ratio:.3g} ({mine:.4g} vs {theirs:.4g} epochs; "
                f"gpar_es reached in {reached}/{len(runs['gpar_es'])} seeds)",
                "met": bool(ratio <= 0.5 and reached > len(runs["gpar_es"]) / 2),
            }
        )
    tests = comparisons(runs, best, before, budget)
    for b in sorted({t["budget"] for t in tests}):
        at_b = [t for t in tests if t["budget"] == b]
        worst = max(t["p_less"] for t in at_b)
        targets.append(
            {
                "target": f"gpar_es lowest mean regret at {b} epochs, Wilcoxon p < {alpha} vs each",
                "value": f"max p {worst:.3g} over the {len(at_b)} other methods",
                "met": bool(
                    worst < alpha and all(t["reference_regret"] < t["other_regret"] for t in at_b)
                ),
            }
        )
    for method in ("gpar", "gpar_es"):
        if method in runs:
            late = [overhead(t)["suggest_at_200"] for t in runs[method]]
            late = [v for v in late if not math.isnan(v)]
            targets.append(
                {
                    "target": f"{method} suggest overhead < 5 s at >= 200 observed trials",
                    "value": f"{np.mean(late):.3g} s" if late else "no call saw 200 trials",
                    "met": bool(np.mean(late) < 5.0) if late else None,
                }
            )
    return targets


def regret_bands(
    runs: dict[str, list[dict]], best: float, before: float, budget: int
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per method, the mean and SE over seeds of the regret after 1..``budget`` epochs."""
    grid = np.arange(1, budget + 1)
    return {
        method: mean_se(np.array([regret_curve(t, best, before, grid) for t in traces]))
        for method, traces in runs.items()
    }
