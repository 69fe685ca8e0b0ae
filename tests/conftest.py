"""Shared fixtures: one thread for small fits, and a fitted curve model."""

from __future__ import annotations

import pytest
import torch

from gpar_bo import GPARModel
from tests.helpers import EPOCHS, fit, partial_curves


@pytest.fixture(autouse=True)
def _single_thread() -> None:
    # Small GP fits are several times faster on one thread on 2-core machines.
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def curve_model() -> GPARModel:
    torch.set_num_threads(1)
    X, Y = partial_curves()
    return fit(GPARModel(X, Y, output_names=EPOCHS))
