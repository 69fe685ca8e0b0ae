r"""What the policy's model said about the good runs it left paused.

The freeze-thaw study (``benchmarks.freeze_thaw_study``) counts how often the policy
started a table's best setting but never trained it to the end (its report's "How each
method spent its budget"). This asks why, from the runs the study recorded: for each of
the policy's runs on a table, it rebuilds what the policy saw when its budget ran out
(settings, errors at the reported checkpoints, paused runs) from the run's trace, and
asks the policy for its predictive of every paused run's final error
(``FreezeThawPolicy.final_error_samples``: GPAR on all the run's data, fitted once, as
the policy fits it). Each paused run's true final error (the table's) then falls below
the predictive's central 95 % interval, inside it or above it.

A promotion is lost on the *lower* side: a run that ends better than the model thought
possible has a stopping index near zero, so it stays paused. The report gives, per
table, the share of paused runs whose final error fell below their interval (2.5 % for
a calibrated predictive), the same share among the paused runs that are among the
table's 10 best settings, and, for the table's best setting wherever it was left
paused, its last value, the predictive's interval, its true final error and the
predictive's probability of its ending below the run's incumbent.

Nothing is rerun: the predictive is the end-of-run model's, not the one each decision
used (the policy refits as data grow, so that model saw less). The runs are those of
``--method`` (default: the shipped policy, ``gpar_freeze_thaw``; or an earlier default,
e.g. ``gpar_freeze_thaw_point``). Model ``policy`` is the package's policy with its
defaults (its curve model predicts over Laplace draws of the later conditionals'
hyperparameters); ``point`` is the same with point estimates
(``curve_model_options(hyperparameter_draws=0)``, the default before 2026-11-29);
``measured`` is ``point`` told the table's measurement noise
(``curve_model_options(measurement_noise=..., hyperparameter_draws=0)``, the
calibration benchmark's ``measured``), each predicting from the same end-of-run states.

The runs left paused are chosen by the model's own predictions (except, for a policy
told the budget, those left at the end because no remaining budget could finish them),
so they are where its errors matter: a predictive whose mean is off by more than its width says leaves good
runs paused, and their finals then fall below its interval. For a predictive that is the
true conditional distribution given the data, choosing runs by the data does not change
the 2.5 % (the choice is a function of the data the predictive conditions on); for an
over-confident one, it concentrates the misses in the paused runs. The table's best
settings are another matter: they are picked by their outcome, so even a calibrated
predictive puts many of them in its lower tail.

``--steps N`` asks where the misses arise (``step_pits``): for the table's best settings
left paused and N other paused runs per seed, the probability integral transform of the
final given the observed prefix and of each later checkpoint's log-error increment given
the run's true errors before it (the end-of-run model's hyperparameters, one step at a
time). Calibrated one-step predictions with a miscalibrated final point at how the steps
compound along a path (errors that persist within a run), not at one conditional.

    python -m benchmarks.missed_promotions --tables dev_classification dev_mnist_study --seeds 8 \
        --runs benchmarks/results/freeze_thaw_dev/freeze_thaw_runs.jsonl --steps 6 \
        --out benchmarks/results/missed_promotions_dev
    python -m benchmarks.missed_promotions --method gpar_freeze_thaw_point --models point measured
    python -m benchmarks.missed_promotions --quick      # a tiny table, for the tests
"""

from __future__ import annotations

import argparse
import bisect
import math
import os
from collections.abc import Sequence
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch: small fits run faster on one thread

import numpy as np
import torch
from scipy.stats import spearmanr
from tqdm import tqdm

from benchmarks.bo.harness import TabularProblem, simulate
from benchmarks.freeze_thaw_study import (
    CANDIDATES, REFERENCE, budget_of, make_problem, method_traces,
)
from benchmarks.report import RESULTS, command_line, markdown_table, write_results
from gpar_bo import GPARModel
from gpar_bo.curve_model import curve_model_options, floor_zeros, resolve_gpar_options, to_increments
from gpar_bo.freeze_thaw import FreezeThawIndex, FreezeThawPolicy
from gpar_bo.posterior import GPARPosterior

