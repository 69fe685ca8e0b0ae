"""The shipped policy told a smaller budget, against the field read off at that budget.

``benchmarks.freeze_thaw_study`` reads every method's regret at 25 % and 50 % of a 50-run
budget off runs made with the whole budget. For the field that is the same as running it
with the smaller budget: none of its methods is told the budget (the harness's baselines
and Syne Tune's schedulers decide by each run's epochs, never by the epochs left), so the
first quarter of its run is a quarter-budget run. The policy is told the epochs left
(``FreezeThawPolicy.decide(..., epochs_left=...)``) and ends its search by them, so its
25 % reading is of a run planned for four times the epochs. A user with the smaller budget
tells the policy that budget. This pairs, by seed, the policy's runs told the smaller
budget (made by the study with ``--budget-runs 12.5`` and ``25``) with the field's
readings at the same epoch, and with the policy's own reading there::

    python -m benchmarks.freeze_thaw_study --tables 101 mnist --seeds 20 --methods gpar_freeze_thaw \\
        --budget-runs 12.5 --out benchmarks/results/told_budget/quarter
    python -m benchmarks.freeze_thaw_study ... --budget-runs 25 --out benchmarks/results/told_budget/half
    python -m benchmarks.freeze_thaw_told_budget --tables 101 mnist --seeds 20 \\
        --told benchmarks/results/told_budget/{quarter,half}/freeze_thaw_runs.jsonl

It writes ``told_budget.{md,csv,json,png}`` into ``--out``: per table and budget,
each method's mean regret on the seeds it shares with the told runs, the told policy's on
the same seeds, and paired one-sided Wilcoxon p-values both ways.
"""

from __future__ import annotations

import argparse
import functools
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmarks.bo.analysis import mean_se, regret_at, wilcoxon_less
from benchmarks.bo.baselines import BASELINES
from benchmarks.freeze_thaw_study import (
    BUDGET_RUNS, FRACTIONS, REFERENCE, SYNE_TUNE_METHODS, budget_of, canonical_table, load_runs, make_problem,
    report_points, traces_by_seed,
)
from benchmarks.report import RESULTS, command_line, markdown_table, write_results

#: The methods the policy is measured against: none of them is told the budget.
FIELD = (*BASELINES, *SYNE_TUNE_METHODS)
#: The policy told the smaller budget, as its rows are labelled.
TOLD = f"{REFERENCE} (told)"
#: The study's tables, built once per process: every function here reads each table's
#: errors, and the MNIST and funnel tables are read from CSV files.
table_problem = functools.cache(make_problem)


def smaller_budgets(table: str) -> list[tuple[str, int]]:
    """``(label, epochs)`` of the study's readings before its full budget (``25%``,
    ``50%``): the budgets the policy is told here.

    Raises a one-line ``ValueError`` for a table whose budget does not scale (``quick``).
    """
    problem = table_problem(table)
    points = report_points(table, budget_of(table, problem))
    out = []
    for fraction in FRACTIONS[:-1]:
        label, budget = f"{fraction:.0%}", budget_of(table, problem, fraction * BUDGET_RUNS)
        if budget != points[label]:
            raise ValueError(f"table {table!r} keeps one budget (the study's 'quick' table): it has no smaller one.")
        out.append((label, budget))
    return out


