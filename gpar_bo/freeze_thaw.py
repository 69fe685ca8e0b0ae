r"""Freeze-thaw scheduling with GPAR: give the next epochs to the run expected to pay most.

Runs are paused at every checkpoint. Whenever a worker is free, the policy compares,
on one scale, resuming each paused run to its next checkpoint with starting a new
setting at its first checkpoint, and takes the best action.

**The scale: a Gittins index per epoch.** Only runs that reach the final checkpoint can
improve the result, and continuing a run is not a commitment to train it to the end: it
will be judged again at its next checkpoint. So a run's worth is its Gittins index: the
charge per epoch at which training it on, and stopping it as soon as the rest is not
worth the charge, just breaks even against the improvement of its final value over the
incumbent. GPAR gives joint sample paths of a run's remaining checkpoints conditioned on
its observed prefix (none for a new setting); :func:`stopping_index` finds the best plan
by backward induction over those paths and the index by bisection. The costs look ahead
to the final checkpoint, so a new setting's cheap first epoch does not always win; cheap
screening of new settings scores well exactly when GPAR has learnt that early values
predict final ones; a paused run is resumed when its prefix makes the rest promising.
This is the freeze-thaw idea of Swersky et al. (2014) with the index rule of Gittins
(and Weitzman's "Pandora's box") in place of entropy search.

**Warm-up.** GPAR needs two runs at the final checkpoint. Until then the policy screens
``num_initial`` random settings at the first checkpoint and pushes the two best to the
end, one checkpoint at a time.

**Robustness.** A fraction ``model_free_fraction`` of the decisions, and every decision
whose model fit fails or which no sample path would improve, follow asynchronous
successive halving (promote a paused run in the top ``1/eta`` of its checkpoint, else
start a random setting). So a misspecified or failed model slows the search by at most
that fraction of decisions going elsewhere; it cannot stall it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from botorch.acquisition.acquisition import AcquisitionFunction, MCSamplerMixin
from botorch.fit import fit_gpytorch_mll
from botorch.optim import optimize_acqf, optimize_acqf_discrete
from botorch.sampling.normal import SobolQMCNormalSampler
from botorch.utils.transforms import t_batch_mode_transform
from torch import Tensor

from gpar_bo.model import GPARMarginalLogLikelihood, GPARModel

__all__ = [
    "CURVE_MODEL_OPTIONS",
    "Decision",
    "FreezeThawIndex",
    "FreezeThawPolicy",
    "stopping_index",
]

logger = logging.getLogger(__name__)

#: The GPAR variant for learning curves (on log errors): D-GPAR-NL-X, the most
#: accurate variant of the MLP validation-error study.
CURVE_MODEL_OPTIONS: Mapping[str, Any] = {"kernel": "NL-X", "denoise": True}


def stopping_index(
    paths: Tensor,
    observed: Tensor,
    epochs: Tensor,
    incumbent: float,
    num_bins: int = 8,
    iterations: int = 30,
) -> Tensor:
    r"""The Gittins index per epoch of runs, from sample paths of their checkpoint values.

    The index of a run is the charge per epoch ``nu`` at which training it is just
    worth it: with ``nu`` charged per epoch and the improvement of its final value
    over ``incumbent`` paid at the end, the best stopping plan (continue after a
    checkpoint only while the expected rest is positive) breaks even. Plans are
    found by backward induction over the paths, with the expectation at checkpoint
    ``j`` given the value there estimated by averaging over the paths in the same
    quantile bin of ``y_j`` (``num_bins`` bins); ``nu`` by bisection.

    Args:
        paths: ``S x N x M`` sampled values (lower is better) of N runs at the M
            checkpoints; entries at checkpoints a run has observed are ignored.
            ``S`` must be a multiple of ``num_bins``.
        observed: ``N`` numbers of checkpoints each run has observed (0 for a new
            setting, < M). Training to the next checkpoint is committed.
        epochs: ``M`` increasing epochs of the checkpoints.
        incumbent: The best final value so far.
        num_bins: Quantile bins for the conditional expectations.
        iterations: Bisection steps.

    Returns:
        ``N`` indices (improvement per epoch; 0 where no path improves).
    """
    S, N, M = paths.shape
    if S % num_bins:
        raise ValueError(f"The number of paths ({S}) must be a multiple of num_bins ({num_bins}).")
    paths = paths.detach()
    improvement = (incumbent - paths[..., -1]).clamp_min(0.0)  # S x N
    # order[:, :, j]: the paths sorted by their value at checkpoint j.
    order = paths.argsort(dim=0)
    steps = torch.diff(epochs, prepend=epochs.new_zeros(1))  # epochs from checkpoint j-1 to j
    first_step = steps[observed]  # N: the committed step

    def binned_mean(values: Tensor, j: int) -> Tensor:
        """E[values | bin of y_j], per path (S x N)."""
        index = order[..., j]
        sorted_values = values.gather(0, index)
        means = sorted_values.view(num_bins, S // num_bins, N).mean(1, keepdim=True)
        return torch.empty_like(values).scatter_(0, index, means.expand(-1, S // num_bins, -1).reshape(S, N))

    def value(nu: Tensor) -> Tensor:
        """Expected net value (N) of training each run on, with charge ``nu`` (N) per epoch."""
        V = improvement  # after the final checkpoint
        for j in range(M - 2, -1, -1):
            # After checkpoint j: stop, or train to j + 1 and go on optimally.
            go_on = binned_mean(V, j) - nu * steps[j + 1]
            V = torch.where((observed <= j).unsqueeze(0), go_on.clamp_min(0.0), V)
        # V is now the value after the committed next checkpoint, per path.
        return V.mean(0) - nu * first_step

    low = torch.zeros(N, dtype=paths.dtype, device=paths.device)
    high = improvement.amax(0) / first_step  # value(high) <= 0
    for _ in range(iterations):
        middle = (low + high) / 2
        positive = value(middle) > 0
        low = torch.where(positive, middle, low)
        high = torch.where(positive, high, middle)
    return low


class FreezeThawIndex(AcquisitionFunction, MCSamplerMixin):
    r"""The stopping index of new settings (nothing observed) as a BoTorch acquisition.

    The model's outputs are the checkpoints' values, lower is better (e.g. log
    validation errors). Samples include observation noise, since the incumbent is
    an observed value.

    Args:
        model: A fitted ``GPARModel`` over the checkpoints.
        epochs: ``M`` increasing epochs of the checkpoints.
        incumbent: The best observed final value.
        sampler: The MC sampler (default: 128 Sobol QMC samples).
    """

    def __init__(
        self,
        model: GPARModel,
        epochs: Tensor,
        incumbent: float,
        sampler: SobolQMCNormalSampler | None = None,
    ) -> None:
        AcquisitionFunction.__init__(self, model=model)
        MCSamplerMixin.__init__(self, sampler=sampler or SobolQMCNormalSampler(torch.Size([128])))
        self.register_buffer("epochs", epochs)
        self.incumbent = float(incumbent)

    def index(self, X: Tensor, observed: Tensor) -> Tensor:
        """``b`` indices of the runs at ``X`` (``b x 1 x d``) with ``observed`` checkpoints."""
        posterior = self.model.posterior(X, observation_noise=True)
        paths = self.get_posterior_samples(posterior).squeeze(-2)  # S x b x M
        return stopping_index(paths, observed, self.epochs.to(paths), self.incumbent)

    @t_batch_mode_transform(expected_q=1)
    def forward(self, X: Tensor) -> Tensor:
        """``b`` indices of new settings ``X`` (``b x 1 x d``)."""
        observed = torch.zeros(X.shape[0], dtype=torch.long, device=X.device)
        return self.index(X, observed)


@dataclass(frozen=True)
class Decision:
    """What a free worker does next.

    Attributes:
        action: "resume" a paused run or "start" a new setting.
        index: The paused run's row in ``X`` (resume) or the candidate's row
            (start; -1 when ``candidate`` holds an optimised setting).
        reason: "gpar", "warm-up" or "model-free" (with why, when a fallback).
        score: The winning stopping index (None unless decided by GPAR).
        candidate: The new setting (``d``), for "start".
    """

    action: Literal["resume", "start"]
    index: int
    reason: str
    score: float | None = None
    candidate: Tensor | None = None


class FreezeThawPolicy:
    r"""Freeze-thaw decisions from GPAR (see the module docstring).

    Args:
        epochs: Increasing epochs of the checkpoints at which runs report and pause.
        num_initial: Random settings screened at the first checkpoint before any
            run is pushed to the end.
        num_samples: GPAR sample paths per decision.
        model_free_fraction: Share of decisions made by successive halving, as a
            guard against a misspecified model.
        eta: Successive halving's reduction factor.
        refit_growth: Re-optimise GPAR's hyperparameters when the number of
            observed values grew by more than this fraction since the last fit;
            in between, reload them (decisions stay cheap as data accumulate).
        gpar_options: ``GPARModel`` options (default ``CURVE_MODEL_OPTIONS``).
        fit_kwargs: Arguments of ``fit_gpytorch_mll``.
        seed: Seed of the random settings, the model-free draws and the samplers.
    """

    def __init__(
        self,
        epochs: Sequence[int],
        *,
        num_initial: int = 4,
        num_samples: int = 128,
        model_free_fraction: float = 0.1,
        eta: float = 3.0,
        refit_growth: float = 0.2,
        gpar_options: Mapping[str, Any] | None = None,
        fit_kwargs: Mapping[str, Any] | None = None,
        seed: int = 0,
    ) -> None:
        epochs = list(epochs)
        if not epochs or any(b <= a for a, b in zip(epochs, epochs[1:])) or epochs[0] < 1:
            raise ValueError(f"epochs must increase from >= 1; got {epochs}.")
        if num_initial < 2:
            raise ValueError(f"num_initial must be >= 2 (two runs are pushed); got {num_initial}.")
        if not 0 <= model_free_fraction <= 1:
            raise ValueError(f"model_free_fraction must be in [0, 1]; got {model_free_fraction}.")
        self.epochs = torch.tensor(epochs, dtype=torch.double)
        self.num_initial = num_initial
        self.num_samples = num_samples
        self.model_free_fraction = model_free_fraction
        self.eta = eta
        self.refit_growth = refit_growth
        self.gpar_options = dict(CURVE_MODEL_OPTIONS if gpar_options is None else gpar_options)
        self.fit_kwargs = dict(fit_kwargs or {})
        self.seed = seed
        self.generator = torch.Generator().manual_seed(seed)
        self.decisions = 0
        self._fitted: tuple[int, dict[str, Tensor]] | None = None  # (values, hyperparameters)

    # ------------------------------------------------------------------ decide
    def decide(
        self,
        X: Tensor,
        Y: Tensor,
        paused: Tensor,
        candidates: Tensor | None = None,
        bounds: Tensor | None = None,
    ) -> Decision:
        r"""The next action of a free worker.

        Args:
            X: ``n x d`` settings of every run started so far (running, paused,
                finished).
            Y: ``n x M`` their values at the checkpoints (lower is better, e.g.
                validation errors), NaN after each run's observed prefix (a row
                of NaN for a run that has not reported yet).
            paused: ``n`` bool, the runs that may be resumed.
            candidates: ``c x d`` new settings to choose from (e.g. a table's
                remaining settings), or None to optimise over ``bounds``.
            bounds: ``2 x d`` bounds of the search space (when ``candidates`` is None).

        Returns:
            The decision.
        """
        self._check(X, Y, paused, candidates, bounds)
        self.decisions += 1
        observed = (~Y.isnan()).sum(-1)
        M = len(self.epochs)
        finished = observed == M
        if int(finished.sum()) < 2:
            return self._warm_up(X, Y, paused, observed, candidates, bounds)
        if float(torch.rand(1, generator=self.generator)) < self.model_free_fraction:
            return self._successive_halving(Y, paused, observed, candidates, bounds, "model-free")
        try:
            reported = observed > 0
            model = self._model(X[reported], Y[reported].log())
        except Exception as error:  # a failed fit must not stall the search
            logger.warning("GPAR fit failed (%s); deciding by successive halving.", error)
            return self._successive_halving(
                Y, paused, observed, candidates, bounds, f"model-free: fit failed ({error})"
            )
        incumbent = float(Y[finished, -1].min().log())
        sampler = SobolQMCNormalSampler(torch.Size([self.num_samples]), seed=self.seed + self.decisions)
        acqf = FreezeThawIndex(model, self.epochs.to(X), incumbent, sampler)
        with torch.no_grad():
            resumable = paused.nonzero().squeeze(-1)
            resume_scores = acqf.index(X[resumable].unsqueeze(-2), observed[resumable])
        new, new_score = self._best_new(acqf, candidates, bounds)
        best_resume = float(resume_scores.max()) if len(resumable) else -math.inf
        if max(best_resume, new_score) <= 0:
            return self._successive_halving(
                Y, paused, observed, candidates, bounds, "model-free: no path improves"
            )
        if best_resume >= new_score:
            row = int(resumable[resume_scores.argmax()])
            return Decision("resume", row, "gpar", best_resume)
        index, setting = new
        return Decision("start", index, "gpar", new_score, setting)

    # ----------------------------------------------------------------- helpers
    def _check(
        self, X: Tensor, Y: Tensor, paused: Tensor, candidates: Tensor | None, bounds: Tensor | None
    ) -> None:
        M = len(self.epochs)
        if X.dim() != 2 or Y.shape != (X.shape[0], M) or paused.shape != (X.shape[0],):
            raise ValueError(
                f"Expected X n x d, Y n x {M} and paused n; got {tuple(X.shape)}, "
                f"{tuple(Y.shape)} and {tuple(paused.shape)}."
            )
        observed = ~Y.isnan()
        if (observed[:, 1:] & ~observed[:, :-1]).any():
            raise ValueError("Each run's values must be a prefix of its checkpoints (NaN after it).")
        if (paused & ~observed[:, 0]).any():
            raise ValueError("A paused run must have reported at least one checkpoint.")
        if not (torch.isfinite(X).all() and (Y[observed] > 0).all() and torch.isfinite(Y[observed]).all()):
            raise ValueError("Settings must be finite and observed values finite and positive.")
        if (paused & (observed.sum(-1) == M)).any():
            raise ValueError("A paused run must not have reached the final checkpoint.")
        if candidates is None and bounds is None:
            raise ValueError("Give candidates (new settings) or bounds of the search space.")
        if candidates is not None and (candidates.dim() != 2 or candidates.shape[-1] != X.shape[-1]):
            raise ValueError(f"candidates must be c x {X.shape[-1]}; got {tuple(candidates.shape)}.")

    def _random_new(self, candidates: Tensor | None, bounds: Tensor | None, reason: str) -> Decision:
        if candidates is not None:
            if len(candidates) == 0:
                raise ValueError("No candidate settings left to start.")
            row = int(torch.randint(len(candidates), (1,), generator=self.generator))
            return Decision("start", row, reason, candidate=candidates[row])
        unit = torch.rand(bounds.shape[-1], generator=self.generator, dtype=bounds.dtype)
        return Decision("start", -1, reason, candidate=bounds[0] + unit * (bounds[1] - bounds[0]))

    def _warm_up(
        self, X: Tensor, Y: Tensor, paused: Tensor, observed: Tensor,
        candidates: Tensor | None, bounds: Tensor | None,
    ) -> Decision:
        """Screen ``num_initial`` settings, then push the two best to the final checkpoint."""
        out_of_candidates = candidates is not None and len(candidates) == 0
        if X.shape[0] < self.num_initial and not out_of_candidates:
            return self._random_new(candidates, bounds, "warm-up")
        # Runs that were resumed are being pushed (or were): paused past the first
        # checkpoint, or running with data (every run pauses when it reports). Push two.
        running = ~paused & (observed > 0) & (observed < len(self.epochs))
        pushed = (observed > 1) | running
        waiting = paused & pushed
        if waiting.any():
            row = int(torch.where(waiting, observed, -1).argmax())
            return Decision("resume", row, "warm-up")
        if int(pushed.sum()) < 2 and paused.any():
            last = Y.gather(-1, (observed - 1).clamp_min(0).unsqueeze(-1)).squeeze(-1)
            row = int(torch.where(paused, last, math.inf).argmin())
            return Decision("resume", row, "warm-up")
        if out_of_candidates:
            return self._successive_halving(Y, paused, observed, candidates, bounds, "warm-up")
        return self._random_new(candidates, bounds, "warm-up")

    def _successive_halving(
        self, Y: Tensor, paused: Tensor, observed: Tensor,
        candidates: Tensor | None, bounds: Tensor | None, reason: str,
    ) -> Decision:
        """Promote the deepest paused run in the top ``1/eta`` of its checkpoint, else start one."""
        for k in range(len(self.epochs) - 1, 0, -1):
            at_k = Y[observed >= k, k - 1]  # every value recorded at checkpoint k
            promotable = paused & (observed == k)
            if not promotable.any():
                continue
            values = Y[:, k - 1]
            better = (at_k.unsqueeze(0) < values.unsqueeze(-1)).sum(-1)  # n
            top = promotable & (better < math.ceil(len(at_k) / self.eta))
            if top.any():
                row = int(torch.where(top, values, math.inf).argmin())
                return Decision("resume", row, reason)
        if candidates is not None and len(candidates) == 0:
            if not paused.any():
                raise ValueError("Nothing to resume and no candidate settings left.")
            row = int(torch.where(paused, observed, -1).argmax())
            return Decision("resume", row, reason)
        return self._random_new(candidates, bounds, reason)

    def _model(self, X: Tensor, logY: Tensor) -> GPARModel:
        """GPAR on the log values; hyperparameters refitted when the data grew enough."""
        model = GPARModel(X, logY, output_names=self.epochs.long().tolist(), **self.gpar_options)
        values = int((~logY.isnan()).sum())
        if self._fitted is None or values > (1 + self.refit_growth) * self._fitted[0]:
            with torch.random.fork_rng():  # fit retries draw from the global RNG
                torch.manual_seed(self.seed)
                fit_gpytorch_mll(GPARMarginalLogLikelihood(model.likelihood, model), **self.fit_kwargs)
            self._fitted = (values, model.hyperparameters())
        else:
            model.load_state_dict(self._fitted[1], strict=False)
        return model.eval()

    def _best_new(
        self, acqf: FreezeThawIndex, candidates: Tensor | None, bounds: Tensor | None
    ) -> tuple[tuple[int, Tensor], float]:
        """The new setting with the highest index, and its index."""
        if candidates is not None:
            if len(candidates) == 0:
                return (-1, torch.empty(0)), -math.inf
            with torch.no_grad():
                best, value = optimize_acqf_discrete(acqf, q=1, choices=candidates, max_batch_size=256)
            row = int((candidates == best).all(-1).nonzero()[0])
            return (row, candidates[row]), float(value)
        setting, value = optimize_acqf(
            acqf, bounds=bounds, q=1, num_restarts=4, raw_samples=256,
            options={"seed": self.seed + self.decisions},
        )
        return (-1, setting.squeeze(0).detach()), float(value)
