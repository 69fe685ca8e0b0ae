"""`gpar-bo tune` (freeze-thaw) against Ax's default and Ax + percentile early stopping, real MNIST training.

Issue 15's target: on the embedded MNIST-5k with 21-epoch runs, a 300-epoch budget and 4
workers, the shipped freeze-thaw loop ends with a lower best final validation error than
Ax's default generation strategy on full runs and than the same with Ax's
``PercentileEarlyStoppingStrategy``, in at least 4 of 5 seeds; and stopped or paused runs
train no epoch past the checkpoint at which the decision was taken.

Every method trains the same job (``gpar_bo.problems.mnist.mnist_problem(epochs, seed=s)``)
through the same shipped loop, ``gpar_bo.tuning.tune``, with the same ``CurveRunner``,
verdict protocol and epoch accounting:

* ``freeze_thaw``: ``tune(problem, dir, budget, scheduler="freeze-thaw", workers=4, seed=s)``
  with its defaults, what ``gpar-bo tune --epochs 21 --budget 300 --workers 4 --seed s``
  runs;
* ``ax_default``: ``tune(..., scheduler="early-stopping", generation_strategy=G,
  early_stopping_strategy=None)``, where ``G`` is what Ax's ``Client`` picks by default
  (``choose_generation_strategy`` of a default ``GenerationStrategyDispatchStruct`` seeded
  with ``s``: the centre, Sobol, then BoTorch's default model), every run trained to its
  final epoch;
* ``ax_percentile``: the same with ``PercentileEarlyStoppingStrategy()`` at Ax's defaults.

The runner is the one ``tune`` builds itself (``gpar_bo.tuning.session.make_runner``),
with its ``verdict`` calls logged to ``verdicts.jsonl`` so each stop or pause is checked
against the job's progress file: the epochs a run reported after the checkpoint at which
it was stopped or paused, before it ended, must be 0.

One JSON line per (method, seed, settings) goes to ``<out>/tune_mnist_runs.jsonl`` (a
rerun skips finished ones; an interrupted run resumes through ``tune``'s own resume from
``<out>/tune_mnist_runs/<kind>/<method>/seed<k>/``); the report is ``<out>/tune_mnist.{md,csv,json,png}``.
The ``freeze_thaw`` runs at the default checkpoints made before staged refits became the
policy's default (2026-11-28) are kept apart, in ``results/tune_mnist_runs_full_refits.jsonl``
(seeds 0-4 made at 9b2bb03, seeds 5-9 as recorded in commit aa90cec), and
those made with the policy's point-estimate model, before hyperparameter draws became its
default (2026-11-29), in ``results/tune_mnist_runs_point_estimates.jsonl``, and those
made before the loop told the policy the epochs left of the budget (2026-11-29), in
``results/tune_mnist_runs_no_horizon.jsonl``, and those made before the posterior's
correction of 2026-12-01 (docs/model.md, "The posterior"), in
``results/tune_mnist_runs_before_posterior_fix.jsonl``.
Runs decide at the MNIST problem's default checkpoints (1, 3, 7, 14, 21: those of the
freeze-thaw benchmark's MNIST table, ``gpar_bo.problems.mnist.job.TUNING_CHECKPOINTS``);
``--checkpoints`` names others, reported apart (``tune_mnist_every_epoch.*`` for every
epoch, the default before, else ``tune_mnist_checkpoints_<epochs>.*``).

    python -m benchmarks.tune_mnist --seeds $(seq 0 19)
    python -m benchmarks.tune_mnist --seeds 0 1 2 3 4 --checkpoints $(seq 1 21)
    python -m benchmarks.tune_mnist --quick        # tiny settings, for the tests
    python -m benchmarks.tune_mnist --report-only
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import resource
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from functools import wraps
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch: the jobs and GPAR's fits run on one thread each

import numpy as np
import torch

from benchmarks.bo.analysis import mean_se, wilcoxon_less
from benchmarks.report import RESULTS, command_line, exclusive, markdown_table, write_results

METHODS = ("freeze_thaw", "ax_default", "ax_percentile")
RUNS_FILE = "tune_mnist_runs.jsonl"
#: The issue's protocol: this many seeds, freeze-thaw lower in at least ``PROTOCOL_WINS`` of them.
PROTOCOL_SEEDS, PROTOCOL_WINS = 5, 4
WORK_DIR = "tune_mnist_runs"
VERDICT_LOG = "verdicts.jsonl"


@dataclass(frozen=True)
class Settings:
    """The job and the budget every method gets."""

    epochs: int = 21
    budget: int = 300
    workers: int = 4
    max_examples: int | None = None  # None: the embedded 5k digits
    poll_seconds: float = 1.0  # how often the tuner looks at the jobs (tune()'s default)
    #: The epochs at which runs are recorded, paused or stopped (``gpar-bo tune
    #: --checkpoints``); None: the MNIST problem's default, what ``gpar-bo tune`` uses.
    checkpoints: tuple[int, ...] | None = None

    @property
    def resolved_checkpoints(self) -> tuple[int, ...]:
        from gpar_bo.problems.mnist.job import tuning_checkpoints

        return tuple(tuning_checkpoints(self.epochs) if self.checkpoints is None else self.checkpoints)

    @property
    def stem(self) -> str:
        """The report's file name: ``tune_mnist`` at the default checkpoints."""
        from gpar_bo.problems.mnist.job import tuning_checkpoints

        checkpoints = self.resolved_checkpoints
        if checkpoints == tuple(tuning_checkpoints(self.epochs)):
            return "tune_mnist"
        if checkpoints == tuple(range(1, self.epochs + 1)):
            return "tune_mnist_every_epoch"
        return "tune_mnist_checkpoints_" + "-".join(map(str, checkpoints))


