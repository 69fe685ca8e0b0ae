r"""An Ax runner and metric for training runs that report learning curves.

``CurveRunner`` starts each trial as a job (:mod:`gpar_bo.tuning.jobs`) in a local
process pool (default: trials run in parallel) or on a ``dask.distributed``
cluster (a ``LocalCluster``, or an existing scheduler by address). After each
checkpoint a job waits for a verdict (continue, pause or stop) that the tuning loop
gives through :meth:`CurveRunner.verdict`; :meth:`CurveRunner.awaiting` lists the jobs
waiting, :meth:`CurveRunner.paused` the paused ones and :meth:`CurveRunner.resume`
starts a paused job again from its checkpoint. ``CurveMetric`` reads a trial's
progress file and returns its full prefix, one row per step, while the trial runs
(``is_available_while_running``), which is what GPAR and
``GPAREarlyStoppingStrategy`` need.

Trial status comes from the progress file's latest status line. A paused trial is
RUNNING for Ax (it is not finished) but holds no worker. A running trial that no
live job of this runner owns (the tuning process was restarted) or whose job died
without a final line is reported FAILED, so a resumed loop carries on
(:func:`gpar_bo.tuning.recovery.reconcile` first turns such trials of resumable jobs
into paused ones, which resume from their last checkpoint).

Ax's own ``Orchestrator`` gives no verdicts: use
:class:`gpar_bo.tuning.orchestrator.VerdictOrchestrator`, or
``CurveRunner(..., verdict_timeout=None)`` for jobs that do not wait for verdicts.

For Ax's JSON storage, pass :func:`json_registries` to ``object_to_json`` /
``object_from_json``; for SQL storage (with SQLAlchemy installed),
``StorageConfig(registry_bundle=registry_bundle())``.
"""

from __future__ import annotations

import functools
import math
import multiprocessing
import os
import time
from collections.abc import Iterable, Mapping, Sequence
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
    DEFAULT_VERDICT_TIMEOUT,
    INTERRUPTED,
    VERDICTS,
    JobRecord,
    accepts_checkpoint_dir,
    append_status,
    create_progress_file,
    exit_with_parent,
    is_interrupted,
    read_job,
    read_progress,
    read_verdict,
    resolve,
    run_training_job,
    write_verdict,
)

__all__ = ["INTERRUPTED", "CurveMetric", "CurveRunner", "json_registries", "registry_bundle"]


@functools.lru_cache(maxsize=None)
def _worker_context(train: str) -> multiprocessing.context.BaseContext:
    """How local workers start: forked from a fresh server process that imported torch
    once (``forkserver``), else a fresh interpreter each (``spawn``).

    Never forked from the tuning process itself, which runs torch and Ax threads. The
    server is one per tuning process, so a worker starts without importing torch again.
    A job of this package (e.g. the MNIST MLP) is imported in the server too; a user's
    module is imported by each worker, as its import may have effects that must not be
    shared by forked workers (a CUDA context, threads) or may end the server.
    """
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    # Takes effect when the server starts (the first pool of this process).
    module = train.partition(":")[0]
    own = [module] if module.startswith("gpar_bo.") else []
    context.set_forkserver_preload(["torch", "gpar_bo.tuning.jobs", *own])
    return context


