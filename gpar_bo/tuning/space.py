"""Search-space files: ``gpar-bo tune --job module:train --space space.json``.

A space file is one JSON object::

    {"name": "my_mlp",                      # optional (default: the job's function name)
     "metric": "val_error",                 # reported every epoch, minimised
     "epochs": 10,                          # a full run
     "checkpoints": [1, 2, 4, 7, 10],       # optional (default every epoch): see below
     "budget": 120,                         # optional total epochs (--budget overrides)
     "parameters": [
        {"name": "lr", "type": "range", "bounds": [1e-4, 0.1], "log_scale": true},
        {"name": "layers", "type": "range", "bounds": [1, 4], "value_type": "int"},
        {"name": "act", "type": "choice", "values": ["relu", "tanh", "gelu"]},
        {"name": "batch", "type": "fixed", "value": 64}],
     "train_kwargs": {"data": "/data/x"},   # optional: more keywords for the job
     "tracking_metrics": ["val_loss"]}      # optional: also recorded, not optimised

Each parameter is Ax's own JSON representation of a parameter (the one
``AxClient.create_experiment`` takes), read by Ax's parser into Ax's
``RangeParameter``, ``ChoiceParameter`` or ``FixedParameter``; Ax checks the
bounds, values and types. This module adds what Ax does not: unknown top-level
keys, duplicate names, and a job that cannot take the file's keywords are errors too.
Every error is one line naming the file and the problem, before any trial starts.

``checkpoints`` are the epochs at which the metric is recorded, GPAR models it and runs
may be paused or stopped (increasing, ending at ``epochs``); the job may report every
epoch, and its reports at other epochs are not recorded. Fewer checkpoints make GPAR's
fits cheaper on long runs.

The job is called as ``train(parameters, report, trial_index, epochs=<epochs>,
**train_kwargs)`` (plus ``checkpoint_dir``, see :mod:`gpar_bo.tuning.jobs`): the
run's length comes from the file, so the job must take an ``epochs`` keyword.
"""

from __future__ import annotations

import inspect
import json
import math
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ax.core.parameter import FixedParameter, Parameter
from ax.exceptions.core import AxParameterWarning, UserInputError
from ax.service.utils.instantiation import InstantiationBase

from gpar_bo.tuning.checks import checkpoint_problems
from gpar_bo.tuning.errors import TuneSettingsError
from gpar_bo.tuning.jobs import resolve
from gpar_bo.tuning.problem import TuningProblem

__all__ = ["PARAMETER_TYPES", "SPACE_KEYS", "load_job", "problem_from_space"]

#: Top-level keys of a space file, and whether each is required.
SPACE_KEYS = {"name": False, "metric": True, "epochs": True, "checkpoints": False,
              "budget": False, "parameters": True, "train_kwargs": False,
              "tracking_metrics": False}
#: The parameter types both schedulers take (Ax's ``derived`` parameters are not tuned).
PARAMETER_TYPES = ("range", "choice", "fixed")


def load_job(job: str) -> Any:
    """Import the training function ``"package.module:function"`` in this process.

    Raises:
        TuneSettingsError: One line: the name is malformed, the module cannot be
            imported (with the import's own error), or it has no such callable.
    """
    module, _, name = job.partition(":")
    if not module or not name:
        raise TuneSettingsError(f"--job must be 'package.module:function', got {job!r}.")
    try:
        function = resolve(job)
    except AttributeError:
        raise TuneSettingsError(f"Job {job}: module {module!r} has no {name!r}.") from None
    except Exception as error:  # the user's module: any import-time error is theirs
        raise TuneSettingsError(
            f"Job {job}: cannot import {module!r}: {type(error).__name__}: {error} (a module "
            "in the working directory needs PYTHONPATH=.)") from None
    if not callable(function):
        raise TuneSettingsError(f"Job {job}: {name!r} is not callable "
                                f"(a {type(function).__name__}).")
    return function


