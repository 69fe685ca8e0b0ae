r"""Calibration of GPAR's predictive of the final error given a run's observed prefix.

The freeze-thaw policy (:mod:`gpar_bo.freeze_thaw`) decides from GPAR's predictive of
a run's final log error given its observed prefix: sample paths of the log-error
increments conditioned on the prefix, with the final checkpoint Rao-Blackwellised (a
Gaussian along each path). This benchmark measures whether that predictive is
calibrated, on held-out partial curves:

* per table and split seed, a random training subset of ``N_TRAIN`` runs (each complete
  with probability 1/3, else stopped after a random 1..M-1 checkpoints; at least two
  complete; closed downwards) and ``N_TEST`` other runs, each showing a random prefix of
  0..M-1 checkpoints;
* the model is fitted on the training runs only; the held-out prefixes are then added
  to its data without refitting (as the policy sees paused runs) and every held-out
  run's final log error is predicted: a mixture over ``NUM_PATHS`` quasi-random paths of
  the Gaussians ``N(log error at M-1 + mean_M, var_M)`` (observation noise included:
  the target is the observed final error);
* metrics, on the **log** final error: coverage of the central 50 % and 95 % intervals
  of the mixture (its CDF at the truth within [0.25, 0.75] or [0.025, 0.975]) and the
  NLL of the mixture density.

**The selected split** (``--split selected``) asks the same of runs stopped the way the
policy stops them, by how good they look, instead of at random: ``N_SELECTED`` runs all
report the first checkpoint, and at each checkpoint the best ``KEEP`` share of the runs
there (by their error) go on to the next, the others stop. The model is fitted on all of
them and predicts the final error of every stopped run, whose prefix is in its data (as
a paused run's is in the policy's). A model fitted on the runs that went on has learnt
how good runs continue; the stopped runs continue differently (on the real tables their
futures spread more: ``benchmarks.missed_promotions``), and this measures what that does
to the predictive without running the policy (a development tool for model changes, on
development tables). Records also count finals below the 95 % interval (``below95``:
the side on which a stopped run looks hopeless).

Models: ``lognormal`` is the curve model with point estimates of its hyperparameters,
``curve_model_options(hyperparameter_draws=0)`` (D-GPAR-NL-X on log-error increments,
``SingleTaskGP``'s LogNormal(-4, 1) noise prior; the policy's model before 2026-11-29);
``gamma`` is the same with
``noise_prior="gamma"`` (BoTorch's Gamma(1.1, 0.05)); ``measured`` is the curve model
with the table's known measurement noise (``GPARModel(measurement_noise=...)``:
``BinomialNoise`` of the validation set for the MNIST and digits tables, the
generator's ``GaussianNoise`` for the synthetic ones), which bounds each
conditional's noise below by its targets' median measurement variance; ``exp_decay`` is BoTorch's ``SingleTaskMultiFidelityGP`` with the exponential-decay kernel
(``benchmarks.bo.surrogates.FreezeThaw``; Gaussian predictive, prefixes of length 0
predicted without data), a reference. ``laplace`` is the shipped curve model,
``curve_model_options()``, which predicts over ``HYPERPARAMETER_DRAWS`` (8) draws of its
later conditionals' hyperparameters from the Laplace approximation of their posterior
(:mod:`gpar_bo.laplace`). ``previous`` is that model with ``noise_prior="previous"`` (a
candidate, not the default): from output 3 on, each conditional's LogNormal noise prior
has its mode at the previous conditional's fitted noise
(``gpar_bo.conditionals.center_noise_prior``); ``laplace_gamma`` is that model with
``noise_prior="gamma"``, ``laplace_measured`` that model told the table's measurement
noise (``measured`` with the draws), ``laplace_linear`` that model with the "L-NL-X"
kernels (a candidate: a linear term on the earlier outputs, so that a run unlike the
continued ones follows their trend instead of their mean), and ``laplace_converged`` that
model fitted to convergence (a candidate: ``benchmarks.bo.freeze_thaw.CONVERGED_FIT``'s
L-BFGS-B tolerances instead of the model's, at which fits stop where they stall;
``benchmarks.fit_sensitivity``); ``lognormal_converged`` is ``lognormal`` fitted so; ``laplace_log`` is the shipped model
with ``draw_scales="log"`` (a candidate: every scale drawn in log units, directions the
posterior leaves open held; :mod:`gpar_bo.laplace`), and ``laplace_log_converged`` that
model fitted to convergence.

Usage::

    python -m benchmarks.calibration            # every table, 3 split seeds (resumable)
    python -m benchmarks.calibration --quick    # one small synthetic table, for tests
    python -m benchmarks.calibration --report   # rewrite the report from the records only
    python -m benchmarks.calibration --split selected --tables dev_mnist_study --models lognormal measured

The report also breaks coverage down by tercile of the runs' final errors, at the last
step and for shorter prefixes (:func:`by_level`): where the noise is not multiplicative,
one noise level per conditional in log units is too narrow for low errors and too wide for
high ones.

Results: ``benchmarks/results/calibration.{md,csv,json,png}`` and the per-split records
``calibration_records.jsonl`` (the resume file); with ``--split selected``,
``calibration_selected.*``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
from botorch.fit import fit_gpytorch_mll
from torch import Tensor

from benchmarks.bo.freeze_thaw import CONVERGED_FIT
from benchmarks.bo.harness import TabularProblem
from benchmarks.bo.problems import MNIST_STUDY_CSV, funnel_table, mnist_table, synthetic_problem
from benchmarks.bo.surrogates import FreezeThaw
from gpar_bo.curve_model import HYPERPARAMETER_DRAWS, curve_model_options, resolve_gpar_options
from gpar_bo.freeze_thaw import FreezeThawIndex
from gpar_bo.model import GPARMarginalLogLikelihood, GPARModel

RESULTS = Path(__file__).resolve().parent / "results"
N_TRAIN, N_TEST = 80, 200
#: The selected split: runs, and the share of the runs at each checkpoint that go on to
#: the next (so that about as many runs finish as in the policy's runs: 27 of 200 on
#: MNIST's 5 checkpoints, 17 on the funnel tables' 6). Fixed before any run of it.
N_SELECTED, KEEP = 200, 0.6
SPLITS = ("random", "selected")
NUM_PATHS = 256
SEEDS = (0, 1, 2)
def measured_options(problem: TabularProblem, **overrides: Any) -> dict[str, Any]:
    """The curve model with point estimates (unless ``overrides`` say otherwise) told
    ``problem``'s measurement noise (which it must record)."""
    if problem.measurement_noise is None:
        raise ValueError(f"{problem.name} records no measurement noise: the 'measured' model needs it.")
    return curve_model_options(**{"measurement_noise": problem.measurement_noise,
                                  "hyperparameter_draws": 0, **overrides})


