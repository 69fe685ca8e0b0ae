"""Bad arguments are found before anything starts, each as one line without a
traceback; a folder in which no trial trained an epoch may be reused; failed trials'
own errors are shown."""

from __future__ import annotations

import socket
from pathlib import Path

import numpy as np
import pytest

from gpar_bo.cli import main
from gpar_bo.problems.mnist.data import write_idx
from gpar_bo.problems.toy import toy_problem
from gpar_bo.tuning.loop import tune
from gpar_bo.tuning.problem import TuningProblem
from gpar_bo.tuning.snapshot import load_snapshot


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _bad_idx_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "idx"
    directory.mkdir()
    (directory / "train-images-idx3-ubyte").write_bytes(b"\x00\x00\x0b\x03garbage")
    write_idx(directory / "train-labels-idx1-ubyte", np.zeros(10, dtype=np.uint8))
    return directory


CASES = {
    "missing data dir": (["--data-dir", "{tmp}/nowhere"], "does not exist"),
    "bad IDX file": (["--data-dir", "{idx}"], "wrong magic number"),
    "no examples": (["--max-examples", "0"], "must be >= 1 (got 0)"),
    "too few examples": (["--max-examples", "5"], "is too small (4 training and 1 validation"),
    "zero epochs": (["--epochs", "0"], "epochs must be >= 1 (got 0)"),
    "checkpoints short of the run": (["--checkpoints", "1", "2"],
                                     "the last checkpoint must be the final epoch 3"),
    "one checkpoint": (["--checkpoints", "3"], "GPAR needs at least 2 checkpoints (got [3])"),
    "out is a file": (["--out", "{tmp}/file"], "is a file, not a directory"),
    "out cannot be made": (["--out", "/dev/null/out"], "is not writable"),
    "scheduler unreachable": (["--dask-scheduler", "tcp://127.0.0.1:{port}",
                               "--dask-scheduler-timeout", "1"], "Cannot reach the dask scheduler"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_arguments_are_one_line_before_anything_starts(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    if case == "scheduler unreachable":
        pytest.importorskip("distributed")
    flags, message = CASES[case]
    (tmp_path / "file").write_text("not a directory")
    values = {"tmp": tmp_path, "port": _free_port(),
              "idx": _bad_idx_dir(tmp_path) if case == "bad IDX file" else ""}
    flags = [flag.format(**values) for flag in flags]
    out = ["--out", str(tmp_path / "out")] if "--out" not in flags else []
    with pytest.raises(SystemExit) as exit_info:
        main(["tune", "--scheduler", "early-stopping", *out, "--epochs", "3", "--budget", "6", "--no-progress", *flags])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err
    error_lines = [line for line in err.splitlines() if "error:" in line]
    assert len(error_lines) == 1 and message in error_lines[0], err
    assert "min_epochs" not in err  # --epochs 0 names the real cause only
    assert not (tmp_path / "out").exists()  # nothing started


def test_a_folder_whose_trials_trained_nothing_may_be_reused(tmp_path: Path) -> None:
    from gpar_bo.tuning.errors import JobFailed

    out = tmp_path / "out"
    broken = toy_problem(3)
    broken.train_kwargs = {**broken.train_kwargs, "noise_std": "not a number"}
    with pytest.raises(JobFailed) as error:  # the first job's error ends the run
        tune(broken, out, 100, scheduler="early-stopping", num_sobol_trials=6, workers=2, poll_seconds=0.1,
             progress=False)
    # The cause the job recorded, in one line; its traceback apart.
    assert "TypeError" in str(error.value) and "\n" not in str(error.value)
    assert "noise_std > 0" in error.value.traceback

    report = tune(toy_problem(3), out, 100, scheduler="early-stopping", num_sobol_trials=2, workers=2, poll_seconds=0.1,
                  progress=False, max_trials=2)
    assert len(report["trials"]) == 2 and report["epochs_trained"] == 6
    experiment, _ = load_snapshot(out / "snapshot.json")
    assert experiment.runner.train_kwargs == toy_problem(3).train_kwargs
    replaced = list(out.glob("replaced-*"))  # the failed run is kept, not deleted
    assert len(replaced) == 1 and len(list((replaced[0] / "runs").glob("*.jsonl"))) >= 1


def test_a_folder_with_trained_epochs_of_another_problem_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    tune(toy_problem(3), out, 100, scheduler="early-stopping", num_sobol_trials=1, workers=1, poll_seconds=0.1,
         progress=False, max_trials=1)
    with pytest.raises(ValueError, match="another tuning experiment"):
        tune(toy_problem(4), out, 100, scheduler="early-stopping", progress=False)


def test_a_problem_check_runs_before_anything_starts(tmp_path: Path) -> None:
    problem = TuningProblem(**{**toy_problem(3).__dict__,
                               "check": "gpar_bo.problems.mnist.job:check_mnist_job"})
    problem.train_kwargs = {"epochs": 3, "max_examples": 5}
    with pytest.raises(ValueError, match="too small"):
        tune(problem, tmp_path / "out", 100, scheduler="early-stopping", progress=False)
    assert not (tmp_path / "out").exists()
