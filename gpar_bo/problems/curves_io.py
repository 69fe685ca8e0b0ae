"""Learning-curve tables on disk: resumable generation to CSV with JSON provenance, loading.

Every problem's curve table has the same layout, one CSV per table with one row per
hyperparameter setting, in index order:

``index, <hyperparameters...>, train_seed, seconds, val_loss_1 .. val_loss_E,
val_error_1 .. val_error_E``

``index`` is the setting's position in the problem's seeded sample, the hyperparameters
are stored as the problem defines them (each written with 10 significant digits),
``train_seed`` is :func:`train_seed_for` ``(seed, index)``, ``seconds`` the wall-clock
training time, and ``val_loss_e`` / ``val_error_e`` the validation loss and error after
epoch ``e``. A JSON provenance note with the same stem sits beside each CSV.

Resumability: rows are appended, flushed and fsynced one at a time, so an interrupted run
(even ``kill -9``) leaves every finished setting on disk; a rerun with the same arguments
re-samples the identical list, skips indices already present, and drops (with a logged
warning) only a partial trailing line, whose setting it then redoes.

A problem supplies its hyperparameter names, its seeded settings, a training function
and its part of the provenance; :func:`generate_curves` and :func:`load_curves` do the
rest (see :mod:`gpar_bo.problems.mnist.curves` and :mod:`gpar_bo.problems.funnel_mlp.curves`).
"""

from __future__ import annotations

import json
import logging
import os
import platform
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch

from gpar_bo.problems.hyperparameters import Hyperparameters
from gpar_bo.tuning.lock import DirectoryLock

__all__ = [
    "METRICS",
    "EpochCallback",
    "TrainResult",
    "curve_columns",
    "provenance_path",
    "train_seed_for",
    "read_curve_rows",
    "generate_curves",
    "load_curves",
    "package_versions",
]

logger = logging.getLogger(__name__)

H = TypeVar("H", bound=Hyperparameters)

#: Metric name -> column prefix.
METRICS = {"error": "val_error", "loss": "val_loss"}

#: Called after each epoch with (epoch starting at 1, validation loss, validation error
#: rate); returning True stops training after that epoch.
EpochCallback = Callable[[int, float, float], "bool | None"]


@dataclass
class TrainResult:
    """Per-epoch validation curves of one training run.

    Attributes:
        val_loss: mean validation cross-entropy (nats, without penalty terms) after each
            completed epoch; length ``epochs_run``.
        val_error: validation classification error rate (1 - accuracy) per epoch.
        epochs_run: number of epochs completed.
        stopped_early: True if the callback stopped the run before ``epochs``.
        seconds: wall-clock training time.
    """

    val_loss: list[float] = field(default_factory=list)
    val_error: list[float] = field(default_factory=list)
    epochs_run: int = 0
    stopped_early: bool = False
    seconds: float = 0.0


def _meta_columns(hparam_names: Sequence[str]) -> list[str]:
    return ["index", *hparam_names, "train_seed", "seconds"]


def curve_columns(hparam_names: Sequence[str], epochs: int) -> list[str]:
    """The CSV header of a table with these hyperparameters and ``epochs`` epochs."""
    return [
        *_meta_columns(hparam_names),
        *(f"val_loss_{e}" for e in range(1, epochs + 1)),
        *(f"val_error_{e}" for e in range(1, epochs + 1)),
    ]


def provenance_path(csv_path: str | Path) -> Path:
    """The provenance JSON that sits beside a curve CSV (same stem, ``.json``)."""
    return Path(csv_path).with_suffix(".json")


def train_seed_for(seed: int, index: int) -> int:
    """The training seed of setting ``index`` of a table sampled with ``seed``."""
    return int(np.random.SeedSequence([seed, index]).generate_state(1)[0])


def _format_row(index: int, setting: Sequence[float], train_seed: int, seconds: float,
                val_loss: Sequence[float], val_error: Sequence[float]) -> str:
    cells = [str(index), *(f"{float(v):.10g}" for v in setting), str(train_seed), f"{seconds:.3f}"]
    # 9 significant digits round-trip float32 exactly (the losses are float32).
    cells += [f"{float(v):.9g}" for v in (*val_loss, *val_error)]
    return ",".join(cells) + "\n"


def _parse_row(line: str, n_columns: int) -> list[float]:
    cells = line.rstrip("\r\n").split(",")
    if len(cells) != n_columns:
        raise ValueError(f"expected {n_columns} fields, got {len(cells)}")
    return [float(c) for c in cells]


