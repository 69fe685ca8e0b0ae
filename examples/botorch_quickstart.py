"""GPAR as a BoTorch model: fit on partial learning curves, sample the final checkpoint."""

import torch
from botorch.fit import fit_gpytorch_mll
from gpar_bo import GPARMarginalLogLikelihood, GPARModel
from gpar_bo.synthetic import learning_curves

epochs = [1, 5, 11, 16, 21]
train_X = torch.rand(40, 2, dtype=torch.double)                 # n x d hyperparameters
train_Y = learning_curves(train_X, epochs, noise_std=0.005)      # n x M validation errors
for m, reached in enumerate([40, 30, 22, 16, 10]):               # most runs stopped early
    train_Y[reached:, m] = float("nan")

model = GPARModel(train_X, train_Y, output_names=epochs)        # GPAR-L-NL by default
fit_gpytorch_mll(GPARMarginalLogLikelihood(model.likelihood, model))

X = torch.rand(8, 1, 2, dtype=torch.double)                      # batch x q x d
posterior = model.posterior(X)
final = posterior.rsample(torch.Size([128]))[..., model.output_index(21)]  # 128 x 8 x 1
print(final.mean(0).squeeze(), posterior.mean[..., -1].squeeze())
