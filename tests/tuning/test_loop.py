"""The tuning loop: crash and resume, the report, the budget and the ``tune`` CLI."""

from __future__ import annotations

import json
import math
import textwrap
import time
from pathlib import Path

import pytest
from ax.core.arm import Arm
from ax.core.experiment import Experiment
from ax.core.search_space import SearchSpace
from ax.core.trial_status import TrialStatus
from ax.api.utils.generation_strategy_dispatch import choose_generation_strategy
from ax.api.utils.structs import GenerationStrategyDispatchStruct
from ax.early_stopping.strategies.base import BaseEarlyStoppingStrategy

from gpar_bo.problems.toy import toy_problem
from gpar_bo.tuning.jobs import read_job
from gpar_bo.tuning.errors import TuneSettingsError
from gpar_bo.tuning.loop import EpochBudget, tune
from gpar_bo.tuning.session import trained_epochs_by_trial
from gpar_bo.tuning.snapshot import load_snapshot, save_snapshot
from gpar_bo.cli import build_parser, main
from tests.fork_server import ForkServer
from tests.helpers import FAST_GPAR as FAST

EPOCHS = 4


def _curves(experiment) -> dict[int, list[float]]:
    df = experiment.lookup_data().full_df.sort_values("step")
    return {int(t): g["mean"].tolist() for t, g in df.groupby("trial_index")}


@pytest.mark.long
def test_resume_after_a_crash_keeps_every_completed_trial(tmp_path: Path, fork_server: ForkServer) -> None:
    out = tmp_path / "out"
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(f"""
        import sys, torch
        from gpar_bo.problems.toy import toy_problem
        from gpar_bo.tuning.loop import tune
        if __name__ == "__main__":
            torch.set_num_threads(1)
            tune(toy_problem({EPOCHS}, 0.15), sys.argv[1], 1000, scheduler="early-stopping", num_sobol_trials=4,
                 poll_seconds=0.2, progress=False, **{FAST!r})
    """))
    # Forked after the heavy imports (tests/fork_server.py), in a session of its own, so
    # that killing it takes its workers down too (a crash).
    process = fork_server.start(path=script, argv=[out], log=tmp_path / "tune.log")
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            time.sleep(0.5)
            if not (out / "snapshot.json").exists():
                continue
            experiment, _ = load_snapshot(out / "snapshot.json")
            statuses = [t.status for t in experiment.trials.values()]
            if statuses.count(TrialStatus.COMPLETED) >= 2 and TrialStatus.RUNNING in statuses:
                break
        else:
            pytest.fail("the tuning process did not get going")
    finally:
        process.kill_group()
        process.wait()
    before, _ = load_snapshot(out / "snapshot.json")
    completed = {i for i, t in before.trials.items() if t.status == TrialStatus.COMPLETED}
    running = {i for i, t in before.trials.items() if t.status == TrialStatus.RUNNING}
    assert len(completed) >= 2 and running
    curves_before = _curves(before)

    other_checkpoints = toy_problem(EPOCHS, 0.15)
    other_checkpoints.checkpoint_epochs = [2, EPOCHS]
    # Other epochs, job settings, checkpoints.
    for other in (toy_problem(EPOCHS + 1, 0.15), toy_problem(EPOCHS, 0.3), other_checkpoints):
        with pytest.raises(ValueError, match="another tuning experiment"):
            tune(other, out, 1000, scheduler="early-stopping", progress=False)
    # A high threshold makes early stopping near-certain on this problem.
    report = tune(toy_problem(EPOCHS, 0.15), out, 1000, scheduler="early-stopping", num_sobol_trials=4, poll_seconds=0.2,
                  threshold=0.3, min_epochs=2, progress=False,
                  max_trials=len(before.trials) + 2, report_seconds=math.inf, **FAST)

    after, strategy = load_snapshot(out / "snapshot.json")
    curves_after = _curves(after)
    for index in completed:
        assert after.trials[index].status == TrialStatus.COMPLETED
        assert curves_after[index] == curves_before[index]
        assert len(curves_after[index]) == EPOCHS
    for index in running:  # interrupted, then resumed from their checkpoints
        assert after.trials[index].status in (TrialStatus.COMPLETED, TrialStatus.EARLY_STOPPED)
        steps = [s for s, _ in read_job(after.trials[index].run_metadata["progress_file"]).steps]
        assert steps == list(range(1, len(steps) + 1))  # none lost, none trained twice
    new = set(after.trials) - set(before.trials)
    assert len(new) == 2
    assert all(after.trials[i].status.is_terminal for i in new)
    assert strategy.current_node_name == "GPAR"

    # The report: every curve, the best completed one, stopped trials marked with bands.
    saved = json.loads((out / "report.json").read_text())
    assert saved == json.loads(json.dumps(report))
    assert {t["index"] for t in report["trials"]} >= completed | new
    best = report["best"]
    assert len(best["values"]) == EPOCHS
    assert best["final"] == min(t["values"][-1] for t in report["trials"]
                                if len(t["steps"]) == EPOCHS)
    total_saved = 0
    names = {TrialStatus.COMPLETED: "completed", TrialStatus.EARLY_STOPPED: "stopped",
             TrialStatus.FAILED: "failed"}
    for trial in report["trials"]:
        assert trial["status"] == names[after.trials[trial["index"]].status]
        if trial["status"] == "stopped":  # stopped before the final epoch
            band = trial["predicted_final"]
            assert band["q05"] <= band["median"] <= band["q95"]
        else:
            assert "predicted_final" not in trial
        # A stop saves every epoch after the one it was decided on; the job trained none.
        job = read_job(after.trials[trial["index"]].run_metadata["progress_file"])
        assert len(job.steps) == len(trial["steps"]) == trial["epochs_trained"]
        assert trial["epochs_not_trained"] == (
            EPOCHS - len(trial["steps"]) if trial["status"] == "stopped" else 0)
        if trial["status"] == "stopped":
            assert job.status["status"] == "stopped" and job.status["step"] == trial["steps"][-1]
            total_saved += trial["epochs_not_trained"]
    assert report["epochs_saved"] == total_saved
    for name in ("report.png", "report.html"):
        assert (out / name).stat().st_size > 0


