"""Posterior sampling and acquisition optimisation speed of GPAR (issue 4).

On the MNIST MLP study set (d = 6 hyperparameters, M = 5 checkpoints), GPAR is
fitted to N = 200 runs of which most stopped early (about 30% of the runs that
reach a checkpoint stop before the next). Measured, each as the median of
``--repeats`` runs on one torch thread:

* sampling the posterior with 128 quasi-MC base samples at ``512 x 1 x d`` and
  ``16 x 8 x d`` candidate batches, with a backward pass as in acquisition
  optimisation;
* qLogNEI's layout ``cat(X_baseline, X)`` (all 200 runs + 1 candidate, 16
  t-batches), once with the baseline sampled once and shared (BoTorch's
  samplers pass expanded base samples) and once forced through the joint
  ``(N + 1) x (N + 1)`` factorisation per t-batch (the same normals, copied):
  the ratio is what the shared-baseline path buys; the shared path is timed on
  its first call and on later calls, which reuse the cached baseline draw;
* ``optimize_acqf`` with 10 restarts and 512 raw samples for qLogEI and qLogNEI
  on GPAR, against the same calls on BoTorch's ``SingleTaskGP`` fitted to the
  runs that reached the final epoch (the usual BO surrogate), in the same run;
* the same fit, sampling, pruning, qLogEI and qLogNEI on the curve model that the
  freeze-thaw policy, Ax and ``gpar-bo tune`` use (``curve_model_options()``: GPAR-NL-X
  on log-error increments, predicting over draws of its later conditionals'
  hyperparameters, one chain of predictors per draw), on the runs' errors, against
  GPAR-L-NL's rows and ``SingleTaskGP``'s in the same run, and its qLogNEI optimisation
  with the draws' chains stacked against the same with every batch looping over them.

Run: python -m benchmarks.acquisition_speed [--repeats 3] [--seed 0]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections.abc import Callable, Sequence
from unittest import mock

import matplotlib

matplotlib.use("Agg")  # headless: write PNGs only
import matplotlib.pyplot as plt
import torch
from botorch.acquisition import qLogExpectedImprovement, qLogNoisyExpectedImprovement
from botorch.acquisition.objective import GenericMCObjective
from botorch.acquisition.utils import prune_inferior_points
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from botorch.models.transforms.input import Normalize
from botorch.optim import optimize_acqf
from botorch.sampling.normal import SobolQMCNormalSampler
from gpytorch.mlls import ExactMarginalLogLikelihood
from benchmarks.report import REPO, RESULTS, command_line, write_results
from torch import Tensor

import gpar_bo.posterior
from gpar_bo import GPARMarginalLogLikelihood, GPARModel
from gpar_bo.curve_model import curve_model_options
from gpar_bo.problems.mnist import load_curves

STUDY = REPO / "benchmarks" / "data" / "mnist_curves_study.csv"
# Minimise the final checkpoint's (log) error.
FINAL = GenericMCObjective(lambda samples, X=None: -samples[..., -1])


def partial_runs(seed: int, n: int = 200, keep: float = 0.7) -> tuple[Tensor, Tensor]:
    """``n`` study runs, log errors; each checkpoint keeps ~70% of the previous one's runs."""
    X, Y = load_curves(STUDY)
    generator = torch.Generator().manual_seed(seed)
    rows = torch.randperm(len(X), generator=generator)[:n]
    X, Y = X[rows], Y[rows].log()
    reached = torch.ones(n, dtype=torch.bool)
    for m in range(1, Y.shape[-1]):
        reached &= torch.rand(n, generator=generator) < keep
        Y[~reached, m] = float("nan")
    return X, Y


