"""GPAREarlyStoppingStrategy from the Client: stop hopeless prefixes, keep promising ones."""

from __future__ import annotations

import pytest
import torch
from ax.api.client import Client
from ax.api.configs import RangeParameterConfig

from gpar_bo.ax import Checkpoints, GPAREarlyStoppingStrategy
from gpar_bo.curve_model import LogIncrements, curve_model_options
from gpar_bo.synthetic import learning_curves

EPOCHS = [1, 2, 4, 8, 16]
FIT = {"optimizer_kwargs": {"options": {"maxiter": 50}}}
# A 3 x 3 grid of finished runs, then two running ones.
FINISHED = [(a, b) for a in (0.1, 0.5, 0.9) for b in (0.1, 0.5, 0.9)]
HOPELESS, PROMISING = (0.95, 0.05), (0.3, 0.7)


def curve(x: tuple[float, float], seed: int) -> list[float]:
    X = torch.tensor([x], dtype=torch.double)
    return learning_curves(X, EPOCHS, noise_std=0.005, seed=seed)[0].tolist()


def add_trial(
    client: Client, x: tuple[float, float], upto: int, seed: int, shift: float = 0.0
) -> int:
    index = client.attach_trial({"x1": x[0], "x2": x[1]})
    for epoch, value in list(zip(EPOCHS, curve(x, seed)))[:upto]:
        client.attach_data(index, {"error": value + shift}, progression=epoch)
    return index


def make_client(objective: str = "-error") -> Client:
    client = Client(random_seed=0)
    client.configure_experiment(
        parameters=[RangeParameterConfig(name=n, bounds=(0.0, 1.0), parameter_type="float")
                    for n in ("x1", "x2")],
    )
    client.configure_optimization(objective=objective)
    return client


@pytest.fixture(scope="module")
def client() -> Client:
    client = make_client()
    for seed, x in enumerate(FINISHED):
        client.complete_trial(add_trial(client, x, len(EPOCHS), seed))
    client.set_early_stopping_strategy(
        GPAREarlyStoppingStrategy(EPOCHS, metric_name="error", threshold=0.05,
                                  min_progression=4, fit_kwargs=FIT)
    )
    return client


def test_stops_a_hopeless_trial_and_keeps_a_promising_one(client: Client) -> None:
    hopeless = add_trial(client, HOPELESS, upto=3, seed=100)
    promising = add_trial(client, PROMISING, upto=3, seed=101)
    assert client.should_stop_trial_early(hopeless)
    assert not client.should_stop_trial_early(promising)
    strategy = client._early_stopping_strategy
    p = strategy.probabilities_of_beating_incumbent(client._experiment, [hopeless, promising])
    assert p[hopeless] < 0.05 < 0.2 < p[promising]  # the promising trial well clear of stopping
    client.mark_trial_early_stopped(hopeless)
    client.mark_trial_abandoned(promising)


def test_default_is_the_curve_model_and_samples_are_errors(client: Client) -> None:
    strategy = client._early_stopping_strategy
    assert strategy.gpar_options is None and strategy.settings()["gpar_options"] is None
    running = add_trial(client, PROMISING, upto=3, seed=103)
    samples, incumbent = strategy.final_value_samples(client._experiment, [running])
    model = strategy._cache[1]  # GPAR on the finished curves
    assert model.kernel_family.value == "NL-X" and model.denoise
    assert isinstance(model.outcome_transform, LogIncrements)
    # In the metric's units: positive errors around the finished runs' final errors.
    finals = [curve(x, seed)[-1] for seed, x in enumerate(FINISHED)]
    assert (samples[running] > 0).all()
    assert min(finals) / 2 < float(samples[running].median()) < 2 * max(finals)
    assert incumbent == pytest.approx(min(finals))
    client.mark_trial_abandoned(running)


