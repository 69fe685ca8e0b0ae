"""How good are the policy's hyperparameters when it decides? Reloaded, warm-started, cold.

```bash
python -m benchmarks.fit_staleness --table dev_classification --seed 0
python -m benchmarks.fit_staleness --table dev_classification --seed 0 --measured
python -m benchmarks.fit_staleness --table dev_classification --seed 0 --measured --start-from-initial
```

Runs the shipped freeze-thaw policy (``benchmarks.bo.freeze_thaw.GPARFreezeThaw``; with
``--measured``, its curve model told the table's measurement noise) in the tabular harness
until ``--finished`` runs have reached the final checkpoint, and at that decision compares,
per conditional, the log evidence of the data the policy decides on (``GPARModel.
conditional_log_evidences``) and the observation noise (in log-error-increment units) under
three sets of hyperparameters: those the policy decides with (its last fit, reloaded
between refits), a refit warm-started from them (what the policy's next refit does), and a
fit from the model's initial values (cold). With ``--start-from-initial`` the policy's fits
(and so the warm-started refit) also start from the initial values and keep the better fit
(``FreezeThawPolicy(fit_kwargs={"start_from_initial": True})``, a candidate). Prints one
JSON object.
"""

from __future__ import annotations

import argparse
import json

import torch

from benchmarks.bo.freeze_thaw import GPARFreezeThaw
from benchmarks.bo.harness import simulate
from benchmarks.freeze_thaw_study import WORKERS, budget_of, canonical_table, make_problem
from gpar_bo.curve_model import curve_model_options
from gpar_bo.model import GPARModel
from gpar_bo.prediction import output_scaling

__all__ = ["fit_staleness"]


class _Reached(BaseException):
    """Raised out of the simulation once the comparison is made (not an ``Exception``: the
    policy falls back on any ``Exception`` of its model)."""


def _summary(model: GPARModel) -> dict[str, list[float]]:
    noises = []
    for gp in model.conditionals:
        _, std = output_scaling(gp)
        noises.append(float(gp.likelihood.noise.detach().max() * std**2))
    return {"log_evidence": [round(float(v), 3) for v in model.conditional_log_evidences()],
            "noise": [float(f"{v:.4g}") for v in noises]}


def fit_staleness(
    table: str, seed: int = 0, finished: int = 15, measured: bool = False,
    start_from_initial: bool = False,
) -> dict:
    """The comparison at the first decision with at least ``finished`` complete runs.

    Raises:
        ValueError: ``finished`` < 2, or the budget ends before that many runs finish.
    """
    if finished < 2:
        raise ValueError(f"finished must be >= 2 (the policy fits GPAR from two); got {finished}.")
    problem = make_problem(table)
    options = {}
    if measured:
        if problem.measurement_noise is None:
            raise ValueError(f"table {table!r} records no measurement noise; --measured needs it.")
        options["gpar_options"] = curve_model_options(measurement_noise=problem.measurement_noise)
    if start_from_initial:
        options["fit_kwargs"] = {"start_from_initial": True}
    method = GPARFreezeThaw(**options)
    result: dict = {}
    reset = method.reset

    def hooked_reset(problem, seed):
        reset(problem, seed)
        policy = method.policy
        decide_model = policy._model

        def model(X, Y, keep=True):
            decided, note = decide_model(X, Y, keep)
            complete = int((~Y.isnan()).all(-1).sum())
            if keep and complete >= finished and policy._fitted is not None:
                warm = policy._new_model(X, Y)
                warm.load_state_dict(policy._fitted[1], strict=False)
                policy._fit(warm)
                cold = policy._new_model(X, Y)
                policy._fit(cold)
                result.update(decision=policy.decisions, finished=complete, runs=len(Y),
                              decided=_summary(decided), warm_refit=_summary(warm.eval()),
                              cold_fit=_summary(cold.eval()))
                raise _Reached
            return decided, note

        policy._model = model

    method.reset = hooked_reset
    try:
        simulate(method, problem, seed, budget_of(canonical_table(table), problem), workers=WORKERS)
    except _Reached:
        pass
    if not result:
        raise ValueError(f"fewer than {finished} runs finished within the budget on {table!r}.")
    return {"table": canonical_table(table), "seed": seed, "measured": measured,
            "start_from_initial": start_from_initial, **result}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", default="dev_classification")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--finished", type=int, default=15)
    parser.add_argument("--measured", action="store_true")
    parser.add_argument("--start-from-initial", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(json.dumps(fit_staleness(args.table, args.seed, args.finished, args.measured,
                                   args.start_from_initial)))


if __name__ == "__main__":
    main()
