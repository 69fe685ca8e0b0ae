"""GPAR's classes in Ax's storage registries (JSON, and SQL through its JSON fields).

Importing :mod:`gpar_bo.ax` runs this module: it registers ``GPARCurveModel`` (the
model class of the GPAR node's ``ModelConfig``), ``GPAREarlyStoppingStrategy``
(encoded by its settings, like Ax's own strategies) and the curve model's
``LogIncrements`` transform (it has no state, so GPAR options such as
``curve_model_options()`` can be stored) and the measurement noises of
:mod:`gpar_bo.measurement` (by their arguments, so GPAR options with a
``measurement_noise`` can be stored too) in Ax's core registries, so Ax's encoders and
every ``RegistryBundle`` made afterwards know them.
"""

from __future__ import annotations

from typing import Any

from ax.storage.botorch_modular_registry import (
    CLASS_TO_REGISTRY,
    CLASS_TO_REVERSE_REGISTRY,
    register_model,
)
from ax.storage.json_store.encoders import botorch_component_to_dict
from ax.storage.json_store.registry import CORE_DECODER_REGISTRY, CORE_ENCODER_REGISTRY
from botorch.models.transforms.outcome import OutcomeTransform

from gpar_bo.ax.early_stopping import GPAREarlyStoppingStrategy
from gpar_bo.ax.generation import GPARCurveModel
from gpar_bo.curve_model import LogIncrements
from gpar_bo.measurement import BinomialNoise, GaussianNoise

__all__ = ["gpar_early_stopping_to_dict", "measurement_noise_to_dict"]


def gpar_early_stopping_to_dict(strategy: GPAREarlyStoppingStrategy) -> dict[str, Any]:
    """Ax's JSON form of the strategy: its settings (what it learnt is refitted)."""
    return {"__type": type(strategy).__name__, **strategy.settings()}


def measurement_noise_to_dict(noise: BinomialNoise | GaussianNoise) -> dict[str, Any]:
    """Ax's JSON form of a measurement noise: its constructor's arguments."""
    return {"__type": type(noise).__name__, **noise.settings()}


register_model(GPARCurveModel)
CORE_ENCODER_REGISTRY[GPAREarlyStoppingStrategy] = gpar_early_stopping_to_dict
CORE_DECODER_REGISTRY[GPAREarlyStoppingStrategy.__name__] = GPAREarlyStoppingStrategy
# As Ax's own outcome transforms (Ax has no register function for them).
CLASS_TO_REGISTRY[OutcomeTransform][LogIncrements] = LogIncrements.__name__
CLASS_TO_REVERSE_REGISTRY[OutcomeTransform][LogIncrements.__name__] = LogIncrements
CORE_ENCODER_REGISTRY[LogIncrements] = botorch_component_to_dict
CORE_DECODER_REGISTRY[LogIncrements.__name__] = LogIncrements
for noise_class in (BinomialNoise, GaussianNoise):
    CORE_ENCODER_REGISTRY[noise_class] = measurement_noise_to_dict
    CORE_DECODER_REGISTRY[noise_class.__name__] = noise_class
