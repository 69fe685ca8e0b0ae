"""A BoTorch loop with GPAR on synthetic learning curves.

Each iteration fits GPAR to all runs so far, including the ones that stopped
early, maximises qLogNEI for the final checkpoint's error, and "trains" the
chosen configuration. To mimic early stopping, every new run is stopped after
a random number of checkpoints; GPAR still learns from its prefix.

Run: python examples/botorch_loop.py [--iterations 10] [--seed 0]
"""

from __future__ import annotations

import argparse

import torch
from botorch.acquisition import qLogNoisyExpectedImprovement
from botorch.acquisition.objective import GenericMCObjective
from botorch.fit import fit_gpytorch_mll
from botorch.optim import optimize_acqf
from botorch.sampling.normal import SobolQMCNormalSampler

from gpar_bo import GPARMarginalLogLikelihood, GPARModel
from gpar_bo.synthetic import learning_curves

EPOCHS = [1, 5, 11, 16, 21]
BOUNDS = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=torch.double)


def observe(X: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Train runs at X; each stops after 1-5 checkpoints (NaN afterwards)."""
    seed = int(torch.randint(2**31, (1,), generator=generator))
    Y = learning_curves(X, EPOCHS, noise_std=0.005, seed=seed)
    reached = torch.randint(1, len(EPOCHS) + 1, (len(X),), generator=generator)
    Y[torch.arange(len(EPOCHS)) >= reached.unsqueeze(-1)] = float("nan")
    return Y


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(args.seed)

    X = torch.rand(12, 2, generator=generator, dtype=torch.double)
    Y = observe(X, generator)
    Y[:3] = learning_curves(X[:3], EPOCHS)  # a few complete runs to start
    # Minimise the final checkpoint's error.
    objective = GenericMCObjective(lambda samples, X=None: -samples[..., -1])
    for iteration in range(args.iterations):
        model = GPARModel(X, Y, output_names=EPOCHS)
        fit_gpytorch_mll(GPARMarginalLogLikelihood(model.likelihood, model))
        acquisition = qLogNoisyExpectedImprovement(
            model,
            X_baseline=X,
            objective=objective,
            sampler=SobolQMCNormalSampler(torch.Size([64]), seed=iteration),
        )
        candidate, _ = optimize_acqf(
            acquisition, bounds=BOUNDS, q=1, num_restarts=4, raw_samples=128
        )
        X = torch.cat([X, candidate])
        Y = torch.cat([Y, observe(candidate, generator)])
        final = learning_curves(candidate, EPOCHS)[0, -1].item()
        print(
            f"iteration {iteration}: x = {candidate.squeeze().tolist()}, "
            f"true final error {final:.4f}, runs {len(X)} "
            f"(complete: {int((~Y[:, -1].isnan()).sum())})"
        )
    best = learning_curves(X, EPOCHS)[:, -1].min().item()
    print(f"best true final error among chosen configurations: {best:.4f} (optimum 0.05)")


if __name__ == "__main__":
    main()
