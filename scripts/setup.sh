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
# docs: mkdocs + mkdocstrings for tests/test_docs.py; dask: dask.distributed for
# tests/test_dask.py and examples/dask_ensemble.py.
ENZYME_PY_AD=ON .venv/bin/python -m pip install --quiet ".[test,dev,cython,docs,dask]"
# The bridges' dependencies, so that their tests and examples run: the pins of the
# extras `torch` and `jax` in pyproject.toml, on their own line (not ".[torch,jax]")
# so that a reused .venv skips them with one import instead of a resolver run.
# torch==2.13.0 takes the CPU wheel on this machine's disk (an unpinned torch
# downloads a CUDA build of several GB); jax from PyPI runs on the CPU.
# ENZYME_PY_BRIDGES=0 leaves them out (their tests then skip).
if [ "${ENZYME_PY_BRIDGES:-1}" != 0 ]; then
  if .venv/bin/python -c "import importlib.metadata as m, sys; sys.exit(not m.version('torch').startswith('2.13.0') or not m.version('jax'))" 2>/dev/null; then
    echo "[setup] torch 2.13.0 and jax already installed"
  else
    echo "[setup] installing the bridges' dependencies: torch==2.13.0 (CPU), jax"
    .venv/bin/python -m pip install --quiet "torch==2.13.0" "jax>=0.4.30"
  fi
fi
echo "[setup] running examples/quickstart.py"
.venv/bin/python examples/quickstart.py
