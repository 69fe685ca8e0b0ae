"""A resumable training job, and a trial paused after epoch 2 and resumed by CurveRunner."""

import time

import torch

from gpar_bo.tuning.jobs import load_checkpoint, read_job, save_checkpoint  # light: no Ax


def train(parameters, report, trial_index, epochs=5, checkpoint_dir=None):
    """Fit y = 3x by SGD; taking ``checkpoint_dir`` makes the job resumable."""
    torch.manual_seed(trial_index)
    model = torch.nn.Linear(1, 1, dtype=torch.double)
    optimiser = torch.optim.SGD(model.parameters(), lr=parameters["lr"])
    state, first = load_checkpoint(checkpoint_dir), 1  # None on a first start
    if state is not None:  # resumed: go on from the epoch after the saved one
        model.load_state_dict(state["model"])
        optimiser.load_state_dict(state["optimiser"])
        torch.set_rng_state(state["rng"])
        first = state["epoch"] + 1
    for epoch in range(first, epochs + 1):
        x = torch.randn(256, 1, dtype=torch.double)
        loss = ((model(x) - 3 * x) ** 2).mean()
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        save_checkpoint(checkpoint_dir, {  # everything the next epoch needs, BEFORE report
            "epoch": epoch, "model": model.state_dict(),
            "optimiser": optimiser.state_dict(), "rng": torch.get_rng_state()})
        if report(epoch, {"loss": loss.item()}):  # True: stopped or paused, end now
            return


def wait_until(condition):
    while not condition():
        time.sleep(0.05)


if __name__ == "__main__":  # jobs run in spawned worker processes
    # The tuner's imports (Ax): the worker imports this module for train, not these.
    from ax.api.utils.instantiation.from_string import optimization_config_from_string
    from ax.core.arm import Arm
    from ax.core.experiment import Experiment
    from ax.core.parameter import ParameterType, RangeParameter
    from ax.core.search_space import SearchSpace

    from gpar_bo.tuning.runner import CurveMetric, CurveRunner

    runner = CurveRunner("resumable_job:train", "runs", {"epochs": 5}, max_workers=1,
                         final_step=5)
    experiment = Experiment(
        name="resumable", runner=runner, metrics=[CurveMetric("loss")],
        search_space=SearchSpace([RangeParameter("lr", ParameterType.FLOAT, 1e-3, 0.5)]),
        optimization_config=optimization_config_from_string("-loss"))
    trial = experiment.new_trial().add_arm(Arm({"lr": 0.1}))
    trial.run()
    try:
        for epoch in range(1, 5):  # the job waits for a verdict after epochs 1-4
            wait_until(lambda: runner.awaiting([trial]) == {trial.index: epoch})
            if epoch == 2:  # pause: the job saves nothing more and frees its worker
                runner.verdict(trial, "pause")
                wait_until(lambda: runner.paused([trial]))
                runner.resume(trial)  # later, or after a restart: from its checkpoint
            else:
                runner.verdict(trial, "continue")
        wait_until(lambda: read_job(runner.progress_file(trial.index)).status)
    finally:
        runner.shutdown()
    job = read_job(runner.progress_file(trial.index))
    print(job.status["status"], job.runs, [round(v["loss"], 4) for _, v in job.steps])