FULL = Settings()
# Quick epochs take a fraction of a second: a shorter poll keeps the tuner from idling.
QUICK = Settings(epochs=2, budget=4, workers=1, max_examples=300, poll_seconds=0.2)


def ax_default_strategy(seed: int):
    """Ax's default generation strategy for this search space, as its ``Client`` builds it
    (``Client.configure_generation_strategy()`` with its defaults and the seed)."""
    from ax.api.utils.generation_strategy_dispatch import choose_generation_strategy
    from ax.api.utils.structs import GenerationStrategyDispatchStruct

    return choose_generation_strategy(GenerationStrategyDispatchStruct(initialization_random_seed=seed))


def percentile_strategy():
    """Ax's ``PercentileEarlyStoppingStrategy`` at its defaults (the objective metric)."""
    from ax.early_stopping.strategies import PercentileEarlyStoppingStrategy

    return PercentileEarlyStoppingStrategy()


def _log_verdicts(runner, log: Path) -> None:
    """Append every stop and pause ``runner`` gives to ``log``, with the epoch the job had
    reported when it was given (the decision checkpoint)."""
    from gpar_bo.tuning.jobs import read_job

    given = runner.verdict

    @wraps(given)
    def verdict(trial, verdict: str, reason: str | None = None) -> bool:
        if verdict != "continue":
            step = read_job(runner.progress_file(trial.index)).last_step
            with log.open("a") as handle:
                handle.write(json.dumps({"trial": trial.index, "verdict": verdict, "step": step}) + "\n")
        return given(trial, verdict, reason)

    runner.verdict = verdict  # an instance attribute: the JSON snapshot stores only init arguments


