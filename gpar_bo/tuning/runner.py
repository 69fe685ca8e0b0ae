r"""An Ax runner and metric for training runs that report learning curves.

``CurveRunner`` starts each trial as a job (:mod:`gpar_bo.tuning.jobs`) in a local
process pool (default: trials run in parallel) or on a ``dask.distributed``
cluster (a ``LocalCluster``, or an existing scheduler by address), and stops a
trial by dropping a stop file the job checks after every epoch. ``CurveMetric``
reads a trial's progress file and returns its full prefix, one row per step, while
the trial runs (``is_available_while_running``), which is what GPAR and
``GPAREarlyStoppingStrategy`` need.

Trial status comes from the progress file's final line. A running trial that no
live job of this runner owns (the tuning process was restarted) or whose job died
without a final line is reported FAILED, so a resumed loop carries on.

For Ax's JSON storage, pass :func:`json_registries` to ``object_to_json`` /
``object_from_json``; for SQL storage (with SQLAlchemy installed),
``StorageConfig(registry_bundle=registry_bundle())``.
"""

from __future__ import annotations

import math
import multiprocessing
import os
from collections.abc import Iterable, Mapping
from concurrent.futures import Future, ProcessPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

from ax.core.base_trial import BaseTrial, TrialStatus
from ax.core.data import Data, DataRow
from ax.core.map_metric import MapMetric
from ax.core.metric import MetricFetchE, MetricFetchResult
from ax.core.runner import Runner
from ax.storage.metric_registry import register_metrics
from ax.storage.registry_bundle import RegistryBundle
from ax.storage.runner_registry import register_runners
from ax.utils.common.result import Err, Ok

from gpar_bo.tuning.jobs import (
    create_progress_file,
    exit_with_parent,
    read_progress,
    run_training_job,
)

__all__ = ["CurveMetric", "CurveRunner", "json_registries", "registry_bundle"]

#: Stop reason of jobs stopped because the tuning process ended or lost them; such
#: trials are FAILED (interrupted), not EARLY_STOPPED.
INTERRUPTED = "interrupted: the tuning process stopped or lost this job"


class CurveMetric(MapMetric):
    """One value of a trial's progress file, at every step reported so far.

    Args:
        name: The metric name.
        key: The key of the value in the progress file (default: ``name``).
        lower_is_better: Whether lower values are better.
    """

    def __init__(self, name: str, key: str | None = None, lower_is_better: bool | None = True) -> None:
        super().__init__(name=name, lower_is_better=lower_is_better)
        self.key = key or name

    @classmethod
    def is_available_while_running(cls) -> bool:
        return True

    @classmethod
    def period_of_new_data_after_trial_completion(cls) -> timedelta:
        # Ax marks a trial EARLY_STOPPED when it asks it to stop, but the job only sees
        # the stop file after the epoch it is training; keep fetching so that epoch (the
        # final one, if the stop came during it) reaches the model and the budget.
        return timedelta(days=1)

    def fetch_trial_data(self, trial: BaseTrial, **kwargs: Any) -> MetricFetchResult:
        """All steps reported so far; an ``Err`` before the first (Ax retries it)."""
        path = trial.run_metadata.get("progress_file")
        steps, _ = read_progress(path) if path else ([], None)
        arm = trial.arms[0].name
        rows = [
            DataRow(trial_index=trial.index, arm_name=arm, metric_name=self.name,
                    metric_signature=self.signature, mean=values[self.key], se=math.nan,
                    step=step)
            for step, values in steps
            if self.key in values
        ]
        if not rows:
            return Err(MetricFetchE(
                message=f"Trial {trial.index} has not reported {self.key!r} yet.", exception=None
            ))
        # A step re-reported keeps its latest value (Data rows must be unique).
        latest = {row.step: row for row in rows}
        return Ok(value=Data(data_rows=list(latest.values())))


