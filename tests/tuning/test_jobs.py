"""The job protocol: verdicts after each checkpoint, the timeout, pause and resume.

The job-level tests run ``run_training_job`` in a thread of this process, the test
playing the tuner through the verdict file; the runner-level test runs real worker
processes through ``CurveRunner``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from ax.api.utils.instantiation.from_string import optimization_config_from_string
from ax.core.arm import Arm
from ax.core.experiment import Experiment
from ax.core.search_space import SearchSpace
from ax.core.trial_status import TrialStatus

from gpar_bo.problems.toy import toy_problem, train_toy_curves
import gpar_bo.tuning.jobs as jobs_module
from gpar_bo.tuning.jobs import (
    accepts_checkpoint_dir,
    load_checkpoint,
    save_checkpoint,
    read_job,
    run_training_job,
    write_verdict,
)
from gpar_bo.tuning.runner import CurveMetric, CurveRunner

TOY = "gpar_bo.problems.toy:train_toy_curves"
PARAMETERS = {"x1": 0.3, "x2": 0.7}


def not_resumable(parameters: dict, report: Callable, trial_index: int, epochs: int = 3) -> None:
    """A job without a checkpoint directory: it can be stopped, not paused."""
    for epoch in range(1, epochs + 1):
        if report(epoch, {"error": 1.0 / epoch}):
            return


def _steps(path: Path) -> list[float]:
    return [step for step, _ in read_job(path).steps]


def _wait(condition: Callable[[], object], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def _start_job(tmp_path: Path, checkpoint: bool = True, timeout: float | None = 30.0,
               train: str = TOY, epochs: int = 4,
               checkpoints: list[int] | None = None) -> tuple[threading.Thread, dict]:
    result: dict = {}

    def run() -> None:
        result["status"] = run_training_job(
            train, {"epochs": epochs}, PARAMETERS, 5, str(tmp_path / "p.jsonl"),
            str(tmp_path / "p.verdict"), final_step=epochs,
            checkpoint_dir=str(tmp_path / "ckpt") if checkpoint else None,
            verdict_timeout=timeout, checkpoints=checkpoints)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, result


def _uninterrupted(tmp_path: Path, epochs: int = 4) -> list[tuple[float, dict]]:
    path = tmp_path / "reference.jsonl"
    run_training_job(TOY, {"epochs": epochs}, PARAMETERS, 5, str(path), str(tmp_path / "none"))
    return read_job(path).steps


def test_a_job_waits_for_each_verdict_and_trains_no_epoch_past_a_stop(tmp_path: Path) -> None:
    progress, verdicts = tmp_path / "p.jsonl", tmp_path / "p.verdict"
    thread, result = _start_job(tmp_path)
    _wait(lambda: _steps(progress) == [1.0], "epoch 1")
    time.sleep(0.3)
    assert _steps(progress) == [1.0]  # waiting: no epoch without a verdict
    write_verdict(verdicts, 1, "continue")
    _wait(lambda: _steps(progress) == [1.0, 2.0], "epoch 2")
    time.sleep(0.3)
    assert _steps(progress) == [1.0, 2.0]  # a continue counts for its step only
    write_verdict(verdicts, 2, "stop", "GPAR")
    thread.join(30)
    assert result["status"] == "stopped" and _steps(progress) == [1.0, 2.0]
    assert read_job(progress).status == {"status": "stopped", "step": 2.0, "reason": "GPAR"}


def test_a_job_killed_between_its_checkpoint_and_its_report_loses_no_epoch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    progress, checkpoints = tmp_path / "p.jsonl", tmp_path / "ckpt"
    progress.write_text('{"trial": 5}\n')
    append = jobs_module._append

    def killed_at_step_2(path, record):  # noqa: ANN001, ANN202
        if record.get("step") == 2:  # epoch 2's checkpoint is saved, its report not written
            raise SystemExit("killed")
        append(path, record)

    monkeypatch.setattr(jobs_module, "_append", killed_at_step_2)
    with pytest.raises(SystemExit):
        run_training_job(TOY, {"epochs": 4}, PARAMETERS, 5, str(progress), str(tmp_path / "v"),
                         final_step=4, checkpoint_dir=str(checkpoints))
    assert _steps(progress) == [1.0]
    monkeypatch.setattr(jobs_module, "_append", append)
    assert load_checkpoint(checkpoints) == {"epoch": 2}  # outside a job: the last state saved
    # The resumed job starts from epoch 1's checkpoint, the one its file reports.
    run_training_job(TOY, {"epochs": 4}, PARAMETERS, 5, str(progress), str(tmp_path / "v"),
                     final_step=4, checkpoint_dir=str(checkpoints))
    job = read_job(progress)
    assert job.steps == _uninterrupted(tmp_path) and job.status == {"status": "completed"}
    assert [p.name for p in checkpoints.iterdir()] == ["checkpoint-4.0.pt"]


def test_checkpoints_outside_a_job_load_what_was_saved_last(tmp_path: Path) -> None:
    assert load_checkpoint(None) is None and load_checkpoint(tmp_path / "none") is None
    save_checkpoint(tmp_path, {"epoch": 1, "w": torch.ones(2)})
    state = load_checkpoint(tmp_path)
    assert state["epoch"] == 1 and torch.equal(state["w"], torch.ones(2))


def test_no_verdict_within_the_timeout_pauses_and_a_job_that_cannot_pause_stops(
    tmp_path: Path,
) -> None:
    thread, result = _start_job(tmp_path, timeout=0.3)
    thread.join(30)
    job = read_job(tmp_path / "p.jsonl")
    assert result["status"] == "paused" and job.paused and _steps(tmp_path / "p.jsonl") == [1]
    assert job.status["reason"].startswith("interrupted: no verdict")
    assert [p.name for p in (tmp_path / "ckpt").iterdir()] == ["checkpoint-1.0.pt"]  # committed
    (tmp_path / "p.jsonl").unlink()
    thread, result = _start_job(tmp_path, checkpoint=False, timeout=0.3)
    thread.join(30)
    job = read_job(tmp_path / "p.jsonl")
    assert result["status"] == "stopped" and job.status["reason"].startswith("interrupted")


def test_pause_then_resume_gives_the_curve_of_a_run_never_paused(tmp_path: Path) -> None:
    progress, verdicts = tmp_path / "p.jsonl", tmp_path / "p.verdict"
    thread, result = _start_job(tmp_path)
    _wait(lambda: _steps(progress) == [1.0], "epoch 1")
    write_verdict(verdicts, 1, "continue")
    _wait(lambda: _steps(progress) == [1.0, 2.0], "epoch 2")
    write_verdict(verdicts, 2, "pause")
    thread.join(30)
    assert result["status"] == "paused"
    assert read_job(progress).status == {"status": "paused", "step": 2.0, "reason": None}
    verdicts.unlink()  # what CurveRunner.resume does before it starts the job again
    thread, result = _start_job(tmp_path, timeout=None)
    thread.join(30)
    job = read_job(progress)
    assert result["status"] == "completed" and job.runs == 2 and job.run_steps == 2
    assert job.steps == _uninterrupted(tmp_path)  # epochs 1..4, once each, same values


def test_a_job_records_and_waits_at_its_checkpoints_only(tmp_path: Path) -> None:
    progress = tmp_path / "p.jsonl"
    # Epoch 1 is not a checkpoint: the job trains on, and waits (in vain) after epoch 2.
    thread, result = _start_job(tmp_path, timeout=0.3, checkpoints=[2, 4])
    thread.join(30)
    job = read_job(progress)
    assert result["status"] == "paused" and job.status["step"] == 2.0 and _steps(progress) == [2]
    assert [p.name for p in (tmp_path / "ckpt").iterdir()] == ["checkpoint-2.0.pt"]
    thread, result = _start_job(tmp_path, timeout=None, checkpoints=[2, 4])  # resumed
    thread.join(30)
    reference = dict(_uninterrupted(tmp_path))
    assert result["status"] == "completed"
    assert read_job(progress).steps == [(2.0, reference[2.0]), (4.0, reference[4.0])]


def test_resumability_is_the_checkpoint_dir_keyword() -> None:
    assert accepts_checkpoint_dir(train_toy_curves)
    assert not accepts_checkpoint_dir(not_resumable)
    assert not accepts_checkpoint_dir(lambda parameters, report, trial_index, **kw: None)


def _experiment(directory: Path, train: str = TOY, **kwargs) -> Experiment:
    runner = CurveRunner(train, str(directory), {"epochs": 4}, max_workers=1, final_step=4,
                         **kwargs)
    return Experiment(name="toy", search_space=SearchSpace(toy_problem(4).parameters),
                      optimization_config=optimization_config_from_string("-error"),
                      metrics=[CurveMetric("error")], runner=runner)


def test_the_runner_pauses_frees_the_worker_and_resumes(tmp_path: Path) -> None:
    experiment = _experiment(tmp_path)
    runner = experiment.runner
    trial = experiment.new_trial().add_arm(Arm(PARAMETERS))
    other = experiment.new_trial().add_arm(Arm({"x1": 0.9, "x2": 0.1}))
    with pytest.raises(ValueError, match="is not paused"):
        runner.resume(trial)  # never started
    with pytest.raises(ValueError, match="one of"):
        runner.verdict(trial, "halt")
    try:
        trial.run()
        trial.mark_running(no_runner_required=True)
        header = read_job(runner.progress_file(trial.index)).header
        assert header["checkpoint_dir"] == str(tmp_path / f"trial_{trial.index}")
        _wait(lambda: runner.awaiting([trial, other]) == {trial.index: 1.0}, "a verdict wait")
        assert runner.poll_available_capacity() == 0  # a waiting job holds its worker
        assert runner.verdict(trial, "continue")
        _wait(lambda: runner.awaiting([trial]) == {trial.index: 2.0}, "the wait after epoch 2")
        assert runner.verdict(trial, "pause")
        assert runner.poll_available_capacity() == 1  # told to pause: over for Ax
        _wait(lambda: runner.paused([trial]) == {trial.index}, "the pause")
        assert runner.poll_trial_status([trial]) == {TrialStatus.RUNNING: {trial.index}}
        assert runner.poll_available_capacity() == 1  # a paused one does not
        assert runner.awaiting([trial]) == {}
        with pytest.raises(ValueError, match="is not paused"):
            runner.resume(other)
        runner.resume(trial)
        assert runner.paused([trial]) == set()  # resumed once, not twice
        with pytest.raises(ValueError, match="is not paused"):
            runner.resume(trial)
        _wait(lambda: runner.awaiting([trial]) == {trial.index: 3.0}, "the resumed run's wait")
        runner.verdict(trial, "continue")  # epoch 4 is final: no verdict awaited
        _wait(lambda: runner.poll_trial_status([trial]).get(TrialStatus.COMPLETED), "the end")
    finally:
        runner.shutdown()
    job = read_job(runner.progress_file(trial.index))
    assert job.runs == 2  # one pause, one resume
    reference = tmp_path / "reference.jsonl"
    run_training_job(TOY, {"epochs": 4}, PARAMETERS, trial.index, str(reference),
                     str(tmp_path / "none"))
    assert job.steps == read_job(reference).steps


def test_a_job_that_cannot_pause_is_refused_a_pause(tmp_path: Path) -> None:
    experiment = _experiment(tmp_path, train="tests.tuning.test_jobs:not_resumable")
    trial = experiment.new_trial().add_arm(Arm(PARAMETERS))
    with pytest.raises(ValueError, match="cannot pause.*checkpoint_dir"):
        experiment.runner.verdict(trial, "pause")
    experiment.runner.verdict(trial, "stop", "r")  # stopping is fine
    verdict = json.loads(experiment.runner.verdict_file(trial.index).read_text())
    assert verdict == {"step": None, "verdict": "stop", "reason": "r"}


def test_a_stop_for_a_paused_trial_is_recorded_in_its_file(tmp_path: Path) -> None:
    experiment = _experiment(tmp_path)
    runner = experiment.runner
    trial = experiment.new_trial().add_arm(Arm(PARAMETERS))
    path = runner.progress_file(trial.index)
    path.write_text("".join(json.dumps(r) + "\n" for r in [
        {"trial": 0, "arm": "0_0", "parameters": PARAMETERS, "train": TOY,
         "train_kwargs": {"epochs": 4}, "checkpoint_dir": str(tmp_path / "trial_0")},
        {"started": {"pid": 1, "host": "h"}}, {"step": 1, "values": {"error": 0.5}},
        {"status": "paused", "step": 1}]))
    assert runner.paused([trial]) == {0}
    assert runner.verdict(trial, "stop", "GPAR") is False  # no job waited for it
    assert read_job(path).status == {"status": "stopped", "step": 1.0, "reason": "GPAR"}
    assert runner.poll_trial_status([trial]) == {TrialStatus.EARLY_STOPPED: {0}}
    assert runner.paused([trial]) == set()


def test_shutdown_keeps_a_stop_the_job_has_not_read_yet(tmp_path: Path) -> None:
    experiment = _experiment(tmp_path)
    runner = experiment.runner
    trial = experiment.new_trial().add_arm(Arm(PARAMETERS))
    trial.run()
    try:
        _wait(lambda: runner.awaiting([trial]) == {trial.index: 1.0}, "a verdict wait")
        time.sleep(1.0)  # the job now reads its verdict file every 0.2 s
        runner.stop(trial, "GPAR")
    finally:
        runner.shutdown()  # at once: Ax marks the trial stopped as soon as stop() returns
    job = read_job(runner.progress_file(trial.index))
    assert job.status == {"status": "stopped", "step": 1.0, "reason": "GPAR"}


def test_a_training_worker_loads_neither_botorch_nor_ax() -> None:
    # Every job process imports the jobs' protocol; gpar_bo's public names load on first use.
    code = ("import sys, gpar_bo.tuning.jobs, gpar_bo.problems.toy; "
            "print(sorted(m for m in ('botorch', 'gpytorch', 'ax') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, cwd=Path(__file__).resolve().parents[2])
    assert result.stdout.strip() == "[]"
    from gpar_bo import GPARModel  # the public names still import
    assert GPARModel.__module__ == "gpar_bo.model"