def run_method(method: str, seed: int, settings: Settings, directory: Path) -> dict[str, Any]:
    """Tune with ``method`` into ``directory`` (resuming it if it holds a run); its record."""
    from gpar_bo.problems.mnist.job import mnist_problem
    from gpar_bo.tuning.checks import check_output_directory
    from gpar_bo.tuning.loop import tune
    from gpar_bo.tuning.session import make_runner

    problem = mnist_problem(epochs=settings.epochs, seed=seed, max_examples=settings.max_examples,
                            checkpoints=settings.resolved_checkpoints)
    directory = check_output_directory(directory)
    runner = make_runner(problem, directory, settings.workers, False, None)
    _log_verdicts(runner, directory / VERDICT_LOG)
    options: dict[str, Any] = {}
    if method != "freeze_thaw":
        from gpar_bo.tuning.cli import FAST_GPAR

        options = {
            "scheduler": "early-stopping",
            "generation_strategy": ax_default_strategy(seed),
            "early_stopping_strategy": percentile_strategy() if method == "ax_percentile" else None,
            # Only the report's GPAR bands use these here: the CLI's capped fits.
            "fit_kwargs": FAST_GPAR["fit_kwargs"],
        }
    wall, cpu = time.perf_counter(), time.process_time()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    tune(problem, directory, settings.budget, workers=settings.workers, seed=seed, progress=False,
         runner=runner, poll_seconds=settings.poll_seconds, **options)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    record = {"method": method, "seed": seed, **asdict(settings),
              "checkpoints": list(settings.resolved_checkpoints),
              "wall_s": time.perf_counter() - wall, "tuner_cpu_s": time.process_time() - cpu,
              "jobs_cpu_s": (after.ru_utime + after.ru_stime) - (children.ru_utime + children.ru_stime)}
    return {**record, **summarise(directory, settings.epochs)}


def _progress(path: Path) -> list[dict]:
    lines = []
    for text in path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            lines.append(json.loads(text))
    return lines


def epochs_past_decision(lines: list[dict], step: float | None) -> int | None:
    """Epochs a job reported after the checkpoint ``step`` at which it was stopped or paused,
    before its run ended (None: the job had reported nothing when the decision came)."""
    if step is None:
        return None
    for i, line in enumerate(lines):
        if line.get("step") == step and "values" in line:
            last = step
            for after in lines[i + 1:]:
                if "status" in after or "started" in after:
                    break
                last = after["step"]
            return int(last - step)
    raise ValueError(f"the decision checkpoint {step} is not in the progress file")


def summarise(directory: Path, epochs: int) -> dict[str, Any]:
    """A run's numbers from its progress files and verdict log."""
    runs = directory / "runs"
    jobs = {int(p.stem.split("_")[1]): _progress(p) for p in sorted(runs.glob("trial_*.jsonl"))}
    trained, finals, statuses, pauses, resumes, repeated = 0, {}, {}, 0, 0, 0
    for index, lines in jobs.items():
        steps = [line["step"] for line in lines if "values" in line]
        # Epochs, not records: with checkpoints a job records only at them. The last step
        # a trial reached is the epochs it trained, less any it trained twice (counted apart).
        trained += int(max(steps, default=0))
        repeated += len(steps) - len(set(steps))  # an epoch trained twice
        finals.update({index: line["values"]["val_error"] for line in lines
                       if "values" in line and line["step"] == epochs})
        status = [line["status"] for line in lines if "status" in line]
        statuses[index] = status[-1] if status else "running"
        pauses += status.count("paused")
        resumes += sum("started" in line for line in lines) - 1
    log = directory / VERDICT_LOG
    decisions = _progress(log) if log.exists() else []
    past = [epochs_past_decision(jobs[d["trial"]], d["step"]) for d in decisions]
    best = min(finals, key=finals.get) if finals else None
    return {
        "best_final_val_error": finals[best] if best is not None else math.nan,
        "best_trial": best,
        "trials_started": len(jobs),
        "trials_reaching_final_epoch": len(finals),
        "epochs_trained": trained,
        "epochs_trained_twice": repeated,
        "completed": sum(s == "completed" for s in statuses.values()),
        "stopped": sum(s == "stopped" for s in statuses.values()),
        "paused_at_end": sum(s == "paused" for s in statuses.values()),
        "pauses": pauses,
        "resumes": resumes,
        "stop_pause_verdicts": len(decisions),
        "verdicts_before_any_epoch": sum(p is None for p in past),
        "epochs_past_decision": sum(p for p in past if p is not None),
        "runs_past_decision": sum(bool(p) for p in past),
    }


def load_runs(path: Path) -> list[dict]:
    """The runs file's records (a line cut short by a kill is dropped; that run is resumed)."""
    return _progress(path) if path.exists() else []


