r"""The scale of freeze-thaw decisions: a Gittins index per epoch from GPAR's sample paths.

Only runs that reach the final checkpoint can improve the result, and continuing a run
is not a commitment to train it to the end: it will be judged again at its next
checkpoint. So a run's worth is its Gittins index: the charge per epoch at which
training it on, and stopping it as soon as the rest is not worth the charge, just breaks
even against the expected reduction of the incumbent's error by its final value. GPAR
gives joint sample paths of a run's remaining checkpoints conditioned on its observed
prefix (none for a new setting); :func:`stopping_index` finds the best stopping plan by
backward induction over those paths and the index by bisection. The costs look ahead to
the final checkpoint, so a new setting's cheap first epoch does not always win; cheap
screening scores well exactly when GPAR has learnt that early values predict final ones;
a paused run is resumed when its prefix makes the rest promising. This is the
freeze-thaw idea of Swersky et al. (2014) with the index rule of Gittins (as in
Weitzman's "Pandora's box" with multi-stage boxes) in place of entropy search. For a run
with one checkpoint left the index is its expected improvement per remaining epoch, i.e.
cost-aware expected improvement.

Design choices and why:

* **GPAR models log-error increments between checkpoints** (output 1 is the log error
  at the first checkpoint, output m > 1 the change of log error since checkpoint m - 1;
  the package's curve model, :func:`gpar_bo.curve_model.curve_model_options`), not the
  log errors themselves. The two carry the same information (a triangular
  bijection of each prefix), but each conditional's prior (a constant mean, fitted on
  the runs that reached that checkpoint) then says "the curve goes on changing as
  curves did" instead of "the curve ends where the finished runs ended". While few runs
  have finished, the final conditional is fitted on a handful of values and cannot learn
  its dependence on the prefix: on log errors it predicts every paused run to end near
  the finished runs, so mediocre runs look promising. On increments a run's final
  prediction starts from its own last value.
* **The reward is in error units** (the reduction of the incumbent's error), though the
  model is fitted on log errors: the search is judged by error, and a relative reward
  would overweight low errors, where the relative noise is largest.
* **The final checkpoint is Rao-Blackwellised**: along each sample path GPAR's final
  conditional is Gaussian, so the expected improvement given the path up to the
  second-last checkpoint is computed in closed form (a log-normal put). This removes
  the noisiest Monte Carlo step and conditions the last stopping decision on the whole
  prefix. The final conditional's own observation noise is left out of it: a gain that
  is only noise is not a better model, and chasing it spends epochs on finishing runs
  that merely tie the incumbent.
* **Earlier stopping decisions** use conditional expectations given the value at that
  checkpoint, estimated by averaging over the paths in the same quantile bin (a Markov
  approximation in the latest value; the paths share quasi-random normals across runs,
  so runs are compared on common random numbers).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from botorch.acquisition.acquisition import AcquisitionFunction
from botorch.utils.transforms import t_batch_mode_transform
from torch import Tensor

from gpar_bo.curve_model import from_increments
from gpar_bo.model import GPARModel
from gpar_bo.posterior import quasi_random_normals

__all__ = ["FinalPaths", "FreezeThawIndex", "expected_improvement_lognormal", "stopping_index"]


def expected_improvement_lognormal(mean: Tensor, std: Tensor, incumbent: float | Tensor) -> Tensor:
    r"""``E[(incumbent - exp(Z))^+]`` for ``Z ~ N(mean, std^2)`` (elementwise; a tensor
    ``incumbent`` broadcasts against ``mean``).

    The expected reduction of an error ``incumbent`` by an error whose log is
    Gaussian (the put option of Black and Scholes):
    ``incumbent * Phi(z) - exp(mean + std^2 / 2) * Phi(z - std)`` with
    ``z = (log(incumbent) - mean) / std``. The second term is computed as
    ``exp(mean + std^2 / 2 + log Phi(z - std))``, so a sample path whose log error runs
    far above the incumbent (a hyperparameter draw can make GPAR's chain diverge) pays
    nothing, where the product overflowed into ``inf * 0 = NaN``. Its exponent is
    ``inf - inf`` only where the term is 0 in the limit (an infinite mean or
    ``std``); a NaN ``mean`` stays NaN.
    """
    if not bool(torch.as_tensor(incumbent > 0).all()):
        raise ValueError(f"The incumbent must be a positive error; got {float(torch.as_tensor(incumbent).min())}.")
    # A float keeps math.log's rounding, as before per-path incumbents.
    log_incumbent = incumbent.log() if isinstance(incumbent, Tensor) else math.log(incumbent)
    std = std.clamp_min(1e-12)
    z = (log_incumbent - mean) / std
    exponent = mean + std**2 / 2 + torch.special.log_ndtr(z - std)
    above = torch.where(exponent.isnan() & ~mean.isnan(), 0.0, exponent.exp())
    return (incumbent * torch.special.ndtr(z) - above).clamp_min(0.0)


def stopping_index(
    reward: Tensor,
    paths: Tensor,
    observed: Tensor,
    epochs: Tensor,
    num_bins: int = 8,
    iterations: int = 20,
) -> Tensor:
    r"""The Gittins index per epoch of runs, from sample paths of their checkpoint values.

    The index of a run is the charge per epoch ``nu`` at which training it is just
    worth it: with ``nu`` charged per epoch and ``reward`` paid if it reaches the
    final checkpoint, the best stopping plan (continue after a checkpoint only while
    the expected rest is positive) breaks even. Plans are found by backward
    induction over the paths. After the second-last checkpoint the expected payoff
    of a path is ``reward`` itself; after earlier checkpoints ``j`` the expectation
    given the value there is estimated by averaging over the paths in the same
    quantile bin of ``paths[..., j]``. ``nu`` is found by bisection.

    Args:
        reward: ``S x N`` expected payoff of each path if its run is trained to the
            end, given the path up to the second-last checkpoint (e.g. the expected
            improvement; finite, >= 0).
        paths: ``S x N x M`` sampled values of the runs at the M checkpoints (the
            information at each checkpoint); entries at checkpoints a run has
            observed are ignored. ``S`` must be a multiple of ``num_bins``.
        observed: ``N`` numbers of checkpoints each run has observed (0 for a new
            setting, < M). Training to the next checkpoint is committed.
        epochs: ``M`` increasing epochs of the checkpoints.
        num_bins: Quantile bins for the conditional expectations.
        iterations: Bisection steps (relative precision ``2**-iterations``).

    Returns:
        ``N`` indices (payoff per epoch; 0 where no path pays).
    """
    S, N, M = paths.shape
    if reward.shape != (S, N) or observed.shape != (N,) or epochs.shape != (M,):
        raise ValueError(
            f"Expected reward S x N, observed N and epochs M for paths {tuple(paths.shape)}; "
            f"got {tuple(reward.shape)}, {tuple(observed.shape)} and {tuple(epochs.shape)}."
        )
    if S % num_bins:
        raise ValueError(f"The number of paths ({S}) must be a multiple of num_bins ({num_bins}).")
    if ((observed < 0) | (observed >= M)).any():
        raise ValueError(f"observed must be in [0, {M - 1}]; got {observed.tolist()}.")
    if not bool(torch.isfinite(reward).all()):  # a NaN would silently zero its run's index
        raise ValueError("reward must be finite; got NaN or infinity on some paths.")
    reward, paths = reward.detach().clamp_min(0.0), paths.detach()
    steps = torch.diff(epochs.to(paths), prepend=epochs.new_zeros(1).to(paths))
    first_step = steps[observed]  # N: the committed step
    # Bins only where some run decides after checkpoint j < M - 2.
    binned_levels = [j for j in range(M - 2) if bool((observed <= j).any())]
    orders = {j: paths[..., j].argsort(dim=0) for j in binned_levels}

    def binned_mean(values: Tensor, j: int) -> Tensor:
        """E[values | bin of y_j], per path (S x N)."""
        index = orders[j]
        means = values.gather(0, index).view(num_bins, S // num_bins, N).mean(1, keepdim=True)
        return torch.empty_like(values).scatter_(0, index, means.expand(-1, S // num_bins, -1).reshape(S, N))

    def value(nu: Tensor) -> Tensor:
        """Expected net value (N) of training each run on, with charge ``nu`` (N) per epoch."""
        V = reward  # after the second-last checkpoint, before paying its last step
        for j in range(M - 2, -1, -1):
            # After checkpoint j: stop, or train to j + 1 and go on optimally.
            expected = binned_mean(V, j) if j in orders else V
            go_on = expected - nu * steps[j + 1]
            V = torch.where((observed <= j).unsqueeze(0), go_on.clamp_min(0.0), V)
        # V is now the value after the committed next checkpoint, per path.
        return V.mean(0) - nu * first_step

    low = torch.zeros(N, dtype=paths.dtype, device=paths.device)
    high = reward.amax(0) / first_step  # value(high) <= 0
    for _ in range(iterations):
        middle = (low + high) / 2
        positive = value(middle) > 0
        low = torch.where(positive, middle, low)
        high = torch.where(positive, high, middle)
    return low


class FinalPaths(NamedTuple):
    """Sample paths of log errors and the final log error's Gaussian along each
    (see ``FreezeThawIndex.final_paths``)."""

    log_errors: Tensor  # S x b x M
    mean: Tensor  # S x b
    variance: Tensor  # S x b, with the final checkpoint's observation noise
    noise: Tensor  # S x 1: the final checkpoint's observation noise (log-error units) per path


class FreezeThawIndex(AcquisitionFunction):
    r"""The stopping index of runs under a GPAR model of log-error increments.

    ``index`` scores runs with an observed prefix (training inputs of the model) or
    none; as an acquisition function (``forward``) it scores new settings.

    Args:
        model: A fitted ``GPARModel`` whose modelled outputs are log-error
            increments at the checkpoints (a ``LogIncrements`` outcome transform, or
            data given as ``to_increments`` of log errors).
        epochs: ``M`` increasing epochs of the checkpoints.
        incumbent: The best final error so far (error units, > 0).
        num_samples: Sample paths per run (a multiple of ``num_bins``).
        num_bins: Quantile bins of ``stopping_index``.
        seed: Seed of the quasi-random normals (shared by all runs).
        latent_paths: Build the paths from the latent increments and add the final
            increment's observation noise once, to the final's Gaussian (a
            candidate). By default every sampled increment carries its own noise, so
            the path's noise adds up over the checkpoints left; if the noise is the
            measured level's, an observed increment's noise is the difference of its
            two ends' and these telescope, so the final's noise does not grow with the
            steps left (``benchmarks/results/calibration_diagnosis.md``, session 30).
            With D-GPAR's denoised inputs both give the same latent chain.
        pending: ``p x d`` settings of runs being trained to their final checkpoint
            now (their prefixes to the second-last checkpoint in the model's data),
            or None (a candidate; see ``pending_incumbents``). Each will set the
            incumbent before a run scored now can, so the reward of path ``i`` is
            measured against ``min(incumbent, their final errors on path i)``.
    """

    def __init__(
        self,
        model: GPARModel,
        epochs: Tensor,
        incumbent: float,
        num_samples: int = 128,
        num_bins: int = 8,
        seed: int = 0,
        latent_paths: bool = False,
        pending: Tensor | None = None,
    ) -> None:
        super().__init__(model=model)
        if pending is not None and (pending.dim() != 2 or pending.shape[-1] != model.train_X.shape[-1]):
            raise ValueError(f"pending must be p x {model.train_X.shape[-1]} settings; got {tuple(pending.shape)}.")
        self.register_buffer("epochs", epochs)
        self.incumbent = float(incumbent)
        self.num_samples = num_samples
        self.num_bins = num_bins
        self.seed = seed
        self.latent_paths = latent_paths
        self.pending = pending
        self._incumbents: Tensor | None = None

    def pending_incumbents(self) -> float | Tensor:
        r"""The incumbent of the sample paths: ``incumbent`` without ``pending`` runs,
        else ``S x 1``, the smaller of it and their final errors drawn along each path.

        Why: with several workers, the runs others are training to the end will finish
        before a run scored now can, and the run's reward is the reduction of the
        incumbent *they* leave, not of today's. This integrates their outcomes out, as
        asynchronous BO does with pending evaluations (Snoek et al. 2012; BoTorch's
        ``X_pending``), approximately: those draw the pending outcomes jointly with the
        scored points, while here they are drawn independently of the scored runs given
        the hyperparameters, and only the incumbent changes. A pending final is drawn
        from GPAR's predictive of the observed final error given the run's prefix (with
        its observation noise: the incumbent is an observed error), under the
        hyperparameter draw of the path's block, with normals of its own (seeded by
        ``seed``), not the paths' shared ones, so that its luck is independent of the
        scored runs'.
        """
        if self.pending is None or len(self.pending) == 0:
            return self.incumbent
        if self._incumbents is None:
            M = len(self.epochs)
            observed = torch.full((len(self.pending),), M - 1, dtype=torch.long, device=self.pending.device)
            with torch.no_grad():
                paths = self.final_paths(self.pending, observed)
            generator = torch.Generator().manual_seed(self.seed)
            normals = torch.randn(paths.mean.shape, generator=generator, dtype=paths.mean.dtype)
            finals = (paths.mean + paths.variance.sqrt() * normals.to(paths.mean)).exp()
            tiny = torch.finfo(finals.dtype).tiny  # a positive error, however far a draw ran
            self._incumbents = finals.amin(-1, keepdim=True).clamp(tiny, self.incumbent)
        return self._incumbents

    def final_paths(self, X: Tensor, observed: Tensor) -> FinalPaths:
        r"""Sample paths of runs' log errors and their final error's Gaussian along each.

        This is GPAR's predictive of the final log error given a run's observed prefix:
        the mixture over paths of ``N(mean, variance)`` (``variance`` includes the final
        conditional's observation noise ``noise``: it predicts the observed error).

        Args:
            X: ``b x d`` settings; a run with ``observed > 0`` checkpoints must be in
                the model's training data with at least that prefix.
            observed: ``b`` numbers of observed checkpoints (0 for a new setting).

        Returns:
            ``log_errors`` (``S x b x M``, the observed values on each prefix), and
            the final checkpoint's ``mean`` and ``variance`` (``S x b``) given the
            path up to the second-last checkpoint, and that ``noise`` along each path (``S x 1``).
        """
        model, M = self.model, len(self.epochs)
        posterior = model.modelled_posterior(X.unsqueeze(-2), observation_noise=not self.latent_paths)
        normals = quasi_random_normals(posterior, self.num_samples, self.seed)
        base = normals.view(self.num_samples, 1, 1, -1).expand(-1, len(X), 1, -1)
        samples, means, variances = posterior.rsample_with_conditionals(
            torch.Size([self.num_samples]), base
        )
        samples, means, variances = (t.squeeze(-2) for t in (samples, means, variances))  # S x b x M
        # Observed increments replace the samples, then the path of log errors.
        matches = (X.unsqueeze(-2) == model.train_X).all(-1)  # b x n
        lengths = torch.where(matches, model.observed.sum(-1).to(X), -1.0)
        rows = lengths.argmax(-1)  # the matching row with the longest prefix
        known = torch.arange(M, device=X.device) < observed.unsqueeze(-1)  # b x M
        has = model.observed[rows] & matches.any(-1, keepdim=True)
        if bool((known & ~has).any()):
            raise ValueError("A run's observed checkpoints are not in the model's data.")
        observed_values = model.modelled_Y[rows]
        increments = torch.where(known, observed_values.nan_to_num(), samples)
        log_errors = from_increments(increments)
        final_mean = (log_errors[..., -2] if M > 1 else 0.0) + means[..., -1]
        noise = posterior.output_noise(M - 1, self.num_samples).unsqueeze(-1)
        final_variance = variances[..., -1] + noise if self.latent_paths else variances[..., -1]
        return FinalPaths(log_errors, final_mean, final_variance, noise)

    def index(self, X: Tensor, observed: Tensor) -> Tensor:
        """``b`` indices of the runs at ``X`` (``b x d``) with ``observed`` checkpoints."""
        if len(X) == 0:
            return X.new_zeros(0)
        paths = self.final_paths(X, observed)
        # The final checkpoint given the path: Gaussian, without its own noise.
        final_std = (paths.variance - paths.noise).clamp_min(0.0).sqrt()
        reward = expected_improvement_lognormal(paths.mean, final_std, self.pending_incumbents())
        return stopping_index(
            reward, paths.log_errors, observed, self.epochs.to(X), num_bins=self.num_bins
        )

    @t_batch_mode_transform(expected_q=1)
    def forward(self, X: Tensor) -> Tensor:
        """``b`` indices of new settings ``X`` (``b x 1 x d``)."""
        with torch.no_grad():
            X = X.squeeze(-2)
            return self.index(X, torch.zeros(len(X), dtype=torch.long, device=X.device))
