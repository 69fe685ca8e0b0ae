#!/usr/bin/env bash
# Create the separate Syne Tune 0.13.0 virtualenv that benchmarks/syne_tune/driver.py
# runs in (Syne Tune 0.13.0 pins numpy < 1.27, so it cannot share the project's venv).
#
#   bash benchmarks/syne_tune/setup_venv.sh [VENV_DIR]
#
# VENV_DIR defaults to $GPAR_BO_SYNETUNE_VENV, else ~/.cache/gpar-bo/synetune. The
# interpreter is $SYNETUNE_BASE_PYTHON, else pyenv's 3.11.7, else python3.11 on
# PATH. Packages are the exact pins of requirements.txt beside this script, installed
# with uv when it is on PATH, else with pip. At the end the venv imports the five
# schedulers and prints its versions; then point the project at it with
#   export GPAR_BO_SYNETUNE_PYTHON=VENV_DIR/bin/python
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${1:-${GPAR_BO_SYNETUNE_VENV:-$HOME/.cache/gpar-bo/synetune}}"
base="${SYNETUNE_BASE_PYTHON:-}"
if [ -z "$base" ]; then
    if [ -x /root/.pyenv/versions/3.11.7/bin/python ]; then
        base=/root/.pyenv/versions/3.11.7/bin/python
    elif command -v python3.11 >/dev/null; then
        base="$(command -v python3.11)"
    else
        echo "setup_venv.sh: no python 3.11 found; set SYNETUNE_BASE_PYTHON" >&2
        exit 1
    fi
fi
"$base" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' \
    || { echo "setup_venv.sh: $base is not python 3.11" >&2; exit 1; }
if command -v uv >/dev/null; then  # the same pins, several times faster than pip
    uv venv --quiet --allow-existing --python "$base" "$venv"
    uv pip install --quiet --python "$venv/bin/python" --no-deps -r "$here/requirements.txt"
    uv pip check --quiet --python "$venv/bin/python"
else
    "$base" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --no-deps -r "$here/requirements.txt"
    "$venv/bin/python" -m pip check
fi
"$venv/bin/python" - <<'PY' 2>/dev/null
import sys

import numpy, pandas, scipy, statsmodels, syne_tune
from syne_tune.optimizer.baselines import ASHA, BOHB, MOBSTER, DyHPO, HyperTune  # noqa: F401

print(
    f"python {sys.version.split()[0]}, syne-tune {syne_tune.__version__}, numpy {numpy.__version__}, "
    f"scipy {scipy.__version__}, pandas {pandas.__version__}, statsmodels {statsmodels.__version__}"
)
PY
echo "export GPAR_BO_SYNETUNE_PYTHON=$venv/bin/python"
