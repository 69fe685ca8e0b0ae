r"""How far the policy's predictive moves when its data move by rounding error.

The same code gave different end-of-run predictives on two machines (the development
report of ``benchmarks.missed_promotions``: of the MNIST study set's best settings left
paused, 12 over 8 seeds, 7 fell below their 95 % interval on one machine and 1 on another). The
data and code were the same, so the fits themselves must be sensitive to rounding. This
measures it on one machine: for each of the policy's runs on a table, the state at the
end of its budget is rebuilt from the study's runs file (``missed_promotions.end_state``)
and the policy's model predicts every paused run's final error
(``FreezeThawPolicy.final_error_samples``) from the data as recorded and from
``--perturbations`` copies whose errors are multiplied by ``1 + 1e-12 z`` (``z``
standard normal, seeded): changes far below any measurement. A fit that finds the
optimum of its objective gives nearly the same predictive each time; one that stops
wherever its optimiser's tolerances are met on a flat stretch does not.

Per table and optimiser setting, over the paused runs of every seed and perturbation:
``shift_sd``, the change of the predictive median of the log final error in units of
the predictive's standard deviation (from its central 95 % interval: ``log(high / low)
/ 3.92``; mean, 90th percentile and maximum), ``width_ratio``, the perturbed interval's
width over the original's (mean), and ``fit_s``, the CPU seconds of a fit (mean). The
optimiser settings are the model's default (``ftol`` ``gpar_bo.model.FIT_FTOL``, SciPy's
``gtol``) and ``--ftol`` and ``--gtol`` (by default those of the study's candidate
``gpar_freeze_thaw_converged``, ``benchmarks.bo.freeze_thaw.CONVERGED_FIT``), passed to
every conditional's L-BFGS-B as ``FreezeThawPolicy(fit_kwargs=...)``. ``--draw-scales log``
measures the candidate hyperparameter draws (``GPARModel(draw_scales="log")``,
:mod:`gpar_bo.laplace`) at both settings. A development tool: run it on development tables.

    python -m benchmarks.fit_sensitivity --tables dev_mnist_study dev_classification --seeds 2 \
        --perturbations 2 --ftol 1e-12 --gtol 1e-9 --out benchmarks/results/fit_sensitivity
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch: small fits run faster on one thread

import numpy as np
import torch
from tqdm import tqdm

from benchmarks.bo.freeze_thaw import CONVERGED_FIT
from benchmarks.bo.harness import TabularProblem
from benchmarks.freeze_thaw_study import REFERENCE, make_problem, method_traces
from benchmarks.missed_promotions import end_state
from benchmarks.report import RESULTS, command_line, markdown_table, write_results
from gpar_bo.curve_model import curve_model_options
from gpar_bo.freeze_thaw import FreezeThawPolicy
from gpar_bo.laplace import DRAW_SCALES

#: Relative size of the perturbation: rounding error, far below any measurement.
EPSILON = 1e-12
#: Width of a normal's central 95 % interval in standard deviations.
WIDTH_95 = 3.92


def predictive(trace: dict, problem: TabularProblem, perturbation: int, fit_kwargs: dict | None,
               gpar_options: dict | None = None) -> tuple[np.ndarray, np.ndarray, float] | None:
    """The policy's predictive of the paused runs' log final errors at the end of ``trace``.

    Args:
        trace: A policy run's trace (``seed`` and ``trials``).
        problem: Its table.
        perturbation: 0 for the data as recorded; else the seed of the relative
            ``EPSILON`` perturbation of the observed errors.
        fit_kwargs: ``FreezeThawPolicy``'s ``fit_kwargs`` (None: its default).
        gpar_options: ``FreezeThawPolicy``'s ``gpar_options`` (None: its default).

    Returns:
        Per paused run the median and the standard deviation (from the central 95 %
        interval) of the log final error, and the CPU seconds of the fit and
        prediction; None without paused runs or a model (fewer than two finished).
    """
    settings, Y, paused = end_state(trace, problem)
    rows = paused.nonzero().squeeze(-1)
    if len(rows) == 0:
        return None
    if perturbation:
        generator = torch.Generator().manual_seed(perturbation)
        Y = Y * (1 + EPSILON * torch.randn(Y.shape, generator=generator, dtype=Y.dtype))
    policy = FreezeThawPolicy(problem.checkpoints, seed=int(trace["seed"]), fit_kwargs=fit_kwargs,
                              gpar_options=gpar_options)
    start = time.process_time()
    samples = policy.final_error_samples(problem.X[settings], Y, rows)
    seconds = time.process_time() - start
    if samples is None:
        return None
    levels = torch.tensor([0.025, 0.5, 0.975], dtype=samples.dtype)
    low, median, high = torch.quantile(samples.log(), levels, dim=0).numpy()
    return median, (high - low) / WIDTH_95, seconds


def shifts_and_ratios(results: list[list[tuple]]) -> tuple[np.ndarray, np.ndarray]:
    """Per paused run and perturbation, over seeds: the predictive median's shift in
    predictive standard deviations and the interval width's ratio to the original's.
    ``results[seed]`` holds the predictive of the data as recorded first, then those of
    its perturbations (``predictive``'s tuples)."""
    shifts, ratios = [], []
    for (median, sd, _), *perturbed in results:
        for other_median, other_sd, _ in perturbed:
            shifts.append(np.abs(other_median - median) / sd)
            ratios.append(other_sd / sd)
    return np.concatenate(shifts), np.concatenate(ratios)


def sensitivity_row(table: str, setting: str, results: list[list[tuple]]) -> dict:
    """Summary over seeds of ``results`` (as ``shifts_and_ratios`` reads them)."""
    shift, ratio = shifts_and_ratios(results)
    seconds = [s for by_perturbation in results for _, _, s in by_perturbation]
    return {"table": table, "optimiser": setting, "seeds": len(results), "predictions": len(shift),
            "shift_sd_mean": float(shift.mean()), "shift_sd_p90": float(np.quantile(shift, 0.9)),
            "shift_sd_max": float(shift.max()), "width_ratio": float(ratio.mean()),
            "fit_s": float(np.mean(seconds))}


def plot(path: Path, results: dict[tuple[str, str], list[list[tuple]]]) -> None:
    """Per table, the distribution of ``shift_sd`` for each optimiser setting."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tables = list(dict.fromkeys(t for t, _ in results))
    fig, axes = plt.subplots(1, len(tables), figsize=(4.5 * len(tables), 3.2), squeeze=False)
    for ax, table in zip(axes[0], tables):
        labels, shifts = [], []
        for (t, setting), by_seed in results.items():
            if t == table:
                labels.append(setting)
                shifts.append(shifts_and_ratios(by_seed)[0])
        ax.boxplot(shifts, tick_labels=labels)
        ax.set_title(table, fontsize=9)
        ax.set_ylabel("|median shift| / predictive sd", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> str:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tables", nargs="+", default=["dev_mnist_study", "dev_classification"],
                        help="tables of the study (as named there)")
    parser.add_argument("--seeds", type=int, default=2, help="the policy's runs with seeds 0..N-1")
    parser.add_argument("--perturbations", type=int, default=3, help="perturbed copies per run")
    parser.add_argument("--runs", type=Path, default=RESULTS / "freeze_thaw_dev" / "freeze_thaw_runs.jsonl",
                        help="the study's runs file (default: the development tables')")
    converged = CONVERGED_FIT["optimizer_kwargs"]["options"]
    parser.add_argument("--ftol", type=float, default=converged["ftol"],
                        help="the second setting's L-BFGS-B ftol (default: the converged candidate's, %(default)g)")
    parser.add_argument("--gtol", type=float, default=converged["gtol"],
                        help="the second setting's L-BFGS-B gtol (default: the converged candidate's, %(default)g)")
    parser.add_argument("--draw-scales", choices=DRAW_SCALES, default="raw",
                        help="the model's hyperparameter draws (GPARModel's draw_scales; "
                             "'log' is a candidate), for both optimiser settings")
    parser.add_argument("--out", type=Path, default=RESULTS / "fit_sensitivity")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.perturbations < 1:
        parser.error(f"--seeds and --perturbations must be >= 1; got {args.seeds} and {args.perturbations}")
    for name in ("ftol", "gtol"):
        if not getattr(args, name) > 0:
            parser.error(f"--{name} must be > 0; got {getattr(args, name)}")
    torch.set_num_threads(1)
    if not args.runs.is_file():
        parser.error(f"no runs file {args.runs}: run benchmarks.freeze_thaw_study first")
    try:
        problems = {t: make_problem(t) for t in args.tables}
    except ValueError as error:
        parser.error(str(error))
    try:
        traces = method_traces(args.runs, problems, REFERENCE, args.seeds)
    except ValueError as error:
        parser.error(str(error))
    settings: dict[str, dict | None] = {
        "default": None,
        f"ftol {args.ftol:g} gtol {args.gtol:g}": {"optimizer_kwargs": {"options": {"ftol": args.ftol, "gtol": args.gtol}}},
    }
    gpar_options = None if args.draw_scales == "raw" else curve_model_options(draw_scales=args.draw_scales)
    jobs = [(t, s, seed) for t in args.tables for s in settings for seed in sorted(traces[t])]
    results: dict[tuple[str, str], list[list[tuple]]] = {}
    for table, setting, seed in tqdm(jobs, desc="runs", unit="run"):
        fits = [predictive(traces[table][seed], problems[table], k, settings[setting], gpar_options)
                for k in range(args.perturbations + 1)]
        if fits[0] is not None:
            results.setdefault((table, setting), []).append(fits)
    rows = [{**sensitivity_row(t, s, r), "draws": args.draw_scales} for (t, s), r in results.items()]
    if not rows:
        parser.error("no run had paused runs and a model to predict them")
    notes = (f"Each run's end state predicted from its data as recorded and from {args.perturbations} "
             f"copies with the errors multiplied by `1 + {EPSILON:g} z`; `shift_sd`: the change of "
             "the predictive median of the log final error in predictive standard deviations, per "
             "paused run and perturbation; `width_ratio`: the perturbed interval's width over the "
             "original's; `fit_s`: CPU seconds per fit and prediction; `predictions`: paused runs "
             "times perturbations. See the module docstring.")
    name = "fit_sensitivity"
    write_results(args.out, name, "How far the policy's predictive moves when its data move by rounding error",
                  rows, command_line(argv), sorted({s for by in traces.values() for s in by}), notes=notes)
    plot(args.out / f"{name}.png", results)
    return markdown_table(rows)


if __name__ == "__main__":
    print(main())
