"""GPAR early stopping survives saving and loading a Client (JSON and SQLite)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ax.api.client import Client
from ax.api.configs import RangeParameterConfig, StorageConfig
from botorch.models.transforms.outcome import Log

from gpar_bo.ax import GPARClient, GPAREarlyStoppingStrategy
from tests.ax.test_early_stopping import EPOCHS, FINISHED, FIT, add_trial

STUCK = [0.9] * 3  # a curve stuck far above every finished one


def configure(client: Client, name: str) -> Client:
    client.configure_experiment(
        parameters=[RangeParameterConfig(name=n, bounds=(0.0, 1.0), parameter_type="float")
                    for n in ("x1", "x2")],
        name=name,
    )
    client.configure_optimization(objective="-error")
    return client


def strategy() -> GPAREarlyStoppingStrategy:
    return GPAREarlyStoppingStrategy(EPOCHS, metric_name="error", threshold=0.05,
                                     min_progression=4, fit_kwargs=FIT, refit_growth=0.2)


def run(client: Client) -> None:
    client.set_early_stopping_strategy(strategy())
    for seed, x in enumerate(FINISHED[:6]):
        client.complete_trial(add_trial(client, x, len(EPOCHS), seed))


def stops_a_stuck_curve(client: Client) -> bool:
    index = client.attach_trial({"x1": 0.3, "x2": 0.7})  # a promising setting
    for epoch, value in zip(EPOCHS, STUCK):
        client.attach_data(index, {"error": value}, progression=epoch)
    return client.should_stop_trial_early(index)


def assert_restored(restored: Client) -> None:
    stored = restored._early_stopping_strategy
    assert isinstance(stored, GPAREarlyStoppingStrategy)
    assert stored.settings() == strategy().settings()
    assert stops_a_stuck_curve(restored)


def test_json_round_trip_keeps_gpar_early_stopping(tmp_path: Path) -> None:
    client = configure(GPARClient(random_seed=0), "json")
    run(client)
    path = str(tmp_path / "client.json")
    client.save_to_json_file(path)
    # Ax's Client drops its early-stopping strategy (its default takes over).
    assert Client.load_from_json_file(path)._maybe_early_stopping_strategy is None
    restored = GPARClient.load_from_json_file(path)
    assert_restored(restored)
    # Saved again after a load, it still carries the strategy.
    restored.save_to_json_file(path)
    assert isinstance(GPARClient.load_from_json_file(path)._early_stopping_strategy,
                      GPAREarlyStoppingStrategy)


def test_sqlite_round_trip_keeps_gpar_early_stopping(tmp_path: Path) -> None:
    pytest.importorskip("sqlalchemy")
    pytest.importorskip("tabulate")
    from ax.storage.sqa_store.db import (
        create_all_tables,
        get_engine,
        init_engine_and_session_factory,
    )

    url = f"sqlite:///{tmp_path / 'ax.db'}"
    init_engine_and_session_factory(url=url, force_init=True)
    create_all_tables(get_engine())
    run(configure(GPARClient(storage_config=StorageConfig(url=url), random_seed=0), "sql"))
    assert_restored(GPARClient.load_from_database("sql", storage_config=StorageConfig(url=url)))


def test_a_strategy_that_cannot_be_stored_is_an_error_when_set() -> None:
    with pytest.raises(ValueError, match="Configure the experiment before"):
        GPARClient().set_early_stopping_strategy(strategy())
    client = configure(GPARClient(), "unstorable")
    with pytest.raises(Exception, match="not registered"):
        client.set_early_stopping_strategy(
            GPAREarlyStoppingStrategy(EPOCHS, gpar_options={"outcome_transform": Log()}))
