"""Tabular BO benchmark (issue 7): which method finds a good MNIST MLP in fewest epochs?

Every method runs in the same harness (``benchmarks/bo/harness.py``): 4
asynchronous workers "train" settings of a table epoch by epoch, methods may
stop runs at checkpoints (epochs 1, 3, 7, 14, 21), and the cost is epochs
consumed. For each (method, seed) the run's trace is appended to
``<out>/bo_<problem>_runs.jsonl`` as soon as it finishes, so an interrupted
benchmark resumes where it stopped. The analysis (``benchmarks/bo/analysis.py``)
then writes ``bo_<problem>.md/.csv/.json`` (regret at 100/300/1000 epochs,
epochs to regret <= 0.5%, final validation loss, optimiser overhead, paired
Wilcoxon tests of ``gpar_es`` against each method, the issue's targets) and
``bo_<problem>.png`` (regret vs epochs with standard-error bands; overhead).

Methods: the model-free baselines in ``benchmarks/bo/baselines.py`` plus the
model-based ones in ``benchmarks/bo/model_methods.py`` (``MODEL_METHODS``) when
that module imports, and ``gpar_freeze_thaw``: the package's
``gpar_bo.freeze_thaw.FreezeThawPolicy`` with its defaults, told the epochs each worker
has left, through the harness adapter in ``benchmarks/bo/freeze_thaw.py``. ``--quick`` is the CI smoke test (synthetic problem, 2
seeds, small budget, results in ``benchmarks/results/quick/``).

    python -m benchmarks.bo_mnist                       # 20 seeds, all methods, MNIST table
    python -m benchmarks.bo_mnist --quick               # CI smoke test
    python -m benchmarks.bo_mnist --methods random asha --seeds 5 --jobs 2
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch: the machine's cores are shared

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch
from tqdm import tqdm

from benchmarks.bo import analysis
from benchmarks.bo.baselines import BASELINES, optuna_available
from benchmarks.bo.harness import Method, TabularProblem, simulate
from benchmarks.bo.problems import mnist_table, synthetic_problem
from benchmarks.report import RESULTS, command_line, markdown_table, write_results

# 250 epochs: the model-based methods start after the first completions (~84 epochs).
QUICK = {"seeds": 2, "budget": 250, "n_settings": 300}
SYNTHETIC_SETTINGS = 1000


def model_methods() -> dict[str, Callable[[], Method]]:
    """The model-based methods, or none if their module does not import (yet)."""
    try:
        from benchmarks.bo.model_methods import MODEL_METHODS
    except ImportError as error:
        print(f"model-based methods unavailable ({error}); running the baselines only.")
        return {}
    return dict(MODEL_METHODS)


def freeze_thaw_methods() -> dict[str, Callable[[], Method]]:
    """The package's GPAR freeze-thaw policy with its defaults."""
    from benchmarks.bo.freeze_thaw import GPARFreezeThaw

    return {"gpar_freeze_thaw": GPARFreezeThaw}


@functools.lru_cache(maxsize=1)  # import and report once per process
def available_methods() -> dict[str, Callable[[], Method]]:
    """All runnable methods by name (Optuna's only if Optuna is installed)."""
    methods: dict[str, Callable[[], Method]] = {**BASELINES, **freeze_thaw_methods()}
    if not optuna_available():
        print(
            "optuna is not installed (pip install gpar-bo[bench]): skipping optuna_tpe_hyperband."
        )
        del methods["optuna_tpe_hyperband"]
    return {**methods, **model_methods()}


def make_problem(name: str, n_settings: int) -> TabularProblem:
    """The problem ``name`` ("mnist" or "synthetic" with ``n_settings`` settings)."""
    return mnist_table() if name == "mnist" else synthetic_problem(n=n_settings, seed=0)


_PROBLEMS: dict[tuple[str, int], TabularProblem] = {}


def run_one(
    problem: str, n_settings: int, method: str, seed: int, budget: int, workers: int
) -> dict:
    """Simulate one (method, seed) run; returns its JSON line (trace plus run settings)."""
    torch.set_num_threads(1)
    key = (problem, n_settings)
    if key not in _PROBLEMS:  # each worker process loads the table once
        _PROBLEMS[key] = make_problem(problem, n_settings)
    trace = simulate(available_methods()[method](), _PROBLEMS[key], seed, budget, workers)
    return {**trace.to_json(), "budget": budget, "workers": workers, "n_settings": n_settings}


def run_key(line: dict) -> tuple:
    """What identifies a run for resuming."""
    return (line["method"], line["seed"], line["budget"], line["workers"], line["n_settings"])


