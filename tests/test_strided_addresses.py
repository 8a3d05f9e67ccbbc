"""Numba's addresses in arrays of layout 'A' (``inttoptr(ptrtoint(data) + i * stride)``)
become byte offsets from the data pointer before Enzyme (``src/strided_addresses.h``):
gradients of strided views against central differences, the tape Enzyme no longer
keeps, and the sums the rewrite leaves alone (a second pointer among the terms)."""

import numba
import numpy as np
import pytest

import enzyme_py as ez
from enzyme_py.frontends.ir import parse_module

from reference import fd_gradient

pytestmark = pytest.mark.needs_enzyme


@numba.njit
def rosenbrock(x):
    s = 0.0
    for i in range(x.shape[0] - 1):
        s += 100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2
    return s


@numba.njit
def column_stencil(a, j):
    s = 0.0
    for i in range(1, a.shape[0] - 1):
        t = a[i - 1, j] - 2.0 * a[i, j] + a[i + 1, j]
        s += t * t + np.sin(a[i, j])
    return s


def _views(n):
    base = np.linspace(-1.2, 1.1, 2 * n)
    return {
        "every other": base[::2],
        "reversed": base[:n][::-1],
        "reversed every third": np.linspace(-1.0, 1.3, 3 * n)[::-3],
    }


@pytest.mark.parametrize("view", ["every other", "reversed", "reversed every third"])
def test_gradients_of_strided_views(view):
    x = _views(9)[view]
    assert not x.flags.c_contiguous
    g = ez.grad(rosenbrock)(x)
    np.testing.assert_allclose(g, fd_gradient(rosenbrock, x), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(g, ez.grad(rosenbrock)(np.ascontiguousarray(x)), rtol=1e-13)


def test_a_column_of_a_strided_matrix():
    a = np.cos(np.arange(160.0)).reshape(16, 10)[::2, 1::2]  # layout 'A', both axes
    assert not a.flags.c_contiguous and not a.flags.f_contiguous
    g = ez.grad(column_stencil)(a, 2)
    np.testing.assert_allclose(g, fd_gradient(lambda b: column_stencil(b, 2), a), atol=1e-6)
    assert np.all(g[:, [0, 1, 3, 4]] == 0.0)


def test_the_strided_reverse_keeps_no_tape():
    # Through integers, Enzyme cached x[i] and x[i + 1] - x[i]**2 on a tape (two arrays
    # of n doubles); from the data pointer it reads them again.
    x = _views(1000)["every other"]
    df = ez.autodiff(rosenbrock, ez.Reverse, ez.Duplicated, ez.ActiveOnly)
    dx = np.zeros(2 * 1000)[::2]
    derivative = df.for_arguments((x, dx))
    assert "__enzyme_py_tape_alloc" not in derivative.inspect_llvm(optimized=True)
    assert "inttoptr" not in derivative.inspect_llvm()  # as Enzyme made it
    df(x, dx, 1.0)
    np.testing.assert_allclose(dx, fd_gradient(rosenbrock, x), rtol=1e-6, atol=1e-5)


ADDRESSES_IR = r"""
define double @f(double* %p, double* %q, i64 %i, i64 %stride, i64 %mask) {
entry:
  %base = ptrtoint double* %p to i64
  %offset = mul i64 %i, %stride
  %sum = add i64 %base, %offset
  %at = inttoptr i64 %sum to double*
  %x = load double, double* %at
  %other = ptrtoint double* %q to i64
  %masked = and i64 %other, %mask
  %sum2 = add i64 %base, %masked
  %there = inttoptr i64 %sum2 to double*
  %y = load double, double* %there
  %r = fadd double %x, %y
  ret double %r
}
"""


def test_only_offsets_are_rewritten():
    # p + i * stride is an address in p's array; p + (q & mask) is made of two
    # pointers, which a byte offset from p would claim for p's array: left as it was.
    module = parse_module(ADDRESSES_IR)
    module.native.simplify_for_enzyme()
    ir = module.native.ir()
    assert ir.count("inttoptr") == 1, ir
    assert "getelementptr i8, i8*" in ir, ir
    p = np.array([1.0, 2.0, 3.0, 4.0])
    q = np.array([10.0])
    f = ez.llvm_ir(ir, "f")
    # q & 0 = 0: the second load reads p[0].
    assert float(f(p, q, 2, 8, 0)) == 3.0 + 1.0
