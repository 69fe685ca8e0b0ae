"""An LCBench-style problem on offline data: funnel MLPs trained with SGD and cosine annealing.

* :mod:`gpar_bo.problems.funnel_mlp.data`: scikit-learn's bundled ``digits`` and
  ``breast_cancer`` as seeded, stratified, standardised train/validation splits.
* :mod:`gpar_bo.problems.funnel_mlp.mlp`: the seven-hyperparameter funnel MLP and
  :func:`train` with an epoch callback.
* :mod:`gpar_bo.problems.funnel_mlp.curves`: sampling the search space, resumable
  generation of curve tables, and :func:`load_curves`.
* :mod:`gpar_bo.problems.funnel_mlp.job`: the search space and training job for ``gpar-bo tune``.
"""

from gpar_bo.problems.funnel_mlp.curves import (
    DEFAULT_EPOCHS,
    generate_curves,
    load_curves,
    sample_setting,
    sample_settings,
    to_unit_cube,
)
from gpar_bo.problems.funnel_mlp.data import DATASETS, TabularData, load_dataset
from gpar_bo.problems.funnel_mlp.mlp import (
    HPARAM_NAMES,
    SEARCH_SPACE,
    FunnelHyperparameters,
    Range,
    build_funnel_mlp,
    funnel_dropouts,
    funnel_widths,
    train,
)

__all__ = [
    "DATASETS",
    "DEFAULT_EPOCHS",
    "HPARAM_NAMES",
    "SEARCH_SPACE",
    "FunnelHyperparameters",
    "Range",
    "TabularData",
    "build_funnel_mlp",
    "funnel_dropouts",
    "funnel_widths",
    "generate_curves",
    "load_curves",
    "load_dataset",
    "sample_setting",
    "sample_settings",
    "to_unit_cube",
    "train",
]
