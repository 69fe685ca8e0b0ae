"""Learning-curve surrogates behind one interface, for the BO methods and the quality study.

Every surrogate models the *log* validation error (errors are in (0, 1)) of settings
``X`` in the unit cube, from training curves ``Y`` (``n x M`` errors at the problem's
checkpoints, NaN after each run's last report). It offers

* ``fit(X, Y)``: (re)build the model on the data; hyperparameters are refitted only
  when the number of runs has grown by ``refit_growth`` (20%) since the last fit,
  otherwise the previous hyperparameters are loaded into the rebuilt model (the
  data-dependent input/outcome transforms are recomputed). This keeps a BO run's
  per-suggestion cost at one model build for most suggestions.
* ``predict_final(X_test, Y_prefix)``: mean and variance (with observation noise)
  of the final checkpoint's log error, conditioning on each test run's prefix
  without refitting: the prefixes are added to the training data of a rebuilt model
  that keeps the fitted hyperparameters (all test prefixes together, as running
  trials are in a BO run).
* ``acquisition(incumbent, X_pending)``: ``qLogExpectedImprovement`` (128 Sobol QMC
  samples, fixed seed) of the *negative* final log error over ``d``-dim settings,
  with ``best_f = -log(incumbent)``. Running trials whose prefixes are in the
  training data are conditioned on them as pending points.

``SURROGATES`` maps the benchmark's model names to their classes;
``surrogate_quality`` measures their held-out final-value predictions.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence

import torch
from botorch.acquisition import AcquisitionFunction, FixedFeatureAcquisitionFunction
from botorch.acquisition.logei import qLogExpectedImprovement
from botorch.acquisition.objective import GenericMCObjective
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP, SingleTaskMultiFidelityGP
from botorch.models.latent_kronecker_gp import LatentKroneckerGP
from botorch.models.model import Model
from botorch.models.utils.gpytorch_modules import get_covar_module_with_dim_scaled_prior
from botorch.models.transforms.input import Normalize
from botorch.sampling.normal import SobolQMCNormalSampler
from gpytorch.constraints import GreaterThan
from gpytorch.likelihoods import GaussianLikelihood
from gpytorch.mlls import ExactMarginalLogLikelihood
from scipy.stats import spearmanr
from torch import Tensor

from benchmarks.bo.harness import TabularProblem
from gpar_bo import GPARMarginalLogLikelihood, GPARModel
from gpar_bo.refit import RefitSchedule

__all__ = [
    "SURROGATES",
    "AxDefault",
    "AxLearningCurve",
    "FreezeThaw",
    "GPAR",
    "LKGP",
    "Surrogate",
    "surrogate_quality",
]

NUM_MC_SAMPLES = 128
MC_SEED = 0  # fixed per acquisition call, so suggestions are deterministic


def _negative_final(samples: Tensor, X: Tensor | None = None) -> Tensor:
    """``sample x batch x q x m`` log errors -> negative log error of the last output."""
    return -samples[..., -1]


class Surrogate(ABC):
    """A curve model of the final checkpoint's log error (see the module docstring).

    Args:
        checkpoints: The problem's M checkpoint epochs (the last is final).
        refit_growth: Refit hyperparameters when the number of runs exceeds the
            number at the last fit by this fraction; otherwise reuse them.

    Attributes:
        min_completed: Runs that must reach the final checkpoint before ``fit``.
        model: The BoTorch model after ``fit``.
    """

    name: str = "surrogate"
    min_completed: int = 1

    def __init__(self, checkpoints: Sequence[int], refit_growth: float = 0.2) -> None:
        self.checkpoints = tuple(checkpoints)
        self.model: Model | None = None
        self._refit = RefitSchedule(self._seeded_fit, refit_growth)

    # ------------------------------------------------------------------ data
    def _check(self, X: Tensor, Y: Tensor) -> None:
        M = len(self.checkpoints)
        if X.dim() != 2 or Y.dim() != 2 or X.shape[0] != Y.shape[0] or Y.shape[1] != M:
            raise ValueError(
                f"Expected X n x d and Y n x {M}; got {tuple(X.shape)} and {tuple(Y.shape)}."
            )
        observed = ~Y.isnan()
        if (observed[:, 1:] & ~observed[:, :-1]).any():
            raise ValueError("Y must be closed downwards (NaN only after a run's last report).")
        if (Y[observed] <= 0).any():
            raise ValueError("Errors must be positive (they are modelled on the log scale).")

    def can_fit(self, Y: Tensor) -> bool:
        """Whether ``Y`` has enough runs that reached the final checkpoint."""
        return int((~Y[:, -1].isnan()).sum()) >= self.min_completed

    def fit(self, X: Tensor, Y: Tensor) -> None:
        """Build the model on ``X`` (``n x d``) and errors ``Y`` (``n x M``).

        Hyperparameters are refitted on the first call and whenever ``n`` has grown
        by ``refit_growth`` since the last refit; otherwise the last fitted ones are
        loaded (no optimisation).
        """
        self._check(X, Y)
        if not self.can_fit(Y):
            raise ValueError(
                f"{self.name} needs >= {self.min_completed} runs at the final checkpoint."
            )
        self.train_X, self.train_Y = X, Y
        model = self._build(X, Y.log())
        self._refit.fit_or_reload(model, X.shape[0])
        self.model = model

    def _seeded_fit(self, model: Model) -> None:
        # Fit retries draw from the global RNG; a fixed seed keeps runs reproducible.
        with torch.random.fork_rng():
            torch.manual_seed(0)
            self._fit(model)

    def _fit(self, model: Model) -> None:
        fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))

    @abstractmethod
    def _build(self, X: Tensor, logY: Tensor) -> Model:
        """A model on ``X`` (``n x d``) and log errors ``logY`` (``n x M``, NaN suffixes)."""

    @abstractmethod
    def _final_moments(self, model: Model, X: Tensor) -> tuple[Tensor, Tensor]:
        """``t``-vectors of mean and variance (with noise) of the final log error."""

    # ------------------------------------------------------------ prediction
    def predict_final(self, X_test: Tensor, Y_prefix: Tensor) -> tuple[Tensor, Tensor]:
        """Final-checkpoint log error of test runs given their observed prefixes.

        Args:
            X_test: ``t x d`` settings.
            Y_prefix: ``t x M`` errors, NaN after each run's prefix (rows may be
                all NaN).

        Returns:
            ``t``-vectors of the mean and variance (observation noise included).
        """
        if self.model is None:
            raise RuntimeError("Call fit before predict_final.")
        self._check(X_test, Y_prefix)
        has_data = ~Y_prefix[:, 0].isnan()
        model = self.model
        if has_data.any():
            model = self._build(
                torch.cat([self.train_X, X_test[has_data]]),
                torch.cat([self.train_Y, Y_prefix[has_data]]).log(),
            )
            self._refit.reload(model)
        with torch.no_grad():
            mean, variance = self._final_moments(model, X_test)
        return mean, variance

    # ----------------------------------------------------------- acquisition
    def acquisition(self, incumbent: float, X_pending: Tensor | None = None) -> AcquisitionFunction:
        """qLogEI of the negative final log error over ``b x q x d`` settings.

        Args:
            incumbent: The best final error so far (``best_f = -log(incumbent)``).
            X_pending: ``p x d`` settings of running trials.
        """
        if self.model is None:
            raise RuntimeError("Call fit before acquisition.")
        return qLogExpectedImprovement(
            self.model,
            best_f=-math.log(incumbent),
            sampler=SobolQMCNormalSampler(torch.Size([NUM_MC_SAMPLES]), seed=MC_SEED),
            objective=GenericMCObjective(_negative_final),
            X_pending=X_pending,
        )


class AxDefault(Surrogate):
    """Ax's default: ``SingleTaskGP`` (Normalize, Standardize) on final values of
    completed runs only; prefixes of running or test runs are ignored."""

    name = "ax_default"
    min_completed = 2

    def _build(self, X: Tensor, logY: Tensor) -> Model:
        done = ~logY[:, -1].isnan()
        return SingleTaskGP(
            X[done], logY[done, -1:], input_transform=Normalize(X.shape[-1])
        )

    def _final_moments(self, model: Model, X: Tensor) -> tuple[Tensor, Tensor]:
        posterior = model.posterior(X, observation_noise=True)
        return posterior.mean.squeeze(-1), posterior.variance.squeeze(-1)


class _StepModel(Surrogate):
    """A GP over ``(x, s)``, one row per observed checkpoint with ``s`` = epoch / last
    epoch in (0, 1]; the final checkpoint is ``s = 1``. The acquisition fixes
    ``s = 1`` with BoTorch's ``FixedFeatureAcquisitionFunction``."""

    def _rows(self, X: Tensor, logY: Tensor) -> tuple[Tensor, Tensor]:
        steps = torch.tensor(self.checkpoints, dtype=X.dtype) / self.checkpoints[-1]
        observed = ~logY.isnan()
        run, m = observed.nonzero(as_tuple=True)
        return torch.cat([X[run], steps[m].unsqueeze(-1)], -1), logY[run, m].unsqueeze(-1)

    @staticmethod
    def _final(X: Tensor) -> Tensor:
        return torch.cat([X, torch.ones_like(X[..., :1])], -1)

    def _final_moments(self, model: Model, X: Tensor) -> tuple[Tensor, Tensor]:
        posterior = model.posterior(self._final(X), observation_noise=True)
        return posterior.mean.squeeze(-1), posterior.variance.squeeze(-1)

    def acquisition(self, incumbent: float, X_pending: Tensor | None = None) -> AcquisitionFunction:
        d = self.train_X.shape[-1]
        inner = super().acquisition(
            incumbent, None if X_pending is None else self._final(X_pending)
        )
        return FixedFeatureAcquisitionFunction(inner, d=d + 1, columns=[d], values=[1.0])