#: Draws from each path's log-normal (``final_error_samples``): 128 paths x 8 draws.
NUM_DRAWS = 8
#: The table's best settings looked at apart from the other paused runs.
TOP = 10
MODELS = ("policy", "point", "measured")
#: The methods of the study that run the package's policy (the default and earlier ones).
POLICY_METHODS = (REFERENCE, *CANDIDATES)


def model_options(model: str, problem: TabularProblem) -> dict | None:
    """``FreezeThawPolicy``'s ``gpar_options`` of a model name (``MODELS``)."""
    if model == "policy":
        return None
    if model == "point":
        return curve_model_options(hyperparameter_draws=0)
    if problem.measurement_noise is None:
        raise ValueError(f"{problem.name} records no measurement noise; model {model!r} needs it.")
    return curve_model_options(measurement_noise=problem.measurement_noise, hyperparameter_draws=0)


def normals_of(posterior: GPARPosterior, n: int, generator: torch.Generator) -> torch.Tensor:
    """``n x base_sample_shape`` standard normals for ``posterior``: the outputs' first,
    drawn as before posteriors had noise outputs (so earlier results reproduce), then
    the noise outputs'."""
    shape, M = posterior.base_sample_shape, posterior.num_sampled
    outputs = torch.randn(n, *shape[:-1], M, generator=generator, dtype=posterior.dtype)
    noise = torch.randn(n, *shape[:-1], shape[-1] - M, generator=generator, dtype=posterior.dtype)
    return torch.cat([outputs, noise], dim=-1)


def end_state(trace: dict, problem: TabularProblem) -> tuple[np.ndarray, torch.Tensor, torch.Tensor]:
    r"""What the policy saw when a run's budget ran out, from its trace.

    Args:
        trace: A ``Trace.to_json()`` dict of a policy run (``trials``: setting,
            status, epochs trained).
        problem: Its table.

    Returns:
        ``settings`` (``n``, rows of the table), ``Y`` (``n x M`` errors at the
        checkpoints each run reported, NaN after) and ``paused`` (``n`` bool; a run
        that was training when the budget ran out is not paused).
    """
    furthest: dict[int, tuple[int, str]] = {}
    for trial in trace["trials"]:  # a setting resumed in several trials: its furthest
        if trial["epochs"] >= furthest.get(trial["setting"], (-1, ""))[0]:
            furthest[trial["setting"]] = (trial["epochs"], trial["status"])
    settings = np.array(sorted(furthest))
    checkpoints = torch.tensor(problem.checkpoints)
    errors = problem.error[settings][:, checkpoints - 1]
    epochs = torch.tensor([furthest[s][0] for s in settings])
    Y = torch.where(checkpoints <= epochs.unsqueeze(-1), errors, float("nan"))
    paused = torch.tensor([furthest[s][1] == "stopped" for s in settings]) & (epochs < checkpoints[-1])
    paused &= ~Y[:, 0].isnan()
    return settings, Y, paused


