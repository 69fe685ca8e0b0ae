"""GPAR learns input-dependent, non-Gaussian noise structure (section 4, figure 4).

Two outputs, ``y1 = f1(x) + e1`` and, in three schemes,

1. ``y2 = f2(x) + sin^2(2 pi x) e1 + cos^2(2 pi x) e2``,
2. ``y2 = f2(x) + sin(pi e1) + e2``,
3. ``y2 = f2(x) + sin(pi x) e1 + e2``,

with ``e1, e2`` i.i.d. Gaussian. GPAR models ``y2`` given ``(x, y1)``, so noise in
``y1`` that reappears in ``y2`` is a *signal* to it. Because the dependence on
``y1`` varies with x, we use the ``NL-X`` kernel (EQ over x plus EQ over (x, y1)).
Each scheme is fitted to 100 evenly spaced observations; at 100 inputs halfway
between them we draw 100 noisy posterior samples of ``(y1, y2)`` and plot their
deviations from the posterior mean, coloured by x (middle row), next to fresh draws
of the true noise ``(n1, n2)`` (top row); the bottom row shows the correlation of
the two deviations at each x. If the colour pattern matches, GPAR has
learned how the noise in ``y1`` carries over to ``y2``. The printed number per
scheme is the mean absolute difference, over x, between the correlation of the
two deviations under GPAR and under the true noise.

``f2`` and the noise variance 0.05 follow the authors' script (wesselb/gpar,
``examples/paper/correlation.py``); the paper's text says variance 0.1.

Run: python examples/noise_structure.py [--n-train 100] [--samples 100] [--seed 0]
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: write PNGs only
import matplotlib.pyplot as plt
import torch
from botorch.fit import fit_gpytorch_mll
from torch import Tensor

from gpar_bo import GPARMarginalLogLikelihood, GPARModel
from gpar_bo.initialization import set_input_lengthscales

NOISE_STD = 0.05**0.5
DEFAULT_OUT = Path(__file__).resolve().parent / "figures" / "noise_structure.png"


def latent_functions(x: Tensor) -> Tensor:
    """``f1`` and ``f2`` of the paper's footnote at ``n x 1`` inputs; ``n x 2``."""
    f1 = -torch.sin(10 * math.pi * (x + 1)) / (2 * x + 1) - x**4
    f2 = (0.572 * torch.cos(5.334 * math.pi * x) + 0.0218 * torch.cos(24.44 * math.pi * x)) * torch.exp(
        2 * x
    ) / 5 + (2 * x).sqrt()
    return torch.cat([f1, f2], -1)


#: Noise of y2 given (x, e1, e2) for each scheme (all ``n x 1``).
SCHEMES: dict[str, Callable[[Tensor, Tensor, Tensor], Tensor]] = {
    "(1) sin²(2πx)e1 + cos²(2πx)e2": lambda x, e1, e2: torch.sin(2 * math.pi * x) ** 2 * e1
    + torch.cos(2 * math.pi * x) ** 2 * e2,
    "(2) sin(πe1) + e2": lambda x, e1, e2: torch.sin(math.pi * e1) + e2,
    "(3) sin(πx)e1 + e2": lambda x, e1, e2: torch.sin(math.pi * x) * e1 + e2,
}


def draw_noise(x: Tensor, scheme: str, generator: torch.Generator) -> Tensor:
    """One draw of the noise ``(n1, n2)`` of a scheme at ``n x 1`` inputs; ``n x 2``."""
    e1, e2 = NOISE_STD * torch.randn(2, *x.shape, generator=generator, dtype=x.dtype)
    return torch.cat([e1, SCHEMES[scheme](x, e1, e2)], -1)


def posterior_residues(X: Tensor, Y: Tensor, X_test: Tensor, num_samples: int) -> Tensor:
    """Fit GPAR-NL-X; noisy posterior samples minus their mean, ``S x n_test x 2``."""
    # x length scales start at 0.1 as in the paper's scripts (see gpar_bo.initialization).
    model = set_input_lengthscales(GPARModel(X, Y, kernel="NL-X"), 0.1)
    fit_gpytorch_mll(GPARMarginalLogLikelihood(model.likelihood, model))
    with torch.no_grad():
        posterior = model.posterior(X_test.unsqueeze(-2), observation_noise=True)
        samples = posterior.rsample(torch.Size([num_samples])).squeeze(-2)
    return samples - samples.mean(0)


def correlation(residues: Tensor) -> Tensor:
    """Correlation of the two outputs' residues at each input, ``S x n x 2 -> n``."""
    centred = residues - residues.mean(0)
    covariance = (centred[..., 0] * centred[..., 1]).mean(0)
    return covariance / (centred.std(0, unbiased=False).prod(-1) + 1e-12)


def plot(x: Tensor, truth: dict[str, Tensor], learned: dict[str, Tensor], out: Path) -> None:
    """Residues coloured by x (true noise, GPAR) and their correlation against x."""
    fig, axes = plt.subplots(3, len(truth), figsize=(5 * len(truth), 13))
    colours = x.squeeze(-1).expand(next(iter(truth.values())).shape[0], -1).reshape(-1)
    for j, scheme in enumerate(truth):
        for i, (label, residues) in enumerate([("true noise", truth[scheme]), ("GPAR", learned[scheme])]):
            ax = axes[i, j]
            ax.scatter(
                residues[..., 0].reshape(-1), residues[..., 1].reshape(-1),
                c=colours, cmap="gist_rainbow", s=3, alpha=0.15,
            )
            ax.set_title(f"{scheme}: {label}", fontsize=10)
            ax.set_xlabel("deviation of $y_1$")
            ax.set_ylabel("deviation of $y_2$")
        axes[1, j].set_xlim(axes[0, j].get_xlim())
        axes[1, j].set_ylim(axes[0, j].get_ylim())
        ax = axes[2, j]
        ax.plot(x.squeeze(-1), correlation(truth[scheme]), "k", label="true noise")
        ax.plot(x.squeeze(-1), correlation(learned[scheme]), "tab:green", label="GPAR")
        ax.set_xlabel("$x$")
        ax.set_ylabel("corr(deviation $y_1$, deviation $y_2$)")
        ax.set_ylim(-0.2, 1.05)
    axes[2, 0].legend()
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> dict[str, float]:
    """Run the three schemes; returns each scheme's correlation error."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-train", type=int, default=100)
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)  # the posterior's sample paths
    generator = torch.Generator().manual_seed(args.seed)
    X = torch.linspace(0, 1, args.n_train, dtype=torch.double).unsqueeze(-1)
    # Halfway between training inputs: a test input equal to a training input
    # would condition on that row's observed y1 (see GPARModel.posterior).
    X_test = X[:-1] + 0.5 * (X[1] - X[0])
    truth, learned, errors = {}, {}, {}
    for scheme in SCHEMES:
        Y = latent_functions(X) + draw_noise(X, scheme, generator)
        learned[scheme] = posterior_residues(X, Y, X_test, args.samples)
        truth[scheme] = torch.stack([draw_noise(X_test, scheme, generator) for _ in range(args.samples)])
        errors[scheme] = (correlation(learned[scheme]) - correlation(truth[scheme])).abs().mean().item()
    plot(X_test, truth, learned, args.out)
    print("mean |corr_GPAR(x) - corr_true(x)| of the y1, y2 deviations:")
    for scheme, error in errors.items():
        print(f"  {scheme}: {error:.3f}")
    print(f"figure: {args.out}")
    return errors


if __name__ == "__main__":
    main()
