"""What every problem's hyperparameter setting shares: a frozen dataclass of numbers, by name.

A problem's setting (:class:`~gpar_bo.problems.mnist.mlp.MLPHyperparameters`,
:class:`~gpar_bo.problems.funnel_mlp.mlp.FunnelHyperparameters`) is a frozen dataclass
whose fields are its hyperparameters in the column order of its curve tables. It checks
its own ranges; conversion from and to mappings and vectors, and the check that each
value is a finite number, are written here once.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import fields
from typing import Any, TypeVar

import numpy as np
import torch

__all__ = ["Hyperparameters"]

H = TypeVar("H", bound="Hyperparameters")


class Hyperparameters:
    """Base of a frozen dataclass whose fields are a problem's hyperparameters, in order."""

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The hyperparameter names, in field (column) order."""
        return tuple(f.name for f in fields(cls))  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls: type[H], values: Mapping[str, Any]) -> H:
        """Build from a name -> value mapping, rejecting unknown or missing names."""
        names = cls.names()
        unknown = sorted(set(values) - set(names))
        if unknown:
            raise ValueError(f"unknown hyperparameter(s) {unknown}; expected {list(names)}")
        missing = [name for name in names if name not in values]
        if missing:
            raise ValueError(f"missing hyperparameter(s) {missing}")
        return cls(**{name: values[name] for name in names})

    @classmethod
    def from_vector(cls: type[H], x: torch.Tensor | np.ndarray | Sequence[float]) -> H:
        """Build from a vector of the values in :meth:`names` order (a row of ``X``)."""
        values = [float(v) for v in (x.tolist() if hasattr(x, "tolist") else x)]
        names = cls.names()
        if len(values) != len(names):
            raise ValueError(f"expected {len(names)} values, got {len(values)}")
        return cls(**dict(zip(names, values)))

    def to_dict(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in self.names()}

    def to_vector(self) -> list[float]:
        """The values as floats in :meth:`names` order (a curve table row's)."""
        return [float(getattr(self, name)) for name in self.names()]

    def _numbers(self) -> Iterator[tuple[str, Any, float]]:
        """``(name, value as given, value as float)`` per field, once each is a finite number.

        Raises:
            ValueError: a value that is not a real number (booleans included) or not finite.
        """
        for name in self.names():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
                raise ValueError(f"hyperparameter {name} must be a number, got {value!r}")
            if not math.isfinite(float(value)):
                raise ValueError(f"hyperparameter {name} must be finite, got {value!r}")
            yield name, value, float(value)

    def _store(self, name: str, value: float, integer: bool) -> None:
        """Store a checked value as an ``int`` (which it must be, if ``integer``) or a ``float``.

        Raises:
            ValueError: ``integer`` and a value with a fractional part.
        """
        if integer:
            if value != round(value):
                raise ValueError(f"hyperparameter {name} must be an integer, got {value:g}")
            value = int(round(value))
        object.__setattr__(self, name, value)
