"""Freeze-thaw on real job processes (``CurveRunner``, the resumable toy job):
pauses and resumptions happen, the budget holds, ``kill -9`` loses nothing, paused
runs outlive the budget, and the same holds on a dask cluster."""

from __future__ import annotations

import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from ax.core.base_trial import BaseTrial
from ax.core.trial_status import TrialStatus

from gpar_bo.freeze_thaw import Decision, FreezeThawPolicy
from gpar_bo.problems.toy import toy_problem, train_toy_curves
from gpar_bo.tuning.jobs import JobRecord, load_checkpoint, read_job
from gpar_bo.tuning.loop import tune
from gpar_bo.tuning.snapshot import load_snapshot
from tests.fork_server import ForkServer
from tests.helpers import without_bands

EPOCHS, BUDGET, SECONDS = 4, 18, 0.1
#: The processes, not the quality of GPAR's fits, are under test: fits get a small budget.
RUN = {"workers": 2, "poll_seconds": 0.1, "progress": False,
       "fit_kwargs": {"optimizer_kwargs": {"options": {"maxiter": 20}}}}


def _jobs(out: Path) -> dict[int, object]:
    return {int(p.stem.split("_")[1]): read_job(p) for p in (out / "runs").glob("trial_*.jsonl")}


@pytest.mark.long
def test_kill_9_then_rerun_resumes_paused_and_interrupted_runs_within_the_budget(
    tmp_path: Path, fork_server: ForkServer,
) -> None:
    out = tmp_path / "out"
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(f"""
        import sys, torch
        from gpar_bo.problems.toy import toy_problem
        from gpar_bo.tuning.loop import tune
        if __name__ == "__main__":
            torch.set_num_threads(1)
            tune(toy_problem({EPOCHS}, {SECONDS}), sys.argv[1], {BUDGET}, **{RUN!r})
    """))
    # Forked after the heavy imports (tests/fork_server.py), in a session of its own, so
    # that killing it takes its workers down too (a crash).
    process = fork_server.start(path=script, argv=[out], log=tmp_path / "tune.log")
    try:
        # Generous, as in test_crash_safety: on a loaded 2-core machine the process and
        # its workers take a minute to start.
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            time.sleep(0.2)
            jobs = _jobs(out) if (out / "runs").exists() else {}
            # Killed once some run was paused and some job is between checkpoints.
            if any(j.paused for j in jobs.values()) and any(
                    j.status is None and j.steps and j.last_step < EPOCHS - 1
                    for j in jobs.values()):
                break
        else:
            pytest.fail("the tuning process paused no run")
    finally:
        process.kill_group()
        process.wait()
    time.sleep(1.5)  # the workers notice their parent is gone (exit_with_parent)
    before, _ = load_snapshot(out / "snapshot.json")
    files = {p.name: p.read_text() for p in (out / "runs").glob("trial_*.jsonl")}
    # Died between checkpoints (one that reported its final epoch is complete).
    interrupted = {i for i, j in _jobs(out).items()
                   if j.status is None and j.steps and j.last_step < EPOCHS}
    assert interrupted

    report = tune(toy_problem(EPOCHS, SECONDS), out, BUDGET, **RUN)

    after, _ = load_snapshot(out / "snapshot.json")
    jobs = _jobs(out)
    assert set(before.trials) <= set(after.trials) == set(jobs)
    for name, text in files.items():  # appended to, never rewritten
        assert (out / "runs" / name).read_text().startswith(text)
    for index, job in jobs.items():
        steps = [int(s) for s, _ in job.steps]
        # Resumed at the epoch after its checkpoint: none lost, none trained twice.
        assert steps == list(range(1, len(steps) + 1)) and len(steps) <= EPOCHS
        assert after.trials[index].status != TrialStatus.FAILED
    for index in interrupted:  # died between checkpoints, came back paused
        assert jobs[index].runs >= 2 or jobs[index].status["status"] == "paused"
        assert '"reason": "interrupted' in (out / "runs" / f"trial_{index}.jsonl").read_text()
    # Pausing and resuming actually happened, before and after the crash.
    assert any(job.runs >= 2 for job in jobs.values())
    assert sum(len(job.steps) for job in jobs.values()) == report["epochs_trained"] <= BUDGET
    # The run ended by its budget: no job runs; unfinished ones stay paused (RUNNING).
    for index, trial in after.trials.items():
        assert trial.status in (TrialStatus.COMPLETED, TrialStatus.RUNNING)
        assert jobs[index].status["status"] == (
            "completed" if trial.status == TrialStatus.COMPLETED else "paused")



def _toy_curve(trial: BaseTrial, epochs: int = EPOCHS) -> list[float]:
    """The toy job's curve for ``trial``, from one uninterrupted run of the job."""
    values: list[float] = []
    train_toy_curves(trial.arms[0].parameters,
                     lambda step, v: values.append(v["error"]) or False, trial.index,
                     epochs=epochs)
    return values