def paused_predictions(trace: dict, problem: TabularProblem, model: str = "policy") -> list[dict]:
    """The policy's predictive of each paused run's final error at the end of ``trace``.

    Returns:
        One dict per paused run: its setting, rank of its true final error in the
        table (0 = best), checkpoints observed, last observed error, its standing
        there (the share of the table's settings with a lower error at that
        checkpoint: 0 = the best there), the 2.5 %, 50 %
        and 97.5 % quantiles of the predictive, the true final error, where it fell
        (``side``: "below", "inside" or "above" the 95 % interval), and the
        predictive's probability of a final error below the run's incumbent. Empty
        if fewer than two runs finished (the policy has no model then).
    """
    settings, Y, paused = end_state(trace, problem)
    rows = paused.nonzero().squeeze(-1)
    if len(rows) == 0:
        return []
    X = problem.X[settings]
    policy = FreezeThawPolicy(problem.checkpoints, seed=int(trace["seed"]),
                              gpar_options=model_options(model, problem))
    samples = policy.final_error_samples(X, Y, rows, num_draws=NUM_DRAWS)
    if samples is None:
        return []
    final = problem.error[:, -1]
    rank = final.argsort().argsort()
    at_checkpoints = problem.error[:, torch.tensor(problem.checkpoints) - 1]
    incumbent = float(floor_zeros(Y)[~Y[:, -1].isnan(), -1].min())  # as the policy reads a 0
    quantiles = torch.quantile(samples, torch.tensor([0.025, 0.5, 0.975], dtype=samples.dtype), dim=0)
    out = []
    for j, row in enumerate(rows.tolist()):
        setting = int(settings[row])
        truth = float(final[setting])
        low, median, high = (float(q) for q in quantiles[:, j])
        observed = int((~Y[row].isnan()).sum())
        last = float(Y[row, observed - 1])
        out.append({
            "setting": setting,
            "final_rank": int(rank[setting]),
            "observed": observed,
            "last_error": last,
            "standing": float((at_checkpoints[:, observed - 1] < last).double().mean()),
            "low": low,
            "median": median,
            "high": high,
            "final_error": truth,
            "side": "below" if truth < low else "above" if truth > high else "inside",
            "p_beats_incumbent": float((samples[:, j] < incumbent).double().mean()),
            "incumbent": incumbent,
        })
    return out


def step_pits(trace: dict, problem: TabularProblem, others: int) -> list[dict]:
    r"""Where paused runs' errors fall in the policy's predictive, one checkpoint at a time.

    At the end of ``trace`` (as ``paused_predictions`` rebuilds it), for the table's
    ``TOP`` best settings left paused and ``others`` other paused runs (drawn with the
    run's seed): the probability integral transform (PIT, the predictive's CDF at the
    truth) of the final log error given the observed prefix (``FreezeThawIndex``'s
    mixture over paths, as the policy predicts it), and of each later log-error
    increment given the run's *true* errors up to the checkpoint before (the same
    hyperparameters, the run's row extended: one step, teacher-forced). A calibrated
    predictive gives uniform PITs. Where the one-step PITs are nearly uniform and the
    final's are not, the misses come from how the steps add up along a path, not
    from any one conditional. (An error of exactly 0 is read as half the table's
    smallest positive error; the model reads it by its own data's, so on a table with
    zeros such a run's PITs are approximate.)

    Returns:
        One dict per run: ``setting``, ``best`` (among the table's ``TOP`` best),
        ``observed`` checkpoints, ``final`` PIT and ``steps`` (the one-step PITs of
        checkpoints ``observed + 1 .. M``, in order). Empty if fewer than two runs
        finished.
    """
    settings, Y, paused = end_state(trace, problem)
    reported = ~Y[:, 0].isnan()  # the rows of the policy's model, in order
    settings, Y, paused = settings[reported.numpy()], Y[reported], paused[reported]
    finished = ~Y[:, -1].isnan()
    if int(finished.sum()) < 2 or not bool(paused.any()):
        return []
    X = problem.X[settings]
    policy = FreezeThawPolicy(problem.checkpoints, seed=int(trace["seed"]))
    model = policy.model(X, Y)
    final = problem.error[:, -1]
    best = set(final.argsort()[:TOP].tolist())
    rows = paused.nonzero().squeeze(-1).tolist()
    top = [r for r in rows if int(settings[r]) in best]
    rest = [r for r in rows if int(settings[r]) not in best]
    generator = torch.Generator().manual_seed(int(trace["seed"]))
    rest = [rest[i] for i in torch.randperm(len(rest), generator=generator)[:others].tolist()]
    chosen = torch.tensor(top + rest, dtype=torch.long)
    observed = (~Y.isnan()).sum(-1)
    epochs = torch.tensor(problem.checkpoints, dtype=X.dtype)
    incumbent = float(floor_zeros(Y)[finished, -1].min())
    index = FreezeThawIndex(model, epochs, incumbent, policy.num_samples, seed=policy.seed,
                            latent_paths=policy.latent_paths)
    truth = floor_zeros(problem.error[:, torch.tensor(problem.checkpoints) - 1])[settings[chosen.numpy()]]
    normal = torch.distributions.Normal(0.0, 1.0)
    shape = torch.Size([policy.num_samples])
    with torch.no_grad():
        paths = index.final_paths(X[chosen], observed[chosen])
        finals = normal.cdf((truth[:, -1].log() - paths.mean) / paths.variance.sqrt()).mean(0)
        increments = to_increments(truth.log())
        out = []
        for j, row in enumerate(chosen.tolist()):
            steps = []
            for m in range(int(observed[row]), Y.shape[-1]):
                longer = Y.clone()
                longer[row, :m] = truth[j, :m]
                extended = GPARModel(X, longer, output_names=list(problem.checkpoints),  # own transform
                                    **resolve_gpar_options(policy.gpar_options))
                extended.load_state_dict(model.state_dict(), strict=False, keep_transforms=False)
                posterior = extended.eval().modelled_posterior(
                    X[row : row + 1], [*range(m + 1)], observation_noise=True
                )
                base = normals_of(posterior, shape.numel(), generator).view(*shape, *posterior.base_sample_shape)
                _, means, variances = posterior.rsample_with_conditionals(shape, base)
                z = (increments[j, m] - means[..., m]) / variances[..., m].sqrt()
                steps.append(float(normal.cdf(z).mean()))
            out.append({"setting": int(settings[row]), "best": row in top,
                        "observed": int(observed[row]), "final": float(finals[j]), "steps": steps})
    return out