def median_seconds(call: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def sample_with_gradient(model: GPARModel, X: Tensor, sampler: SobolQMCNormalSampler) -> None:
    X = X.clone().requires_grad_(True)
    sampler(model.posterior(X))[..., -1].sum().backward()


def pruned_qlognei(model: GPARModel, X: Tensor, sampler: SobolQMCNormalSampler) -> tuple[qLogNoisyExpectedImprovement, float]:
    """qLogNEI on ``model`` with its baseline first pruned to the runs that could be best
    (256 samples; see docs/model.md), and the seconds the pruning took."""
    start = time.perf_counter()
    pruned = prune_inferior_points(model, X, objective=FINAL, num_samples=256)
    seconds = time.perf_counter() - start
    acqf = qLogNoisyExpectedImprovement(model, X_baseline=pruned, objective=FINAL, sampler=sampler, prune_baseline=False)
    return acqf, seconds


def curve_model_rows(
    X: Tensor, Y: Tensor, bounds: Tensor, Xc: Tensor, sampler: SobolQMCNormalSampler,
    rows: list[dict], stgp_fit: float, args: argparse.Namespace,
) -> list[dict]:
    """Fit, sampling, qLogEI and qLogNEI (Ax's default) on the shipped curve model (on
    the errors ``Y.exp()``), each against GPAR-L-NL's row or ``SingleTaskGP`` in the same run."""
    start = time.perf_counter()
    curve = GPARModel(X, Y.exp(), **curve_model_options())
    fit_gpytorch_mll(GPARMarginalLogLikelihood(curve.likelihood, curve))
    fit_seconds = time.perf_counter() - start
    draws = curve.num_hyperparameter_draws
    label = f"curve model ({draws} hyperparameter draws)"
    sample_seconds = median_seconds(lambda: sample_with_gradient(curve, Xc, sampler), args.repeats)
    gpar_sample = next(r["seconds"] for r in rows if r["measurement"].startswith("sample + backward, 512"))
    best = -Y[:, -1].exp().nan_to_num(nan=float("inf")).min()
    acqf = qLogExpectedImprovement(curve, best_f=best, objective=FINAL, sampler=sampler)
    torch.manual_seed(args.seed)
    start = time.perf_counter()
    optimize_acqf(acqf, bounds=bounds.to(X), q=1, num_restarts=10, raw_samples=512)
    acqf_seconds = time.perf_counter() - start
    stgp_acqf = next(r["baseline seconds"] for r in rows if r["measurement"].startswith("optimize_acqf qLogEI"))
    nei, prune_seconds = pruned_qlognei(curve, X, sampler)

    def optimise_nei() -> float:
        torch.manual_seed(args.seed)
        start = time.perf_counter()
        optimize_acqf(nei, bounds=bounds.to(X), q=1, num_restarts=10, raw_samples=512)
        return time.perf_counter() - start

    nei_seconds = optimise_nei()
    with mock.patch.object(gpar_bo.posterior, "STACKED_MAX_BATCH", -1):  # every batch loops over the draws
        looped_seconds = optimise_nei()
    stgp_nei = next(r["baseline seconds"] for r in rows if r["measurement"].startswith("optimize_acqf qLogNEI"))
    gpar_prune = next(r["seconds"] for r in rows if r["measurement"].startswith("prune_inferior_points"))
    return [
        {"measurement": f"fit {label}", "seconds": fit_seconds,
         "baseline": "SingleTaskGP fit on complete runs", "baseline seconds": stgp_fit},
        {"measurement": f"{label}: sample + backward, 512 x 1 x d, 128 samples", "seconds": sample_seconds,
         "baseline": "GPAR-L-NL, same (above)", "baseline seconds": gpar_sample},
        {"measurement": f"{label}: optimize_acqf qLogEI, 10 restarts, 512 raw", "seconds": acqf_seconds,
         "baseline": "same on SingleTaskGP (final epoch only)", "baseline seconds": stgp_acqf},
        {"measurement": f"{label}: prune_inferior_points, 256 samples over 200 runs", "seconds": prune_seconds,
         "baseline": "GPAR-L-NL, same (above)", "baseline seconds": gpar_prune},
        {"measurement": f"{label}: optimize_acqf qLogNEI, baseline pruned with 256 samples, 10 restarts, 512 raw",
         "seconds": nei_seconds, "baseline": "same on SingleTaskGP (final epoch only)", "baseline seconds": stgp_nei},
        {"measurement": f"{label}: same, the draws' chains stacked", "seconds": nei_seconds,
         "baseline": "the same with every batch looping over the draws", "baseline seconds": looped_seconds},
    ]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1; got {args.repeats}.")
    torch.set_num_threads(1)
    X, Y = partial_runs(args.seed)
    bounds = torch.stack([X.min(0).values, X.max(0).values])
    generator = torch.Generator().manual_seed(args.seed)

    def candidates(*shape: int) -> Tensor:
        unit = torch.rand(*shape, X.shape[-1], generator=generator, dtype=X.dtype)
        return bounds[0] + (bounds[1] - bounds[0]) * unit

    start = time.perf_counter()
    gpar = GPARModel(X, Y)
    fit_gpytorch_mll(GPARMarginalLogLikelihood(gpar.likelihood, gpar))
    gpar_fit = time.perf_counter() - start
    done = ~Y[:, -1].isnan()
    start = time.perf_counter()
    stgp = SingleTaskGP(X[done], Y[done, -1:], input_transform=Normalize(X.shape[-1], bounds=bounds))
    fit_gpytorch_mll(ExactMarginalLogLikelihood(stgp.likelihood, stgp))
    stgp_fit = time.perf_counter() - start

    sampler = SobolQMCNormalSampler(torch.Size([128]), seed=0)
    rows: list[dict] = [
        {"measurement": "fit GPAR (5 conditionals)", "seconds": gpar_fit, "baseline": "SingleTaskGP fit on complete runs", "baseline seconds": stgp_fit},
    ]
    sample_points = {shape: candidates(*shape) for shape in ((512, 1), (16, 8))}
    for shape, Xc in sample_points.items():
        seconds = median_seconds(lambda: sample_with_gradient(gpar, Xc, sampler), args.repeats)
        rows.append({"measurement": f"sample + backward, {shape[0]} x {shape[1]} x d, 128 samples", "seconds": seconds, "baseline": "", "baseline seconds": None})

    # qLogNEI's layout: the whole baseline, then one candidate, per t-batch.
    layout = torch.cat([X.expand(16, *X.shape), candidates(16, 1)], dim=1)
    posterior = gpar.posterior(layout)
    shared = torch.randn(128, 1, *posterior.base_sample_shape[1:], dtype=X.dtype)
    expanded = shared.expand(128, *posterior.base_sample_shape)
    with torch.no_grad():
        # A fresh copy has an empty cache: the first call draws the baseline block.
        first = median_seconds(lambda: copy.deepcopy(gpar).posterior(layout).rsample_from_base_samples(torch.Size([128]), expanded), args.repeats)
        cached = median_seconds(lambda: gpar.posterior(layout).rsample_from_base_samples(torch.Size([128]), expanded), args.repeats)
        joint = median_seconds(lambda: gpar.posterior(layout).rsample_from_base_samples(torch.Size([128]), expanded.contiguous()), 1)
    rows.append({"measurement": "qLogNEI layout 16 x (200 + 1) x d, shared baseline, first call", "seconds": first, "baseline": "joint factorisation per t-batch", "baseline seconds": joint})
    rows.append({"measurement": "same, later calls (baseline draw cached)", "seconds": cached, "baseline": "joint factorisation per t-batch", "baseline seconds": joint})

    box = bounds.to(X)
    optimise = dict(bounds=box, q=1, num_restarts=10, raw_samples=512)
    best_gpar = -Y[:, -1].nan_to_num(nan=float("inf")).min()
    for name, make in (
        ("qLogEI", lambda model, objective: qLogExpectedImprovement(model, best_f=best_gpar, objective=objective, sampler=sampler)),
        ("qLogNEI, baseline pruned with 256 samples", None),
    ):
        if make is None:
            gpar_acq, prune_seconds = pruned_qlognei(gpar, X, sampler)
            stgp_acq = qLogNoisyExpectedImprovement(stgp, X_baseline=X[done], objective=FINAL, sampler=sampler)
            rows.append({"measurement": "prune_inferior_points, 256 samples over 200 runs", "seconds": prune_seconds, "baseline": "", "baseline seconds": None})
        else:
            gpar_acq = make(gpar, FINAL)
            stgp_acq = qLogExpectedImprovement(stgp, best_f=best_gpar, objective=FINAL, sampler=sampler)
        torch.manual_seed(args.seed)
        gpar_seconds = median_seconds(lambda: optimize_acqf(gpar_acq, **optimise), 1)
        torch.manual_seed(args.seed)
        stgp_seconds = median_seconds(lambda: optimize_acqf(stgp_acq, **optimise), 1)
        rows.append({"measurement": f"optimize_acqf {name}, 10 restarts, 512 raw", "seconds": gpar_seconds, "baseline": "same on SingleTaskGP (final epoch only)", "baseline seconds": stgp_seconds})

    rows += curve_model_rows(X, Y, bounds, sample_points[512, 1], sampler, rows, stgp_fit, args)

    for row in rows:
        base = row["baseline seconds"]
        row["ratio to baseline"] = None if base is None else row["seconds"] / base
    notes = (
        f"N = 200 runs of `{STUDY.relative_to(REPO)}` (log errors), reaching epochs 1, 5, 11, "
        f"16, 21: {(~Y.isnan()).sum(0).tolist()}; GPAR-L-NL (the curve model's rows: "
        "`curve_model_options()`, on the errors); SingleTaskGP on the "
        f"{int(done.sum())} complete runs. Medians of {args.repeats} repeats (one run for "
        "optimisations and the joint path). The joint path is what every t-batch would cost "
        "without the shared baseline block. The first call draws the baseline block (timed on a "
        "fresh copy of the model, whose cache is empty); later calls with the same baseline and "
        "normals, as within one optimize_acqf call, reuse that draw. The optimize_acqf target is 5 s."
    )
    paths = write_results(RESULTS, "acquisition_speed", "GPAR sampling and acquisition speed", rows, command_line(argv), seeds=[args.seed], notes=notes)
    figure, axis = plt.subplots(figsize=(9, 4.5))
    labels = [row["measurement"] for row in rows]
    axis.barh(labels, [row["seconds"] for row in rows], label="GPAR")
    axis.barh(labels, [row["baseline seconds"] or 0 for row in rows], height=0.3, label="baseline (same run)")
    axis.set_xscale("log")
    axis.set_xlabel("seconds (log scale)")
    axis.legend()
    figure.tight_layout()
    figure.savefig(RESULTS / "acquisition_speed.png", dpi=120)
    print(paths["md"].read_text())


if __name__ == "__main__":
    main()
