"""``GPARClient``: Ax's ``Client``, whose early-stopping strategy survives storage.

Ax's ``Client`` saves its experiment and generation strategy (JSON snapshot or SQL)
but not its early-stopping strategy: a reloaded ``Client`` falls back to Ax's
default ``PercentileEarlyStoppingStrategy``, which would not stop, for instance, a
curve stuck far above the others. ``GPARClient`` stores the strategy with the
experiment (in its properties, in Ax's JSON form) and re-attaches it whenever it
is given an experiment, which is how both ``load_from_json_file`` and
``load_from_database`` hand over the loaded one.

Its ``get_best_parameterization`` also survives Ax's check of the model: Ax
cross-validates the model before it trusts its predictions, and a fold that holds
out one of only two runs that reached a checkpoint leaves GPAR too few values to
fit that checkpoint's conditional. Ax treats a model that cross-validates badly by
returning the best observed trial; ``GPARClient`` does the same here, with a warning.
"""

from __future__ import annotations

import logging
from typing import Any

from ax.api.client import Client
from ax.api.types import TOutcome, TParameterization
from ax.core.experiment import Experiment
from ax.early_stopping.strategies.base import BaseEarlyStoppingStrategy
from ax.storage.json_store.decoder import object_from_json
from ax.storage.json_store.encoder import object_to_json
from ax.storage.json_store.registry import (
    CORE_CLASS_DECODER_REGISTRY,
    CORE_CLASS_ENCODER_REGISTRY,
    CORE_DECODER_REGISTRY,
    CORE_ENCODER_REGISTRY,
)

from gpar_bo.data import TooFewObservationsError

__all__ = ["EARLY_STOPPING_PROPERTY", "GPARClient"]

#: The experiment property holding the early-stopping strategy's JSON form.
EARLY_STOPPING_PROPERTY = "early_stopping_strategy"

logger = logging.getLogger(__name__)


class GPARClient(Client):
    """Ax's ``Client``; its early-stopping strategy is saved with the experiment.

    Use it as Ax's ``Client`` (``GPARClient.load_from_json_file`` and
    ``GPARClient.load_from_database`` restore the strategy too). The strategy
    must be one Ax's JSON encoders know: Ax's own, or ``GPAREarlyStoppingStrategy``
    (registered by importing :mod:`gpar_bo.ax`); it is stored by its settings, so a
    reloaded GPAR strategy refits GPAR at its first poll.
    """

    def set_early_stopping_strategy(
        self, early_stopping_strategy: BaseEarlyStoppingStrategy
    ) -> None:
        """Set the strategy and store it with the experiment (saved to the database
        if ``storage_config`` is present).

        Raises:
            ValueError: No experiment is configured yet.
            JSONEncodeError: Ax cannot encode the strategy (e.g. GPAR options with an
                outcome transform object).
        """
        if self._maybe_experiment is None:
            raise ValueError(
                "Configure the experiment before setting the early-stopping strategy: "
                "it is stored with the experiment."
            )
        stored = self._encode(early_stopping_strategy)
        super().set_early_stopping_strategy(early_stopping_strategy)
        self._experiment._properties[EARLY_STOPPING_PROPERTY] = stored
        self._save_experiment_to_db_if_possible(experiment=self._experiment)

    def set_experiment(self, experiment: Experiment) -> None:
        """Set the experiment, and the early-stopping strategy stored with it (if any)."""
        stored = experiment._properties.get(EARLY_STOPPING_PROPERTY)
        strategy = None
        if stored is not None:
            # A JSON snapshot's experiment comes with its properties decoded; store
            # the JSON form again, which SQL storage can save as it is.
            strategy = stored if isinstance(stored, BaseEarlyStoppingStrategy) else (
                self._decode(stored)
            )
            experiment._properties[EARLY_STOPPING_PROPERTY] = self._encode(strategy)
        super().set_experiment(experiment)
        if strategy is not None:
            super().set_early_stopping_strategy(strategy)

    def get_best_parameterization(
        self, use_model_predictions: bool = True
    ) -> tuple[TParameterization, TOutcome, int, str]:
        """Ax's ``Client.get_best_parameterization``; when GPAR cannot be fitted to a
        fold of Ax's cross-validation (too few runs reached a checkpoint), the best
        observed trial, with a logged warning (module docstring)."""
        try:
            return super().get_best_parameterization(use_model_predictions)
        except TooFewObservationsError as error:
            if not use_model_predictions:
                raise
            logger.warning(
                "GPAR cannot be cross-validated on so few complete curves (%s); "
                "returning the best observed trial instead of the model's.", error)
            return super().get_best_parameterization(use_model_predictions=False)

    def _encode(self, strategy: BaseEarlyStoppingStrategy) -> dict[str, Any]:
        encoders, class_encoders, _, _ = self._json_registries()
        return object_to_json(
            strategy, encoder_registry=encoders, class_encoder_registry=class_encoders
        )

    def _decode(self, stored: dict[str, Any]) -> BaseEarlyStoppingStrategy:
        _, _, decoders, class_decoders = self._json_registries()
        return object_from_json(
            stored, decoder_registry=decoders, class_decoder_registry=class_decoders
        )

    def _json_registries(self) -> tuple[Any, Any, Any, Any]:
        """Ax's JSON encoders and decoders, as the ``Client`` picks them for snapshots."""
        bundle = None if self._storage_config is None else self._storage_config.registry_bundle
        if bundle is None:
            return (CORE_ENCODER_REGISTRY, CORE_CLASS_ENCODER_REGISTRY,
                    CORE_DECODER_REGISTRY, CORE_CLASS_DECODER_REGISTRY)
        config = bundle.sqa_config
        return (config.json_encoder_registry, config.json_class_encoder_registry,
                config.json_decoder_registry, config.json_class_decoder_registry)