def step_rows(table: str, per_seed: dict[int, list[dict]]) -> list[dict]:
    """Per group of runs (the table's ``TOP`` best, the others drawn): the shares of
    ``step_pits``'s PITs below 0.025 and above 0.975 (0.025 each if calibrated) and
    inside the central 50 % interval, between 0.25 and 0.75 (0.5 if calibrated), for the
    final given the observed prefix, the first unobserved checkpoint and the later ones
    (each one step, given the true errors before it). Tails near 0.025 with a centre far
    below 0.5 mean PITs piled up between them: a predictive centred between two groups
    of outcomes, not too narrow a one."""
    rows = []
    for label, best in ((f"the table's {TOP} best, paused", True), ("other paused runs", False)):
        runs = [r for by_seed in per_seed.values() for r in by_seed if r["best"] == best]
        row: dict = {"table": table, "runs": label, "n": len(runs)}
        for name, pits in (("final", [r["final"] for r in runs]),
                           ("first_step", [r["steps"][0] for r in runs]),
                           ("later_steps", [p for r in runs for p in r["steps"][1:]])):
            row[f"{name}_below"] = sum(p < 0.025 for p in pits) / len(pits) if pits else math.nan
            row[f"{name}_above"] = sum(p > 0.975 for p in pits) / len(pits) if pits else math.nan
            row[f"{name}_inside50"] = sum(0.25 <= p <= 0.75 for p in pits) / len(pits) if pits else math.nan
        row["later_steps_n"] = sum(len(r["steps"]) - 1 for r in runs)
        rows.append(row)
    return rows


