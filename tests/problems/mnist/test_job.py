"""The MNIST MLP tuning job: paused and resumed, it gives the curve of a run never paused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from gpar_bo.problems.mnist import MLPHyperparameters, load_mnist, train_mlp
from gpar_bo.tuning.jobs import load_checkpoint, read_job, run_training_job

JOB = "gpar_bo.problems.mnist.job:train_mnist_mlp"
# Two hidden layers with dropout: the resumed run needs the weights, Adam's moments and
# both RNG streams (dropout masks, batch order) to give the same curve.
PARAMETERS = dict(n_hidden_layers=2, n_neurons=50, dropout=0.3, log_learning_rate=-5.0,
                  log_l1=-12.0, log_l2=-10.0)
KWARGS = {"epochs": 3, "max_examples": 600, "seed": 3}


def test_pausing_after_epoch_1_and_resuming_gives_the_same_curve(tmp_path: Path) -> None:
    reference = tmp_path / "reference.jsonl"
    run_training_job(JOB, KWARGS, PARAMETERS, 2, str(reference), str(tmp_path / "none"),
                     final_step=3)
    progress, verdicts, checkpoint = (tmp_path / "p.jsonl", tmp_path / "p.verdict",
                                      tmp_path / "trial_2")
    verdicts.write_text(json.dumps({"step": 1, "verdict": "pause", "reason": None}))
    assert run_training_job(JOB, KWARGS, PARAMETERS, 2, str(progress), str(verdicts),
                            final_step=3, checkpoint_dir=str(checkpoint),
                            verdict_timeout=5.0) == "paused"
    assert [s for s, _ in read_job(progress).steps] == [1.0]
    assert load_checkpoint(checkpoint)["epoch"] == 1
    verdicts.unlink()
    assert run_training_job(JOB, KWARGS, PARAMETERS, 2, str(progress), str(verdicts),
                            final_step=3, checkpoint_dir=str(checkpoint)) == "completed"
    resumed, never_paused = read_job(progress).steps, read_job(reference).steps
    assert [s for s, _ in resumed] == [1.0, 2.0, 3.0]
    for (_, a), (_, b) in zip(resumed, never_paused):
        assert a["val_loss"] == pytest.approx(b["val_loss"], rel=1e-12, abs=0.0)
        assert a["val_error"] == b["val_error"]
    assert never_paused[1][1]["val_loss"] != never_paused[2][1]["val_loss"]  # it trains on


def test_a_checkpoint_of_another_run_is_refused(tmp_path: Path) -> None:
    data = load_mnist(max_examples=600)
    hp = MLPHyperparameters(**PARAMETERS)
    train_mlp(hp, data, epochs=1, seed=0, checkpoint_dir=tmp_path)
    with pytest.raises(ValueError, match="checkpoint .* is of another run"):
        train_mlp(hp, data, epochs=2, seed=1, checkpoint_dir=tmp_path)
    resumed = train_mlp(hp, data, epochs=2, seed=0, checkpoint_dir=tmp_path)
    assert resumed.epochs_run == 2 and len(resumed.val_loss) == 2
    # It restores the run's RNG inside its own fork: the caller's stream is untouched.
    torch.manual_seed(5)
    before = torch.rand(1)
    torch.manual_seed(5)
    train_mlp(hp, data, epochs=3, seed=0, checkpoint_dir=tmp_path)
    assert torch.equal(torch.rand(1), before)


def test_tune_decides_at_the_benchmarks_checkpoints_by_default() -> None:
    from gpar_bo.cli import build_parser
    from gpar_bo.problems.mnist.job import TUNING_CHECKPOINTS, mnist_problem, tuning_checkpoints
    from gpar_bo.tuning.cli import _problem as tuning_problem

    # benchmarks.bo.problems' MNIST table decides at these: gpar-bo tune runs what they measured.
    from benchmarks.bo.problems import DEFAULT_CHECKPOINTS
    assert DEFAULT_CHECKPOINTS == TUNING_CHECKPOINTS == (1, 3, 7, 14, 21)
    assert tuning_checkpoints(21) == [1, 3, 7, 14, 21]
    assert tuning_checkpoints(10) == [1, 3, 7, 10]  # the same fractions of a shorter run
    assert tuning_checkpoints(2) == [1, 2] and tuning_checkpoints(1) == [1]
    assert list(mnist_problem(21).checkpoints) == [1, 3, 7, 14, 21]
    assert list(mnist_problem(6, checkpoints=[2, 6]).checkpoints) == [2, 6]
    parse = build_parser().parse_args
    assert list(tuning_problem(parse(["tune"])).checkpoints) == [1, 3, 7, 10]
    given = tuning_problem(parse(["tune", "--epochs", "4", "--checkpoints", "1", "2", "3", "4"]))
    assert list(given.checkpoints) == [1, 2, 3, 4]