def test_epoch_budget_counts_running_trials_in_full() -> None:
    budget = EpochBudget(budget=20, metric="error", epochs=8)
    experiment = Experiment(search_space=SearchSpace(toy_problem().parameters))
    assert budget.committed(experiment) == 0
    assert not budget._should_stop_optimization(experiment)[0]
    for _ in range(2):
        trial = experiment.new_trial()
        trial.add_arm(Arm({"x1": 0.5, "x2": 0.5}))
        trial.mark_running(no_runner_required=True)
    assert budget.committed(experiment) == 16
    assert budget._should_stop_optimization(experiment)[0]  # 16 + 8 > 20


def test_a_relative_output_directory_is_stored_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A resume from another working directory must still find the progress files.
    monkeypatch.chdir(tmp_path)
    tune(toy_problem(3), "out", 6, scheduler="early-stopping", num_sobol_trials=2, workers=1, poll_seconds=0.1,
         progress=False)
    experiment, _ = load_snapshot(tmp_path / "out" / "snapshot.json")
    assert Path(experiment.runner.directory) == tmp_path.resolve() / "out" / "runs"
    for trial in experiment.trials.values():
        progress = Path(trial.run_metadata["progress_file"])
        assert progress.is_absolute() and progress.exists()


@pytest.mark.long
def test_tune_cli_parses_and_runs_a_small_mnist_job(tmp_path: Path, capsys) -> None:
    args = build_parser().parse_args(["tune", "--budget", "7"])
    assert args.budget == 7 and args.epochs is None and args.workers == 2  # MNIST: 10
    assert args.scheduler == "freeze-thaw" and args.dask_scheduler is None
    # Two Sobol trials, then one GPAR trial on the six MLP hyperparameters.
    code = main(["tune", "--scheduler", "early-stopping", "--out", str(tmp_path), "--max-examples", "300", "--epochs", "2",
                 "--budget", "6", "--sobol-trials", "2", "--workers", "2", "--no-progress"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["best"] is not None and 0.0 <= summary["best"]["val_error"] <= 1.0
    assert summary["trials"] == 3 and summary["epochs_trained"] <= 6
    assert summary["epochs_saved"] == 0  # 2-epoch trials: none stopped
    assert summary["statuses"] == {"completed": 3} and summary["epochs_not_trained"] == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["metric"] == "val_error"
    assert set(report["best"]["parameters"]) == {
        "n_hidden_layers", "n_neurons", "dropout", "log_learning_rate", "log_l1", "log_l2"}


@pytest.mark.parametrize(
    ("flags", "message"),
    [(["--workers", "0"], "workers must be >= 1"),
     (["--budget", "3"], "must cover one full trial"),
     (["--min-epochs", "0"], "min_epochs must be in"),
     (["--threshold", "1.5"], "threshold must be a probability"),
     (["--verdict-timeout", "0"], "verdict_timeout must be > 0")],
)
def test_tune_cli_rejects_settings_that_cannot_run(
    flags: list[str], message: str, tmp_path: Path, capsys
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["tune", "--scheduler", "early-stopping", "--out", str(tmp_path), "--epochs", "4", *flags])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # nothing started


class _StopAtSecondEpoch(BaseEarlyStoppingStrategy):
    """Stops every trial once it has reported epoch 2 (no model: its verdicts are known)."""

    def _should_stop_trials_early(self, trial_indices, experiment, current_node=None):
        trained = trained_epochs_by_trial(experiment, "error")
        return {i: "second epoch" for i in trial_indices if trained.get(i, 0) >= 2}

    def _is_harmful(self, trial_indices, experiment) -> bool:
        return False


def _sobol_only(seed: int):
    return choose_generation_strategy(
        GenerationStrategyDispatchStruct(method="random_search", initialization_random_seed=seed,
                                         initialize_with_center=False))


@pytest.mark.parametrize("stopping", ["given", None])
def test_early_stopping_runs_the_given_generation_and_stopping_strategies(
    tmp_path: Path, stopping: str | None
) -> None:
    out = tmp_path / "out"
    problem = toy_problem(4)
    problem.checkpoint_epochs = [2, 4]  # recorded and decided at epochs 2 and 4 only
    tune(problem, out, 12, scheduler="early-stopping", workers=2, poll_seconds=0.1,
         progress=False, generation_strategy=_sobol_only(3),
         early_stopping_strategy=_StopAtSecondEpoch() if stopping else None, **FAST)
    experiment, strategy = load_snapshot(out / "snapshot.json")
    assert strategy.name == "QuasiRandomSearch"  # not GPAR's default strategy
    assert {trial.generator_runs[0]._generation_node_name for trial in experiment.trials.values()} == {"Sobol"}
    jobs = [read_job(Path(t.run_metadata["progress_file"])) for t in experiment.trials.values()]
    # The given strategy stops each trial at its 2nd epoch, which it trains no further;
    # without one, every trial trains to its final epoch.
    assert [j.status["status"] for j in jobs] == ["stopped" if stopping else "completed"] * len(jobs)
    assert [[s for s, _ in j.steps] for j in jobs] == [[2.0] if stopping else [2.0, 4.0]] * len(jobs)
    # The budget commits a running trial's 4 epochs, so 3 full trials fit in 12; a stop at
    # epoch 2 gives 2 back, so stopped trials make room for more (how many depends on how
    # soon the stops come), never past the budget.
    assert sum(j.last_step for j in jobs) <= 12  # epochs trained, checkpoints or not
    assert len(jobs) >= 4 if stopping else len(jobs) == 3


@pytest.mark.parametrize("options, message", [
    ({"generation_strategy": _sobol_only(0)}, "early-stopping only"),
    ({"early_stopping_strategy": None}, "early-stopping only"),
    ({"scheduler": "early-stopping", "early_stopping_strategy": "percentile"}, "must be 'gpar', None or"),
])
def test_tune_refuses_strategies_it_cannot_use(tmp_path: Path, options: dict, message: str) -> None:
    with pytest.raises(TuneSettingsError, match=message):
        tune(toy_problem(4), tmp_path / "out", 12, progress=False, **options)
    assert not (tmp_path / "out").exists()  # refused before anything starts


def test_max_trials_counts_a_trial_written_ahead_before_a_crash_once(tmp_path: Path) -> None:
    # A crash between the write-ahead snapshot and the job's start leaves a CANDIDATE trial,
    # which the resumed run starts as one of the trials max_trials allows (not one more).
    out = tmp_path / "out"
    options = {"scheduler": "early-stopping", "workers": 1, "poll_seconds": 0.1,
               "progress": False, "early_stopping_strategy": None, **FAST}
    tune(toy_problem(2), out, 100, generation_strategy=_sobol_only(0), max_trials=1, **options)
    experiment, strategy = load_snapshot(out / "snapshot.json")
    written_ahead = experiment.new_trial().add_arm(Arm({"x1": 0.5, "x2": 0.5}))
    save_snapshot(out / "snapshot.json", experiment, strategy)
    tune(toy_problem(2), out, 100, generation_strategy=_sobol_only(0), max_trials=3, **options)
    after, _ = load_snapshot(out / "snapshot.json")
    assert len(after.trials) == 3
    assert after.trials[written_ahead.index].status == TrialStatus.COMPLETED
    assert all(t.status == TrialStatus.COMPLETED for t in after.trials.values())
