"""A deterministic in-process runner with the pause/resume protocol, for loop tests.

It implements the runner side of the protocol of ``gpar_bo.tuning.jobs`` /
``CurveRunner`` (``awaiting``, ``verdict``, ``resume``, ``paused``, Ax's ``run``,
``poll_trial_status``, ``poll_available_capacity``, ``stop``) without processes:
each ``poll_trial_status`` call is one epoch of time, in which every training job
trains one epoch of the toy problem's curve (``gpar_bo.synthetic.learning_curves``,
as ``train_toy_curves``) and writes it to its progress file in the jobs' format.
After a report a job awaits a verdict; after the final epoch it completes. Paused
jobs release their workers; queued jobs start when one is free.

It records every event and checks the protocol's invariants as it goes: no more
jobs hold workers than there are workers, no verdict for a job that is not
awaiting one, no resumption of a job that is not paused.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from ax.core.base_trial import BaseTrial, TrialStatus
from ax.storage.runner_registry import register_runners

from gpar_bo.synthetic import learning_curves
from gpar_bo.tuning.jobs import _append, create_progress_file, read_job
from gpar_bo.tuning.runner import CurveRunner, json_registries


class Crash(BaseException):
    """The tuning process dies (raised by the runner at ``crash_at_poll``)."""


class FakeRunner(CurveRunner):
    """See the module docstring.

    Args:
        train, directory, train_kwargs, max_workers, final_step: As ``CurveRunner``'s
            (``train_kwargs`` holds the toy job's ``epochs`` and ``noise_std``).
        resumable: Whether jobs accept a checkpoint directory (pausing otherwise
            is an error, as in the protocol).
        crash_at_poll: Raise :class:`Crash` at this poll, after copying the
            snapshot as it is at that moment to ``snapshot.json.crash``.
    """

    def __init__(self, train: str, directory: str, train_kwargs: Mapping[str, Any] | None = None,
                 max_workers: int = 2, final_step: float | None = None,
                 resumable: bool = True, crash_at_poll: int | None = None) -> None:
        super().__init__(train, directory, train_kwargs, max_workers=max_workers,
                         final_step=final_step)
        self.jobs_resumable = resumable
        self.crash_at_poll = crash_at_poll
        self.jobs: dict[int, dict[str, Any]] = {}
        self.events: list[tuple[str, int, int]] = []
        self.polls = 0
        self.epochs_trained = 0
        self.crashed = False

    @property
    def resumable(self) -> bool:
        return self.jobs_resumable

    # ------------------------------------------------------------ simulation
    def _curve(self, trial: BaseTrial) -> list[float]:
        p = trial.arms[0].parameters
        X = torch.tensor([[p["x1"], p["x2"]]], dtype=torch.double)
        epochs = int(self.train_kwargs.get("epochs", self.final_step))
        noise = float(self.train_kwargs.get("noise_std", 0.005))
        return learning_curves(X, range(1, epochs + 1), noise, seed=trial.index)[0].tolist()

    def _busy(self) -> int:
        return sum(job["state"] in ("training", "awaiting") for job in self.jobs.values())

    def _advance(self) -> None:
        """One epoch of time: queued jobs take free workers, training jobs train."""
        for index in sorted(self.jobs):
            job = self.jobs[index]
            if job["state"] == "queued" and self._busy() < self.max_workers:
                job["state"] = "training"
                _append(self.progress_file(index), {"started": {"pid": 0, "host": socket.gethostname()}})
        for index in sorted(self.jobs):
            job = self.jobs[index]
            if job["state"] != "training":
                continue
            job["step"] += 1
            self.epochs_trained += 1
            _append(self.progress_file(index), {"step": job["step"], "values": {
                "error": job["curve"][job["step"] - 1]}})
            if job["step"] >= len(job["curve"]):
                job["state"] = "completed"
                _append(self.progress_file(index), {"status": "completed"})
            else:
                job["state"] = "awaiting"
        assert self._busy() <= self.max_workers, "more jobs hold workers than there are"

    def _crash_now(self) -> None:
        snapshot = Path(self.directory).parent / "snapshot.json"
        snapshot.with_name("snapshot.json.crash").write_bytes(snapshot.read_bytes())
        self.crashed = True
        raise Crash

    # ------------------------------------------------------------ Ax runner
    def run(self, trial: BaseTrial) -> dict[str, Any]:
        Path(self.directory).mkdir(parents=True, exist_ok=True)
        arm = trial.arms[0]
        create_progress_file(self.progress_file(trial.index), {
            "trial": trial.index, "arm": arm.name, "parameters": dict(arm.parameters),
            "train": self.train, "train_kwargs": self.train_kwargs,
            "checkpoint_dir": str(self.checkpoint_dir(trial.index)) if self.resumable else None})
        self.jobs[trial.index] = {"state": "queued", "step": 0, "curve": self._curve(trial)}
        self.events.append(("start", trial.index, 0))
        return {"progress_file": str(self.progress_file(trial.index)),
                "verdict_file": str(self.verdict_file(trial.index))}

    def poll_available_capacity(self) -> int:
        queued = sum(job["state"] == "queued" for job in self.jobs.values())
        return max(self.max_workers - self._busy() - queued, 0)

    def poll_trial_status(self, trials: Iterable[BaseTrial]) -> dict[TrialStatus, set[int]]:
        trials = list(trials)
        if self.crash_at_poll is not None and self.polls == self.crash_at_poll:
            self._crash_now()
        self.polls += 1
        self._advance()
        statuses: dict[TrialStatus, set[int]] = {}
        for trial in trials:
            job = self.jobs.get(trial.index)
            if job is None:
                job = self._adopt(trial.index)
            status = {"completed": TrialStatus.COMPLETED, "stopped": TrialStatus.EARLY_STOPPED,
                      "failed": TrialStatus.FAILED}.get(job["state"], TrialStatus.RUNNING)
            statuses.setdefault(status, set()).add(trial.index)
        return statuses

    def _adopt(self, index: int) -> dict[str, Any]:
        """A job of an earlier tuning process: paused if its file says so (the
        reconciliation pauses dead resumable jobs), else it died with that process
        (no job of this runner writes its file)."""
        lines = [json.loads(line) for line in self.progress_file(index).read_text().splitlines()]
        last = [r for r in lines if "status" in r or "started" in r]
        record = read_job(self.progress_file(index))
        if last and last[-1].get("status") == "paused":
            job = {"state": "paused", "step": len(record.steps), "curve": None}
        elif record.status is not None and record.status.get("status") == "completed":
            job = {"state": "completed", "step": len(record.steps), "curve": None}
        else:
            job = {"state": "failed", "step": len(record.steps), "curve": None}
            if not last or "status" not in last[-1]:
                _append(self.progress_file(index), {"status": "failed",
                                                    "reason": "interrupted"})
        self.jobs[index] = job
        return job

    def poll_exception(self, trial: BaseTrial) -> str:
        return "interrupted"

    def stop(self, trial: BaseTrial, reason: str | None = None) -> dict[str, Any]:
        self.verdict(trial, "stop", reason)
        return {"stop_reason": reason}

    def shutdown(self, stop_running: bool = True) -> None:
        if self.crashed:
            return  # a killed process does nothing more
        for index, job in self.jobs.items():
            if job["state"] in ("training", "awaiting", "queued"):
                job["state"] = "failed"
                _append(self.progress_file(index), {"status": "failed", "reason": "interrupted"})

    # ------------------------------------------------------------ protocol
    def awaiting(self, trials: Iterable[BaseTrial]) -> dict[int, float]:
        return {t.index: float(self.jobs[t.index]["step"]) for t in trials
                if self.jobs.get(t.index, {}).get("state") == "awaiting"}

    def paused(self, trials: Iterable[BaseTrial]) -> set[int]:
        return {t.index for t in trials if self.jobs.get(t.index, {}).get("state") == "paused"}

    def verdict(self, trial: BaseTrial, verdict: str, reason: str | None = None) -> None:
        job = self.jobs[trial.index]
        if job["state"] == "paused" and verdict == "stop":  # as CurveRunner: no job to tell
            job["state"] = "stopped"
            _append(self.progress_file(trial.index), {"status": "stopped",
                                                      "reason": reason or ""})
            self.events.append((verdict, trial.index, job["step"]))
            return
        assert job["state"] == "awaiting", f"verdict {verdict} for a {job['state']} job"
        if verdict == "continue":
            job["state"] = "training"
        elif verdict == "pause":
            if not self.resumable:
                raise ValueError(f"trial {trial.index}'s job takes no checkpoint directory.")
            job["state"] = "paused"
            _append(self.progress_file(trial.index), {"status": "paused", "step": job["step"]})
        elif verdict == "stop":
            job["state"] = "stopped"
            _append(self.progress_file(trial.index), {"status": "stopped",
                                                      "reason": reason or ""})
        else:
            raise ValueError(f"Unknown verdict {verdict!r}.")
        self.events.append((verdict, trial.index, job["step"]))

    def resume(self, trial: BaseTrial) -> None:
        job = self.jobs[trial.index]
        if job["state"] != "paused":
            raise ValueError(f"Trial {trial.index} is not paused ({job['state']}).")
        if job["curve"] is None:  # adopted after a crash: the checkpoint holds the rest
            job["curve"] = self._curve(trial)
        job["state"] = "queued"
        self.events.append(("resume", trial.index, job["step"]))


def fake_registries() -> tuple[dict, dict]:
    """``json_registries`` with ``FakeRunner`` too (for the snapshot)."""
    encoders, decoders = json_registries()
    _, encoders, decoders = register_runners({FakeRunner: None}, encoder_registry=encoders,
                                             decoder_registry=decoders)
    return encoders, decoders


__all__ = ["Crash", "FakeRunner", "fake_registries"]
