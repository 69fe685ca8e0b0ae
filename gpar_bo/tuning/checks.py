"""Checks of a tuning run's settings and inputs, all made before anything starts.

Each raises :class:`~gpar_bo.tuning.errors.TuneSettingsError` with one line that
names the bad setting, so that a mistake costs seconds, not failed trials.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpar_bo.tuning.errors import TuneSettingsError
from gpar_bo.tuning.jobs import DEFAULT_VERDICT_TIMEOUT, resolve

if TYPE_CHECKING:
    from gpar_bo.tuning.problem import TuningProblem

__all__ = ["SCHEDULERS", "check_job", "check_output_directory", "check_scheduler", "check_tune_options"]

#: The schedulers of ``tune``; the first is the default.
SCHEDULERS = ("freeze-thaw", "early-stopping")


def check_tune_options(
    problem: TuningProblem, budget_epochs: int, workers: int, num_sobol_trials: int,
    threshold: float, min_epochs: int, max_trials: int | None,
    verdict_timeout: float = DEFAULT_VERDICT_TIMEOUT,
    scheduler: str = "early-stopping",
) -> None:
    """Reject settings under which ``tune`` would run no trial or could not work."""
    problems = []
    if scheduler not in SCHEDULERS:
        problems.append(f"scheduler must be one of {', '.join(SCHEDULERS)} (got {scheduler!r})")
    elif problem.epochs == 1:
        problems.append("GPAR needs at least 2 checkpoints, so runs of at least 2 epochs (got 1)")
    if problem.epochs < 1:
        # The budget and min_epochs are judged against the epochs: say only this.
        problems.append(f"epochs must be >= 1 (got {problem.epochs})")
    elif problem.checkpoint_epochs is not None:
        bad = checkpoint_problems(problem.checkpoint_epochs, problem.epochs)
        problems.extend(bad)
        if not bad and len(problem.checkpoint_epochs) < 2:
            problems.append(f"GPAR needs at least 2 checkpoints (got {problem.checkpoint_epochs})")
    if workers < 1:
        problems.append(f"workers must be >= 1 (got {workers})")
    if problem.epochs >= 1 and budget_epochs < problem.epochs:
        problems.append(f"the budget ({budget_epochs} epochs) must cover one full trial "
                        f"({problem.epochs} epochs)")
    if num_sobol_trials < 0:
        problems.append(f"num_sobol_trials must be >= 0 (got {num_sobol_trials})")
    if not 0 < threshold < 1:
        problems.append(f"threshold must be a probability in (0, 1) (got {threshold})")
    if problem.epochs >= 1 and not 1 <= min_epochs <= problem.epochs:
        problems.append(f"min_epochs must be in [1, {problem.epochs}] (got {min_epochs})")
    if max_trials is not None and max_trials < 1:
        problems.append(f"max_trials must be >= 1 (got {max_trials})")
    if not verdict_timeout > 0:
        problems.append(f"verdict_timeout must be > 0 seconds (got {verdict_timeout})")
    if scheduler == "freeze-thaw":
        from ax.core.search_space import SearchSpace

        from gpar_bo.ax.encoding import UnitCubeEncoding

        try:
            UnitCubeEncoding(SearchSpace(parameters=list(problem.parameters)))
        except ValueError as error:
            problems.append(str(error).rstrip("."))
    if problems:
        raise TuneSettingsError("Bad tuning settings: " + "; ".join(problems) + ".")


def checkpoint_problems(checkpoints: Any, epochs: int) -> list[str]:
    """What is wrong with ``checkpoints`` as the checkpoint epochs of ``epochs``-epoch runs."""
    if isinstance(checkpoints, (tuple, range)):
        checkpoints = list(checkpoints)
    whole = isinstance(checkpoints, list) and bool(checkpoints) and all(
        isinstance(c, int) and not isinstance(c, bool) for c in checkpoints)
    ok = whole and checkpoints[0] >= 1 and all(a < b for a, b in zip(checkpoints, checkpoints[1:]))
    if not ok:
        return [f"checkpoint_epochs must be increasing whole epochs >= 1 (got {checkpoints})"]
    if checkpoints[-1] != epochs:
        return [f"the last checkpoint must be the final epoch {epochs} (got {checkpoints})"]
    return []


def check_job(problem: TuningProblem) -> None:
    """Run the problem's own check of its job settings (e.g. that its data loads)."""
    if problem.check is None:
        return
    try:
        resolve(problem.check)(**problem.train_kwargs)
    except (ValueError, OSError) as error:
        raise TuneSettingsError(f"Bad job settings: {error}") from error


def check_scheduler(address: str, timeout: float = 10.0) -> None:
    """Connect to the dask scheduler at ``address`` (within ``timeout`` seconds)."""
    try:
        from distributed import Client
    except ImportError:
        raise TuneSettingsError(
            "A dask scheduler needs dask.distributed: pip install 'gpar-bo[dask]'.") from None
    try:
        client = Client(address, timeout=timeout, set_as_default=False)
    except Exception as error:  # refused, timed out, bad address: all one answer
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise TuneSettingsError(
            f"Cannot reach the dask scheduler at {address} within {timeout:g} s: {reason}"
        ) from None
    client.close()


def check_output_directory(directory: str | Path) -> Path:
    """Create the output directory if needed and check that it is writable.

    Returns:
        The directory as an absolute path (trials store their progress files'
        paths, which a resume from another working directory must still find).
    """
    directory = Path(directory).expanduser().absolute()
    if directory.exists() and not directory.is_dir():
        raise TuneSettingsError(f"The output directory {directory} is a file, not a directory.")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory) as probe:
            probe.write(b"probe")
    except OSError as error:
        raise TuneSettingsError(
            f"The output directory {directory} is not writable: "
            f"{error.strerror or error}.") from None
    return directory.resolve()
