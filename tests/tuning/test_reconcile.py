"""Reconciliation after a crash: trials the snapshot left unfinished get their progress
files' epochs and status; files the snapshot lacks become trials again; no progress file
is changed (but for the ``paused`` line of a dead resumable job); paused and dead
resumable jobs stay resumable; the runner never starts a job over an existing progress
file."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from ax.api.utils.instantiation.from_string import optimization_config_from_string
from ax.core.arm import Arm
from ax.core.experiment import Experiment
from ax.core.search_space import SearchSpace
from ax.core.trial_status import TrialStatus

from gpar_bo.problems.toy import toy_problem
from gpar_bo.tuning.errors import TuneError
from gpar_bo.tuning.jobs import INTERRUPTED, create_progress_file, read_job, read_verdict
from gpar_bo.tuning.recovery import reconcile
from gpar_bo.tuning.runner import CurveMetric, CurveRunner

TOY = "gpar_bo.problems.toy:train_toy_curves"
KWARGS = {"epochs": 4, "seconds_per_epoch": 0.0}


def _experiment(directory: Path) -> Experiment:
    problem = toy_problem(4)
    runner = CurveRunner(TOY, str(directory), KWARGS, final_step=4)
    return Experiment(name="toy", search_space=SearchSpace(problem.parameters),
                      optimization_config=optimization_config_from_string("-error"),
                      metrics=[CurveMetric("error")], runner=runner)


#: A pid no process has (above the kernel's pid_max of 2**22).
DEAD_PID = 2**22 + 7


def _write(directory: Path, index: int, parameters: dict, steps: int, final: dict | None,
           started: bool = True, resumable: bool = False, host: str = "elsewhere") -> Path:
    path = directory / f"trial_{index}.jsonl"
    checkpoint_dir = str(directory / f"trial_{index}") if resumable else None
    create_progress_file(path, {"trial": index, "arm": f"{index}_0", "parameters": parameters,
                                "train": TOY, "train_kwargs": KWARGS,
                                "checkpoint_dir": checkpoint_dir})
    with open(path, "a") as file:
        if started:
            file.write(json.dumps({"started": {"pid": DEAD_PID, "host": host}}) + "\n")
        for step in range(1, steps + 1):
            file.write(json.dumps({"step": step, "values": {"error": 1.0 / step}}) + "\n")
        if final is not None:
            file.write(json.dumps(final) + "\n")
    return path


def _steps(experiment: Experiment) -> dict[int, list[float]]:
    df = experiment.lookup_data().full_df
    return {int(t): sorted(g["step"].tolist()) for t, g in df.groupby("trial_index")}


def test_reconcile_settles_unfinished_trials_and_rebuilds_missing_ones(tmp_path: Path) -> None:
    experiment = _experiment(tmp_path)
    runner = experiment.runner
    p = [{"x1": 0.1 * i, "x2": 0.05 * i} for i in range(7)]
    running = experiment.new_trial().add_arm(Arm(p[0], name="0_0"))
    running.mark_running(no_runner_required=True)
    launched = experiment.new_trial().add_arm(Arm(p[1], name="1_0"))  # CANDIDATE, ran
    unlaunched = experiment.new_trial().add_arm(Arm(p[2], name="2_0"))  # never started
    files = [
        _write(tmp_path, 0, p[0], 3, None),  # died after 3 epochs
        _write(tmp_path, 1, p[1], 4, None),  # died after its final epoch
        _write(tmp_path, 3, p[3], 2, {"status": "stopped", "reason": "GPAR"}),
        _write(tmp_path, 5, p[5], 1, None),
    ]
    (tmp_path / "trial_4.jsonl").write_text('{"step": 1, "values": {"error": 0.5}}\n')
    texts = [f.read_text() for f in files]

    done = reconcile(experiment, runner, wait_seconds=0.1)

    assert running.status == TrialStatus.FAILED  # interrupted: its job died
    assert launched.status == TrialStatus.COMPLETED
    assert unlaunched.status == TrialStatus.CANDIDATE  # the Orchestrator starts it
    assert experiment.trials[3].status == TrialStatus.EARLY_STOPPED
    assert experiment.trials[3].arms[0].parameters == p[3]
    assert experiment.trials[4].status == TrialStatus.ABANDONED  # no header: not rebuilt
    assert experiment.trials[5].status == TrialStatus.FAILED
    assert done.recreated == [3, 5] and done.placeholders == [4]
    assert _steps(experiment) == {0: [1, 2, 3], 1: [1, 2, 3, 4], 3: [1, 2], 5: [1]}
    assert [f.read_text() for f in files] == texts  # no progress file is ever changed
    # A job that might still run is stopped.
    assert read_verdict(tmp_path / "trial_0.verdict")["verdict"] == "stop"


@pytest.mark.parametrize("other", [{"train_kwargs": {"epochs": 9}}, {"checkpoints": [2.0, 4.0]}])
def test_reconcile_refuses_files_of_another_job(tmp_path: Path, other: dict) -> None:
    experiment = _experiment(tmp_path)
    create_progress_file(tmp_path / "trial_0.jsonl", {
        "trial": 0, "arm": "0_0", "parameters": {"x1": 0.5, "x2": 0.5}, "train": TOY,
        "train_kwargs": experiment.runner.train_kwargs, **other})
    with pytest.raises(TuneError, match="written by another tuning job"):
        reconcile(experiment, experiment.runner)


def test_the_runner_never_starts_a_job_over_an_existing_progress_file(tmp_path: Path) -> None:
    experiment = _experiment(tmp_path)
    trial = experiment.new_trial().add_arm(Arm({"x1": 0.5, "x2": 0.5}))
    path = _write(tmp_path, 0, {"x1": 0.5, "x2": 0.5}, 2, None)
    text = path.read_text()
    with pytest.raises(RuntimeError, match="never overwritten"):
        experiment.runner.run(trial)
    assert path.read_text() == text
    experiment.runner.shutdown()


def test_paused_and_dead_resumable_jobs_stay_resumable_with_every_epoch(tmp_path: Path) -> None:
    experiment = _experiment(tmp_path)
    runner = experiment.runner
    p = [{"x1": 0.1 * i, "x2": 0.05 * i} for i in range(5)]
    trials = [experiment.new_trial().add_arm(Arm(p[i], name=f"{i}_0")) for i in range(3)]
    for trial in trials:
        trial.mark_running(no_runner_required=True)
    here = socket.gethostname()
    files = [
        _write(tmp_path, 0, p[0], 2, None, resumable=True, host=here),  # died mid-epoch 3
        _write(tmp_path, 1, p[1], 2, {"status": "paused", "step": 2}, resumable=True),
        _write(tmp_path, 2, p[2], 0, None, started=False, resumable=True),  # never started
        _write(tmp_path, 3, p[3], 3, None, resumable=True, host=here),  # not in the snapshot
        _write(tmp_path, 4, p[4], 1, None, resumable=False, host=here),  # cannot resume
    ]
    texts = [f.read_text() for f in files]

    done = reconcile(experiment, runner, wait_seconds=0.1)

    # Paused, or recorded paused at their last epoch: RUNNING for Ax, and resumable.
    assert done.settled == {0: TrialStatus.RUNNING, 1: TrialStatus.RUNNING,
                            2: TrialStatus.RUNNING, 3: TrialStatus.RUNNING,
                            4: TrialStatus.FAILED}
    assert done.recreated == [3, 4]
    assert runner.paused(experiment.trials.values()) == {0, 1, 2, 3}
    assert _steps(experiment) == {0: [1, 2], 1: [1, 2], 3: [1, 2, 3], 4: [1]}
    # Files are only appended to: a dead job's "paused" line, at its last reported epoch.
    for index, (path, text) in enumerate(zip(files, texts)):
        now = path.read_text()
        assert now.startswith(text)
        added = [json.loads(line) for line in now[len(text):].splitlines()]
        if index in (0, 2, 3):
            last = {0: 2.0, 2: None, 3: 3.0}[index]
            assert added == [{"status": "paused", "step": last, "reason": INTERRUPTED}]
        else:
            assert added == []
    assert read_job(files[0]).paused and read_job(files[0]).last_step == 2
    # A job that might still run is asked to pause, one that cannot resume to stop.
    assert read_verdict(tmp_path / "trial_0.verdict")["verdict"] == "pause"
    assert read_verdict(tmp_path / "trial_4.verdict")["verdict"] == "stop"
    # Reconciling again changes nothing: a paused trial is settled.
    texts = [f.read_text() for f in files]
    reconcile(experiment, runner, wait_seconds=0.1)
    assert [f.read_text() for f in files] == texts
