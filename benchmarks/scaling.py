"""Fit cost of GPAR vs BoTorch's multi-task GPs as learning curves grow (M and N).

Fully observed toy learning curves (``gpar_bo.synthetic.learning_curves``, d = 2,
noise 0.005) with M checkpoints from N runs. Models: GPAR-L-NL (M decoupled
conditionals of N points each), BoTorch's ``MultiTaskGP`` (ICM with a full-rank task
covariance over the N M long-format points) and ``KroneckerMultiTaskGP`` (the same
covariance family, with Kronecker algebra on the N x M grid). Every fit is capped
at the same ``maxiter`` L-BFGS-B iterations (``optimizer_kwargs={"options":
{"maxiter": 50}}`` to ``fit_gpytorch_mll``; for GPAR per conditional) and runs in a
fresh process with one torch thread; we record its wall and CPU seconds and its
peak resident memory above the process's level before fitting. Sweeps: M in
(5, 10, 20, 50) at N = 100, and N in (100, 300, 1000) at M = 10. ICM runs with more
than ``--icm-max-points`` long-format points (default 2000) are skipped, because a
dense (N M)^3 Cholesky per iteration does not finish in reasonable time on this
machine; each run also has a timeout.

Run: python -m benchmarks.scaling [--quick] [--maxiter 50]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: write PNGs only
import matplotlib.pyplot as plt
import torch
from torch import Tensor

from benchmarks.report import RESULTS, command_line, write_results

MODELS = ("GPAR", "MultiTaskGP (ICM)", "KroneckerMultiTaskGP")


def make_curves(n: int, m: int, seed: int) -> tuple[Tensor, Tensor]:
    """``n x 2`` settings and ``n x m`` validation errors at m checkpoints in [1, 21]."""
    from gpar_bo.synthetic import learning_curves

    generator = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 2, generator=generator, dtype=torch.double)
    epochs = torch.linspace(1, 21, m, dtype=torch.double).tolist()
    return X, learning_curves(X, epochs, noise_std=0.005, seed=seed)


def build(model: str, X: Tensor, Y: Tensor) -> torch.nn.Module:
    """The marginal log likelihood to fit for ``model`` on fully observed curves."""
    from botorch.models import KroneckerMultiTaskGP, MultiTaskGP
    from gpytorch.mlls import ExactMarginalLogLikelihood

    from gpar_bo import GPARMarginalLogLikelihood, GPARModel

    if model == "GPAR":
        gpar = GPARModel(X, Y)
        return GPARMarginalLogLikelihood(gpar.likelihood, gpar)
    if model == "KroneckerMultiTaskGP":
        gp = KroneckerMultiTaskGP(X, Y)
        return ExactMarginalLogLikelihood(gp.likelihood, gp)
    n, m = Y.shape
    # Long format: one row per (run, checkpoint) with the task index last.
    tasks = torch.arange(m, dtype=X.dtype).repeat(n).unsqueeze(-1)
    long_X = torch.cat([X.repeat_interleave(m, 0), tasks], -1)
    gp = MultiTaskGP(long_X, Y.reshape(-1, 1), task_feature=-1)
    return ExactMarginalLogLikelihood(gp.likelihood, gp)


def current_rss_kb() -> int:
    """This process's resident memory now, in KiB (Linux)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * resource.getpagesize() // 1024


def run_one(spec: dict) -> dict:
    """Fit one model (in a fresh worker process); seconds and peak memory."""
    from botorch.fit import fit_gpytorch_mll

    X, Y = make_curves(spec["n"], spec["m"], spec["seed"])
    before = current_rss_kb()
    wall, cpu = time.perf_counter(), time.process_time()
    mll = build(spec["model"], X, Y)
    fit_gpytorch_mll(mll, optimizer_kwargs={"options": {"maxiter": spec["maxiter"]}})
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return {"fit s": time.perf_counter() - wall, "fit cpu s": time.process_time() - cpu,
            "peak MB above start": max(peak - before, 0) / 1024}


def in_worker(spec: dict, timeout: float) -> dict:
    """``run_one(spec)`` in a new process; a status instead of numbers on timeout/failure."""
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(spec)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": f"timeout > {timeout:.0f} s"}
    if done.returncode != 0:
        return {"status": "failed: " + done.stderr.strip().splitlines()[-1][:120]}
    return {"status": "ok", **json.loads(done.stdout.strip().splitlines()[-1])}