def read_curve_rows(
    path: str | Path, hparam_names: Sequence[str] | None = None, *, repair: bool = False
) -> tuple[list[str], dict[int, list[float]]]:
    """Read a curve CSV into ``{index: row values}``.

    A trailing line without its newline (as left by a writer killed mid-row) is dropped
    with a logged warning; with ``repair=True`` the file is also truncated to its last
    complete row so appends start on a clean line. Any other malformed line, or a
    repeated index, raises ``ValueError``.

    Args:
        path: the CSV.
        hparam_names: if given, the header must start with ``index`` and these names.

    Returns:
        The header (column names) and a dict of rows (floats, in column order).
    """
    path = Path(path)
    raw = path.read_bytes()
    text = raw.decode("utf-8", errors="replace")
    lines = text.splitlines(keepends=True)
    if not lines:
        raise ValueError(f"{path} is empty: expected a header line")
    header = lines[0].rstrip("\r\n").split(",")
    if hparam_names is None:
        ok = header[:1] == ["index"] and {"train_seed", "seconds"} <= set(header)
    else:
        ok = header[: len(hparam_names) + 3] == _meta_columns(hparam_names)
    if not lines[0].endswith("\n") or not ok:
        raise ValueError(f"{path} does not start with a learning-curve CSV header")
    rows: dict[int, list[float]] = {}
    good_bytes = len(lines[0].encode("utf-8"))
    for number, line in enumerate(lines[1:], start=2):
        if not line.endswith("\n"):
            # Only the last line can lack a newline. The writer emits each row and its
            # newline in one write, so such a line was cut short: even if it parses, its
            # last number may be truncated ("0.1234" -> "0.12"), so it is never trusted.
            try:
                _parse_row(line, len(header))
                reason = "no final newline"
            except ValueError as exc:
                reason = str(exc)
            logger.warning(
                "%s: dropping partial last line %d (%s); its setting will be redone",
                path, number, reason,
            )
            break
        try:
            values = _parse_row(line, len(header))
        except ValueError as exc:
            raise ValueError(f"{path}, line {number}: malformed row ({exc})") from exc
        index = int(values[0])
        if index in rows:
            raise ValueError(f"{path}, line {number}: duplicate row for setting index {index}")
        rows[index] = values
        good_bytes += len(line.encode("utf-8"))
    if repair and good_bytes != len(raw):
        with open(path, "r+b") as handle:
            handle.truncate(good_bytes)
    return header, rows


def package_versions(**extra: str) -> dict[str, str]:
    """Versions of Python, torch, numpy, ``extra`` (name -> version) and gpar-bo."""
    import gpar_bo

    versions = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        **extra,
    }
    try:
        from importlib.metadata import version

        versions["gpar-bo"] = version("gpar-bo")
    except Exception:  # pragma: no cover - running from a source tree without install
        versions["gpar-bo"] = getattr(gpar_bo, "__version__", "unknown")
    return versions


