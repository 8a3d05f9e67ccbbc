#!/usr/bin/env bash
# Proof that the wheel from scripts/build_wheel.sh works where no LLVM is installed:
# a fresh Debian 12 (debootstrap, minbase: python3 and venv only) gets a venv, the
# wheel and Numba from PyPI, and runs examples/quickstart.py; ez.c there must say
# that clang is missing (the wheel cannot carry it).
#   sudo bash scripts/wheel_proof.sh [dist/enzyme_py-...whl]
# Needs root (debootstrap, chroot) and a few minutes; CI does not run it.
set -euo pipefail
cd "$(dirname "$0")/.."
wheel="${1:-$(ls -t dist/enzyme_py-*manylinux*.whl | head -n1)}"
root="${ENZYME_PY_PROOF_ROOT:-/tmp/enzyme_py_proof_root}"
command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap >/dev/null
if [ ! -x "$root/usr/bin/python3" ]; then
  # The Debian mirror this machine's apt already uses.
  mirror="$(grep -m1 -oP '(?<=^URIs: )\S+' /etc/apt/sources.list.d/debian.sources 2>/dev/null \
            || awk '/^deb /{print $2; exit}' /etc/apt/sources.list)"
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    bookworm "$root" "$mirror"
fi
if chroot "$root" sh -c 'ls /usr/lib/llvm-* /usr/lib/x86_64-linux-gnu/libLLVM* 2>/dev/null' | grep -q .; then
  echo "the proof root has an LLVM installed; it must not" >&2; exit 1
fi
cp /etc/resolv.conf "$root/etc/resolv.conf"
# The certificates this machine's pip trusts (a proxy's CA, where there is one).
cert="${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}"
mkdir -p "$root$(dirname "$cert")"
cp "$cert" "$root$cert"
mkdir -p "$root/proof"
cp "$wheel" "$root/proof/"
cp examples/quickstart.py "$root/proof/"
mountpoint -q "$root/proc" || mount -t proc proc "$root/proc"
trap 'umount "$root/proc" 2>/dev/null || true' EXIT
chroot "$root" /usr/bin/env PIP_CERT="$cert" PIP_DEFAULT_TIMEOUT=180 /bin/sh -euc '
  cd /proof
  [ -x venv/bin/python ] || python3 -m venv venv
  venv/bin/pip install --quiet --upgrade pip
  venv/bin/pip install --quiet ./enzyme_py-*.whl numba==0.61.2
  venv/bin/python -c "import enzyme_py as ez, json; i = ez.info(); print(json.dumps({k: i[k] for k in (\"autodiff\", \"enzyme_version\", \"llvm_version\")}))"
  venv/bin/python quickstart.py
  venv/bin/python -c "
import enzyme_py as ez
try:
    ez.c(\"double f(double x) { return x; }\")
except ez.CompileError as exc:
    assert \"clang\" in str(exc), exc
    print(\"ez.c without clang:\", exc)
else:
    raise SystemExit(\"ez.c worked without clang?\")
"
  venv/bin/python -X importtime -c "import enzyme_py" 2>&1 | tail -n1
'
echo "wheel proof: OK ($(du -h "$wheel" | cut -f1) wheel)"
