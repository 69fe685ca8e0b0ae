"""Learning curves in GPAR's layout: a runs x checkpoints table.

``curve_table`` pivots reports (run, checkpoint, value) into that table; the
generation node uses it on Ax's training rows, ``experiment_curves`` on an
experiment's data. Early stopping and the tuning report need the curves of named
trials, with the experiment's own step values (epochs), rather than Ax's
model-space rows: ``experiment_curves`` reads them from ``experiment.lookup_data()``
(once per poll; pass the result on rather than rebuilding it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from ax.core.data import MAP_KEY, Data
from ax.core.experiment import Experiment
from ax.core.search_space import SearchSpace
from ax.core.trial_status import TrialStatus
from torch import Tensor

from gpar_bo.ax.checkpoints import Checkpoints
from gpar_bo.ax.encoding import UnitCubeEncoding

__all__ = [
    "ExperimentCurves",
    "curve_table",
    "curves_with_gaps",
    "experiment_curves",
    "objective_metric",
    "observed_checkpoints",
    "unit_cube",
]


@dataclass
class ExperimentCurves:
    """Learning curves of the trials that reported the metric.

    Attributes:
        metric_name: The metric the curves are of.
        trial_indices: The n trials, in increasing index order.
        statuses: Their statuses.
        X: An ``n x d`` tensor of their parameters, mapped to the unit cube by Ax's
            transforms (:class:`~gpar_bo.ax.encoding.UnitCubeEncoding`).
        Y: An ``n x M`` tensor of the metric at each checkpoint, NaN where not
            reported; every row is a prefix.
        parameter_names: The d encoded coordinates' names, in column order.
        checkpoints: The M checkpoints.
    """

    metric_name: str
    trial_indices: list[int]
    statuses: list[TrialStatus]
    X: Tensor
    Y: Tensor
    parameter_names: list[str]
    checkpoints: Checkpoints

    @property
    def lengths(self) -> Tensor:
        """How many checkpoints each trial has reported (an ``n`` long tensor)."""
        return (~torch.isnan(self.Y)).sum(-1)

    def select(self, mask: Tensor) -> ExperimentCurves:
        """The curves of the trials where the ``n`` bool ``mask`` is True."""
        keep = mask.nonzero().squeeze(-1).tolist()
        return ExperimentCurves(
            self.metric_name, [self.trial_indices[i] for i in keep],
            [self.statuses[i] for i in keep],
            self.X[mask], self.Y[mask], self.parameter_names, self.checkpoints,
        )


def curve_table(run: Tensor, index: Tensor, values: Tensor, num_runs: int, M: int) -> Tensor:
    """The ``num_runs x M`` table of reports, NaN where a run did not report.

    Args:
        run: An ``r`` long tensor: the run of each report.
        index: An ``r`` long tensor: the checkpoint index of each report.
        values: An ``r`` tensor: the reported values.
        num_runs: The number of runs.
        M: The number of checkpoints.

    Several reports of one checkpoint by one run (e.g. one configuration run in
    several trials) are averaged.
    """
    sums = values.new_zeros(num_runs, M)
    counts = torch.zeros_like(sums)
    sums.index_put_((run, index), values, accumulate=True)
    counts.index_put_((run, index), torch.ones_like(values), accumulate=True)
    return torch.where(counts > 0, sums / counts.clamp_min(1), float("nan"))


def curves_with_gaps(Y: Tensor) -> list[int]:
    """Rows of the ``n x M`` ``Y`` that report a checkpoint after skipping one."""
    observed = ~torch.isnan(Y)
    return (observed & ((~observed).cumsum(-1) > 0)).any(-1).nonzero().flatten().tolist()


def observed_checkpoints(y: Tensor, checkpoints: Sequence[float]) -> list[float]:
    """The checkpoints at which the ``M`` curve ``y`` has values."""
    return [c for c, value in zip(checkpoints, y.tolist()) if not math.isnan(value)]


def objective_metric(experiment: Experiment, metric_name: str | None = None) -> tuple[str, bool]:
    """The single objective metric's name and whether it is minimised.

    Raises:
        ValueError: No single objective, or it is not ``metric_name``.
    """
    config = experiment.optimization_config
    if config is None or config.is_moo_problem:
        raise ValueError("GPAR needs an experiment with a single objective.")
    objective = config.objective
    name = objective.metric_names[0]
    if metric_name is not None and metric_name != name:
        raise ValueError(
            f"GPAR was configured for metric {metric_name!r} but the experiment's "
            f"objective is {name!r}."
        )
    return name, objective.minimize


def _encoding(experiment: Experiment) -> UnitCubeEncoding:
    # Encoding needs no box to decode into: parameter constraints do not matter here.
    return UnitCubeEncoding(SearchSpace(parameters=list(
        experiment.search_space.parameters.values())))


def unit_cube(experiment: Experiment, parameters: dict) -> list[float]:
    """A parameterisation mapped to [0, 1]^d by Ax's own transforms
    (:class:`~gpar_bo.ax.encoding.UnitCubeEncoding`: log scales, integers, choices
    one-hot; fixed parameters dropped)."""
    return _encoding(experiment).encode(parameters).tolist()


def experiment_curves(
    experiment: Experiment,
    metric_name: str,
    checkpoints: Checkpoints,
    data: Data | None = None,
) -> ExperimentCurves:
    """The curves of every trial with data for ``metric_name``.

    Args:
        experiment: The Ax experiment.
        metric_name: The learning-curve metric.
        checkpoints: The steps at which the metric is reported.
        data: ``experiment.lookup_data()``, if already looked up.

    Raises:
        ValueError: The metric's data has no progression (``step``) values, a
            reported step is not one of ``checkpoints``, or a trial reported a
            checkpoint after skipping an earlier one.
    """
    data = experiment.lookup_data() if data is None else data
    df = data.full_df
    df = df[df["metric_name"] == metric_name].dropna(subset=["mean"])
    encoding = _encoding(experiment)
    names = encoding.names
    if df.empty:
        empty = torch.zeros(0, len(names), dtype=torch.double)
        return ExperimentCurves(metric_name, [], [], empty,
                                empty.new_zeros(0, len(checkpoints)), names, checkpoints)
    if not data.has_step_column or df[MAP_KEY].isna().all():
        raise ValueError(
            f"Metric {metric_name!r} has no progression data: GPAR needs learning curves "
            f"(data with a {MAP_KEY!r} value, e.g. `attach_data(..., progression=epoch)`)."
        )
    df = df.dropna(subset=[MAP_KEY])
    steps = torch.tensor(df[MAP_KEY].to_numpy(dtype=float), dtype=torch.double)
    index, ok = checkpoints.match(steps)
    row_trials = df["trial_index"].to_numpy(dtype=int)
    if not ok.all():
        bad = ~ok.numpy()
        raise ValueError(
            f"Trials {sorted(set(row_trials[bad].tolist()))[:10]} reported {metric_name!r} at "
            f"steps {sorted(set(steps[~ok].tolist()))[:10]}, which are not checkpoints "
            f"{checkpoints.tolist()}. Declare every step at which the metric reports."
        )
    trials = sorted(set(row_trials.tolist()))
    run = torch.as_tensor(np.searchsorted(trials, row_trials))
    values = torch.tensor(df["mean"].to_numpy(dtype=float), dtype=torch.double)
    Y = curve_table(run, index, values, len(trials), len(checkpoints))
    gaps = curves_with_gaps(Y)
    if gaps:
        example = trials[gaps[0]]
        raise ValueError(
            f"Trials {[trials[i] for i in gaps][:10]} reported {metric_name!r} after skipping "
            f"a checkpoint (trial {example} at {observed_checkpoints(Y[gaps[0]], checkpoints)} "
            f"of {checkpoints.tolist()}). GPAR needs every checkpoint up to a trial's last; "
            "report the metric at each one."
        )
    X = torch.stack([encoding.encode(experiment.trials[t].arm.parameters) for t in trials])
    statuses = [experiment.trials[t].status for t in trials]
    return ExperimentCurves(metric_name, trials, statuses, X, Y, names, checkpoints)
