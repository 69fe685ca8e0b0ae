"""Ax Client loop with GPAR generation and GPAR early stopping on toy curves."""

import torch
from ax.api.configs import RangeParameterConfig

from gpar_bo.ax import GPARClient, GPAREarlyStoppingStrategy, gpar_generation_strategy
from gpar_bo.synthetic import learning_curves  # toy validation-error curves

EPOCHS = [1, 2, 4, 8, 16]  # the progressions at which the metric is reported
# Optional: smaller fitting/acquisition budgets than BoTorch's defaults (several times faster).
EFFORT = {"fit_kwargs": {"optimizer_kwargs": {"options": {"maxiter": 75}}},
          "acqf_optimizer_kwargs": {"num_restarts": 2, "raw_samples": 128}}
torch.set_num_threads(1)

client = GPARClient(random_seed=0)  # Ax's Client; also saves its early-stopping strategy
client.configure_experiment(parameters=[
    RangeParameterConfig(name="x1", bounds=(0.0, 1.0), parameter_type="float"),
    RangeParameterConfig(name="x2", bounds=(0.0, 1.0), parameter_type="float"),
])
client.configure_optimization(objective="-error")
# The GPAR lines: Sobol, then GPAR on every reported epoch; GPAR early stopping.
client.set_generation_strategy(
    gpar_generation_strategy(EPOCHS, metric_name="error", num_sobol_trials=4, **EFFORT))
client.set_early_stopping_strategy(
    GPAREarlyStoppingStrategy(EPOCHS, metric_name="error", min_progression=4,
                              refit_growth=0.5,  # refit once finished curves grow by half
                              fit_kwargs=EFFORT["fit_kwargs"]))

for _ in range(3):
    for index, parameters in client.get_next_trials(max_trials=2).items():
        X = torch.tensor([[parameters["x1"], parameters["x2"]]], dtype=torch.double)
        curve = learning_curves(X, EPOCHS, noise_std=0.005, seed=index)[0].tolist()
        for epoch, error in zip(EPOCHS, curve):  # "train", reporting every checkpoint
            client.attach_data(index, {"error": error}, progression=epoch)
            if epoch < EPOCHS[-1] and client.should_stop_trial_early(index):
                client.mark_trial_early_stopped(index)
                break
        else:
            client.complete_trial(index)

best_parameters, prediction, best_index, _ = client.get_best_parameterization()
print("best trial", best_index, best_parameters, prediction)
client.save_to_json_file("gpar_client.json")  # reload: GPARClient.load_from_json_file(...)
