"""Speed against the reference ``gpar`` package on the synthetic three-output problem.

The paper's synthetic problem (section 4) with 30 evenly spaced training points
(noise standard deviation 0.1, as in the authors' script), GPAR-L-NL on both sides
(EQ on x started at length scale 0.1, linear + EQ on earlier outputs), ours under
both of its ``conventions``: "paper" is the reference's model (zero-mean GPs on the
outputs as given, maximum likelihood), "botorch" our default (standardised targets,
constant means, BoTorch's priors). Fit, then
predict with 100 posterior samples at 200 test points. Each side runs in a fresh
process per seed with one torch thread, timed after its imports: the first fit and
predict pay each side's first-call overheads (lazy imports, kernel set-up; "cold"),
then the identical fit and predict are repeated in the same process ("warm", as for
every refit after the first in a BO loop). Both optimisers are L-BFGS-B; the benchmark runs them
to their default convergence and again with at most 50 iterations per conditional
on both sides (``--maxiter``). The reference samples jointly over the 200 points; we time our
posterior both as 200 independent marginals (``200 x 1 x 1`` batch, what means and
bands need) and jointly (``q = 200``). Accuracy: SMSE of each side's predictive
mean against the noiseless truth, averaged over the three outputs; ten seeds, and
the number of seeds on which each side does at least as well as the reference.

The reference runs from its own virtualenv (default ``/tmp/refvenv``, created with
``python3 -m venv /tmp/refvenv && /tmp/refvenv/bin/pip install gpar``), never ours.

Run: python -m benchmarks.speed [--seeds 0 1 ... 9] [--reference-python /tmp/refvenv/bin/python]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: write PNGs only
import matplotlib.pyplot as plt
import torch

from benchmarks.report import RESULTS, command_line, write_results

HERE = Path(__file__).resolve().parent
INSTALL = "python3 -m venv /tmp/refvenv && /tmp/refvenv/bin/pip install gpar"


def make_task(seed: int, n_train: int, n_test: int, num_samples: int, maxiter: int | None) -> dict:
    """The synthetic task as JSON-serialisable lists (shared by both sides)."""
    from gpar_bo.synthetic import three_output_function

    generator = torch.Generator().manual_seed(seed)
    X = torch.linspace(0, 1, n_train, dtype=torch.double).unsqueeze(-1)
    Y = three_output_function(X) + 0.1 * torch.randn(n_train, 3, generator=generator, dtype=torch.double)
    x_test = torch.linspace(0, 1, n_test, dtype=torch.double)
    return {"x": X.squeeze(-1).tolist(), "y": Y.tolist(), "x_test": x_test.tolist(),
            "num_samples": num_samples, "seed": seed, "maxiter": maxiter}


PHASES = ("cold", "warm")  # first fit + predict in the process, then the identical repeat
CONVENTIONS = ("paper", "botorch")  # ours, each in its own process per seed


def run_ours(spec: dict) -> dict:
    """Fit and predict with our GPAR-L-NL under ``spec["conventions"]``.

    The worker calls it cold, then warm.
    """
    from botorch.fit import fit_gpytorch_mll

    from gpar_bo import GPARMarginalLogLikelihood, GPARModel
    from gpar_bo.initialization import set_input_lengthscales

    torch.manual_seed(spec["seed"])
    X = torch.tensor(spec["x"], dtype=torch.double).unsqueeze(-1)
    Y = torch.tensor(spec["y"], dtype=torch.double)
    X_test = torch.tensor(spec["x_test"], dtype=torch.double).unsqueeze(-1)
    shape = torch.Size([spec["num_samples"]])
    result = {}
    wall, cpu = time.perf_counter(), time.process_time()
    model = set_input_lengthscales(GPARModel(X, Y, kernel="L-NL", conventions=spec["conventions"]), 0.1)
    options = {"optimizer_kwargs": {"options": {"maxiter": spec["maxiter"]}}} if spec["maxiter"] else {}
    fit_gpytorch_mll(GPARMarginalLogLikelihood(model.likelihood, model), **options)
    result["fit_wall"], result["fit_cpu"] = time.perf_counter() - wall, time.process_time() - cpu
    with torch.no_grad():
        wall, cpu = time.perf_counter(), time.process_time()
        means = model.posterior(X_test.unsqueeze(-2)).rsample(shape).mean(0).squeeze(-2)
        result["predict_wall"], result["predict_cpu"] = time.perf_counter() - wall, time.process_time() - cpu
        wall, cpu = time.perf_counter(), time.process_time()
        joint = model.posterior(X_test).rsample(shape).mean(0)
        result["predict_joint_wall"] = time.perf_counter() - wall
        result["predict_joint_cpu"] = time.process_time() - cpu
    result["means"], result["means_joint"] = means.tolist(), joint.tolist()
    return result


def in_fresh_process(python: str, script: Path, spec: dict, *flags: str) -> dict:
    """Run ``script`` on ``spec`` (a JSON file) in a new process; parse its last output line."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(spec, handle)
    completed = subprocess.run(
        [python, str(script), *flags, handle.name], capture_output=True, text=True, check=True,
        cwd=tempfile.gettempdir(),  # the reference must not see this repository
    )
    Path(handle.name).unlink()
    return json.loads(completed.stdout.strip().splitlines()[-1])


