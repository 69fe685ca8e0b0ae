"""Laplace draws of conditionals' hyperparameters, and GPAR's mixture over them."""

from __future__ import annotations

from copy import deepcopy

import pytest
import torch
from botorch.fit import fit_gpytorch_mll
from gpytorch.mlls import ExactMarginalLogLikelihood

from gpar_bo.curve_model import curve_model_options
from gpar_bo.freeze_thaw import FreezeThawIndex
from gpar_bo.laplace import LaplaceCoordinates, laplace_draws, set_trainable_raw, trainable_raw
from gpar_bo.model import GPARMarginalLogLikelihood, GPARModel
from gpar_bo.prediction import ConditionalPredictor, _StackedSamples
from gpar_bo.synthetic import learning_curves
from tests.helpers import fit

EPOCHS = [1, 2, 4, 8]


def data(n: int = 40, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Noisy toy curves, half of the runs stopped after two checkpoints."""
    generator = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 2, generator=generator, dtype=torch.double)
    Y = learning_curves(X, EPOCHS, noise_std=0.01, seed=seed).clamp_min(1e-3)
    Y[n // 2 :, 2:] = float("nan")
    return X, Y


def fitted(draws: int, **options) -> GPARModel:
    X, Y = data()
    model = GPARModel(X, Y, **curve_model_options(hyperparameter_draws=draws, **options))
    fit_gpytorch_mll(GPARMarginalLogLikelihood(model.likelihood, model))
    return model


def element_names(gp: torch.nn.Module) -> list[str]:
    """The parameter name of each element of ``trainable_raw(gp)``."""
    return [name for name, p in gp.named_parameters() if p.requires_grad for _ in range(p.numel())]


@pytest.fixture(scope="module")
def model() -> GPARModel:
    return fitted(4)


@pytest.mark.parametrize("scales", ["raw", "log"])
def test_draws_are_valid_centred_and_held_on_bounds(scales: str) -> None:
    gp = fitted(0).conditionals[-1]
    theta = trainable_raw(gp)
    draws = laplace_draws(gp, 400, torch.Generator().manual_seed(0), scales)
    assert draws.shape == (400, len(theta)) and not torch.equal(draws[0], draws[1])
    assert torch.equal(trainable_raw(gp), theta)  # the fit is left as it was
    coords = LaplaceCoordinates(gp, scales)
    assert torch.equal(coords.raw, theta) and bool(coords.logged.any())  # noise, length scales
    torch.testing.assert_close(coords.to_raw(coords.to_phi(draws)), draws)
    # every draw is a valid value (by construction for softplus ones; the box-bounded
    # noise and length scales are raw values that a Gaussian in raw units could break)
    assert (coords.values(draws) > coords.bound).all()
    assert (draws[:, ~coords.drawn] == theta[~coords.drawn]).all()
    free = ~coords.logged  # drawn as they are: centred on the fit
    spread = draws[:, free].std(0)
    assert ((draws[:, free].mean(0) - theta[free]).abs() <= 4 * spread / 20 + 1e-12).all()
    outputscales = [i for i, name in enumerate(element_names(gp)) if "raw_outputscale" in name]
    assert bool(coords.logged[outputscales].all()) == (scales == "log")  # softplus: logged in "log"
    noise = gp.likelihood.noise_covar
    with torch.no_grad():  # a parameter put on its bound is held there
        noise.raw_noise.fill_(float(noise.raw_noise_constraint.lower_bound))
    at = LaplaceCoordinates(gp, scales).raw.tolist().index(float(noise.raw_noise.detach()))
    held = laplace_draws(gp, 5, torch.Generator().manual_seed(0), scales)
    assert (held[:, at] == noise.raw_noise.item()).all()
    with pytest.raises(ValueError, match="scales must be one of"):
        laplace_draws(gp, 5, torch.Generator(), "logit")


def test_a_switched_off_component_is_held_in_log_scales_and_spread_in_raw_ones() -> None:
    """Targets that do not depend on x0: an additive GP's x0 component is switched off
    (its outputscale fitted towards 0, where a fit stops wherever its tolerances are met).
    There the log posterior is a plateau: in raw softplus coordinates the Gaussian spreads
    the outputscale over a hundred raw units, to outputscales far above the targets'
    variance; with ``scales="log"`` the direction stays at the fit and the others are
    still drawn."""
    from botorch.models import SingleTaskGP
    from gpytorch.kernels import AdditiveKernel, RBFKernel, ScaleKernel

    generator = torch.Generator().manual_seed(0)
    X = torch.rand(30, 2, generator=generator, dtype=torch.double)
    Y = torch.sin(6 * X[:, 1:]) + 0.05 * torch.randn(30, 1, generator=generator, dtype=torch.double)
    kernel = AdditiveKernel(*(ScaleKernel(RBFKernel(active_dims=[i])) for i in (0, 1)))
    gp = SingleTaskGP(X, Y, covar_module=kernel)
    with torch.no_grad():
        kernel.kernels[0].raw_outputscale.fill_(-10.0)  # start switched off
    fit_gpytorch_mll(ExactMarginalLogLikelihood(gp.likelihood, gp),
                     optimizer_kwargs={"options": {"ftol": 1e-12, "gtol": 1e-9}})
    with torch.no_grad():
        kernel.kernels[0].raw_outputscale.fill_(-10.0)  # where a looser fit may stop on the plateau
    names = element_names(gp)
    off = names.index("covar_module.kernels.0.raw_outputscale")
    theta = trainable_raw(gp)
    raw = laplace_draws(gp, 64, torch.Generator().manual_seed(0), "raw")
    log = laplace_draws(gp, 64, torch.Generator().manual_seed(0), "log")
    assert float(raw[:, off].max()) > 10.0 and float(raw[:, off].min()) < -50.0
    assert float((log[:, off] - theta[off]).abs().max()) < 1e-2
    others = [names.index(n) for n in ("likelihood.noise_covar.raw_noise",
                                       "covar_module.kernels.1.base_kernel.raw_lengthscale")]
    assert bool((log[:, others].std(0) > 1e-3).all())


def test_the_scales_differ_only_in_softplus_parameters_and_wide_directions() -> None:
    """Without a softplus outputscale (BoTorch's default ``SingleTaskGP``: its noise and
    length scales are box-bounded, its constant mean free) and with every direction
    located (targets that depend on both inputs), "log" draws are "raw" draws, bit for
    bit, from the same normals."""
    from botorch.models import SingleTaskGP

    generator = torch.Generator().manual_seed(0)
    X = torch.rand(30, 2, generator=generator, dtype=torch.double)
    Y = torch.sin(6 * X[:, :1]) + torch.cos(4 * X[:, 1:])
    Y = Y + 0.1 * torch.randn(30, 1, generator=generator, dtype=torch.double)
    gp = SingleTaskGP(X, Y)
    fit_gpytorch_mll(ExactMarginalLogLikelihood(gp.likelihood, gp))
    raw, log = (laplace_draws(gp, 16, torch.Generator().manual_seed(3), s) for s in ("raw", "log"))
    assert bool(LaplaceCoordinates(gp, "log").drawn.all())
    assert torch.equal(raw, log) and not torch.equal(raw[0], raw[1])


@pytest.mark.parametrize("scales, m", [("raw", 1), ("log", 2)])
def test_draws_precision_is_the_curvature_of_the_log_posterior(scales: str, m: int) -> None:
    """In the drawn coordinates, the draws' precision matrix is the Hessian of the
    negative log posterior: checked on its diagonal against second differences of
    the loss itself (the draws use differences of its gradient). With log scales,
    conditional 1 has a direction wider than ``MAX_DRAW_SD``, held; conditional 2 none."""
    gp = fitted(0).conditionals[m]
    coords = LaplaceCoordinates(gp, scales)
    drawn = coords.drawn
    draws = laplace_draws(gp, 20000, torch.Generator().manual_seed(1), scales)
    phi = coords.to_phi(draws)[:, drawn]
    precision = torch.linalg.inv(torch.cov(phi.T))

    def loss(p: torch.Tensor) -> float:
        set_trainable_raw(gp, coords.to_raw(p).detach())
        gp.train()
        with torch.no_grad():
            mll = ExactMarginalLogLikelihood(gp.likelihood, gp)
            return -float(mll(gp(*gp.train_inputs), gp.train_targets)) * len(gp.train_targets)

    h = 1e-3
    for j, i in enumerate(drawn.nonzero().squeeze(-1).tolist()):
        step = torch.zeros_like(coords.phi)
        step[i] = h
        second = (loss(coords.phi + step) - 2 * loss(coords.phi) + loss(coords.phi - step)) / h**2
        assert precision[j, j] == pytest.approx(second, rel=0.05)
    set_trainable_raw(gp, coords.raw)


def test_fit_draws_later_conditionals_reproducibly(model: GPARModel) -> None:
    assert len(model.hyperparameter_draws) == len(EPOCHS) - 1
    for gp, draws in zip(list(model.conditionals)[1:], model.hyperparameter_draws):
        assert draws.drawn and draws.raw.shape == (4, len(trainable_raw(gp)))
    again = fitted(4)
    for a, b in zip(model.hyperparameter_draws, again.hyperparameter_draws):
        assert torch.equal(a.raw, b.raw)
    assert len(fitted(0).hyperparameter_draws) == 0
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match="hyperparameter_draws must be an integer >= 0"):
            GPARModel(*data(), hyperparameter_draws=bad)
    with pytest.raises(ValueError, match="draw_scales must be one of"):
        GPARModel(*data(), hyperparameter_draws=2, draw_scales="logit")
    assert GPARModel(*data()).draw_scales == "raw"  # the default


def test_draw_scales_reach_the_draws() -> None:
    model = fitted(2, draw_scales="log")
    for m, (gp, draws) in enumerate(zip(list(model.conditionals)[1:], model.hyperparameter_draws), 1):
        torch.testing.assert_close(draws.raw, laplace_draws(gp, 2, torch.Generator().manual_seed(m), "log"))
        assert not torch.equal(draws.raw, laplace_draws(gp, 2, torch.Generator().manual_seed(m), "raw"))


def test_posterior_is_the_mixture_over_the_draws() -> None:
    """Sample block k is exactly the sample of the fit with draw k's hyperparameters:
    for joint points, one point per t-batch, and points shared by the t-batches (with
    normals broadcast over them, as BoTorch's samplers pass them) before a candidate."""
    model = fitted(4, denoise=False)  # fed values are then the observations, whatever the draw
    X = torch.rand(3, 2, dtype=torch.double)
    # Latent values reported, noisy ones fed: each output but the last has a noise normal.
    W = model.modelled_posterior(X).base_sample_shape[-1]
    assert W == 2 * len(EPOCHS) - 1
    eps = torch.randn(8, 3, W, dtype=torch.double)
    shared = torch.cat([torch.rand(1, 3, 2, dtype=torch.double).expand(4, 3, 2),
                        torch.rand(4, 1, 2, dtype=torch.double)], dim=1)
    layouts = [
        (X, eps),
        (torch.rand(5, 1, 2, dtype=torch.double), torch.randn(8, 5, 1, W, dtype=torch.double)),
        (shared, torch.randn(8, 1, 4, W, dtype=torch.double).expand(8, 4, 4, W)),
    ]
    references = []
    for k in range(4):
        reference = deepcopy(model)
        reference.num_hyperparameter_draws = 0  # predicts with the conditionals' values
        for gp, draws in zip(list(reference.conditionals)[1:], reference.hyperparameter_draws):
            set_trainable_raw(gp, draws.raw[k])
        references.append(reference)
    for points, normals in layouts:
        mixture = model.modelled_posterior(points).rsample_from_base_samples(torch.Size([8]), normals)
        for k, reference in enumerate(references):
            block = reference.modelled_posterior(points).rsample_from_base_samples(
                torch.Size([2]), normals[2 * k : 2 * k + 2])
            torch.testing.assert_close(mixture[2 * k : 2 * k + 2], block)
    mixture = model.modelled_posterior(X).rsample_from_base_samples(torch.Size([8]), eps)
    # output 1 keeps its fit: its samples do not depend on the block
    point = deepcopy(model)
    point.num_hyperparameter_draws = 0
    torch.testing.assert_close(
        mixture[..., 0], point.modelled_posterior(X).rsample_from_base_samples(torch.Size([8]), eps)[..., 0]
    )


def test_outputs_that_see_x_alone_are_predicted_once_for_every_draw(
    model: GPARModel, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first conditional keeps its fit in every chain and sees the same inputs there:
    its predictions are made once per draw of paths. The drawn conditionals' are made once
    per chain, or, with few points, once for all the chains (stacked)."""
    from gpar_bo.posterior import STACKED_MAX_BATCH

    calls: list = []
    for cls in (ConditionalPredictor, _StackedSamples):
        monkeypatch.setattr(cls, "features", lambda self, Z, f=cls.features: calls.append(self) or f(self, Z))
    K, M = model.num_hyperparameter_draws, len(EPOCHS)
    for X, drawn_calls in ((torch.rand(STACKED_MAX_BATCH + 1, 1, 2, dtype=torch.double), K * (M - 1)),
                           (torch.rand(3, 2, dtype=torch.double), M - 1),
                           (torch.rand(5, 1, 2, dtype=torch.double), M - 1)):
        calls.clear()
        model.modelled_posterior(X).rsample(torch.Size([8]))
        first = model.modelled_posterior(X).chains[0][0]
        assert calls.count(first) == 1
        assert len(calls) == 1 + drawn_calls


@pytest.mark.parametrize("denoise", [True, False])
@pytest.mark.parametrize("observation_noise", [True, False])
def test_stacked_chains_draw_what_the_loop_over_the_chains_draws(
    model: GPARModel, denoise: bool, observation_noise: bool, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The samples, conditional moments and gradients of the stacked chains are the
    loop's, with latent and with noisy values fed forward, each reported as the same
    kind or the other (which draws the noise with its own normals), for: one point
    per t-batch with training points among them (observed prefixes); training runs
    alone (inputs the same for every sample); joint points; a block shared by the
    t-batches before each candidate (qLogNEI's layout, normals broadcast over the
    t-batches); and one t-batch (all its points shared, drawn with gradients)."""
    import gpar_bo.posterior as posterior_module

    model = model if denoise else fitted(4, denoise=False)
    X, _ = data()
    M = len(EPOCHS) + (len(EPOCHS) - 1 if denoise == observation_noise else 0)  # normals per point
    mixed = torch.cat([X[15:25], torch.rand(6, 2, dtype=torch.double)]).unsqueeze(-2)  # 16 x 1 x 2
    joint = torch.cat([X[18:26].view(4, 2, 2), torch.rand(4, 1, 2, dtype=torch.double)], dim=1)
    baseline = torch.cat([X[:4], X[22:24]])  # observed to the end and partly
    shared = torch.cat([baseline.expand(3, 6, 2), torch.rand(3, 1, 2, dtype=torch.double)], dim=1)
    layouts = [  # points, normals, shared points
        (mixed, torch.randn(16, 16, 1, M, dtype=torch.double), 0),
        (X[:8].unsqueeze(-2), torch.randn(16, 8, 1, M, dtype=torch.double), 0),  # observed to the end
        (joint, torch.randn(16, 4, 3, M, dtype=torch.double), 0),
        (shared, torch.randn(16, 1, 7, M, dtype=torch.double).expand(16, 3, 7, M), 6),
        (joint[:1], torch.randn(16, 1, 3, M, dtype=torch.double), 3),
    ]
    for points, normals, k in layouts:
        b, q = points.shape[:2]

        def draw(max_batch: int) -> tuple[list[torch.Tensor], torch.Tensor]:
            monkeypatch.setattr(posterior_module, "STACKED_MAX_BATCH", max_batch)
            inputs = points.clone().requires_grad_(True)
            posterior = model.modelled_posterior(inputs, observation_noise=observation_noise)
            assert posterior._shared_points(normals, 1).sum() == k
            assert posterior._stacks(16, b, q, k) == (max_batch >= 0)
            out = posterior.rsample_with_conditionals(torch.Size([16]), normals)
            out[0][..., -1].sum().backward()
            return [t.detach() for t in out], inputs.grad

        (loop, loop_grad), (stacked, stacked_grad) = draw(-1), draw(10**6)
        for a, c in zip(loop, stacked):
            torch.testing.assert_close(a, c, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(loop_grad, stacked_grad, rtol=1e-10, atol=1e-12)


def test_stacking_counts_the_points_drawn_on_every_call(model: GPARModel) -> None:
    """A block that candidates follow is drawn once per ``optimize_acqf`` call and does not
    count towards the stacking caps; a single t-batch's points are drawn on every call and
    do. Points drawn jointly are also capped by samples times points."""
    from gpar_bo.posterior import STACKED_MAX_BATCH as cap
    from gpar_bo.posterior import STACKED_MAX_JOINT as joint

    posterior = model.modelled_posterior(torch.rand(2, cap + 1, 2, dtype=torch.double))
    assert posterior._stacks(16, 2, cap + 1, cap)  # a cached baseline and one candidate each
    assert posterior._stacks(16, 1, cap, cap) and not posterior._stacks(16, 1, cap + 1, cap + 1)
    assert not posterior._stacks(16, 2, cap + 1, cap + 1)  # all shared: drawn on every call
    many = 4 * joint  # samples
    assert posterior._stacks(many, cap, 1, 0)  # one point per t-batch: no joint draw
    assert posterior._stacks(joint // 8, 1, 8, 0) and not posterior._stacks(joint // 4, 1, 8, 0)
    assert not posterior._stacks(many, 2, 3, 1)  # two joint candidates after a cached baseline
    assert model.num_hyperparameter_draws == 4
    assert not posterior._stacks(10, 2, 2, 1)  # samples that do not split over the draws


def test_draws_are_kept_by_state_and_conditioning(model: GPARModel) -> None:
    X, Y = data(seed=1)
    conditioned = model.condition_on_observations(X[:3], Y[:3])
    for a, b in zip(model.hyperparameter_draws, conditioned.hyperparameter_draws):
        assert torch.equal(a.raw, b.raw)
    fresh = GPARModel(*data(), **curve_model_options(hyperparameter_draws=4))
    assert not any(d.drawn for d in fresh.hyperparameter_draws)  # NaN until fitted
    fresh.load_state_dict(model.state_dict())
    X_new = torch.rand(2, 2, dtype=torch.double)
    torch.testing.assert_close(fresh.posterior(X_new).mean, model.posterior(X_new).mean)


def test_index_noise_follows_each_paths_draw(model: GPARModel) -> None:
    index = FreezeThawIndex(model, torch.tensor(EPOCHS, dtype=torch.double), incumbent=0.1, num_samples=16)
    paths = index.final_paths(torch.rand(3, 2, dtype=torch.double), torch.zeros(3, dtype=torch.long))
    assert paths.noise.shape == (16, 1) and paths.mean.shape == (16, 3)
    blocks = paths.noise.view(4, 4)
    assert (blocks == blocks[:, :1]).all() and len(blocks[:, 0].unique()) == 4
    assert (paths.variance >= paths.noise).all()


def test_shared_points_are_drawn_once_and_stay_exact(
    model: GPARModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """qLogNEI's layout (a baseline shared by all t-batches): the baseline is drawn on
    the first call only, once for all the draws (stacked) or once per draw (the loop,
    for many candidates), every t-batch equals its own joint draw, and the model can
    still be copied (the kept draw is not part of the candidates' autograd graph)."""
    import gpar_bo.posterior as posterior_module
    from gpar_bo.posterior import GPARPosterior

    calls = []
    sample_shared = GPARPosterior._sample_shared
    monkeypatch.setattr(GPARPosterior, "_sample_shared", lambda p, *a: calls.append(1) or sample_shared(p, *a))
    baseline = model.train_X[:6]
    base = torch.randn(8, 1, 7, len(EPOCHS), dtype=torch.double, generator=torch.Generator().manual_seed(5))
    for max_batch, draws in ((3, 1), (2, model.num_hyperparameter_draws)):
        monkeypatch.setattr(posterior_module, "STACKED_MAX_BATCH", max_batch)
        fresh = deepcopy(model)  # a fresh prediction cache
        calls.clear()
        for _ in range(2):
            candidates = torch.rand(3, 1, 2, dtype=torch.double)
            X = torch.cat([baseline.expand(3, 6, 2), candidates], dim=1).requires_grad_(True)
            batched = fresh.posterior(X).rsample_from_base_samples(torch.Size([8]), base).detach()
            assert len(calls) == draws
            for i in range(3):
                joint = fresh.posterior(torch.cat([baseline, candidates[i]])).rsample_from_base_samples(
                    torch.Size([8]), base[:, 0]
                )
                torch.testing.assert_close(batched[:, i], joint, rtol=0, atol=1e-6)
        deepcopy(fresh)  # the kept draw holds no part of the candidates' graph


def test_a_draw_that_cannot_be_factorised_falls_back_to_the_fit(model: GPARModel) -> None:
    model = deepcopy(model)
    at = element_names(model.conditionals[-1]).index("likelihood.noise_covar.raw_noise")
    model.hyperparameter_draws[-1].raw[0, at] = -100.0  # a negative noise: not positive definite
    X = torch.rand(2, 2, dtype=torch.double)
    with pytest.warns(RuntimeWarning, match="not positive definite"):
        prepared = model.modelled_posterior(X).prepared
    assert prepared.chains[0][-1] is prepared.predictors[-1]
    assert prepared.chains[1][-1] is not prepared.predictors[-1]


def test_learned_inducing_points_are_drawn_per_predictor() -> None:
    """A drawn sparse predictor keeps its draw's inducing points, not the fit's."""
    X, Y = data(n=20)
    Y = Y[:, :3]  # two drawn conditionals show it; more only cost time
    model = GPARModel(X, Y, num_inducing=4, learn_inducing_points=True, hyperparameter_draws=2)
    fit(model, maxiter=30)  # draws around fitted, not converged, values show it as well
    prepared = model.modelled_posterior(X[:2]).prepared
    for m in range(1, Y.shape[-1]):
        gp = model.conditionals[m]
        params = [(name, p.numel()) for name, p in gp.named_parameters() if p.requires_grad]
        start = sum(n for _, n in params[: [name for name, _ in params].index("covar_module.inducing_points")])
        fitted = gp.covar_module.inducing_points.detach()
        for k, chain in enumerate(prepared.chains):
            drawn = model.hyperparameter_draws[m - 1].raw[k, start : start + fitted.numel()]
            torch.testing.assert_close(chain[m].anchors, drawn.view_as(fitted))
        assert not torch.equal(prepared.chains[0][m].anchors, fitted)


def test_fewer_samples_than_draws_is_a_warning(model: GPARModel) -> None:
    with pytest.warns(RuntimeWarning, match="only the first 2 draws"):
        model.posterior(torch.rand(1, 2, dtype=torch.double)).rsample(torch.Size([2]))
