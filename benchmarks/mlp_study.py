"""The MLP validation-error study (Requeima et al., AISTATS 2019, section 5; issue 5).

GPAR against independent GPs, multi-output GPs (ICM, SLFM) and BoTorch's
``LatentKroneckerGP`` at predicting the validation error of MNIST MLPs at epochs
1, 5, 11, 16 and 21 from the hyperparameters alone, when most training runs were
stopped early.

Protocol, per seed: split the 291 settings of ``benchmarks/data/mnist_curves_study.csv``
into 175 training and 116 test settings; in the training set keep every epoch-1 value
and let a random, nested (closed downwards) subset of 124 / 88 / 64 / 44 runs reach the
later checkpoints (about 30% of the runs that reach a checkpoint are stopped before the
next one). Every model sees the inputs on the sampling scale (log learning rate and
penalties), normalised to the unit cube with the training range, and models the log
error rate. Predictions are scored on the original scale: SMSE per checkpoint (mean
squared error of the predictive mean of the error rate, divided by the variance of the
test targets) and the mean negative log predictive density of the held-out error rates
(Gaussian in log error, i.e. log-normal in the error rate; for GPAR a Gaussian
approximation in log error from its Rao-Blackwellised moments).

Run ``python -m benchmarks.mlp_study``; ``--quick`` is the CI
smoke test.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "benchmarks" / "data" / "mnist_curves_study.csv"
RESULTS = REPO / "benchmarks" / "results"
EPOCHS = (1, 5, 11, 16, 21)
#: Runs that reach each checkpoint in a 175-setting training set (the paper's counts).
PAPER_COUNTS = (175, 124, 88, 64, 44)
N_TRAIN, N_TEST = 175, 116
#: Samples behind GPAR's predictive mean of the error rate (exp of log-error samples).
GPAR_MEAN_SAMPLES = 512
#: Random restarts for the models whose fits depend on a random initialisation.
RESTARTS = DEFAULT_RESTARTS = 2
#: The optimiser budget every model gets: L-BFGS-B iterations per GP fit (per
#: conditional for GPAR, per checkpoint for IGP, per restart for ICM/SLFM).
MAXITER = DEFAULT_MAXITER = 200
QUICK_MAXITER = 50


def _fit_kwargs() -> dict:
    return {"optimizer_kwargs": {"options": {"maxiter": MAXITER}}}


# --------------------------------------------------------------------------- data
@dataclass
class Split:
    """One seed's split: training data with early-stopped runs, full test data."""

    seed: int
    X_train: Tensor  # n x d, sampling scale
    Y_train: Tensor  # n x M error rates, NaN after a run was stopped (closed downwards)
    X_test: Tensor
    Y_test: Tensor  # n' x M, complete

    @property
    def counts(self) -> list[int]:
        return (~self.Y_train.isnan()).sum(0).tolist()


def reach_counts(n_train: int) -> list[int]:
    """Runs reaching each checkpoint: the paper's 175/124/88/64/44, scaled to n_train."""
    return [max(2, round(n_train * c / PAPER_COUNTS[0])) for c in PAPER_COUNTS]


def make_split(X: Tensor, Y: Tensor, seed: int, n_train: int = N_TRAIN,
               n_test: int = N_TEST) -> Split:
    """Random train/test split and random nested early stopping of training runs."""
    if n_train + n_test > len(X):
        raise ValueError(f"n_train + n_test = {n_train + n_test} > {len(X)} settings")
    rng = np.random.default_rng(seed)
    perm = torch.from_numpy(rng.permutation(len(X)))
    train, test = perm[:n_train], perm[n_train : n_train + n_test]
    Y_train = Y[train].clone()
    # The training rows are in random order, so "row i reaches checkpoint m iff
    # i < count_m" stops a random ~30% of the runs reaching each checkpoint.
    for m, count in enumerate(reach_counts(n_train)):
        Y_train[count:, m] = float("nan")
    return Split(seed, X[train].clone(), Y_train, X[test].clone(), Y[test].clone())


# --------------------------------------------------------------------------- models
@dataclass
class Prediction:
    """Predictions at the test inputs, all ``n x M``."""

    log_mean: Tensor  # predictive mean of the log error (noisy observation)
    log_var: Tensor  # predictive variance of the log error, observation noise included
    mean: Tensor  # predictive mean of the error rate (original scale)