def run_key(record: dict) -> tuple:
    # Records from before checkpoints were recorded decided at every epoch, then the default.
    checkpoints = record.get("checkpoints") or range(1, record["epochs"] + 1)
    return (record["method"], record["seed"], record["epochs"], record["budget"], record["workers"],
            record["max_examples"], tuple(int(c) for c in checkpoints))


def settings_key(settings: Settings) -> tuple:
    """The part of :func:`run_key` that ``settings`` fix."""
    return (settings.epochs, settings.budget, settings.workers, settings.max_examples,
            settings.resolved_checkpoints)


def plot(path: Path, table: dict[int, dict[str, float]]) -> None:
    """Best final validation error per seed, one bar per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seeds = sorted(table)
    fig, ax = plt.subplots(figsize=(1.6 + 1.3 * len(seeds), 3.4))
    width = 0.8 / len(METHODS)
    for m, method in enumerate(METHODS):
        values = [table[s].get(method, math.nan) for s in seeds]
        ax.bar(np.arange(len(seeds)) + (m - 1) * width, values, width, label=method)
    ax.set_xticks(np.arange(len(seeds)), [f"seed {s}" for s in seeds])
    ax.set_ylabel("best final validation error")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def protocol_blocks(best: dict[int, dict[str, float]], seeds: Sequence[int]) -> list[dict[str, Any]]:
    """The issue's protocol (``PROTOCOL_SEEDS`` seeds, freeze-thaw lower in at least
    ``PROTOCOL_WINS`` of them against each Ax arm) on consecutive blocks of ``seeds``
    (in the order given; an incomplete last block is left out): per block, its seeds,
    the wins against each arm, and whether the target held. Repeating the protocol on
    disjoint blocks shows how often a 5-seed run of it would meet the target."""
    blocks = []
    for start in range(0, len(seeds) - PROTOCOL_SEEDS + 1, PROTOCOL_SEEDS):
        block = list(seeds[start:start + PROTOCOL_SEEDS])
        wins = {other: sum(best[s]["freeze_thaw"] < best[s][other] for s in block) for other in METHODS[1:]}
        blocks.append({"seeds": block, "wins": wins, "met": all(w >= PROTOCOL_WINS for w in wins.values())})
    return blocks


def protocol_text(blocks: list[dict[str, Any]]) -> str:
    """The markdown paragraph of ``protocol_blocks``."""
    if not blocks:
        return f"**The issue's protocol** ({PROTOCOL_SEEDS} seeds): fewer seeds than one block."
    parts = [f"seeds {', '.join(map(str, b['seeds']))}: "
             + ", ".join(f"{w} against {o}" for o, w in b["wins"].items())
             + f" ({'met' if b['met'] else 'missed'})" for b in blocks]
    return (f"**The issue's protocol** ({PROTOCOL_SEEDS} seeds, freeze-thaw lower in at least "
            f"{PROTOCOL_WINS} of them against each Ax arm; the epochs past a decision are the main "
            "target's, above), repeated on consecutive blocks of the seeds: "
            + "; ".join(parts) + f". Met on {sum(b['met'] for b in blocks)} of {len(blocks)} blocks.")


def report(records: list[dict], settings: Settings, seeds: Sequence[int], out: Path, command: str) -> str:
    """Write ``tune_mnist.{md,csv,json,png}`` from the records of ``seeds`` at ``settings``; the markdown."""
    mine = {(r["method"], r["seed"]): r for r in records
            if run_key(r)[2:] == settings_key(settings)
            and r["seed"] in seeds}
    if not mine:
        raise SystemExit("No runs to report for these seeds and settings.")
    rows = [{k: mine[key][k] for k in (
        "seed", "method", "best_final_val_error", "epochs_trained", "trials_started",
        "trials_reaching_final_epoch", "completed", "stopped", "pauses", "resumes",
        "stop_pause_verdicts", "epochs_past_decision", "wall_s", "tuner_cpu_s")}
        for key in sorted(mine, key=lambda k: (k[1], METHODS.index(k[0])))]
    best = {s: {m: mine[(m, s)]["best_final_val_error"] for m in METHODS if (m, s) in mine} for s in seeds}
    complete = [s for s in seeds if len(best[s]) == len(METHODS)]
    wins = {other: sum(best[s]["freeze_thaw"] < best[s][other] for s in complete) for other in METHODS[1:]}
    ties = {other: sum(best[s]["freeze_thaw"] == best[s][other] for s in complete) for other in METHODS[1:]}
    p_lower = {other: wilcoxon_less([best[s]["freeze_thaw"] for s in complete], [best[s][other] for s in complete])
               if complete else math.nan for other in METHODS[1:]}
    summary = []
    for method in METHODS:
        values = np.array([[best[s][method]] for s in complete])
        mean, se = mean_se(values) if len(complete) else (np.array([math.nan]), np.array([math.nan]))
        summary.append({"method": method, "seeds": len(complete), "mean_best_final_val_error": float(mean[0]),
                        "se": float(se[0]),
                        "mean_epochs_trained": float(np.mean([mine[(method, s)]["epochs_trained"] for s in complete]))
                        if complete else math.nan,
                        "epochs_past_decision": sum(mine[(method, s)]["epochs_past_decision"] for s in complete)})
    target = math.ceil(0.8 * len(complete))
    met = all(w >= target for w in wins.values()) and all(r["epochs_past_decision"] == 0 for r in mine.values())
    blocks = protocol_blocks(best, complete)
    past = sum(r["epochs_past_decision"] for r in mine.values())
    verdicts = sum(r["stop_pause_verdicts"] for r in mine.values())
    def mean_of(method: str, key: str) -> float:
        return float(np.mean([mine[(method, s)][key] for s in complete])) if complete else math.nan

    centre = sum(mine[(m, s)]["best_trial"] == 0 for m in METHODS[1:] for s in complete)
    behaviour = (
        f"**How the budget was spent** (means over seeds): freeze-thaw started "
        f"{mean_of('freeze_thaw', 'trials_started'):.1f} trials, of which "
        f"{mean_of('freeze_thaw', 'trials_reaching_final_epoch'):.1f} reached epoch {settings.epochs} "
        f"({mean_of('freeze_thaw', 'pauses'):.0f} pauses, {mean_of('freeze_thaw', 'resumes'):.0f} resumptions); "
        f"Ax's default started {mean_of('ax_default', 'trials_started'):.1f}, of which "
        f"{mean_of('ax_default', 'trials_reaching_final_epoch'):.1f} reached it; "
        f"Ax + percentile started {mean_of('ax_percentile', 'trials_started'):.1f} and stopped "
        f"{mean_of('ax_percentile', 'stopped'):.1f}. Ax's best trial was its first, the centre of the "
        f"search space, in {centre} of {2 * len(complete)} Ax runs."
    )
    notes = [
        f"Settings: MNIST-5k (embedded{'' if settings.max_examples is None else f', first {settings.max_examples} digits'}), "
        f"{settings.epochs}-epoch runs, a {settings.budget}-epoch budget, {settings.workers} workers, "
        f"checkpoints {list(settings.resolved_checkpoints)}; "
        f"seeds with all three methods: {complete}.",
        "## Summary over seeds\n\n" + markdown_table(summary),
        "**Freeze-thaw wins** (lower best final validation error, per seed): "
        + ", ".join(f"{w} of {len(complete)} against {o} ({ties[o]} tied)" for o, w in wins.items())
        + f". Target: at least {target} of {len(complete)} against each, and no epoch past a decision: "
        f"**{'met' if met else 'missed'}**. Paired one-sided Wilcoxon signed-rank test of freeze-thaw's "
        "best final validation error being lower, over the same seeds: "
        + ", ".join(f"p {p_lower[o]:.2g} against {o}" for o in wins) + ".",
        protocol_text(blocks),
        behaviour,
        f"**Epochs past the decision checkpoint:** {past} over {verdicts} stop and pause verdicts "
        "(each verdict's checkpoint is the last epoch the job had reported when it was given; the "
        "count is the epochs the job reported after it before its run ended).",
        "Methods: `freeze_thaw` is `tune(problem, dir, budget, scheduler=\"freeze-thaw\", "
        "workers, seed)` with its defaults, what `gpar-bo tune --epochs E --budget B --workers W "
        "--seed s` runs; `ax_default` is `tune(..., scheduler=\"early-stopping\", "
        "generation_strategy=<Ax's Client default: choose_generation_strategy(GenerationStrategy"
        "DispatchStruct(initialization_random_seed=s)), the centre, Sobol to 5 trials, then BoTorch's "
        "default model>, early_stopping_strategy=None)`, every trial trained to its final epoch; "
        "`ax_percentile` is the same with `PercentileEarlyStoppingStrategy()` at Ax's defaults "
        "(percentile_threshold 50, min_progression 10, min_curves 5). All three use the runner `tune` "
        "builds (its verdicts logged), the same job, seed, verdict protocol and epoch budget. "
        "`best_final_val_error`: the lowest validation error at the final epoch over the run's "
        "trials; `wall_s`: wall clock on the shared machine; `tuner_cpu_s`: CPU time of the tuning "
        "process (the jobs run in worker processes; the JSON's `jobs_cpu_s` is theirs, as far as "
        "the operating system reports reaped children).",
        f"Each run is one line of `{RUNS_FILE}`, appended by `python -m benchmarks.tune_mnist --seeds ...` "
        "(a run already in the file is not rerun); the command below wrote this report from that file.",
    ]
    extra = {"records": list(mine.values()), "wins": wins, "ties": ties, "p_freeze_thaw_lower": p_lower,
             "target_met": met, "summary": summary,
             "protocol_blocks": blocks,
             "settings": asdict(settings)}
    write_results(out, settings.stem, "`gpar-bo tune` freeze-thaw vs Ax on real MNIST training",
                  rows, command, list(seeds), notes="\n\n".join(notes), extra=extra)
    plot(out / f"{settings.stem}.png", best)
    return (out / f"{settings.stem}.md").read_text()


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--quick", action="store_true",
                        help="2-epoch runs, a 4-epoch budget, 1 worker, 300 digits, seed 0")
    parser.add_argument("--checkpoints", type=int, nargs="+", default=None, metavar="EPOCH",
                        help="the epochs at which runs are recorded, paused or stopped, as "
                             "gpar-bo tune --checkpoints (default: the MNIST problem's, 1 3 7 14 "
                             "21); other checkpoints are reported apart, as "
                             "tune_mnist_every_epoch.* or tune_mnist_checkpoints_<epochs>.*")
    parser.add_argument("--report-only", action="store_true", help="write the report from the runs file")
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else FULL
    if args.checkpoints is not None:
        from gpar_bo.tuning.checks import checkpoint_problems

        settings = replace(settings, checkpoints=tuple(args.checkpoints))
        for problem in checkpoint_problems(args.checkpoints, settings.epochs):
            parser.error(problem)  # before any run starts
    if args.quick:
        args.seeds = [0]
    if any(s < 0 for s in args.seeds):
        parser.error("seeds must be >= 0")
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / RUNS_FILE
    with contextlib.nullcontext() if args.report_only else exclusive(path):
        records = load_runs(path)
        if not args.report_only:
            done = {run_key(r) for r in records}
            for seed in args.seeds:  # all methods of a seed before the next seed
                for method in args.methods:
                    key = (method, seed, *settings_key(settings))
                    if key in done:
                        continue
                    kind = ("quick" if args.quick else "full") + settings.stem.removeprefix("tune_mnist")
                    directory = args.out / WORK_DIR / kind / method / f"seed{seed}"
                    record = run_method(method, seed, settings, directory)
                    with path.open("a") as handle:  # whole lines: a kill loses only the run in progress
                        handle.write(json.dumps(record) + "\n")
                    records.append(record)
                    print(f"{method} seed {seed}: best {record['best_final_val_error']:.4f}, "
                          f"{record['epochs_trained']} epochs, {record['wall_s']:.0f} s", flush=True)
    text = report(records, settings, args.seeds, args.out, command_line(argv))
    print(text)
    return text


if __name__ == "__main__":
    main()
