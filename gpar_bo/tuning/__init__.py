"""``gpar-bo tune``: the tuning application built on :mod:`gpar_bo.ax`.

* :mod:`~gpar_bo.tuning.problem`: :class:`TuningProblem`, what is tuned;
* :mod:`~gpar_bo.tuning.loop`: :func:`tune`, the Orchestrator loop under an epoch budget;
* :mod:`~gpar_bo.tuning.space`: :func:`problem_from_space`, a training function and a
  search-space file as a :class:`TuningProblem` (``--job`` / ``--space``);
* :mod:`~gpar_bo.tuning.checks`: every setting and input checked before anything starts;
* :mod:`~gpar_bo.tuning.lock`: one process at a time per output directory;
* :mod:`~gpar_bo.tuning.snapshot` / :mod:`~gpar_bo.tuning.atomic`: its JSON snapshot,
  written atomically with a last good copy;
* :mod:`~gpar_bo.tuning.resume` / :mod:`~gpar_bo.tuning.recovery`: resume, recovery
  from a damaged snapshot, and reconciliation with the jobs' progress files after a crash;
* :mod:`~gpar_bo.tuning.runner` / :mod:`~gpar_bo.tuning.jobs`: ``CurveRunner`` and
  ``CurveMetric`` for training jobs in local processes or on dask, and the jobs' protocol
  (verdicts after each checkpoint, pause and resume from a checkpoint directory);
* :mod:`~gpar_bo.tuning.orchestrator`: ``VerdictOrchestrator``, Ax's Orchestrator giving
  the jobs their verdicts after early stopping;
* :mod:`~gpar_bo.tuning.report`: the report (JSON and PNG);
* :mod:`~gpar_bo.tuning.errors`: the errors shown to the user as one line;
* :mod:`~gpar_bo.tuning.cli`: the ``gpar-bo tune`` sub-command.

What is guaranteed after a crash, and how it is tested: ``docs/reliability.md``.

``tune``, ``TuningProblem`` and ``problem_from_space`` are importable from here.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TuningProblem", "problem_from_space", "tune"]

_LAZY = {"TuningProblem": "gpar_bo.tuning.problem", "tune": "gpar_bo.tuning.loop",
         "problem_from_space": "gpar_bo.tuning.space"}


def __getattr__(name: str) -> Any:
    # Imported on first use: training workers import gpar_bo.tuning.jobs, not Ax.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
