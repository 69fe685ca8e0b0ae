r"""Would GPAR predict a paused run's next step better if it saw a few paused runs go on?

GPAR's conditionals are fitted on the runs the policy continued, and the policy continues
runs for their good prefixes; so the model never sees how a run it leaves paused goes on,
and predicts for it the continued runs' course (``calibration_diagnosis.md``, session 33:
near chance, runs split into stuck and escaping ones, and the model gives each the
continued runs' typical fall). ``FreezeThawPolicy(random_resume_fraction=...)`` resumes a
paused run drawn at random in a share of its decisions. This measures, without rerunning
the policy, what such data would buy: at the end of each of the policy's runs on a table
(``benchmarks.missed_promotions.end_state``), the paused runs are shuffled (with the
run's seed); the first ``max(K)`` may be revealed, the next ``--held-out`` are judged.
For each ``K`` the first ``K`` of them are given their next checkpoint's true error (as if
resumed once), GPAR (the policy's model) is fitted cold on the data, every conditional from
its initial values (``FreezeThawPolicy.model``; the policy itself refits warm and in
stages), and each held-out run's next log-error increment (its first unseen checkpoint,
given its observed prefix) is placed in the model's predictive: the PIT (its CDF at the
truth; uniform if calibrated), the shares inside the central 50 % and 95 % intervals, and
the mean negative log predictive density (nats; lower is better), pooled over the seeds.
The judged runs of a seed share one fit, so the seeds are the independent units: per ``K``
the report also counts the seeds whose 50 % coverage is nearer 0.5, and whose NLPD is
lower, than with ``K = 0`` (the policy's own data). (An error of exactly 0 is read as half
the table's smallest positive error; the model reads it by its own data's, so on a table
with zeros such a run's PITs are approximate.)

    python -m benchmarks.random_resumes --tables dev_classification dev_mnist_study --seeds 4
    python -m benchmarks.random_resumes --quick      # a tiny simulated run (a smoke check)
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Sequence
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch: small fits run faster on one thread

import numpy as np
import torch
from tqdm import tqdm

from benchmarks.bo.harness import TabularProblem, simulate
from benchmarks.freeze_thaw_study import REFERENCE, budget_of, make_problem, method_traces
from benchmarks.missed_promotions import end_state, normals_of
from benchmarks.report import RESULTS, command_line, markdown_table, write_results
from gpar_bo.curve_model import floor_zeros, to_increments
from gpar_bo.freeze_thaw import FreezeThawPolicy

#: The report's explanation: the module docstring's second paragraph, as markdown.
NOTES = __doc__.split("\n\n")[1].replace("``", "`")
#: Sample paths of the outputs before the judged step (the policy's ``num_samples``).
NUM_PATHS = 128


def next_step_scores(
    problem: TabularProblem, trace: dict, reveal: Sequence[int], held_out: int
) -> list[dict]:
    r"""Held-out paused runs' next-step PITs and densities, for each number revealed.

    Args:
        problem: The table of the run.
        trace: A ``Trace.to_json()`` dict of a policy run (as the study records it).
        reveal: Numbers ``K`` of paused runs given their next checkpoint before the fit.
        held_out: Paused runs judged (after the ``max(reveal)`` that may be revealed).

    Returns:
        One dict per ``K``: ``K``, ``n`` judged, ``judged`` (their settings, the same for
        every ``K``), ``revealed`` (the settings given their next checkpoint), ``pits``
        and ``nlpd`` (one per judged run, in that order). Empty if fewer than two runs
        finished or too few runs were left paused.
    """
    if not reveal or min(reveal) < 0 or held_out < 1:
        raise ValueError(f"reveal must be numbers >= 0 and held_out >= 1; got {list(reveal)}, {held_out}.")
    settings, Y, paused = end_state(trace, problem)
    reported = ~Y[:, 0].isnan()  # the policy's model has one row per run that reported
    settings, Y, paused = settings[reported.numpy()], Y[reported], paused[reported]
    observed = (~Y.isnan()).sum(-1)
    rows = paused.nonzero().squeeze(-1)
    if int((observed == Y.shape[-1]).sum()) < 2 or len(rows) <= max(reveal):
        return []
    generator = torch.Generator().manual_seed(int(trace["seed"]))
    rows = rows[torch.randperm(len(rows), generator=generator)]
    pool, judged = rows[: max(reveal)].tolist(), rows[max(reveal):][:held_out].tolist()
    checkpoints = torch.tensor(problem.checkpoints) - 1
    truth = floor_zeros(problem.error[:, checkpoints])[settings]  # as the model reads a 0
    increments = to_increments(truth.log())
    X = problem.X[settings]
    normal = torch.distributions.Normal(0.0, 1.0)
    out = []
    for k in reveal:
        shown = Y.clone()
        for row in pool[:k]:
            m = int(observed[row])
            shown[row, m] = problem.error[settings[row], checkpoints[m]]
        model = FreezeThawPolicy(problem.checkpoints, seed=int(trace["seed"])).model(X, shown)
        pits, nlpd = [], []
        with torch.no_grad():
            for row in judged:
                m = int(observed[row])
                posterior = model.modelled_posterior(X[row : row + 1], [*range(m + 1)], observation_noise=True)
                base = normals_of(posterior, NUM_PATHS, torch.Generator().manual_seed(row))  # the same for every K
                _, means, variances = posterior.rsample_with_conditionals(torch.Size([NUM_PATHS]), base)
                mean, std = means[..., m].flatten(), variances[..., m].sqrt().flatten()
                z = (increments[row, m] - mean) / std
                pits.append(float(normal.cdf(z).mean()))
                density = torch.logsumexp(normal.log_prob(z) - std.log(), 0) - math.log(NUM_PATHS)
                nlpd.append(-float(density))
        out.append({"K": k, "n": len(judged), "judged": [int(settings[r]) for r in judged],
                    "revealed": [int(settings[r]) for r in pool[:k]], "pits": pits, "nlpd": nlpd})
    return out


def summary(table: str, per_seed: dict[int, list[dict]]) -> list[dict]:
    """Per ``K``: the pooled shares inside the 50 % and 95 % intervals and in the tails, the
    mean PIT and NLPD, the mean over seeds of each seed's 50 % coverage's distance from 0.5,
    and the seeds nearer 0.5 and with a lower NLPD than with ``K = 0``."""

    def per(seed_runs: list[dict], k: int) -> dict | None:
        return next((r for r in seed_runs if r["K"] == k), None)

    def gap(run: dict) -> float:
        pits = np.array(run["pits"])
        return abs(float(((pits > 0.25) & (pits < 0.75)).mean()) - 0.5)

    rows = []
    for k in sorted({r["K"] for runs in per_seed.values() for r in runs}):
        runs = {s: per(v, k) for s, v in per_seed.items() if per(v, k) is not None}
        base = {s: per(per_seed[s], 0) for s in runs}
        pits = np.concatenate([r["pits"] for r in runs.values()])
        nlpd = np.concatenate([r["nlpd"] for r in runs.values()])
        paired = [s for s in runs if base[s] is not None]
        rows.append({
            "table": table, "K": k, "seeds": len(runs), "n": len(pits),
            "inside_50": float(((pits > 0.25) & (pits < 0.75)).mean()),
            "inside_95": float(((pits > 0.025) & (pits < 0.975)).mean()),
            "below_95": float((pits < 0.025).mean()), "above_95": float((pits > 0.975).mean()),
            "mean_pit": float(pits.mean()), "nlpd": float(nlpd.mean()),
            "seed_gap_50": float(np.mean([gap(r) for r in runs.values()])),
            "seeds_nearer_50": sum(int(gap(runs[s]) < gap(base[s])) for s in paired) if k else None,
            "seeds_lower_nlpd": sum(int(np.mean(runs[s]["nlpd"]) < np.mean(base[s]["nlpd"])) for s in paired)
            if k else None,
        })
    return rows


def plot(path: Path, rows: list[dict]) -> None:
    """Share inside the 50 % interval and mean NLPD against ``K``, one line per table."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    for table in dict.fromkeys(r["table"] for r in rows):
        mine = [r for r in rows if r["table"] == table]
        axes[0].plot([r["K"] for r in mine], [r["inside_50"] for r in mine], "o-", label=table)
        axes[1].plot([r["K"] for r in mine], [r["nlpd"] for r in mine], "o-", label=table)
    axes[0].axhline(0.5, color="grey", ls=":")
    axes[0].set(xlabel="paused runs revealed (K)", ylabel="next step inside the 50 % interval")
    axes[1].set(xlabel="paused runs revealed (K)", ylabel="mean NLPD (nats)")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> str:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tables", nargs="+", default=["dev_classification", "dev_mnist_study"],
                        help="tables of the study (as named there)")
    parser.add_argument("--seeds", type=int, default=4, help="the policy's runs with seeds 0..N-1")
    parser.add_argument("--runs", type=Path, default=RESULTS / "freeze_thaw_dev" / "freeze_thaw_runs.jsonl",
                        help="the study's runs file (default: the development tables')")
    parser.add_argument("--reveal", type=int, nargs="+", default=[0, 10, 30],
                        help="numbers of paused runs given their next checkpoint")
    parser.add_argument("--held-out", type=int, default=80, help="paused runs judged per seed")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--quick", action="store_true",
                        help="simulate the policy on the study's tiny table (1 seed); no runs file")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.held_out < 1 or min(args.reveal) < 0:
        parser.error(f"--seeds and --held-out must be >= 1 and --reveal >= 0; got {args.seeds}, "
                     f"{args.held_out} and {args.reveal}")
    torch.set_num_threads(1)
    if args.quick:
        args.tables, args.seeds = ["quick"], 1
    elif not args.runs.exists():
        parser.error(f"no runs file {args.runs}: run benchmarks.freeze_thaw_study first")
    try:
        problems = {t: make_problem(t) for t in args.tables}
    except ValueError as error:
        parser.error(str(error))
    traces: dict[str, dict[int, dict]] = {t: {} for t in args.tables}
    if args.quick:
        from benchmarks.bo.freeze_thaw import GPARFreezeThaw

        problem = problems["quick"]
        traces["quick"][0] = simulate(GPARFreezeThaw(), problem, 0, budget_of("quick", problem)).to_json()
    else:
        try:
            traces = method_traces(args.runs, problems, REFERENCE, args.seeds)
        except ValueError as error:
            parser.error(str(error))
    results: dict[str, dict[int, list[dict]]] = {}
    for table, seed in tqdm([(t, s) for t in args.tables for s in sorted(traces[t])], desc="runs", unit="run"):
        results.setdefault(table, {})[seed] = next_step_scores(
            problems[table], traces[table][seed], sorted(set(args.reveal)), args.held_out)
    rows = [row for table, per_seed in results.items() for row in summary(table, per_seed)]
    if not rows:
        raise SystemExit("No run left enough paused runs to judge.")
    name = "random_resumes_quick" if args.quick else "random_resumes"
    args.out.mkdir(parents=True, exist_ok=True)
    write_results(
        args.out, name, "What a few random resumes would teach GPAR about the runs it leaves paused",
        rows, command_line(argv), list(range(args.seeds)), notes=NOTES,
        extra={"per_seed": {t: {str(s): r for s, r in by.items()} for t, by in results.items()}},
    )
    plot(args.out / f"{name}.png", rows)
    return markdown_table(rows)


if __name__ == "__main__":
    print(main())
