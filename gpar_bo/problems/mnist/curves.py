"""Learning-curve data sets: sample grid settings, generate resumably to CSV, load (X, Y).

File format (one CSV per data set, one row per hyperparameter setting, in index order):

``index, n_hidden_layers, n_neurons, dropout, log_learning_rate, log_l1, log_l2,
train_seed, seconds, val_loss_1 .. val_loss_E, val_error_1 .. val_error_E``

``index`` is the setting's position in the seeded sample (:func:`sample_settings`),
``train_seed`` the seed passed to :func:`~gpar_bo.problems.mnist.mlp.train_mlp`, ``seconds`` its
wall-clock time, and ``val_loss_e`` / ``val_error_e`` the validation cross-entropy
(nats) and classification error rate after epoch ``e`` (``E = 21`` for the shipped
files). A JSON provenance file with the same stem sits beside each CSV.

Resumability: rows are appended and flushed one at a time, so an interrupted run leaves
every finished setting on disk; a rerun with the same arguments re-samples the identical
list (settings depend only on ``(seed, index)``), skips indices already present, and
drops (with a logged warning) only a partial trailing line, whose setting it then redoes.
"""

from __future__ import annotations

import json
import logging
import math
import os
import platform
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gpar_bo.problems.mnist.data import MNISTData, load_mnist
from gpar_bo.problems.mnist.mlp import (
    HPARAM_NAMES,
    PAPER_GRID,
    MLPHyperparameters,
    batch_size_for,
    train_mlp,
)

__all__ = [
    "DEFAULT_CHECKPOINTS",
    "METRICS",
    "curve_columns",
    "sample_settings",
    "train_seed_for",
    "read_curve_rows",
    "generate_curves",
    "load_curves",
    "provenance_path",
]

logger = logging.getLogger(__name__)

#: Checkpoint epochs used in the paper's text: 1, 5, 11, 16 and 21.
DEFAULT_CHECKPOINTS: tuple[int, ...] = (1, 5, 11, 16, 21)

#: Metric name -> column prefix.
METRICS = {"error": "val_error", "loss": "val_loss"}

_META_COLUMNS = ("index", *HPARAM_NAMES, "train_seed", "seconds")


def curve_columns(epochs: int) -> list[str]:
    """The CSV header for curves of ``epochs`` epochs."""
    return [
        *_META_COLUMNS,
        *(f"val_loss_{e}" for e in range(1, epochs + 1)),
        *(f"val_error_{e}" for e in range(1, epochs + 1)),
    ]


def provenance_path(csv_path: str | Path) -> Path:
    """The provenance JSON that sits beside a curve CSV (same stem, ``.json``)."""
    return Path(csv_path).with_suffix(".json")


def sample_settings(
    n: int, seed: int, grid: Mapping[str, Sequence[float]] = PAPER_GRID
) -> list[MLPHyperparameters]:
    """Draw ``n`` distinct settings uniformly at random from the rectilinear ``grid``.

    Like the authors' shuffled grid, no setting repeats. The draw is a seeded sequential
    stream with duplicates skipped, so the list is prefix-stable: setting ``i`` depends
    only on ``(seed, i)`` and ``sample_settings(n, s)[:m] == sample_settings(m, s)``.

    Args:
        n: number of settings.
        seed: sampling seed.
        grid: name -> allowed values for each of :data:`HPARAM_NAMES`.

    Returns:
        ``n`` :class:`MLPHyperparameters`, all on ``grid``.
    """
    unknown = sorted(set(grid) - set(HPARAM_NAMES))
    if unknown:
        raise ValueError(f"unknown hyperparameter(s) {unknown} in grid")
    values = [tuple(grid[name]) for name in HPARAM_NAMES]
    size = math.prod(len(v) for v in values)
    if n > size:
        raise ValueError(f"cannot draw {n} distinct settings from a grid of {size}")
    rng = np.random.default_rng(seed)
    sizes = np.array([len(v) for v in values])
    seen: set[tuple[int, ...]] = set()
    settings: list[MLPHyperparameters] = []
    while len(settings) < n:
        key = tuple(int(i) for i in rng.integers(0, sizes))
        if key in seen:
            continue
        seen.add(key)
        settings.append(
            MLPHyperparameters(**{name: values[j][i] for j, (name, i) in enumerate(zip(HPARAM_NAMES, key))})
        )
    return settings


def train_seed_for(seed: int, index: int) -> int:
    """The training seed of setting ``index`` of a data set sampled with ``seed``."""
    return int(np.random.SeedSequence([seed, index]).generate_state(1)[0])


def _format_row(index: int, hp: MLPHyperparameters, train_seed: int, seconds: float,
                val_loss: Sequence[float], val_error: Sequence[float]) -> str:
    cells = [str(index), str(hp.n_hidden_layers), str(hp.n_neurons)]
    cells += [f"{getattr(hp, n):.10g}" for n in ("dropout", "log_learning_rate", "log_l1", "log_l2")]
    cells += [str(train_seed), f"{seconds:.3f}"]
    # 9 significant digits round-trip float32 exactly (the losses are float32).
    cells += [f"{float(v):.9g}" for v in (*val_loss, *val_error)]
    return ",".join(cells) + "\n"


def _parse_row(line: str, n_columns: int) -> list[float]:
    cells = line.rstrip("\r\n").split(",")
    if len(cells) != n_columns:
        raise ValueError(f"expected {n_columns} fields, got {len(cells)}")
    return [float(c) for c in cells]


