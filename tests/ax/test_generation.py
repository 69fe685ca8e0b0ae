"""GPAR in Ax's Client loop: generation strategy, partial curves, storage, bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from ax.adapter.transforms.standardize_y import StandardizeY
from ax.api.client import Client
from ax.api.configs import RangeParameterConfig

from gpar_bo import GPARModel
from gpar_bo.ax import GPARCurveModel, gpar_generation_strategy
from gpar_bo.curve_model import LogIncrements, curve_model_options
from gpar_bo.measurement import BinomialNoise, GaussianNoise
from gpar_bo.synthetic import learning_curves
from tests.helpers import FAST_GPAR as FAST

EPOCHS = [1, 2, 4, 8, 16]


def make_client(metric_name: str | None = "error", checkpoints=EPOCHS, **kwargs) -> Client:
    client = Client(random_seed=0)
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(name=name, bounds=(0.0, 1.0), parameter_type="float")
            for name in ("x1", "x2")
        ],
        name="toy_curves",
    )
    client.configure_optimization(objective="-error")
    client.set_generation_strategy(
        gpar_generation_strategy(
            checkpoints, metric_name=metric_name, num_sobol_trials=4, seed=0, **FAST, **kwargs
        )
    )
    return client


def curve(parameters: dict, seed: int, epochs=EPOCHS) -> list[float]:
    X = torch.tensor([[parameters["x1"], parameters["x2"]]], dtype=torch.double)
    return learning_curves(X, epochs, noise_std=0.005, seed=seed)[0].tolist()


def report(client: Client, index: int, parameters: dict, upto: int | None = None,
           epochs=EPOCHS, progression: bool = True) -> None:
    for epoch, value in list(zip(epochs, curve(parameters, index, epochs)))[:upto]:
        client.attach_data(index, {"error": value}, progression=epoch if progression else None)


def run_sobol(client: Client, **report_kwargs) -> None:
    for _ in range(2):
        for index, parameters in client.get_next_trials(max_trials=2).items():
            report(client, index, parameters, **report_kwargs)
            client.complete_trial(index)


def fitted_model(client: Client) -> GPARCurveModel:
    model = client._generation_strategy.adapter.generator.surrogate.model
    assert isinstance(model, GPARCurveModel)
    return model


@pytest.fixture(scope="module")
def loop(tmp_path_factory) -> dict:
    """Four Sobol trials, a GPAR trial that reports two epochs, and one more GPAR trial."""
    requested: list[list[int]] = []
    original = GPARModel.posterior

    def spy(self, X, output_indices=None, *args, **kwargs):
        requested.append(list(output_indices or []))
        return original(self, X, output_indices, *args, **kwargs)

    GPARModel.posterior = spy
    try:
        client = make_client()
        run_sobol(client)
        assert client._generation_strategy.current_node_name == "Sobol"
        (partial, parameters), = client.get_next_trials(max_trials=1).items()
        report(client, partial, parameters, upto=2)  # still running
        requested.clear()
        (nxt, _), = client.get_next_trials(max_trials=1).items()
        snapshot = tmp_path_factory.mktemp("ax") / "snapshot.json"
        client.save_to_json_file(str(snapshot))
    finally:
        GPARModel.posterior = original
    return {"client": client, "partial": partial, "next": nxt, "requested": requested,
            "snapshot": snapshot}


def test_gpar_node_generates_after_initialisation(loop: dict) -> None:
    client = loop["client"]
    nodes = {i: t.generator_runs[0]._generation_node_name for i, t in client._experiment.trials.items()}
    assert [nodes[i] for i in range(4)] == ["Sobol"] * 4
    assert nodes[loop["partial"]] == nodes[loop["next"]] == "GPAR"


def test_running_trial_prefix_is_in_the_training_data(loop: dict) -> None:
    client, partial = loop["client"], loop["partial"]
    model = fitted_model(client)
    parameters = client._experiment.trials[partial].arm.parameters
    x = torch.tensor([parameters["x1"], parameters["x2"]], dtype=torch.double)
    rows = (model.gpar.train_X == x).all(-1)
    assert rows.sum() == 1
    observed = model.gpar.observed[rows][0]
    assert observed.tolist() == [True, True, False, False, False]
    assert model.gpar.train_X.shape[0] == 5  # four complete curves and the prefix


def test_acquisition_targets_the_final_checkpoint(loop: dict) -> None:
    # Every posterior GPAR computed while generating asked for the final checkpoint.
    assert loop["requested"] and all(r == [len(EPOCHS) - 1] for r in loop["requested"])


def test_json_round_trip_keeps_the_gpar_node(loop: dict) -> None:
    restored = Client.load_from_json_file(str(loop["snapshot"]))
    strategy = restored._generation_strategy
    assert [n.name for n in strategy._nodes] == ["Sobol", "GPAR"]
    assert strategy.current_node_name == "GPAR"
    config = strategy._nodes[1].generator_specs[0].generator_kwargs["surrogate_spec"].model_configs[0]
    assert config.botorch_model_class is GPARCurveModel
    assert config.model_options["checkpoints"] == [float(e) for e in EPOCHS]
    assert len(restored._experiment.trials) == len(loop["client"]._experiment.trials)
    (index, _), = restored.get_next_trials(max_trials=1).items()
    assert restored._experiment.trials[index].generator_runs[0]._generation_node_name == "GPAR"


def test_predict_at_every_checkpoint(loop: dict) -> None:
    model = fitted_model(loop["client"])
    X = model.train_X  # rows at different checkpoints: one posterior, per-row outputs
    posterior = model.posterior(X)
    assert posterior.mean.shape == (X.shape[0], 1)
    assert torch.allclose(posterior.mean, model.train_Y, atol=0.5)
    # Moments point by point: thousands of points (Ax's analyses) stay cheap.
    many = torch.cat([torch.rand(2000, 2, dtype=X.dtype), torch.ones(2000, 1, dtype=X.dtype)], -1)
    many = many[:, [0, 1, 2]] if model.step_index == 2 else many[:, [2, 0, 1]]
    assert model.posterior(many).variance.shape == (2000, 1)
    assert model.posterior(many.unsqueeze(0)[:, :3]).rsample(torch.Size([4])).shape == (4, 1, 3, 1)


def test_factory_rejects_bad_checkpoints() -> None:
    with pytest.raises(ValueError, match="must increase"):
        gpar_generation_strategy([1, 1, 2])
    with pytest.raises(ValueError, match="min_completed_trials"):
        gpar_generation_strategy(EPOCHS, min_completed_trials=1)


def test_data_without_progression_is_a_clear_error() -> None:
    client = make_client()
    run_sobol(client, progression=False)
    with pytest.raises(ValueError, match="no progression data"):
        client.get_next_trials(max_trials=1)


def test_curves_that_skip_a_checkpoint_need_imputation() -> None:
    for gpar_options in ({}, {"impute": True}):
        client = make_client(gpar_options=gpar_options)
        run_sobol(client)
        gapped = client.attach_trial({"x1": 0.5, "x2": 0.5})
        for epoch in (1, 4):  # skips epoch 2
            client.attach_data(gapped, {"error": 0.3}, progression=epoch)
        if gpar_options:
            assert len(client.get_next_trials(max_trials=1)) == 1
        else:
            with pytest.raises(ValueError, match=r"1 trial\(s\) .* skipping .*\[1.0, 4.0\].*impute"):
                client.get_next_trials(max_trials=1)


def test_objective_with_a_different_metric_name_is_a_clear_error() -> None:
    client = make_client(metric_name="val_loss")
    run_sobol(client)
    with pytest.raises(ValueError, match="configured for metric 'val_loss'"):
        client.get_next_trials(max_trials=1)


def test_checkpoints_that_do_not_match_the_data_are_a_clear_error() -> None:
    client = make_client(checkpoints=[1, 2, 4, 8, 16])
    run_sobol(client, epochs=[1, 2, 3, 4, 5, 6])
    with pytest.raises(ValueError, match="do not match the checkpoints"):
        client.get_next_trials(max_trials=1)


def test_sql_round_trip_keeps_the_gpar_node(tmp_path: Path) -> None:
    # Ax's SQL storage needs SQLAlchemy and (for its messages) tabulate: `.[sql]`.
    pytest.importorskip("sqlalchemy")
    pytest.importorskip("tabulate")
    from ax.api.configs import StorageConfig
    from ax.storage.sqa_store.db import (
        create_all_tables,
        get_engine,
        init_engine_and_session_factory,
    )

    url = f"sqlite:///{tmp_path / 'ax.db'}"
    init_engine_and_session_factory(url=url, force_init=True)
    create_all_tables(get_engine())
    client = Client(storage_config=StorageConfig(url=url), random_seed=0)
    client.configure_experiment(
        parameters=[RangeParameterConfig(name=n, bounds=(0.0, 1.0), parameter_type="float")
                    for n in ("x1", "x2")],
        name="toy_curves_sql",
    )
    client.configure_optimization(objective="-error")
    client.set_generation_strategy(
        gpar_generation_strategy(EPOCHS, metric_name="error", num_sobol_trials=4, seed=0, **FAST))
    run_sobol(client)
    # A running trial with a prefix, attached (the GPAR node is stored; generating with
    # it before the round trip as well would only cost time).
    parameters = {"x1": 0.5, "x2": 0.5}
    partial = client.attach_trial(parameters)
    report(client, partial, parameters, upto=2)

    restored = Client.load_from_database("toy_curves_sql", storage_config=StorageConfig(url=url))
    assert [node.name for node in restored._generation_strategy._nodes] == ["Sobol", "GPAR"]
    assert len(restored._experiment.lookup_data().full_df) == 4 * len(EPOCHS) + 2
    (index, _), = restored.get_next_trials(max_trials=1).items()
    assert restored._generation_strategy.current_node_name == "GPAR"
    assert restored._experiment.trials[index].generator_runs[0]._generation_node_name == "GPAR"
    assert fitted_model(restored).gpar.train_X.shape[0] == 5  # the prefix came back too


# ------------------------------------------------------- the default GPAR variant
def test_default_is_the_curve_model_on_the_metric_itself(loop: dict) -> None:
    model = fitted_model(loop["client"])
    assert model.gpar.kernel_family.value == "NL-X" and model.gpar.denoise
    assert isinstance(model.gpar.outcome_transform, LogIncrements)
    # Ax's StandardizeY is left out: GPAR sees the errors themselves (positive).
    errors = loop["client"]._experiment.lookup_data().full_df["mean"]
    assert sorted(model.train_Y.squeeze(-1).tolist()) == pytest.approx(sorted(errors.tolist()))


def test_measurement_noise_in_gpar_options_survives_json() -> None:
    from ax.storage.json_store.decoder import object_from_json
    from ax.storage.json_store.encoder import object_to_json

    for noise in (BinomialNoise(833), GaussianNoise(0.005)):
        strategy = gpar_generation_strategy(EPOCHS, gpar_options=curve_model_options(measurement_noise=noise))
        restored = object_from_json(object_to_json(strategy))
        config = restored._nodes[1].generator_specs[0].generator_kwargs["surrogate_spec"].model_configs[0]
        stored = config.model_options["gpar_options"]["measurement_noise"]
        assert type(stored) is type(noise) and vars(stored) == vars(noise)


def test_given_options_replace_the_default_and_keep_ax_standardisation() -> None:
    def node(strategy):
        spec = strategy._nodes[1].generator_specs[0].generator_kwargs
        return spec["transforms"], spec["surrogate_spec"].model_configs[0].model_options

    transforms, options = node(gpar_generation_strategy(EPOCHS))
    assert StandardizeY not in transforms and options["gpar_options"] is None
    transforms, options = node(gpar_generation_strategy(EPOCHS, gpar_options={}))
    assert StandardizeY in transforms and options["gpar_options"] == {}
    raw = curve_model_options(outcome_transform=None)
    transforms, options = node(gpar_generation_strategy(EPOCHS, gpar_options=raw))
    assert StandardizeY in transforms and options["gpar_options"]["kernel"] == "NL-X"


def test_a_metric_below_zero_is_a_clear_error_with_the_default() -> None:
    for gpar_options in (None, curve_model_options(outcome_transform=None)):
        client = make_client(gpar_options=gpar_options)
        for _ in range(2):
            for index, parameters in client.get_next_trials(max_trials=2).items():
                for epoch, value in zip(EPOCHS, curve(parameters, index)):
                    client.attach_data(index, {"error": value - 0.2}, progression=epoch)
                client.complete_trial(index)
        if gpar_options is None:
            with pytest.raises(ValueError, match=r"non-negative values.*outcome_transform=None"):
                client.get_next_trials(max_trials=1)
        else:
            assert len(client.get_next_trials(max_trials=1)) == 1
