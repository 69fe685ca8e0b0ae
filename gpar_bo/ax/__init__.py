"""Ax integration: GPAR as Ax's BoTorch model, GPAR early stopping, runners, tuning.

* :func:`gpar_generation_strategy`: Sobol, then GPAR in Ax's modular BoTorch generator.
* :class:`GPAREarlyStoppingStrategy`: stop trials unlikely to beat the incumbent.

Importing this package registers GPAR's model class with Ax (fitting, storage).
"""

from gpar_bo.ax.curves import ExperimentCurves, experiment_curves
from gpar_bo.ax.early_stopping import GPAREarlyStoppingStrategy
from gpar_bo.ax.generation import GPARCurveModel, checkpoint_indices, gpar_generation_strategy

__all__ = [
    "ExperimentCurves",
    "GPARCurveModel",
    "GPAREarlyStoppingStrategy",
    "checkpoint_indices",
    "experiment_curves",
    "gpar_generation_strategy",
]