def smse(means: list, spec: dict) -> float:
    """SMSE of ``n_test x 3`` means against the noiseless truth, averaged over outputs."""
    from gpar_bo.synthetic import three_output_function

    truth = three_output_function(torch.tensor(spec["x_test"], dtype=torch.double).unsqueeze(-1))
    mean = torch.tensor(means, dtype=torch.double)
    return (((mean - truth) ** 2).mean(0) / truth.var(0)).mean().item()


def reference_versions(python: str) -> str:
    """``pip freeze`` lines of the reference venv for gpar and its numerical stack."""
    freeze = subprocess.run([python, "-m", "pip", "freeze"], capture_output=True, text=True).stdout
    keep = ("gpar", "stheno", "varz", "backends", "torch", "numpy", "scipy")
    return ", ".join(line for line in freeze.splitlines() if line.lower().startswith(keep))


def summarize(setting: str, runs: dict[str, list[dict]], phase: str = "cold") -> list[dict]:
    """Median timings and SMSE per implementation, and speed-ups over the reference.

    ``runs`` maps a side ("reference" and one entry per conventions of ours) to one
    result per seed, in the same seed order on every side.
    """

    def median(side: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[side])

    def row(label: str, side: str, predict_key: str, smse_key: str) -> dict:
        result = {"optimiser": setting, "run": phase, "implementation": label,
                  "fit s": median(side, "fit_wall"), "predict s": median(side, f"{predict_key}_wall"),
                  "fit cpu s": median(side, "fit_cpu"), "predict cpu s": median(side, f"{predict_key}_cpu"),
                  "SMSE": median(side, smse_key), "SMSE mean": statistics.mean(r[smse_key] for r in runs[side])}
        if runs["reference"]:
            result["seeds SMSE <= reference"] = sum(
                ours[smse_key] <= reference["smse"] for ours, reference in zip(runs[side], runs["reference"])
            )
        return result

    rows = []
    for conventions in CONVENTIONS:
        rows += [row(f"gpar_bo ({conventions}), marginal samples", conventions, "predict", "smse"),
                 row(f"gpar_bo ({conventions}), joint samples (q=200)", conventions, "predict_joint", "smse_joint")]
    if runs["reference"]:
        rows.append(row("reference gpar", "reference", "predict", "smse"))
        reference = rows[-1]
        for r in rows:
            r["speed-up wall"] = (reference["fit s"] + reference["predict s"]) / (r["fit s"] + r["predict s"])
            r["speed-up cpu"] = (reference["fit cpu s"] + reference["predict cpu s"]) / (
                r["fit cpu s"] + r["predict cpu s"])
    return rows