class AxLearningCurve(_StepModel):
    """Ax's learning-curve default: ``SingleTaskGP`` over ``(x, step)`` on every
    observed row (``DataLoaderConfig(latest_rows_per_group=None)``)."""

    name = "ax_learning_curve"

    def _build(self, X: Tensor, logY: Tensor) -> Model:
        rows_X, rows_Y = self._rows(X, logY)
        return SingleTaskGP(rows_X, rows_Y, input_transform=Normalize(rows_X.shape[-1]))


class FreezeThaw(_StepModel):
    """BoTorch's freeze-thaw-style model: ``SingleTaskMultiFidelityGP`` with the
    scaled epoch as iteration fidelity (``ExponentialDecayKernel``), predicted at
    fidelity 1 (the multi-fidelity tutorial's projection to the target fidelity)."""

    name = "freeze_thaw"

    def _build(self, X: Tensor, logY: Tensor) -> Model:
        rows_X, rows_Y = self._rows(X, logY)
        # A noise floor of 1e-3 (standardised units, below the fitted noise on MNIST),
        # added when fits failed with NotPSDError. That came from the linear truncated
        # kernel used by mistake before (its matrices had negative eigenvalues); the
        # floor was kept so the committed runs stay comparable.
        likelihood = GaussianLikelihood(noise_constraint=GreaterThan(1e-3))
        # linear_truncated=False selects the ExponentialDecayKernel (freeze-thaw's
        # decay kernel); BoTorch's default is the LinearTruncatedFidelityKernel.
        return SingleTaskMultiFidelityGP(
            rows_X,
            rows_Y,
            iteration_fidelity=X.shape[-1],
            linear_truncated=False,
            likelihood=likelihood,
        )