def unstarted_best(trace: dict, problem: TabularProblem, model: str = "policy") -> dict | None:
    """Where the policy's model ranked the table's best setting if the run never started it.

    At the end of ``trace`` (as ``paused_predictions`` rebuilds it), every setting of the
    table the run never started is scored by the index it would have as a new setting
    (``FreezeThawPolicy.start_indices``); ``decide`` compares a random subset of
    ``num_candidates`` of them with the paused runs at every decision.

    Args:
        trace: A ``Trace.to_json()`` dict of a policy run (its ``seed`` and ``trials``).
        problem: Its table.
        model: A name of ``MODELS`` (the policy's model by default).

    Returns:
        None if the run started a best setting (or has no model); else the number of
        unstarted settings, the best setting's rank among them by index (0 = above
        every other; settings of the same index count ahead of it, so an index of 0
        shared by many ranks low), that rank as a share, its index and the highest
        index; how well the index ranks the unstarted settings (``spearman``: Spearman's
        correlation of the index with minus the final error) and where the highest-index
        setting ranks in the table by final error (``top_pick_final_rank``, 0 = the
        best). Where the table has several best settings, the one of highest index.
    """
    settings, Y, _ = end_state(trace, problem)
    final = problem.error[:, -1]
    best = (final == final.min()).nonzero().squeeze(-1).tolist()
    if set(best) & set(settings.tolist()):
        return None
    rest = sorted(set(range(len(final))) - set(settings.tolist()))
    policy = FreezeThawPolicy(problem.checkpoints, seed=int(trace["seed"]),
                              gpar_options=model_options(model, problem))
    indices = policy.start_indices(problem.X[settings], Y, problem.X[rest])
    if indices is None:
        return None
    at = {s: i for i, s in enumerate(rest)}
    best_index = max(float(indices[at[s]]) for s in best)
    rank = int((indices >= best_index).sum()) - 1
    table_rank = final.argsort().argsort()
    top_pick = rest[int(indices.argmax())]
    return {"unstarted": len(rest), "best_rank": rank, "best_rank_share": rank / len(rest),
            "best_index": best_index, "top_index": float(indices.max()),
            "spearman": float(spearmanr(indices.numpy(), -final[rest].numpy()).statistic),
            "top_pick_final_rank": int(table_rank[top_pick])}


def summary_rows(
    table: str, model: str, problem: TabularProblem, per_seed: dict[int, list[dict]]
) -> tuple[list[dict], list[dict]]:
    """Per table: the sides of the paused runs' final errors (all, and the table's
    ``TOP`` best); per seed where the table's best setting was left paused: its row."""
    best = int(problem.error[:, -1].argmin())
    counts = []
    for label, keep in (("all paused runs", lambda p: True),
                        (f"the table's {TOP} best, paused", lambda p: p["final_rank"] < TOP)):
        picked = [p for runs in per_seed.values() for p in runs if keep(p)]
        n = len(picked)
        row = {"table": table, "model": model, "runs": label, "seeds": len(per_seed), "n": n}
        for side in ("below", "inside", "above"):
            share = sum(p["side"] == side for p in picked) / n if n else math.nan
            row[side] = share
        row["below_se"] = math.sqrt(row["below"] * (1 - row["below"]) / n) if n else math.nan
        counts.append(row)
    left = []
    for seed, runs in sorted(per_seed.items()):
        for p in runs:
            if p["setting"] == best:
                left.append({"table": table, "model": model, "seed": seed,
                             **{k: v for k, v in p.items() if k != "final_rank"}})
    return counts, left


#: Upper edges of the standing buckets of ``state_rows`` (share of the table's settings
#: with a lower error at the run's last checkpoint).
STANDING_EDGES = (0.1, 0.25, 0.5, 1.0)