def _bounds(X: Tensor) -> Tensor:
    lower, upper = X.min(0).values, X.max(0).values
    return torch.stack([lower, torch.where(upper > lower, upper, lower + 1.0)])


def _lognormal_mean(mu: Tensor, var: Tensor) -> Tensor:
    return torch.exp(mu + 0.5 * var)


def _fit_best(build: Callable[[], torch.nn.Module], restarts: int) -> torch.nn.Module:
    """Fit ``restarts`` models from random initialisations; keep the best evidence."""
    from botorch.fit import fit_gpytorch_mll
    from botorch.optim.closures import get_loss_closure
    from botorch.optim.utils import sample_all_priors
    from gpytorch.mlls import ExactMarginalLogLikelihood

    best, best_value, errors = None, -math.inf, []
    for r in range(restarts):
        model = build()
        if r > 0:
            try:
                sample_all_priors(model)
            except Exception:  # pragma: no cover - priors without sample()
                pass
        mll = ExactMarginalLogLikelihood(model.likelihood, model)
        try:
            fit_gpytorch_mll(mll, **_fit_kwargs())
        except Exception as error:  # a failed restart is skipped
            errors.append(error)
            continue
        model.train()
        with torch.no_grad():
            value = -float(get_loss_closure(mll)().sum())
        model.eval()
        if math.isfinite(value) and value > best_value:
            best, best_value = model, value
    if best is None:
        raise RuntimeError(f"all {restarts} fits failed: {errors}")
    return best


def fit_gpar(kernel: str, denoise: bool = False, markov: int | None = None) -> Callable:
    def fit(X: Tensor, logY: Tensor, seed: int) -> Callable[[Tensor], Prediction]:
        from botorch.fit import fit_gpytorch_mll

        from gpar_bo import GPARMarginalLogLikelihood, GPARModel

        model = GPARModel(X, logY, output_names=list(EPOCHS), kernel=kernel, denoise=denoise,
                          markov=markov)
        fit_gpytorch_mll(GPARMarginalLogLikelihood(model.likelihood, model), **_fit_kwargs())

        def predict(X_test: Tensor) -> Prediction:
            with torch.no_grad():
                post = model.posterior(X_test.unsqueeze(-2), observation_noise=True)
                mu, var = post.mean.squeeze(-2), post.variance.squeeze(-2)
                torch.manual_seed(seed)
                samples = post.rsample(torch.Size([GPAR_MEAN_SAMPLES])).squeeze(-2)
            return Prediction(mu, var, samples.exp().mean(0))

        return predict

    return fit


def fit_igp(X: Tensor, logY: Tensor, seed: int) -> Callable[[Tensor], Prediction]:
    """Independent exact GPs, one per checkpoint on its observed rows (ModelListGP)."""
    from botorch.fit import fit_gpytorch_mll
    from botorch.models import ModelListGP, SingleTaskGP
    from botorch.models.transforms.input import Normalize
    from botorch.models.transforms.outcome import Standardize
    from gpytorch.mlls import ExactMarginalLogLikelihood

    bounds = _bounds(X)
    gps = []
    for m in range(logY.shape[-1]):
        rows = ~logY[:, m].isnan()
        gp = SingleTaskGP(X[rows], logY[rows, m : m + 1],
                          input_transform=Normalize(d=X.shape[-1], bounds=bounds),
                          outcome_transform=Standardize(m=1))
        fit_gpytorch_mll(ExactMarginalLogLikelihood(gp.likelihood, gp), **_fit_kwargs())
        gps.append(gp)
    model = ModelListGP(*gps)

    def predict(X_test: Tensor) -> Prediction:
        with torch.no_grad():
            post = model.posterior(X_test, observation_noise=True)
            mu, var = post.mean, post.variance
        return Prediction(mu, var, _lognormal_mean(mu, var))

    return predict


def _long_format(X: Tensor, logY: Tensor) -> tuple[Tensor, Tensor]:
    """(x, checkpoint index) rows for every observed entry."""
    rows, cols = (~logY.isnan()).nonzero(as_tuple=True)
    Xl = torch.cat([X[rows], cols.unsqueeze(-1).to(X)], -1)
    return Xl, logY[rows, cols].unsqueeze(-1)


