"""Run one Syne Tune 0.13.0 scheduler on a learning-curve table, in the harness's epoch time.

This script runs INSIDE the separate Syne Tune virtualenv (``setup_venv.sh``)
and imports only Syne Tune, numpy and the standard library, never the project.
The project's side is ``benchmarks/syne_tune/methods.py``, which writes the
table, runs this script with the venv's python and reads the trace back.

Route: an ask/tell loop over the scheduler's own API (``suggest``,
``on_trial_add``, ``on_trial_result``, ``on_trial_remove``,
``on_trial_complete``, called as Syne Tune's ``Tuner`` calls them), driven by
the same epoch-time event loop as ``benchmarks.bo.harness.simulate``: W
workers start in turn at time 0; every tick each busy worker trains its trial
one epoch in worker order; at a checkpoint the trial reports its error and a
freed worker asks the scheduler at once, before the next worker advances; the
run stops as soon as ``budget`` epochs (summed over workers) are consumed.
Syne Tune's simulator (``SimulatorBackend`` over a ``BlackboxTabular``) is not
used: it advances in simulated seconds with its own event ordering and its
stopping criterion is wall time or trial counts, so it cannot stop at exactly
``budget`` epochs with the harness's tie order, and its blackbox repository
pins numpy < 1.24.

Settings are the table's rows. The config space is ``x0..x{d-1}`` uniform in
[0, 1] (the unit-cube coordinates) plus the constant ``epochs`` (the
``max_resource_attr``). Searchers that support ``restrict_configurations``
(random for ASHA, the GP searchers of MOBSTER, Hyper-Tune and DyHPO) may only
suggest rows not started yet. Syne Tune's KDE searcher (BOHB) does not
support it: its proposal in the cube trains the *nearest remaining row*
(Euclidean), and the scheduler is told the row's settings (the trial's
config), so the KDE learns from what was trained; such remaps are counted.

Reports come only at the table's checkpoints, which are also the scheduler's
rung levels (``rung_levels = checkpoints[:-1]``, ``max_t`` = last epoch), so
every method sees exactly what the harness's methods see. By default the
promotion quantile at every rung is ``1 / reduction_factor`` (the harness's
ASHA rule; Syne Tune's own default with explicit rung levels is the ratio of
successive levels, ``--quantiles ratio``).

Pause and resume: in promotion-type schedulers (ASHA with ``--type
promotion``, Hyper-Tune, DyHPO) a trial runs until ``config["epochs"]`` (its
next milestone), reports and is paused; when the scheduler later resumes it,
it continues from the epoch it paused at, so only the remaining epochs cost.

Accounting and output are those of ``harness.Trace.to_json()``: ``epochs``
(cumulative epochs at each completion, i.e. each trial trained to the last
epoch), ``incumbent_error``/``incumbent_loss`` (best final-epoch error among
completed trials, and that setting's final loss), ``suggest_seconds`` and
``suggest_observed`` per ``suggest`` call, ``stop_seconds`` per
``on_trial_result`` at a checkpoint before the last (``suggest_cpu_seconds``
and ``stop_cpu_seconds``: the same in process CPU time, which a busy shared
machine does not inflate), and ``trials`` (setting,
status ``running``/``stopped``/``completed`` -- a paused trial never resumed
counts as stopped -- epochs trained, times resumed), plus a ``syne_tune``
record of the scheduler's settings and counters.

    python driver.py --table table.npz --method ASHA --seed 0 --budget 1050 \
        --workers 4 --out trace.json

The table is an ``.npz`` with ``X`` (N x d in [0, 1]), ``error`` and ``loss``
(N x E), ``checkpoints`` (increasing, last == E) and optionally ``name``.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

import numpy as np

METHODS = ("ASHA", "MOBSTER", "HyperTune", "BOHB", "DyHPO")
DEFAULT_TYPE = {  # Syne Tune's defaults, except Hyper-Tune (promotion, as in its paper)
    "ASHA": "stopping",
    "MOBSTER": "stopping",
    "HyperTune": "promotion",
    "BOHB": "stopping",
    "DyHPO": "dyhpo",
}
RESTRICTED = {"ASHA", "MOBSTER", "HyperTune", "DyHPO"}  # searchers taking restrict_configurations
METRIC, RESOURCE, MAX_RESOURCE = "error", "epoch", "epochs"


@dataclass
class Run:
    """One trial of the table: a row trained epoch by epoch."""

    trial_id: int
    setting: int
    trial: object  # syne_tune.backend.trial_status.Trial
    status: str = "running"  # running, paused, stopped, completed
    epochs: int = 0
    resumes: int = 0
    reported: bool = False
    last_result: dict | None = None


@dataclass
class Table:
    X: np.ndarray
    error: np.ndarray
    loss: np.ndarray
    checkpoints: list[int]
    name: str = "table"

    @property
    def epochs(self) -> int:
        return self.error.shape[1]


def load_table(path: str) -> Table:
    data = np.load(path, allow_pickle=False)
    X = np.asarray(data["X"], dtype=float)
    error = np.asarray(data["error"], dtype=float)
    loss = np.asarray(data["loss"], dtype=float) if "loss" in data else error.copy()
    checkpoints = [int(c) for c in data["checkpoints"]]
    name = str(data["name"]) if "name" in data else "table"
    n, epochs = error.shape
    if X.ndim != 2 or X.shape[0] != n or loss.shape != error.shape:
        raise ValueError(f"shape mismatch: X {X.shape}, error {error.shape}, loss {loss.shape}")
    if not (np.isfinite(X).all() and np.isfinite(error).all()):
        raise ValueError("table has non-finite settings or errors")
    if X.min() < 0 or X.max() > 1:
        raise ValueError("settings must lie in the unit cube")
    c = checkpoints
    if not c or c[0] < 1 or c[-1] != epochs or any(b <= a for a, b in zip(c, c[1:])):
        raise ValueError(f"checkpoints {c} must increase from >= 1 to the last epoch {epochs}")
    return Table(X, error, loss, checkpoints, name)


def config_of(table: Table, row: int) -> dict:
    return {f"x{i}": float(v) for i, v in enumerate(table.X[row])}


def make_scheduler(
    method: str,
    table: Table,
    seed: int,
    scheduler_type: str | None,
    reduction_factor: float,
    quantiles: str,
):
    """The Syne Tune scheduler and the keyword arguments it was built with."""
    from syne_tune.config_space import uniform
    from syne_tune.optimizer import baselines

    d = table.X.shape[1]
    config_space = {f"x{i}": uniform(0.0, 1.0) for i in range(d)}
    config_space[MAX_RESOURCE] = table.epochs
    rung_levels = list(table.checkpoints[:-1])
    kwargs: dict = {
        "metric": METRIC,
        "mode": "min",
        "resource_attr": RESOURCE,
        "max_resource_attr": MAX_RESOURCE,
        "rung_levels": rung_levels,
        "random_seed": seed,
    }
    search_options: dict = {"debug_log": False}
    if method in RESTRICTED:
        search_options["restrict_configurations"] = [
            config_of(table, row) for row in range(table.X.shape[0])
        ]
    kwargs["search_options"] = search_options
    kind = scheduler_type or DEFAULT_TYPE[method]
    if method == "DyHPO":
        if kind != "dyhpo":
            raise ValueError("DyHPO runs with type 'dyhpo' only")
    else:
        kwargs["type"] = kind
    if method == "HyperTune":
        kwargs["brackets"] = len(rung_levels) + 1  # all brackets, sampled by its model
    if not rung_levels:
        raise ValueError("need at least one checkpoint before the last epoch (a rung level)")
    scheduler = getattr(baselines, method)(config_space, **kwargs)
    if quantiles == "eta":
        for system in scheduler.terminator._rung_systems:
            for rung in system._rungs:
                rung.prom_quant = 1.0 / reduction_factor
    elif quantiles != "ratio":
        raise ValueError(f"quantiles must be 'eta' or 'ratio', got {quantiles!r}")
    described = {k: v for k, v in kwargs.items() if k != "search_options"}
    described["search_options"] = {
        k: (f"{len(v)} table rows" if k == "restrict_configurations" else v)
        for k, v in search_options.items()
    }
    described["type"] = kind
    described["promote_quantiles"] = [
        [rung.level, rung.prom_quant]
        for system in scheduler.terminator._rung_systems[:1]
        for rung in reversed(system._rungs)
    ]
    return scheduler, described


class RowIndex:
    """Maps a config the scheduler suggests to a row of the table."""

    def __init__(self, table: Table) -> None:
        self.X = table.X
        self.exact = {tuple(row): i for i, row in enumerate(table.X.tolist())}

    def row(self, config: dict, started: np.ndarray) -> tuple[int | None, bool]:
        """``(row, remapped)``: the row of ``config`` if it is one and not started,
        else the nearest row not started (None if all are)."""
        x = [float(config[f"x{i}"]) for i in range(self.X.shape[1])]
        row = self.exact.get(tuple(x))
        if row is not None and not started[row]:
            return row, False
        remaining = np.flatnonzero(~started)
        if len(remaining) == 0:
            return None, True
        distance = np.linalg.norm(self.X[remaining] - np.asarray(x), axis=1)
        nearest = int(remaining[int(np.argmin(distance))])
        return nearest, float(distance.min()) > 1e-9


@dataclass
class Trace:
    method: str
    problem: str
    seed: int
    epochs: list = field(default_factory=list)
    incumbent_error: list = field(default_factory=list)
    incumbent_loss: list = field(default_factory=list)
    suggest_seconds: list = field(default_factory=list)
    suggest_observed: list = field(default_factory=list)
    stop_seconds: list = field(default_factory=list)
    trials: list = field(default_factory=list)
    suggest_cpu_seconds: list = field(default_factory=list)  # process CPU time per suggest
    stop_cpu_seconds: list = field(default_factory=list)


def simulate(
    method: str,
    table: Table,
    seed: int,
    budget: int,
    workers: int,
    scheduler_type: str | None = None,
    reduction_factor: float = 3.0,
    quantiles: str = "eta",
    progress: int = 0,
) -> dict:
    """Run ``method`` on ``table`` until ``budget`` epochs are consumed (see module doc).

    ``progress`` > 0 prints a line to stderr every ``progress`` suggest calls."""
    from syne_tune.backend.trial_status import Trial
    from syne_tune.optimizer.scheduler import SchedulerDecision

    scheduler, described = make_scheduler(
        method, table, seed, scheduler_type, reduction_factor, quantiles
    )
    index = RowIndex(table)
    started = np.zeros(table.X.shape[0], dtype=bool)
    runs: list[Run] = []
    by_id: dict[int, Run] = {}
    trace = Trace(method, table.name, seed)
    checkpoints = set(table.checkpoints)
    final = table.epochs
    counters = {"remapped": 0, "resumes": 0, "pauses": 0, "stops": 0, "suggest_none": 0}
    best: list = [math.inf, math.nan]  # incumbent final error and its loss
    consumed = 0
    next_id = [0]  # trial ids handed to the scheduler (one per new-trial suggestion)

    def start() -> Run | None:
        if started.all() and not any(r.status == "paused" for r in runs):
            return None  # nothing left to start or resume (as the harness)
        observed = sum(1 for r in runs if r.reported)
        tic, cpu = time.perf_counter(), time.process_time()
        suggestion = scheduler.suggest(trial_id=next_id[0])
        if suggestion is not None and suggestion.spawn_new_trial_id:
            trial_id = next_id[0]
            next_id[0] += 1
            row, remapped = index.row(suggestion.config, started)
            if row is not None:
                config = dict(suggestion.config)
                config.update(config_of(table, row))  # the row actually trained
                trial = Trial(trial_id=trial_id, config=config, creation_time=datetime.now())
                scheduler.on_trial_add(trial=trial)
        trace.suggest_seconds.append(time.perf_counter() - tic)
        trace.suggest_cpu_seconds.append(time.process_time() - cpu)
        trace.suggest_observed.append(observed)
        if progress and len(trace.suggest_seconds) % progress == 0:
            print(
                f"{method}: {len(trace.suggest_seconds)} suggestions, {consumed} epochs, "
                f"{len(trace.epochs)} completions, last suggest {trace.suggest_seconds[-1]:.3f} s",
                file=sys.stderr,
                flush=True,
            )
        if suggestion is None:
            counters["suggest_none"] += 1
            return None
        if not suggestion.spawn_new_trial_id:  # resume a paused trial from where it paused
            run = by_id[int(suggestion.checkpoint_trial_id)]
            if run.status != "paused":
                raise RuntimeError(f"{method} resumed trial {run.trial_id}, which is {run.status}")
            if suggestion.config is not None:  # its next milestone in config["epochs"]
                config = dict(suggestion.config)
                config.update(config_of(table, run.setting))  # BOHB: the row, not its proposal
                run.trial.config = config
            run.status = "running"
            run.resumes += 1
            counters["resumes"] += 1
            return run
        if suggestion.checkpoint_trial_id is not None:
            raise RuntimeError(f"{method} asked to warm-start from a checkpoint (unsupported)")
        if row is None:
            return None
        counters["remapped"] += int(remapped)
        started[row] = True
        run = Run(trial_id, row, trial)
        runs.append(run)
        by_id[run.trial_id] = run
        return run

    def finish(run: Run, decision: str, job_done: bool) -> bool:
        """Tell the scheduler how the report ended; True if the worker is freed."""
        if decision in (SchedulerDecision.STOP, SchedulerDecision.PAUSE):
            scheduler.on_trial_remove(trial=run.trial)
            if run.epochs < final:
                paused = decision == SchedulerDecision.PAUSE
                run.status = "paused" if paused else "stopped"
                counters["pauses" if paused else "stops"] += 1
            return True
        if job_done:  # ran to the end of its job with a CONTINUE decision: Tuner completes it
            scheduler.on_trial_complete(trial=run.trial, result=run.last_result)
            if run.epochs < final:
                raise RuntimeError(
                    f"{method}: trial {run.trial_id} ended its job at epoch {run.epochs} "
                    "without being paused"
                )
            return True
        return False

    slots: list[Run | None] = [start() for _ in range(workers)]
    while consumed < budget and any(s is not None for s in slots):
        for w in range(workers):
            run = slots[w]
            if run is None or consumed >= budget:
                continue
            run.epochs += 1
            consumed += 1
            if run.epochs not in checkpoints:
                continue
            error = float(table.error[run.setting, run.epochs - 1])
            result = {METRIC: error, RESOURCE: run.epochs}
            run.last_result = result
            run.reported = True
            tic, cpu = time.perf_counter(), time.process_time()
            decision = scheduler.on_trial_result(trial=run.trial, result=result)
            if run.epochs < final:
                trace.stop_seconds.append(time.perf_counter() - tic)
                trace.stop_cpu_seconds.append(time.process_time() - cpu)
            job_done = run.epochs >= int(run.trial.config.get(MAX_RESOURCE, final))
            freed = finish(run, decision, job_done)
            if run.epochs == final:
                run.status = "completed"
                trace.epochs.append(consumed)
                if error < best[0]:
                    best[:] = [error, float(table.loss[run.setting, -1])]
                trace.incumbent_error.append(best[0])
                trace.incumbent_loss.append(best[1])
                freed = True
            if freed:
                slots[w] = start()
    trace.trials = [
        {
            "setting": r.setting,
            "status": "stopped" if r.status == "paused" else r.status,
            "epochs": r.epochs,
            "resumes": r.resumes,
        }
        for r in runs
    ]
    out = trace.__dict__.copy()
    out["budget"] = budget
    out["workers"] = workers
    out["consumed"] = consumed
    out["syne_tune"] = {**described, **counters, "version": syne_tune_version()}
    return out


def syne_tune_version() -> str:
    import syne_tune

    return syne_tune.__version__


def exit_with_parent(interval: float = 2.0) -> None:
    """Exit as soon as the process that started this one is gone.

    A study killed mid-run (``kill -9`` included) cannot stop its driver, which would go
    on simulating for up to an hour with no one to read its trace. A daemon thread polls
    the parent's pid (a process whose parent dies is re-parented) every ``interval``
    seconds.
    """
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def main(argv: list[str] | None = None) -> None:
    exit_with_parent()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", required=True, help=".npz with X, error, loss, checkpoints")
    parser.add_argument("--method", required=True, choices=METHODS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget", type=int, required=True, help="epochs, summed over workers")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument(
        "--type",
        dest="scheduler_type",
        choices=("stopping", "promotion"),
        help="Hyperband type (default: stopping; Hyper-Tune: promotion; DyHPO: dyhpo)",
    )
    parser.add_argument("--reduction-factor", type=float, default=3.0)
    parser.add_argument(
        "--quantiles",
        choices=("eta", "ratio"),
        default="eta",
        help="promotion quantile per rung: 1/reduction_factor (default) or Syne Tune's "
        "ratio of successive rung levels",
    )
    parser.add_argument("--out", required=True, help="JSON trace to write")
    parser.add_argument("--log-level", default="ERROR")
    parser.add_argument(
        "--progress", type=int, default=0, help="print progress every N suggest calls"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=getattr(logging, args.log_level.upper()))
    logging.getLogger("syne_tune").setLevel(getattr(logging, args.log_level.upper()))
    if args.budget < 1 or args.workers < 1:
        parser.error("budget and workers must be >= 1")
    table = load_table(args.table)
    tic = time.perf_counter()
    trace = simulate(
        args.method,
        table,
        args.seed,
        args.budget,
        args.workers,
        args.scheduler_type,
        args.reduction_factor,
        args.quantiles,
        args.progress,
    )
    trace["wall_seconds"] = time.perf_counter() - tic
    trace["date_utc"] = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    with open(args.out, "w") as handle:
        json.dump(trace, handle)


if __name__ == "__main__":
    main()
