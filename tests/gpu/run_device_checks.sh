#!/usr/bin/env bash
# GPU checks for a lent device machine (an H200): a pass/fail table and timings.
#
# Here first:  bash scripts/device_pack.sh    (.device/lib: liboffload; .device/wheel:
#                                              enzyme_py for the device's Python 3.12)
# Then, through the device tool, two calls back to back (each part alone fits the
# 64 MiB a call carries; the machine keeps /tmp while it is warm):
#   run(command="bash tests/gpu/run_device_checks.sh", carry=[".device/lib"])
#   run(command="bash tests/gpu/run_device_checks.sh", carry=[".device/wheel"])
# Each call stages what it carries under $STAGE and runs the checks once both parts
# are there; exit code 3 means a part is still missing (the machine was given back in
# between: carry both again). Nothing is fetched: the device's python3 must have NumPy
# and pytest (the CUDA image's does). Kernels are LLVM IR: neither clang nor Numba is
# used. Locally, under the simulated driver (tests/gpu/simulator.py), the same script
# rehearses everything but the GPU.
set -uo pipefail
cd "$(dirname "$0")/../.."
PYTHON="${PYTHON:-python3}"
STAGE="${STAGE:-/tmp/enzyme_py_device}"
mkdir -p "$STAGE/lib" "$STAGE/site"

if [ -f .device/lib/liboffload.tar.xz ] && [ ! -f "$STAGE/lib/libLLVMOffload.so.22.1" ]; then
  tar -xJf .device/lib/liboffload.tar.xz -C "$STAGE/lib" && echo "staged liboffload"
fi
tag="$("$PYTHON" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
wheel="$(ls -t .device/wheel/enzyme_py-*-"$tag"-*.whl 2>/dev/null | head -n1)"
if [ -n "$wheel" ] && [ ! -d "$STAGE/site/enzyme_py" ]; then
  "$PYTHON" -m pip install --quiet --no-index --no-deps --no-compile --target "$STAGE/site" \
    "$wheel" && echo "staged $(basename "$wheel")"
elif [ -z "$wheel" ] && ls .device/wheel/*.whl >/dev/null 2>&1; then
  echo "the wheels in .device/wheel are not for this $tag Python: DEVICE_PYTHON=... scripts/device_pack.sh"
  exit 2
fi
missing=""
[ -f "$STAGE/lib/libLLVMOffload.so.22.1" ] || missing+=" .device/lib"
[ -d "$STAGE/site/enzyme_py" ] || missing+=" .device/wheel"
if [ -n "$missing" ]; then
  echo "still missing:$missing (carry it in the next call)"
  exit 3
fi

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

export LD_LIBRARY_PATH="$STAGE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export ENZYME_PY_OFFLOAD_LIB="$STAGE/lib/libLLVMOffload.so.22.1"
export PYTHONPATH="$STAGE/site${PYTHONPATH:+:$PYTHONPATH}"
out="${OUT:-/tmp}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true
"$PYTHON" -m enzyme_py info
"$PYTHON" -c "import enzyme_py as ez; print('devices:', ez.offload.devices())"
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