def plot(rows: list[dict], out: Path) -> None:
    """Fit CPU seconds (robust to other jobs on the machine) and peak memory vs M and N, log-log."""
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    for c, (sweep, key) in enumerate([("M", "M"), ("N", "N")]):
        for model in MODELS:
            points = [r for r in rows if r["sweep"] == sweep and r["model"] == model and r["status"] == "ok"]
            xs = [r[key] for r in points]
            axes[0, c].plot(xs, [r["fit cpu s"] for r in points], "o-", label=model)
            axes[1, c].plot(xs, [r["peak MB above start"] for r in points], "o-", label=model)
        gpar = [r for r in rows if r["sweep"] == sweep and r["model"] == "GPAR" and r["status"] == "ok"]
        if gpar and sweep == "M":
            # A line through GPAR's first point with slope 1: linear growth in M.
            x0, y0 = gpar[0]["M"], gpar[0]["fit cpu s"]
            xs = [r["M"] for r in gpar]
            axes[0, c].plot(xs, [y0 * x / x0 for x in xs], "k:", label="linear in M")
        fixed = {"M": f"N = {rows[0]['N']}", "N": f"M = {next(r['M'] for r in rows if r['sweep'] == 'N')}"}[sweep]
        for r in range(2):
            axes[r, c].set_xscale("log")
            axes[r, c].set_yscale("log")
            axes[r, c].set_xlabel(f"{key} ({'checkpoints' if key == 'M' else 'runs'}), {fixed}")
        axes[0, c].set_ylabel("fit CPU seconds")
        axes[1, c].set_ylabel("peak RSS above start (MB)")
        axes[0, c].legend(fontsize=8)
    fig.suptitle("Fit cost on fully observed learning curves (equal L-BFGS-B iteration cap, 1 thread)")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> list[dict]:
    """Run both sweeps; returns one row per (sweep, size, model)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ms", type=int, nargs="+", default=[5, 10, 20, 50])
    parser.add_argument("--ns", type=int, nargs="+", default=[100, 300, 1000])
    parser.add_argument("--fixed-n", type=int, default=100, help="N of the M sweep")
    parser.add_argument("--fixed-m", type=int, default=10, help="M of the N sweep")
    parser.add_argument("--maxiter", type=int, default=50)
    parser.add_argument("--icm-max-points", type=int, default=2000)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="M in (2, 4), N in (20, 40), maxiter 5")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # internal: one fit, JSON spec
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.worker is not None:
        print(json.dumps(run_one(json.loads(args.worker))))
        return []
    if args.quick:
        args.ms, args.ns, args.maxiter, args.fixed_n, args.fixed_m = [2, 4], [20, 40], 5, 20, 2
    sizes = [("M", args.fixed_n, m) for m in args.ms] + [("N", n, args.fixed_m) for n in args.ns]
    rows = []
    for sweep, n, m in sizes:
        for model in MODELS:
            row = {"sweep": sweep, "model": model, "N": n, "M": m}
            if model.startswith("MultiTaskGP") and n * m > args.icm_max_points:
                row["status"] = f"skipped: {n * m} points > {args.icm_max_points}"
            else:
                spec = {"model": model, "n": n, "m": m, "seed": args.seed, "maxiter": args.maxiter}
                row.update(in_worker(spec, args.timeout))
            rows.append({"sweep": sweep, "model": model, "N": n, "M": m, "status": row["status"],
                         "fit s": row.get("fit s"), "fit cpu s": row.get("fit cpu s"),
                         "peak MB above start": row.get("peak MB above start")})
            print(rows[-1], flush=True)
    name = "scaling_quick" if args.quick else "scaling"
    args.out.mkdir(parents=True, exist_ok=True)
    plot(rows, args.out / f"{name}.png")
    notes = (
        f"Fully observed toy learning curves, d = 2. All fits capped at {args.maxiter} L-BFGS-B "
        "iterations (GPAR: per conditional), 1 torch thread, each fit in a fresh process; "
        "memory is the peak RSS above the process's RSS before the fit (so it includes "
        "allocator caching). Other jobs shared the 2 cores, so wall seconds are noisy; CPU "
        f"seconds are given too. ICM runs above {args.icm_max_points} long-format points were "
        f"skipped (see status).\n\n![scaling]({name}.png)"
    )
    write_results(args.out, name, "Fit cost vs number of checkpoints M and runs N", rows,
                  command_line(argv), seeds=[args.seed], notes=notes)
    return rows


if __name__ == "__main__":
    main()