@functools.lru_cache(maxsize=None)
def _is_resumable(train: str) -> bool:
    # Cached per function, not on the runner: Ax compares runners by their attributes.
    return accepts_checkpoint_dir(resolve(train))


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
        # Ax marks a trial EARLY_STOPPED when it asks it to stop; a job that was not
        # waiting for a verdict (verdict_timeout=None, or a stop decided while it
        # trained) reports the epoch in progress first: keep fetching so that epoch
        # reaches the model and the budget.
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
            tuning process ending) arrived while it trained that step, and awaits
            no verdict after it.
        verdict_timeout: Seconds a job waits for its verdict after each checkpoint
            before it pauses (a job that cannot pause stops, as interrupted). None:
            jobs do not wait; a stop or pause reaches them at their next report
            (for Ax's plain ``Orchestrator``, which gives no verdicts).
        checkpoints: The steps at which jobs record their values, save their state
            and wait for verdicts, e.g. ``[1, 3, 7, 14, 21]``; reports at other steps
            are not recorded. None: every step reported.

    A training function that accepts a ``checkpoint_dir`` keyword is resumable: its
    job gets ``directory/trial_<i>/`` and can be paused and resumed
    (:mod:`gpar_bo.tuning.jobs`). Others can be stopped, not paused.
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
        verdict_timeout: float | None = DEFAULT_VERDICT_TIMEOUT,
        checkpoints: Sequence[float] | None = None,
    ) -> None:
        if verdict_timeout is not None and not verdict_timeout > 0:
            raise ValueError(
                f"verdict_timeout must be > 0 seconds or None, got {verdict_timeout}.")
        if checkpoints is not None:
            steps = [float(c) for c in checkpoints]
            if not steps or not all(math.isfinite(c) for c in steps) or any(
                    a >= b for a, b in zip(steps, steps[1:])):
                raise ValueError(f"checkpoints must be increasing finite steps, got {checkpoints}.")
            if final_step is not None and float(final_step) != steps[-1]:
                raise ValueError(f"the last checkpoint must be final_step {final_step}, got "
                                 f"{checkpoints}.")
        self.train = train
        self.directory = str(directory)
        self.train_kwargs = dict(train_kwargs or {})
        self.max_workers = max_workers
        self.use_dask = use_dask
        self.scheduler_address = scheduler_address
        self.final_step = final_step
        self.verdict_timeout = verdict_timeout
        self.checkpoints = None if checkpoints is None else [float(c) for c in checkpoints]
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
                self._executor = ProcessPoolExecutor(
                    self.max_workers, mp_context=_worker_context(self.train),
                    initializer=exit_with_parent, initargs=(os.getpid(),))
        return self._executor

    def shutdown(self, stop_running: bool = True) -> None:
        """Stop the executor; by default running jobs end after their current step:
        resumable ones pause (a resumed experiment resumes them), others stop and are
        reported FAILED (interrupted) if the experiment is resumed."""
        if stop_running:
            resumable = self.resumable
            for index, future in self._futures.items():
                given = read_verdict(self.verdict_file(index)) or {}
                # A stop (or pause) the job has not read yet stands: Ax already counts
                # the trial as stopped.
                if not future.done() and given.get("verdict") not in ("stop", "pause"):
                    write_verdict(self.verdict_file(index), None,
                                  "pause" if resumable else "stop", INTERRUPTED)
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

    def verdict_file(self, index: int) -> Path:
        """The verdict file of trial ``index``."""
        return Path(self.directory) / f"trial_{index}.verdict"

    def checkpoint_dir(self, index: int) -> Path:
        """The checkpoint directory of trial ``index`` (used if the job is resumable)."""
        return Path(self.directory) / f"trial_{index}"

    @property
    def resumable(self) -> bool:
        """Whether ``train`` accepts a ``checkpoint_dir`` (its jobs can pause)."""
        return _is_resumable(self.train)

    def _live(self, index: int) -> bool:
        future = self._futures.get(index)
        return future is not None and not future.done()

    def _submit(self, index: int, args: tuple) -> None:
        executor = self._get_executor()
        if self.use_dask:
            # A key per run: a resumed job is a new task.
            future = executor.submit(run_training_job, *args, pure=False,
                                     key=f"gpar-bo-trial-{index}-{id(self)}-{time.time_ns()}")
        else:
            future = executor.submit(run_training_job, *args)
        self._futures[index] = future

    def _job_args(self, index: int, parameters: Mapping[str, Any],
                  checkpoint_dir: str | None) -> tuple:
        return (self.train, self.train_kwargs, dict(parameters), index,
                str(self.progress_file(index)), str(self.verdict_file(index)), self.final_step,
                checkpoint_dir, self.verdict_timeout, self.checkpoints)

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
        progress, verdicts = self.progress_file(trial.index), self.verdict_file(trial.index)
        arm = trial.arms[0]
        checkpoint_dir = str(self.checkpoint_dir(trial.index)) if self.resumable else None
        header = {"trial": trial.index, "arm": arm.name, "parameters": dict(arm.parameters),
                  "train": self.train, "train_kwargs": self.train_kwargs,
                  "checkpoints": self.checkpoints, "checkpoint_dir": checkpoint_dir}
        try:
            create_progress_file(progress, header)
        except FileExistsError:
            raise RuntimeError(
                f"Refusing to start trial {trial.index}: its progress file {progress} "
                "already exists and records an earlier job, which is never overwritten."
            ) from None
        verdicts.unlink(missing_ok=True)  # no job of this index ever ran: a stray file
        self._submit(trial.index, self._job_args(trial.index, arm.parameters, checkpoint_dir))
        return {"progress_file": str(progress), "verdict_file": str(verdicts),
                "checkpoint_dir": checkpoint_dir}

    def poll_available_capacity(self) -> int:
        """Workers free: a job waiting for its verdict holds its worker, a paused one does
        not, and neither does one told to stop or pause.

        A job told to stop or pause is over for Ax (its trial may already be
        EARLY_STOPPED) and ends at its next report, at once if it waits; counting it
        busy could leave Ax with no running trial and no capacity. A job started
        meanwhile waits in the executor's queue for that worker.
        """
        busy = sum(not future.done() and not self._ending(index)
                   for index, future in self._futures.items())
        return max(self.max_workers - busy, 0)

    def _ending(self, index: int) -> bool:
        verdict = read_verdict(self.verdict_file(index))
        return verdict is not None and verdict.get("verdict") in ("stop", "pause")

    # ------------------------------------------------------ pause and resume
    def _awaited_step(self, index: int, job: JobRecord) -> float | None:
        """The step trial ``index``'s live job waits after, or None."""
        if self.verdict_timeout is None or not self._live(index) or job.status is not None:
            return None
        if job.run_steps == 0:
            return None  # the latest run has not reported yet: it trains
        step = job.last_step
        if self.final_step is not None and step >= self.final_step:
            return None
        verdict = read_verdict(self.verdict_file(index))
        if verdict is not None and (verdict.get("verdict") in ("stop", "pause") or (
                verdict.get("step") is not None and float(verdict["step"]) >= step)):
            return None  # answered: the job trains on or is ending
        return step

    def training(self, trials: Iterable[BaseTrial]) -> set[int]:
        """The trials whose job trains: live and not waiting for a verdict (its data ends
        a checkpoint short of the one it reports next). Empty when jobs await no
        verdicts (``verdict_timeout=None``): then every live job trains."""
        if self.verdict_timeout is None:
            return set()
        return {trial.index for trial in trials if self._live(trial.index) and self._awaited_step(
            trial.index, read_job(self.progress_file(trial.index))) is None}

    def awaiting(self, trials: Iterable[BaseTrial]) -> dict[int, float]:
        """Trial index -> step, for the trials whose job waits for a verdict after that
        step (it reported the step and trains no further until :meth:`verdict`)."""
        found = {}
        for trial in trials:
            step = self._awaited_step(trial.index, read_job(self.progress_file(trial.index)))
            if step is not None:
                found[trial.index] = step
        return found

    def verdict(self, trial: BaseTrial, verdict: str, reason: str | None = None) -> bool:
        """Give trial ``trial``'s job its verdict: ``"continue"``, ``"pause"`` or ``"stop"``.

        A waiting job acts on it at once; a job that trains acts on a pause or stop at
        its next report (a continue then counts for nothing). A stop for a paused
        trial records it stopped in its progress file (no job runs to do it).

        Returns:
            Whether the job was waiting for a verdict (False: it trains, is paused,
            or has finished).

        Raises:
            ValueError: ``verdict`` is not one of ``VERDICTS``, or a pause for a job
                that cannot pause (its function takes no ``checkpoint_dir``).
        """
        if verdict not in VERDICTS:
            raise ValueError(f"A verdict is one of {VERDICTS}, not {verdict!r}.")
        Path(self.directory).mkdir(parents=True, exist_ok=True)
        job = read_job(self.progress_file(trial.index))
        if verdict == "pause" and not (job.resumable if job.header else self.resumable):
            raise ValueError(
                f"Trial {trial.index}'s job cannot pause: {self.train} takes no "
                "'checkpoint_dir' keyword (it can be stopped, not paused).")
        step = self._awaited_step(trial.index, job)
        if job.paused and not self._live(trial.index):
            if verdict == "stop":
                append_status(self.progress_file(trial.index), {
                    "status": "stopped", "step": job.last_step, "reason": reason or ""})
            return False
        write_verdict(self.verdict_file(trial.index),
                      step if step is not None else job.last_step, verdict, reason)
        return step is not None

    def paused(self, trials: Iterable[BaseTrial]) -> set[int]:
        """The trials whose job is paused (resumable, and not resumed yet)."""
        return {trial.index for trial in trials
                if not self._live(trial.index)
                and (job := read_job(self.progress_file(trial.index))).paused
                and job.resumable}

    def resume(self, trial: BaseTrial) -> None:
        """Start a paused trial's job again; it continues from its checkpoint.

        Its new run appends to the same progress file and waits for verdicts as before.

        Raises:
            ValueError: The trial is not paused (it runs, finished, or never started)
                or its job cannot resume (no checkpoint directory).
        """
        job = read_job(self.progress_file(trial.index))
        if self._live(trial.index) or not job.paused:
            state = ("running" if self._live(trial.index) else
                     "not started" if job.header is None else
                     (job.status or {}).get("status", "running or interrupted"))
            raise ValueError(f"Trial {trial.index} is not paused ({state}); only a paused "
                             "trial can be resumed.")
        if not job.resumable:
            raise ValueError(f"Trial {trial.index}'s job has no checkpoint directory; it "
                             "cannot resume.")
        # A verdict of the run that paused must not end the new one.
        self.verdict_file(trial.index).unlink(missing_ok=True)
        self._submit(trial.index, self._job_args(trial.index, job.header["parameters"],
                                                 job.header["checkpoint_dir"]))

    def poll_trial_status(self, trials: Iterable[BaseTrial]) -> dict[TrialStatus, set[int]]:
        """Status from each progress file: a paused trial is RUNNING; orphaned or
        crashed jobs are FAILED."""
        statuses: dict[TrialStatus, set[int]] = {}
        for trial in trials:
            steps, record = read_progress(self.progress_file(trial.index))
            future = self._futures.get(trial.index)
            if record is not None:
                status = {"completed": TrialStatus.COMPLETED,
                          "stopped": TrialStatus.EARLY_STOPPED,
                          "paused": TrialStatus.RUNNING}.get(record["status"],
                                                             TrialStatus.FAILED)
                if record["status"] == "stopped" and is_interrupted(record.get("reason")):
                    status = TrialStatus.FAILED
            elif future is not None and not future.done():
                status = TrialStatus.RUNNING
            elif self.final_step is not None and steps and steps[-1][0] >= self.final_step:
                # The job died after reporting its final step, before its status line.
                status = TrialStatus.COMPLETED
            else:
                # No live job writes this file: the process that ran it is gone.
                # In case an orphaned job still runs.
                write_verdict(self.verdict_file(trial.index), None, "stop", INTERRUPTED)
                status = TrialStatus.FAILED
            statuses.setdefault(status, set()).add(trial.index)
        return statuses

    def poll_exception(self, trial: BaseTrial) -> str:
        _, record = read_progress(self.progress_file(trial.index))
        if record is not None and (record.get("error") or record.get("reason")):
            return str(record.get("error") or record.get("reason"))
        return "The job ended without a final status (the process running it died)."

    def stop(self, trial: BaseTrial, reason: str | None = None) -> dict[str, Any]:
        """Give the trial's job a "stop" verdict: a waiting job stops at once, trains
        no further epoch; a training one after its current step."""
        self.verdict(trial, "stop", reason or "")
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