class LKGP(Surrogate):
    """BoTorch's ``LatentKroneckerGP``: a Matern kernel on x times one on the
    checkpoint epoch, on the ``n x M`` grid with missing entries."""

    name = "lkgp"

    def _build(self, X: Tensor, logY: Tensor) -> Model:
        T = torch.tensor(self.checkpoints, dtype=X.dtype).unsqueeze(-1)
        # SingleTaskGP's dimension-scaled length-scale prior on x: LKGP's default
        # Matern kernel has none, and on MNIST its fitted length scales collapse
        # (1e-7), making the posterior sampler's Cholesky fail (NotPSDError).
        return LatentKroneckerGP(
            X,
            T,
            logY,
            covar_module_X=get_covar_module_with_dim_scaled_prior(ard_num_dims=X.shape[-1]),
            input_transform=Normalize(X.shape[-1]),
        )

    def _final_moments(self, model: Model, X: Tensor) -> tuple[Tensor, Tensor]:
        # In botorch 0.18.1 the posterior's mean and variance (unlike its samples)
        # are in standardised units, and it supports no observation noise: add the
        # likelihood's noise, then untransform.
        posterior = model.posterior(X, T=model.train_T[..., -1:, :])
        mean, variance = model.outcome_transform.untransform(
            posterior.mean, posterior.variance + model.likelihood.noise
        )
        return mean.reshape(-1), variance.reshape(-1)


