"""Compositions: jvp(grad(f)) (JAX's Hessian-vector product) and autodiff of a Numba
derivative that was never called (specialised at its first call), against analytic
Hessian-vector products."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numba import njit

import enzyme_py as ez

pytestmark = pytest.mark.needs_enzyme


def cubic_sin(x, k):
    s = 0.0
    for i in range(x.shape[0]):
        s += k * x[i] ** 3 + math.sin(x[i] * x[(i + 1) % x.shape[0]])
    return s


def analytic(x, k):
    n = x.shape[0]
    nxt, prv = np.roll(x, -1), np.roll(x, 1)
    g = 3 * k * x**2 + nxt * np.cos(x * nxt) + prv * np.cos(prv * x)
    h = np.diag(6 * k * x - nxt**2 * np.sin(x * nxt) - prv**2 * np.sin(prv * x))
    for i in range(n):
        j = (i + 1) % n
        h[i, j] += math.cos(x[i] * x[j]) - x[i] * x[j] * math.sin(x[i] * x[j])
        h[j, i] = h[i, j]
    # d g / d k
    return g, h, 3 * x**2


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_jvp_of_grad_is_the_hessian_vector_product(dtype):
    f = njit(cubic_sin)
    x = np.linspace(0.2, 1.4, 5).astype(dtype)
    v = np.linspace(1.0, -1.0, 5).astype(dtype)
    g, h, dg_dk = analytic(x.astype(np.float64), 2.0)
    tol = 2e-5 if dtype == np.float32 else 1e-12
    grad, hv = ez.jvp(ez.grad(f), (x, 2.0), (v, None))
    np.testing.assert_allclose(grad, g, rtol=tol, atol=tol)
    np.testing.assert_allclose(hv, h @ v.astype(np.float64), rtol=tol, atol=tol)
    # A tangent of k adds the mixed derivative, as in JAX.
    _, hv = ez.jvp(ez.grad(f), (x, 2.0), (v, 0.5))
    np.testing.assert_allclose(hv, h @ v.astype(np.float64) + 0.5 * dg_dk, rtol=tol, atol=tol)
    assert ez.jvp(ez.grad(f, argnums=(0,)), (x, 2.0), (v, None))[1][0].shape == (5,)
    # Other argnums compose too: d/dk's tangent along v is dg/dk . v.
    gk, dgk = ez.jvp(ez.grad(f, argnums=1), (x, 2.0), (v, None))
    assert gk == pytest.approx(float(np.sum(x.astype(np.float64) ** 3)), rel=tol)
    assert dgk == pytest.approx(float(dg_dk @ v.astype(np.float64)), rel=tol, abs=tol)
    (value, grad), (dvalue, hv) = ez.jvp(ez.value_and_grad(f), (x, 2.0), (v, None))
    assert value == pytest.approx(float(f(x, 2.0)), rel=tol)
    assert dvalue == pytest.approx(float(g @ v.astype(np.float64)), rel=tol, abs=tol)
    np.testing.assert_allclose(hv, h @ v.astype(np.float64), rtol=tol, atol=tol)


def test_forward_over_a_numba_derivative_never_called():
    f = njit(cubic_sin)  # a fresh dispatcher: no signature compiled yet
    df = ez.autodiff(f, ez.Reverse, ez.Duplicated, ez.Const, ez.ActiveOnly)
    hvp = ez.autodiff(df, ez.Forward, ez.Dual, ez.Dual, ez.Const, ez.Const)
    x = np.linspace(0.2, 1.4, 5)
    g, h, _ = analytic(x, 2.0)
    for j in range(5):
        v = np.eye(5)[j]
        dx, hv = np.zeros(5), np.zeros(5)
        hvp(x, v, dx, hv, 2.0, 1.0)
        np.testing.assert_allclose(dx, g, rtol=1e-12)
        np.testing.assert_allclose(hv, h[:, j], rtol=1e-12, atol=1e-13)
    # float32 arguments: a specialisation of their own, at their first call.
    x32, v32 = x.astype(np.float32), np.ones(5, np.float32)
    dx, hv = np.zeros(5, np.float32), np.zeros(5, np.float32)
    hvp(x32, v32, dx, hv, 2.0, 1.0)
    np.testing.assert_allclose(hv, h @ np.ones(5), rtol=2e-5)
    assert "Forward" in repr(hvp)
    with pytest.raises(ez.ActivityError, match="first call"):
        hvp.as_function()


@pytest.mark.parametrize("how", ["jacfwd", "jacrev"])
def test_jacobian_of_grad_is_the_hessian(how):
    f = njit(cubic_sin)
    x = np.linspace(0.2, 1.4, 5)
    _, h, dg_dk = analytic(x, 2.0)
    jac = getattr(ez, how)
    np.testing.assert_allclose(jac(ez.grad(f))(x, 2.0), h, rtol=1e-12, atol=1e-13)
    blocks = jac(ez.grad(f, argnums=(0,)), argnums=(0,))(x, 2.0)
    np.testing.assert_allclose(blocks[0][0], h, rtol=1e-12, atol=1e-13)
    # With respect to the scalar k: the mixed block d(grad_x)/dk = 3 x^2.
    np.testing.assert_allclose(jac(ez.grad(f), argnums=1)(x, 2.0), dg_dk, rtol=1e-12)
