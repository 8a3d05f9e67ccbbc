"""512-bit vectors for a derivative's streaming loops (src/wide_vectors.h).

On AVX-512 hosts that keep their clock with it (Ice Lake and later) the loops the
scatter pass makes of a reverse stencil (and others the first vectoriser left) get the
loop vectoriser's width hint for 512-bit vectors where they stream; loops with a
reduction, with calls, or known to run a few times keep LLVM's choice.
``ENZYME_PY_WIDE_VECTORS`` (read when the JIT starts) forces it on (=1, any x86 host:
where the CPU lacks AVX-512 code generation splits the vectors) or off (=0), so each
case runs in a fresh process. Every gradient is checked against float64 central
differences of the primal.
"""

from __future__ import annotations

import json

import pytest

from conftest import run_python

pytestmark = pytest.mark.needs_enzyme

PROGRAM = """
import json
import numba
import numpy as np
import enzyme_py as ez

def heat(u0, steps):
    # A double-buffered stencil: its reverse gathers into one adjoint, zeroes the other.
    n = u0.shape[0]
    a = u0.copy()
    b = np.empty_like(u0)
    for _ in range(steps):
        b[0] = a[0]
        b[n - 1] = a[n - 1]
        for i in range(1, n - 1):
            b[i] = a[i] + 0.25 * (a[i - 1] - 2.0 * a[i] + a[i + 1])
        a, b = b, a
    s = 0.0
    for i in range(n):
        s += (i + 1.0) * a[i] * a[i]
    return s

@numba.njit
def dot(x, y):
    # A reduction: its forward derivative (a sum of x' * y) keeps LLVM's width.
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * y[i]
    return s

def fd(f, x, *rest):
    h = 1e-6
    g = np.zeros(x.shape[0])
    for j in range(x.shape[0]):
        e = np.zeros_like(x)
        e[j] = h
        g[j] = (f(x + e, *rest) - f(x - e, *rest)) / (2 * h)
    return g

out = {"wide": ez.info()["wide_vectors"]}
for dtype in ("float64", "float32"):
    u0 = np.random.default_rng(0).uniform(0.0, 1.0, 200).astype(dtype)
    # One dispatcher per type (each derivative has one specialisation to inspect).
    df = ez.autodiff(numba.njit(heat), ez.Reverse, ez.Duplicated, ez.Const, ez.ActiveOnly)
    du = np.zeros_like(u0)
    df(u0, du, 30, 1.0)
    reference = fd(numba.njit(heat), u0.astype(np.float64), 30)
    scale = np.max(np.abs(reference))
    out[dtype] = {
        "error": float(np.max(np.abs(du - reference)) / scale),
        "ir": df.inspect_llvm(optimized=True),
    }
# Stencils shorter and longer than a few 512-bit vectors (the inner loop runs n - 2
# times).
errors = []
stencil = numba.njit(heat)
dstencil = ez.autodiff(stencil, ez.Reverse, ez.Duplicated, ez.Const, ez.ActiveOnly)
for n in (5, 31, 32, 33, 34, 35, 40, 1000):
    u0 = np.random.default_rng(n).uniform(0.0, 1.0, n)
    du = np.zeros_like(u0)
    dstencil(u0, du, 7, 1.0)
    reference = fd(stencil, u0, 7)
    errors.append(float(np.max(np.abs(du - reference)) / np.max(np.abs(reference))))
out["sizes"] = errors
x = np.linspace(0.0, 1.0, 300)
y = np.cos(x)
tangent = np.sin(x)
jvp = ez.autodiff(dot, ez.Forward, ez.Dual, ez.Const, ez.DualOnly)
dot_tangent = jvp(x, tangent, y)
out["dot"] = {
    "error": float(abs(dot_tangent - tangent @ y)),
    "ir": jvp.inspect_llvm(optimized=True),
}
print(json.dumps(out))
"""


def _run(choice: str, tmp_path) -> dict:
    proc = run_python(
        PROGRAM,
        env={"ENZYME_PY_WIDE_VECTORS": choice, "ENZYME_PY_CACHE_DIR": str(tmp_path)},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_streaming_loops_get_512_bit_vectors_where_asked(tmp_path):
    out = _run("1", tmp_path)
    assert out["wide"] == "512-bit streaming loops"
    # The stencils' reverse loops at 8 double lanes (float32's too: Numba computes in
    # float64), their functions allowed 512-bit vectors.
    wide = '"min-legal-vector-width"="512"'
    assert "<8 x double>" in out["float64"]["ir"] and wide in out["float64"]["ir"]
    assert max(out["sizes"]) < 1e-6, out["sizes"]
    assert "<8 x double>" in out["float32"]["ir"] and wide in out["float32"]["ir"]
    assert out["float64"]["error"] < 1e-6
    assert out["float32"]["error"] < 1e-3
    # A reduction is no stream: LLVM's own width (4 doubles on AVX2 and AVX-512 hosts).
    assert "<8 x double>" not in out["dot"]["ir"] and wide not in out["dot"]["ir"]
    assert out["dot"]["error"] < 1e-12


def test_no_512_bit_vectors_when_turned_off(tmp_path):
    out = _run("0", tmp_path)
    assert out["wide"] is None
    assert "<8 x double>" not in out["float64"]["ir"]
    for case in ("float64", "float32", "dot"):
        assert '"min-legal-vector-width"="512"' not in out[case]["ir"]
    assert out["float64"]["error"] < 1e-6
    assert out["float32"]["error"] < 1e-3
    assert out["dot"]["error"] < 1e-12
    assert max(out["sizes"]) < 1e-6, out["sizes"]


def test_avx512_hosts_are_compiled_for_with_256_bit_tuning():
    # LLVM 15 calls a Zen 4 "znver3" and tunes it for nothing narrower than 512 bits:
    # every loop was vectorised at 512 bits there (the reduction above included).
    from enzyme_py import _state

    _, _, features, *_ = _state.native.host()
    if "+avx512f" in features:
        assert "+prefer-256-bit" in features.split(",")
    else:
        assert "+prefer-256-bit" not in features.split(",")
