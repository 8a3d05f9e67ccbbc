"""Forward over reverse (Hessians), and Enzyme's strong_zero / runtime_activity options."""

import math

import numpy as np
import pytest

import enzyme_py as ez

from conftest import run_python
from reference import fd_gradient

pytestmark = pytest.mark.needs_enzyme

SOURCE = r"""
#include <math.h>
double energy(const double *x, int n) {
    double e = 0.0;
    for (int i = 0; i < n; ++i) e += x[i] * x[i] * sin(x[i]);
    for (int i = 0; i + 1 < n; ++i) e += x[i] * x[i + 1];
    return e;
}
double g(double x, double y) { return x * x * y + sin(x * y); }
double mul(double x, double y) { return x * y; }
void copy_scale(double *out, const double *in, double s, int n) {
    for (int i = 0; i < n; ++i) out[i] = s * in[i];
}
"""


@pytest.fixture(scope="module")
def m():
    return ez.c(SOURCE)


def energy_hessian(x):
    n = len(x)
    h = np.diag(2 * np.sin(x) + 4 * x * np.cos(x) - x**2 * np.sin(x))
    for i in range(n - 1):
        h[i, i + 1] = h[i + 1, i] = 1.0
    return h


def test_hessian_vector_products_of_array_function(m):
    x = np.linspace(0.1, 1.3, 5)
    grad_of = ez.autodiff(m.energy, ez.Reverse, ez.Duplicated, ez.Const, ez.ActiveOnly)
    hvp = ez.autodiff(grad_of, ez.Forward, ez.Dual, ez.Dual, ez.Const, ez.Const)
    columns = []
    for j in range(5):
        v = np.eye(5)[j]
        dx, hv = np.zeros(5), np.zeros(5)
        assert hvp(x, v, dx, hv, 5, 1.0) is None
        columns.append(hv)
        np.testing.assert_allclose(
            dx,
            2 * x * np.sin(x) + x**2 * np.cos(x) + np.r_[x[1:], 0] + np.r_[0, x[:-1]],
            rtol=1e-13,
        )
    hessian = np.column_stack(columns)
    np.testing.assert_allclose(hessian, energy_hessian(x), rtol=1e-12, atol=1e-14)

    def gradient(z):
        dz = np.zeros_like(z)
        grad_of(z, dz, 5, 1.0)
        return dz

    fd = np.column_stack([fd_gradient(lambda z, i=i: gradient(z)[i], x) for i in range(5)])
    np.testing.assert_allclose(hessian, fd, rtol=1e-6, atol=1e-7)


def test_hessian_of_scalar_function(m):
    x, y = 0.5, 0.7
    dg = ez.autodiff(m.g, ez.Reverse, ez.Active, ez.Active, ez.ActiveOnly)
    assert dg.as_function().ret.kind == "struct"
    row_x = ez.autodiff(dg, ez.Forward, ez.Dual, ez.Const, ez.Const, ez.DualOnly)(x, 1.0, y, 1.0)
    primal, row_y = ez.autodiff(dg, ez.Forward, ez.Const, ez.Dual, ez.Const, ez.Dual)(
        x, y, 1.0, 1.0
    )
    hxx = 2 * y - y * y * math.sin(x * y)
    hxy = 2 * x + math.cos(x * y) - x * y * math.sin(x * y)
    hyy = -x * x * math.sin(x * y)
    assert row_x == pytest.approx((hxx, hxy), rel=1e-13)
    assert row_y == pytest.approx((hxy, hyy), rel=1e-13)
    assert primal == pytest.approx((2 * x * y + y * math.cos(x * y), x * x + x * math.cos(x * y)))


def numba_functions():
    from numba import njit

    @njit
    def weighted_energy(x, k):
        e = 0.0
        for i in range(x.shape[0]):
            e += k * x[i] * x[i] * math.sin(x[i])
        return e

    @njit
    def ring(x):
        n = x.shape[0]
        s = 0.0
        for i in range(n):
            d = x[i] - x[(i + n - 1) % n]
            s += d * d * d * d
        return s

    return weighted_energy, ring


def test_hessians_of_numba_loops_that_vectorize():
    # The first derivative, optimized for speed, calls libmvec's vector sin and
    # gathers x[i-1] with masked vector loads; Enzyme has no derivatives of
    # those, so the form it differentiates again is optimized without vectorizing.
    weighted_energy, ring = numba_functions()
    x = np.linspace(0.0, 2.0, 9)
    exact = 3.0 * (2 * np.sin(x) + 4 * x * np.cos(x) - x * x * np.sin(x))
    np.testing.assert_allclose(
        ez.hessian(weighted_energy)(x, 3.0), np.diag(exact), rtol=1e-13, atol=1e-13
    )
    z = np.random.default_rng(0).normal(size=7)
    gradient = ez.grad(ring)
    fd = np.column_stack([fd_gradient(lambda v, i=i: gradient(v)[i], z) for i in range(7)])
    np.testing.assert_allclose(ez.hessian(ring)(z), fd, rtol=1e-6, atol=1e-6)


