"""Syne Tune 0.13.0's learning-curve schedulers as baselines on the harness's tables.

Syne Tune 0.13.0 (the last release with DyHPO, MOBSTER, Hyper-Tune, BOHB and
ASHA) pins numpy < 1.27, so it lives in its own virtualenv
(``benchmarks/syne_tune/setup_venv.sh``). ``run_syne_tune`` writes the table
to a temporary ``.npz``, runs ``benchmarks/syne_tune/driver.py`` with that
venv's python in a subprocess and returns the trace, a dict with the fields of
``benchmarks.bo.harness.Trace.to_json()`` (plus ``budget``, ``workers``,
``consumed``, ``wall_seconds`` and a ``syne_tune`` record), so
``benchmarks.bo.analysis`` takes it as it is. The driver's docstring explains
the route and its accounting, which is that of ``harness.simulate``.

The venv's python is the ``python`` argument, else the environment variable
``GPAR_BO_SYNETUNE_PYTHON``, else ``~/.cache/gpar-bo/synetune/bin/python``.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.bo.harness import TabularProblem

DRIVER = Path(__file__).resolve().parent / "driver.py"
ENV_VAR = "GPAR_BO_SYNETUNE_PYTHON"
DEFAULT_PYTHON = str(Path.home() / ".cache" / "gpar-bo" / "synetune" / "bin" / "python")
METHODS = ("ASHA", "MOBSTER", "HyperTune", "BOHB", "DyHPO")


class SyneTuneUnavailable(RuntimeError):
    """The Syne Tune virtualenv's python is missing."""


def syne_tune_python(python: str | os.PathLike | None = None) -> Path:
    """The Syne Tune venv's python: ``python``, else ``$GPAR_BO_SYNETUNE_PYTHON``, else the default.

    Raises:
        SyneTuneUnavailable: If that file does not exist (one-line message).
    """
    path = Path(python or os.environ.get(ENV_VAR) or DEFAULT_PYTHON)
    if not path.is_file():
        raise SyneTuneUnavailable(
            f"Syne Tune python {path} not found: run benchmarks/syne_tune/setup_venv.sh "
            f"or set {ENV_VAR}."
        )
    return path


def syne_tune_available(python: str | os.PathLike | None = None) -> bool:
    """Whether the Syne Tune venv's python exists (it is not imported here)."""
    try:
        syne_tune_python(python)
    except SyneTuneUnavailable:
        return False
    return True


def write_table(problem: TabularProblem, path: Path) -> None:
    """``problem`` as the driver's ``.npz`` (X, error, loss, checkpoints, name)."""
    np.savez(
        path,
        X=problem.X.detach().cpu().double().numpy(),
        error=problem.error.detach().cpu().double().numpy(),
        loss=problem.loss.detach().cpu().double().numpy(),
        checkpoints=np.asarray(problem.checkpoints, dtype=np.int64),
        name=np.asarray(problem.name),
    )


def run_syne_tune(
    method: str,
    problem: TabularProblem,
    seed: int,
    budget: int,
    workers: int = 4,
    python: str | os.PathLike | None = None,
    scheduler_type: str | None = None,
    reduction_factor: float = 3.0,
    quantiles: str = "eta",
    timeout: float | None = None,
    progress: int = 0,
) -> dict:
    """Run Syne Tune's ``method`` on ``problem`` in the harness's epoch time.

    Args:
        method: One of ``METHODS`` (Syne Tune's class names).
        problem: The table (settings in the unit cube, curves, checkpoints).
        seed: The scheduler's ``random_seed``.
        budget: Epochs to spend, summed over workers.
        workers: Asynchronous workers.
        python: The Syne Tune venv's python (see ``syne_tune_python``).
        scheduler_type: ``"stopping"`` or ``"promotion"`` (default: Syne Tune's
            per method, Hyper-Tune promotion; DyHPO is always ``"dyhpo"``).
        reduction_factor: ASHA's eta; the promotion quantile is ``1 / eta``.
        quantiles: ``"eta"`` (``1 / reduction_factor`` at every rung, the
            harness's ASHA rule) or ``"ratio"`` (Syne Tune's default for
            explicit rung levels).
        timeout: Seconds before the subprocess is killed (None: no limit).
        progress: If > 0, the driver prints progress every ``progress`` suggest
            calls and its stderr goes to this process's stderr (not captured).

    Returns:
        The trace dict (``Trace.to_json()`` fields and the driver's extras).

    Raises:
        SyneTuneUnavailable: If the venv's python is missing.
        RuntimeError: If the driver fails (with the end of its stderr).
    """
    if method not in METHODS:
        raise ValueError(f"unknown Syne Tune method {method!r}; choose from {METHODS}.")
    executable = syne_tune_python(python)
    with tempfile.TemporaryDirectory(prefix="gpar_bo_synetune_") as tmp:
        table, out = Path(tmp) / "table.npz", Path(tmp) / "trace.json"
        write_table(problem, table)
        command = [
            str(executable),
            str(DRIVER),
            "--table", str(table),
            "--method", method,
            "--seed", str(seed),
            "--budget", str(budget),
            "--workers", str(workers),
            "--reduction-factor", str(reduction_factor),
            "--quantiles", quantiles,
            "--out", str(out),
        ]  # fmt: skip
        if scheduler_type is not None:
            command += ["--type", scheduler_type]
        if progress > 0:
            command += ["--progress", str(progress)]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
               "MKL_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}  # fmt: skip
        env.pop("PYTHONPATH", None)  # the driver must not see the project's packages
        done = subprocess.run(
            command,
            stdout=subprocess.DEVNULL,  # Syne Tune prints notes on missing optional extras
            stderr=None if progress > 0 else subprocess.PIPE,
            text=True,
            env=env,
            timeout=timeout,
            cwd=tmp,
        )
        if done.returncode != 0:
            tail = "\n".join((done.stderr or "(stderr above)").strip().splitlines()[-15:])
            raise RuntimeError(f"Syne Tune driver failed ({method}, seed {seed}):\n{tail}")
        trace = json.loads(out.read_text())
    trace["method"] = syne_tune_name(method, scheduler_type)
    trace["problem"] = problem.name
    return trace


def syne_tune_name(method: str, scheduler_type: str | None = None) -> str:
    """The method's name in results: ``syne_<method>`` (plus ``_<type>`` if overridden)."""
    name = f"syne_{method.lower()}"
    return f"{name}_{scheduler_type}" if scheduler_type else name

