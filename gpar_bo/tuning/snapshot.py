"""The tuning loop's snapshot: Ax's JSON encoding of the experiment and its strategy."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ax.core.experiment import Experiment
from ax.generation_strategy.generation_strategy import GenerationStrategy
from ax.storage.json_store.decoder import generation_strategy_from_json, object_from_json
from ax.storage.json_store.encoder import object_to_json
from ax.storage.json_store.registry import (
    CORE_CLASS_DECODER_REGISTRY,
    CORE_CLASS_ENCODER_REGISTRY,
)

from gpar_bo.tuning.runner import json_registries

__all__ = ["SNAPSHOT", "load_snapshot", "save_snapshot"]

#: The snapshot's file name in a tuning directory.
SNAPSHOT = "snapshot.json"


def save_snapshot(path: str | Path, experiment: Experiment, strategy: GenerationStrategy) -> None:
    """Write Ax's JSON encoding of the experiment and strategy, atomically."""
    encoders, _ = json_registries()
    encode = {"encoder_registry": encoders, "class_encoder_registry": CORE_CLASS_ENCODER_REGISTRY}
    snapshot = {
        "experiment": object_to_json(experiment, **encode),
        "generation_strategy": object_to_json(strategy, **encode),
    }
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(snapshot))
    os.replace(partial, path)  # a kill mid-write leaves the previous snapshot intact


def load_snapshot(path: str | Path) -> tuple[Experiment, GenerationStrategy]:
    """Read a snapshot written by :func:`save_snapshot`."""
    _, decoders = json_registries()
    decode = {"decoder_registry": decoders, "class_decoder_registry": CORE_CLASS_DECODER_REGISTRY}
    snapshot = json.loads(Path(path).read_text())
    experiment = object_from_json(snapshot["experiment"], **decode)
    strategy = generation_strategy_from_json(snapshot["generation_strategy"],
                                             experiment=experiment, **decode)
    return experiment, strategy
