"""grad / value_and_grad with has_aux=True, as JAX's: f returns (value, aux); the
gradient is the value's alone and aux comes back from the same reverse pass.
Checked against analytic gradients and float64 central differences of the value."""

from __future__ import annotations

import math

import numba
import numpy as np
import pytest

import enzyme_py as ez
from enzyme_py._transforms import NotComposable

pytestmark = pytest.mark.needs_enzyme


@numba.njit
def fit(w, b, x, y):
    # Least squares with its residuals (an array) as aux.
    r = np.empty(x.shape[0])
    for i in range(x.shape[0]):
        r[i] = w * x[i] + b - y[i]
    return 0.5 * np.sum(r * r), r


@numba.njit
def energy_and_steps(x, scale=2.0):
    # A float64 array argument, an integer aux (a count), a default.
    e = 0.0
    steps = 0
    for i in range(x.shape[0]):
        e += scale * math.sin(x[i]) * x[i]
        steps += 1
    return e, steps


@numba.njit
def with_flags(x):
    return np.sum(x**3), x > 0.0  # a boolean array as aux


def central(f, args, i, h=1e-6):
    x = args[i]
    if not isinstance(x, np.ndarray):
        up = list(args)
        down = list(args)
        up[i], down[i] = x + h, x - h
        return (f(*up) - f(*down)) / (2 * h)
    g = np.zeros_like(x)
    for k in range(x.size):
        up = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
        down = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
        up[i].flat[k] += h
        down[i].flat[k] -= h
        g.flat[k] = (f(*up) - f(*down)) / (2 * h)
    return g


rng = np.random.default_rng(5)
X, Y = rng.normal(size=7), rng.normal(size=7)


def value_of(f):
    return lambda *a: f(*a)[0]


def test_grad_with_aux_returns_the_gradient_and_aux():
    (gw, gb), residuals = ez.grad(fit, argnums=(0, 1), has_aux=True)(1.5, -0.25, X, Y)
    expected_r = 1.5 * X - 0.25 - Y
    np.testing.assert_allclose(residuals, expected_r, rtol=1e-14)
    assert gw == pytest.approx(float(np.sum(expected_r * X)), rel=1e-12)
    assert gb == pytest.approx(float(np.sum(expected_r)), rel=1e-12)
    assert gw == pytest.approx(central(value_of(fit), (1.5, -0.25, X, Y), 0), rel=1e-7)
    gx, r2 = ez.grad(fit, argnums=2, has_aux=True)(1.5, -0.25, X, Y)
    np.testing.assert_allclose(gx, expected_r * 1.5, rtol=1e-12)
    np.testing.assert_allclose(r2, expected_r, rtol=1e-14)


def test_value_and_grad_with_aux_nests_as_jax():
    x = np.linspace(0.1, 2.0, 5)
    (value, steps), g = ez.value_and_grad(energy_and_steps, has_aux=True)(x)
    assert steps == 5 and isinstance(steps, (int, np.integer))
    assert value == pytest.approx(float(np.sum(2.0 * np.sin(x) * x)), rel=1e-13)
    np.testing.assert_allclose(g, 2.0 * (np.cos(x) * x + np.sin(x)), rtol=1e-12)
    np.testing.assert_allclose(g, central(value_of(energy_and_steps), (x,), 0), rtol=1e-6)
    (value3, _), g3 = ez.value_and_grad(energy_and_steps, has_aux=True)(x, scale=3.0)
    assert value3 == pytest.approx(1.5 * value, rel=1e-13)
    np.testing.assert_allclose(g3, 1.5 * g, rtol=1e-13)
    np.testing.assert_array_equal(x, np.linspace(0.1, 2.0, 5))  # not written


def test_a_boolean_aux():
    x = np.array([-1.0, 0.5, 2.0])
    g, positive = ez.grad(with_flags, has_aux=True)(x)
    np.testing.assert_array_equal(positive, [False, True, True])
    np.testing.assert_allclose(g, 3.0 * x**2, rtol=1e-14)


@numba.njit
def just_value(x):
    return np.sum(x * x)


@numba.njit
def int_first(x):
    return 3, x * 2.0


def test_what_has_aux_refuses():
    x = np.array([1.0, 2.0])
    with pytest.raises(TypeError, match=r"must return a pair \(value, aux\).*returns float64"):
        ez.grad(just_value, has_aux=True)(x)
    with pytest.raises(TypeError, match="whose value is a float"):
        ez.grad(int_first, has_aux=True)(x)
    c = ez.c("double sq(const double *x, int n) { return x[0] * x[0]; }")
    with pytest.raises(TypeError, match="only Numba functions return"):
        ez.grad(c.sq, has_aux=True)(x, 2)
    with pytest.raises(TypeError, match="has_aux is True or False"):
        ez.grad(fit, has_aux="yes")
    with pytest.raises(NotComposable, match="has_aux=True is not differentiated again"):
        ez.grad(ez.grad(fit, has_aux=True))(1.0, 0.0, X, Y)
    with pytest.raises(NotComposable, match="has_aux=True is not differentiated again"):
        ez.jacobian(ez.grad(fit, has_aux=True))(1.0, 0.0, X, Y)


@numba.njit
def field(x, k):
    # An array value (R^3 -> R^2) with a float scalar aux.
    out = np.empty(2)
    out[0] = k * x[0] * x[1]
    out[1] = math.sin(x[2]) * x[0]
    return out, np.sum(x)


