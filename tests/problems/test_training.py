"""The shared epoch loop: seeding, mini-batch epochs, recording, stopping and resuming."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gpar_bo.problems.curves_io import TrainResult
from gpar_bo.problems.training import minibatch_epoch, record_epochs, seeded_run


def test_seeded_run_is_reproducible_and_leaves_the_global_rng_alone() -> None:
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    draws = []
    for _ in range(2):
        with seeded_run(7) as (result, generator):
            draws.append((torch.rand(2), torch.randperm(5, generator=generator)))
        assert result.seconds > 0 and result.epochs_run == 0
    assert torch.equal(draws[0][0], draws[1][0]) and torch.equal(draws[0][1], draws[1][1])
    assert torch.equal(torch.rand(3), expected_next)  # the caller's stream is untouched


def test_minibatch_epoch_steps_once_per_batch_and_reports_non_finite_losses() -> None:
    model = nn.Linear(2, 2)
    x, y = torch.randn(10, 2), torch.tensor([0, 1] * 5)
    steps = []
    optimiser = torch.optim.SGD(model.parameters(), lr=0.1)
    optimiser.register_step_post_hook(lambda *args: steps.append(1))
    generator = torch.Generator().manual_seed(0)
    assert minibatch_epoch(model, optimiser, x, y, 4, generator, nn.functional.cross_entropy)
    assert len(steps) == 3 and model.training  # batches of 4, 4 and 2
    assert not minibatch_epoch(model, optimiser, x, y, 4, generator,
                               lambda logits, labels: logits.sum() * float("nan"))


def test_record_epochs_goes_on_from_a_partial_result_and_stops_when_asked() -> None:
    calls: list[tuple[str, int]] = []

    def run_epoch(epoch: int) -> tuple[float, float]:
        calls.append(("run", epoch))
        return 1.0 / epoch, 0.5 / epoch

    def callback(epoch: int, loss: float, error: float) -> bool:
        calls.append(("callback", epoch))
        return epoch == 3

    resumed = TrainResult(val_loss=[1.0], val_error=[0.5], epochs_run=1)
    result = record_epochs(resumed, 5, run_epoch, callback,
                           after_epoch=lambda epoch: calls.append(("saved", epoch)))
    assert result is resumed and result.epochs_run == 3 and result.stopped_early
    assert result.val_loss == [1.0, 0.5, 1 / 3] and result.val_error == [0.5, 0.25, 0.5 / 3]
    assert calls == [("run", 2), ("saved", 2), ("callback", 2), ("run", 3), ("saved", 3), ("callback", 3)]
    # A stop asked for at the last epoch is not early.
    last = record_epochs(TrainResult(), 2, run_epoch, lambda epoch, *_: epoch == 2)
    assert last.epochs_run == 2 and not last.stopped_early


@pytest.mark.parametrize("epochs_run", [0, 2])
def test_record_epochs_without_callback_runs_to_the_end(epochs_run: int) -> None:
    start = TrainResult(val_loss=[0.0] * epochs_run, val_error=[0.0] * epochs_run, epochs_run=epochs_run)
    result = record_epochs(start, 4, lambda epoch: (float(epoch), 0.0))
    assert result.val_loss == [0.0] * epochs_run + [float(e) for e in range(epochs_run + 1, 5)]