def problem_from_space(job: str, space: str | Path | Mapping[str, Any]) -> TuningProblem:
    """The tuning problem of a training function and a search space.

    Args:
        job: The training function, ``"package.module:function"``, importable here
            and in the workers (:mod:`gpar_bo.tuning.jobs`).
        space: A space file's path, or its content as a mapping (module docstring).

    Returns:
        The problem, for :func:`gpar_bo.tuning.tune`; its ``budget`` is the file's
        (None if it has none).

    Raises:
        TuneSettingsError: One line naming the file (or "the space") and what is
            wrong with it, or with the job.
    """
    source = "the space" if isinstance(space, Mapping) else str(space)

    def bad(problem: str) -> TuneSettingsError:
        return TuneSettingsError(f"{source}: {problem}")

    spec = _read(space, bad)
    function = load_job(job)
    unknown = sorted(set(spec) - set(SPACE_KEYS))
    if unknown:
        raise bad(f"unknown keys {unknown} (a space file has {sorted(SPACE_KEYS)}).")
    missing = [key for key, required in SPACE_KEYS.items() if required and key not in spec]
    if missing:
        raise bad(f"missing key {missing[0]!r}.")
    name = spec.get("name", job.partition(":")[2])
    if not isinstance(name, str) or not name:
        raise bad(f"'name' must be a non-empty string (got {name!r}).")
    if not isinstance(spec["metric"], str) or not spec["metric"]:
        raise bad(f"'metric' must be a non-empty string (got {spec['metric']!r}).")
    epochs = _positive_int(spec, "epochs", bad)
    checkpoints = spec.get("checkpoints")
    if checkpoints is not None and checkpoint_problems(checkpoints, epochs):
        raise bad(checkpoint_problems(checkpoints, epochs)[0].replace(
            "checkpoint_epochs", "'checkpoints'") + ".")
    budget = _positive_int(spec, "budget", bad) if "budget" in spec else None
    train_kwargs = spec.get("train_kwargs", {})
    if not isinstance(train_kwargs, dict):
        raise bad(f"'train_kwargs' must be an object (got {train_kwargs!r}).")
    if "epochs" in train_kwargs:
        raise bad("'epochs' belongs at the top level (the job is given it), not in "
                  "'train_kwargs'.")
    tracking = spec.get("tracking_metrics", [])
    if not isinstance(tracking, list) or not all(isinstance(m, str) for m in tracking):
        raise bad(f"'tracking_metrics' must be a list of names (got {tracking!r}).")
    parameters = _parameters(spec["parameters"], bad)
    _check_signature(function, job, {"epochs": epochs, **train_kwargs}, bad)
    return TuningProblem(
        name=name, parameters=parameters, metric=spec["metric"], epochs=epochs, train=job,
        train_kwargs={"epochs": epochs, **train_kwargs}, tracking_metrics=list(tracking),
        budget=budget, checkpoint_epochs=checkpoints,
    )


def _read(space: str | Path | Mapping[str, Any], bad: Any) -> dict[str, Any]:
    if isinstance(space, Mapping):
        return dict(space)
    try:
        spec = json.loads(Path(space).read_text())
    except OSError as error:
        raise bad(f"cannot read it: {error.strerror or error}.") from None
    except json.JSONDecodeError as error:
        raise bad(f"not valid JSON: {error}.") from None
    if not isinstance(spec, dict):
        raise bad(f"expected a JSON object, got a {type(spec).__name__}.")
    return spec


def _positive_int(spec: Mapping[str, Any], key: str, bad: Any) -> int:
    value = spec[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise bad(f"{key!r} must be an integer >= 1 (got {value!r}).")
    return value


def _parameters(specs: Any, bad: Any) -> list[Parameter]:
    """Ax's parameters of the file's list, each error naming the parameter."""
    if not isinstance(specs, list) or not specs:
        raise bad("'parameters' must be a non-empty list of parameters.")
    parameters: list[Parameter] = []
    for i, spec in enumerate(specs):
        where = f"parameters[{i}]" + (f" ({spec['name']!r})" if isinstance(spec, dict)
                                      and "name" in spec else "")
        if not isinstance(spec, dict):
            raise bad(f"{where}: expected an object, got {spec!r}.")
        if spec.get("type") not in PARAMETER_TYPES:
            raise bad(f"{where}: 'type' must be one of {', '.join(PARAMETER_TYPES)} "
                      f"(got {spec.get('type')!r}).")
        try:
            with warnings.catch_warnings():
                # Ax warns about the defaults it picks (e.g. is_ordered); the docs say them.
                warnings.simplefilter("ignore", AxParameterWarning)
                parameter = InstantiationBase.parameter_from_json(dict(spec))
        except KeyError as error:
            raise bad(f"{where}: missing key {error.args[0]!r}.") from None
        except (AssertionError, ValueError, TypeError, UserInputError) as error:
            raise bad(f"{where}: {str(error).strip().splitlines()[0]}") from None
        if parameter.name in {p.name for p in parameters}:
            raise bad(f"{where}: duplicate parameter name {parameter.name!r}.")
        bounds = getattr(parameter, "lower", None), getattr(parameter, "upper", None)
        if any(isinstance(b, float) and not math.isfinite(b) for b in bounds):
            raise bad(f"{where}: bounds must be finite (got {list(bounds)}).")
        parameters.append(parameter)
    if all(isinstance(p, FixedParameter) for p in parameters):
        raise bad("'parameters' needs at least one range or choice parameter (all are fixed).")
    return parameters


def _check_signature(function: Any, job: str, kwargs: Mapping[str, Any], bad: Any) -> None:
    """The job takes ``(parameters, report, trial_index, **kwargs)``: else one line now,
    not a failed trial later."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return  # a builtin or C callable: nothing to check
    try:
        signature.bind({}, None, 0, **kwargs)
    except TypeError as error:
        raise bad(f"job {job} cannot be called as train(parameters, report, trial_index, "
                  f"{', '.join(f'{k}=...' for k in kwargs)}): {error}.") from None
