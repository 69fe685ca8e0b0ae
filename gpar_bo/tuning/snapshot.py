"""The tuning loop's snapshot: Ax's JSON encoding of the experiment and its strategy.

``save_snapshot`` replaces ``snapshot.json`` atomically (:mod:`gpar_bo.tuning.atomic`)
and keeps the snapshot it replaces as ``snapshot.json.bak``, a last good copy in case
``snapshot.json`` is later damaged by something else (a full disk, a copy cut short,
an editor). ``load_snapshot`` turns any damage into :class:`SnapshotDamaged`, which
names the file and what is wrong with it.
"""

from __future__ import annotations

import json
from pathlib import Path

from ax.core.experiment import Experiment
from ax.generation_strategy.generation_strategy import GenerationStrategy
from ax.storage.json_store.decoder import generation_strategy_from_json, object_from_json
from ax.storage.json_store.encoder import object_to_json
from ax.storage.json_store.registry import (
    CORE_CLASS_DECODER_REGISTRY,
    CORE_CLASS_ENCODER_REGISTRY,
)

from gpar_bo.tuning.atomic import atomic_write_text
from gpar_bo.tuning.errors import TuneError
from gpar_bo.tuning.runner import json_registries

__all__ = ["BACKUP", "POLICY_STATE", "SNAPSHOT", "SnapshotDamaged", "backup_path", "load_snapshot",
           "save_snapshot"]

#: The snapshot's file name in a tuning directory.
SNAPSHOT = "snapshot.json"
#: Its last good copy beside it.
BACKUP = SNAPSHOT + ".bak"
#: The freeze-thaw policy's state beside it (``FreezeThawPolicy.state_dict``; a cache).
POLICY_STATE = "policy.pt"


class SnapshotDamaged(TuneError):
    """A snapshot file cannot be read back; the message names the file and the damage."""


def backup_path(path: str | Path) -> Path:
    """Where :func:`save_snapshot` keeps the last good copy of ``path``."""
    path = Path(path)
    return path.with_name(path.name + ".bak")


def save_snapshot(
    path: str | Path, experiment: Experiment, strategy: GenerationStrategy | None
) -> None:
    """Write Ax's JSON encoding of the experiment and strategy, atomically; the
    snapshot it replaces is kept as the last good copy (:func:`backup_path`).

    ``strategy`` is None when no generation strategy makes the trials (freeze-thaw
    scheduling: :mod:`gpar_bo.tuning.freeze_thaw`)."""
    encoders, _ = json_registries()
    encode = {"encoder_registry": encoders, "class_encoder_registry": CORE_CLASS_ENCODER_REGISTRY}
    snapshot = {
        "experiment": object_to_json(experiment, **encode),
        "generation_strategy": None if strategy is None else object_to_json(strategy, **encode),
    }
    atomic_write_text(path, json.dumps(snapshot), backup=backup_path(path))


def load_snapshot(path: str | Path) -> tuple[Experiment, GenerationStrategy | None]:
    """Read a snapshot written by :func:`save_snapshot` (the strategy may be None).

    Raises:
        SnapshotDamaged: The file is empty, not JSON (e.g. truncated), not a
            snapshot, or Ax cannot decode it.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise SnapshotDamaged(f"{path} cannot be read: {error}") from error
    if not text.strip():
        raise SnapshotDamaged(f"{path} is damaged: it is empty ({len(text)} bytes).")
    try:
        snapshot = json.loads(text)
    except json.JSONDecodeError as error:
        raise SnapshotDamaged(
            f"{path} is damaged: it is not valid JSON ({error.msg} at line {error.lineno}, "
            f"column {error.colno}, of {len(text)} characters; truncated?)."
        ) from error
    missing = ([key for key in ("experiment", "generation_strategy") if key not in snapshot]
               if isinstance(snapshot, dict) else None)
    if missing is None or missing:
        raise SnapshotDamaged(
            f"{path} is damaged: it is JSON but not a tuning snapshot (no "
            f"{' or '.join(repr(k) for k in missing or ['experiment'])} entry)."
        )
    _, decoders = json_registries()
    decode = {"decoder_registry": decoders, "class_decoder_registry": CORE_CLASS_DECODER_REGISTRY}
    try:
        experiment = object_from_json(snapshot["experiment"], **decode)
        strategy = (None if snapshot["generation_strategy"] is None else
                    generation_strategy_from_json(snapshot["generation_strategy"],
                                                  experiment=experiment, **decode))
    except Exception as error:  # Ax's decoders raise anything from KeyError to TypeError
        raise SnapshotDamaged(
            f"{path} is damaged: Ax cannot decode it ({type(error).__name__}: {error})."
        ) from error
    if not isinstance(experiment, Experiment) or not isinstance(
        strategy, (GenerationStrategy, type(None))
    ):
        raise SnapshotDamaged(f"{path} is damaged: it does not decode to an experiment "
                              "and a generation strategy.")
    return experiment, strategy
