#!/usr/bin/env bash
# Set everything up on Debian 12 and run the quickstart:
#   the toolchain (apt packages + the Enzyme plugin), a virtual environment in
#   .venv, enzyme_py built there with AD (ENZYME_PY_AD=ON), and examples/quickstart.py.
# Safe to run again: each step skips what is already done.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
export PYTHON

bash third_party/get_toolchain.sh

if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
echo "[setup] building enzyme_py with AD into .venv"
ENZYME_PY_AD=ON .venv/bin/python -m pip install --quiet ".[test,dev,cython]"
echo "[setup] running examples/quickstart.py"
.venv/bin/python examples/quickstart.py