class GPAR(Surrogate):
    """D-GPAR-NL-X (``GPARModel(kernel="NL-X", denoise=True)``) on log errors.

    Modelling ``log Y`` directly is the same model as ``outcome_transform=Log()``
    (each conditional standardises its own outcome), but its posterior moments are
    then those of the log error. A run in the training data (e.g. a running trial
    passed as pending) is conditioned on its own observed prefix by the model.
    """

    name = "gpar"
    min_completed = 2  # every output needs two observations

    def _build(self, X: Tensor, logY: Tensor) -> Model:
        return GPARModel(X, logY, kernel="NL-X", denoise=True)

    def _fit(self, model: Model) -> None:
        fit_gpytorch_mll(GPARMarginalLogLikelihood(model.likelihood, model))

    def _final_moments(self, model: Model, X: Tensor) -> tuple[Tensor, Tensor]:
        posterior = model.posterior(
            X, output_indices=[model.num_outputs - 1], observation_noise=True
        )
        return posterior.mean.squeeze(-1), posterior.variance.squeeze(-1)


SURROGATES: dict[str, type[Surrogate]] = {
    cls.name: cls for cls in (AxDefault, AxLearningCurve, LKGP, FreezeThaw, GPAR)
}


# ------------------------------------------------------------- surrogate quality
def _prefixes(Y: Tensor, lengths: Tensor) -> Tensor:
    """``Y`` with NaN after each row's first ``lengths[i]`` checkpoints."""
    keep = torch.arange(Y.shape[-1]) < lengths.unsqueeze(-1)
    return torch.where(keep, Y, float("nan"))


