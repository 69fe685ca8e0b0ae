"""Shared fixtures: one thread for small fits, a seeded random stream, the dtype, and a
fitted curve model."""

from __future__ import annotations


from collections.abc import Iterator

import pytest
import torch

from gpar_bo import GPARModel
from tests.fork_server import ForkServer
from tests.helpers import DTYPES, EPOCHS, computed_once, fit, partial_curves


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked ``long`` first: pytest-xdist's work stealing gives each worker a
    contiguous share and lets an idle worker take the end of another's, so the run
    ends on short tests instead of one worker finishing a long one alone."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)  # stable


@pytest.fixture(autouse=True)
def _single_thread() -> None:
    # Small GP fits are faster on one thread on 2-core machines.
    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seeded() -> None:
    # Every test draws the same numbers whichever worker runs it and whatever ran before
    # it there (pytest-xdist distributes tests differently from run to run).
    torch.manual_seed(0)


@pytest.fixture(scope="module", params=DTYPES, ids=lambda dtype: str(dtype).split(".")[-1])
def dtype(request: pytest.FixtureRequest) -> torch.dtype:
    """The dtype of the data (override it in a module to run in one dtype only)."""
    return request.param


@pytest.fixture(scope="session")
def fork_server() -> Iterator[ForkServer]:
    """Runs scripts and modules in processes forked after the heavy imports
    (``tests/fork_server.py``): one server per test worker, started when first asked for."""
    server = ForkServer()
    yield server
    server.close()


@pytest.fixture(scope="session")
def _curve_model_state(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The state of a GPAR fitted (in float64) to ``partial_curves()``, fitted once per
    test run: the fit is the slow part of every module's ``curve_model``. pytest-xdist's
    workers share it through a file of this run in their common temporary folder, under
    a lock (filelock: a dependency of the package)."""

    def fitted_state() -> dict:
        torch.set_num_threads(1)
        X, Y = partial_curves()
        return fit(GPARModel(X, Y, output_names=EPOCHS)).state_dict()

    return computed_once(tmp_path_factory, "curve_model_state", fitted_state)


@pytest.fixture(scope="module")
def curve_model(dtype: torch.dtype, _curve_model_state: dict) -> GPARModel:
    """A GPAR fitted to partial learning curves, predicting in ``dtype``.

    Fitted in float64 and loaded into a model on the same data in ``dtype``, so
    that both dtypes predict with the same hyperparameters (float32 fits, which
    land in other optima, are tested in test_model.py). Each module gets its own
    model, so no module sees another's changes.
    """
    X, Y = partial_curves()
    model = GPARModel(X.to(dtype), Y.to(dtype), output_names=EPOCHS)
    model.load_state_dict(_curve_model_state)
    return model.eval()
