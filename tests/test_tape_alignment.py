"""Enzyme's tape keeps vector values with their own alignment (a <4 x double> is stored
with an aligned 32-byte move): every tape block is aligned to its size, up to 64 bytes
(the allocator's own test: tests/test_tape.py).
A tape that gave 16-byte alignment only made such a derivative die of SIGSEGV, or not,
depending on where malloc had put the tape's memory (seen in the full test suite, in
the split forward pass of a Numba sum that LLVM had vectorised)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import enzyme_py as ez

from conftest import run_python

pytestmark = pytest.mark.needs_enzyme


# f(x, y, n, m) = prod_{j<m} y[j] + sum over 4 lanes of q, with P = prod_{i<n} x[4i + lane]
# (a <4 x double> product carried across the loop) and q = (x[lane] * P)^2, which f then
# writes over x[0:4]. The reverse pass needs x[0:4] * P and the x[0:4] it read, which it
# cannot read again: Enzyme keeps both as <4 x double> fields of the forward pass's tape,
# stored with 32-byte alignment; the m partial products of the scalar loop shift what
# the tape holds before them.
VECTOR_PRODUCT = """
define double @f(double* %x, double* %y, i64 %n, i64 %m) {
entry:
  br label %scalar
scalar:
  %j = phi i64 [0, %entry], [%j1, %scalar]
  %p = phi double [1.0, %entry], [%p1, %scalar]
  %py = getelementptr double, double* %y, i64 %j
  %yj = load double, double* %py
  %p1 = fmul double %p, %yj
  %j1 = add i64 %j, 1
  %more = icmp slt i64 %j1, %m
  br i1 %more, label %scalar, label %vector.start
vector.start:
  %vx = bitcast double* %x to <4 x double>*
  br label %vector
vector:
  %i = phi i64 [0, %vector.start], [%i1, %vector]
  %acc = phi <4 x double> [<double 1.0, double 1.0, double 1.0, double 1.0>, %vector.start],
                          [%acc1, %vector]
  %pv = getelementptr <4 x double>, <4 x double>* %vx, i64 %i
  %v = load <4 x double>, <4 x double>* %pv, align 8
  %acc1 = fmul <4 x double> %acc, %v
  %i1 = add i64 %i, 1
  %again = icmp slt i64 %i1, %n
  br i1 %again, label %vector, label %exit
exit:
  %v0 = load <4 x double>, <4 x double>* %vx, align 8
  %e = fmul <4 x double> %v0, %acc1
  %q = fmul <4 x double> %e, %e
  store <4 x double> %q, <4 x double>* %vx, align 8
  %a0 = extractelement <4 x double> %q, i32 0
  %a1 = extractelement <4 x double> %q, i32 1
  %a2 = extractelement <4 x double> %q, i32 2
  %a3 = extractelement <4 x double> %q, i32 3
  %s01 = fadd double %a0, %a1
  %s23 = fadd double %a2, %a3
  %s = fadd double %s01, %s23
  %r = fadd double %s, %p1
  ret double %r
}
"""


def expected(x: np.ndarray, y: np.ndarray, n: int, m: int) -> tuple[float, np.ndarray, np.ndarray]:
    """f, df/dx and df/dy at the x and y f was given (analytic: q = x0^4 R^2 per lane,
    R the product of the other rows)."""
    rows = x[: 4 * n].reshape(n, 4)
    rest = np.prod(rows[1:], axis=0)  # R (1 for n = 1)
    value = float(np.prod(y[:m]) + (rows[0] ** 4 * rest**2).sum())
    dx = np.zeros_like(x)
    dx[0:4] = 4 * rows[0] ** 3 * rest**2
    for i in range(1, n):
        dx[4 * i : 4 * i + 4] = 2 * rows[0] ** 4 * rest**2 / rows[i]
    dy = np.array([np.prod(np.delete(y[:m], j)) for j in range(m)])
    return value, dx, dy


ACTIVITIES = (ez.Duplicated, ez.Duplicated, ez.Const, ez.Const)


def test_the_forward_pass_stores_vectors_in_its_tape_with_their_alignment():
    f = ez.llvm_ir(VECTOR_PRODUCT, "f")
    split = ez.autodiff(f, ez.ReverseSplit, *ACTIVITIES, ez.Active)
    x, y = np.linspace(0.6, 1.4, 12), np.linspace(0.7, 1.2, 3)
    want = expected(x, y, 3, 3)
    dx, dy = np.zeros(12), np.zeros(3)
    primal, tape = split.forward(x, dx, y, dy, 3, 3)
    assert split.reverse(tape, x, dx, y, dy, 3, 3, 1.0) == ()
    assert primal == pytest.approx(want[0], rel=1e-14)
    np.testing.assert_allclose(dx, want[1], rtol=1e-13)
    np.testing.assert_allclose(dy, want[2], rtol=1e-13)
    # The case this file is about: a vector stored into the tape with 32-byte alignment.
    forward_ir = split._halves.forward.inspect_llvm(optimized=True)
    assert "tape_alloc(i64 64)" in forward_ir
    assert any(
        line.lstrip().startswith("store <4 x double>") and line.rstrip().endswith("align 32")
        for line in forward_ir.splitlines()
    )


def test_derivatives_that_keep_vectors_on_the_tape_run_wherever_malloc_puts_it():
    # In a fresh interpreter, so that a misaligned block is a failure here, not the end
    # of the session. malloc is made to serve the tapes' chunks from its heap (as it
    # does late in a long process) at addresses that alternate between 16 and 32 modulo
    # 32, and every split forward pass gets a tape of its own.
    code = f"""
