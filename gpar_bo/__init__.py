"""gpar-bo: GPAR as a BoTorch model for Bayesian optimisation of training runs."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpar_bo.curve_model import LogIncrements, curve_model_options
    from gpar_bo.kernels import KernelFamily
    from gpar_bo.measurement import BinomialNoise, GaussianNoise
    from gpar_bo.model import GPARMarginalLogLikelihood, GPARModel
    from gpar_bo.posterior import GPARPosterior

__all__ = [
    "BinomialNoise",
    "GPARMarginalLogLikelihood",
    "GPARModel",
    "GPARPosterior",
    "GaussianNoise",
    "KernelFamily",
    "LogIncrements",
    "curve_model_options",
]

_LAZY = {"GPARMarginalLogLikelihood": "gpar_bo.model", "GPARModel": "gpar_bo.model",
         "GPARPosterior": "gpar_bo.posterior", "KernelFamily": "gpar_bo.kernels",
         "LogIncrements": "gpar_bo.curve_model", "curve_model_options": "gpar_bo.curve_model",
         "BinomialNoise": "gpar_bo.measurement", "GaussianNoise": "gpar_bo.measurement"}


def __getattr__(name: str) -> Any:
    # Imported on first use: every training worker imports gpar_bo.tuning.jobs, and
    # importing any submodule runs this file first; BoTorch is not theirs to load.
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
