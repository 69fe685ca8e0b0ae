"""Maps of GPAR's samples (outcome untransform, scalarisation) as BoTorch posteriors.

BoTorch's ``OutcomeTransform.untransform_posterior`` and
``ScalarizedPosteriorTransform`` derive moments in closed form from a Gaussian
posterior's mean and covariance; GPAR's joint predictive is not Gaussian. Here a
map is applied to the samples through BoTorch's ``TransformedPosterior``, and
the moments are the Monte Carlo moments of the mapped samples over the
posterior's fixed moment paths (``GPARPosterior.moments_of``).

Elementwise transforms (BoTorch's ``Log``, ``Standardize``, ...) map each output
on its own. A ``TriangularOutcomeTransform`` maps each output from the modelled
outputs up to it (e.g. ``gpar_bo.curve_model.LogIncrements``): a sample-by-sample
map is as exact for it, once every sample carries those earlier outputs.
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


class TriangularOutcomeTransform(OutcomeTransform):
    """An outcome transform whose untransformed output m depends on modelled outputs 1..m.

    Its ``untransform`` must accept any prefix of the outputs (``... x k``, ``k <= M``)
    and return that prefix in original units. ``GPARModel`` then samples every output
    up to the last one asked for, puts a run's observed (modelled) values in place of
    the samples of the outputs it observed (its later original outputs are functions
    of them), untransforms and reports the outputs asked for. Such a transform has no
    ``subset_output``: a later original output needs the earlier modelled ones.
    """


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
    observed: tuple[Tensor, Tensor] | None = None,
) -> MappedGPARPosterior:
    """The posterior of the outputs in their original units.

    Args:
        posterior: A posterior of the modelled (transformed) outputs: those in
            ``output_indices`` for an elementwise transform; every output up to the
            largest of them, in order, for a ``TriangularOutcomeTransform``.
        outcome_transform: The model's outcome transform over all ``num_outputs``
            outputs: elementwise, or triangular.
        output_indices: The outputs to report, in order.
        num_outputs: The model's number of outputs.
        observed: For a triangular transform, the modelled values and the mask of
            the observed outputs at the posterior's points (``batch x q x M``, as
            ``PreparedConditionals.observed_prefix`` gives them); they replace the
            samples where observed.
    """
    indices = list(output_indices)
    if not isinstance(outcome_transform, TriangularOutcomeTransform):
        if indices != list(range(num_outputs)):
            outcome_transform = outcome_transform.subset_output(indices)
        return map_samples(posterior, lambda s: outcome_transform.untransform(s)[0], len(indices))
    k = max(indices) + 1
    if posterior.output_indices != list(range(k)) or observed is None:
        raise ValueError(
            "A triangular outcome transform needs the posterior of every output up to the "
            "last one reported, and the observed prefixes."
        )
    values, mask = (t[..., :k] for t in observed)

    def sample_map(samples: Tensor) -> Tensor:
        known = torch.where(mask, values.to(samples), samples)
        return outcome_transform.untransform(known)[0][..., indices]

    return map_samples(posterior, sample_map, len(indices))


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
