"""The curve model predicts over Laplace draws of its later conditionals' hyperparameters."""

import torch
from botorch.fit import fit_gpytorch_mll
from gpar_bo import GPARMarginalLogLikelihood, GPARModel, curve_model_options
from gpar_bo.synthetic import learning_curves

train_X = torch.rand(30, 2, dtype=torch.double)
train_Y = learning_curves(train_X, [1, 2, 4, 8], noise_std=0.01).clamp_min(1e-3)
train_Y[15:, 2:] = float("nan")                       # half of the runs stopped early
model = GPARModel(train_X, train_Y, **curve_model_options())  # hyperparameter_draws=8
fit_gpytorch_mll(GPARMarginalLogLikelihood(model.likelihood, model))
print(model.hyperparameter_draws[0].raw.shape)        # output 2's draws: 8 x parameters
samples = model.posterior(train_X[15:17]).rsample(torch.Size([64]))  # 8 paths per draw
print(samples.shape)                                  # 64 x 2 x 4
