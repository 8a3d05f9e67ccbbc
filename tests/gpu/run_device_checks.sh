#!/usr/bin/env bash
# GPU checks for a lent device machine (an H200): a pass/fail table and timings.
#
# Here first:  bash scripts/device_pack.sh   (.device/pack: enzyme_py for the device's
#                                             Python 3.12, liboffload, libLLVM-22)
# Then, through the device tool, one call:
#   run(command="bash tests/gpu/run_device_checks.sh", carry=[".device/pack"])
# Exit code 3: the pack was not carried. Nothing is fetched: the device's python3 must
# have NumPy and pytest (the CUDA image's does). Kernels are LLVM IR: neither clang nor
# Numba is used. Locally, under the simulated driver (tests/gpu/simulator.py), the same
# script rehearses everything but the GPU; there the benchmark's GPU launches do
# nothing (nothing plays the GPU in its process), so its check fails.
set -uo pipefail
cd "$(dirname "$0")/../.."
PYTHON="${PYTHON:-python3}"
STAGE="${STAGE:-/tmp/enzyme_py_device}"
pack="${PACK:-.device/pack/enzyme_py_device.tar.xz}"

if [ ! -f "$pack" ]; then
  echo "no $pack: run scripts/device_pack.sh here, then carry .device/pack"
  exit 3
fi
rm -rf "$STAGE" && mkdir -p "$STAGE"
tar -xJf "$pack" -C "$STAGE" || { echo "could not unpack $pack"; exit 3; }
tag="$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')"
if ! ls "$STAGE"/site/enzyme_py/_native.cpython-"$tag"-*.so >/dev/null 2>&1; then
  echo "the pack is not for this Python ($tag): DEVICE_PYTHON=... scripts/device_pack.sh"
  exit 2
fi
echo "staged $(ls "$STAGE"/site | tr '\n' ' ')"

# libLLVM-22's dependencies the machine lacks: the wheel's bundled (renamed) copies.
for need in libz3.so.4 libedit.so.2 libxml2.so.2 libffi.so.8 libzstd.so.1 libtinfo.so.6 \
            liblzma.so.5 libbsd.so.0 libmd.so.0; do
  [ -e "$STAGE/lib/$need" ] && continue
  ldconfig -p 2>/dev/null | grep -q "^[[:space:]]*$need " && continue
  copy="$(ls "$STAGE"/site/enzyme_py.libs/"${need%%.so*}"-*.so* 2>/dev/null | head -n1)"
  [ -n "$copy" ] && ln -sf "$copy" "$STAGE/lib/$need"
done
# liboffload's CUDA plugin opens "libcuda.so"; driver mounts often have only libcuda.so.1.
if ! ldconfig -p 2>/dev/null | grep -q "^[[:space:]]*libcuda.so " && [ ! -e "$STAGE/lib/libcuda.so" ]; then
  driver="$(ldconfig -p 2>/dev/null | awk '$1 == "libcuda.so.1" {print $NF; exit}')"
  for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu; do
    [ -z "$driver" ] && [ -e "$d/libcuda.so.1" ] && driver="$d/libcuda.so.1"
  done
  [ -n "$driver" ] && ln -sf "$driver" "$STAGE/lib/libcuda.so"
fi

# OVERLAY=1: the working tree's Python files over the pack's, to check a Python-only
# change without packing again (the pack's extension must match them).
if [ "${OVERLAY:-0}" = 1 ]; then
  (cd python && find enzyme_py -name '*.py' -exec cp --parents {} "$STAGE/site" \;)
fi

export LD_LIBRARY_PATH="$STAGE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export ENZYME_PY_OFFLOAD_LIB="$STAGE/lib/libLLVMOffload.so.22.1"
export PYTHONPATH="$STAGE/site${PYTHONPATH:+:$PYTHONPATH}"
out="${OUT:-/tmp}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true
"$PYTHON" -m enzyme_py info
"$PYTHON" -c "import enzyme_py as ez; print('devices:', ez.offload.devices())"
"$PYTHON" -c "from enzyme_py import _cuda_driver as d; print('driver:', d.architectures())"
PYTHONUNBUFFERED=1 "$PYTHON" -m pytest -q -s -rA -p no:cacheprovider tests/gpu/test_gpu.py \
  -o "markers=needs_enzyme: AD" 2>&1 | tee "$out/gpu_checks.txt"
status=${PIPESTATUS[0]}
echo "== pass/fail =="
grep -E "^(PASSED|FAILED|SKIPPED|ERROR)" "$out/gpu_checks.txt" || true
# The benchmark (deliverable of issue 6): CPU device vs GPU, transfers apart. The IR
# body: the device's Numba may be newer than the LLVM 15 IR enzyme_py reads.
echo "== benchmarks/offload_stencil.py --body ir =="
timeout 300 "$PYTHON" benchmarks/offload_stencil.py --body ir --out "$out" 2>&1 | tail -n 25 \
  || echo "(the benchmark failed or its check did not pass: see above)"
exit "$status"
