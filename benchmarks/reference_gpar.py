"""Time the reference ``gpar`` package (wesselb/gpar) on data given in a JSON file.

Runs in the reference package's own virtualenv (never in ours), as a subprocess of
``benchmarks/speed.py``; it must not import anything from this repository. Settings
follow the authors' script for the synthetic problem (``examples/paper/synthetic.py``):
EQ on x (initial length scale 0.1) plus linear and EQ kernels on earlier outputs
(GPAR-L-NL), initial noise 0.1.

Input JSON: ``{"x": [n], "y": [[n x 3]], "x_test": [n_test], "num_samples": S,
"maxiter": null or int}`` (``maxiter`` caps L-BFGS-B's iterations per conditional).
Fits and predicts twice in this process, "cold" (first call) then "warm" (identical
repeat). Prints one JSON line: per phase, fit and predict wall and CPU seconds and the
predictive means.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
import torch
from gpar import GPARRegressor


def fit_predict(spec: dict) -> dict:
    """Fit and predict on the data in ``spec``; the timings and means."""
    x, y, x_test = np.array(spec["x"]), np.array(spec["y"]), np.array(spec["x_test"])
    model = GPARRegressor(
        scale=0.1, linear=True, linear_scale=10.0, nonlinear=True, nonlinear_scale=0.1,
        noise=0.1, impute=True, replace=False, normalise_y=False,
    )
    wall, cpu = time.perf_counter(), time.process_time()
    model.fit(x, y, **({"iters": spec["maxiter"]} if spec["maxiter"] else {}))
    fit_wall, fit_cpu = time.perf_counter() - wall, time.process_time() - cpu
    wall, cpu = time.perf_counter(), time.process_time()
    means = model.predict(x_test, num_samples=spec["num_samples"], latent=True)
    predict_wall, predict_cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {
        "fit_wall": fit_wall, "fit_cpu": fit_cpu,
        "predict_wall": predict_wall, "predict_cpu": predict_cpu,
        "means": np.asarray(means).tolist(),
    }


def main(path: str) -> None:
    """Fit and predict cold, then warm, on the data in ``path``; print the results as JSON."""
    torch.set_num_threads(1)  # as for our model: one thread per process
    spec = json.loads(open(path).read())
    print(json.dumps({phase: fit_predict(spec) for phase in ("cold", "warm")}))


if __name__ == "__main__":
    main(sys.argv[1])