def fit_multitask(latent: str) -> Callable:
    """Exact multi-output GPs over (x, checkpoint) with missing entries.

    ``latent="icm"``: BoTorch's ``MultiTaskGP`` with a rank-2 coregionalisation matrix
    (intrinsic coregionalisation model: one kernel on x). ``latent="slfm"``: the
    semi-parametric latent factor model with 2 latent processes, each with its own
    ARD kernel on x and a rank-1 mixing vector over checkpoints,
    ``K = sum_q k_q(x, x') w_q w_q^T`` (an LCM), in the same ``MultiTaskGP`` shell.
    Both have a constant mean and a noise level per checkpoint, per-checkpoint
    standardisation, and are fitted from ``RESTARTS`` initialisations.
    """

    def fit(X: Tensor, logY: Tensor, seed: int) -> Callable[[Tensor], Prediction]:
        from botorch.models import MultiTaskGP
        from botorch.models.transforms.input import Normalize
        from botorch.models.transforms.outcome import StratifiedStandardize
        from botorch.models.utils.gpytorch_modules import (
            get_covar_module_with_dim_scaled_prior,
        )
        from gpytorch.kernels import AdditiveKernel, IndexKernel, ProductKernel

        d, M = X.shape[-1], logY.shape[-1]
        Xl, yl = _long_format(X, logY)
        bounds = _bounds(X)

        def build() -> MultiTaskGP:
            model = MultiTaskGP(
                Xl, yl, task_feature=d, rank=2, all_tasks=list(range(M)),
                input_transform=Normalize(d=d + 1, indices=list(range(d)), bounds=bounds),
                outcome_transform=StratifiedStandardize(
                    stratification_idx=d, all_task_values=torch.arange(M)),
            )
            if latent == "slfm":
                parts = []
                for _ in range(2):
                    k_x = get_covar_module_with_dim_scaled_prior(
                        ard_num_dims=d, active_dims=list(range(d)))
                    k_t = IndexKernel(num_tasks=M, rank=1, active_dims=[d])
                    # Pure SLFM: no per-checkpoint independent term (B_q = w_q w_q^T).
                    k_t.raw_var.data.fill_(-30.0)
                    k_t.raw_var.requires_grad_(False)
                    parts.append(ProductKernel(k_x, k_t))
                model.covar_module = AdditiveKernel(*parts).to(X)
            return model

        torch.manual_seed(seed)
        model = _fit_best(build, RESTARTS)

        def predict(X_test: Tensor) -> Prediction:
            n = len(X_test)
            tasks = torch.arange(M, dtype=X_test.dtype).repeat(n).unsqueeze(-1)
            X_long = torch.cat([X_test.repeat_interleave(M, 0), tasks], -1)
            with torch.no_grad():
                post = model.posterior(X_long, observation_noise=True)
                mu, var = post.mean.reshape(n, M), post.variance.reshape(n, M)
            return Prediction(mu, var, _lognormal_mean(mu, var))

        return predict

    return fit


def fit_lkgp(X: Tensor, logY: Tensor, seed: int) -> Callable[[Tensor], Prediction]:
    """BoTorch's ``LatentKroneckerGP`` (Lin et al. 2024) on the (x, epoch) grid.

    As shipped: Matern-5/2 ARD kernel on x times a scaled Matern-5/2 kernel on the
    epoch (rescaled to [0, 1]), zero mean, one noise level, one standardisation over
    all observed entries; the x inputs normalised like every other model's. Exact
    (Cholesky) inference: the grid has only 175 x 5 cells.
    """
    from botorch.models.latent_kronecker_gp import LatentKroneckerGP
    from botorch.models.transforms.input import Normalize

    T = torch.tensor(EPOCHS, dtype=X.dtype).unsqueeze(-1)
    T = (T - T.min()) / (T.max() - T.min())

    def build() -> LatentKroneckerGP:
        return LatentKroneckerGP(X, T, logY, input_transform=Normalize(
            d=X.shape[-1], bounds=_bounds(X)))

    torch.manual_seed(seed)
    model = _fit_best(build, 1)

    def predict(X_test: Tensor) -> Prediction:
        with torch.no_grad():
            # The posterior's mean and variance are of the latent process on the
            # standardised scale (only its samples are untransformed): undo the
            # standardisation and add the observation noise by hand.
            post = model.posterior(X_test)
            n, M = len(X_test), logY.shape[-1]
            tf = model.outcome_transform
            std, offset = tf.stdvs.squeeze(), tf.means.squeeze()
            mu = post.mean.reshape(n, M) * std + offset
            var = (post.variance.reshape(n, M) + model.likelihood.noise.squeeze()) * std**2
        return Prediction(mu, var, _lognormal_mean(mu, var))

    return predict