def state_rows(table: str, model: str, problem: TabularProblem,
               per_seed: dict[int, list[dict]]) -> list[dict]:
    r"""The sides of the paused runs' final errors by the state they were left in.

    Paused runs are grouped by the checkpoints they observed and by their standing at
    the last of them (``paused_predictions``'s ``standing``: top 10 %, 10-25 %, 25-50 %,
    the worse half of the table's settings there). Per group: the count, the shares
    below, inside and above the 95 % interval, and ``log_bias``, the mean of
    ``log(median / truth)`` (positive: the model expected a worse final error than the
    run reached). Errors of exactly 0 are read as half the table's smallest positive
    error. The model reads a 0 as half the smallest positive value in its own data, so
    for such runs the bias is approximate. Where the misses on the two sides come from
    different groups, the table's mix of groups sets which side dominates overall.
    """
    positive = problem.error[problem.error > 0]
    floor = float(positive.min()) / 2 if len(positive) else 1e-3
    runs = [p for by_seed in per_seed.values() for p in by_seed]
    labels = [f"{100 * lo:g}-{100 * hi:g} %" for lo, hi in zip((0.0, *STANDING_EDGES[:-1]), STANDING_EDGES)]
    bucket = [bisect.bisect_right(STANDING_EDGES[:-1], p["standing"]) for p in runs]
    rows = []
    for observed in sorted({p["observed"] for p in runs}):
        for k, label in enumerate(labels):
            picked = [p for p, b in zip(runs, bucket) if p["observed"] == observed and b == k]
            if not picked:
                continue
            n = len(picked)
            row = {"table": table, "model": model, "observed": observed, "standing": label, "n": n}
            for side in ("below", "inside", "above"):
                row[side] = sum(p["side"] == side for p in picked) / n
            row["log_bias"] = float(np.mean([math.log(max(p["median"], floor) / max(p["final_error"], floor))
                                             for p in picked]))
            rows.append(row)
    return rows


def spread_by_first_quartile(table: str, problem: TabularProblem) -> dict:
    """How much runs change after the first checkpoint, by how good they were there.

    The policy continues mostly runs that were good early, so its later conditionals
    learn how such runs go on; this says whether the runs it leaves paused go on
    differently. Errors are floored at 1e-3 before the log (as a zero is read).

    Returns:
        ``table`` and, per quartile ``Q1`` (lowest errors at the first checkpoint) to
        ``Q4``, the standard deviation over the table's settings of the change of log
        error from the first to the final checkpoint.
    """
    columns = torch.tensor(problem.checkpoints) - 1
    log_error = problem.error[:, columns].clamp_min(1e-3).log()
    first, change = log_error[:, 0].contiguous(), log_error[:, -1] - log_error[:, 0]
    edges = torch.quantile(first, torch.tensor([0.25, 0.5, 0.75], dtype=first.dtype))
    quartile = torch.bucketize(first, edges)
    return {"table": table, **{f"Q{q + 1}": float(change[quartile == q].std()) for q in range(4)}}