def read_curve_rows(
    path: str | Path, *, repair: bool = False
) -> tuple[list[str], dict[int, list[float]]]:
    """Read a curve CSV into ``{index: row values}``.

    A trailing line without its newline (as left by a writer killed mid-row) is dropped
    with a logged warning; with ``repair=True`` the file is also truncated to its last
    complete row so appends start on a clean line. Any other malformed line, or a
    repeated index, raises ``ValueError``.

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
    if not lines[0].endswith("\n") or header[: len(_META_COLUMNS)] != list(_META_COLUMNS):
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


def _package_versions() -> dict[str, str]:
    import mlxtend

    import gpar_bo

    versions = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "mlxtend": mlxtend.__version__,
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
    n_settings: int,
    *,
    seed: int = 0,
    data: MNISTData | None = None,
    epochs: int = 21,
    grid: Mapping[str, Sequence[float]] = PAPER_GRID,
    progress: bool = True,
    command: str | None = None,
    max_new: int | None = None,
) -> int:
    """Train ``n_settings`` sampled settings and append their curves to ``path``.

    Resumes: indices already in ``path`` are skipped (their hyperparameters are checked
    against the sample, so a different seed or grid on the same file is an error). Each
    finished row is flushed and fsynced before the next setting starts. A provenance
    JSON (:func:`provenance_path`) records the command, seed, versions, data source,
    machine and every (partial) run.

    Args:
        path: output CSV (created with a header if missing).
        n_settings: total number of settings the file should end up with.
        seed: sampling seed; setting ``i`` trains with ``train_seed_for(seed, i)``.
        data: the MNIST split; ``None`` loads the embedded default.
        epochs: epochs per setting (columns ``val_*_1 .. val_*_epochs``).
        grid: the sampling grid (default: the authors' grid, 1-2 hidden layers).
        progress: show a tqdm progress bar.
        command: the command line to record in the provenance (default: ``sys.argv``).
        max_new: stop after this many new settings (for tests and time-boxed runs).

    Returns:
        The number of settings trained in this call.
    """
    from tqdm.auto import tqdm

    path = Path(path)
    settings = sample_settings(n_settings, seed, grid)
    columns = curve_columns(epochs)
    done: dict[int, list[float]] = {}
    if path.exists() and path.stat().st_size > 0:
        header, done = read_curve_rows(path, repair=True)
        if header != columns:
            raise ValueError(
                f"{path} has columns for a different number of epochs or format; "
                f"expected {len(columns)} columns for epochs={epochs}"
            )
        for index, row in done.items():
            if index >= n_settings:
                raise ValueError(f"{path} has setting index {index} >= n_settings={n_settings}")
            expected = settings[index].to_vector()
            if not np.allclose(row[1:7], expected, atol=1e-9):
                raise ValueError(
                    f"{path}: row {index} has hyperparameters {row[1:7]} but seed {seed} "
                    f"samples {expected} there; was the file made with another seed or grid?"
                )
        logger.info("%s: resuming with %d of %d settings already done", path, len(done), n_settings)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(",".join(columns) + "\n")
    if data is None:
        data = load_mnist()

    prov_file = provenance_path(path)
    prov: dict[str, Any] = json.loads(prov_file.read_text()) if prov_file.exists() else {}
    run_record = {"started": _now(), "rows_before": len(done), "command": command or " ".join(
        [Path(sys.argv[0]).name, *sys.argv[1:]])}
    prov.update({
        "description": "Validation learning curves of MNIST MLPs (gpar_bo.problems.mnist), one row "
        "per hyperparameter setting sampled without replacement from the grid.",
        "csv": path.name,
        "seed": seed,
        "n_settings": n_settings,
        "epochs": epochs,
        "grid": {k: list(v) for k, v in grid.items()},
        "data_source": data.source,
        "n_train": data.n_train,
        "n_val": data.n_val,
        "batch_size": batch_size_for(data.n_train),
        "optimiser": "Adam(betas=(0.9, 0.999), eps=1e-8), cross-entropy + L1/L2 on hidden weights",
        "versions": _package_versions(),
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
                hp = settings[index]
                train_seed = train_seed_for(seed, index)
                result = train_mlp(hp, data, epochs=epochs, seed=train_seed)
                handle.write(_format_row(index, hp, train_seed, result.seconds,
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
    epochs: Sequence[int] = DEFAULT_CHECKPOINTS,
    metric: str = "error",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Load a learning-curve CSV as GPAR training data ``(X, Y)``.

    Args:
        path: a CSV written by :func:`generate_curves` (e.g.
            ``benchmarks/data/mnist_curves_study.csv``).
        epochs: checkpoint epochs to keep, in output order (default 1, 5, 11, 16, 21).
        metric: ``"error"`` (validation error rate) or ``"loss"`` (validation
            cross-entropy).

    Returns:
        ``X``: ``(n, 6)`` float64, the hyperparameters on the sampling scale in
        :data:`HPARAM_NAMES` order (layers, neurons, dropout, log lr, log L1, log L2);
        ``Y``: ``(n, len(epochs))`` float64, the metric at each checkpoint. Rows are in
        setting-index order.

    Raises:
        ValueError: unknown metric, an epoch not in the file, or a malformed file.
    """
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {sorted(METRICS)}")
    header, rows = read_curve_rows(path)
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
    x_cols = [header.index(name) for name in HPARAM_NAMES]
    y_cols = [header.index(f"{prefix}_{e}") for e in epochs]
    return torch.from_numpy(table[:, x_cols].copy()), torch.from_numpy(table[:, y_cols].copy())
