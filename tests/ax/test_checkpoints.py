"""Checkpoints: validated once, one rule for raw and Ax-rescaled steps."""

from __future__ import annotations

import pytest
import torch

from gpar_bo.ax import Checkpoints
from gpar_bo.ax.curves import curve_table

EPOCHS = [1, 2, 4, 8, 16]


def test_checkpoints_are_floats_with_a_final_step() -> None:
    checkpoints = Checkpoints(EPOCHS)
    assert checkpoints.tolist() == [1.0, 2.0, 4.0, 8.0, 16.0] and checkpoints.final == 16.0
    assert Checkpoints(checkpoints) == checkpoints and len(checkpoints) == 5
    assert hash(Checkpoints(range(1, 4))) == hash(Checkpoints([1.0, 2.0, 3.0]))


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ([], "at least two"),
        ([3], "at least two"),
        ([1, float("nan")], "finite"),
        ([1, float("inf")], "finite"),
        ([0, 1], "positive"),
        ([-1, 1], "positive"),
        ([1, 2, 2], "must increase"),
        ([2, 1], "must increase"),
        (["a", 1], "must be numbers"),
        (None, "must be numbers"),
    ],
)
def test_bad_checkpoints_are_a_one_line_error(steps: list, message: str) -> None:
    with pytest.raises(ValueError, match=message) as error:
        Checkpoints(steps)
    assert "\n" not in str(error.value)


def test_raw_and_rescaled_steps_match_with_one_rule() -> None:
    checkpoints = Checkpoints(EPOCHS)
    raw = torch.tensor([1.0, 2.0, 4.0, 8.0, 16.0, 16.0 + 1e-7, 3.5])
    index, ok = checkpoints.match(raw)
    assert index[:6].tolist() == [0, 1, 2, 3, 4, 4] and ok.tolist() == [True] * 6 + [False]
    rescaled = (raw - 1) / 15
    torch.testing.assert_close(checkpoints.match(rescaled, rescaled=True)[0], index)
    assert checkpoints.match(rescaled, rescaled=True)[1].tolist() == ok.tolist()
    # The tolerance is a fraction of the span, as Ax's rescaling divides by it.
    assert checkpoints.match(torch.tensor([16.0 + 1e-5]))[1].item() is True
    assert checkpoints.match(torch.tensor([16.0 + 1e-4]))[1].item() is False


def test_rescaled_indices_recover_ax_steps_or_say_what_is_wrong() -> None:
    checkpoints = Checkpoints(EPOCHS)
    steps = torch.tensor([0.0, 1 / 15, 3 / 15, 7 / 15, 1.0])
    assert checkpoints.rescaled_indices(steps).tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="reach checkpoint 8 at most"):
        checkpoints.rescaled_indices(torch.tensor([0.0, 1 / 7, 3 / 7, 1.0]))
    with pytest.raises(ValueError, match="do not match the checkpoints"):
        checkpoints.rescaled_indices(torch.tensor([0.0, 0.5, 1.0]))


def test_curve_table_averages_repeated_reports_of_a_step() -> None:
    run = torch.tensor([0, 0, 1, 0])
    index = torch.tensor([0, 1, 0, 1])
    values = torch.tensor([0.5, 0.2, 0.6, 0.4], dtype=torch.double)
    table = curve_table(run, index, values, num_runs=2, M=3)
    expected = torch.tensor([[0.5, 0.3, float("nan")], [0.6, float("nan"), float("nan")]],
                            dtype=torch.double)
    torch.testing.assert_close(table, expected, equal_nan=True)