def told_budget_rows(runs: Sequence[dict], told: Sequence[dict], tables: Sequence[str],
                     seeds: int = 20) -> list[dict]:
    """One row per table, smaller budget (25 % and 50 % of the study's 50 runs) and method.

    Args:
        runs: The study's lines at its full budget of 50 runs (the field, and the policy
            read off at the smaller budget).
        told: Lines of the policy told the smaller budgets (``--budget-runs 12.5``, ``25``).
        tables: Table names as the study spells them.
        seeds: Use seeds ``0..seeds-1``.

    Returns:
        Rows with the method's mean regret at the smaller budget on the seeds it shares with
        the told runs (``regret``, ``se``), the told policy's on those seeds
        (``told_regret``) and the p-values of "told lower" and "method lower" (NaN on the
        told policy's own row and with one shared seed). A method that shares no seed has
        no row (``verdicts`` lists it).

    Raises:
        ValueError: (one line) a table has no told run at a smaller budget or no method of
            the field at the full budget on a told seed, or a file holds two runs of one
            method and seed.
    """
    rows: list[dict] = []
    for table in map(canonical_table, tables):
        problem = table_problem(table)
        n, full = problem.X.shape[0], budget_of(table, problem)
        best = problem.best_final_error
        before = float(problem.final_error.median()) - best
        field = {m: traces_by_seed(runs, m, table, n, full, "study", seeds) for m in (REFERENCE, *FIELD)}
        for label, budget in smaller_budgets(table):
            mine = traces_by_seed(told, REFERENCE, table, n, budget, "told", seeds)
            if not mine:
                raise ValueError(f"no run of {REFERENCE} told a budget of {budget} epochs ({label}) on table "
                                 f"{table!r} is in the told runs file.")
            if not any(found.keys() & mine.keys() for m, found in field.items() if m in FIELD):
                raise ValueError(f"no method of the field has a run of the full budget ({full} epochs) on table "
                                 f"{table!r} on a seed of the told runs.")

            def read(traces: dict[int, dict]) -> dict[int, float]:
                return {s: regret_at(t, best, before, [budget], budget)[0] for s, t in traces.items()}

            ours = read(mine)
            for method, theirs in {TOLD: ours, **{m: read(found) for m, found in field.items()}}.items():
                shared = sorted(theirs.keys() & ours.keys())
                if not shared:
                    continue
                a, b = np.array([ours[s] for s in shared]), np.array([theirs[s] for s in shared])
                mean, se = mean_se(b[:, None])
                tested = method != TOLD and len(shared) > 1
                rows.append({"table": table, "at": label, "epochs": budget, "method": method, "seeds": len(shared),
                             "regret": float(mean[0]), "se": float(se[0]), "told_regret": float(a.mean()),
                             "p_told_less": wilcoxon_less(a, b) if tested else math.nan,
                             "p_other_less": wilcoxon_less(b, a) if tested else math.nan})
    return rows


def told_seeds(told: Sequence[dict], tables: Sequence[str], seeds: int = 20) -> list[int]:
    """The seeds of the told runs ``told_budget_rows`` reads (the report's provenance)."""
    found: set[int] = set()
    for table in map(canonical_table, tables):
        n = table_problem(table).X.shape[0]
        for _, budget in smaller_budgets(table):
            found |= traces_by_seed(told, REFERENCE, table, n, budget, "told", seeds).keys()
    return sorted(found)


def started_and_finished(told: Sequence[dict], tables: Sequence[str], seeds: int = 20) -> dict[tuple[str, str], dict]:
    """Per table and smaller budget, what the told runs had in hand against what they
    finished, as means over seeds: the best final regret among every setting they started
    (``told_best_started``), the number of runs they finished (``told_finished``) and the
    median final regret of those runs (``told_finished_median``, over seeds that finished one)."""
    out = {}
    for table in map(canonical_table, tables):
        problem = table_problem(table)
        regret = problem.final_error.numpy() - problem.best_final_error
        for label, budget in smaller_budgets(table):
            found = traces_by_seed(told, REFERENCE, table, problem.X.shape[0], budget, "told", seeds)
            if not found:
                continue
            started = [[regret[t["setting"]] for t in trace["trials"]] for trace in found.values()]
            finished = [[regret[t["setting"]] for t in trace["trials"] if t["status"] == "completed"]
                        for trace in found.values()]
            out[table, label] = {
                "told_best_started": float(np.mean([min(r) for r in started])),
                "told_finished": float(np.mean([len(r) for r in finished])),
                "told_finished_median": float(np.mean(medians)) if (medians := [np.median(r) for r in finished if r])
                else math.nan,
            }
    return out


def verdicts(rows: Sequence[dict]) -> list[dict]:
    """Per table and budget: the told policy's regret, the policy's reading there in its
    full-budget runs, the field's lowest mean regret (among methods run on every told seed),
    how many of the field the told policy beats at p < 0.05 (of those tested) and which of
    the field have no run on a told seed."""
    out = []
    for key in dict.fromkeys((r["table"], r["at"]) for r in rows):
        group = [r for r in rows if (r["table"], r["at"]) == key]
        told = next(r for r in group if r["method"] == TOLD)
        field = [r for r in group if r["method"] in FIELD]
        complete = [r for r in field if r["seeds"] == told["seeds"]]
        leader = min(complete, key=lambda r: r["regret"]) if complete else None
        tested = [r for r in field if not math.isnan(r["p_told_less"])]
        read_off = next((r for r in group if r["method"] == REFERENCE), None)
        out.append({"table": key[0], "at": key[1], "seeds": told["seeds"], "told_regret": told["regret"],
                    "read_off_regret": read_off["regret"] if read_off else math.nan,
                    "read_off_seeds": read_off["seeds"] if read_off else 0,
                    "field_lowest": leader["method"] if leader else "",
                    "field_lowest_regret": leader["regret"] if leader else math.nan,
                    "told_vs_lowest": "" if leader is None else
                    ("lower" if told["regret"] < leader["regret"] else
                     "tied" if told["regret"] == leader["regret"] else "higher"),
                    "field_beaten_p05": f"{sum(r['p_told_less'] < 0.05 for r in tested)}/{len(tested)}",
                    "field_without_runs": " ".join(m for m in FIELD if m not in {r["method"] for r in field})})
    return out


