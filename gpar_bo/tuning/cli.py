"""``gpar-bo tune``: tune a training job (default: the MNIST MLP) with GPAR freeze-thaw
(or Ax + GPAR + early stopping); ``--job`` and ``--space`` name your own."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gpar_bo.tuning.jobs import DEFAULT_VERDICT_TIMEOUT

if TYPE_CHECKING:
    from gpar_bo.tuning.problem import TuningProblem

__all__ = ["add_tune_parser", "run_tune"]


def add_tune_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the ``tune`` sub-command on ``subparsers``."""
    p = subparsers.add_parser(
        "tune",
        help="tune a training job (default: the MNIST MLP) with GPAR freeze-thaw under an "
             "epoch budget",
        description=(
            "Tune a training job under an epoch budget: the MNIST MLP's six "
            "hyperparameters by default, or your own function with --job MODULE:FUNCTION "
            "--space SPACE.JSON. By default "
            "(--scheduler freeze-thaw) GPAR's freeze-thaw policy decides at every checkpoint "
            "which run trains on: it pauses runs, resumes paused ones and starts new "
            "settings. With --scheduler early-stopping, Ax runs Sobol trials, then GPAR, "
            "and stops running trials that GPAR gives little chance of beating the best "
            "final validation error. Writes OUT/snapshot.json (Ax's "
            "JSON experiment; rerun the same command to resume after an interruption), "
            "OUT/runs/ (per-epoch progress of each trial) and OUT/report.{json,png,html}. "
            "One process at a time may use OUT; after a crash (even kill -9) rerunning "
            "resumes without losing a trial."
        ),
    )
    p.add_argument("--out", type=Path, default=Path("gpar-bo-tune"),
                   help="output directory; resumed if it holds a snapshot (default gpar-bo-tune)")
    p.add_argument("--job", default=None, metavar="MODULE:FUNCTION",
                   help="your training function, e.g. mypkg.train:train (with --space; "
                        "default: the embedded MNIST MLP); see docs/tune.md")
    p.add_argument("--space", type=Path, default=None, metavar="SPACE.JSON",
                   help="the search-space file of --job: parameters, metric, epochs, "
                        "budget (see docs/tune.md)")
    p.add_argument("--budget", type=int, default=None,
                   help="total training epochs over all trials (default: the space "
                        "file's, else 120)")
    p.add_argument("--epochs", type=int, default=None,
                   help="MNIST: epochs of a full trial (default 10; --job: the space file's)")
    p.add_argument("--checkpoints", type=int, nargs="+", default=None, metavar="EPOCH",
                   help="MNIST: the epochs at which runs are recorded and may be paused or "
                        "stopped, ending at --epochs (default: those of the benchmarks, 1 3 7 "
                        "14 21 for 21 epochs, scaled to --epochs, e.g. 1 3 7 10; --job: the "
                        "space file's)")
    p.add_argument("--workers", type=int, default=2, help="trials trained in parallel (default 2)")
    p.add_argument("--scheduler", choices=["freeze-thaw", "early-stopping"],
                   default="freeze-thaw",
                   help="freeze-thaw: GPAR's policy pauses, resumes and starts runs at every "
                        "checkpoint (default); early-stopping: Ax's Sobol then GPAR, with GPAR "
                        "early stopping")
    p.add_argument("--sobol-trials", type=int, default=6,
                   help="early-stopping: Sobol trials before GPAR (default 6)")
    p.add_argument("--threshold", type=float, default=0.05,
                   help="early-stopping: stop a trial when P(final error beats the best) is "
                        "below this (default 0.05)")
    p.add_argument("--min-epochs", type=int, default=2,
                   help="early-stopping: epochs before a trial may be stopped (default 2)")
    p.add_argument("--data-dir", type=Path, default=None,
                   help="MNIST: directory of MNIST-format IDX files (default: embedded 5k "
                        "MNIST)")
    p.add_argument("--max-examples", type=int, default=None,
                   help="MNIST: use only this many digits (quick smoke runs)")
    p.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    p.add_argument("--dask", action="store_true",
                   help="run trials on dask.distributed (a LocalCluster unless "
                        "--dask-scheduler)")
    p.add_argument("--dask-scheduler", default=None,
                   help="address of an existing dask scheduler, e.g. tcp://host:8786")
    p.add_argument("--dask-scheduler-timeout", type=float, default=10.0,
                   help="seconds to wait for --dask-scheduler to answer at start (default 10)")
    p.add_argument("--verdict-timeout", type=float, default=DEFAULT_VERDICT_TIMEOUT,
                   help="seconds a job waits after an epoch for the tuner's verdict before "
                        "it pauses (default 300)")
    p.add_argument("--recover", action="store_true",
                   help="if OUT/snapshot.json is damaged or missing, resume from its last "
                        "good copy (snapshot.json.bak) or rebuild the run from OUT/runs/")
    p.add_argument("--thorough-gpar", action="store_true",
                   help="early-stopping: fit GPAR and optimise its acquisition with BoTorch's "
                        "full defaults (several times slower per trial than the default "
                        "budgets; freeze-thaw always uses its policy's defaults)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(run=run_tune, parser=p)
    return p


#: Default GPAR effort: capped L-BFGS iterations per conditional and a small
#: acquisition optimisation (BoTorch's mixed integer optimiser, as two of the
#: MLP's parameters are integers). ``--thorough-gpar`` drops these caps. Only for
#: ``--scheduler early-stopping``: freeze-thaw runs its policy with the defaults
#: the benchmark measured.
FAST_GPAR = {
    "fit_kwargs": {"optimizer_kwargs": {"options": {"maxiter": 75}}},
    "acqf_optimizer_kwargs": {
        "num_restarts": 2, "raw_samples": 128,
        "options": {"maxiter_alternating": 4, "maxiter_continuous": 30},
    },
}


#: The epoch budget when neither --budget nor the space file gives one.
DEFAULT_BUDGET = 120
#: Options of the embedded MNIST job, which --job replaces.
MNIST_OPTIONS = ("epochs", "checkpoints", "data_dir", "max_examples")


def _problem(args: argparse.Namespace) -> TuningProblem:
    """The problem the options name: ``--job`` with ``--space``, or the MNIST MLP.

    Raises:
        TuneSettingsError: One line: a half-given pair, MNIST options with --job, a
            job that does not import, or a bad space file.
    """
    from gpar_bo.tuning.errors import TuneSettingsError

    if (args.job is None) != (args.space is None):
        given, missing = ("--job", "--space") if args.space is None else ("--space", "--job")
        raise TuneSettingsError(f"{given} needs {missing} (a job and its search space go "
                                "together; neither tunes the MNIST MLP).")
    if args.job is None:
        from gpar_bo.problems.mnist.job import mnist_problem

        return mnist_problem(  # the checkpoints are checked with the other settings
            epochs=10 if args.epochs is None else args.epochs,
            data_dir=None if args.data_dir is None else str(args.data_dir.resolve()),
            seed=args.seed,
            max_examples=args.max_examples,
            checkpoints=args.checkpoints,
        )
    mnist_only = [f"--{o.replace('_', '-')}" for o in MNIST_OPTIONS if getattr(args, o) is not None]
    if mnist_only:
        raise TuneSettingsError(
            f"{', '.join(mnist_only)} only apply to the MNIST MLP, not to --job (its space "
            "file sets the epochs and checkpoints; its train_kwargs, the job's own settings).")
    from gpar_bo.tuning.space import problem_from_space

    return problem_from_space(args.job, args.space)


def run_tune(args: argparse.Namespace) -> int:
    """Run ``gpar-bo tune``: check everything, then tune; bad input and refusals
    are one line on stderr with exit status 2, never a traceback. A job that raises
    ends the run: its traceback, then one line, exit status 1."""
    import torch
    from ax.utils.common.logger import set_stderr_log_level

    from gpar_bo.tuning.errors import JobFailed, TuneError, TuneSettingsError
    from gpar_bo.tuning.loop import tune
    from gpar_bo.tuning.report import STATUSES

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # Ax prints its INFO records (e.g. each poll's "trial 0 has not reported yet") on its
    # own handler, between the progress bar's updates; warnings still show.
    set_stderr_log_level(logging.WARNING)
    # dask.distributed logs a few dozen INFO lines per run (the scheduler and each worker
    # starting and closing) through the same handler; its warnings still show, and a
    # setting of the user's own wins. Set before distributed is imported (by the runner).
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")
    # `kill` (SIGTERM) ends the loop like Ctrl-C: snapshot saved, jobs paused.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    # GPAR's small GP fits are fastest on one thread; the workers train on one each.
    torch.set_num_threads(1)
    if args.dask_scheduler_timeout <= 0:
        args.parser.error(
            f"--dask-scheduler-timeout must be > 0 (got {args.dask_scheduler_timeout})")
    try:
        problem = _problem(args)
    except TuneSettingsError as error:
        args.parser.error(str(error))
    try:
        fast = args.scheduler == "early-stopping" and not args.thorough_gpar
        report = tune(
            problem, args.out, next(b for b in (args.budget, problem.budget, DEFAULT_BUDGET)
                                  if b is not None),
            scheduler=args.scheduler, workers=args.workers,
            num_sobol_trials=args.sobol_trials, threshold=args.threshold,
            min_epochs=args.min_epochs, use_dask=args.dask or args.dask_scheduler is not None,
            scheduler_address=args.dask_scheduler, seed=args.seed,
            progress=not args.no_progress, recover=args.recover,
            scheduler_timeout=args.dask_scheduler_timeout, verdict_timeout=args.verdict_timeout,
            **(FAST_GPAR if fast else {}),
        )
    except TuneSettingsError as error:
        args.parser.error(str(error))
    except JobFailed as error:
        print(error.traceback, file=sys.stderr)
        print(f"gpar-bo tune: error: {error}", file=sys.stderr)
        return 1
    except TuneError as error:
        print(f"gpar-bo tune: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"gpar-bo tune: interrupted; the snapshot is saved: rerun the same command "
              f"to resume from {args.out}.", file=sys.stderr)
        return 130
    best = report["best"]
    # The report's own counts and definitions (gpar_bo.tuning.report).
    statuses = [t["status"] for t in report["trials"]]
    summary = {
        "trials": len(statuses),
        "statuses": {s: statuses.count(s) for s in STATUSES if s in statuses},
        "resumed": sum(bool(t["resumed_at"]) for t in report["trials"]),
        "epochs_trained": report["epochs_trained"],
        "epochs_not_trained": report["epochs_not_trained"],
        "epochs_saved": report["epochs_saved"],
        "best": None if best is None else {
            "trial_index": best["trial_index"], report["metric"]: best["final"],
            "parameters": best["parameters"],
        },
        "report": str(args.out / "report.json"),
        "plot": str(args.out / "report.png"),
        "page": str(args.out / "report.html"),
    }
    print(json.dumps(summary, indent=2))
    return 0
