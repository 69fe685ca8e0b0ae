"""``gpar-bo tune``: the tuning application built on :mod:`gpar_bo.ax`.

* :mod:`~gpar_bo.tuning.loop`: :func:`tune`, the Orchestrator loop under an epoch budget;
* :mod:`~gpar_bo.tuning.snapshot`: its JSON snapshot and resume;
* :mod:`~gpar_bo.tuning.runner` / :mod:`~gpar_bo.tuning.jobs`: ``CurveRunner`` and
  ``CurveMetric`` for training jobs in local processes or on dask, and the jobs' protocol;
* :mod:`~gpar_bo.tuning.report`: the report (JSON and PNG);
* :mod:`~gpar_bo.tuning.cli`: the ``gpar-bo tune`` sub-command.
"""