#: name -> (fit function, description). Order = column order of the report.
MODELS: dict[str, tuple[Callable, str]] = {
    "GPAR-L-NL": (fit_gpar("L-NL"), "GPAR, linear + EQ kernel on earlier outputs"),
    "GPAR-NL": (fit_gpar("NL"), "GPAR, EQ kernel on earlier outputs"),
    "GPAR-L": (fit_gpar("L"), "GPAR, linear kernel on earlier outputs"),
    "GPAR-NL-X": (fit_gpar("NL-X"), "GPAR, EQ kernel on (x, earlier outputs) jointly"),
    "D-GPAR-L-NL": (fit_gpar("L-NL", denoise=True), "denoising GPAR, L-NL kernel"),
    "D-GPAR-NL": (fit_gpar("NL", denoise=True), "denoising GPAR, NL kernel"),
    "D-GPAR-L": (fit_gpar("L", denoise=True), "denoising GPAR, L kernel"),
    "D-GPAR-NL-X": (fit_gpar("NL-X", denoise=True), "denoising GPAR, NL-X kernel"),
    "D-GPAR-NL-M1": (fit_gpar("NL", denoise=True, markov=1),
                     "denoising GPAR, NL kernel, only the previous checkpoint as input"),
    "D-GPAR-NL-X-M1": (fit_gpar("NL-X", denoise=True, markov=1),
                       "denoising GPAR, NL-X kernel, only the previous checkpoint as input"),
    "IGP": (fit_igp, "independent SingleTaskGPs per checkpoint (ModelListGP)"),
    "ICM": (fit_multitask("icm"), "MultiTaskGP, rank-2 ICM"),
    "SLFM": (fit_multitask("slfm"), "SLFM, 2 latent processes (LCM kernel)"),
    "LKGP": (fit_lkgp, "BoTorch LatentKroneckerGP"),
}
QUICK_MODELS = ("GPAR-L-NL", "D-GPAR-NL-X", "IGP", "ICM", "SLFM", "LKGP")
REFERENCE = "gpar-ref"


# --------------------------------------------------------------------------- scoring
def score(pred: Prediction, Y_test: Tensor) -> dict[str, np.ndarray]:
    """SMSE and mean log loss per checkpoint (original scale)."""
    mse = ((pred.mean - Y_test) ** 2).mean(0)
    smse = mse / Y_test.var(0, unbiased=False)
    logy = Y_test.log()
    var = pred.log_var.clamp_min(1e-12)
    # -log p(y) = -log N(log y | mu, var) + log y (density of the error rate itself).
    nlpd = 0.5 * (math.log(2 * math.pi) + var.log() + (logy - pred.log_mean) ** 2 / var) + logy
    return {"smse": smse.numpy(), "nlpd": nlpd.mean(0).numpy()}


def run_model(name: str, split: Split) -> dict:
    fit = MODELS[name][0]
    torch.manual_seed(split.seed)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        predict = fit(split.X_train, split.Y_train.log(), split.seed)
        fit_seconds = time.perf_counter() - start
        start = time.perf_counter()
        pred = predict(split.X_test)
    predict_seconds = time.perf_counter() - start
    for field in ("log_mean", "log_var", "mean"):
        if not torch.isfinite(getattr(pred, field)).all():
            raise RuntimeError(f"{name}: non-finite {field} on seed {split.seed}")
    return {**score(pred, split.Y_test), "fit_seconds": fit_seconds,
            "predict_seconds": predict_seconds}


