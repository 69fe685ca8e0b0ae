"""Ax Orchestrator loop: real runs in local processes, GPAR generation and early stopping."""

import torch
from ax.api.utils.instantiation.from_string import optimization_config_from_string
from ax.core.experiment import Experiment
from ax.core.parameter import ParameterType, RangeParameter
from ax.core.search_space import SearchSpace
from ax.orchestration.orchestrator import OrchestratorOptions

from gpar_bo.ax import GPAREarlyStoppingStrategy, gpar_generation_strategy
from gpar_bo.tuning.orchestrator import VerdictOrchestrator
from gpar_bo.tuning.runner import CurveMetric, CurveRunner

EPOCHS = list(range(1, 5))
EFFORT = {"fit_kwargs": {"optimizer_kwargs": {"options": {"maxiter": 75}}},
          "acqf_optimizer_kwargs": {"num_restarts": 2, "raw_samples": 128}}

if __name__ == "__main__":  # trials run in spawned worker processes
    torch.set_num_threads(1)
    experiment = Experiment(
        name="toy_curves",
        search_space=SearchSpace(
            [RangeParameter(name, ParameterType.FLOAT, 0.0, 1.0) for name in ("x1", "x2")]),
        optimization_config=optimization_config_from_string("-error"),
        metrics=[CurveMetric("error")],  # every epoch so far, while the trial runs
        runner=CurveRunner(  # 2 local processes; use_dask=True for dask.distributed
            "gpar_bo.problems.toy:train_toy_curves", "toy_runs",
            {"epochs": len(EPOCHS), "seconds_per_epoch": 0.05}, max_workers=2),
    )
    orchestrator = VerdictOrchestrator(  # Ax's Orchestrator + verdicts for the jobs
        experiment=experiment,
        generation_strategy=gpar_generation_strategy(EPOCHS, num_sobol_trials=4, **EFFORT),
        options=OrchestratorOptions(
            max_pending_trials=2,
            early_stopping_strategy=GPAREarlyStoppingStrategy(
                EPOCHS, min_progression=2, refit_growth=0.5, fit_kwargs=EFFORT["fit_kwargs"]),
            init_seconds_between_polls=0.25, min_seconds_before_poll=0.25,  # each epoch
            seconds_between_polls_backoff_factor=1.0),  # waits about one poll
    )
    try:
        orchestrator.run_n_trials(max_trials=5)
    finally:
        experiment.runner.shutdown()
    for index, trial in experiment.trials.items():
        print(index, trial.status.name, trial.generator_runs[0]._generation_node_name)