def plot(rows: Sequence[dict], path: Path) -> None:
    """Mean regret (± one standard error) per method at each smaller budget, a panel per table."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tables = list(dict.fromkeys(r["table"] for r in rows))
    methods = [m for m in (TOLD, REFERENCE, *FIELD) if any(r["method"] == m for r in rows)]
    fig, axes = plt.subplots(1, len(tables), figsize=(3.2 * len(tables), 3.4), squeeze=False)
    for ax, table in zip(axes[0], tables):
        labels = list(dict.fromkeys(r["at"] for r in rows if r["table"] == table))
        for j, method in enumerate(methods):
            mine = {r["at"]: r for r in rows if r["table"] == table and r["method"] == method}
            x = [i + (j - len(methods) / 2) * 0.07 for i, at in enumerate(labels) if at in mine]
            y = [mine[at]["regret"] for at in labels if at in mine]
            e = [mine[at]["se"] for at in labels if at in mine]
            ax.errorbar(x, y, yerr=e, fmt="o" if method == TOLD else ".", ms=6 if method == TOLD else 4,
                        color="k" if method == TOLD else None, label=method)
        ax.set_xticks(range(len(labels)), labels)
        ax.set_title(table)
    axes[0][0].set_ylabel("regret at the budget")
    axes[0][-1].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", nargs="+", required=True, help="tables as benchmarks.freeze_thaw_study names them")
    parser.add_argument("--told", type=Path, nargs="+", required=True,
                        help="runs files of the policy told the smaller budgets")
    parser.add_argument("--runs", type=Path, default=RESULTS / "freeze_thaw_runs.jsonl",
                        help="the study's runs file at its full budget (default: the reported one)")
    parser.add_argument("--seeds", type=int, default=20, help="use seeds 0..N-1 (default 20)")
    parser.add_argument("--out", type=Path, default=RESULTS / "told_budget")
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error(f"--seeds must be >= 1; got {args.seeds}")
    try:  # every table is checked before the runs files are read
        tables = [canonical_table(t) for t in args.tables]
        for table in tables:
            smaller_budgets(table)
    except ValueError as error:
        parser.error(str(error))
    for path in (*args.told, args.runs):
        if not path.is_file():
            parser.error(f"no runs file at {path}")
    told = [line for path in args.told for line in load_runs(path)]
    try:
        rows = told_budget_rows(load_runs(args.runs), told, tables, args.seeds)
    except ValueError as error:
        parser.error(str(error))
    summary = verdicts(rows)
    found = started_and_finished(told, tables, args.seeds)
    for verdict in summary:
        verdict |= found[verdict["table"], verdict["at"]]
    notes = (
        "`regret`: the method's mean regret at the budget (epochs) on the seeds it shares with the told runs; "
        f"`{TOLD}`: the policy told that budget (`--budget-runs`), its regret at the end; `{REFERENCE}`: the "
        "policy told the study's full budget, read off at the smaller one, as the study reports it. "
        "`p_told_less`: paired one-sided Wilcoxon p-value that the told policy's regret is lower; "
        "`p_other_less` the other way.\n\n## Verdicts\n\n" + markdown_table(summary) +
        "\n\n`field_lowest`: the field's method with the lowest mean regret among those run on every told seed "
        "(`told_vs_lowest`: the told policy's mean regret against it); "
        "`field_beaten_p05`: methods of the field the told policy beats at p < 0.05, of those tested (two or "
        "more shared seeds); `field_without_runs`: methods of the field with no run on a told seed; "
        "`read_off_seeds`: seeds of the policy's full-budget runs among the told ones; "
        "`told_best_started`: the told runs' mean best final regret among all the settings they started, "
        "finished or not; `told_finished`: their mean number of runs trained to the end; "
        "`told_finished_median`: the mean, over seeds that finished a run, of those runs' median final regret."
    )
    paths = write_results(args.out, "told_budget", "The policy told a smaller budget, against the field at that budget",
                          rows, command_line(argv), told_seeds(told, tables, args.seeds), notes, extra={"verdicts": summary})
    plot(rows, args.out / "told_budget.png")
    return paths["md"].read_text()


if __name__ == "__main__":
    print(main())