def test_hessians_of_numba_functions_with_temporary_arrays():
    # Forward over reverse met the first derivative's release of its temporaries'
    # shadows (__enzyme_py_arena_keep): "No forward mode derivative found".
    from numba import njit

    @njit
    def cube_sum(x):
        return (x * x * x).sum()

    @njit
    def weighted_sines(x):
        t = np.empty_like(x)
        for i in range(x.shape[0]):
            t[i] = math.sin(x[i])
        s = 0.0
        for i in range(x.shape[0]):
            s += t[i] * t[i] * x[i]
        return s

    x = np.array([1.0, 2.0, 0.5])
    np.testing.assert_allclose(ez.hessian(cube_sum)(x), np.diag(6 * x), rtol=1e-14)
    gradient = ez.grad(weighted_sines)
    fd = np.column_stack([fd_gradient(lambda v, i=i: gradient(v)[i], x) for i in range(3)])
    np.testing.assert_allclose(ez.hessian(weighted_sines)(x), fd, rtol=1e-6, atol=1e-7)


def test_batched_forward_over_reverse(m):
    x, y = 0.5, 0.7
    dg = ez.autodiff(m.g, ez.Reverse, ez.Active, ez.Active, ez.ActiveOnly)
    h = ez.autodiff(dg, ez.Forward, ez.Dual, ez.Dual, ez.Const, ez.DualOnly, width=2)
    rows = h(x, [1.0, 0.0], y, [0.0, 1.0], 1.0)
    hxx = 2 * y - y * y * math.sin(x * y)
    hxy = 2 * x + math.cos(x * y) - x * y * math.sin(x * y)
    hyy = -x * x * math.sin(x * y)
    np.testing.assert_allclose(rows, [[hxx, hxy], [hxy, hyy]], rtol=1e-13)


def test_strong_zero(m):
    # Direction (0, 0) at y = inf: 0 * inf is nan unless zero tangents stay zero.
    weak = ez.autodiff(m.mul, ez.Forward, ez.Dual, ez.Dual, ez.DualOnly)
    strong = ez.autodiff(m.mul, ez.Forward, ez.Dual, ez.Dual, ez.DualOnly, strong_zero=True)
    assert math.isnan(weak(1.0, 0.0, math.inf, 0.0))
    assert strong(1.0, 0.0, math.inf, 0.0) == 0.0
    assert strong(2.0, 1.0, 3.0, 0.0) == 3.0


def test_runtime_activity_marks_self_shadowed_array_inactive(m):
    acts = (ez.Duplicated, ez.Duplicated, ez.Active, ez.Const)
    plain = ez.autodiff(m.copy_scale, ez.Reverse, *acts)
    runtime = ez.autodiff(m.copy_scale, ez.Reverse, *acts, runtime_activity=True)
    x = np.arange(1.0, 4.0)
    # Active output: same derivative either way.
    for df in (plain, runtime):
        out, dout, dx = np.zeros(3), np.ones(3), np.zeros(3)
        assert df(out, dout, x, dx, 2.0, 3) == (None, pytest.approx(6.0))
        np.testing.assert_allclose(dx, 2.0)
    # The output passed as its own shadow: inactive at run time, no derivative flows.
    out, dx = np.zeros(3), np.zeros(3)
    assert runtime(out, out, x, dx, 2.0, 3) == (None, 0.0)
    np.testing.assert_array_equal(dx, 0.0)
    np.testing.assert_allclose(out, 2 * x)
    with pytest.raises(ValueError, match="overlaps its array"):
        plain(out, out, x, dx, 2.0, 3)


def test_real_enzyme_assertion_is_isolated():
    # Enzyme v0.0.289 fails an assertion (overwritten_args.size() == arg_size()) on a
    # call of a variadic function that has a body.
    code = r"""
import enzyme_py as ez
m = ez.c('#include <math.h>\ndouble g(double x, double y) { return x*x*y + sin(x*y); }')
v = ez.c('''
#include <stdarg.h>
static double vsum(int n, ...) {
    va_list a; va_start(a, n); double s = 0;
    for (int i = 0; i < n; ++i) s += va_arg(a, double);
    va_end(a); return s;
}
__attribute__((noinline)) double h(double x, double y) { return vsum(2, x, y); }
double f(double x, double y) { return h(x * x, y); }
''')
try:
    ez.autodiff(v.f, ez.Reverse, ez.Active, ez.Const, ez.Active)
except ez.EnzymeError as exc:
    print("EnzymeError:", exc)
print("alive", ez.autodiff(m.g, ez.Reverse, ez.Active, ez.Const, ez.Active)(1.0, 2.0, 1.0))
"""
    proc = run_python(code)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "EnzymeError: Enzyme crashed while differentiating" in proc.stdout
    assert "Assertion" in proc.stdout
    # C code's advice: about its variadic function, nothing of Numba's.
    assert "calls a variadic function with a body" in proc.stdout
    assert "Numba" not in proc.stdout
    alive = proc.stdout.split("alive ")[1].strip().strip("()").split(", ")
    assert [float(v) for v in alive] == pytest.approx([2 + math.sin(2), 4 + 2 * math.cos(2)])