def plot(path: Path, results: dict[tuple[str, str], dict[int, list[dict]]]) -> None:
    """Per (table, model), the true final error against the predictive's 95 % interval for
    the table's ``TOP`` best settings wherever the policy left them paused."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tables = list(dict.fromkeys(t for t, _ in results))
    models = list(dict.fromkeys(m for _, m in results))
    fig, axes = plt.subplots(len(models), len(tables), figsize=(4.2 * len(tables), 3.2 * len(models)),
                             squeeze=False)
    for (table, model), per_seed in results.items():
        ax = axes[models.index(model), tables.index(table)]
        picked = [p for runs in per_seed.values() for p in runs if p["final_rank"] < TOP]
        for i, p in enumerate(sorted(picked, key=lambda p: p["final_error"])):
            colour = {"below": "tab:red", "inside": "tab:green", "above": "tab:blue"}[p["side"]]
            ax.plot([i, i], [p["low"], p["high"]], color="grey", lw=1)
            ax.plot(i, p["final_error"], "o", color=colour, ms=3)
        ax.set_yscale("log")
        ax.set_title(f"{table}, {model}: top {TOP} left paused", fontsize=9)
        ax.set_xlabel("paused run (by true final error)", fontsize=8)
        ax.set_ylabel("final error: 95 % interval, truth", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


NOTES = f"""For every run of a policy method (the command's `--method`, default `{REFERENCE}`)
in the study's runs file on a table, the state at the end of its budget is rebuilt from its
trace and the package's `FreezeThawPolicy.final_error_samples` (GPAR on all the run's data,
{NUM_DRAWS} draws from each of its 128 paths) predicts every paused run's final error: model
`policy` with the policy's defaults (its curve model predicts over Laplace draws of the
later conditionals' hyperparameters), `point` with point estimates (the default before
2026-11-29), `measured` point estimates told the table's measurement noise (a candidate).
`below` / `inside` / `above`: shares of paused runs whose true final error fell below,
inside or above the predictive's central 95 % interval (2.5 % / 95 % / 2.5 % if
calibrated); `below` is the side on which a good run looks hopeless and is left paused.
The second table lists the table's best setting wherever a run left it paused:
`p_beats_incumbent` is the predictive's probability of its final error being below that
run's incumbent (`incumbent`). The predictive is the end-of-run model's, which saw more
data than the decisions that left the run paused. The paused runs were chosen by the
policy's predictions, which is why they show where an over-confident predictive costs
promotions (see the module docstring)."""


def main(argv: Sequence[str] | None = None) -> str:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tables", nargs="+", type=str, default=["101", "102", "103", "mnist", "digits:1000", "breast_cancer:1000"],
                        help="tables of the study (as named there)")
    parser.add_argument("--seeds", type=int, default=20, help="the policy's runs with seeds 0..N-1")
    parser.add_argument("--runs", type=Path, default=RESULTS / "freeze_thaw_runs.jsonl",
                        help="the study's runs file")
    parser.add_argument("--method", default=REFERENCE, choices=POLICY_METHODS,
                        help=f"whose runs to read (default {REFERENCE}, the shipped policy)")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=["policy"],
                        help="policy: the policy's defaults; point: with point estimates of the "
                             "hyperparameters (the default before 2026-11-29); measured: point, told "
                             "the table's measurement noise")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--steps", type=int, default=0, metavar="N",
                        help="also place paused runs' errors one checkpoint at a time (step_pits): "
                             f"the table's {TOP} best left paused and N other paused runs per seed; "
                             "0: not done")
    parser.add_argument("--quick", action="store_true",
                        help="simulate the policy on the study's tiny table (1 seed); no runs file")
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error(f"--seeds must be >= 1; got {args.seeds}")
    if args.steps < 0:
        parser.error(f"--steps must be >= 0; got {args.steps}")
    torch.set_num_threads(1)
    if args.quick:
        args.tables, args.seeds = ["quick"], 1
    if not args.quick and not args.runs.exists():
        parser.error(f"no runs file {args.runs}: run benchmarks.freeze_thaw_study first")
    try:
        problems = {t: make_problem(t) for t in args.tables}
    except ValueError as error:
        parser.error(str(error))
    for table in args.tables:
        for model in args.models:
            try:
                model_options(model, problems[table])
            except ValueError as error:
                parser.error(str(error))
    traces: dict[str, dict[int, dict]] = {t: {} for t in args.tables}
    if args.quick:
        from benchmarks.bo.freeze_thaw import GPARFreezeThaw

        for seed in range(args.seeds):
            trace = simulate(GPARFreezeThaw(), problems["quick"], seed, budget_of("quick", problems["quick"]))
            traces["quick"][seed] = trace.to_json()
    else:
        try:
            traces = method_traces(args.runs, problems, args.method, args.seeds)
        except ValueError as error:
            parser.error(str(error))
    results: dict[tuple[str, str], dict[int, list[dict]]] = {}
    jobs = [(t, m, s) for t in args.tables for m in args.models for s in sorted(traces[t])]
    unstarted = []
    for table, model, seed in tqdm(jobs, desc="runs", unit="run"):
        results.setdefault((table, model), {})[seed] = paused_predictions(
            traces[table][seed], problems[table], model
        )
        never = unstarted_best(traces[table][seed], problems[table], model)
        if never is not None:
            unstarted.append({"table": table, "model": model, "seed": seed, **never})
    stepped: dict[str, dict[int, list[dict]]] = {}
    if args.steps:
        for table, seed in tqdm([(t, s) for t in args.tables for s in sorted(traces[t])],
                                desc="one checkpoint at a time", unit="run"):
            stepped.setdefault(table, {})[seed] = step_pits(traces[table][seed], problems[table], args.steps)
    counts, left, states = [], [], []
    for (table, model), per_seed in results.items():
        c, b = summary_rows(table, model, problems[table], per_seed)
        counts += c
        left += b
        states += state_rows(table, model, problems[table], per_seed)
    args.out.mkdir(parents=True, exist_ok=True)
    name = "missed_promotions_quick" if args.quick else "missed_promotions"
    spreads = [spread_by_first_quartile(t, problems[t]) for t in args.tables]
    body = NOTES + "\n\n## The table's best setting, where the policy left it paused\n\n"
    body += markdown_table(left) if left else "(nowhere)"
    body += ("\n\n## The table's best setting, where the policy never started it\n\n"
             "At the end of each such run, every setting the run never started scored by the "
             "index it would have as a new setting (`FreezeThawPolicy.start_indices`); "
             "`best_rank`: how many unstarted settings scored at least as high as the table's "
             "best (0 = it would be the first choice), `best_rank_share` that as a share; "
             "`spearman`: how well the index ranks all unstarted settings (its Spearman "
             "correlation with minus the final error); `top_pick_final_rank`: the table rank, "
             "by final error, of the setting of highest index (0 = the best). Each "
             "decision scores a random subset of `num_candidates` unstarted settings and "
             "starts the one of highest index if it beats every paused run's.\n\n")
    body += markdown_table(unstarted) if unstarted else "(nowhere)"
    body += ("\n\n## How runs go on after the first checkpoint, by how good they were there\n\n"
             "Standard deviation over each table's settings of the change of log error from the "
             "first checkpoint to the final one, by quartile of the first checkpoint's error (Q1: "
             "the best quarter, the runs the policy mostly continues; its later conditionals learn "
             "from them). Where Q2-Q4 spread much more than Q1, a model fitted on the continued "
             "runs is too sure about the paused ones.\n\n" + markdown_table(spreads, digits=3))
    body += ("\n\n## Where the paused runs were left, and which side they missed on\n\n"
             "The paused runs by the checkpoints they observed (`observed`) and their standing at "
             "the last of them among the table's settings (`standing`: 0-10 % the best tenth "
             "there); per group the count, the shares of finals below, inside and above the 95 % "
             "interval, and `log_bias`, the mean log of the predictive's median over the true final "
             "error (positive: the model expected worse than the run reached; `state_rows`).\n\n"
             + markdown_table(states, digits=3))
    steps = [row for table, per_seed in stepped.items() for row in step_rows(table, per_seed)]
    if steps:
        body += ("\n\n## Where the misses arise: one checkpoint at a time (`--steps`)\n\n"
                 "For the table's best settings left paused and a random draw of the other paused "
                 "runs (`step_pits`, the policy's model only): the share of PITs below 0.025 and above "
                 "0.975 (0.025 each if calibrated), and inside the central 50 % interval (0.5 if "
                 "calibrated), of the final log error given the observed prefix "
                 "(`final`), and of each later log-error increment given the run's true errors "
                 "before it (`first_step`: the first checkpoint the run did not reach; "
                 "`later_steps`: the others). The best settings are chosen by their outcome, so "
                 "even a calibrated predictive puts many of them low; the other runs are "
                 "chosen by the data the model saw.\n\n" + markdown_table(steps, digits=3))
    write_results(
        args.out, name, "Where the policy's model put the final errors of the runs it left paused",
        counts, command_line(argv), list(range(args.seeds)), notes=body,
        extra={"best_left_paused": left, "best_never_started": unstarted, "by_state": states,
               "spread_by_first_quartile": spreads,
               "one_checkpoint_at_a_time": {t: {str(s): r for s, r in by.items()} for t, by in stepped.items()},
               "top_paused": {f"{t} {m}": {str(s): [p for p in r if p["final_rank"] < TOP] for s, r in by.items()}
                              for (t, m), by in results.items()}},
    )
    plot(args.out / f"{name}.png", results)
    return markdown_table(counts)


if __name__ == "__main__":
    print(main())
