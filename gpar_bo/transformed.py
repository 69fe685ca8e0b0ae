"""Maps of GPAR's samples (outcome untransform, scalarisation) as BoTorch posteriors.

BoTorch's ``OutcomeTransform.untransform_posterior`` and
``ScalarizedPosteriorTransform`` derive moments in closed form from a Gaussian
posterior's mean and covariance; GPAR's joint predictive is not Gaussian. Here a
map is applied to the samples through BoTorch's ``TransformedPosterior``, and
the moments are the Monte Carlo moments of the mapped samples over the
posterior's fixed moment paths (``GPARPosterior.moments_of``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cached_property

import torch
from botorch.acquisition.objective import PosteriorTransform, ScalarizedPosteriorTransform
from botorch.models.transforms.outcome import OutcomeTransform
from botorch.posteriors import Posterior
from botorch.posteriors.transformed import TransformedPosterior
from torch import Tensor

from gpar_bo.posterior import GPARPosterior, MomentsPosterior


class MappedGPARPosterior(MomentsPosterior, TransformedPosterior):
    """A ``GPARPosterior`` whose samples pass through a map.

    Args:
        posterior: The GPAR posterior.
        sample_map: Maps its ``... x q x m`` samples to ``... x q x num_outputs``.
        num_outputs: The size of the mapped samples' last dimension.
    """

    def __init__(
        self, posterior: GPARPosterior, sample_map: Callable[[Tensor], Tensor], num_outputs: int
    ) -> None:
        super().__init__(posterior, sample_transform=sample_map)
        self.num_outputs = num_outputs

    def _extended_shape(self, sample_shape: torch.Size = torch.Size()) -> torch.Size:  # noqa: B008
        return self._posterior._extended_shape(sample_shape)[:-1] + torch.Size([self.num_outputs])

    @cached_property
    def _moments(self) -> tuple[Tensor, Tensor]:
        return self._posterior.moments_of(self._sample_transform)


def map_samples(
    posterior: GPARPosterior | MappedGPARPosterior,
    sample_map: Callable[[Tensor], Tensor],
    num_outputs: int,
) -> MappedGPARPosterior:
    """``posterior`` with ``sample_map`` applied after any map it already has."""
    if isinstance(posterior, MappedGPARPosterior):
        inner, first = posterior._posterior, posterior._sample_transform
        return MappedGPARPosterior(inner, lambda s: sample_map(first(s)), num_outputs)
    return MappedGPARPosterior(posterior, sample_map, num_outputs)


def untransformed(
    posterior: GPARPosterior,
    outcome_transform: OutcomeTransform,
    output_indices: Sequence[int],
    num_outputs: int,
) -> MappedGPARPosterior:
    """The posterior of the outputs in their original units.

    Args:
        posterior: A posterior of the modelled (transformed) outputs ``output_indices``.
        outcome_transform: The model's elementwise outcome transform over all
            ``num_outputs`` outputs.
        output_indices: The outputs the posterior reports, in order.
        num_outputs: The model's number of outputs.
    """
    if list(output_indices) != list(range(num_outputs)):
        outcome_transform = outcome_transform.subset_output(list(output_indices))
    return map_samples(
        posterior, lambda s: outcome_transform.untransform(s)[0], len(output_indices)
    )


def transformed(
    posterior: GPARPosterior | MappedGPARPosterior, posterior_transform: PosteriorTransform
) -> Posterior:
    """``posterior_transform`` applied to a GPAR posterior.

    A ``ScalarizedPosteriorTransform`` (as Ax uses) is applied to the samples;
    any other transform is called on the posterior, as BoTorch's models do.
    """
    if not isinstance(posterior_transform, ScalarizedPosteriorTransform):
        return posterior_transform(posterior)
    weights, offset = posterior_transform.weights, posterior_transform.offset
    num_outputs = posterior._extended_shape()[-1]
    if len(weights) != num_outputs:
        raise ValueError(
            f"Scalarisation has {len(weights)} weights for {num_outputs} outputs."
        )
    return map_samples(posterior, lambda s: (s @ weights.to(s) + offset).unsqueeze(-1), 1)