import ctypes
import json
import numpy as np
import enzyme_py as ez
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.mallopt(-3, 256 << 20)  # M_MMAP_THRESHOLD: 1 MiB chunks from the heap
f = ez.llvm_ir({VECTOR_PRODUCT!r}, "f")
acts = (ez.Duplicated, ez.Duplicated, ez.Const, ez.Const)
reverse = ez.autodiff(f, ez.Reverse, *acts, ez.Active)
split = ez.autodiff(f, ez.ReverseSplit, *acts, ez.Active)
rng = np.random.default_rng(3)
out, tapes = [], []
for m in range(1, 9):
    for n in (1, 2, 3, 5, 8):
        libc.malloc(40)  # a 48-byte heap chunk: the next chunk's alignment flips
        x = rng.uniform(0.5, 1.5, 4 * n)
        y = rng.uniform(0.5, 1.5, m)
        given = x.copy()
        dx, dy = np.zeros_like(x), np.zeros_like(y)
        value, = reverse(x.copy(), dx, y, dy, n, m, 1.0)
        sx, sy = np.zeros_like(x), np.zeros_like(y)
        primal, tape = split.forward(x, sx, y, sy, n, m)
        split.reverse(tape, x, sx, y, sy, n, m, 1.0)
        tapes.append(tape)
        out.append((n, m, given.tolist(), y.tolist(), value, dx.tolist(), dy.tolist(),
                    primal, sx.tolist(), sy.tolist()))
print(json.dumps(out))
"""
    done = run_python(code)
    assert done.returncode == 0, done.stderr[-3000:]
    cases = json.loads(done.stdout)
    assert len(cases) == 40
    for n, m, x, y, value, dx, dy, primal, sx, sy in cases:
        want, want_dx, want_dy = expected(np.array(x), np.array(y), n, m)
        assert value == pytest.approx(want, rel=1e-13)
        assert primal == pytest.approx(want, rel=1e-13)
        for got, ref in ((dx, want_dx), (sx, want_dx), (dy, want_dy), (sy, want_dy)):
            np.testing.assert_allclose(got, ref, rtol=1e-12)