def _machine() -> dict[str, Any]:
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
    }


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def generate_curves(
    path: str | Path,
    settings: Sequence[H],
    train: Callable[[H, int], TrainResult],
    *,
    hparam_names: Sequence[str],
    epochs: int,
    seed: int,
    provenance: Mapping[str, Any],
    versions: Mapping[str, str],
    progress: bool = True,
    command: str | None = None,
    max_new: int | None = None,
) -> int:
    """Train every setting not yet in ``path`` and append its curves, resumably.

    Resumes: indices already in ``path`` are skipped (their hyperparameters are checked
    against ``settings``, so a different seed or space on the same file is an error).
    Each finished row is flushed and fsynced before the next setting starts. The
    provenance JSON (:func:`provenance_path`) records ``provenance``, the seed, sizes,
    ``versions``, the machine and every (partial) run with its command and row counts.

    Args:
        path: output CSV (created with a header if missing).
        settings: the full seeded sample: ``settings[i]`` is setting ``i``, written as its
            :meth:`~gpar_bo.problems.hyperparameters.Hyperparameters.to_vector` (10
            significant digits).
        train: ``train(setting, train_seed)`` trains a setting for ``epochs`` epochs.
        hparam_names: the hyperparameter columns (the settings' names).
        epochs: epochs per setting (columns ``val_*_1 .. val_*_epochs``).
        seed: the sampling seed; setting ``i`` trains with ``train_seed_for(seed, i)``.
        provenance: the problem's description (key ``description`` first) and settings.
        versions: from :func:`package_versions`.
        progress: show a tqdm progress bar.
        command: the command line to record (default: ``sys.argv``).
        max_new: stop after this many new settings (for tests and time-boxed runs).

    Returns:
        The number of settings trained in this call.

    Raises:
        DirectoryLocked: Another process is writing ``path``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Two writers would append the same settings twice: the second is refused at once.
    with DirectoryLock(path.parent, name=f"{path.name}.lock", user=f"process writing {path.name}"):
        from tqdm.auto import tqdm

        n_settings = len(settings)
        vectors = [setting.to_vector() for setting in settings]
        d = len(hparam_names)
        columns = curve_columns(hparam_names, epochs)
        done: dict[int, list[float]] = {}
        if path.exists() and path.stat().st_size > 0:
            header, done = read_curve_rows(path, hparam_names, repair=True)
            if header != columns:
                raise ValueError(
                    f"{path} has columns for a different number of epochs or format; "
                    f"expected {len(columns)} columns for epochs={epochs}"
                )
            for index, row in done.items():
                if index >= n_settings:
                    raise ValueError(f"{path} has setting index {index} >= n_settings={n_settings}")
                expected = vectors[index]
                if not np.allclose(row[1 : 1 + d], expected, rtol=1e-9, atol=1e-9):
                    raise ValueError(
                        f"{path}: row {index} has hyperparameters {row[1:1 + d]} but seed {seed} "
                        f"samples {expected} there; was the file made with another seed or grid?"
                    )
            logger.info("%s: resuming with %d of %d settings already done", path, len(done), n_settings)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(",".join(columns) + "\n")

        prov_file = provenance_path(path)
        prov: dict[str, Any] = json.loads(prov_file.read_text()) if prov_file.exists() else {}
        run_record = {"started": _now(), "rows_before": len(done), "command": command or " ".join(
            [Path(sys.argv[0]).name, *sys.argv[1:]])}
        info = dict(provenance)
        prov.update({
            "description": info.pop("description", ""),
            "csv": path.name,
            "seed": seed,
            "n_settings": n_settings,
            "epochs": epochs,
            **info,
            "versions": dict(versions),
            "machine": _machine(),
        })
        prov.setdefault("runs", []).append(run_record)

        def write_prov(rows: int) -> None:
            run_record["rows_after"] = rows
            run_record["finished"] = _now()
            prov["rows"] = rows
            prov["complete"] = rows == n_settings
            # Write-then-rename: a kill never leaves a half-written provenance note.
            tmp = prov_file.with_name(prov_file.name + ".tmp")
            tmp.write_text(json.dumps(prov, indent=1) + "\n")
            os.replace(tmp, prov_file)

        write_prov(len(done))
        todo = [i for i in range(n_settings) if i not in done]
        if max_new is not None:
            todo = todo[:max_new]
        n_rows = len(done)
        bar = tqdm(total=n_settings, initial=len(done), disable=not progress, unit="setting",
                   desc=path.name, dynamic_ncols=True)
        try:
            with open(path, "a", encoding="utf-8") as handle:
                for index in todo:
                    train_seed = train_seed_for(seed, index)
                    result = train(settings[index], train_seed)
                    if result.epochs_run != epochs:
                        raise RuntimeError(f"setting {index} ran {result.epochs_run} of {epochs} epochs")
                    handle.write(_format_row(index, vectors[index], train_seed, result.seconds,
                                             result.val_loss, result.val_error))
                    handle.flush()
                    os.fsync(handle.fileno())
                    n_rows += 1
                    bar.update(1)
                    write_prov(n_rows)  # keep the note's row count in step with the CSV
        finally:
            bar.close()
            write_prov(n_rows)
        return n_rows - len(done)


def load_curves(
    path: str | Path,
    hparam_names: Sequence[str],
    epochs: Sequence[int],
    metric: str = "error",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Load a learning-curve CSV as ``(X, Y)``.

    Args:
        path: a CSV written by :func:`generate_curves`.
        hparam_names: the hyperparameter columns to return, in ``X``'s column order.
        epochs: checkpoint epochs to keep, in output order.
        metric: ``"error"`` (validation error rate) or ``"loss"`` (validation loss).

    Returns:
        ``X``: ``(n, len(hparam_names))`` float64 as stored; ``Y``: ``(n, len(epochs))``
        float64, the metric at each checkpoint. Rows are in setting-index order.

    Raises:
        ValueError: unknown metric, an epoch not in the file, or a malformed file.
    """
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {sorted(METRICS)}")
    header, rows = read_curve_rows(path, hparam_names)
    prefix = METRICS[metric]
    available = sorted(int(c.rsplit("_", 1)[1]) for c in header if c.startswith(prefix + "_"))
    epochs = [int(e) for e in epochs]
    if not epochs:
        raise ValueError("epochs must name at least one checkpoint epoch")
    unknown = [e for e in epochs if e not in available]
    if unknown:
        raise ValueError(
            f"unknown epoch(s) {unknown} for {path}; available: {available[0]}..{available[-1]}"
        )
    table = np.array([rows[i] for i in sorted(rows)], dtype=np.float64).reshape(len(rows), len(header))
    x_cols = [header.index(name) for name in hparam_names]
    y_cols = [header.index(f"{prefix}_{e}") for e in epochs]
    return torch.from_numpy(table[:, x_cols].copy()), torch.from_numpy(table[:, y_cols].copy())

