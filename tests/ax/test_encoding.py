"""The unit-cube encoding of a search space through Ax's transforms."""

from __future__ import annotations

import math

import pytest
import torch
from ax.core.parameter import ChoiceParameter, ParameterType, RangeParameter
from ax.core.parameter_constraint import ParameterConstraint
from ax.core.search_space import SearchSpace

from gpar_bo.ax.encoding import UnitCubeEncoding


def _space(**kwargs) -> SearchSpace:
    return SearchSpace([
        RangeParameter("lr", ParameterType.FLOAT, 1e-4, 1e-1, log_scale=True),
        RangeParameter("layers", ParameterType.INT, 1, 4),
        ChoiceParameter("act", ParameterType.STRING, ["relu", "tanh", "gelu"],
                        is_ordered=False, sort_values=False),
    ], **kwargs)


def test_settings_round_trip_and_log_scales_are_linear_in_the_cube() -> None:
    encoding = UnitCubeEncoding(_space())
    assert encoding.dim == 5 and torch.equal(encoding.bounds(), torch.tensor([[0.0] * 5, [1.0] * 5],
                                                                            dtype=torch.double))
    setting = {"lr": 1e-3, "layers": 3, "act": "tanh"}
    x = encoding.encode(setting)
    assert x[encoding.names.index("lr")] == pytest.approx(1 / 3)  # log10: -4, -3, -1
    decoded = encoding.decode(x)
    assert decoded["layers"] == 3 and decoded["act"] == "tanh"
    assert math.isclose(decoded["lr"], 1e-3, rel_tol=1e-9)


def test_points_of_the_cube_decode_to_valid_settings() -> None:
    encoding = UnitCubeEncoding(_space())
    for x in torch.rand(20, encoding.dim, generator=torch.Generator().manual_seed(0),
                        dtype=torch.double):
        setting = encoding.decode(x)
        assert 1e-4 <= setting["lr"] <= 1e-1 and setting["layers"] in {1, 2, 3, 4}
        assert setting["act"] in {"relu", "tanh", "gelu"}
        assert torch.allclose(encoding.encode(encoding.decode(encoding.encode(setting))),
                              encoding.encode(setting))


def test_constraints_and_bad_points_are_errors() -> None:
    space = SearchSpace([RangeParameter(n, ParameterType.FLOAT, 0.0, 1.0) for n in "ab"])
    space.add_parameter_constraints([ParameterConstraint(inequality="a + b <= 1")])
    with pytest.raises(ValueError, match="parameter constraints"):
        UnitCubeEncoding(space)
    with pytest.raises(ValueError, match="Expected a point of 5 coordinates"):
        UnitCubeEncoding(_space()).decode(torch.zeros(3, dtype=torch.double))
