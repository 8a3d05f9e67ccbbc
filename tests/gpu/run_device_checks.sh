#!/usr/bin/env bash
# GPU checks for a lent device machine (an H200): one short run, a pass/fail table.
#
# Here first:   bash scripts/build_wheel.sh       (the wheel bundles LLVM and Enzyme)
# Then run it there with the wheel carried along, e.g. through the device tool:
#   run(command="bash tests/gpu/run_device_checks.sh", carry=["dist"])
# The device machine reaches no package registry: its Python must already have NumPy
# and pytest (or the script says which is missing). Kernels there are LLVM IR, so
# neither clang nor Numba is needed; the CUDA driver is, through liboffload.
set -uo pipefail
cd "$(dirname "$0")/../.."
wheel="$(ls -t dist/enzyme_py-*manylinux*.whl 2>/dev/null | head -n1)"
[ -n "$wheel" ] || { echo "no wheel in dist/: run scripts/build_wheel.sh first"; exit 2; }
python3 -c "import numpy, pytest" 2>/dev/null || { echo "numpy and pytest are needed on the device"; exit 2; }
venv="$(mktemp -d)/venv"
python3 -m venv --system-site-packages "$venv"
"$venv/bin/pip" install --no-deps --no-index --quiet "$wheel" || exit 2
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null || true
"$venv/bin/python" -m enzyme_py info
"$venv/bin/python" -m pytest -q -s -rA -p no:cacheprovider tests/gpu/test_gpu.py \
  -o "markers=needs_enzyme: AD" 2>&1 | tee "${OUT:-/tmp}/gpu_checks.txt"
status=${PIPESTATUS[0]}
echo "== pass/fail =="
grep -E "^(PASSED|FAILED|SKIPPED|ERROR)" "${OUT:-/tmp}/gpu_checks.txt" || true
exit "$status"
