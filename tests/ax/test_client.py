"""``GPARClient.get_best_parameterization`` when Ax's cross-validation cannot fit GPAR."""

from __future__ import annotations

import logging

import pytest
import torch
from ax.api.configs import RangeParameterConfig

from gpar_bo.ax import GPARClient, gpar_generation_strategy
from gpar_bo.data import TooFewObservationsError
from gpar_bo.synthetic import learning_curves
from tests.helpers import FAST_GPAR as FAST

EPOCHS = [1, 2, 4]


def _client_with_two_complete_curves() -> tuple[GPARClient, dict[int, float]]:
    """Three Sobol trials (two complete, one stopped at epoch 1), then one from GPAR."""
    client = GPARClient(random_seed=0)
    client.configure_experiment(parameters=[
        RangeParameterConfig(name=name, bounds=(0.0, 1.0), parameter_type="float")
        for name in ("x1", "x2")])
    client.configure_optimization(objective="-error")
    client.set_generation_strategy(
        gpar_generation_strategy(EPOCHS, metric_name="error", num_sobol_trials=3, **FAST))
    finals = {}
    for index, parameters in client.get_next_trials(max_trials=3).items():
        X = torch.tensor([[parameters["x1"], parameters["x2"]]], dtype=torch.double)
        curve = learning_curves(X, EPOCHS, noise_std=0.005, seed=index)[0].tolist()
        reached = 1 if index == 2 else len(EPOCHS)
        for epoch, error in zip(EPOCHS[:reached], curve):
            client.attach_data(index, {"error": error}, progression=epoch)
        if reached == len(EPOCHS):
            client.complete_trial(index)
            finals[index] = curve[-1]
        else:
            client.mark_trial_early_stopped(index)
    client.get_next_trials(max_trials=1)  # the GPAR node's model, fitted on all three
    return client, finals


def test_best_parameterization_falls_back_to_observations_when_a_fold_cannot_be_fitted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client, finals = _client_with_two_complete_curves()
    # Ax checks the model by leaving each run out: a fold without one of the two complete
    # curves leaves GPAR one value at epoch 4, too few to fit that checkpoint.
    with pytest.raises(TooFewObservationsError):
        super(GPARClient, client).get_best_parameterization()
    with caplog.at_level(logging.WARNING, logger="gpar_bo.ax.client"):
        _, prediction, index, _ = client.get_best_parameterization()
    assert index == min(finals, key=finals.get)  # the best observed final error
    assert prediction["error"][0] == pytest.approx(finals[index])  # (mean, sem) as observed
    assert "cannot be cross-validated" in caplog.text
