"""Ax integration: GPAR as Ax's BoTorch model, GPAR early stopping, runners, tuning.

* :func:`gpar_generation_strategy` (:mod:`~gpar_bo.ax.generation`): Sobol, then GPAR
  (:class:`GPARCurveModel`) in Ax's modular BoTorch generator.
* :class:`GPAREarlyStoppingStrategy` (:mod:`~gpar_bo.ax.early_stopping`): stop trials
  unlikely to beat the incumbent.
* :class:`Checkpoints` (:mod:`~gpar_bo.ax.checkpoints`): the steps at which the
  learning-curve metric is reported; :func:`experiment_curves`
  (:mod:`~gpar_bo.ax.curves`): an experiment's runs x checkpoints table.
* :class:`GPARClient` (:mod:`~gpar_bo.ax.client`): Ax's ``Client``, whose early-stopping
  strategy is saved with the experiment.
* :mod:`gpar_bo.tuning.runner` / :mod:`gpar_bo.tuning.jobs`: ``CurveRunner`` and ``CurveMetric``
  for training jobs in local processes or on dask.
* :mod:`gpar_bo.tuning.loop` / :mod:`gpar_bo.tuning.report`: the ``gpar-bo tune`` loop (epoch
  budget, JSON snapshot and resume) and its report.

Importing this package registers GPAR's model class with Ax (fitting, storage) and
``GPAREarlyStoppingStrategy`` with Ax's storage (:mod:`~gpar_bo.ax.storage`).
"""

from gpar_bo.ax import storage as _storage  # noqa: F401 (registers GPAR with Ax's storage)
from gpar_bo.ax.checkpoints import Checkpoints
from gpar_bo.ax.client import GPARClient
from gpar_bo.ax.curves import ExperimentCurves, experiment_curves
from gpar_bo.ax.early_stopping import GPAREarlyStoppingStrategy
from gpar_bo.ax.generation import GPARCurveModel, gpar_generation_strategy

__all__ = [
    "Checkpoints",
    "ExperimentCurves",
    "GPARClient",
    "GPARCurveModel",
    "GPAREarlyStoppingStrategy",
    "experiment_curves",
    "gpar_generation_strategy",
]