#: GPAR models by name: the problem's options of each.
GPAR_VARIANTS: Mapping[str, Callable[[TabularProblem], dict[str, Any]]] = {
    "lognormal": lambda problem: curve_model_options(hyperparameter_draws=0),
    "gamma": lambda problem: curve_model_options(noise_prior="gamma", hyperparameter_draws=0),
    "measured": measured_options,
    "laplace": lambda problem: curve_model_options(),
    "previous": lambda problem: curve_model_options(noise_prior="previous"),
    "laplace_gamma": lambda problem: curve_model_options(noise_prior="gamma"),
    "laplace_measured": lambda problem: measured_options(problem, hyperparameter_draws=HYPERPARAMETER_DRAWS),
    "laplace_linear": lambda problem: curve_model_options(kernel="L-NL-X"),
    "laplace_converged": lambda problem: curve_model_options(),
    "lognormal_converged": lambda problem: curve_model_options(hyperparameter_draws=0),
    "laplace_log": lambda problem: curve_model_options(draw_scales="log"),
    "laplace_log_converged": lambda problem: curve_model_options(draw_scales="log"),
}
#: ``fit_gpytorch_mll`` arguments of the variants not fitted with the model's defaults.
FIT_KWARGS: Mapping[str, dict[str, Any]] = {"laplace_converged": CONVERGED_FIT,
                                            "lognormal_converged": CONVERGED_FIT,
                                            "laplace_log_converged": CONVERGED_FIT}
