"""Check the Syne Tune route: Syne Tune's ASHA against the harness's ASHA, and a demo of the rest.

On the MNIST table and the synthetic problem (1000 settings), for seeds
``0..S-1``, with the same budget, workers, rungs (the problem's checkpoints
before the last), grace period (the first checkpoint) and reduction factor:

* ``asha``: the harness's ASHA (``benchmarks.bo.baselines.ASHA``) in
  ``harness.simulate``;
* ``syne_asha``: Syne Tune's ``ASHA`` (stopping type, promotion quantile
  ``1/eta`` at every rung) through ``run_syne_tune``;
* a *replay*: the harness's ASHA made to start the settings Syne Tune's ASHA
  started, in its order, run in ``harness.simulate``. The two stopping rules
  are the same in exact arithmetic (``value <= np.quantile(rung, 1/eta)`` vs
  ``fewer than ceil(n/eta) strictly lower``; Syne Tune's float interpolation
  differs only at ties, see ``syne_tune_continues``), so the replay with Syne
  Tune's rounding must reproduce the Syne Tune trace exactly (completions,
  incumbents, every trial's epochs and status): this checks the driver's event
  loop and epoch accounting, not only the means;
* ``syne_asha_promotion``: Syne Tune's ASHA with pause and resume (for information).

Mean regrets of ``asha`` and ``syne_asha`` are compared with a two-sided
Mann-Whitney U test per budget (the random streams differ, so seeds are not
paired). Then DyHPO, MOBSTER, Hyper-Tune and BOHB run on one seed each to show
they work, timed per decision. Runs are appended to
``<out>/syne_tune_route_runs.jsonl`` as they finish (a rerun resumes), and the
report goes to ``<out>/syne_tune_route.{md,csv,json}``.

    python -m benchmarks.syne_tune.route                      # the committed results
    python -m benchmarks.syne_tune.route --seeds 2 --budget 210 --demo-methods --out /tmp/st
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch: the machine's cores are shared

import numpy as np  # noqa: E402
import torch  # noqa: E402
from scipy.stats import mannwhitneyu  # noqa: E402

from benchmarks.bo import analysis  # noqa: E402
from benchmarks.bo.baselines import ASHA  # noqa: E402
from benchmarks.bo.harness import History, TabularProblem, Trial, simulate  # noqa: E402
from benchmarks.bo.problems import mnist_table, synthetic_problem  # noqa: E402
from benchmarks.report import RESULTS, markdown_table, write_results  # noqa: E402
from benchmarks.syne_tune.methods import run_syne_tune, syne_tune_python  # noqa: E402

DEMO_METHODS = ("DyHPO", "HyperTune", "BOHB", "MOBSTER")  # slowest last
ETA = 3.0


def syne_tune_continues(values: list[float], value: float, quantile: float) -> bool:
    """Syne Tune's stopping rule at a rung, in its own float arithmetic.

    ``Rung.quantile`` (numpy's linear quantile of the rung's values, the new one
    included) and continue iff ``value <= cutoff``. Mathematically this is the
    harness's rule (fewer than ``ceil(n * quantile)`` values strictly lower), but
    at a tie the interpolation ``g * v + (1 - g) * v`` can round one ulp below
    ``v`` and stop a trial the harness continues.
    """
    data = sorted(values)
    if len(data) < 2:
        return True
    virtual = (len(data) - 1) * quantile + 1
    index = int(virtual)
    g = virtual - index
    return value <= g * data[index] + (1 - g) * data[index - 1]


class ReplayASHA(ASHA):
    """The harness's ASHA, starting the given settings in the given order.

    ``rule="harness"`` stops as the harness's ASHA; ``rule="syne_tune"`` as
    ``syne_tune_continues`` (same rule, Syne Tune's rounding at ties).
    """

    name = "asha_replay"

    def __init__(self, settings: list[int], eta: float = ETA, rule: str = "harness") -> None:
        super().__init__(eta)
        self.settings = list(settings)
        self.rule = rule

    def suggest(self, history: History) -> int:
        k = len(history.trials)
        if k >= len(self.settings):
            raise RuntimeError(f"replay ran out of settings after {k} trials")
        return self.settings[k]

    def should_stop(self, history: History, trial: Trial) -> bool:
        stop = super().should_stop(history, trial)  # records the value at the rung
        if self.rule == "syne_tune":
            values = self.recorded[trial.epochs]
            return not syne_tune_continues(values, values[-1], 1.0 / self.eta)
        return stop


def schedule(trace: dict) -> tuple:
    """What must agree between a trace and its replay."""
    trials = [(t["setting"], t["status"], t["epochs"]) for t in trace["trials"]]
    return (list(trace["epochs"]), list(trace["incumbent_error"]), trials)


def replay_matches(
    problem: TabularProblem, trace: dict, budget: int, workers: int, rule: str = "harness"
) -> bool:
    """Whether the harness's ASHA, fed Syne Tune's settings, reproduces ``trace`` exactly."""
    settings = [t["setting"] for t in trace["trials"]]
    method = ReplayASHA(settings, rule=rule)
    try:
        replay = simulate(method, problem, trace["seed"], budget, workers).to_json()
    except RuntimeError:
        return False
    return schedule(replay) == schedule(trace)


def make_problem(name: str) -> TabularProblem:
    return mnist_table() if name == "mnist" else synthetic_problem(n=1000, seed=0)


def run_key(line: dict) -> tuple:
    return (line["problem"], line["method"], line["seed"], line["budget"], line["workers"])


def load_runs(path: Path) -> dict[tuple, dict]:
    if not path.exists():
        return {}
    lines = [json.loads(text) for text in path.read_text().splitlines() if text.strip()]
    return {run_key(line): line for line in lines}


def synetune_versions(python: Path) -> dict:
    """Versions inside the Syne Tune venv."""
    code = (
        "import json, sys, numpy, scipy, pandas, statsmodels, syne_tune; "
        "print(json.dumps({'python': sys.version.split()[0], 'syne_tune': syne_tune.__version__, "
        "'numpy': numpy.__version__, 'scipy': scipy.__version__, 'pandas': pandas.__version__, "
        "'statsmodels': statsmodels.__version__}))"
    )
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def timing_row(problem: TabularProblem, trace: dict) -> dict:
    """One run's outcome and decision overhead."""
    suggest = np.asarray(trace["suggest_seconds"], dtype=float)
    stop = np.asarray(trace["stop_seconds"], dtype=float)
    cpu = np.asarray(trace.get("suggest_cpu_seconds", []), dtype=float)
    st = trace.get("syne_tune", {})
    incumbents = trace["incumbent_error"]
    return {
        "problem": trace["problem"],
        "method": trace["method"],
        "seed": trace["seed"],
        "type": st.get("type", ""),
        "budget": trace["budget"],
        "final_regret": incumbents[-1] - problem.best_final_error if incumbents else math.nan,
        "first_completion": trace["epochs"][0] if trace["epochs"] else math.nan,
        "trials": len(trace["trials"]),
        "completed": sum(t["status"] == "completed" for t in trace["trials"]),
        "resumes": st.get("resumes", 0),
        "remapped": st.get("remapped", 0),
        "suggest_calls": len(suggest),
        "suggest_mean_s": float(suggest.mean()) if len(suggest) else math.nan,
        "suggest_max_s": float(suggest.max()) if len(suggest) else math.nan,
        "suggest_cpu_mean_s": float(cpu.mean()) if len(cpu) else math.nan,
        "result_mean_s": float(stop.mean()) if len(stop) else math.nan,
        "wall_s": float(trace.get("wall_seconds", math.nan)),
    }


def parse_budgets(items: list[str]) -> dict[str, int]:
    """``["MOBSTER=300", ...]`` -> ``{"MOBSTER": 300}``."""
    budgets = {}
    for item in items:
        method, _, epochs = item.partition("=")
        if method not in DEMO_METHODS or not epochs.isdigit():
            raise SystemExit(f"--demo-budgets takes METHOD=EPOCHS with METHOD in {DEMO_METHODS}")
        budgets[method] = int(epochs)
    return budgets


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--problems", nargs="+", default=["mnist", "synthetic"])
    parser.add_argument("--seeds", type=int, default=20, help="seeds 0..N-1 (default 20)")
    parser.add_argument(
        "--budget", type=int, default=1050, help="epochs per run (default 1050 = 50 full runs)"
    )
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument(
        "--demo-methods",
        nargs="*",
        default=list(DEMO_METHODS),
        help="Syne Tune methods run on seed 0 of --demo-problems (default: all four)",
    )
    parser.add_argument("--demo-problems", nargs="+", default=["mnist"])
    parser.add_argument(
        "--demo-budgets",
        nargs="*",
        default=[],
        help="METHOD=EPOCHS: a smaller budget for a slow demo method (default: --budget)",
    )
    parser.add_argument("--python", help="the Syne Tune venv's python (default: see methods.py)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    args.demo_budgets = parse_budgets(args.demo_budgets)
    return args


ROUTE_METHODS = ("asha", "syne_asha", "syne_asha_promotion")


def main(argv: list[str] | None = None) -> dict:
    torch.set_num_threads(1)
    args = parse_args(argv)
    python = syne_tune_python(args.python)
    command = shlex.join(
        ["python", "-m", "benchmarks.syne_tune.route", *(sys.argv[1:] if argv is None else argv)]
    )
    args.out.mkdir(parents=True, exist_ok=True)
    runs_path = args.out / "syne_tune_route_runs.jsonl"
    done = load_runs(runs_path)
    seeds = list(range(args.seeds))

    jobs = []  # (problem, method name, seed, budget, how to run it)
    for name in args.problems:
        for seed in seeds:
            jobs.append((name, "asha", seed, args.budget, None))
            jobs.append((name, "syne_asha", seed, args.budget, ("ASHA", None)))
            jobs.append((name, "syne_asha_promotion", seed, args.budget, ("ASHA", "promotion")))
    demo_keys = []
    for name in args.demo_problems:
        for method in args.demo_methods:
            budget = args.demo_budgets.get(method, args.budget)
            jobs.append((name, f"syne_{method.lower()}", 0, budget, (method, None)))
            demo_keys.append((name, f"syne_{method.lower()}", 0, budget, args.workers))

    problems: dict[str, TabularProblem] = {}
    with runs_path.open("a") as handle:
        for name, method, seed, budget, how in jobs:
            key = (name, method, seed, budget, args.workers)
            if key in done:
                continue
            problem = problems.setdefault(name, make_problem(name))
            tic = time.perf_counter()
            if how is None:
                trace = simulate(ASHA(ETA), problem, seed, budget, args.workers).to_json()
                trace["wall_seconds"] = time.perf_counter() - tic
            else:
                demo = how[0] != "ASHA"
                trace = run_syne_tune(
                    how[0], problem, seed, budget, args.workers, python, how[1], ETA,
                    progress=50 if demo else 0,
                )  # fmt: skip
            trace.update(method=method, problem=name, budget=budget, workers=args.workers)
            handle.write(json.dumps(trace) + "\n")
            handle.flush()
            done[key] = trace
            print(f"{name} {method} seed {seed}: {time.perf_counter() - tic:.1f} s", flush=True)

    budgets = sorted({min(b, args.budget) for b in (100, 300, args.budget)})
    rows, tests, replays, spent = [], [], [], []
    for name in args.problems:
        problem = problems.setdefault(name, make_problem(name))
        best = problem.best_final_error
        before = float(problem.final_error.median()) - best
        by_method: dict[str, list[dict]] = {}
        for seed in seeds:
            for method in ROUTE_METHODS:
                by_method.setdefault(method, []).append(
                    done[(name, method, seed, args.budget, args.workers)]
                )
        for row in analysis.summarise(by_method, best, before, args.budget, budgets):
            rows.append({"problem": name, **row})
        spent += [{"problem": name, **row} for row in analysis.spending(
            by_method, problem.final_error.tolist())]  # fmt: skip
        for b in budgets:
            mine = [analysis.regret_at(t, best, before, [b], args.budget)[0]
                    for t in by_method["asha"]]  # fmt: skip
            theirs = [analysis.regret_at(t, best, before, [b], args.budget)[0]
                      for t in by_method["syne_asha"]]  # fmt: skip
            se = math.sqrt(
                np.var(mine, ddof=1) / len(mine) + np.var(theirs, ddof=1) / len(theirs)
            ) if len(seeds) > 1 else math.nan  # fmt: skip
            tests.append({
                "problem": name, "budget": b, "seeds": len(mine),
                "harness_asha": float(np.mean(mine)), "syne_asha": float(np.mean(theirs)),
                "difference": float(np.mean(theirs) - np.mean(mine)), "se_difference": se,
                "mann_whitney_p": float(mannwhitneyu(mine, theirs).pvalue),
            })  # fmt: skip
        syne = by_method["syne_asha"]
        matches = [replay_matches(problem, t, args.budget, args.workers) for t in syne]
        rounded = [
            replay_matches(problem, t, args.budget, args.workers, rule="syne_tune") for t in syne
        ]
        replays.append({
            "problem": name, "seeds": len(syne), "exact_harness_rule": sum(matches),
            "exact_syne_tune_rounding": sum(rounded),
            "differ_harness_rule": [t["seed"] for t, m in zip(syne, matches) if not m],
        })  # fmt: skip
    timing_keys = [
        (p, m, 0, args.budget, args.workers) for p in args.problems for m in ROUTE_METHODS
    ] + demo_keys
    timings = [
        timing_row(problems.setdefault(key[0], make_problem(key[0])), done[key])
        for key in timing_keys
        if key in done
    ]

    versions = synetune_versions(python)
    notes = "\n\n".join(
        [
            f"Budget {args.budget} epochs ({args.budget / 21:g} full 21-epoch runs), "
            f"{args.workers} asynchronous workers, checkpoints (1, 3, 7, 14, 21) = Syne Tune's "
            f"rung levels (1, 3, 7, 14) with max_t 21, reduction factor {ETA:g} (promotion "
            "quantile 1/3 at every rung; grace period 1). Regret = incumbent final-epoch error "
            "minus the table's best (median setting's regret before the first completion); "
            "`se@b` is the standard error over seeds. Overhead columns are seconds per decision "
            "(`suggest_*`: per suggest call; `stop_mean_s`: per report at a checkpoint before the "
            "last). `asha` is the harness's ASHA; `syne_*` are Syne Tune 0.13.0's schedulers "
            "driven by `benchmarks/syne_tune/driver.py` in the harness's epoch time; "
            "`syne_asha_promotion` is ASHA with pause/resume. DyHPO, MOBSTER, Hyper-Tune and BOHB "
            "ran once each (seed 0): see 'One run of each method' below"
            + (
                f" (budgets overridden there: {args.demo_budgets}, to fit the time available)."
                if args.demo_budgets
                else "."
            ),
            "## Harness ASHA vs Syne Tune ASHA (two-sided Mann-Whitney U, unpaired)\n\n"
            + (markdown_table(tests) if tests else "Not run."),
            "## Exact replay\n\nThe harness's ASHA fed the settings Syne Tune's ASHA started, in "
            "its order: `exact_harness_rule` counts seeds whose completions, incumbents and "
            "per-trial epochs and statuses are identical to the Syne Tune trace. The two stopping "
            "rules are equal in exact arithmetic, but at a tie Syne Tune's interpolated cutoff "
            "`g * v + (1 - g) * v` can round one ulp below the tied value `v` and stop a trial "
            "the harness continues (MNIST errors are discrete, so ties occur there; the synthetic "
            "errors are continuous). `exact_syne_tune_rounding` replays with that rounding "
            "(`route.syne_tune_continues`): every seed must then match, which checks the "
            "driver's event loop and epoch accounting exactly.\n\n"
            + (markdown_table(replays) if replays else "Not run."),
            "## One run of each method: outcome and decision overhead (seed 0)\n\n"
            "`final_regret`: at the end of the run's `budget`; `first_completion`: epochs "
            "consumed when the first trial reached epoch 21; `suggest_*`: seconds per suggest "
            "call (new trial or resume); `suggest_cpu_mean_s`: the same in process CPU time (not "
            "inflated by other load on the shared machine); "
            "`result_mean_s`: per `on_trial_result` at a checkpoint before the last; "
            "`wall_s`: the whole run including the subprocess's start (~2 s of imports); "
            "`remapped`: BOHB proposals (KDE, not restricted to the table) mapped to the nearest "
            "remaining row.\n\n" + markdown_table(timings),
            "## How the epochs were spent (means over seeds)\n\n" + markdown_table(spent),
            "## Syne Tune venv\n\n"
            + ", ".join(f"{k} {v}" for k, v in versions.items())
            + f" (`{python}`, built by `benchmarks/syne_tune/setup_venv.sh`).",
        ]
    )
    write_results(
        args.out,
        "syne_tune_route",
        "Syne Tune 0.13.0 in the tabular harness: route check (ASHA vs ASHA) and demo",
        rows,
        command,
        {"route": seeds, "demo": [0]},
        notes=notes,
        extra={
            "mann_whitney": tests,
            "replays": replays,
            "timings": timings,
            "spending": spent,
            "syne_tune_venv": versions,
            "budget": args.budget,
            "workers": args.workers,
        },
    )
    print(markdown_table(rows))
    print(markdown_table(tests) if tests else "")
    print(markdown_table(replays) if replays else "")
    return {"rows": rows, "tests": tests, "replays": replays, "timings": timings}


if __name__ == "__main__":
    main()
