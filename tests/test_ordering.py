"""Greedy output ordering."""

from __future__ import annotations

import math

import pytest
import torch

from gpar_bo.ordering import greedy_output_order
from gpar_bo.synthetic import three_output_function


def _synthetic(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.rand(40, 1, generator=generator, dtype=torch.double)
    noise = math.sqrt(0.01) * torch.randn(40, 3, generator=generator, dtype=torch.double)
    return x, three_output_function(x) + noise


def test_greedy_order_is_a_permutation_that_keeps_pinned_outputs_last() -> None:
    x, y = _synthetic()
    order = greedy_output_order(x, y[:, [2, 0, 1]], pinned_last=[0], kernel="L-NL")
    assert sorted(order) == [0, 1, 2] and order[-1] == 0


def test_greedy_order_puts_the_simplest_output_first() -> None:
    # y1 has an EQ-friendly form in x; y4 = exp(y1) is a simple function of
    # y1 but much rougher in x alone, so the evidence should prefer y1 first.
    x, y = _synthetic()
    y1 = y[:, :1]
    y4 = torch.exp(3 * y1) + 0.01 * torch.randn(40, 1, dtype=torch.double)
    order = greedy_output_order(x, torch.cat([y4, y1], -1), kernel="L-NL")
    assert order == [1, 0]


def test_greedy_order_handles_data_that_is_not_closed_downwards() -> None:
    x, y = _synthetic()
    y[:10, 0] = float("nan")  # output 0 missing where others are observed
    y[30:, 2] = float("nan")
    order = greedy_output_order(x, y)
    assert sorted(order) == [0, 1, 2]


def test_greedy_order_rejects_bad_pins() -> None:
    x, y = _synthetic()
    with pytest.raises(ValueError, match="pinned_last"):
        greedy_output_order(x, y, pinned_last=[3])
    with pytest.raises(ValueError, match="pinned_last"):
        greedy_output_order(x, y, pinned_last=[1, 1])


def test_greedy_order_does_not_depend_on_the_outputs_units() -> None:
    x, y = _synthetic()
    order = greedy_output_order(x, y)
    rescaled = y * torch.tensor([1e-3, 1e2, 1.0], dtype=y.dtype)  # each output in other units
    assert greedy_output_order(x, rescaled) == order


def test_greedy_order_handles_constant_and_log_transformed_outputs() -> None:
    from botorch.models.transforms.outcome import Log

    x, y = _synthetic()
    positive = y - y.min(0).values + 0.5
    order = greedy_output_order(x, positive, outcome_transform=Log())
    rescaled = positive.clone()
    rescaled[:, 1] *= 1e-3  # a shift of the modelled log outputs
    assert greedy_output_order(x, rescaled, outcome_transform=Log()) == order
    constant = torch.cat([y[:, :2], torch.full_like(y[:, :1], 2.0)], -1)
    assert sorted(greedy_output_order(x, constant)) == [0, 1, 2]
