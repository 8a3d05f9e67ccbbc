#!/usr/bin/env bash
# The whole test suite, both flavours:
#   1. the AD build in .venv (rebuilt from this tree), all tests;
#   2. the pure-Python build (ENZYME_PY_AD=OFF) in .venv-stub, where the AD tests
#      skip with their reason and the stub tests run;
#   3. ruff on the Python sources.
# pytest's exit code 5 (no tests ran) fails this script like any other failure.
# Needs scripts/setup.sh to have run once.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"

[ -x .venv/bin/python ] || { echo "run scripts/setup.sh first" >&2; exit 1; }

echo "[test] AD build (ENZYME_PY_AD=ON)"
ENZYME_PY_AD=ON .venv/bin/python -m pip install --quiet ".[test,dev]"
.venv/bin/python -c "import enzyme_py, sys; sys.exit(0 if enzyme_py.has_autodiff() else 'AD build has no AD: ' + str(enzyme_py.info()['reason']))"
.venv/bin/python -m pytest -q tests

echo "[test] stub build (ENZYME_PY_AD=OFF)"
if [ ! -x .venv-stub/bin/python ]; then
  "$PYTHON" -m venv .venv-stub
  .venv-stub/bin/python -m pip install --quiet --upgrade pip
fi
ENZYME_PY_AD=OFF .venv-stub/bin/python -m pip install --quiet ".[test]"
.venv-stub/bin/python -c "import enzyme_py, sys; sys.exit('stub build has AD' if enzyme_py.has_autodiff() else 0)"
.venv-stub/bin/python -m pytest -q tests

echo "[test] ruff (lint and format), mypy"
.venv/bin/ruff check python tests examples benchmarks scripts
.venv/bin/ruff format --check python tests examples benchmarks scripts
.venv/bin/mypy
echo "[test] all passed"