@pytest.mark.parametrize("helper", [ez.jacobian, ez.jacfwd, ez.jacrev])
def test_jacobians_with_aux(helper):
    x = np.array([0.5, -1.2, 0.8])
    jac, total = helper(field, has_aux=True)(x, 2.0)
    assert total == pytest.approx(float(np.sum(x)), rel=1e-15)
    expected = np.array(
        [[2.0 * x[1], 2.0 * x[0], 0.0], [math.sin(x[2]), 0.0, x[0] * math.cos(x[2])]]
    )
    np.testing.assert_allclose(jac, expected, rtol=1e-14, atol=1e-15)
    (jx, jk), _ = helper(field, argnums=(0, 1), has_aux=True)(x, k=2.0)
    np.testing.assert_allclose(jx, expected, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(jk, [x[0] * x[1], 0.0], rtol=1e-14)


def test_hessian_with_aux():
    # 0.5 |w x + b - y|^2: d2/dx2 = w^2 I, d2/dx dy = -w I, d2/dy2 = I.
    (hxx, hxy), (hyx, hyy) = ez.hessian(fit, argnums=(2, 3), has_aux=True)(1.5, -0.25, X, Y)[0]
    np.testing.assert_allclose(hxx, 1.5**2 * np.eye(7), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(hxy, -1.5 * np.eye(7), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(hyx, hxy.T, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(hyy, np.eye(7), rtol=1e-12, atol=1e-14)
    hx, residuals = ez.hessian(fit, argnums=2, has_aux=True)(1.5, -0.25, X, Y)
    np.testing.assert_allclose(hx, hxx, rtol=1e-15)
    np.testing.assert_allclose(residuals, 1.5 * X - 0.25 - Y, rtol=1e-14)


@pytest.mark.parametrize("helper", [ez.jacobian, ez.jacfwd, ez.jacrev])
def test_jacobian_of_a_gradient_with_aux_is_its_hessian_blocks_and_aux(helper):
    # JAX's jacfwd(grad(f, has_aux=True), has_aux=True): d/d(x, y) of d value / dx.
    g = ez.grad(fit, argnums=2, has_aux=True)
    (hxx, hxy), residuals = helper(g, argnums=(2, 3), has_aux=True)(1.5, -0.25, X, Y)
    np.testing.assert_allclose(hxx, 1.5**2 * np.eye(7), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(hxy, -1.5 * np.eye(7), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(residuals, 1.5 * X - 0.25 - Y, rtol=1e-14)


@numba.njit
def quartic_and_double(t, a):
    return a * t**4, 2.0 * t


def test_hessian_of_a_gradient_with_aux_is_the_third_derivative_and_aux():
    # d/dt (a t^4) = 4 a t^3; its Hessian in (t, a): ((24 a t, 12 t^2), (12 t^2, 0)).
    g = ez.grad(quartic_and_double, has_aux=True)
    h, doubled = ez.hessian(g, argnums=(0, 1), has_aux=True)(2.0, 3.0)
    np.testing.assert_allclose(np.array(h), [[144.0, 48.0], [48.0, 0.0]], rtol=1e-14)
    assert doubled == 4.0


def test_jacobian_with_aux_refusals():
    x = np.array([0.5, -1.2, 0.8])
    with pytest.raises(TypeError, match="give one of them"):
        ez.jacobian(field, output=1, has_aux=True)
    with pytest.raises(TypeError, match=r"must return a pair \(value, aux\)"):
        ez.jacfwd(just_value, has_aux=True)(x)
    with pytest.raises(NotComposable, match="has_aux=True is not differentiated again"):
        ez.jacobian(ez.jacobian(field, has_aux=True))(x, 2.0)


def test_has_aux_results_pickle():
    import pickle

    for made in (
        ez.grad(fit, argnums=(0, 1), has_aux=True),
        ez.jacrev(field, has_aux=True),
    ):
        again = pickle.loads(pickle.dumps(made))
        args = (1.5, -0.25, X, Y) if made.f is fit else (np.array([0.5, -1.2, 0.8]), 2.0)
        first, second = made(*args), again(*args)
        np.testing.assert_allclose(np.asarray(first[0]), np.asarray(second[0]), rtol=1e-15)
        np.testing.assert_allclose(np.asarray(first[1]), np.asarray(second[1]), rtol=1e-15)


def test_jvp_and_vjp_with_aux():
    x, tx = np.array([0.5, -1.2, 0.8]), np.array([1.0, 0.5, -2.0])
    value, tangent, total = ez.jvp(field, (x, 2.0), (tx, 0.0), has_aux=True)
    jac = ez.jacobian(field, has_aux=True)(x, 2.0)[0]
    assert total == pytest.approx(float(np.sum(x)), rel=1e-15)
    np.testing.assert_allclose(value, [2.0 * x[0] * x[1], math.sin(x[2]) * x[0]], rtol=1e-15)
    np.testing.assert_allclose(tangent, jac @ tx, rtol=1e-14)

    value, vjp_fn, total = ez.vjp(field, x, 2.0, has_aux=True)
    assert total == pytest.approx(float(np.sum(x)), rel=1e-15)
    c = np.array([0.3, -1.0])
    dx, dk = vjp_fn(c)
    np.testing.assert_allclose(dx, c @ jac, rtol=1e-14)
    assert dk == pytest.approx(c[0] * x[0] * x[1], rel=1e-14)

    energy, vjp_fn, steps = ez.vjp(energy_and_steps, x, has_aux=True)  # an integer aux
    assert energy == pytest.approx(float(np.sum(2.0 * np.sin(x) * x)), rel=1e-13)
    assert steps == 3
    (g,) = vjp_fn(1.0)
    np.testing.assert_allclose(g, 2.0 * (np.cos(x) * x + np.sin(x)), rtol=1e-12)
    with pytest.raises(TypeError, match=r"must return a pair \(value, aux\)"):
        ez.vjp(just_value, x, has_aux=True)
    with pytest.raises(TypeError, match=r"must return a pair \(value, aux\)"):
        ez.jvp(just_value, (x,), (x,), has_aux=True)
