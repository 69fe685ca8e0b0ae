"""``gpar-bo tune --job MODULE:FUNCTION --space SPACE.JSON`` through the real entry point:
a run of the toy job, the flags' rules, and a job that raises (its traceback once)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from ax.utils.common.logger import ROOT_STREAM_HANDLER

from gpar_bo.cli import main
from gpar_bo.tuning import problem_from_space, tune
from gpar_bo.tuning.errors import JobFailed
from gpar_bo.tuning.jobs import read_job

TOY = "gpar_bo.problems.toy:train_toy_curves"


@pytest.fixture(autouse=True)
def _fast(monkeypatch: pytest.MonkeyPatch) -> None:
    """One thread, and polls 20 times a second instead of the command's once."""
    import gpar_bo.tuning.loop as loop

    torch.set_num_threads(1)
    monkeypatch.setitem(loop.tune.__kwdefaults__, "poll_seconds", 0.05)


def _space(tmp_path: Path, **changes) -> Path:
    space = {"metric": "error", "epochs": 2, "parameters": [
        {"name": "x1", "type": "range", "bounds": [0.0, 1.0]},
        {"name": "x2", "type": "range", "bounds": [0.0, 1.0]},
        {"name": "act", "type": "choice", "values": ["relu", "tanh", "gelu"]},
        {"name": "batch", "type": "fixed", "value": 64}],
        "train_kwargs": {"seconds_per_epoch": 0.0}, **changes}
    path = tmp_path / "space.json"
    path.write_text(json.dumps(space))
    return path


def test_the_toy_job_tunes_through_job_and_space(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ROOT_STREAM_HANDLER, "level", ROOT_STREAM_HANDLER.level)  # restored after
    out = tmp_path / "out"
    code = main(["tune", "--job", TOY, "--space", str(_space(tmp_path, budget=4)),
                 "--out", str(out), "--no-progress"])
    summary = json.loads(capsys.readouterr().out)
    assert code == 0
    assert summary["epochs_trained"] == 4  # the space file's budget, spent exactly
    jobs = [read_job(p) for p in sorted((out / "runs").glob("trial_*.jsonl"))]
    assert jobs and all(j.header["train"] == TOY for j in jobs)
    # The job is given the space's epochs; every setting has the choice and the fixed value.
    assert all(j.header["train_kwargs"] == {"epochs": 2, "seconds_per_epoch": 0.0} for j in jobs)
    assert all(j.header["parameters"]["act"] in ("relu", "tanh", "gelu")
               and j.header["parameters"]["batch"] == 64 for j in jobs)
    assert summary["trials"] == len(jobs)
    assert ROOT_STREAM_HANDLER.level == logging.WARNING  # Ax's INFO records stay off the terminal


@pytest.mark.parametrize("flags,message", [
    (["--job", TOY], "--job needs --space"),
    (["--space", "{space}"], "--space needs --job"),
    (["--job", TOY, "--space", "{space}", "--max-examples", "50"],
     "--max-examples only apply to the MNIST MLP"),
    (["--job", TOY, "--space", "{space}", "--checkpoints", "1", "2"],
     "--checkpoints only apply to the MNIST MLP"),
    (["--job", TOY, "--space", "{space}", "--epochs", "3", "--data-dir", "{tmp}"],
     "--epochs, --data-dir only apply to the MNIST MLP"),
    (["--job", "no_such_module:train", "--space", "{space}"],
     "cannot import 'no_such_module'"),
    (["--job", TOY, "--space", "{tmp}/missing.json"], "missing.json: cannot read it"),
    (["--job", TOY, "--space", "{space}", "--budget", "1"],
     "the budget (1 epochs) must cover one full trial (2 epochs)"),
])
def test_bad_job_flags_are_one_line_before_anything_starts(
    flags: list[str], message: str, tmp_path: Path, capsys
) -> None:
    values = {"space": _space(tmp_path), "tmp": tmp_path}
    with pytest.raises(SystemExit) as exit_info:
        main(["tune", "--out", str(tmp_path / "out"), "--no-progress",
              *[flag.format(**values) for flag in flags]])
    err = capsys.readouterr().err
    error_lines = [line for line in err.splitlines() if "error:" in line]
    assert exit_info.value.code == 2 and "Traceback" not in err
    assert len(error_lines) == 1 and message in error_lines[0], err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("scheduler", ["freeze-thaw", "early-stopping"])
def test_a_job_that_raises_shows_its_traceback_once_and_stops(
    scheduler: str, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "out"
    code = main(["tune", "--job", "tests.tuning.failing_job:train", "--space",
                 str(_space(tmp_path, epochs=3, train_kwargs={})), "--budget", "30", "--workers", "1",
                 "--scheduler", scheduler, "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.count("Traceback (most recent call last)") == 1, err
    assert err.count("ZeroDivisionError") == 2, err  # the traceback's last line, and the error
    assert 'failing_job.py", line 9, in train' in err  # the job's own frame
    error_lines = [line for line in err.splitlines() if "error:" in line]
    assert len(error_lines) == 1 and "trial 0's job raised ZeroDivisionError" in error_lines[0]
    # The first failure ends the run: of the 10 trials the budget allows, one worker
    # started at most the one decided while trial 0 waited for its verdict.
    assert len(list((out / "runs").glob("*.jsonl"))) <= 2


def test_a_job_error_in_python_carries_the_traceback(tmp_path: Path) -> None:
    problem = problem_from_space("tests.tuning.failing_job:train", _space(tmp_path, epochs=3, train_kwargs={}))
    with pytest.raises(JobFailed) as error:
        tune(problem, tmp_path / "out", 30, workers=1, progress=False, poll_seconds=0.05)
    assert error.value.trial_index == 0 and "\n" not in str(error.value)
    assert error.value.traceback.startswith("Traceback (most recent call last)")
    assert error.value.traceback.endswith("ZeroDivisionError: float division by zero")
    assert error.value.__notes__ == [error.value.traceback]