# ----------------------------------------------------------------- reference gpar
REF_SCRIPT = r"""
import sys, time
import numpy as np
from gpar import GPARRegressor
d = np.load(sys.argv[1])
# The paper's MLP setup: GPAR-L-NL with imputation of missing earlier outputs; inputs
# arrive normalised to the unit cube, outputs (log errors) are normalised by gpar.
reg = GPARRegressor(replace=False, impute=True, scale=0.5, linear=True, linear_scale=10.0,
                    nonlinear=True, nonlinear_scale=1.0, noise=0.1, normalise_y=True)
t = time.perf_counter()
reg.fit(d["x"], d["y"], iters=int(sys.argv[3]), trace=False)
fit_seconds = time.perf_counter() - t
t = time.perf_counter()
samples = np.stack(reg.sample(d["xt"], posterior=True, num_samples=int(sys.argv[4]),
                              latent=False))
np.savez(sys.argv[2], samples=samples, fit_seconds=fit_seconds,
         predict_seconds=time.perf_counter() - t)
"""


#: Reference gpar budget: L-BFGS-B iterations per conditional, posterior samples.
REF_ITERS, REF_SAMPLES = 100, 50


def run_reference(split: Split, python: str, workdir: Path, iters: int = REF_ITERS,
                  num_samples: int = REF_SAMPLES) -> dict:
    """The authors' ``gpar`` package (GPAR-L-NL, imputation) on the same split.

    Runs in a separate interpreter (``python``): samples of the log error at the test
    inputs; mean/variance of the samples give the same scores as for the other models.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    data, out = workdir / f"ref_in_{split.seed}.npz", workdir / f"ref_out_{split.seed}.npz"
    script = workdir / "gpar_reference.py"
    script.write_text(REF_SCRIPT)
    lower, upper = _bounds(split.X_train)
    unit = lambda x: ((x - lower) / (upper - lower)).numpy()  # noqa: E731
    np.savez(data, x=unit(split.X_train), y=split.Y_train.log().numpy(),
             xt=unit(split.X_test))
    start = time.perf_counter()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    subprocess.run([python, str(script), str(data), str(out), str(iters), str(num_samples)],
                   check=True, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    res = np.load(out)
    samples = torch.from_numpy(res["samples"]).to(split.X_test)  # S x n x M
    pred = Prediction(samples.mean(0), samples.var(0), samples.exp().mean(0))
    return {**score(pred, split.Y_test), "fit_seconds": float(res["fit_seconds"]),
            "predict_seconds": float(res["predict_seconds"]), "wall_seconds": wall}


# ------------------------------------------------------------------------ report
def summarize(records: list[dict], models: Sequence[str]) -> list[dict]:
    """Mean and standard error over seeds, per model and checkpoint."""
    rows = []
    for name in models:
        recs = [r for r in records if r["model"] == name]
        if not recs:
            continue
        smse = np.array([r["smse"] for r in recs])  # seeds x M
        nlpd = np.array([r["nlpd"] for r in recs])
        fit_s = np.array([r["fit_seconds"] for r in recs])
        k = len(recs)
        se = (lambda a: a.std(0, ddof=1) / math.sqrt(k)) if k > 1 else (lambda a: np.full(a.shape[1:], np.nan))
        rows.append({
            "model": name, "seeds": k,
            "smse_mean": smse.mean(0), "smse_se": se(smse),
            "nlpd_mean": nlpd.mean(0), "nlpd_se": se(nlpd),
            "log_loss": nlpd.mean(), "log_loss_se": (nlpd.mean(1).std(ddof=1) / math.sqrt(k)) if k > 1 else float("nan"),
            "fit_seconds": fit_s.mean(),
        })
    return rows


def format_table(summary: list[dict]) -> str:
    head = "| model | " + " | ".join(f"SMSE epoch {e}" for e in EPOCHS)
    head += " | log loss | fit time (s) |\n"
    head += "| --- " * (len(EPOCHS) + 3) + "|\n"
    lines = []
    for row in summary:
        cells = [f"{m:.3f} ± {s:.3f}" for m, s in zip(row["smse_mean"], row["smse_se"])]
        cells.append(f"{row['log_loss']:.3f} ± {row['log_loss_se']:.3f}")
        cells.append(f"{row['fit_seconds']:.1f}")
        lines.append(f"| {row['model']} | " + " | ".join(cells) + " |")
    return head + "\n".join(lines) + "\n"


def write_csv(records: list[dict], summary: list[dict], out: Path, stem: str) -> None:
    with open(out / f"{stem}.csv", "w") as f:
        f.write("model,seeds,epoch,smse_mean,smse_se,nlpd_mean,nlpd_se,fit_seconds\n")
        for row in summary:
            for m, e in enumerate(EPOCHS):
                f.write(f"{row['model']},{row['seeds']},{e},{row['smse_mean'][m]:.6g},"
                        f"{row['smse_se'][m]:.6g},{row['nlpd_mean'][m]:.6g},"
                        f"{row['nlpd_se'][m]:.6g},{row['fit_seconds']:.4g}\n")
    with open(out / f"{stem}_runs.csv", "w") as f:
        f.write("model,seed,epoch,smse,nlpd,fit_seconds,predict_seconds\n")
        for r in records:
            for m, e in enumerate(EPOCHS):
                f.write(f"{r['model']},{r['seed']},{e},{r['smse'][m]:.6g},{r['nlpd'][m]:.6g},"
                        f"{r['fit_seconds']:.4g},{r['predict_seconds']:.4g}\n")


def plot(summary: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9.5, 5))
    n = len(summary)
    colours = plt.get_cmap("tab20").colors
    for i, row in enumerate(summary):
        offset = (i - (n - 1) / 2) * min(0.18, 2.4 / max(n, 1))
        gpar = "GPAR" in row["model"] or row["model"] == REFERENCE
        ax.errorbar(np.array(EPOCHS) + offset, row["smse_mean"], yerr=row["smse_se"],
                    label=row["model"], capsize=2.5, marker="o" if gpar else "s", ms=3.5,
                    ls="-" if gpar else "--", lw=1.2, color=colours[(2 * i) % 20 + (2 * i) // 20])
    ax.set_xticks(EPOCHS)
    ax.set_xlabel("checkpoint (epoch)")
    ax.set_ylabel("SMSE (mean ± s.e. over seeds)")
    ax.set_ylim(bottom=0)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    out = {"python": platform.python_version()}
    for pkg in ("torch", "botorch", "gpytorch", "numpy", "gpar-bo"):
        try:
            out[pkg] = version(pkg)
        except Exception:
            out[pkg] = "unknown"
    return out


def _git_commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except Exception:
        return "unknown"


def write_markdown(summary: list[dict], path: Path, meta: dict) -> None:
    lines = [
        "# MLP validation-error study (issue 5)",
        "",
        "SMSE of the predicted validation error rate per checkpoint (mean ± standard error "
        "over seeds; lower is better), mean log loss of the held-out error rates (nats, "
        "density of the error rate; lower is better) and mean fit time per model. "
        "Produced by `python -m benchmarks.mlp_study`.",
        "",
        format_table(summary),
        "## Setup",
        "",
        f"* Command: `{meta['command']}`",
        f"* Seeds: {meta['seeds']}",
        f"* Data: `{meta['data']}`, {meta['n_settings']} settings; per seed "
        f"{meta['n_train']} training / {meta['n_test']} test settings; training runs "
        f"reaching epochs {', '.join(map(str, EPOCHS))}: {' / '.join(map(str, meta['counts']))}",
        "* Models: " + "; ".join(f"{k}: {v}" for k, v in meta["models"].items()),
        f"* Date (UTC): {meta['date']}; wall time of this invocation "
        f"{meta['wall_minutes']:.1f} min ({meta['cached']} of {meta['n_results']} (model, seed) "
        f"results read from `mlp_study_records.jsonl`, written by earlier invocations of the "
        f"same command or a subset of its seeds/models); fitting and prediction time summed "
        f"over all results {meta['fit_minutes']:.0f} min",
        f"* Machine: `{meta['uname']}`, nproc {meta['nproc']}, torch threads "
        f"{meta['threads']} (machine shared with other jobs, so times are indicative)",
        f"* Code: git commit {meta['commit']} (plus the working tree at the time)",
        "* Versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()),
    ]
    if meta.get("reference"):
        lines.append(f"* Reference `gpar`: {meta['reference']}")
    if meta.get("failures"):
        lines.append("* Failures: " + "; ".join(meta["failures"]))
    path.write_text("\n".join(lines) + "\n")


# -------------------------------------------------------------------------- main
def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    p = parser or argparse.ArgumentParser(prog="python -m benchmarks.mlp_study", description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=None,
                   help="split seeds (default 0..9; --quick: 0 1)")
    p.add_argument("--models", nargs="+", default=None,
                   help=f"models to run (default all: {' '.join(MODELS)}; "
                        f"--quick: {' '.join(QUICK_MODELS)}); add {REFERENCE} for the "
                        "reference implementation")
    p.add_argument("--quick", action="store_true",
                   help="smoke test: 2 seeds, 6 models, 50 optimiser iterations, 1 "
                        "restart; results under --out (default benchmarks/results/quick)")
    p.add_argument("--out", type=Path, default=None,
                   help="output directory (default benchmarks/results)")
    p.add_argument("--data", type=Path, default=DATA, help="study CSV")
    p.add_argument("--n-train", type=int, default=N_TRAIN)
    p.add_argument("--n-test", type=int, default=N_TEST)
    p.add_argument("--reference-python", default=None,
                   help=f"python of a venv with gpar==0.3.2: adds '{REFERENCE}' to the "
                        "default models")
    p.add_argument("--maxiter", type=int, default=None,
                   help=f"L-BFGS-B iterations per GP fit, all models (default "
                        f"{DEFAULT_MAXITER}; --quick: {QUICK_MAXITER})")
    p.add_argument("--restarts", type=int, default=None,
                   help=f"random restarts of ICM and SLFM (default {DEFAULT_RESTARTS}; "
                        "--quick: 1)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--no-progress", action="store_true")
    return p


def canonical_command(args: argparse.Namespace) -> str:
    """The command line that reproduces ``args``."""
    parts = ["python", "-m", "benchmarks.mlp_study"]
    if args.quick:
        parts.append("--quick")
    if args.seeds is not None:
        parts += ["--seeds", *map(str, args.seeds)]
    if args.models is not None:
        parts += ["--models", *args.models]
    if args.out is not None:
        parts += ["--out", str(args.out)]
    if Path(args.data).resolve() != DATA:
        parts += ["--data", str(args.data)]
    for flag, value, default in (("--n-train", args.n_train, N_TRAIN),
                                 ("--n-test", args.n_test, N_TEST),
                                 ("--maxiter", args.maxiter,
                                  QUICK_MAXITER if args.quick else DEFAULT_MAXITER),
                                 ("--restarts", args.restarts, 1 if args.quick else DEFAULT_RESTARTS),
                                 ("--threads", args.threads, 1)):
        if value != default:
            parts += [flag, str(value)]
    if args.reference_python:
        parts += ["--reference-python", args.reference_python]
    return shlex.join(parts)


def run(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    from gpar_bo.problems.mnist import load_curves

    global MAXITER, RESTARTS
    torch.set_num_threads(args.threads)
    if args.maxiter is None:
        args.maxiter = QUICK_MAXITER if args.quick else DEFAULT_MAXITER
    if args.restarts is None:
        args.restarts = 1 if args.quick else DEFAULT_RESTARTS
    MAXITER, RESTARTS = args.maxiter, args.restarts
    seeds = args.seeds if args.seeds is not None else ([0, 1] if args.quick else list(range(10)))
    models = list(args.models or (QUICK_MODELS if args.quick else MODELS))
    if args.models is None and args.reference_python:
        models.append(REFERENCE)
    unknown = [m for m in models if m not in MODELS and m != REFERENCE]
    if unknown:
        raise SystemExit(f"unknown model(s) {unknown}; choose from {list(MODELS)} or {REFERENCE}")
    if REFERENCE in models and not args.reference_python:
        raise SystemExit(f"{REFERENCE} needs --reference-python")
    out = args.out or (RESULTS / "quick" if args.quick else RESULTS)
    out.mkdir(parents=True, exist_ok=True)
    X, Y = load_curves(args.data, EPOCHS)
    started, t0 = datetime.now(timezone.utc), time.perf_counter()
    records, failures = [], []
    # Finished (model, seed) results are cached in the output directory, so an
    # interrupted run resumes and models can be added later without refitting.
    config = {"n_train": args.n_train, "n_test": args.n_test, "maxiter": MAXITER,
              "restarts": RESTARTS, "data": Path(args.data).name}
    cache_path = out / "mlp_study_records.jsonl"
    cache = {}
    if cache_path.exists():
        for line in cache_path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:  # a line cut short by a kill
                continue
            if rec.get("config") == config:
                cache[(rec["model"], rec["seed"])] = rec
    bar = tqdm(total=len(seeds) * len(models), disable=args.no_progress, unit="fit",
               desc="mlp study", dynamic_ncols=True)
    counts = None
    for seed in seeds:
        split = make_split(X, Y, seed, args.n_train, args.n_test)
        counts = split.counts
        for name in models:
            bar.set_postfix_str(f"seed {seed} {name}")
            if (name, seed) in cache:
                rec = cache[(name, seed)]
                records.append({**rec, "smse": np.array(rec["smse"]),
                                "nlpd": np.array(rec["nlpd"])})
                bar.update(1)
                continue
            try:
                if name == REFERENCE:
                    with tempfile.TemporaryDirectory(prefix="gpar_ref_") as workdir:
                        res = run_reference(split, args.reference_python, Path(workdir))
                else:
                    res = run_model(name, split)
            except Exception as error:
                failures.append(f"{name} seed {seed}: {type(error).__name__}: {error}"[:300])
                bar.update(1)
                continue
            records.append({"model": name, "seed": seed, **res})
            with open(cache_path, "a") as handle:
                handle.write(json.dumps({"model": name, "seed": seed, "config": config,
                                         **{k: (v.tolist() if isinstance(v, np.ndarray) else v)
                                            for k, v in res.items()}}) + "\n")
            bar.update(1)
    bar.close()
    summary = summarize(records, models)
    table = format_table(summary)
    print(table)
    for failure in failures:
        print("FAILED:", failure)
    stem = "mlp_study"
    write_csv(records, summary, out, stem)
    command = canonical_command(args)
    meta = {
        "command": command, "seeds": seeds, "data": os.path.relpath(args.data, REPO),
        "n_settings": len(X), "n_train": args.n_train, "n_test": args.n_test,
        "counts": counts, "models": {m: (MODELS[m][1] if m in MODELS else
                                         "the authors' gpar 0.3.2 (GPAR-L-NL, imputation)")
                                     for m in models},
        "date": started.strftime("%Y-%m-%d %H:%M"),
        "wall_minutes": (time.perf_counter() - t0) / 60,
        "fit_minutes": sum(r["fit_seconds"] + r["predict_seconds"] for r in records) / 60,
        "n_results": len(records),
        "cached": sum(1 for r in records if (r["model"], r["seed"]) in cache),
        "uname": " ".join(platform.uname()), "nproc": os.cpu_count(),
        "threads": torch.get_num_threads(), "commit": _git_commit(),
        "versions": _versions(), "failures": failures,
        "reference": (f"gpar 0.3.2 from PyPI in a separate venv ({args.reference_python}), "
                      f"GPARRegressor(replace=False, impute=True, linear and nonlinear "
                      f"kernels), {REF_ITERS} L-BFGS-B iterations per conditional, "
                      f"{REF_SAMPLES} posterior samples; inputs normalised to the unit "
                      "cube with the training range, log errors"
                      if REFERENCE in models else None),
    }
    write_markdown(summary, out / f"{stem}.md", meta)
    plot(summary, out / f"{stem}.png",
         f"MNIST MLP validation error, {len(seeds)} seed(s), "
         f"{args.n_train} train ({'/'.join(map(str, counts))} reach each checkpoint)")
    (out / f"{stem}.json").write_text(json.dumps(
        {**meta, "summary": [{k: (v.tolist() if isinstance(v, np.ndarray) else v)
                              for k, v in row.items()} for row in summary]}, indent=1) + "\n")
    print(f"wrote {out / stem}.{{md,csv,png,json}} and {stem}_runs.csv")
    return 1 if not records else 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
