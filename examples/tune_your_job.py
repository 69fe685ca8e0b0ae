"""Tune your own training function: a job and its search-space file.

``PYTHONPATH=. gpar-bo tune --job tune_your_job:train --space tune_your_job_space.json`` from
this folder runs the same tuning; this script does it from Python on a tiny budget.
"""

from pathlib import Path

import torch

from gpar_bo.tuning.jobs import load_checkpoint, save_checkpoint  # light: no Ax


def train(parameters, report, trial_index, epochs, checkpoint_dir=None, n=256):
    """Fit y = sin(3x) with a small MLP; report the validation loss after each epoch."""
    torch.manual_seed(trial_index)
    x = torch.rand(2 * n, 1, dtype=torch.double) * 2 - 1
    y = torch.sin(3 * x)
    activation = {"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh}[parameters["activation"]]
    model = torch.nn.Sequential(torch.nn.Linear(1, parameters["width"], dtype=torch.double),
                                activation(),
                                torch.nn.Linear(parameters["width"], 1, dtype=torch.double))
    optimiser = torch.optim.Adam(model.parameters(), lr=parameters["lr"])
    state, first = load_checkpoint(checkpoint_dir), 1  # resumable: see "the job protocol"
    if state is not None:
        model.load_state_dict(state["model"])
        optimiser.load_state_dict(state["optimiser"])
        first = state["epoch"] + 1
    for epoch in range(first, epochs + 1):
        for batch in torch.arange(n).split(parameters["batch_size"]):
            loss = ((model(x[batch]) - y[batch]) ** 2).mean()
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
        with torch.no_grad():
            val_loss = ((model(x[n:]) - y[n:]) ** 2).mean().item()
        if checkpoint_dir is not None:
            save_checkpoint(checkpoint_dir, {"epoch": epoch, "model": model.state_dict(),
                                             "optimiser": optimiser.state_dict()})
        if report(epoch, {"val_loss": val_loss}):  # True: stopped or paused, end now
            return


if __name__ == "__main__":  # jobs run in spawned worker processes
    # The tuner's imports (Ax): each worker imports this module for train, not these.
    from gpar_bo.tuning import problem_from_space, tune

    torch.set_num_threads(1)
    space = Path(__file__).with_name("tune_your_job_space.json")
    problem = problem_from_space("tune_your_job:train", space)
    report = tune(problem, "tune-your-job", budget_epochs=9, progress=False, poll_seconds=0.2)
    print(report["best"]["final"], report["best"]["parameters"])
