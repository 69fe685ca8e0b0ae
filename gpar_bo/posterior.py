"""GPAR's posterior: sequential, reparameterised Monte Carlo sampling.

GPAR's joint predictive over the outputs is not Gaussian: output 1 is a GP in
x, and output m is a GP in x joined with outputs 1..m-1. Samples are drawn
sequentially. Output 1 is sampled jointly over the q points; each sample path
then enters conditional 2 as an input, and so on. Every output of every point
consumes one standard normal, so ``base_sample_shape`` is ``batch x q x M`` and
BoTorch's quasi-Monte Carlo samplers, fixed base samples and the
reparameterisation gradients of acquisition optimisation all work unchanged.
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

from gpar_bo.prediction import ConditionalPredictor

#: Sample paths behind ``GPARPosterior.mean`` and ``.variance``.
NUM_MOMENT_SAMPLES = 256


class GPARPosterior(Posterior):
    r"""Posterior of a ``GPARModel`` at ``batch x q`` points.

    The value fed from output m into later conditionals is the noisy
    observation ``y_m`` (GPAR) or the latent ``f_m`` (D-GPAR), as in training.
    The reported value is ``y_m`` with ``observation_noise`` and ``f_m``
    without. Both are driven by the same standard normal, so every output's
    marginal is exact; without observation noise, the reported intermediate
    latents are perfectly correlated with the noisy values fed forward, which
    slightly overstates their correlation with later outputs.

    Points with an observed prefix (training configurations, or data added with
    ``condition_on_observations``) feed their observed values forward instead
    of samples, so their later outputs are conditioned on what they have shown.

    ``mean`` and ``variance`` are exact for output 1 and for outputs whose
    earlier outputs are all observed. Otherwise they are Rao-Blackwellised
    Monte Carlo estimates over ``NUM_MOMENT_SAMPLES`` (256) fixed quasi-random
    sample paths: the average of the conditional means, and the average
    conditional variance plus the variance of the conditional means. They are
    deterministic and differentiable in X. With a ``sample_transform`` (e.g.
    an outcome untransform or a scalarisation) they are plain Monte Carlo
    moments of the transformed samples over the same paths.
    """

    def __init__(
        self,
        predictors: Sequence[ConditionalPredictor],
        windows: Sequence[Sequence[int]],
        X: Tensor,
        prefix_values: Tensor,
        prefix_mask: Tensor,
        observation_noise: bool,
        denoise: bool,
        output_indices: Sequence[int],
        sample_transform: Callable[[Tensor], Tensor] | None = None,
        num_reported: int | None = None,
    ) -> None:
        r"""
        Args:
            predictors: The cached conditionals, in output order (at least up
                to the largest of ``output_indices``).
            windows: For each conditional, the earlier outputs it sees.
            X: A ``batch_shape x q x d`` tensor of inputs.
            prefix_values: A ``batch_shape x q x M`` tensor of observed values
                to feed forward (anything where ``prefix_mask`` is False).
            prefix_mask: A ``batch_shape x q x M`` bool tensor, True where a
                point's output is observed.
            observation_noise: Report noisy outputs instead of latent ones.
            denoise: Feed latent values forward (D-GPAR) instead of noisy ones.
            output_indices: The outputs to report, in order.
            sample_transform: Applied to the reported ``... x q x len(idx)``
                samples (e.g. an outcome untransform or a scalarisation).
            num_reported: Size of the last dimension after ``sample_transform``
                (defaults to ``len(output_indices)``).
        """
        self.predictors = list(predictors)
        self.windows = [list(w) for w in windows]
        self.X = X
        self.num_sampled = max(output_indices) + 1
        self.prefix_mask = prefix_mask[..., : self.num_sampled]
        self.prefix_values = torch.where(
            self.prefix_mask, prefix_values[..., : self.num_sampled], 0.0
        )
        self.observation_noise = observation_noise
        self.denoise = denoise
        self.output_indices = list(output_indices)
        self.sample_transform = sample_transform
        self.num_reported = num_reported or len(self.output_indices)

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
        """``batch_shape x q x M``: one standard normal per output per point."""
        return self.X.shape[:-1] + torch.Size([self.num_sampled])

    def _extended_shape(self, sample_shape: torch.Size = torch.Size()) -> torch.Size:
        return sample_shape + self.X.shape[:-1] + torch.Size([self.num_reported])

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
            base_samples: A ``sample_shape x batch_shape x q x M`` tensor of
                standard normals; batch dimensions may be of size 1
                (broadcast over t-batches, as BoTorch's samplers do).

        Returns:
            A ``sample_shape x batch_shape x q x m`` tensor of samples.
        """
        if base_samples.shape[: len(sample_shape)] != sample_shape:
            raise RuntimeError("`sample_shape` disagrees with `base_samples`.")
        eps = base_samples.expand(sample_shape + self.base_sample_shape)
        reported, _, _ = self._propagate(eps)
        return self._transform(reported)

    def _transform(self, reported: Tensor) -> Tensor:
        samples = reported[..., self.output_indices]
        return samples if self.sample_transform is None else self.sample_transform(samples)

    def _propagate(self, eps: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Run the chain of conditionals on standard normals ``eps``.

        Args:
            eps: A ``sample_shape x batch_shape x q x M`` tensor.

        Returns:
            The reported samples and, per output, the conditional mean and
            variance of the reported value given the sampled earlier outputs
            (all ``sample_shape x batch_shape x q x M``).
        """
        lead = eps.shape[:-1]
        q = self.X.shape[-2]
        fed: list[Tensor] = []
        reported, cond_means, cond_vars = [], [], []
        for m in range(self.num_sampled):
            window = self.windows[m]
            if not window:  # depends on x alone: evaluate once for all samples
                Z = self.X
            elif self.prefix_mask[..., window].all():
                # Every point observed these outputs (e.g. a baseline of
                # training runs): the inputs are the same for all samples.
                Z = torch.cat([self.X, self.prefix_values[..., window]], -1)
            else:
                earlier = torch.stack([fed[j] for j in window], dim=-1)
                Z = torch.cat([self.X.expand(lead + self.X.shape[-1:]), earlier], -1)
            predictor = self.predictors[m]
            mean, covar = predictor(Z, joint=q > 1)
            noise = predictor.noise
            e = eps[..., m]
            if q == 1:
                latent = mean + covar.sqrt() * e
                noisy = mean + (covar + noise).sqrt() * e
                variance = covar
            else:
                latent = mean + _matvec(_cholesky(covar), e)
                identity = torch.eye(q, dtype=covar.dtype, device=covar.device)
                noisy = mean + _matvec(_cholesky(covar + noise * identity), e)
                variance = covar.diagonal(dim1=-2, dim2=-1)
            chain = latent if self.denoise else noisy
            fed.append(
                torch.where(self.prefix_mask[..., m], self.prefix_values[..., m], chain)
            )
            if self.observation_noise:
                reported.append(noisy)
                variance = variance + noise
            else:
                reported.append(latent)
            cond_means.append(mean.expand(lead))
            cond_vars.append(variance.expand(lead))
        return (
            torch.stack(reported, -1),
            torch.stack(cond_means, -1),
            torch.stack(cond_vars, -1),
        )

    @cached_property
    def _moments(self) -> tuple[Tensor, Tensor]:
        dim = self.X.shape[-2] * self.num_sampled
        n = NUM_MOMENT_SAMPLES
        if dim <= SobolEngine.MAXDIM:
            normals = draw_sobol_normal_samples(d=dim, n=n, dtype=self.dtype, seed=0)
        else:
            generator = torch.Generator().manual_seed(0)
            normals = torch.randn(n, dim, generator=generator, dtype=self.dtype)
        eps = normals.view(n, *([1] * (self.X.dim() - 2)), *self.base_sample_shape[-2:])
        eps = eps.expand(torch.Size([n]) + self.base_sample_shape)
        reported, cond_means, cond_vars = self._propagate(eps)
        if self.sample_transform is not None:
            samples = self._transform(reported)
            return samples.mean(0), samples.var(0)
        idx = self.output_indices
        cond_means, cond_vars = cond_means[..., idx], cond_vars[..., idx]
        mean = cond_means.mean(0)
        return mean, cond_vars.mean(0) + cond_means.var(0, unbiased=False)

    @property
    def mean(self) -> Tensor:
        """``batch_shape x q x m`` posterior mean (see the class docstring)."""
        return self._moments[0]

    @property
    def variance(self) -> Tensor:
        """``batch_shape x q x m`` posterior variance (see the class docstring)."""
        return self._moments[1]


def _cholesky(covar: Tensor) -> Tensor:
    # Latent covariances of nearby points are routinely singular; the jitter
    # psd_safe_cholesky adds is expected here, so its warning is noise.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NumericalWarning)
        return psd_safe_cholesky(covar)


def _matvec(matrix: Tensor, vector: Tensor) -> Tensor:
    return (matrix @ vector.unsqueeze(-1)).squeeze(-1)


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
