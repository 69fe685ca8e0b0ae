"""CurveRunner / CurveMetric: progress files, stopping, orphaned trials, Orchestrator loop."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from ax.core.arm import Arm
from ax.api.utils.instantiation.from_string import optimization_config_from_string
from ax.core.experiment import Experiment
from ax.core.parameter import ParameterType, RangeParameter
from ax.core.search_space import SearchSpace
from ax.core.trial import Trial
from ax.core.trial_status import TrialStatus
from ax.early_stopping.strategies.base import BaseEarlyStoppingStrategy
from ax.orchestration.orchestrator import OrchestratorOptions

from gpar_bo.ax import gpar_generation_strategy
from gpar_bo.tuning.jobs import read_progress, read_verdict, run_training_job
from gpar_bo.tuning.orchestrator import VerdictOrchestrator as Orchestrator
from gpar_bo.tuning.runner import INTERRUPTED, CurveMetric, CurveRunner

EPOCHS = list(range(1, 9))
TOY = "gpar_bo.problems.toy:train_toy_curves"


def make_experiment(directory: Path, seconds_per_epoch: float = 0.0, **runner_kwargs) -> Experiment:
    runner = CurveRunner(TOY, str(directory),
                         {"epochs": len(EPOCHS), "seconds_per_epoch": seconds_per_epoch},
                         **runner_kwargs)
    return Experiment(
        name="toy",
        search_space=SearchSpace(
            [RangeParameter(n, ParameterType.FLOAT, 0.0, 1.0) for n in ("x1", "x2")]
        ),
        optimization_config=optimization_config_from_string("-error"),
        metrics=[CurveMetric("error")],
        runner=runner,
    )


def attach(experiment: Experiment, parameters: dict) -> Trial:
    trial = experiment.new_trial()
    trial.add_arm(Arm(parameters=parameters))
    return trial


def test_job_writes_every_epoch_and_obeys_a_stop_verdict(tmp_path: Path) -> None:
    progress, verdict = tmp_path / "p.jsonl", tmp_path / "p.verdict"
    # verdict_timeout=None: no verdicts awaited, the job trains through.
    status = run_training_job(TOY, {"epochs": 5}, {"x1": 0.2, "x2": 0.3}, 0, str(progress),
                              str(verdict))
    steps, record = read_progress(progress)
    assert status == "completed" and record == {"status": "completed"}
    assert [s for s, _ in steps] == [1, 2, 3, 4, 5] and "error" in steps[0][1]
    progress.unlink()
    verdict.write_text('{"step": null, "verdict": "stop", "reason": "r"}')  # a stop: it
    assert run_training_job(TOY, {"epochs": 5}, {"x1": 0.2, "x2": 0.3}, 0, str(progress),
                            str(verdict)) == "stopped"  # finishes the first epoch, then stops
    assert len(read_progress(progress)[0]) == 1
    assert read_progress(progress)[1] == {"status": "stopped", "step": 1, "reason": "r"}


def test_job_that_reports_its_final_step_completed_despite_a_stop(tmp_path: Path) -> None:
    progress, stop = tmp_path / "p.jsonl", tmp_path / "p.verdict"
    # e.g. Ctrl-C while the final epoch trained
    stop.write_text(json.dumps({"step": None, "verdict": "stop", "reason": INTERRUPTED}))
    args = (TOY, {"epochs": 1}, {"x1": 0.2, "x2": 0.3}, 0, str(progress), str(stop))
    assert run_training_job(*args, final_step=1) == "completed"
    assert read_progress(progress)[1] == {"status": "completed"}
    progress.unlink()
    assert run_training_job(*args) == "stopped"  # without final_step it cannot know


def test_failing_job_records_its_error(tmp_path: Path) -> None:
    progress = tmp_path / "p.jsonl"
    with pytest.raises(KeyError):
        run_training_job(TOY, {}, {"x1": 0.2}, 0, str(progress), str(tmp_path / "s"))
    assert "KeyError" in read_progress(progress)[1]["error"]


def test_metric_returns_the_prefix_while_running(tmp_path: Path) -> None:
    experiment = make_experiment(tmp_path)
    trial = attach(experiment, {"x1": 0.5, "x2": 0.5})
    progress = tmp_path / "trial_0.jsonl"
    trial.update_run_metadata({"progress_file": str(progress)})
    trial.mark_running(no_runner_required=True)
    metric = CurveMetric("error")
    assert not metric.fetch_trial_data(trial).is_ok()  # nothing reported yet: Ax retries
    progress.write_text("".join(json.dumps({"step": s, "values": {"error": 1.0 / s}}) + "\n"
                                for s in (1, 2, 3)) + '{"step": 4, "val')  # 4th half-written
    df = metric.fetch_trial_data(trial).unwrap().full_df
    assert df["step"].tolist() == [1, 2, 3]
    assert df["mean"].tolist() == pytest.approx([1.0, 0.5, 1 / 3])
    assert CurveMetric.is_available_while_running()


def test_orphaned_running_trial_is_failed_and_asked_to_stop(tmp_path: Path) -> None:
    experiment = make_experiment(tmp_path)
    runner = experiment.runner
    done, orphan, interrupted, stopped = (
        attach(experiment, {"x1": x, "x2": x}) for x in (0.1, 0.9, 0.5, 0.7))
    step = '{"step": 1, "values": {"error": 0.5}}\n'
    (tmp_path / "trial_0.jsonl").write_text(step + '{"status": "completed"}\n')
    (tmp_path / "trial_1.jsonl").write_text(step)
    (tmp_path / "trial_2.jsonl").write_text(
        step + json.dumps({"status": "stopped", "reason": INTERRUPTED}) + "\n")
    (tmp_path / "trial_3.jsonl").write_text(
        step + json.dumps({"status": "stopped", "reason": "GPAR"}) + "\n")
    statuses = runner.poll_trial_status([done, orphan, interrupted, stopped])
    assert statuses == {TrialStatus.COMPLETED: {0}, TrialStatus.FAILED: {1, 2},
                        TrialStatus.EARLY_STOPPED: {3}}
    assert read_verdict(tmp_path / "trial_1.verdict")["verdict"] == "stop"
    assert "died" in runner.poll_exception(orphan)


def test_orphan_that_reported_its_final_step_is_completed(tmp_path: Path) -> None:
    experiment = make_experiment(tmp_path)
    trial = attach(experiment, {"x1": 0.5, "x2": 0.5})
    steps = "".join(f'{{"step": {e}, "values": {{"error": 0.5}}}}\n' for e in (1, 2, 3))
    (tmp_path / "trial_0.jsonl").write_text(steps)  # died before its status line
    assert experiment.runner.poll_trial_status([trial]) == {TrialStatus.FAILED: {0}}
    runner = CurveRunner(TOY, str(tmp_path), final_step=3)
    assert runner.poll_trial_status([trial]) == {TrialStatus.COMPLETED: {0}}
    runner = CurveRunner(TOY, str(tmp_path), final_step=4)
    assert runner.poll_trial_status([trial]) == {TrialStatus.FAILED: {0}}


def test_dask_without_distributed_is_a_clear_error(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    try:
        import distributed  # noqa: F401
    except ImportError:
        runner = CurveRunner(TOY, str(tmp_path), use_dask=True)
        with pytest.raises(ImportError, match=r"gpar-bo\[dask\]"):
            runner._get_executor()
    else:
        pytest.skip("distributed is installed; see test_dask_local_cluster_runs_trials")


def test_dask_local_cluster_runs_trials(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    experiment = make_experiment(tmp_path, use_dask=True, max_workers=2)
    strategy = gpar_generation_strategy(EPOCHS, num_sobol_trials=4, seed=0)
    orchestrator = Orchestrator(experiment, strategy, OrchestratorOptions(
        max_pending_trials=2, init_seconds_between_polls=0.2, min_seconds_before_poll=0.2,
        seconds_between_polls_backoff_factor=1.0))
    try:
        orchestrator.run_n_trials(max_trials=2)
    finally:
        experiment.runner.shutdown()
    assert all(t.status == TrialStatus.COMPLETED for t in experiment.trials.values())
    assert len(experiment.lookup_data().full_df) == 2 * len(EPOCHS)


class _RecordingStrategy(BaseEarlyStoppingStrategy):
    """Stops nothing; records the trials offered and, of all running ones, those that trained."""

    def __init__(self) -> None:
        super().__init__()
        self.offers: list[tuple[set[int], set[int], set[int]]] = []

    def _should_stop_trials_early(self, trial_indices, experiment, current_node=None):
        runner = experiment.runner
        running = [t for t in experiment.trials.values() if t.status == TrialStatus.RUNNING]
        offered = [experiment.trials[i] for i in trial_indices]
        self.offers.append((set(trial_indices), runner.training(offered), runner.training(running)))
        return {}

    def _is_harmful(self, trial_indices, experiment) -> bool:
        return False


def test_orchestrator_offers_only_jobs_at_a_checkpoint_to_early_stopping(tmp_path: Path) -> None:
    # A stop reaching a job mid-epoch lands a checkpoint late (at the final one, a completed
    # run recorded as stopped), so only jobs that wait for a verdict are offered.
    experiment = make_experiment(tmp_path, seconds_per_epoch=0.25, max_workers=2)
    recording = _RecordingStrategy()
    orchestrator = Orchestrator(experiment, gpar_generation_strategy(EPOCHS, seed=0),
                                OrchestratorOptions(
        max_pending_trials=2, early_stopping_strategy=recording,
        init_seconds_between_polls=0.1, min_seconds_before_poll=0.1,
        seconds_between_polls_backoff_factor=1.0))
    try:
        orchestrator.run_n_trials(max_trials=2)
    finally:
        experiment.runner.shutdown()
    assert all(t.status == TrialStatus.COMPLETED for t in experiment.trials.values())
    assert any(offered for offered, _, _ in recording.offers)
    assert all(not training for _, training, _ in recording.offers)
    assert any(training for _, _, training in recording.offers)  # some were held back
    assert orchestrator.running_trial_indices == set()  # outside a poll: Ax's own


def test_sql_storage_of_runner_metric_and_strategy(tmp_path: Path) -> None:
    pytest.importorskip("sqlalchemy")
    pytest.importorskip("tabulate")
    from ax.storage.sqa_store.db import (
        create_all_tables,
        get_engine,
        init_engine_and_session_factory,
    )
    from ax.storage.sqa_store.load import (
        load_experiment,
        load_generation_strategy_by_experiment_name,
    )
    from ax.storage.sqa_store.save import save_experiment, save_generation_strategy

    from gpar_bo.tuning.runner import registry_bundle

    init_engine_and_session_factory(url=f"sqlite:///{tmp_path / 'ax.db'}", force_init=True)
    create_all_tables(get_engine())
    config = registry_bundle().sqa_config
    experiment = make_experiment(tmp_path / "runs", seconds_per_epoch=0.5, max_workers=3)
    strategy = gpar_generation_strategy(EPOCHS, num_sobol_trials=2)
    strategy.experiment = experiment
    save_experiment(experiment, config=config)
    save_generation_strategy(strategy, config=config)
    loaded = load_experiment("toy", config=config)
    assert isinstance(loaded.runner, CurveRunner) and loaded.runner == experiment.runner
    assert loaded.runner.max_workers == 3
    assert isinstance(loaded.metrics["error"], CurveMetric)
    nodes = load_generation_strategy_by_experiment_name("toy", config=config)._nodes
    assert [n.name for n in nodes] == ["Sobol", "GPAR"]


def test_dask_scheduler_address_runs_and_stops_a_trial(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                       dashboard_address=None)
    try:
        experiment = make_experiment(tmp_path, seconds_per_epoch=0.3, use_dask=True,
                                     scheduler_address=cluster.scheduler_address, max_workers=1)
        runner = experiment.runner
        trial = attach(experiment, {"x1": 0.5, "x2": 0.5})
        trial.run()  # the experiment's runner submits the job to the cluster
        deadline = time.monotonic() + 60
        while not read_progress(tmp_path / "trial_0.jsonl")[0] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert runner.poll_trial_status([trial]) == {TrialStatus.RUNNING: {0}}
        runner.stop(trial, reason="test")
        while runner.poll_trial_status([trial]).get(TrialStatus.RUNNING):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        steps, record = read_progress(tmp_path / "trial_0.jsonl")
        # It waited for its verdict after epoch 1: the stop reached it there.
        assert record == {"status": "stopped", "step": 1, "reason": "test"} and len(steps) == 1
        runner.shutdown()
    finally:
        cluster.close()


@pytest.mark.parametrize("checkpoints, message", [
    ([2.0, 1.0, 4.0], "increasing finite steps"),
    ([1.0, float("nan"), 4.0], "increasing finite steps"),
    ([], "increasing finite steps"),
    ([1.0, 2.0], "the last checkpoint must be final_step 4"),
])
def test_bad_checkpoints_are_refused_at_construction(checkpoints: list, message: str,
                                                     tmp_path) -> None:
    with pytest.raises(ValueError, match=message):
        CurveRunner("gpar_bo.problems.toy:train_toy_curves", str(tmp_path), final_step=4,
                    checkpoints=checkpoints)
