"""A tuning process for the tests that kill or race real processes.

``python -m tests.tuning.scripts OUT MAX_TRIALS [EPOCHS SECONDS_PER_EPOCH [KILL_AT]]`` runs
``tune`` on the toy problem in OUT. With KILL_AT = k it kills its own process group
with SIGKILL in the middle of its k-th snapshot write: after the new snapshot's text is
half written to its temporary file, before the rename (``os.replace``) that would
publish it. An error ends it with exit status 3 and ``ERROR <class>: <message>``.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from pathlib import Path

#: ``tune`` settings that keep these runs light: Sobol trials only and no trial judged
#: for early stopping before its final epoch, so no GP fit slows the crash tests down.
LIGHT = {
    "scheduler": "early-stopping", "num_sobol_trials": 1000, "min_epochs": 4, "workers": 2, "poll_seconds": 0.1,
    "progress": False, "fit_kwargs": {"optimizer_kwargs": {"options": {"maxiter": 30}}},
}


def kill_during_snapshot_write(at: int) -> None:
    """Make the ``at``-th replacement of a ``snapshot.json`` kill this process group."""
    real_replace = os.replace
    count = 0

    def replace(source: str | os.PathLike, target: str | os.PathLike) -> None:
        nonlocal count
        if Path(target).name == "snapshot.json":
            count += 1
            if count == at:
                text = Path(source).read_bytes()
                Path(source).write_bytes(text[: len(text) // 2])  # the write, cut short
                os.killpg(0, signal.SIGKILL)
        real_replace(source, target)

    os.replace = replace  # type: ignore[assignment]


def main(argv: list[str]) -> int:
    import torch

    from gpar_bo.problems.toy import toy_problem
    from gpar_bo.tuning.loop import tune

    torch.set_num_threads(1)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    out, max_trials = argv[0], int(argv[1])
    epochs = int(argv[2]) if len(argv) > 2 else LIGHT["min_epochs"]
    seconds = float(argv[3]) if len(argv) > 3 else 0.1
    if len(argv) > 4:
        kill_during_snapshot_write(int(argv[4]))
    try:
        tune(toy_problem(epochs, seconds), out, 10**4, **LIGHT, max_trials=max_trials)
    except Exception as error:
        print(f"ERROR {type(error).__name__}: {error}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
