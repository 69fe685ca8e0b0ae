"""``gpar-bo tune``: tune the MNIST MLP with Ax + GPAR + early stopping."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from pathlib import Path

from gpar_bo.tuning.jobs import DEFAULT_VERDICT_TIMEOUT

__all__ = ["add_tune_parser", "run_tune"]


def add_tune_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the ``tune`` sub-command on ``subparsers``."""
    p = subparsers.add_parser(
        "tune",
        help="tune the MNIST MLP with Ax + GPAR + early stopping under an epoch budget",
        description=(
            "Bayesian optimisation of the MNIST MLP's six hyperparameters with Ax: Sobol "
            "trials, then GPAR, which learns from every epoch of running, finished and "
            "early-stopped trials; running trials that GPAR gives little chance of beating "
            "the best final validation error are stopped. Writes OUT/snapshot.json (Ax's "
            "JSON experiment; rerun the same command to resume after an interruption), "
            "OUT/runs/ (per-epoch progress of each trial) and OUT/report.{json,png}. "
            "One process at a time may use OUT; after a crash (even kill -9) rerunning "
            "resumes without losing a trial."
        ),
    )
    p.add_argument("--out", type=Path, default=Path("gpar-bo-tune"),
                   help="output directory; resumed if it holds a snapshot (default gpar-bo-tune)")
    p.add_argument("--budget", type=int, default=120,
                   help="total training epochs over all trials (default 120)")
    p.add_argument("--epochs", type=int, default=10, help="epochs of a full trial (default 10)")
    p.add_argument("--workers", type=int, default=2, help="trials trained in parallel (default 2)")
    p.add_argument("--sobol-trials", type=int, default=6,
                   help="Sobol trials before GPAR (default 6)")
    p.add_argument("--threshold", type=float, default=0.05,
                   help="stop a trial when P(final error beats the best) is below this "
                        "(default 0.05)")
    p.add_argument("--min-epochs", type=int, default=2,
                   help="epochs before a trial may be stopped (default 2)")
    p.add_argument("--data-dir", type=Path, default=None,
                   help="directory of MNIST-format IDX files (default: embedded 5k MNIST)")
    p.add_argument("--max-examples", type=int, default=None,
                   help="use only this many digits (quick smoke runs)")
    p.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    p.add_argument("--dask", action="store_true",
                   help="run trials on dask.distributed (a LocalCluster unless --scheduler)")
    p.add_argument("--scheduler", default=None,
                   help="address of an existing dask scheduler, e.g. tcp://host:8786")
    p.add_argument("--scheduler-timeout", type=float, default=10.0,
                   help="seconds to wait for --scheduler to answer at start (default 10)")
    p.add_argument("--verdict-timeout", type=float, default=DEFAULT_VERDICT_TIMEOUT,
                   help="seconds a job waits after an epoch for the tuner's verdict before "
                        "it pauses (default 300)")
    p.add_argument("--recover", action="store_true",
                   help="if OUT/snapshot.json is damaged or missing, resume from its last "
                        "good copy (snapshot.json.bak) or rebuild the run from OUT/runs/")
    p.add_argument("--thorough-gpar", action="store_true",
                   help="fit GPAR and optimise its acquisition with BoTorch's full defaults "
                        "(several times slower per trial than the default budgets)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(run=run_tune, parser=p)
    return p


#: Default GPAR effort: capped L-BFGS iterations per conditional and a small
#: acquisition optimisation (BoTorch's mixed integer optimiser, as two of the
#: MLP's parameters are integers). ``--thorough-gpar`` drops these caps.
FAST_GPAR = {
    "fit_kwargs": {"optimizer_kwargs": {"options": {"maxiter": 75}}},
    "acqf_optimizer_kwargs": {
        "num_restarts": 2, "raw_samples": 128,
        "options": {"maxiter_alternating": 4, "maxiter_continuous": 30},
    },
}


def run_tune(args: argparse.Namespace) -> int:
    """Run ``gpar-bo tune``: check everything, then tune; bad input and refusals
    are one line on stderr with exit status 2, never a traceback."""
    import torch

    from gpar_bo.problems.mnist.job import mnist_problem
    from gpar_bo.tuning.errors import TuneError, TuneSettingsError
    from gpar_bo.tuning.loop import tune

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # `kill` (SIGTERM) ends the loop like Ctrl-C: snapshot saved, jobs paused.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    # GPAR's small GP fits are fastest on one thread; the workers train on one each.
    torch.set_num_threads(1)
    if args.scheduler_timeout <= 0:
        args.parser.error(f"--scheduler-timeout must be > 0 (got {args.scheduler_timeout})")
    problem = mnist_problem(
        epochs=args.epochs,
        data_dir=None if args.data_dir is None else str(args.data_dir.resolve()),
        seed=args.seed,
        max_examples=args.max_examples,
    )
    try:
        report = tune(
            problem, args.out, args.budget, workers=args.workers,
            num_sobol_trials=args.sobol_trials, threshold=args.threshold,
            min_epochs=args.min_epochs, use_dask=args.dask or args.scheduler is not None,
            scheduler_address=args.scheduler, seed=args.seed, progress=not args.no_progress,
            recover=args.recover, scheduler_timeout=args.scheduler_timeout,
            verdict_timeout=args.verdict_timeout,
            **({} if args.thorough_gpar else FAST_GPAR),
        )
    except TuneSettingsError as error:
        args.parser.error(str(error))
    except TuneError as error:
        print(f"gpar-bo tune: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"gpar-bo tune: interrupted; the snapshot is saved: rerun the same command "
              f"to resume from {args.out}.", file=sys.stderr)
        return 130
    best = report["best"]
    summary = {
        "trials": len(report["trials"]),
        "early_stopped": sum(t["stopped"] for t in report["trials"]),
        "epochs_trained": report["epochs_trained"],
        "epochs_saved": report["epochs_saved"],
        "best": None if best is None else {
            "trial_index": best["trial_index"], "val_error": best["final"],
            "parameters": best["parameters"],
        },
        "report": str(args.out / "report.json"),
        "plot": str(args.out / "report.png"),
    }
    print(json.dumps(summary, indent=2))
    return 0
