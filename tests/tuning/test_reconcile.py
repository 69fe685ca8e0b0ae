"""Reconciliation after a crash: trials the snapshot left unfinished get their progress
files' epochs and status; files the snapshot lacks become trials again; no progress file
is changed; the runner never starts a job over an existing progress file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ax.api.utils.instantiation.from_string import optimization_config_from_string
from ax.core.arm import Arm
from ax.core.experiment import Experiment
from ax.core.search_space import SearchSpace
from ax.core.trial_status import TrialStatus

from gpar_bo.problems.toy import toy_problem
from gpar_bo.tuning.errors import TuneError
from gpar_bo.tuning.jobs import create_progress_file
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


def _write(directory: Path, index: int, parameters: dict, steps: int, final: dict | None,
           started: bool = True) -> Path:
    path = directory / f"trial_{index}.jsonl"
    create_progress_file(path, {"trial": index, "arm": f"{index}_0", "parameters": parameters,
                                "train": TOY, "train_kwargs": KWARGS})
    with open(path, "a") as file:
        if started:
            file.write(json.dumps({"started": {"pid": 2**22 + 7, "host": "elsewhere"}}) + "\n")
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
    assert (tmp_path / "trial_0.stop").exists()  # a job that might still run is stopped


def test_reconcile_refuses_files_of_another_job(tmp_path: Path) -> None:
    experiment = _experiment(tmp_path)
    create_progress_file(tmp_path / "trial_0.jsonl", {
        "trial": 0, "arm": "0_0", "parameters": {"x1": 0.5, "x2": 0.5}, "train": TOY,
        "train_kwargs": {"epochs": 9}})
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
