"""One method's regret in two freeze-thaw runs files, paired by seed.

When code under a method changes without changing its name (the posterior's correction of
2026-12-01, for one), its runs before and after are compared on the same tables and seeds::

    python -m benchmarks.freeze_thaw_compare BEFORE.jsonl AFTER.jsonl --tables 101 mnist

prints a markdown table: for each table and report point of ``benchmarks.freeze_thaw_study``,
the seeds both files hold, the mean regret in each, and the paired one-sided Wilcoxon p-values
of "after < before" and "before < after". Regret is the study's: the incumbent's final error
minus the table's best, the median setting's before a run's first completion.

``--after-method`` compares another method's runs in ``AFTER`` with ``--method``'s in
``BEFORE`` (e.g. a candidate against the default; the two files may be one)::

    python -m benchmarks.freeze_thaw_compare RUNS.jsonl RUNS.jsonl --tables dev_classification \
        --after-method gpar_freeze_thaw_converged
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from benchmarks.bo.analysis import wilcoxon_less
from benchmarks.freeze_thaw_study import (
    BUDGET_RUNS, METHODS, REFERENCE, budget_of, canonical_table, load_runs, make_problem, report_points,
    report_regrets, traces_by_seed,
)
from benchmarks.report import markdown_table


def compare(before: Sequence[dict], after: Sequence[dict], tables: Sequence[str],
            method: str = REFERENCE, budget_runs: float = BUDGET_RUNS,
            after_method: str | None = None) -> list[dict]:
    """One row per table and report point comparing ``method``'s runs in ``before`` with
    ``after_method``'s (default: ``method``'s) in ``after`` (runs-file lines) at the
    study's budget of ``budget_runs`` full runs, on the seeds both hold.

    Raises a one-line ``ValueError`` for a table where no seed is in both, or where one
    file holds two runs of a seed.
    """
    rows = []
    for table in map(canonical_table, tables):
        problem = make_problem(table)
        budget = budget_of(table, problem, budget_runs)
        n = problem.X.shape[0]

        other = after_method or method
        old = traces_by_seed(before, method, table, n, budget, "before")
        new = traces_by_seed(after, other, table, n, budget, "after")
        seeds = sorted(old.keys() & new.keys())
        if not seeds:
            pair = method if other == method else f"{method} (before) and {other} (after)"
            raise ValueError(f"no seed of {pair} on table {table!r} (budget {budget}) is in both runs files.")
        a, b = (report_regrets(table, problem, budget, [runs[s] for s in seeds]) for runs in (old, new))
        for j, label in enumerate(report_points(table, budget)):
            rows.append({"table": table, "at": label, "seeds": len(seeds),
                         "regret_before": float(a[:, j].mean()), "regret_after": float(b[:, j].mean()),
                         "p_after_less": wilcoxon_less(b[:, j], a[:, j]),
                         "p_before_less": wilcoxon_less(a[:, j], b[:, j])})
    return rows


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", type=Path, help="runs file (freeze_thaw_runs.jsonl) before the change")
    parser.add_argument("after", type=Path, help="runs file after it")
    parser.add_argument("--tables", nargs="+", required=True, help="tables as benchmarks.freeze_thaw_study names them")
    parser.add_argument("--method", default=REFERENCE, choices=METHODS, help=f"default: {REFERENCE}")
    parser.add_argument("--after-method", default=None, choices=METHODS,
                        help="the method whose runs in AFTER are compared (default: --method)")
    parser.add_argument("--budget-runs", type=float, default=BUDGET_RUNS,
                        help=f"the runs' budget in full runs' worth of epochs, as in the study (default {BUDGET_RUNS})")
    args = parser.parse_args(argv)
    if args.budget_runs < 1:
        parser.error(f"--budget-runs must be >= 1; got {args.budget_runs}")
    for path in (args.before, args.after):
        if not path.is_file():
            parser.error(f"no runs file at {path}")
    try:
        rows = compare(load_runs(args.before), load_runs(args.after), args.tables, args.method, args.budget_runs,
                       args.after_method)
    except ValueError as error:
        parser.error(str(error))
    text = markdown_table(rows)
    print(text)
    return text


if __name__ == "__main__":
    main()
