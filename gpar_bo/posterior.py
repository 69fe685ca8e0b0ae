"""GPAR's posterior: sequential, reparameterised Monte Carlo sampling.

GPAR's joint predictive over the outputs is not Gaussian: output 1 is a GP in
x, and output m is a GP in x joined with outputs 1..m-1. Samples are drawn
sequentially. Output 1 is sampled jointly over the q points; each sample path
then enters conditional 2 as an input, and so on. Every output of every point
consumes one standard normal, and an output reported as the other kind of value
than it feeds forward (see ``GPARPosterior``) one more for its observation noise,
so ``base_sample_shape`` is ``batch x q x (M + extra)``; BoTorch's quasi-Monte Carlo
samplers, fixed base samples and the reparameterisation gradients of acquisition
optimisation all work unchanged.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from functools import cached_property

import torch
from botorch.posteriors import Posterior
from botorch.sampling.get_sampler import GetSampler
from botorch.sampling.normal import IIDNormalSampler, SobolQMCNormalSampler
from botorch.utils.sampling import draw_sobol_normal_samples
from linear_operator.utils.cholesky import psd_safe_cholesky
from linear_operator.utils.warnings import NumericalWarning
from torch import Tensor
from torch.quasirandom import SobolEngine

from gpar_bo.prediction import ConditionalPredictor, Features, StackedPredictor
from gpar_bo.prepared import PreparedConditionals

#: Sample paths behind ``GPARPosterior.mean`` and ``.variance``.
NUM_MOMENT_SAMPLES = 256

#: Per output, a block's features and the Cholesky factor of the covariance its
#: draw came from (latent, or noisy where only the noisy value is drawn): what
#: conditions other points on the block's draw.
_Factors = list[tuple[Features, Tensor]]
#: The most points outside a shared block drawn with the chains' predictors stacked
#: (see ``_stacks``).
STACKED_MAX_BATCH = 64
#: The most samples times points drawn jointly (more than one point per t-batch) with the
#: chains stacked (see ``_stacks``).
STACKED_MAX_JOINT = 8192
#: The slot of ``SharedBlockCache`` that keeps the stacked chains' shared block.
STACKED_SLOT = -1
#: A drawn shared block and its factors.
_SharedDraw = tuple["_Block", _Factors]


class MomentsPosterior(Posterior):
    """A posterior whose ``mean`` and ``variance`` are the cached pair ``_moments``.

    Subclasses define ``_moments``: GPAR's moments are Monte Carlo estimates over fixed
    sample paths, computed once per posterior (see :class:`GPARPosterior`).
    """

    _moments: tuple[Tensor, Tensor]

    @property
    def mean(self) -> Tensor:
        """``batch_shape x q x m`` posterior mean."""
        return self._moments[0]

    @property
    def variance(self) -> Tensor:
        """``batch_shape x q x m`` posterior variance."""
        return self._moments[1]


class GPARPosterior(MomentsPosterior):
    r"""Posterior of a ``GPARModel`` at ``batch x q`` points.

    The value fed from output m into later conditionals is the noisy
    observation ``y_m`` (GPAR) or the latent ``f_m`` (D-GPAR), as in training.
    The reported value is ``y_m`` with ``observation_noise`` and ``f_m``
    without. Where an output is both reported and fed forward as different
    kinds (GPAR without observation noise, D-GPAR with it; ``noise_outputs``),
    its latent is drawn over the points and its noisy value is the latent plus
    independent noise, driven by a second standard normal per point (the last
    ``len(noise_outputs)`` entries of ``base_sample_shape``). Driving both by one
    normal would keep every output's marginal but make the noisy value a
    function of the latent: it would overstate the reported values'
    correlation with later outputs, and the joint over the points would depend
    on their order. The joint draw is exact. Each output draws only the kinds
    it needs (``kinds``): e.g. D-GPAR without observation noise, as BoTorch's
    acquisition functions ask for it, factorises no noisy covariance.

    Points with an observed prefix (training configurations, or data added with
    ``condition_on_observations``) feed their observed values forward instead
    of samples, so their later outputs are conditioned on what they have shown.

    With hyperparameter draws (``GPARModel(..., hyperparameter_draws=K)``) the
    posterior is the mixture over the draws: the samples are split into ``K``
    contiguous blocks, each drawn with one draw's chain of predictors
    (``prepared.chains``).

    Without hyperparameter draws, ``mean`` and ``variance`` are exact for output 1
    and for outputs whose earlier outputs are all observed. Otherwise they are Rao-Blackwellised
    Monte Carlo estimates over ``NUM_MOMENT_SAMPLES`` (256) fixed quasi-random
    sample paths per point (points are treated separately, so the cost is
    linear in q): the average of the conditional means, and the average
    conditional variance plus the variance of the conditional means. They are
    deterministic and differentiable in X. ``moments_of`` gives the plain Monte
    Carlo moments of mapped samples (an outcome untransform, a scalarisation)
    over the same paths.
    """

    def __init__(
        self,
        prepared: PreparedConditionals,
        X: Tensor,
        output_indices: Sequence[int],
        observation_noise: bool = False,
    ) -> None:
        r"""
        Args:
            prepared: The model's conditionals, prepared for prediction (at
                least up to the largest of ``output_indices``).
            X: A ``batch_shape x q x d`` tensor of inputs.
            output_indices: The outputs to report, in order.
            observation_noise: Report noisy outputs instead of latent ones.
        """
        self.prepared = prepared
        self.X = X
        self.num_sampled = max(output_indices) + 1
        self.predictors = list(prepared.predictors[: self.num_sampled])
        self.chains = [list(chain[: self.num_sampled]) for chain in prepared.chains]
        self.stacked = None if prepared.stacked is None else list(prepared.stacked[: self.num_sampled])
        self.windows = [list(w) for w in prepared.windows[: self.num_sampled]]
        prefix_values, prefix_mask = prepared.observed_prefix(X)
        self.prefix_mask = prefix_mask[..., : self.num_sampled]
        self.prefix_values = torch.where(
            self.prefix_mask, prefix_values[..., : self.num_sampled], 0.0
        )
        self.observation_noise = observation_noise
        self.denoise = prepared.denoise
        self.output_indices = list(output_indices)
        # The kinds of value each output's draw must give: the kind fed forward (every
        # output but the last) and the kind reported (the outputs asked for). Only these
        # are drawn; with both, the noisy value is the latent plus independent noise.
        fed = "latent" if self.denoise else "noisy"
        shown = "noisy" if observation_noise else "latent"
        self.kinds = [
            frozenset([fed] * (m < self.num_sampled - 1) + [shown] * (m in self.output_indices))
            for m in range(self.num_sampled)
        ]
        self.noise_outputs = [m for m, kinds in enumerate(self.kinds) if len(kinds) == 2]
        # Output -> the column of its noise normals; and the kinds as a tensor (cache keys).
        self._noise_columns = {m: self.num_sampled + j for j, m in enumerate(self.noise_outputs)}
        self._kinds_key = torch.tensor([("latent" in k) + 2 * ("noisy" in k) for k in self.kinds])
        self._pointwise_cache: dict[tuple[int, ...], tuple[Tensor, Tensor, Tensor]] = {}

    @property
    def device(self) -> torch.device:
        return self.X.device

    @property
    def dtype(self) -> torch.dtype:
        return self.X.dtype

    @property
    def batch_range(self) -> tuple[int, int]:
        return (0, -2)

    @property
    def base_sample_shape(self) -> torch.Size:
        """``batch_shape x q x (M + len(noise_outputs))``: one standard normal per
        output per point, then one per point for each output in ``noise_outputs``
        (its observation noise, in that order)."""
        return self.X.shape[:-1] + torch.Size([self.num_sampled + len(self.noise_outputs)])

    def _extended_shape(self, sample_shape: torch.Size = torch.Size()) -> torch.Size:
        return sample_shape + self.X.shape[:-1] + torch.Size([len(self.output_indices)])

    def rsample(self, sample_shape: torch.Size | None = None) -> Tensor:
        sample_shape = torch.Size([1]) if sample_shape is None else sample_shape
        base_samples = torch.randn(
            sample_shape + self.base_sample_shape, dtype=self.dtype, device=self.device
        )
        return self.rsample_from_base_samples(sample_shape, base_samples)

    def rsample_from_base_samples(
        self, sample_shape: torch.Size, base_samples: Tensor
    ) -> Tensor:
        r"""Sample sequentially, driven by the given standard normals.

        Args:
            sample_shape: The sample shape (e.g. ``torch.Size([128])``).
            base_samples: A ``sample_shape x batch_shape x q x W`` tensor of
                standard normals (``W = base_sample_shape[-1]``: ``M`` and the
                noise outputs'); batch dimensions may be of size 1
                (broadcast over t-batches, as BoTorch's samplers do).

        Returns:
            A ``sample_shape x batch_shape x q x m`` tensor of samples.
        """
        if base_samples.shape[: len(sample_shape)] != sample_shape:
            raise RuntimeError("`sample_shape` disagrees with `base_samples`.")
        reported, _, _ = self._propagate(sample_shape, base_samples)
        return reported[..., self.output_indices]

    def rsample_with_conditionals(
        self, sample_shape: torch.Size, base_samples: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        r"""Sample paths and, along each path, every output's conditional moments.

        For Rao-Blackwellised estimates: given a path's earlier outputs, output m
        is Gaussian with the returned mean and variance (which includes the
        observation noise when the posterior reports noisy outputs).

        Args:
            sample_shape: The sample shape.
            base_samples: ``sample_shape x batch_shape x q x W`` standard normals,
                as for ``rsample_from_base_samples``.

        Returns:
            Samples, conditional means and conditional variances, each
            ``sample_shape x batch_shape x q x M`` over all sampled outputs
            (``output_indices`` and ``sample_transform`` are not applied; the
            samples of outputs not in ``output_indices`` are the values they
            feed forward, and their moments those of the reported kind).
        """
        if base_samples.shape[: len(sample_shape)] != sample_shape:
            raise RuntimeError("`sample_shape` disagrees with `base_samples`.")
        return self._propagate(sample_shape, base_samples)

    def output_noise(self, m: int, num_samples: int) -> Tensor:
        """Output ``m``'s observation noise along each of ``num_samples`` sample paths
        (the noise of the chain of predictors, i.e. the hyperparameter draw, that
        draws each path): a ``num_samples`` tensor."""
        blocks = torch.arange(num_samples).tensor_split(len(self.chains))  # as _propagate's
        return torch.cat([
            chain[m].noise.reshape(1).expand(len(block)) for chain, block in zip(self.chains, blocks)
        ])

    def _shared_points(self, base_samples: Tensor, sample_ndim: int) -> Tensor:
        """Which points every t-batch shares, with shared normals.

        qLogNEI evaluates ``cat(X_baseline, X)`` for every candidate ``X``, and
        ``X_pending`` is appended as ``cat(X, X_pending)``. Such points' sample
        paths do not depend on the candidate: they are drawn once, and each
        candidate is sampled conditionally on them (the GPAR analogue of
        BoTorch's ``cache_root``), instead of factorising a ``(n + q) x (n + q)``
        covariance per sample and candidate.

        Args:
            base_samples: ``sample_shape x batch_shape x q x W`` standard normals.
            sample_ndim: The number of sample dimensions.

        Returns:
            A ``q`` bool tensor, True at the points shared by all t-batches (all
            False unless the normals are broadcast over the t-batches, and in
            float32: conditioning on a shared block goes through the inverse of
            its posterior covariance, whose float32 round-off, relative to the
            prior's scale, swamps the small posterior variances at observed points).
        """
        q = self.X.shape[-2]
        batch_dims = range(sample_ndim, base_samples.dim() - 2)
        # BoTorch's samplers pass one draw expanded over the t-batches (stride 0).
        broadcast = all(
            base_samples.shape[i] == 1 or base_samples.stride(i) == 0 for i in batch_dims
        )
        if self.X.dim() < 3 or not broadcast or self.X.dtype != torch.float64:
            return torch.zeros(q, dtype=torch.bool, device=self.device)
        flat = self.X.detach().reshape(-1, q, self.X.shape[-1])
        return (flat == flat[:1]).all(-1).all(0)

    def _propagate(
        self, sample_shape: torch.Size, base_samples: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Run the chain of conditionals on standard normals.

        The points are split into a block ``B`` shared by all t-batches (see
        ``_shared_points``; often empty) and the rest ``C``. For each output,
        ``B`` is sampled jointly, then ``C`` jointly within each t-batch and
        conditionally on ``B``'s draw, which together is the exact joint draw
        ``mean + chol(K) eps`` over the points reordered as ``(B, C)`` (``K``:
        the latent covariance, or the noisy one where only noisy values are
        drawn; a noise output's noisy value adds its noise normals' draw).
        Shared points that do not lead (``X_pending`` trails) are moved to the
        front, with their normals, and the results moved back. The joint is
        permutation-equivariant, so this is still an exact, deterministic and
        differentiable draw; only which normal drives which point changes.
        When ``C`` varies over t-batches, ``B`` is a constant of the candidates
        (no gradient flows to it) and is reused across calls (the prepared
        conditionals' ``shared_draws``).

        Args:
            sample_shape: The sample shape ``S``.
            base_samples: ``S x batch_shape x q x W`` standard normals (batch
                dimensions may be 1).

        Returns:
            The reported samples and, per output, the conditional mean and
            variance of the reported value given the sampled earlier outputs
            (all ``S x batch_shape x q x M``).
        """
        batch_shape, (q, d) = self.X.shape[:-2], self.X.shape[-2:]
        s, b, M = sample_shape.numel(), batch_shape.numel(), self.num_sampled
        width = self.base_sample_shape[-1]
        if base_samples.shape[-1] != width:
            raise ValueError(
                f"base_samples must end in {width} normals per point ({M} outputs and "
                f"{width - M} observation noises, see base_sample_shape); got {base_samples.shape[-1]}."
            )
        is_shared = self._shared_points(base_samples, len(sample_shape))
        k = int(is_shared.sum())
        X, mask, values = self.X, self.prefix_mask, self.prefix_values
        # Shared points first, the others after them, each in their given order.
        order = torch.argsort((~is_shared).to(torch.uint8), stable=True)
        reorder = not bool(is_shared[:k].all())  # not already leading
        if reorder:
            # Permute the normals before they are expanded over the t-batches.
            X, mask, values, base_samples = (
                t.index_select(-2, order) for t in (X, mask, values, base_samples)
            )
        eps = base_samples.expand(sample_shape + self.base_sample_shape).reshape(s, b, q, width)
        X, mask, values = X.reshape(b, q, d), mask.reshape(b, q, M), values.reshape(b, q, M)
        flags = {"denoise": self.denoise, "observation_noise": self.observation_noise,
                 "kinds": self.kinds, "noise_columns": self._noise_columns}
        if s < len(self.chains):
            warnings.warn(
                f"{s} samples of a posterior mixed over {len(self.chains)} hyperparameter draws: "
                f"only the first {s} draws are used; ask for a multiple of {len(self.chains)}.",
                RuntimeWarning,
                stacklevel=3,
            )
        chains, slots = self.chains, range(len(self.chains))
        if self._stacks(s, b, q, k):  # every chain at once, their predictors stacked: the same draw
            chains = [[p.for_samples(s) if isinstance(p, StackedPredictor) else p for p in self.stacked]]
            slots = [STACKED_SLOT]
        drawn = []  # per chain of predictors: its samples' results, s_c x b x q x M
        shared_moments: dict = {}  # see _sample_rest
        # Contiguous blocks of the samples, as equal as they can be (the first s % K one
        # larger), one per chain: a block of a Sobol sequence is itself well spread.
        for c, e in enumerate(eps.tensor_split(len(chains))):
            if not len(e):
                continue
            shared = _Block(X[0, :k], mask[0, :k], values[0, :k], e[:, 0, :k], **flags)
            rest = _Block(X[:, k:], mask[:, k:], values[:, k:], e[:, :, k:], **flags)
            factors: _Factors = []
            if k:
                shared, factors = self._shared_chain(shared, _follows_shared(b, q, k), chains[c], slots[c])
            if q > k:
                self._sample_rest(rest, shared, factors, chains[c], shared_moments)
            parts = [shared.stacked(len(e), b)] if k else []
            parts += [rest.stacked(len(e), b)] if q > k else []
            drawn.append([torch.cat([part[i] for part in parts], dim=-2) for i in range(3)])
        out_shape = sample_shape + batch_shape + torch.Size([q, M])
        results = (torch.cat([chain[i] for chain in drawn]) for i in range(3))
        if reorder:  # back to the caller's order of points
            inverse = torch.argsort(order)
            results = (r.index_select(-2, inverse) for r in results)
        return tuple(r.reshape(out_shape) for r in results)

    def _stacks(self, s: int, b: int, q: int, k: int) -> bool:
        """Whether to draw every chain at once: with stackable chains, samples that split
        evenly over the chains, at most ``STACKED_MAX_BATCH`` points drawn on every call,
        and, where they are drawn jointly (several per t-batch), at most
        ``STACKED_MAX_JOINT`` samples times points. Beyond those the arithmetic, not the
        number of calls, sets the cost, and the loop is faster: it evaluates inputs that
        every sample shares once per draw rather than once per sample. A shared block that
        candidates follow is drawn once per ``optimize_acqf`` call (``_shared_chain``) and
        does not count."""
        K = len(self.chains)
        drawn = b * (q - k) if _follows_shared(b, q, k) else b * q
        few = drawn <= STACKED_MAX_BATCH and (drawn == b or s * drawn <= STACKED_MAX_JOINT)
        return self.stacked is not None and K > 1 and s % K == 0 and few

    def _shared_chain(
        self, block: _Block, constant: bool, predictors: Sequence[ConditionalPredictor], slot: int
    ) -> _SharedDraw:
        """Sample the shared block through every output with a chain of predictors, or
        reuse the chain's last draw (kept in the prepared conditionals' ``slot``).

        With ``constant`` (candidates that vary over t-batches follow the
        block), the block is a constant of the candidates, as BoTorch's
        ``cache_root`` treats ``X_baseline``: it is drawn without gradients,
        and an ``optimize_acqf`` call, whose shared points and normals stay
        fixed while candidates move, draws it once (``shared_draws``).
        """
        if not constant:
            return block, self._sample_shared(block, predictors)
        # What the draw holds depends on the kinds drawn, which the normals do not tell.
        key = (block.X, block.mask, block.values, block.eps, self._kinds_key)
        cached = self.prepared.shared_draws.lookup(key, slot=slot)
        if cached is None:
            block.X = block.X.detach()  # kept beyond this call: no part of the candidates' graph
            with torch.no_grad():
                cached = block, self._sample_shared(block, predictors)
            self.prepared.shared_draws.store(key, cached, slot=slot)
        return cached

    def _sample_shared(self, block: _Block, predictors: Sequence[ConditionalPredictor]) -> _Factors:
        """Draw the block's chain jointly over its points, output by output.

        Returns:
            Per output: the block's features and the Cholesky factor of the
            covariance it was drawn from (latent, or noisy where only the noisy
            value is needed), which conditions the other points.
        """
        factors = []
        for m in range(self.num_sampled):
            predictor = predictors[m]
            latent_drawn = "latent" in self.kinds[m]
            features = predictor.features(block.inputs(self.windows[m]))
            covar = predictor.covariance(features, features)
            variance = covar.diagonal(dim1=-2, dim2=-1)
            prior = covar
            if not latent_drawn:
                eye = torch.eye(covar.shape[-1], dtype=covar.dtype, device=covar.device)
                prior = covar + _noise_like(predictor, covar) * eye
            chol = _cholesky(prior)
            draw = features.mean + _matvec(chol, block.eps[..., m])
            block.record(m, draw, predictor, features.mean, variance)
            factors.append((features, chol))
        return factors

    def _sample_rest(
        self,
        block: _Block,
        shared: _Block,
        factors: _Factors,
        predictors: Sequence[ConditionalPredictor],
        shared_moments: dict,
    ) -> None:
        """Draw the t-batched block's chain, conditionally on the shared block's draw.

        Args:
            block: The points that differ over t-batches (``b x q_c``).
            shared: The shared block, already drawn (possibly empty).
            factors: Per output, the shared block's features and Cholesky
                factors (see ``_sample_shared``; empty without shared points).
            predictors: The chain of predictors to draw with.
            shared_moments: Moments of the outputs that see ``x`` alone, by output
                and predictor, for the other chains of this call (filled here; see
                below).
        """
        k, q_c = shared.X.shape[-2], block.X.shape[-2]
        for m in range(self.num_sampled):
            predictor = predictors[m]
            Z = block.inputs(self.windows[m])  # (1 | s) x b x q_c x D
            shape = Z.shape[1:-1]  # b x q_c
            # An output that sees x alone has the same inputs in every chain, so a
            # predictor that chains share (a conditional without hyperparameter draws)
            # gives the same moments in each: they are computed once per call, not per chain.
            key = None if self.windows[m] else (m, id(predictor))
            noisy = "latent" not in self.kinds[m]  # drawn with its noise (see _sample_shared)
            if key in shared_moments:
                features, variance, A, root = shared_moments[key]
            else:
                features = predictor.features(Z)
                variance = predictor.variance(features)
                A = None
                if k:
                    fB, chol = factors[m]
                    cross = predictor.covariance(*_common_leading(features, fB))
                    cross = cross.reshape(cross.shape[0], -1, k)  # . x (b q_c) x k
                    # Regression of this block's draw on the shared one: chol_B^{-1} cross^T.
                    A = torch.linalg.solve_triangular(chol, cross.mT, upper=False).mT
                root = self._conditional_root(predictor, features, variance, A, shape, noisy)
                if key is not None:
                    shared_moments[key] = features, variance, A, root
            e = block.eps[..., m]
            mean = features.mean
            if k:
                mean = mean + _matvec(A, shared.eps[..., m]).view(-1, *shape)
            draw = mean + (root * e if q_c == 1 else _matvec(root, e))
            block.record(m, draw, predictor, features.mean, variance)

    @staticmethod
    def _conditional_root(
        predictor: ConditionalPredictor, features: Features, variance: Tensor,
        A: Tensor | None, shape: torch.Size, noisy: bool,
    ) -> Tensor:
        """Root of the latent (or with ``noisy`` the noisy) covariance of ``b x q_c``
        points given the shared block (``A``: their regression on it, or None without
        one): standard deviations (``. x b x 1``) when ``q_c`` is 1, else a Cholesky factor."""
        q_c = shape[-1]
        if A is not None:
            A = A.view(A.shape[0], *shape, -1)
        if q_c == 1:
            cond = variance + _noise_like(predictor, variance) if noisy else variance
            if A is not None:
                cond = cond - A.pow(2).sum(-1)
            return _safe_sqrt(cond)
        prior = predictor.covariance(features, features)
        if noisy:
            eye = torch.eye(q_c, dtype=prior.dtype, device=prior.device)
            prior = prior + _noise_like(predictor, prior) * eye
        cond = prior if A is None else prior - A @ A.mT
        return _cholesky(cond, prior)

    def _pointwise_paths(self, output_indices: Sequence[int]) -> tuple[Tensor, Tensor, Tensor]:
        """The fixed quasi-random paths behind the moments, point by point, reporting
        ``output_indices``.

        Returns:
            The reported samples and the conditional means and variances, each
            ``NUM_MOMENT_SAMPLES x batch_shape x q x 1 x M``.
        """
        # Without noise outputs every choice of reported outputs draws the same paths.
        key = tuple(output_indices) if self.noise_outputs else ()
        if key in self._pointwise_cache:
            return self._pointwise_cache[key]
        # A point's marginal moments depend only on its own chain, so every
        # point runs as its own t-batch (q = 1): memory stays linear in q.
        pointwise = GPARPosterior(
            self.prepared, self.X.unsqueeze(-2), output_indices, self.observation_noise
        )
        n = NUM_MOMENT_SAMPLES
        normals = quasi_random_normals(pointwise, n, seed=0)
        eps = normals.view(n, *([1] * (pointwise.X.dim() - 1)), normals.shape[-1])
        self._pointwise_cache[key] = pointwise._propagate(torch.Size([n]), eps)
        return self._pointwise_cache[key]

    @cached_property
    def _moments(self) -> tuple[Tensor, Tensor]:
        # The conditional moments are recorded for every output and depend only on the
        # values fed forward, so the paths report the last output alone: the fed values
        # are then drawn from the outputs' normals only (no noise outputs), the same
        # whatever this posterior reports (and one quasi-random dimension per value fed).
        _, cond_means, cond_vars = self._pointwise_paths([self.num_sampled - 1])
        idx = self.output_indices
        cond_means, cond_vars = cond_means[..., 0, idx], cond_vars[..., 0, idx]
        mean = cond_means.mean(0)
        return mean, cond_vars.mean(0) + cond_means.var(0, unbiased=False)

    def moments_of(self, sample_map: Callable[[Tensor], Tensor]) -> tuple[Tensor, Tensor]:
        """Monte Carlo mean and variance of mapped samples over the moment paths.

        Args:
            sample_map: Maps ``... x batch_shape x q x m`` samples of the reported
                outputs to ``... x batch_shape x q x m'`` (e.g. an outcome
                untransform), as in ``rsample``: it may use tensors of the
                posterior's ``batch_shape x q`` points.

        Returns:
            The ``batch_shape x q x m'`` mean and variance.
        """
        reported, _, _ = self._pointwise_paths(self.output_indices)
        samples = sample_map(reported[..., self.output_indices].squeeze(-2))
        return samples.mean(0), samples.var(0)


class _Block:
    """Points sampled together: their inputs, prefixes, normals and chain.

    Leading dimension of every tensor: the samples (``s``), or 1 where a
    quantity does not depend on the sample path.
    """

    def __init__(
        self,
        X: Tensor,
        mask: Tensor,
        values: Tensor,
        eps: Tensor,
        denoise: bool,
        observation_noise: bool,
        kinds: list[frozenset[str]],
        noise_columns: dict[int, int],
    ) -> None:
        self.X, self.mask, self.values, self.eps = X, mask, values, eps
        self.denoise, self.observation_noise = denoise, observation_noise
        self.kinds = kinds  # per output, the kinds of value drawn (GPARPosterior.kinds)
        self.noise_columns = noise_columns  # output -> the column of its noise's normals
        self.fed: list[Tensor] = []  # per output: the values later outputs see
        self.reported: list[Tensor] = []
        self.cond_means: list[Tensor] = []
        self.cond_vars: list[Tensor] = []

    def inputs(self, window: list[int]) -> Tensor:
        """``(1 | s) x points x D`` inputs of a conditional seeing ``window``."""
        if not window:  # x alone: the same for every sample
            return self.X.unsqueeze(0)
        if self.mask[..., window].all():  # observed earlier outputs only
            return torch.cat([self.X, self.values[..., window]], -1).unsqueeze(0)
        earlier = torch.stack(torch.broadcast_tensors(*[self.fed[j] for j in window]), -1)
        return torch.cat([self.X.expand(*earlier.shape[:-1], self.X.shape[-1]), earlier], -1)

    def record(
        self,
        m: int,
        draw: Tensor,
        predictor: ConditionalPredictor,
        mean: Tensor,
        variance: Tensor,
    ) -> None:
        """Keep output ``m``'s ``draw`` (its latent value if it draws one, else its noisy
        value; see ``GPARPosterior.kinds``): what later outputs see and what is reported.

        With both kinds, the noisy value is the latent plus observation noise driven by
        the output's own normals (``noise_columns``). An output that is not reported
        keeps its fed value as its sample; the last output feeds nothing.
        """
        latent = noisy = None
        if "latent" in self.kinds[m]:
            latent = draw
            if "noisy" in self.kinds[m]:
                noise = _noise_like(predictor, draw)
                noisy = draw + noise.sqrt() * self.eps[..., self.noise_columns[m]]
        else:
            noisy = draw
        fed = latent if self.denoise else noisy
        shown = noisy if self.observation_noise else latent
        fed, shown = (shown if fed is None else fed), (fed if shown is None else shown)
        self.fed.append(torch.where(self.mask[..., m], self.values[..., m], fed))
        self.reported.append(shown)
        if self.observation_noise:
            variance = variance + _noise_like(predictor, variance)
        shape = self.eps.shape[:-1]
        self.cond_means.append(mean.view(-1, *shape[1:]).expand(shape))
        self.cond_vars.append(variance.view(-1, *shape[1:]).expand(shape))

    def stacked(self, s: int, b: int) -> tuple[Tensor, Tensor, Tensor]:
        """Reported values, conditional means and variances: ``s x b x p x M``."""
        return tuple(
            torch.stack(values, -1).view(s, -1, *self.eps.shape[-2:-1], len(values)).expand(
                s, b, -1, -1
            )
            for values in (self.reported, self.cond_means, self.cond_vars)
        )


def _common_leading(a: Features, b: Features) -> tuple[Features, Features]:
    """Give C's flattened features and B's features the same leading size."""
    a = Features(*(t.reshape(t.shape[0], -1, *t.shape[3:]) for t in a))
    size = max(a.inputs.shape[0], b.inputs.shape[0])
    return (
        Features(*(t.expand(size, *t.shape[1:]) for t in a)),
        Features(*(t.expand(size, *t.shape[1:]) for t in b)),
    )


def _follows_shared(b: int, q: int, k: int) -> bool:
    """Whether candidates that vary over ``b`` t-batches follow a block of ``k`` of the
    ``q`` points shared by all of them: the block is then a constant of the candidates,
    drawn once and reused (``GPARPosterior._shared_chain``)."""
    return q > k and b > 1


def _noise_like(predictor: ConditionalPredictor, like: Tensor) -> Tensor:
    """The predictor's observation noise, broadcastable to ``like`` (samples leading):
    a stacked chain's noise differs per sample (see ``_StackedSamples``)."""
    noise = predictor.noise
    return noise if noise.dim() == 0 else noise.view(-1, *[1] * (like.dim() - 1))


def _safe_sqrt(variance: Tensor) -> Tensor:
    # sqrt's gradient is infinite at zero: zero (or round-off negative)
    # variances give a zero standard deviation with a zero gradient. No
    # absolute floor: any floor swamps the variances of outputs on small scales.
    positive = variance > 0
    return torch.where(positive, variance.where(positive, 1.0).sqrt(), 0.0)


def _cholesky(covar: Tensor, reference: Tensor | None = None) -> Tensor:
    # Latent covariances of nearby points are routinely singular; the jitter
    # psd_safe_cholesky adds is expected here, so its warning is noise. The
    # jitter is absolute, so the matrix is factorised in units of the mean
    # variance of ``reference`` (default: itself): otherwise it swamps outputs
    # on small scales (and is too small to help on large ones). A conditional
    # covariance ``covar - A A^T`` carries the round-off of its prior
    # ``covar``, so its jitter must be relative to the prior's (in float32 the
    # round-off can exceed the conditional variances themselves).
    reference = covar if reference is None else reference
    scale = reference.diagonal(dim1=-2, dim2=-1).mean(-1).clamp_min(torch.finfo(covar.dtype).tiny)
    scale = scale.detach()[..., None, None]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NumericalWarning)
        return psd_safe_cholesky(covar / scale) * scale.sqrt()


def _matvec(matrix: Tensor, vector: Tensor) -> Tensor:
    return (matrix @ vector.unsqueeze(-1)).squeeze(-1)


def quasi_random_normals(posterior: GPARPosterior, n: int, seed: int) -> Tensor:
    """``n x W`` scrambled Sobol normals for every point of ``posterior``
    (``W = base_sample_shape[-1]``), as one point's draw to broadcast over the points.

    The outputs' normals are the same whichever outputs are reported (e.g. for
    the latent and the noisy paths of one D-GPAR model): they are the Sobol draw
    in ``M`` dimensions, and the noise normals are the last columns of the draw
    in ``W`` dimensions. Sobol scrambling transforms each dimension separately, so the
    two together are still a scrambled Sobol point set in ``W`` dimensions (two
    separate draws of ``M`` and ``W - M`` dimensions would not be: their first
    dimensions are strongly dependent).
    """
    M, width = posterior.num_sampled, posterior.base_sample_shape[-1]
    normals = draw_sobol_normal_samples(d=M, n=n, dtype=posterior.dtype, seed=seed)
    if width == M:
        return normals
    wide = draw_sobol_normal_samples(d=width, n=n, dtype=posterior.dtype, seed=seed)
    return torch.cat([normals, wide[:, M:]], dim=-1)


@GetSampler.register(GPARPosterior)
def _get_sampler_gpar(
    posterior: GPARPosterior, sample_shape: torch.Size, *, seed: int | None = None
) -> SobolQMCNormalSampler | IIDNormalSampler:
    """Quasi-Monte Carlo normals for GPAR (i.i.d. beyond Sobol's dimension limit)."""
    sampler = SobolQMCNormalSampler(sample_shape=sample_shape, seed=seed)
    collapsed = sampler._get_collapsed_shape(posterior=posterior)[len(sample_shape) :]
    if collapsed.numel() > SobolEngine.MAXDIM:
        return IIDNormalSampler(sample_shape=sample_shape, seed=seed)
    return sampler
