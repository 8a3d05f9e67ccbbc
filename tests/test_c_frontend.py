"""C and C++ kernels over NumPy arrays, compiled by clang 15."""

import numpy as np
import pytest

import enzyme_py as ez

from reference import fd_gradient

pytestmark = pytest.mark.needs_enzyme

C_SOURCE = r"""
#include <math.h>
double energy(const double *x, int n) {
    double e = 0.0;
    for (int i = 0; i < n; ++i) e += x[i] * x[i] * sin(x[i]);
    return e;
}
void square_sin(double *out, const double *x, long n) {
    for (long i = 0; i < n; ++i) out[i] = x[i] * x[i] * sin(x[i]);
}
float sumsq_f(const float *x, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; ++i) s += x[i] * x[i];
    return s;
}
double weighted(const double *x, const double *w, double scale, int n) {
    double s = 0.0;
    for (int i = 0; i < n; ++i) s += w[i] * exp(scale * x[i]);
    return s;
}
static double helper(double x) { return x; }
"""


@pytest.fixture(scope="module")
def kernels():
    return ez.c(C_SOURCE)


def energy_np(x):
    return float(np.sum(x * x * np.sin(x)))


def test_functions_are_attributes(kernels):
    assert kernels.functions() == ["energy", "square_sin", "sumsq_f", "weighted"]
    with pytest.raises(AttributeError, match="no non-static function 'helper'"):
        _ = kernels.helper
    p = kernels.weighted.params
    assert [q.name for q in p] == ["x", "w", "scale", "n"]
    assert [q.kind for q in p] == ["pointer", "pointer", "float", "int"]
    assert p[0].dtype == np.float64


@pytest.mark.parametrize("shape", [(7,), (3, 4), (2, 3, 2)])
def test_reverse_array_any_rank(kernels, shape):
    rng = np.random.default_rng(0)
    x = rng.normal(size=shape)
    dx = np.zeros_like(x)
    df = ez.autodiff(kernels.energy, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)
    (value,) = df(x, dx, x.size, 1.0)
    assert value == pytest.approx(energy_np(x), rel=1e-14)
    np.testing.assert_allclose(dx, 2 * x * np.sin(x) + x**2 * np.cos(x), rtol=1e-13)
    np.testing.assert_allclose(dx, fd_gradient(energy_np, x), rtol=1e-6, atol=1e-8)


def test_reverse_accumulates_into_shadow(kernels):
    x = np.linspace(-1, 1, 5)
    dx = np.ones_like(x)
    ez.autodiff(kernels.energy, ez.Reverse, ez.Duplicated, ez.Const, ez.ActiveOnly)(x, dx, 5, 1.0)
    np.testing.assert_allclose(dx, 1 + 2 * x * np.sin(x) + x**2 * np.cos(x), rtol=1e-13)


def test_output_array_shadow_is_the_seed(kernels):
    x = np.linspace(0.1, 2, 6)
    out = np.zeros_like(x)
    dout = np.linspace(1, 2, 6)
    seed = dout.copy()
    dx = np.zeros_like(x)
    df = ez.autodiff(kernels.square_sin, ez.Reverse, ez.Duplicated, ez.Duplicated, ez.Const)
    assert df(out, dout, x, dx, 6) == (None,)
    np.testing.assert_allclose(out, x * x * np.sin(x), rtol=1e-15)
    np.testing.assert_allclose(dx, seed * (2 * x * np.sin(x) + x**2 * np.cos(x)), rtol=1e-13)
    np.testing.assert_array_equal(dout, 0.0)  # the seed is consumed


def test_forward_array_tangent(kernels):
    x = np.linspace(0.1, 2, 6)
    tx = np.linspace(-1, 1, 6)
    out, tout = np.zeros_like(x), np.zeros_like(x)
    df = ez.autodiff(kernels.square_sin, ez.Forward, ez.Dual, ez.Dual, ez.Const)
    assert df(out, tout, x, tx, 6) is None
    np.testing.assert_allclose(tout, tx * (2 * x * np.sin(x) + x**2 * np.cos(x)), rtol=1e-13)


def test_float32_arrays(kernels):
    x = np.linspace(-1, 1, 9, dtype=np.float32)
    dx = np.zeros_like(x)
    (s,) = ez.autodiff(kernels.sumsq_f, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)(
        x, dx, 9, 1.0
    )
    assert s == pytest.approx(float(np.sum(x.astype(np.float64) ** 2)), rel=1e-6)
    np.testing.assert_allclose(dx, 2 * x, rtol=1e-6)


def test_mixed_scalar_and_array_activities(kernels):
    x = np.linspace(0, 1, 4)
    w = np.array([1.0, 2.0, 3.0, 4.0])
    dw = np.zeros_like(w)
    df = ez.autodiff(
        kernels.weighted, ez.Reverse, ez.Const, ez.Duplicated, ez.Active, ez.Const, ez.Active
    )
    value, dscale = df(x, w, dw, 0.5, 4, 1.0)
    assert value == pytest.approx(float(np.sum(w * np.exp(0.5 * x))), rel=1e-14)
    np.testing.assert_allclose(dw, np.exp(0.5 * x), rtol=1e-14)
    assert dscale == pytest.approx(float(np.sum(w * x * np.exp(0.5 * x))), rel=1e-14)


def test_batched_reverse_shadows(kernels):
    x = np.linspace(0.1, 1, 5)
    dx = np.zeros((3, 5))
    df = ez.autodiff(kernels.energy, ez.Reverse, ez.Duplicated, ez.Const, ez.Active, width=3)
    (value,) = df(x, dx, 5, [1.0, 2.0, -1.0])
    assert value == pytest.approx(energy_np(x), rel=1e-14)
    g = 2 * x * np.sin(x) + x**2 * np.cos(x)
    np.testing.assert_allclose(dx, np.outer([1.0, 2.0, -1.0], g), rtol=1e-13)


def test_cpp_plain_names():
    m = ez.cpp(
        """
        #include <cmath>
        double cube(double x) { return x * x * x; }
        extern "C" double twice(double x) { return 2 * std::sin(x); }
        """
    )
    assert ez.autodiff(m.cube, ez.Reverse, ez.Active, ez.ActiveOnly)(2.0, 1.0)[1] == 12.0
    assert ez.grad(m.twice)(0.0) == pytest.approx(2.0)


def test_compile_error_has_diagnostics():
    with pytest.raises(ez.CompileError, match="undeclared identifier 'y'"):
        ez.c("double f(double x) { return y; }")


def test_grad_of_arrays(kernels):
    x = np.linspace(0.1, 1, 5)
    g = ez.grad(kernels.energy)(x, 5)
    np.testing.assert_allclose(g, 2 * x * np.sin(x) + x**2 * np.cos(x), rtol=1e-13)