def test_a_final_error_of_zero_counts_as_half_the_smallest_positive_one() -> None:
    client = make_client()
    for seed, x in enumerate(FINISHED):
        client.complete_trial(add_trial(client, x, len(EPOCHS), seed))
    perfect = add_trial(client, FINISHED[0], len(EPOCHS) - 1, seed=50)
    client.attach_data(perfect, {"error": 0.0}, progression=EPOCHS[-1])  # perfect on validation
    client.complete_trial(perfect)
    promising = add_trial(client, PROMISING, upto=3, seed=101)
    strategy = GPAREarlyStoppingStrategy(EPOCHS, min_progression=4, fit_kwargs=FIT)
    samples, incumbent = strategy.final_value_samples(client._experiment, [promising])
    values = [v for seed, x in enumerate(FINISHED) for v in curve(x, seed)]
    values += curve(FINISHED[0], 50)[:-1] + curve(PROMISING, 101)[:3]
    assert incumbent == pytest.approx(min(values) / 2)  # not 0, which no sample could beat
    assert (samples[promising] > 0).all()


def test_a_metric_below_zero_is_a_clear_error_with_the_default() -> None:
    for gpar_options in (None, curve_model_options(outcome_transform=None)):
        client = make_client()
        for seed, x in enumerate(FINISHED[:4]):
            client.complete_trial(add_trial(client, x, len(EPOCHS), seed, shift=-0.2))
        running = add_trial(client, HOPELESS, upto=3, seed=100, shift=-0.2)
        client.set_early_stopping_strategy(
            GPAREarlyStoppingStrategy(EPOCHS, min_progression=4, fit_kwargs=FIT,
                                      gpar_options=gpar_options))
        if gpar_options is None:
            with pytest.raises(ValueError, match=r"non-negative values.*outcome_transform=None"):
                client.should_stop_trial_early(running)
        else:
            assert isinstance(client.should_stop_trial_early(running), bool)


def test_waits_for_the_minimum_progression(client: Client) -> None:
    early = add_trial(client, HOPELESS, upto=2, seed=102)  # epochs 1 and 2 < 4
    assert not client.should_stop_trial_early(early)
    client.mark_trial_abandoned(early)


def test_does_nothing_before_two_runs_reached_the_final_checkpoint() -> None:
    client = make_client()
    client.complete_trial(add_trial(client, FINISHED[0], len(EPOCHS), 0))
    client.complete_trial(add_trial(client, FINISHED[1], 3, 1))  # stopped short
    running = add_trial(client, HOPELESS, upto=4, seed=2)
    strategy = GPAREarlyStoppingStrategy(EPOCHS, fit_kwargs=FIT)
    client.set_early_stopping_strategy(strategy)
    assert not client.should_stop_trial_early(running)
    assert strategy.probabilities_of_beating_incumbent(client._experiment) == {}


def test_bad_configuration_is_a_clear_error() -> None:
    client = make_client()
    client.complete_trial(add_trial(client, FINISHED[0], len(EPOCHS), 0))
    client.set_early_stopping_strategy(GPAREarlyStoppingStrategy(EPOCHS, metric_name="loss"))
    with pytest.raises(ValueError, match="configured for metric 'loss'"):
        client.should_stop_trial_early(0)
    client.set_early_stopping_strategy(GPAREarlyStoppingStrategy([1, 3, 5, 7, 9]))
    with pytest.raises(ValueError, match="not checkpoints"):
        client.should_stop_trial_early(0)
    no_steps = make_client()
    index = no_steps.attach_trial({"x1": 0.5, "x2": 0.5})
    no_steps.attach_data(index, {"error": 0.3})
    no_steps.set_early_stopping_strategy(GPAREarlyStoppingStrategy(EPOCHS))
    with pytest.raises(ValueError, match="no progression data"):
        no_steps.should_stop_trial_early(index)
    with pytest.raises(ValueError, match="threshold"):
        GPAREarlyStoppingStrategy(EPOCHS, threshold=1.5)