class CurveRunner(Runner):
    """Runs each trial as a training job that writes a progress file.

    Args:
        train: The training function as ``"module:function"`` with signature
            ``train(parameters, report, trial_index, **train_kwargs)`` (see
            :mod:`gpar_bo.tuning.jobs`, e.g. ``"gpar_bo.problems.mnist.job:train_mnist_mlp"``).
        directory: Where progress and stop files go (shared by all workers).
        train_kwargs: Keyword arguments for ``train`` (JSON-serialisable).
        max_workers: Parallel jobs (local processes or ``LocalCluster`` workers).
        use_dask: Submit jobs to ``dask.distributed`` instead of a local process
            pool (needs the ``distributed`` package: ``pip install gpar-bo[dask]``).
        scheduler_address: With ``use_dask``, the address of an existing scheduler
            (e.g. ``"tcp://10.0.0.5:8786"``); None starts a ``LocalCluster``. Its
            workers must see ``directory`` and be able to import ``train``.
        final_step: The step of a full run (e.g. its number of epochs). A job
            that reports it is COMPLETED even if a stop (early stopping, or the
            tuning process ending) arrived while it trained that step.
    """

    def __init__(
        self,
        train: str,
        directory: str,
        train_kwargs: Mapping[str, Any] | None = None,
        max_workers: int = 2,
        use_dask: bool = False,
        scheduler_address: str | None = None,
        final_step: float | None = None,
    ) -> None:
        self.train = train
        self.directory = str(directory)
        self.train_kwargs = dict(train_kwargs or {})
        self.max_workers = max_workers
        self.use_dask = use_dask
        self.scheduler_address = scheduler_address
        self.final_step = final_step
        self._executor: Any = None
        self._futures: dict[int, Future] = {}

    # ------------------------------------------------------------- executors
    def _get_executor(self) -> Any:
        if self._executor is None:
            if self.use_dask:
                try:
                    from distributed import Client, LocalCluster
                except ImportError as error:
                    raise ImportError(
                        "use_dask=True needs dask.distributed: pip install 'gpar-bo[dask]'."
                    ) from error
                if self.scheduler_address is not None:
                    self._executor = Client(self.scheduler_address)
                else:
                    cluster = LocalCluster(n_workers=self.max_workers, threads_per_worker=1,
                                           processes=True, dashboard_address=None)
                    self._executor = Client(cluster)
            else:
                # spawn: a fresh interpreter per worker; forking a process that
                # already runs torch and Ax threads is not safe.
                self._executor = ProcessPoolExecutor(
                    self.max_workers, mp_context=multiprocessing.get_context("spawn"),
                    initializer=exit_with_parent, initargs=(os.getpid(),),
                )
        return self._executor

    def shutdown(self, stop_running: bool = True) -> None:
        """Stop the executor; by default running jobs stop after their current step
        and are reported FAILED (interrupted) if the experiment is resumed."""
        if stop_running:
            for index, future in self._futures.items():
                if not future.done():
                    self.stop_file(index).write_text(INTERRUPTED)
        if self._executor is not None:
            if self.use_dask:
                cluster = getattr(self._executor, "cluster", None)
                self._executor.close()
                if cluster is not None and self.scheduler_address is None:
                    cluster.close()
            else:
                self._executor.shutdown(wait=True, cancel_futures=True)
        self._executor = None
        self._futures = {}

    # ----------------------------------------------------------------- files
    def progress_file(self, index: int) -> Path:
        """The progress file of trial ``index``."""
        return Path(self.directory) / f"trial_{index}.jsonl"

    def stop_file(self, index: int) -> Path:
        """The stop file of trial ``index``."""
        return Path(self.directory) / f"trial_{index}.stop"

    # ------------------------------------------------------------ Ax runner
    def run(self, trial: BaseTrial) -> dict[str, Any]:
        """Create the trial's progress file with its header, then submit its job.

        The header (trial, arm, parameters, job) is on disk before the job starts,
        so ``runs/`` alone tells which configuration every job trained.

        Raises:
            RuntimeError: The trial's progress file exists. It records a job that
                already ran under this index and is never overwritten (a resumed
                loop recovers such trials instead of starting them again).
        """
        Path(self.directory).mkdir(parents=True, exist_ok=True)
        progress, stop = self.progress_file(trial.index), self.stop_file(trial.index)
        arm = trial.arms[0]
        header = {"trial": trial.index, "arm": arm.name, "parameters": dict(arm.parameters),
                  "train": self.train, "train_kwargs": self.train_kwargs}
        try:
            create_progress_file(progress, header)
        except FileExistsError:
            raise RuntimeError(
                f"Refusing to start trial {trial.index}: its progress file {progress} "
                "already exists and records an earlier job, which is never overwritten."
            ) from None
        stop.unlink(missing_ok=True)  # no job of this index ever ran: a stray file
        args = (self.train, self.train_kwargs, dict(arm.parameters), trial.index,
                str(progress), str(stop), self.final_step)
        executor = self._get_executor()
        if self.use_dask:
            future = executor.submit(run_training_job, *args, pure=False,
                                     key=f"gpar-bo-trial-{trial.index}-{id(self)}")
        else:
            future = executor.submit(run_training_job, *args)
        self._futures[trial.index] = future
        return {"progress_file": str(progress), "stop_file": str(stop)}

    def poll_available_capacity(self) -> int:
        # Stopped jobs finish their current epoch before freeing a worker.
        busy = sum(not future.done() for future in self._futures.values())
        return max(self.max_workers - busy, 0)

    def poll_trial_status(self, trials: Iterable[BaseTrial]) -> dict[TrialStatus, set[int]]:
        """Status from each progress file; orphaned or crashed jobs are FAILED."""
        statuses: dict[TrialStatus, set[int]] = {}
        for trial in trials:
            steps, record = read_progress(self.progress_file(trial.index))
            future = self._futures.get(trial.index)
            if record is not None:
                status = {"completed": TrialStatus.COMPLETED,
                          "stopped": TrialStatus.EARLY_STOPPED}.get(record["status"],
                                                                    TrialStatus.FAILED)
                if record.get("reason") == INTERRUPTED:
                    status = TrialStatus.FAILED
            elif future is not None and not future.done():
                status = TrialStatus.RUNNING
            elif self.final_step is not None and steps and steps[-1][0] >= self.final_step:
                # The job died after reporting its final step, before its status line.
                status = TrialStatus.COMPLETED
            else:
                # No live job writes this file: the process that ran it is gone.
                # In case an orphaned job still runs.
                self.stop_file(trial.index).write_text(INTERRUPTED)
                status = TrialStatus.FAILED
            statuses.setdefault(status, set()).add(trial.index)
        return statuses

    def poll_exception(self, trial: BaseTrial) -> str:
        _, record = read_progress(self.progress_file(trial.index))
        if record is not None and (record.get("error") or record.get("reason")):
            return str(record.get("error") or record.get("reason"))
        return "The job ended without a final status (the process running it died)."

    def stop(self, trial: BaseTrial, reason: str | None = None) -> dict[str, Any]:
        """Ask the trial's job to stop after its current step."""
        Path(self.directory).mkdir(parents=True, exist_ok=True)
        self.stop_file(trial.index).write_text(reason or "")
        return {"stop_reason": reason}


def json_registries() -> tuple[dict, dict]:
    """Ax's JSON encoder and decoder registries, extended by ``CurveMetric`` and
    ``CurveRunner`` (for ``object_to_json`` / ``object_from_json``)."""
    _, encoders, decoders = register_metrics({CurveMetric: None})
    _, encoders, decoders = register_runners({CurveRunner: None}, encoder_registry=encoders,
                                             decoder_registry=decoders)
    return encoders, decoders


def registry_bundle() -> RegistryBundle:
    """Ax's storage ``RegistryBundle`` with ``CurveMetric`` and ``CurveRunner``, for
    ``StorageConfig(registry_bundle=...)``; needs SQLAlchemy (Ax's SQL storage)."""
    return RegistryBundle(metric_clss={CurveMetric: None}, runner_clss={CurveRunner: None})
