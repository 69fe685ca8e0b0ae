r"""A search space as the unit cube, through Ax's own transforms.

A policy that works on tensors (e.g. ``gpar_bo.freeze_thaw.FreezeThawPolicy``)
needs every setting as a point of a box and every point of the box as a setting.
Ax's continuous-input transforms (``Cont_X_trans``: fixed parameters removed,
ordered choices to integers, unordered choices one-hot, integers to floats, log
and logit scales, then ``UnitX``) do exactly that, both ways: decoding rounds
integers and takes the largest one-hot entry of a choice. Nothing is re-implemented
here; the encoding is the one Ax's own BoTorch models see.

Limits: parameter constraints are not supported (the box would contain settings
they exclude), and a one-hot encoded choice is scored by a policy at relaxed
(fractional) points, of which the decoded setting is the nearest vertex.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from ax.adapter.registry import Cont_X_trans
from ax.adapter.transforms.base import Transform
from ax.core.observation import ObservationFeatures
from ax.core.search_space import SearchSpace
from torch import Tensor

__all__ = ["UnitCubeEncoding"]


class UnitCubeEncoding:
    """Settings of ``search_space`` as points of ``[0, 1]^d`` and back.

    Args:
        search_space: An Ax search space without parameter constraints.

    Attributes:
        names: The ``d`` encoded coordinates' names, in column order.

    Raises:
        ValueError: The search space has parameter constraints.
    """

    def __init__(self, search_space: SearchSpace) -> None:
        if search_space.parameter_constraints:
            raise ValueError(
                "Freeze-thaw searches the box of the parameters' ranges; parameter "
                f"constraints ({search_space.parameter_constraints[0]}) are not supported."
            )
        space = search_space.clone()
        self._transforms: list[Transform] = []
        for transform_class in Cont_X_trans:
            transform = transform_class(search_space=space)
            space = transform.transform_search_space(space)
            self._transforms.append(transform)
        self.names = list(space.parameters)

    @property
    def dim(self) -> int:
        """``d``, the number of encoded coordinates."""
        return len(self.names)

    def bounds(self, dtype: torch.dtype = torch.double) -> Tensor:
        """``2 x d``: the unit cube."""
        return torch.stack([torch.zeros(self.dim, dtype=dtype), torch.ones(self.dim, dtype=dtype)])

    def encode(self, parameters: Mapping[str, Any], dtype: torch.dtype = torch.double) -> Tensor:
        """The ``d`` point of a setting."""
        features = [ObservationFeatures(parameters=dict(parameters))]
        for transform in self._transforms:
            features = transform.transform_observation_features(features)
        encoded = features[0].parameters
        return torch.tensor([float(encoded[name]) for name in self.names], dtype=dtype)

    def decode(self, x: Tensor) -> dict[str, Any]:
        """The setting of a ``d`` point of the cube (rounded where the space is discrete)."""
        if x.shape != (self.dim,):
            raise ValueError(f"Expected a point of {self.dim} coordinates; got {tuple(x.shape)}.")
        point = x.clamp(0.0, 1.0).tolist()
        features = [ObservationFeatures(parameters=dict(zip(self.names, point)))]
        for transform in reversed(self._transforms):
            features = transform.untransform_observation_features(features)
        return dict(features[0].parameters)
