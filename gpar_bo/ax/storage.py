"""GPAR's classes in Ax's storage registries (JSON, and SQL through its JSON fields).

Importing :mod:`gpar_bo.ax` runs this module: it registers ``GPARCurveModel`` (the
model class of the GPAR node's ``ModelConfig``) and ``GPAREarlyStoppingStrategy``
(encoded by its settings, like Ax's own strategies) in Ax's core registries, so
Ax's encoders and every ``RegistryBundle`` made afterwards know them.
"""

from __future__ import annotations

from typing import Any

from ax.storage.botorch_modular_registry import register_model
from ax.storage.json_store.registry import CORE_DECODER_REGISTRY, CORE_ENCODER_REGISTRY

from gpar_bo.ax.early_stopping import GPAREarlyStoppingStrategy
from gpar_bo.ax.generation import GPARCurveModel

__all__ = ["gpar_early_stopping_to_dict"]


def gpar_early_stopping_to_dict(strategy: GPAREarlyStoppingStrategy) -> dict[str, Any]:
    """Ax's JSON form of the strategy: its settings (what it learnt is refitted)."""
    return {"__type": type(strategy).__name__, **strategy.settings()}


register_model(GPARCurveModel)
CORE_ENCODER_REGISTRY[GPAREarlyStoppingStrategy] = gpar_early_stopping_to_dict
CORE_DECODER_REGISTRY[GPAREarlyStoppingStrategy.__name__] = GPAREarlyStoppingStrategy