TABLES: dict[str, Callable[[], TabularProblem]] = {
    "mnist": mnist_table,
    "funnel_digits": funnel_table,
    "funnel_breast_cancer": lambda: funnel_table("breast_cancer"),
    **{f"synthetic_{s}": (lambda s=s: synthetic_problem(n=1000, seed=s)) for s in (101, 102, 103)},
}
#: Development data (``--tables dev_...``, never in the default set): what the
#: diagnosis in ``results/calibration_diagnosis.md`` was measured on.
DEVELOPMENT_TABLES: dict[str, Callable[[], TabularProblem]] = {
    "dev_mnist_study": lambda: mnist_table(path=MNIST_STUDY_CSV),
    "dev_classification": lambda: funnel_table("classification"),
    **{f"dev_synthetic_{s}": (lambda s=s: synthetic_problem(n=1000, seed=s)) for s in (1, 2, 3)},
}


def split(
    problem: TabularProblem, seed: int, n_train: int = N_TRAIN, n_test: int = N_TEST
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Training runs with random closed-downwards prefixes and held-out prefixes.

    Returns:
        ``X`` (``n_train x d``), ``Y`` (``n_train x M`` errors, NaN after each prefix),
        ``X_test`` (``n_test x d``), ``Y_test`` (``n_test x M``, prefixes of 0..M-1
        checkpoints) and ``final`` (``n_test`` final errors).
    """
    generator = torch.Generator().manual_seed(seed)
    M = len(problem.checkpoints)
    Y = problem.error[:, [c - 1 for c in problem.checkpoints]]
    if n_train + n_test > len(Y):
        raise ValueError(f"{problem.name} has {len(Y)} runs; asked for {n_train} + {n_test}.")
    perm = torch.randperm(len(Y), generator=generator)
    train, test = perm[:n_train], perm[n_train : n_train + n_test]
    complete = torch.rand(n_train, generator=generator) < 1 / 3
    complete[:2] = True
    train_len = torch.where(complete, M, torch.randint(1, M, (n_train,), generator=generator))
    test_len = torch.randint(0, M, (n_test,), generator=generator)
    steps = torch.arange(M)
    Y_train = torch.where(steps < train_len.unsqueeze(-1), Y[train], float("nan"))
    Y_test = torch.where(steps < test_len.unsqueeze(-1), Y[test], float("nan"))
    return problem.X[train], Y_train, problem.X[test], Y_test, Y[test, -1]


def split_selected(
    problem: TabularProblem, seed: int, n_runs: int = N_SELECTED, keep: float = KEEP
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Runs stopped by how good they look: every run reports the first checkpoint, and
    at each checkpoint the best ``ceil(keep * n)`` of the ``n`` runs there go on.

    Returns:
        ``X`` (``n_runs x d``), ``Y`` (``n_runs x M`` errors, NaN after each run's
        prefix), ``stopped`` (rows that stopped before the final checkpoint) and
        ``final`` (their final errors).
    """
    generator = torch.Generator().manual_seed(seed)
    M = len(problem.checkpoints)
    if n_runs > len(problem.X):
        raise ValueError(f"{problem.name} has {len(problem.X)} runs; asked for {n_runs}.")
    if not 0 < keep < 1:
        raise ValueError(f"keep must be in (0, 1); got {keep}.")
    rows = torch.randperm(len(problem.X), generator=generator)[:n_runs]
    values = problem.error[rows][:, [c - 1 for c in problem.checkpoints]]
    length = torch.ones(n_runs, dtype=torch.long)
    for k in range(M - 1):
        there = (length == k + 1).nonzero().squeeze(-1)
        best = there[values[there, k].argsort(stable=True)[: math.ceil(keep * len(there))]]
        length[best] = k + 2
    if int((length == M).sum()) < 2:
        raise ValueError(f"keep={keep} leaves fewer than two of {n_runs} runs at the final checkpoint.")
    Y = torch.where(torch.arange(M) < length.unsqueeze(-1), values, float("nan"))
    stopped = (length < M).nonzero().squeeze(-1)
    return problem.X[rows], Y, stopped, values[stopped, -1]


def fit_curve_model(
    X: Tensor, Y: Tensor, options: Mapping[str, Any], fit_kwargs: Mapping[str, Any] | None = None
) -> GPARModel:
    """GPAR on the log-error increments of ``Y`` (``n x M``), fitted as the policy fits it
    (``fit_kwargs``: ``fit_gpytorch_mll``'s arguments, as ``FreezeThawPolicy``'s)."""
    model = GPARModel(X, Y, **resolve_gpar_options(options))
    with torch.random.fork_rng():  # fit retries draw from the global RNG
        torch.manual_seed(0)
        fit_gpytorch_mll(GPARMarginalLogLikelihood(model.likelihood, model), **(fit_kwargs or {}))
    return model


def final_mixture(
    model: GPARModel,
    epochs: Sequence[int],
    X_test: Tensor,
    Y_test: Tensor,
    num_paths: int = NUM_PATHS,
    add_prefixes: bool = True,
) -> tuple[Tensor, Tensor]:
    r"""The policy's predictive of the final log error given each held-out prefix
    (``FreezeThawIndex.final_paths``, after adding the prefixes to the model's data).

    Args:
        model: A fitted curve model (modelled outputs: log-error increments).
        epochs: The ``M`` checkpoint epochs.
        X_test: ``t x d`` settings.
        Y_test: ``t x M`` errors, NaN after each run's prefix (a row may be all NaN).
        num_paths: Quasi-random sample paths per run.
        add_prefixes: Add the prefixes to the model's data first (False: they are in
            it already, as the selected split's stopped runs are).

    Returns:
        ``num_paths x t`` means and variances of the Gaussian mixture components.
    """
    has = ~Y_test[:, 0].isnan()
    if add_prefixes and has.any():
        model = model.condition_on_observations(X_test[has], Y_test[has])
    # The incumbent only enters the index, not the paths.
    index = FreezeThawIndex(
        model, torch.tensor(list(epochs), dtype=X_test.dtype), incumbent=1.0, num_samples=num_paths
    )
    with torch.no_grad():
        paths = index.final_paths(X_test, (~Y_test.isnan()).sum(-1))
    return paths.mean, paths.variance


def mixture_metrics(means: Tensor, variances: Tensor, target: Tensor) -> dict[str, Tensor]:
    """Per-run interval coverage and NLL of ``target`` (``t``) under Gaussian mixtures
    with ``S x t`` component moments (``S = 1``: a Gaussian)."""
    std = variances.clamp_min(1e-300).sqrt()
    z = (target - means) / std
    normal = torch.distributions.Normal(0.0, 1.0)
    cdf = normal.cdf(z).mean(0)
    log_density = torch.logsumexp(normal.log_prob(z) - std.log(), 0) - math.log(means.shape[0])
    return {
        "coverage50": ((cdf >= 0.25) & (cdf <= 0.75)).double(),
        "coverage95": ((cdf >= 0.025) & (cdf <= 0.975)).double(),
        "below95": (cdf < 0.025).double(),
        "nll": -log_density,
    }


def evaluate(
    problem: TabularProblem, seed: int, model_name: str, n_train: int = N_TRAIN, n_test: int = N_TEST,
    split_name: str = "random",
) -> dict[str, Any]:
    """One model on one split: per held-out run (the selected split: per stopped run
    of ``n_train`` runs), its prefix length and metrics."""
    if split_name == "selected":
        if model_name not in GPAR_VARIANTS:
            raise ValueError(f"The selected split evaluates GPAR models only; got {model_name!r}.")
        X, Y, stopped, final = split_selected(problem, seed, n_train)
        X_test, Y_test = X[stopped], Y[stopped]
    else:
        X, Y, X_test, Y_test, final = split(problem, seed, n_train, n_test)
    start = time.perf_counter()
    if model_name == "exp_decay":
        surrogate = FreezeThaw(problem.checkpoints)
        surrogate.fit(X, Y)
        fit_seconds = time.perf_counter() - start
        mean, variance = surrogate.predict_final(X_test, Y_test)
        means, variances = mean.unsqueeze(0), variance.unsqueeze(0)
    else:
        model = fit_curve_model(X, Y, GPAR_VARIANTS[model_name](problem), FIT_KWARGS.get(model_name))
        fit_seconds = time.perf_counter() - start
        means, variances = final_mixture(
            model, problem.checkpoints, X_test, Y_test, add_prefixes=split_name == "random"
        )
    metrics = mixture_metrics(means, variances, final.log())
    return {
        "table": problem.name,
        "seed": seed,
        "model": model_name,
        "split": split_name,
        "fit_seconds": fit_seconds,
        "prefix": (~Y_test.isnan()).sum(-1).tolist(),
        "M": len(problem.checkpoints),
        "n_train": n_train,
        **({} if split_name == "selected" else {"n_test": n_test}),
        "final": final.tolist(),
        "last_error": last_errors(Y_test).tolist(),
        **{k: v.tolist() for k, v in metrics.items()},
    }


def last_errors(Y: Tensor) -> Tensor:
    """Each row's error at its last observed checkpoint (NaN for an empty prefix)."""
    length = (~Y.isnan()).sum(-1)
    last = Y.gather(-1, (length - 1).clamp_min(0).unsqueeze(-1)).squeeze(-1)
    return torch.where(length > 0, last, float("nan"))


def with_levels(
    records: Sequence[Mapping[str, Any]], tables: Mapping[str, Callable[[], TabularProblem]],
    n_train: int = N_TRAIN, n_test: int = N_TEST,
) -> list[dict[str, Any]]:
    """``records``, each with its split's sizes, its table's number of checkpoints ``M``
    and, per held-out (or stopped) run, its final error and its error at its last
    observed checkpoint (``last_error``). Records made before these were recorded get
    them from their split, which the table, the seed and the sizes fix (records of
    tables not in ``tables`` are then left out). A split that no longer gives a
    record's prefixes is refused; one that gives the same prefixes from another table
    of as many rows cannot be told apart.

    Raises:
        ValueError: A split no longer gives a record's prefixes.
    """
    problems: dict[str, TabularProblem] = {}
    out = []
    for record in records:
        if "last_error" not in record:
            name = record["table"]
            if name not in tables:
                continue
            if name not in problems:
                problems[name] = tables[name]()
            problem = problems[name]
            if record.get("split", "random") == "selected":
                _, Y, stopped, final = split_selected(problem, record["seed"], n_train)
                Y = Y[stopped]
                sizes = {"n_train": n_train}
            else:
                _, _, _, Y, final = split(problem, record["seed"], n_train, n_test)
                sizes = {"n_train": n_train, "n_test": n_test}
            if (~Y.isnan()).sum(-1).tolist() != record["prefix"]:
                raise ValueError(
                    f"The split of {name}, seed {record['seed']}, sizes {sizes}, does not give its "
                    "record's prefixes (another table, or other sizes).")
            record = {**record, **sizes, "M": len(problem.checkpoints), "final": final.tolist(),
                      "last_error": last_errors(Y).tolist()}
        out.append(dict(record))
    return out


def by_level(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Coverage by how low a run's error was when it was predicted: rows per (table,
    model, step, tercile), with binomial standard errors.

    The level is the run's error at its last observed checkpoint, known when the
    prediction is made; grouping by the final error itself would not do (the runs that
    end in the extreme terciles are those the predictive missed, so even a calibrated
    one covers them less). ``step`` is "last" for prefixes of M-1 checkpoints (the final
    conditional's one-step predictive) and "earlier" for prefixes of 1..M-2 (paths
    through several conditionals); runs with no checkpoint observed have no level. The
    terciles are cut within each (table, step) over its runs, each run once whatever
    the models; a run on a cut goes to the upper tercile. One noise level per
    conditional in log-error units cannot be calibrated at every level when the
    measurement noise is not multiplicative: an error measured on a fixed validation
    set, or with additive noise, is relatively noisier when it is low.
    """
    rows = []
    for table in sorted({r["table"] for r in records}):
        mine = [r for r in records if r["table"] == table]
        M = mine[0]["M"]
        for step, wanted in (("last", lambda p: p == M - 1), ("earlier", lambda p: 1 <= p < M - 1)):
            runs = {(r["seed"], r.get("split", "random"), i): level for r in mine
                    for i, (p, level) in enumerate(zip(r["prefix"], r["last_error"])) if wanted(p)}
            if not runs:
                continue
            levels = torch.tensor(list(runs.values()), dtype=torch.double)
            cuts = levels.quantile(torch.tensor([1 / 3, 2 / 3], dtype=torch.double))
            for model in sorted({r["model"] for r in mine}):
                group = [r for r in mine if r["model"] == model]
                keep_step = torch.tensor([wanted(p) for r in group for p in r["prefix"]])
                values = {k: torch.tensor([v for r in group for v in r[k]], dtype=torch.double)
                          for k in ("last_error", "coverage50", "coverage95")}
                below = torch.tensor([v for r in group for v in r.get("below95", [math.nan] * len(r["prefix"]))],
                                     dtype=torch.double)
                tercile = torch.bucketize(values["last_error"].nan_to_num(-1.0), cuts, right=True)
                for k, name in enumerate(("low", "middle", "high")):
                    keep = keep_step & (tercile == k)
                    n = int(keep.sum())
                    if n == 0:
                        continue
                    row = {"table": table, "model": model, "step": step, "level": name,
                           "level_range": f"{float(values['last_error'][keep].min()):.4f}-"
                                          f"{float(values['last_error'][keep].max()):.4f}", "n": n}
                    for metric in ("coverage50", "coverage95"):
                        row[metric] = float(values[metric][keep].mean())
                        row[f"{metric}_se"] = math.sqrt(row[metric] * (1 - row[metric]) / n)
                    row["below95"] = float(below[keep].mean())  # NaN for records made before it
                    rows.append(row)
    return rows


def summarise(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Rows per (table, model, prefix length or "all"): pooled means over held-out runs
    and split seeds, with the binomial standard error of the coverages."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for record in records:
        groups.setdefault((record["table"], record["model"]), []).append(record)
    rows = []
    for (table, model), group in groups.items():
        prefix = torch.tensor([p for r in group for p in r["prefix"]])
        values = {k: torch.tensor([v for r in group for v in r[k]]) for k in ("coverage50", "coverage95", "nll")}
        # Records written before below95 was recorded lack it.
        below = (torch.tensor([v for r in group for v in r["below95"]])
                 if all("below95" in r for r in group) else torch.full_like(prefix, math.nan, dtype=torch.double))
        values["below95"] = below
        for length in ["all", *sorted(set(prefix.tolist()))]:  # the lengths there are
            keep = torch.ones_like(prefix, dtype=torch.bool) if length == "all" else prefix == length
            n = int(keep.sum())
            row: dict[str, Any] = {"table": table, "model": model, "prefix": str(length), "n": n}
            for k, v in values.items():
                row[k] = float(v[keep].mean())
            for k in ("coverage50", "coverage95"):
                row[f"{k}_se"] = math.sqrt(row[k] * (1 - row[k]) / n)
            row["seeds"] = len(group)
            row["fit_seconds"] = sum(r["fit_seconds"] for r in group) / len(group)
            rows.append(row)
    return rows


def _machine() -> str:
    return f"{platform.platform()}, {os.cpu_count()} cores, torch threads {torch.get_num_threads()}"


def write_results(
    rows: list[dict[str, Any]], meta: dict[str, Any], stem: Path, level_rows: Sequence[Mapping[str, Any]] = ()
) -> None:
    """``stem.{csv,json,md,png}``; ``level_rows`` (:func:`by_level`) go to the JSON and
    a second table of the markdown."""
    import csv

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = list(rows[0])
    with open(stem.with_suffix(".csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    stem.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows, "by_level": list(level_rows)}, indent=1))
    lines = [
        "# Calibration of GPAR's final-error predictive given a run's prefix",
        "",
        f"Command: `{meta['command']}`  ",
        f"Date: {meta['date']}  ",
        f"Machine: {meta['machine']}  ",
        (f"Split seeds: {meta['seeds']}; **selected split**: {meta['n_train']} runs, the best {KEEP:.0%} "
         "at each checkpoint going on to the next; the model, fitted on all of them, predicts the "
         f"final error of every run that stopped (prefix: checkpoints observed); {NUM_PATHS} paths "
         "per run.  " if meta.get("split") == "selected" else
         f"Split seeds: {meta['seeds']}; {meta['n_train']} training runs, {meta['n_test']} held-out "
         f"runs per split (prefixes of 0..M-1 checkpoints); {NUM_PATHS} paths per run.  "),
        "Target: the observed **log** final error. Coverage of the central 50 % / 95 % "
        "intervals (target 45-55 % / 92-97 %), NLL per run (nats, log-error units), "
        "pooled over held-out runs and seeds; ± is the binomial standard error. `below 95 %`: "
        "share of finals below the 95 % interval (2.5 % if calibrated; blank in records made "
        "before it was recorded).",
        "",
        "Models: `lognormal` = the curve model with point estimates of its hyperparameters, "
        "`curve_model_options(hyperparameter_draws=0)` (LogNormal(-4, 1) noise prior; the policy's "
        "model before 2026-11-29); `gamma` = the same with `noise_prior=\"gamma\"` (Gamma(1.1, 0.05)); "
        "`measured` = the same with the table's known measurement noise "
        "(`measurement_noise=`: `BinomialNoise(n_val)` on MNIST and digits, the generator's "
        "`GaussianNoise(0.005)` on the synthetic tables), a floor under each conditional's noise; "
        "`exp_decay` = BoTorch's `SingleTaskMultiFidelityGP` with the exponential-decay kernel "
        "(reference; Gaussian); `laplace` = the shipped curve model, `curve_model_options()` "
        f"(since 2026-11-29), which predicts over {HYPERPARAMETER_DRAWS} draws of its later "
        "conditionals' hyperparameters from the Laplace approximation of their posterior; "
        "`previous` = the shipped model with `noise_prior=\"previous\"` (a candidate): from output 3 "
        "on, each conditional's LogNormal noise prior has its mode at the previous conditional's "
        "fitted noise; `laplace_gamma` = the shipped model with `noise_prior=\"gamma\"`; "
        "`laplace_measured` = the shipped model told the table's measurement noise; "
        "`laplace_linear` = the shipped model with the \"L-NL-X\" kernels (a linear term on the "
        "earlier outputs; a candidate); `laplace_converged` = the shipped model fitted to "
        "convergence (`benchmarks.bo.freeze_thaw.CONVERGED_FIT`: L-BFGS-B ftol 1e-12, gtol 1e-9; a "
        "candidate); `lognormal_converged` = `lognormal` fitted so; `laplace_log` = the shipped "
        "model drawing every scale in log units and holding directions the posterior leaves open "
        "(`draw_scales=\"log\"`, a candidate, `gpar_bo.laplace`), and `laplace_log_converged` "
        "that model fitted to convergence.",
        "",
        "`fit s`: mean seconds per fit under the machine's load at the time (other sessions "
        "shared its 2 cores), not a speed measurement.",
        "",
        "The diagnosis on development data, and what the numbers below say: "
        f"[calibration_diagnosis.md]({os.path.relpath(RESULTS / 'calibration_diagnosis.md', stem.resolve().parent)}).",
        "",
        "| table | model | prefix | n | cover 50 % | cover 95 % | below 95 % | NLL | fit s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['table']} | {r['model']} | {r['prefix']} | {r['n']} | "
            f"{r['coverage50']:.3f} ± {r['coverage50_se']:.3f} | "
            f"{r['coverage95']:.3f} ± {r['coverage95_se']:.3f} | "
            f"{'' if math.isnan(r['below95']) else format(r['below95'], '.3f')} | {r['nll']:.3f} | "
            f"{r['fit_seconds']:.1f} |"
        )
    if level_rows:
        lines += [
            "",
            "## By the run's level",
            "",
            "Coverage of the central 50 % / 95 % intervals by tercile of the runs' errors at their "
            "last observed checkpoint (known when the prediction is made; cut within each table and "
            "step), at the last step (prefix M-1: the final conditional's one-step predictive) and "
            "for prefixes of 1..M-2 checkpoints (`earlier`); ± is the binomial standard error.",
            "",
            "| table | model | step | level | range | n | cover 50 % | cover 95 % | below 95 % |",
            "|---|---|---|---|---|---|---|---|---|",
            *(f"| {r['table']} | {r['model']} | {r['step']} | {r['level']} | {r['level_range']} | "
              f"{r['n']} | {r['coverage50']:.3f} ± {r['coverage50_se']:.3f} | "
              f"{r['coverage95']:.3f} ± {r['coverage95_se']:.3f} | "
              f"{'' if math.isnan(r['below95']) else format(r['below95'], '.3f')} |" for r in level_rows),
        ]
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    tables = sorted({r["table"] for r in rows})
    models = sorted({r["model"] for r in rows})
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.5))
    width = 0.8 / len(models)
    for k, (metric, band) in enumerate((("coverage50", (0.45, 0.55)), ("coverage95", (0.92, 0.97)))):
        ax = axes[k]
        for i, model in enumerate(models):
            values = [
                next((r[metric] for r in rows if r["table"] == t and r["model"] == model and r["prefix"] == "all"), float("nan"))
                for t in tables
            ]
            ax.bar([j + i * width for j in range(len(tables))], values, width, label=model)
        ax.axhspan(*band, color="grey", alpha=0.3)
        ax.set_xticks([j + width * (len(models) - 1) / 2 for j in range(len(tables))])
        ax.set_xticklabels(tables, rotation=20, fontsize=8)
        ax.set_ylim(band[0] - 0.35, 1.0)
        ax.set_title(f"{metric} (all prefixes; target band grey)")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(stem.with_suffix(".png"), dpi=120)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one small synthetic table, one seed")
    parser.add_argument("--tables", nargs="*", default=None,
                        help=f"subset of {list(TABLES)} (default: all), or development data {list(DEVELOPMENT_TABLES)}")
    parser.add_argument("--models", nargs="*", default=["lognormal", "gamma", "measured", "exp_decay"])
    parser.add_argument(
        "--report", action="store_true", help="no fits: rewrite the report from the records file"
    )
    parser.add_argument("--seeds", nargs="*", type=int, default=list(SEEDS))
    parser.add_argument("--split", choices=SPLITS, default="random",
                        help="random: held-out runs with random prefixes; selected: runs stopped by how good they look")
    parser.add_argument("--out", type=Path, default=None,
                        help="results stem (default: results/calibration, or calibration_selected)")
    args = parser.parse_args(argv)
    if args.out is None:  # quick runs never share the reported records
        args.out = (RESULTS / "quick" if args.quick else RESULTS) / (
            "calibration" if args.split == "random" else "calibration_selected")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.split == "selected" and "exp_decay" in args.models:
        parser.error("the selected split evaluates GPAR models only: drop exp_decay from --models")
    torch.set_num_threads(1)
    if args.quick:
        tables = {"quick_synthetic_101": lambda: synthetic_problem(n=300, seed=101)}
        seeds, n_train, n_test = args.seeds[:1], (60 if args.split == "selected" else 40), 60
    else:
        known = {**TABLES, **DEVELOPMENT_TABLES}
        unknown_tables = [t for t in args.tables or () if t not in known]
        if unknown_tables:
            raise SystemExit(f"unknown tables {unknown_tables}; known: {list(known)}")
        tables = {k: known[k] for k in (args.tables or TABLES)}
        seeds, n_train, n_test = args.seeds, (N_SELECTED if args.split == "selected" else N_TRAIN), N_TEST
    unknown = [m for m in args.models if m not in (*GPAR_VARIANTS, "exp_decay")]
    if unknown:
        raise SystemExit(f"unknown models {unknown}")
    records_path = args.out.with_name(args.out.name + "_records.jsonl")
    records = []
    if records_path.exists():
        records = [json.loads(line) for line in records_path.read_text().splitlines() if line]
    done = {(r["table"], r["seed"], r["model"], r.get("split", "random")) for r in records}
    for name, make in tables.items() if not args.report else ():
        problem = make()
        for seed in seeds:
            for model in args.models:
                if (name, seed, model, args.split) in done:
                    continue
                record = evaluate(problem, seed, model, n_train, n_test, args.split)
                record["table"] = name
                records.append(record)
                with open(records_path, "a") as f:
                    f.write(json.dumps(record) + "\n")
                print(f"{name} seed {seed} {model}: cover95 "
                      f"{sum(record['coverage95']) / len(record['coverage95']):.3f} "
                      f"({record['fit_seconds']:.1f} s fit)", flush=True)
    wanted = [r for r in records if r["table"] in tables and r["seed"] in seeds and r["model"] in args.models
              and r.get("split", "random") == args.split]
    command = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--report"]
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    meta = {
        "command": " ".join(["python -m benchmarks.calibration", *command]),
        "date": f"{date} (report rewritten from the records, no fits)" if args.report else date,
        "machine": _machine(),
        "seeds": seeds,
        "n_train": n_train,
        "n_test": n_test,
        "split": args.split,
    }
    wanted = with_levels(wanted, tables, n_train, n_test)
    write_results(summarise(wanted), meta, args.out, by_level(wanted))


if __name__ == "__main__":
    main()