def load_runs(path: Path) -> list[dict]:
    """The finished runs recorded in ``path`` (none if it does not exist)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_all(args: argparse.Namespace, runs_path: Path, n_settings: int) -> list[dict]:
    """Run every missing (method, seed), appending each to ``runs_path`` when it finishes."""
    done = load_runs(runs_path)
    keys = {run_key(line) for line in done}
    todo = [
        (args.problem, n_settings, m, s, args.budget, args.workers)
        for s in range(args.seeds)
        for m in args.methods
        if (m, s, args.budget, args.workers, n_settings) not in keys
    ]
    runs_path.parent.mkdir(parents=True, exist_ok=True)
    with runs_path.open("a") as handle, tqdm(total=len(todo), desc="runs") as bar:

        def record(line: dict) -> None:
            handle.write(json.dumps(line) + "\n")
            handle.flush()  # a finished run survives an interruption
            done.append(line)
            bar.update()

        if args.jobs <= 1:
            for job in todo:
                record(run_one(*job))
        else:
            with ProcessPoolExecutor(
                args.jobs, initializer=torch.set_num_threads, initargs=(1,)
            ) as pool:
                for future in as_completed([pool.submit(run_one, *job) for job in todo]):
                    record(future.result())
    wanted = {(m, s) for m in args.methods for s in range(args.seeds)}
    return [
        line
        for line in done
        if (line["method"], line["seed"]) in wanted
        and (line["budget"], line["workers"], line["n_settings"])
        == (args.budget, args.workers, n_settings)
    ]


def plot(
    bands: dict[str, tuple[np.ndarray, np.ndarray]], runs: dict[str, list[dict]], path: Path
) -> None:
    """Regret vs epochs (mean and SE band, log y) and mean suggest seconds per method.

    Model-free methods are dashed and GPAR's drawn thicker: with more methods than
    colours in the cycle, colour alone would not tell them apart.
    """
    fig, (ax, ax_cost) = plt.subplots(1, 2, figsize=(13, 5), gridspec_kw={"width_ratios": [2, 1]})
    floor = 1e-4  # zero regret cannot be drawn on a log axis
    for method, (mean, se) in bands.items():
        grid = np.arange(1, len(mean) + 1)
        style = {
            "linestyle": "--" if method in BASELINES else "-",
            "linewidth": 2.5 if method.startswith("gpar") else 1.5,
        }
        (line,) = ax.plot(grid, np.maximum(mean, floor), label=method, **style)
        low, high = np.maximum(mean - se, floor), np.maximum(mean + se, floor)
        ax.fill_between(grid, low, high, color=line.get_color(), alpha=0.2)
    ax.axhline(analysis.THRESHOLD, color="grey", linestyle=":", label="0.5% regret")
    ax.set(yscale="log", xlabel="epochs consumed", ylabel="simple regret (final val error)")
    ax.legend(fontsize=8)
    names = list(runs)
    cost = [np.mean([np.mean(t["suggest_seconds"]) for t in runs[m]]) for m in names]
    ax_cost.barh(names, cost)
    ax_cost.set(xscale="log", xlabel="mean seconds per suggest")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_csv(path: Path, rows: list[dict]) -> None:
    """``rows`` (dicts with the same keys) as a CSV file."""
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def surrogate_rows(problem: TabularProblem, seeds: int, quick: bool) -> list[dict]:
    """The surrogate-quality table, or none if its module does not import (yet)."""
    try:
        from benchmarks.bo.surrogates import surrogate_quality
    except ImportError as error:
        print(f"surrogate quality unavailable ({error}).")
        return []
    return surrogate_quality(problem, list(range(seeds)), quick)


def notes_markdown(
    args: argparse.Namespace,
    problem: TabularProblem,
    before: float,
    targets: list[dict],
    tests: list[dict],
    surrogates: list[dict],
    spent: list[dict],
) -> str:
    """The markdown under the results table: protocol, targets, tests, surrogate quality."""
    best = problem.best_final_error
    notes = [
        f"Problem `{problem.name}`: {problem.X.shape[0]} settings, d={problem.X.shape[1]}, "
        f"checkpoints {list(problem.checkpoints)}; best final error {best:.4f}, "
        f"median {best + before:.4f}. "
        f"Budget {args.budget} epochs, {args.workers} asynchronous workers.",
        "Regret = incumbent final-epoch validation error minus the table's best; before the first "
        "completed run it is the median setting's regret. `se@b`: standard error over seeds. "
        "`epochs_to_0.5%`: mean epochs until regret <= 0.005, a seed that never got there counted "
        "as the budget (so a lower bound unless all reached). Overhead: seconds per suggest call "
        "(`suggest_at_200_s`: calls with >= 200 observed trials) and per should_stop call.",
        "## Targets\n\n"
        + (markdown_table(targets) if targets else "Not evaluable: gpar_es did not run."),
        "## How the epochs were spent (means over seeds)\n\n"
        "`wrong_stops`: stopped trials whose final error beats the best final error the run "
        "ended with.\n\n"
        + markdown_table(spent),
        "## Paired one-sided Wilcoxon: gpar_es regret < other\n\n"
        + (markdown_table(tests) if tests else "gpar_es did not run."),
    ]
    if surrogates:
        notes.append(
            "## Surrogate quality on held-out partial curves\n\n" + markdown_table(surrogates)
        )
    return "\n\n".join(notes)


def report(
    args: argparse.Namespace, lines: list[dict], problem: TabularProblem, argv: list[str] | None
) -> dict:
    """Analyse the runs and write the markdown, CSV, JSON and PNG results."""
    runs: dict[str, list[dict]] = {m: [] for m in args.methods}
    for line in sorted(lines, key=lambda line: line["seed"]):
        runs[line["method"]].append(line)
    runs = {m: t for m, t in runs.items() if t}
    best = problem.best_final_error
    before = float(problem.final_error.median()) - best
    rows = analysis.summarize(runs, best, before, args.budget)
    tests = analysis.comparisons(runs, best, before, args.budget)
    targets = analysis.check_targets(runs, best, before, args.budget)
    spent = analysis.spending(runs, problem.final_error.tolist())
    stem = f"bo_{args.problem}"
    args.out.mkdir(parents=True, exist_ok=True)
    surrogates = [] if args.no_surrogates else surrogate_rows(
        problem, min(args.seeds, args.surrogate_seeds), args.quick
    )
    if surrogates:
        write_csv(args.out / f"{stem}_surrogates.csv", surrogates)
    bands = analysis.regret_bands(runs, best, before, args.budget)
    plot(bands, runs, args.out / f"{stem}.png")
    curves = {m: {"mean": mean.tolist(), "se": se.tolist()} for m, (mean, se) in bands.items()}
    write_results(
        args.out,
        stem,
        f"Tabular BO benchmark on {args.problem}: regret at fixed epoch budgets",
        rows,
        command_line(argv),
        list(range(args.seeds)),
        notes=notes_markdown(args, problem, before, targets, tests, surrogates, spent),
        extra={
            "targets": targets,
            "wilcoxon": tests,
            "spending": spent,
            "surrogates": surrogates,
            "curves": curves,
            "budget": args.budget,
        },
    )
    return {"rows": rows, "targets": targets}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--problem",
        choices=("mnist", "synthetic"),
        default="mnist",
        help="the table (default mnist)",
    )
    parser.add_argument("--methods", nargs="+", help="method names (default: all available)")
    parser.add_argument(
        "--seeds", type=int, default=20, help="seeds 0..N-1 per method (default 20)"
    )
    parser.add_argument("--budget", type=int, default=1000, help="epochs per run (default 1000)")
    parser.add_argument(
        "--workers", type=int, default=4, help="asynchronous workers per run (default 4)"
    )
    parser.add_argument(
        "--jobs", type=int, default=2, help="parallel processes over runs (default 2)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="CI smoke test: synthetic, 2 seeds, budget 250"
    )
    parser.add_argument(
        "--no-surrogates", action="store_true", help="skip the surrogate-quality table"
    )
    parser.add_argument(
        "--surrogate-seeds",
        type=int,
        default=5,
        help="random splits of the surrogate-quality table (default 5; at most --seeds)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="results directory (default benchmarks/results/, quick: .../quick/)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.problem, args.seeds, args.budget = "synthetic", QUICK["seeds"], QUICK["budget"]
    args.out = args.out or (RESULTS / "quick" if args.quick else RESULTS)
    methods = available_methods()
    args.methods = args.methods or list(methods)
    unknown = [m for m in args.methods if m not in methods]
    if unknown:
        parser.error(f"unknown or unavailable methods {unknown}; available: {list(methods)}")
    return args


def main(argv: list[str] | None = None) -> dict:
    torch.set_num_threads(1)
    args = parse_args(argv)
    problem = make_problem(args.problem, QUICK["n_settings"] if args.quick else SYNTHETIC_SETTINGS)
    n_settings = problem.X.shape[0]
    lines = run_all(args, args.out / f"bo_{args.problem}_runs.jsonl", n_settings)
    result = report(args, lines, problem, argv)
    print(markdown_table(result["rows"]))
    for target in result["targets"]:
        verdict = {True: "MET", False: "MISSED", None: "N/A"}[target["met"]]
        print(f"{verdict}: {target['target']} ({target['value']})")
    return result


if __name__ == "__main__":
    main()
