"""vjp's pullbacks differentiated again as the linear maps they are (jvp, vjp and the
Jacobians of vjp_fn, of its pullback, of vjp(grad(f))'s), and the Jacobian of
value_and_grad (the gradient and the Hessian's blocks), each against analytic values
and float64 central differences of f; and what stays refused says why."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numba import njit

import enzyme_py as ez

from reference import fd_jacobian

pytestmark = pytest.mark.needs_enzyme

X = np.array([0.5, -1.2, 2.0])
K = 1.5


@njit
def cubes(x, k):
    return k * np.sum(x**3)


@njit
def waves(x):
    return np.sin(x) * x[0]


@njit
def scale_into(x, a, out):
    for i in range(x.shape[0]):
        out[i] = a * x[i]


def cubes_jacobian(x, k):
    """d cubes / d (x, k): (3 k x^2, sum x^3)."""
    return 3.0 * k * x**2, float(np.sum(x**3))


def waves_jacobian(x):
    """d waves_i / d x_j = cos(x_i) x_0 [i == j] + sin(x_i) [j == 0]."""
    jac = np.diag(np.cos(x) * x[0])
    jac[:, 0] += np.sin(x)
    return jac


def test_jvp_of_a_pullback_is_the_pullback_of_the_tangent():
    _, vjp_fn = ez.vjp(cubes, X, K)
    jx, jk = cubes_jacobian(X, K)
    (vx, vk), (tx, tk) = ez.jvp(vjp_fn, (0.5,), (2.0,))
    np.testing.assert_allclose(vx, 0.5 * jx, rtol=1e-13)
    np.testing.assert_allclose(tx, 2.0 * jx, rtol=1e-13)
    assert (vk, tk) == pytest.approx((0.5 * jk, 2.0 * jk), rel=1e-13)
    # No tangent: zero.
    _, (zx, zk) = ez.jvp(vjp_fn, (0.5,), (None,))
    assert not np.any(zx) and zk == 0.0


@pytest.mark.parametrize("how", [ez.jacobian, ez.jacfwd, ez.jacrev])
def test_jacobian_of_a_pullback_is_the_transposed_jacobian(how):
    _, vjp_fn = ez.vjp(waves, X)
    c = np.array([1.0, -2.0, 0.5])
    (jt,) = how(vjp_fn)(c)
    assert jt.shape == X.shape + c.shape
    np.testing.assert_allclose(jt, waves_jacobian(X).T, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(jt, fd_jacobian(waves, X).T, rtol=1e-7, atol=1e-9)
    # argnums as a tuple: a tuple of one Jacobian, as JAX gives.
    (again,) = how(vjp_fn, argnums=(0,))(c)
    np.testing.assert_array_equal(again[0], jt)
    # A float cotangent: the entries are the gradient.
    _, scalar_fn = ez.vjp(cubes, X, K)
    gx, gk = how(scalar_fn)(1.0)
    jx, jk = cubes_jacobian(X, K)
    np.testing.assert_allclose(gx, jx, rtol=1e-13)
    assert gk == pytest.approx(jk, rel=1e-13)


def test_vjp_of_a_pullback_is_the_forward_derivative():
    # The pullback of c -> J^T c is u -> J u: the directional derivative of f.
    _, vjp_fn = ez.vjp(cubes, X, K)
    value, pull = ez.vjp(vjp_fn, 1.0)
    jx, jk = cubes_jacobian(X, K)
    np.testing.assert_allclose(value[0], jx, rtol=1e-13)
    u = (np.array([1.0, 0.0, -1.0]), 0.25)
    (ju,) = pull(u)
    assert ju == pytest.approx(float(jx @ u[0]) + jk * u[1], rel=1e-13)
    h = 1e-6
    fd = (cubes(X + h * u[0], K + h * u[1]) - cubes(X - h * u[0], K - h * u[1])) / (2 * h)
    assert ju == pytest.approx(fd, rel=1e-7)
    # An array-valued f: J u against central differences.
    _, waves_fn = ez.vjp(waves, X)
    _, pull = ez.vjp(waves_fn, np.ones(3))
    direction = np.array([0.3, 1.0, -0.7])
    (ju,) = pull((direction,))
    np.testing.assert_allclose(ju, waves_jacobian(X) @ direction, rtol=1e-12)
    np.testing.assert_allclose(ju, fd_jacobian(waves, X) @ direction, rtol=1e-7)


def test_the_pullback_of_a_pullback_differentiates_again():
    # vjp(pull) of the pullback's pullback: back to vjp_fn, in a 1-tuple.
    _, vjp_fn = ez.vjp(cubes, X, K)
    _, pull = ez.vjp(vjp_fn, 1.0)
    (ju,), pull_again = ez.vjp(pull, (X, 1.0))
    jx, jk = cubes_jacobian(X, K)
    assert ju == pytest.approx(float(jx @ X) + jk, rel=1e-13)
    ((px, pk),) = pull_again((2.0,))
    np.testing.assert_allclose(px, 2.0 * jx, rtol=1e-13)
    assert pk == pytest.approx(2.0 * jk, rel=1e-13)
    # jvp of the pullback of a pullback: linear again.
    _, (tangent,) = ez.jvp(pull, ((X, 1.0),), ((np.ones(3), 0.0),))
    assert tangent == pytest.approx(float(np.sum(jx)), rel=1e-13)


def test_a_function_writing_an_output_array():
    # scale_into: out = a x. vjp_fn takes one cotangent per primal; its pullback gives
    # J u per primal: (u_x, None for the scalar a, a u_x + u_a x).
    out = np.zeros(3)
    _, vjp_fn = ez.vjp(scale_into, X, K, out)
    c = np.array([1.0, 2.0, 3.0])
    cx, ca, _ = vjp_fn((None, None, c))
    np.testing.assert_allclose(cx, K * c, rtol=1e-14)
    assert ca == pytest.approx(float(X @ c), rel=1e-14)
    _, pull = ez.vjp(vjp_fn, (None, None, c))
    ux = np.array([0.1, 0.2, -0.3])
    ((tx, ta, tout),) = pull((ux, 2.0, None))
    np.testing.assert_allclose(tx, ux, rtol=1e-14)
    assert ta is None
    np.testing.assert_allclose(tout, K * ux + 2.0 * X, rtol=1e-14)


def test_the_pullback_of_a_gradient_is_the_hessian():
    # vjp(grad(f)): c -> H c, whose Jacobian is H and whose pullback is H u.
    _, hess_fn = ez.vjp(ez.grad(cubes), X, K)
    c = np.array([1.0, 0.5, -2.0])
    hxx, hkx = ez.jacobian(hess_fn)(c)
    np.testing.assert_allclose(hxx, np.diag(6.0 * K * X), rtol=1e-13)
    np.testing.assert_allclose(hkx, 3.0 * X**2, rtol=1e-13)
    np.testing.assert_allclose(hxx, fd_jacobian(lambda x: 3.0 * K * x**2, X), rtol=1e-7)
    _, pull = ez.vjp(hess_fn, c)
    ux, uk = np.array([1.0, -1.0, 0.5]), 2.0
    (hu,) = pull((ux, uk))
    np.testing.assert_allclose(hu, 6.0 * K * X * ux + 3.0 * X**2 * uk, rtol=1e-13)


def test_float32_pullbacks():
    x = X.astype(np.float32)
    _, vjp_fn = ez.vjp(waves, x)
    c = np.ones(3, dtype=np.float32)
    (jt,) = ez.jacobian(vjp_fn)(c)
    assert jt.dtype == np.float32
    np.testing.assert_allclose(jt, waves_jacobian(X).T, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("how", [ez.jacobian, ez.jacfwd, ez.jacrev])
def test_jacobian_of_value_and_grad_is_the_gradient_and_the_hessian(how):
    # JAX's jacobian(value_and_grad(f)): (grad f, the Hessian's blocks).
    g, h = how(ez.value_and_grad(cubes))(X, K)
    np.testing.assert_allclose(g, 3.0 * K * X**2, rtol=1e-13)
    np.testing.assert_allclose(h, np.diag(6.0 * K * X), rtol=1e-13)
    (gx, gk), ((hxx, hxk), (hkx, hkk)) = how(ez.value_and_grad(cubes, (0, 1)), (0, 1))(X, K)
    jx, jk = cubes_jacobian(X, K)
    np.testing.assert_allclose(gx, jx, rtol=1e-13)
    assert gk == pytest.approx(jk, rel=1e-13)
    np.testing.assert_allclose(hxx, np.diag(6.0 * K * X), rtol=1e-13)
    np.testing.assert_allclose(hxk, 3.0 * X**2, rtol=1e-13)
    np.testing.assert_allclose(hkx, 3.0 * X**2, rtol=1e-13)
    assert hkk == pytest.approx(0.0, abs=1e-12)
    # A float scalar argument: the first and second derivatives.
    d1, d2 = how(ez.value_and_grad(lambda_free))(0.7)
    assert d1 == pytest.approx(3 * 0.7**2 * math.sin(0.7) + 0.7**3 * math.cos(0.7), rel=1e-12)
    want = 6 * 0.7 * math.sin(0.7) + 6 * 0.7**2 * math.cos(0.7) - 0.7**3 * math.sin(0.7)
    assert d2 == pytest.approx(want, rel=1e-12)


@njit
def lambda_free(x):
    return x**3 * math.sin(x)


@pytest.mark.parametrize(
    ("make", "advice"),
    [
        (lambda fn: ez.grad(fn)(1.0), "returns a tuple"),
        (lambda fn: ez.value_and_grad(fn)(1.0), "returns a tuple"),
        (lambda fn: ez.hessian(fn)(1.0), "second derivatives are zero"),
        (lambda fn: ez.hvp(fn, (1.0,), (1.0,)), "ez.jvp\\(vjp_fn"),
        (lambda fn: ez.autodiff(fn, ez.Forward, ez.Dual, ez.Dual), "ez.jvp\\(vjp_fn"),
        (lambda fn: ez.jacobian(fn, output=1)(1.0), "leave output= out"),
        (lambda fn: ez.jacobian(fn, argnums=1)(1.0), "argnums is 0"),
        (lambda fn: ez.jacobian(fn)((1.0, 2.0)), "ez.jvp or ez.vjp"),
        (lambda fn: ez.jvp(fn, (1.0, 2.0), (1.0, 2.0)), "one argument"),
        (lambda fn: ez.vjp(fn, 1.0)[1](np.ones(3)), "a tuple of 2 entries"),
        (lambda fn: ez.jvp(ez.jacobian(ez.value_and_grad(cubes)), (X, K), (X, None)), "a pair"),
    ],
)
def test_what_stays_refused_says_what_to_write(make, advice):
    _, vjp_fn = ez.vjp(cubes, X, K)
    with pytest.raises(TypeError, match=advice):
        make(vjp_fn)