def _check_curves(out: Path, budget: int, report: dict) -> dict[int, JobRecord]:
    """Every trial's file holds epochs 1..k once each with the job's uninterrupted
    values, and the epochs trained are the report's and within ``budget``."""
    experiment, _ = load_snapshot(out / "snapshot.json")
    jobs = _jobs(out)
    assert set(jobs) == set(experiment.trials)
    for index, job in jobs.items():
        steps = [int(s) for s, _ in job.steps]
        assert steps == list(range(1, len(steps) + 1))
        assert [v["error"] for _, v in job.steps] == pytest.approx(
            _toy_curve(experiment.trials[index])[:len(steps)], rel=1e-12)
    assert sum(len(job.steps) for job in jobs.values()) == report["epochs_trained"] <= budget
    return jobs


def _resuming(decide: Callable[..., Decision]) -> Callable[..., Decision]:
    """``decide`` that resumes the first held run when the policy would start a new one."""

    def resume_first(self: FreezeThawPolicy, X, Y, paused, *args, **kwargs) -> Decision:
        decision = decide(self, X, Y, paused, *args, **kwargs)
        if decision.action == "start" and paused.any():
            return Decision("resume", int(paused.nonzero()[0]), "test: resume first")
        return decision

    return resume_first


def test_paused_runs_outlive_the_budget_and_resume_from_their_checkpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    out, problem = tmp_path / "out", toy_problem(EPOCHS)
    first = tune(problem, out, 12, **RUN)
    jobs = _check_curves(out, 12, first)
    experiment, _ = load_snapshot(out / "snapshot.json")
    paused = {i for i, t in experiment.trials.items() if t.status == TrialStatus.RUNNING}
    assert paused, "the budget should end with paused runs"
    for index in paused:  # paused, with the checkpoint of its last reported epoch
        assert jobs[index].paused and jobs[index].status["step"] == jobs[index].last_step
        assert load_checkpoint(out / "runs" / f"trial_{index}") == {
            "epoch": int(jobs[index].last_step)}
    assert {t["index"] for t in first["trials"] if t["status"] == "paused"} == paused
    files = {p: p.read_bytes() for p in (out / "runs").rglob("*") if p.is_file()}

    # The same budget: nothing to do; no file changes and the report is the same.
    assert without_bands(tune(problem, out, 12, **RUN)) == without_bands(first)
    assert {p: p.read_bytes() for p in (out / "runs").rglob("*") if p.is_file()} == files

    # A larger budget: some paused run is resumed from its checkpoint and goes on at the
    # next epoch, with the values of a run never paused. Whether GPAR prefers a paused
    # run to a new one is the policy's call (tested in tests/freeze_thaw/test_policy.py); here
    # it is made to, so that the test is about the resumption, not about that call.
    monkeypatch.setattr(FreezeThawPolicy, "decide", _resuming(FreezeThawPolicy.decide))
    more = tune(problem, out, 20, **RUN)
    after = _check_curves(out, 20, more)
    resumed = {i for i in paused if after[i].runs > jobs[i].runs}
    assert resumed, "the policy resumed no paused run"
    assert all(len(after[i].steps) > len(jobs[i].steps) for i in resumed)


@pytest.mark.long
def test_runs_are_recorded_paused_and_resumed_at_their_checkpoints_only(tmp_path: Path) -> None:
    out, problem = tmp_path / "out", toy_problem(6)
    problem.checkpoint_epochs = [2, 6]  # the job reports every epoch
    report = tune(problem, out, 24, **RUN)
    experiment, _ = load_snapshot(out / "snapshot.json")
    jobs = _jobs(out)
    assert report["settings"]["checkpoints"] == [2, 6]
    for index, job in jobs.items():
        assert [int(s) for s, _ in job.steps] in ([2], [2, 6])
        assert [v["error"] for _, v in job.steps] == pytest.approx(
            [_toy_curve(experiment.trials[index], 6)[int(s) - 1] for s, _ in job.steps], rel=1e-12)
        if job.paused:  # with its state after epoch 2, not after an epoch between
            assert job.status["step"] == 2.0
            assert load_checkpoint(out / "runs" / f"trial_{index}") == {"epoch": 2}
    # Some run paused at epoch 2: it is still paused, or it was resumed from there (the
    # warm-up screens more settings than there are workers). Whether any is still paused
    # at the end depends on timing: near the end the policy trains only runs that can
    # finish.
    assert any(job.paused or job.runs > 1 for job in jobs.values())
    assert any(job.status == {"status": "completed"} for job in jobs.values())
    assert report["epochs_trained"] == sum(int(job.last_step) for job in jobs.values()) <= 24


def test_dask_workers_pause_and_resume_runs(tmp_path: Path) -> None:
    """Freeze-thaw on a dask cluster: pausing and resuming lose and repeat no epoch, and
    the budget holds.

    The cluster's workers are threads of this process (``processes=False``: no worker
    start-up); the runner's code is that of any scheduler address (a resumed job is a
    new task, files carry the state). The runner's own process ``LocalCluster`` is
    tested in ``test_runner.py``.
    """
    distributed = pytest.importorskip("distributed")
    out = tmp_path / "out"
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        report = tune(toy_problem(EPOCHS), out, 12, use_dask=True,
                      scheduler_address=cluster.scheduler_address, **RUN)
    jobs = _check_curves(out, 12, report)
    assert any(job.runs >= 2 for job in jobs.values()), "no run was paused and resumed"