def _split(
    problem: TabularProblem, generator: torch.Generator, n_train: int, n_test: int
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """A random train/test split with random prefixes (see ``surrogate_quality``)."""
    M = len(problem.checkpoints)
    Y = problem.error[:, [c - 1 for c in problem.checkpoints]]
    perm = torch.randperm(problem.X.shape[0], generator=generator)
    train, test = perm[:n_train], perm[n_train : n_train + n_test]
    # A third of the training runs complete, the rest stopped after 1..M-1 checkpoints;
    # at least two complete (every model needs them).
    complete = torch.rand(n_train, generator=generator) < 1 / 3
    complete[:2] = True
    train_len = torch.where(
        complete, M, torch.randint(1, M, (n_train,), generator=generator)
    )
    test_len = torch.randint(1, M, (n_test,), generator=generator)
    return (
        problem.X[train],
        _prefixes(Y[train], train_len),
        problem.X[test],
        _prefixes(Y[test], test_len),
        Y[test, -1],
    )


def _metrics(mean: Tensor, variance: Tensor, final: Tensor) -> dict[str, float]:
    """Held-out metrics of Gaussian predictions of the log final error."""
    target = final.log()
    nll = 0.5 * (2 * math.pi * variance).log() + (target - mean) ** 2 / (2 * variance)
    covered = (target - mean).abs() <= 1.96 * variance.sqrt()
    return {
        "nll": float(nll.mean()),
        # The point prediction of the error is exp(mean), the predictive median.
        "rmse": float((mean.exp() - final).pow(2).mean().sqrt()),
        "coverage95": float(covered.double().mean()),
        "spearman": float(spearmanr(mean.numpy(), final.numpy()).statistic),
    }


def surrogate_quality(
    problem: TabularProblem, seeds: list[int], quick: bool = False
) -> list[dict]:
    """Final-value prediction quality of every surrogate on held-out partial curves.

    Per seed: a random train set of 150 runs (40 if ``quick``) with closed-downwards
    random prefixes (each run complete with probability 1/3, else observed for
    1..M-1 checkpoints; at least two complete) and a disjoint held-out set of 200
    runs (50) each observed for a random 1..M-1 checkpoints. Each surrogate is
    fitted on the train set and predicts the held-out final errors given their
    prefixes (``predict_final``, all prefixes added at once). Metrics, on the log
    error unless stated: Gaussian NLL, RMSE of the error (prediction ``exp(mean)``),
    coverage of the central 95% interval, and the Spearman rank correlation of the
    predicted with the true final errors. The ``last_observed`` row ranks by each
    run's last observed error (Spearman only). ``quick`` also uses one seed.

    Returns:
        Rows ``{"model", "prefix", metric, metric + "_se", ..., "seeds"}``: per model,
        ``prefix == "all"`` (averaged over seeds, standard errors across seeds) then
        one row per held-out prefix length (1..M-1).
    """
    n_train, n_test = (40, 50) if quick else (150, 200)
    seeds = seeds[:1] if quick else seeds
    M = len(problem.checkpoints)
    # (model, prefix) -> list over seeds of metric dicts
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    for seed in seeds:
        generator = torch.Generator().manual_seed(seed)
        X, Y, X_test, Y_test, final = _split(problem, generator, n_train, n_test)
        lengths = (~Y_test.isnan()).sum(-1)
        last = Y_test.gather(-1, (lengths - 1).unsqueeze(-1)).squeeze(-1)
        predictions = {"last_observed": None}
        for name, cls in SURROGATES.items():
            surrogate = cls(problem.checkpoints)
            surrogate.fit(X, Y)
            predictions[name] = surrogate.predict_final(X_test, Y_test)
        for name, prediction in predictions.items():
            for prefix in ["all", *range(1, M)]:
                rows = lengths >= 0 if prefix == "all" else lengths == prefix
                if rows.sum() < 3:
                    continue
                if prediction is None:
                    rho = spearmanr(last[rows].numpy(), final[rows].numpy()).statistic
                    metrics = {"spearman": float(rho)}
                else:
                    mean, variance = prediction
                    metrics = _metrics(mean[rows], variance[rows], final[rows])
                results.setdefault((name, str(prefix)), []).append(metrics)
    table = []
    for (name, prefix), per_seed in results.items():
        row: dict = {"model": name, "prefix": prefix}
        for metric in ("nll", "rmse", "coverage95", "spearman"):
            values = torch.tensor([m[metric] for m in per_seed if metric in m])
            row[metric] = float(values.mean()) if len(values) else None
            row[f"{metric}_se"] = (
                float(values.std() / math.sqrt(len(values))) if len(values) > 1 else None
            )
        row["seeds"] = len(per_seed)
        table.append(row)
    return table
