"""The section 4 demonstrations run end to end with tiny settings."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import torch

from gpar_bo import GPARModel
from gpar_bo.initialization import set_input_lengthscales

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_set_input_lengthscales_only_touches_x_kernels() -> None:
    X = torch.rand(8, 2, dtype=torch.double)
    model = set_input_lengthscales(GPARModel(X, torch.rand(8, 3, dtype=torch.double)), 0.1)
    first = model.conditionals[0].covar_module
    assert torch.allclose(first.lengthscale, torch.full_like(first.lengthscale, 0.1))
    x_kernel, *output_kernels = model.conditionals[2].covar_module.kernels
    assert torch.allclose(x_kernel.base_kernel.lengthscale, torch.tensor(0.1).to(X))
    # The EQ kernel over earlier outputs keeps BoTorch's starting value.
    assert not torch.allclose(output_kernels[-1].base_kernel.lengthscale, torch.tensor(0.1).to(X))


def test_synthetic_dependencies_runs(tmp_path: Path) -> None:
    module = load_example("synthetic_dependencies")
    out = tmp_path / "synthetic.png"
    scores = module.main(["--n-train", "12", "--n-test", "20", "--samples", "8", "--out", str(out)])
    assert out.stat().st_size > 0
    assert set(scores) == {"GPAR", "IGP"}
    assert all(len(v) == 3 and all(math.isfinite(s) for s in v) for v in scores.values())


def test_noise_structure_runs(tmp_path: Path) -> None:
    module = load_example("noise_structure")
    out = tmp_path / "noise.png"
    errors = module.main(["--n-train", "15", "--samples", "8", "--out", str(out)])
    assert out.stat().st_size > 0
    assert len(errors) == 3
    assert all(0 <= e <= 2 for e in errors.values())


def test_noise_schemes_share_e1() -> None:
    module = load_example("noise_structure")
    x = torch.linspace(0, 1, 50, dtype=torch.double).unsqueeze(-1)
    for scheme in module.SCHEMES:
        noise = module.draw_noise(x, scheme, torch.Generator().manual_seed(0))
        assert noise.shape == (50, 2) and torch.isfinite(noise).all()
    assert module.correlation(torch.randn(500, 4, 2, dtype=torch.double)).shape == (4,)