def plot(rows: list[dict], out: Path) -> None:
    """Median fit and predict CPU seconds of each implementation, stacked.

    CPU rather than wall seconds: other jobs share the machine, which inflates
    wall times by whatever share of the cores each process got.
    """
    fig, ax = plt.subplots(figsize=(9, 1.5 + 0.45 * len(rows)))
    labels = [f"{r['implementation']}\n({r['optimiser']}, {r['run']})" for r in rows]
    fit = [r["fit cpu s"] for r in rows]
    predict = [r["predict cpu s"] for r in rows]
    ax.barh(labels, fit, label="fit")
    ax.barh(labels, predict, left=fit, label="predict 100 samples at 200 points")
    for i, r in enumerate(rows):
        speed_up = f", {r['speed-up cpu']:.1f}x" if "speed-up cpu" in r else ""
        ax.text(fit[i] + predict[i], i, f" SMSE {r['SMSE']:.3f}{speed_up}", va="center", fontsize=8)
    ax.set_xlabel("CPU seconds (median over seeds, 1 thread)")
    ax.set_title("GPAR-L-NL on the synthetic problem, 30 training points")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> list[dict]:
    """Time both implementations; returns one row per implementation."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    parser.add_argument("--n-train", type=int, default=30)
    parser.add_argument("--n-test", type=int, default=200)
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--reference-python", default="/tmp/refvenv/bin/python")
    parser.add_argument("--maxiter", type=int, default=50, help="the capped setting")
    parser.add_argument("--quick", action="store_true", help="one seed, 40 test points, 20 samples")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)  # internal: our side
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.worker is not None:
        spec = json.loads(args.worker.read_text())
        print(json.dumps({phase: run_ours(spec) for phase in PHASES}))
        return []
    if args.quick:
        args.seeds, args.n_test, args.samples = args.seeds[:1], 40, 20
    has_reference = Path(args.reference_python).exists()
    rows, runs = [], {}
    for maxiter in [None, args.maxiter]:
        setting = "default convergence" if maxiter is None else f"maxiter {maxiter}"
        runs[setting] = {phase: {side: [] for side in (*CONVENTIONS, "reference")} for phase in PHASES}
        for seed in args.seeds:
            spec = make_task(seed, args.n_train, args.n_test, args.samples, maxiter)
            ours = {conventions: in_fresh_process(sys.executable, Path(__file__),
                                                  {**spec, "conventions": conventions}, "--worker")
                    for conventions in CONVENTIONS}
            ref = None
            if has_reference:
                ref = in_fresh_process(args.reference_python, HERE / "reference_gpar.py", spec)
            for phase, phase_runs in runs[setting].items():
                for conventions, result in ours.items():
                    phase_runs[conventions].append({**result[phase], "smse": smse(result[phase]["means"], spec),
                                                    "smse_joint": smse(result[phase]["means_joint"], spec)})
                if ref:
                    phase_runs["reference"].append({**ref[phase], "smse": smse(ref[phase]["means"], spec)})
                timings = {k: {m: round(v, 3) for m, v in r[-1].items() if not m.startswith("means")}
                           for k, r in phase_runs.items() if r}
                print(setting, phase, seed, timings, flush=True)
        rows += [row for phase in PHASES for row in summarize(setting, runs[setting][phase], phase)]
    name = "speed_reference_quick" if args.quick else "speed_reference"
    args.out.mkdir(parents=True, exist_ok=True)
    plot(rows, args.out / f"{name}.png")
    reference_note = (
        f"Reference: installed with `{INSTALL}` ({reference_versions(args.reference_python)})."
        if has_reference else f"Reference not run: {args.reference_python} not found."
    )
    notes = (
        "Medians over seeds of wall seconds (and CPU seconds), each side in a fresh process "
        "with 1 torch thread, timed after imports; cold: the first fit and predict in the "
        "process, warm: the identical fit and predict repeated in the same process; "
        "L-BFGS-B at its default convergence, and "
        f"capped at {args.maxiter} iterations per conditional on both sides. "
        "SMSE: predictive mean vs noiseless truth, averaged over y1, y2, y3 (median and mean over "
        "seeds; seeds on which a side's SMSE is at most the reference's). Ours under the paper's "
        "conventions is the reference's model; under BoTorch's, our default. Target: at least "
        f"10x faster end to end with equal or better SMSE.\n\n{reference_note}\n\n![speed]({name}.png)"
    )
    write_results(args.out, name, "Speed vs the reference gpar package (synthetic, 30 points)", rows,
                  command_line(argv), seeds=args.seeds, notes=notes, extra={"runs": runs})
    return rows


if __name__ == "__main__":
    main()