def test_report_gives_running_trials_a_final_value_band(client: Client, tmp_path) -> None:
    from gpar_bo.tuning.report import write_report

    running = add_trial(client, PROMISING, upto=2, seed=103)
    report = write_report(client._experiment, Checkpoints(EPOCHS),
                          client._early_stopping_strategy, tmp_path)
    entry = next(t for t in report["trials"] if t["index"] == running)
    assert entry["status"] == "running" and entry["steps"] == [1.0, 2.0]
    band = entry["predicted_final"]
    assert band["q05"] < band["mean"] < band["q95"]
    finished = [t for t in report["trials"] if t["status"] == "completed"]
    assert all("predicted_final" not in t for t in finished)
    assert report["best"]["final"] == min(t["values"][-1] for t in finished)
    # Other tests of this module's client stop trials: each stop saved its untrained epochs.
    stopped = [t for t in report["trials"] if t["status"] == "stopped"]
    assert report["epochs_saved"] == sum(EPOCHS[-1] - t["steps"][-1] for t in stopped)
    assert entry["epochs_not_trained"] == 0  # a running run goes on
    for name in ("report.png", "report.html"):
        assert (tmp_path / name).stat().st_size > 0
    client.mark_trial_abandoned(running)


def test_refit_growth_reuses_hyperparameters_until_the_curves_grow(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import gpar_bo.ax.early_stopping as module

    fits: list[int] = []
    real_fit = module.fit_gpytorch_mll

    def counting_fit(mll, **kwargs):  # noqa: ANN001, ANN003, ANN202
        fits.append(mll.model.conditionals[0].train_inputs[0].shape[0])
        return real_fit(mll, **kwargs)

    monkeypatch.setattr(module, "fit_gpytorch_mll", counting_fit)
    client = make_client()
    for seed, x in enumerate(FINISHED[:5]):
        client.complete_trial(add_trial(client, x, len(EPOCHS), seed))
    strategy = GPAREarlyStoppingStrategy(EPOCHS, threshold=0.05, fit_kwargs=FIT, refit_growth=0.5)
    client.set_early_stopping_strategy(strategy)
    running = add_trial(client, HOPELESS, upto=3, seed=100)
    first = strategy.probabilities_of_beating_incumbent(client._experiment)[running]
    assert fits == [5]
    # A sixth finished curve (6 <= 1.5 x 5): a new model on 6 curves, same hyperparameters.
    client.complete_trial(add_trial(client, FINISHED[5], len(EPOCHS), 5))
    strategy.probabilities_of_beating_incumbent(client._experiment)
    model = strategy._cache[1]
    assert fits == [5] and model.conditionals[0].train_inputs[0].shape[0] == 6
    torch.testing.assert_close(model.hyperparameters(), strategy._refit.hyperparameters)
    # Two more (8 > 7.5): refitted.
    for seed in (6, 7):
        client.complete_trial(add_trial(client, FINISHED[seed], len(EPOCHS), seed))
    assert 0.0 <= strategy.probabilities_of_beating_incumbent(client._experiment)[running] <= 1.0
    assert fits == [5, 8]
    assert 0.0 <= first <= 1.0
    with pytest.raises(ValueError, match="refit_growth"):
        GPAREarlyStoppingStrategy(EPOCHS, refit_growth=-0.1)


def test_a_curve_that_skips_a_checkpoint_is_a_clear_error() -> None:
    client = make_client()
    client.complete_trial(add_trial(client, FINISHED[0], len(EPOCHS), 0))
    gapped = client.attach_trial({"x1": 0.5, "x2": 0.5})
    for epoch in (1, 4):  # skips epoch 2
        client.attach_data(gapped, {"error": 0.3}, progression=epoch)
    client.set_early_stopping_strategy(GPAREarlyStoppingStrategy(EPOCHS))
    with pytest.raises(ValueError, match=rf"Trials \[{gapped}\] .* skipping .*\[1.0, 4.0\]"):
        client.should_stop_trial_early(gapped)


def test_a_poll_builds_the_curves_once(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    import gpar_bo.ax.early_stopping as module

    builds: list[str] = []
    real = module.experiment_curves

    def counting(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        builds.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(module, "experiment_curves", counting)
    running = add_trial(client, PROMISING, upto=3, seed=104)
    assert not client.should_stop_trial_early(running)
    assert builds == ["error"]
    client.mark_trial_abandoned(running)


def test_curves_of_other_checkpoints_are_a_clear_error(client: Client) -> None:
    from gpar_bo.ax import experiment_curves

    other = experiment_curves(client._experiment, "error", Checkpoints([1, 2, 4, 8, 16, 32]))
    with pytest.raises(ValueError, match=r"this strategy models 'error' at \[1.0"):
        client._early_stopping_strategy.final_value_samples(client._experiment, curves=other)
