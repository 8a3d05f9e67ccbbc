"""Second derivatives by composition, on Numba functions and scalar C functions:
grad(grad(f)), value_and_grad(grad(f)), vjp / jvp / jacfwd / jacrev of grad(f),
ez.autodiff of grad(f), reverse over a reverse derivative (forward over reverse under
the hood where the reverse derivative returns adjoints, Enzyme's own where it does
not), each against analytic values and float64 central differences; and every
composition that does not work raising a TypeError that says what to write."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from numba import njit

import enzyme_py as ez

from reference import fd_gradient, fd_scalar

pytestmark = pytest.mark.needs_enzyme

C_SOURCE = r"""
#include <math.h>
double cube_sin(double x) { return x * x * x * sin(x); }
double mixed(double x, double y) { return x * x * y + sin(x * y); }
double weighted_squares(const double *x, const double *w, int n) {
    double s = 0.0;
    for (int i = 0; i < n; ++i) s += w[i] * x[i] * x[i];
    return s;
}
double scaled_cubes(const double *x, double k, int n) {
    double s = 0.0;
    for (int i = 0; i < n; ++i) s += k * k * x[i] * x[i] * x[i];
    return s;
}
"""


@pytest.fixture(scope="module")
def m():
    return ez.c(C_SOURCE)


@njit
def cube_sin(x):
    return x**3 * math.sin(x)


@njit
def mixed(x, y):
    return x * x * y + math.sin(x * y)


@njit
def scaled_cubes(x, k):
    s = 0.0
    for i in range(x.shape[0]):
        s += k * k * x[i] ** 3
    return s


def d1(x):
    return 3 * x * x * math.sin(x) + x**3 * math.cos(x)


def d2(x):
    return 6 * x * math.sin(x) + 6 * x * x * math.cos(x) - x**3 * math.sin(x)


def mixed_hessian(x, y):
    hxx = 2 * y - y * y * math.sin(x * y)
    hxy = 2 * x + math.cos(x * y) - x * y * math.sin(x * y)
    hyy = -x * x * math.sin(x * y)
    return np.array([[hxx, hxy], [hxy, hyy]])


def mixed_gradient(x, y):
    return np.array([2 * x * y + y * math.cos(x * y), x * x + x * math.cos(x * y)])


X = np.array([0.5, 1.2, -0.7])
K = 1.5


@pytest.fixture(params=["numba", "c"])
def fns(request, m):
    """(cube_sin, mixed, scaled_cubes as f(x, k), extra trailing arguments)."""
    if request.param == "numba":
        return cube_sin, mixed, scaled_cubes, ()
    return m.cube_sin, m.mixed, m.scaled_cubes, (3,)


def test_grad_of_grad_of_a_scalar_function(fns):
    f, _, _, _ = fns
    for x in (0.7, -1.3, 2.0):
        assert ez.grad(ez.grad(f))(x) == pytest.approx(d2(x), rel=1e-12)
        assert ez.grad(ez.grad(f))(x) == pytest.approx(fd_scalar(ez.grad(f), x), rel=1e-7)
        value, second = ez.value_and_grad(ez.grad(f))(x)
        assert value == pytest.approx(d1(x), rel=1e-12)
        assert second == pytest.approx(d2(x), rel=1e-12)


def test_grad_of_grad_mixed_partials(fns):
    _, g, h, extra = fns
    x, y = 0.5, 0.7
    hess = mixed_hessian(x, y)
    for a in (0, 1):
        for b in (0, 1):
            assert ez.grad(ez.grad(g, a), b)(x, y) == pytest.approx(hess[a, b], rel=1e-12)
    both = ez.grad(ez.grad(g, 0), (0, 1))(x, y)
    assert both == pytest.approx(tuple(hess[0]), rel=1e-12)
    # d/dx (df/dk) of k^2 sum x^3 is 6 k x^2: an array, like x.
    got = ez.grad(ez.grad(h, 1), 0)(X, K, *extra)
    np.testing.assert_allclose(got, 6 * K * X**2, rtol=1e-12)
    fd = fd_gradient(lambda z: ez.grad(h, 1)(z, K, *extra), X)
    np.testing.assert_allclose(got, fd, rtol=1e-6)


def test_vjp_of_grad(fns):
    _, g, h, extra = fns
    x, y = 0.5, 0.7
    value, vjp_fn = ez.vjp(ez.grad(g, (0, 1)), x, y)
    assert value == pytest.approx(tuple(mixed_gradient(x, y)), rel=1e-12)
    c = np.array([0.3, -2.0])
    assert vjp_fn((c[0], c[1])) == pytest.approx(tuple(mixed_hessian(x, y) @ c), rel=1e-12)
    # An array argument: the pullback of c is (H_xx c, H_kx c) = (6 k^2 x c, 6 k x^2 . c).
    gx, vjp_fn = ez.vjp(ez.grad(h), X, K, *extra)
    np.testing.assert_allclose(gx, 3 * K * K * X**2, rtol=1e-12)
    c = np.array([1.0, 0.5, -2.0])
    dx, dk, *rest = vjp_fn(c)
    np.testing.assert_allclose(dx, 6 * K * K * X * c, rtol=1e-12)
    assert dk == pytest.approx(np.sum(6 * K * X**2 * c), rel=1e-12)
    assert all(r is None for r in rest)
    fd = fd_gradient(lambda z: float(np.dot(ez.grad(h)(z, K, *extra), c)), X)
    np.testing.assert_allclose(dx, fd, rtol=1e-6)
    # value_and_grad: the pullback of (c_value, c) adds c_value times the gradient.
    _, vjp_fn = ez.vjp(ez.value_and_grad(h), X, K, *extra)
    dx, dk, *_ = vjp_fn((2.0, c))
    np.testing.assert_allclose(dx, 6 * K * K * X * c + 2.0 * 3 * K * K * X**2, rtol=1e-12)
    assert dk == pytest.approx(np.sum(6 * K * X**2 * c) + 2.0 * 2 * K * np.sum(X**3), rel=1e-12)
    with pytest.raises(ValueError, match="shape"):
        vjp_fn((1.0, np.ones(2)))


def test_jvp_of_grad_any_argnums(fns):
    _, g, h, extra = fns
    x, y = 0.5, 0.7
    hess = mixed_hessian(x, y)
    grad_y, tangent = ez.jvp(ez.grad(g, 1), (x, y), (1.0, 0.25))
    assert grad_y == pytest.approx(mixed_gradient(x, y)[1], rel=1e-12)
    assert tangent == pytest.approx(hess[1] @ [1.0, 0.25], rel=1e-12)
    grads, tangents = ez.jvp(ez.grad(g, (0, 1)), (x, y), (1.0, None))
    assert grads == pytest.approx(tuple(mixed_gradient(x, y)), rel=1e-12)
    assert tangents == pytest.approx(tuple(hess[:, 0]), rel=1e-12)
    (value, gk), (dvalue, dgk) = ez.jvp(
        ez.value_and_grad(h, 1), (X, K, *extra), (np.ones(3), 0.5, *[None] * len(extra))
    )
    assert value == pytest.approx(K * K * np.sum(X**3), rel=1e-12)
    assert gk == pytest.approx(2 * K * np.sum(X**3), rel=1e-12)
    assert dvalue == pytest.approx(np.sum(3 * K * K * X**2) + 0.5 * 2 * K * np.sum(X**3))
    assert dgk == pytest.approx(np.sum(6 * K * X**2) + 0.5 * 2 * np.sum(X**3), rel=1e-12)


def test_jacobians_of_grad_with_scalars_and_other_argnums(fns):
    _, g, h, extra = fns
    x, y = 0.5, 0.7
    hess = mixed_hessian(x, y)
    assert ez.jacfwd(ez.grad(g, 0), 1)(x, y) == pytest.approx(hess[0, 1], rel=1e-12)
    blocks = ez.jacrev(ez.grad(g, (0, 1)), (0, 1))(x, y)
    np.testing.assert_allclose(np.array(blocks, dtype=float), hess, rtol=1e-12)
    np.testing.assert_allclose(ez.jacfwd(ez.grad(h, 1), 0)(X, K, *extra), 6 * K * X**2)
    xk = ez.jacrev(ez.grad(h, 0), 1)(X, K, *extra)
    np.testing.assert_allclose(xk, 6 * K * X**2, rtol=1e-12)


def test_autodiff_of_grad(fns):
    f, _, h, extra = fns
    x = 0.7
    fwd = ez.autodiff(ez.grad(f), ez.Forward, ez.Dual, ez.Dual)
    assert fwd(x, 2.0) == pytest.approx((d1(x), 2.0 * d2(x)), rel=1e-12)
    assert ez.autodiff(ez.grad(f), ez.Forward, ez.Dual, ez.DualOnly)(x, 1.0) == pytest.approx(
        d2(x), rel=1e-12
    )
    rev = ez.autodiff(ez.grad(f), ez.Reverse, ez.Active, ez.ActiveOnly)
    primal, dx = rev(x, 3.0)
    assert primal is None and dx == pytest.approx(3.0 * d2(x), rel=1e-12)
    consts = (ez.Const,) * len(extra)
    # Arrays: forward gives (gradient, H v); reverse adds H c into the shadow.
    v = np.array([1.0, -1.0, 0.5])
    g, hv = ez.autodiff(ez.grad(h), ez.Forward, ez.Dual, ez.Const, *consts, ez.Dual)(
        X, v, K, *extra
    )
    np.testing.assert_allclose(g, 3 * K * K * X**2, rtol=1e-12)
    np.testing.assert_allclose(hv, 6 * K * K * X * v, rtol=1e-12)
    dx = np.ones(3)
    rev = ez.autodiff(ez.grad(h), ez.Reverse, ez.Duplicated, ez.Active, *consts, ez.DuplicatedOnly)
    _, dk = rev(X, dx, K, *extra, v)
    np.testing.assert_allclose(dx, 1.0 + 6 * K * K * X * v, rtol=1e-12)
    assert dk == pytest.approx(np.sum(6 * K * X**2 * v), rel=1e-12)


def test_reverse_over_reverse_of_scalar_functions(m):
    x = 0.7
    for f in (m.cube_sin, cube_sin):
        df = ez.autodiff(f, ez.Reverse, ez.Active, ez.ActiveOnly)
        ddf = ez.autodiff(df, ez.Reverse, ez.Active, ez.Const, ez.ActiveOnly)
        for seed, outer in ((1.0, 1.0), (2.0, 0.5), (1.0, -3.0)):
            primal, dx = ddf(x, seed, outer)
            assert primal is None and dx == pytest.approx(seed * outer * d2(x), rel=1e-12)
        # The seed Active too: its adjoint is the gradient times the outer seed.
        _, dx, dseed = ez.autodiff(df, ez.Reverse, ez.Active, ez.Active, ez.Active)(x, 2.0, 0.5)
        assert (dx, dseed) == pytest.approx((d2(x), 0.5 * d1(x)), rel=1e-12)
        assert dx == pytest.approx(fd_scalar(lambda z, df=df: 2.0 * 0.5 * df(z, 1.0)[1], x))
    # Two variables, the inner return Active (primal first): one seed per value.
    xy = (0.5, 0.7)
    hess = mixed_hessian(*xy)
    for f in (m.mixed, mixed):
        df = ez.autodiff(f, ez.Reverse, ez.Active, ez.Active, ez.Active)
        ddf = ez.autodiff(df, ez.Reverse, ez.Active, ez.Active, ez.Const, ez.Active)
        primal, dx, dy = ddf(*xy, 1.0, (0.0, 1.0, -2.0))
        assert primal == pytest.approx(df(*xy, 1.0), rel=1e-15)
        assert (dx, dy) == pytest.approx(tuple(hess @ [1.0, -2.0]), rel=1e-12)
        # A seed on the primal adds the gradient.
        _, dx, dy = ddf(*xy, 1.0, (1.0, 0.0, 0.0))
        assert (dx, dy) == pytest.approx(tuple(mixed_gradient(*xy)), rel=1e-12)


def test_reverse_over_reverse_of_array_functions_uses_enzymes_own(m):
    # The reverse derivative returns nothing (no Active scalar): Enzyme differentiates
    # it in reverse mode itself; the shadow's shadow carries the cotangent.
    df = ez.autodiff(m.scaled_cubes, ez.Reverse, ez.Duplicated, ez.Const, ez.Const, ez.ActiveOnly)
    ddf = ez.autodiff(df, ez.Reverse, ez.Duplicated, ez.Duplicated, ez.Const, ez.Const, ez.Const)
    c = np.array([1.0, 0.5, -2.0])
    x, sx, dx = X.copy(), np.zeros(3), np.zeros(3)
    ddf(x, sx, dx, c.copy(), K, 3, 1.0)
    np.testing.assert_allclose(sx, 6 * K * K * X * c, rtol=1e-12)
    np.testing.assert_allclose(dx, 3 * K * K * X**2, rtol=1e-12)


def test_reverse_over_reverse_refusals(m):
    df = ez.autodiff(m.mixed, ez.Reverse, ez.Active, ez.Const, ez.ActiveOnly)
    with pytest.raises(ez.ActivityError, match="Const in the first derivative"):
        ez.autodiff(df, ez.Reverse, ez.Active, ez.Active, ez.Const, ez.Active)
    with pytest.raises(ez.ActivityError, match="needs 4 activities"):
        ez.autodiff(df, ez.Reverse, ez.Active, ez.Const, ez.Active)
    with pytest.raises(ez.ActivityError, match="width="):
        ez.autodiff(df, ez.Reverse, ez.Active, ez.Const, ez.Const, ez.Active, width=2)


@pytest.mark.parametrize(
    ("make", "advice"),
    [
        (lambda: ez.grad(ez.grad(scaled_cubes))(X, K), "ez.hessian"),
        (lambda: ez.grad(ez.value_and_grad(cube_sin))(0.5), "returns a pair"),
        (lambda: ez.grad(ez.grad(mixed, (0, 1)))(0.5, 0.7), "tuple of gradients"),
        (lambda: ez.grad(ez.jacobian(scaled_cubes))(X, K), "ez.hessian"),
        (lambda: ez.hessian(ez.grad(scaled_cubes))(X, K), "ez.jacobian\\(ez.hessian"),
        (lambda: ez.hvp(ez.grad(scaled_cubes), (X, K), (X, None)), "argument 0 is an array"),
        (lambda: ez.autodiff(ez.vjp(cube_sin, 0.5)[1], ez.Reverse, ez.Active), "ez.jvp"),
        (lambda: ez.autodiff(ez.hessian(scaled_cubes), ez.Forward, ez.Dual), "ez.jacobian"),
        (lambda: ez.autodiff(ez.grad(mixed, (0, 1)), ez.Forward, ez.Dual), "one argument a"),
        (lambda: ez.autodiff(ez.grad(cube_sin), ez.Forward, ez.Dual, ez.Dual, width=2), "width"),
        (lambda: ez.autodiff(ez.grad(cube_sin), ez.Reverse, ez.Dual, ez.Active), "takes Const"),
    ],
)
def test_what_does_not_compose_says_what_to_write(make, advice):
    with pytest.raises(TypeError, match=advice):
        make()


def test_second_derivatives_pickle():
    made = ez.grad(ez.grad(mixed, 1), 0)
    again = pickle.loads(pickle.dumps(made))
    assert repr(again) == repr(made)
    assert again(0.5, 0.7) == pytest.approx(mixed_hessian(0.5, 0.7)[1, 0], rel=1e-12)


def test_helpers_of_raw_derivatives(m):
    # ez.grad of a reverse derivative (reverse over reverse, by forward over reverse)
    # and of a forward derivative (Enzyme's reverse over forward).
    x = 0.7
    for f in (m.cube_sin, cube_sin):
        df = ez.autodiff(f, ez.Reverse, ez.Active, ez.ActiveOnly)
        assert ez.grad(df)(x, 1.0) == pytest.approx(d2(x), rel=1e-12)
        fwd = ez.autodiff(f, ez.Forward, ez.Dual, ez.DualOnly)
        assert ez.grad(fwd)(x, 1.0) == pytest.approx(d2(x), rel=1e-12)
        primal, dx = ez.autodiff(fwd, ez.Reverse, ez.Active, ez.Const, ez.ActiveOnly)(x, 1.0, 2.0)
        assert primal is None and dx == pytest.approx(2.0 * d2(x), rel=1e-12)


@njit
def weighted_squares(x, w):
    s = 0.0
    for i in range(x.shape[0]):
        s += w[i] * x[i] * x[i]
    return s


@pytest.mark.parametrize("lang", ["numba", "c"])
def test_hvp_takes_the_tangent_of_a_read_only_array_outside_argnums(m, lang):
    # Regression: the tangent u of w (an array f only reads, not in argnums) was
    # dropped, silently giving 2 w v instead of 2 w v + 2 x u.
    f, extra = (weighted_squares, ()) if lang == "numba" else (m.weighted_squares, (3,))
    w, v, u = np.array([2.0, 3.0, 0.5]), np.array([1.0, -1.0, 0.5]), np.array([0.3, 0.2, -1.0])
    nones = (None,) * len(extra)
    expected = 2 * w * v + 2 * X * u
    np.testing.assert_allclose(ez.hvp(f, (X, w, *extra), (v, u, *nones))[1], expected)
    np.testing.assert_allclose(ez.jvp(ez.grad(f), (X, w, *extra), (v, u, *nones))[1], expected)
    fd = fd_gradient(
        lambda t: float(np.dot(ez.grad(f)(X + t[0] * v, w + t[0] * u, *extra), [1, 0, 0])),
        np.zeros(1),
    )
    assert expected[0] == pytest.approx(fd[0], rel=1e-6)


@pytest.mark.parametrize("lang", ["numba", "c"])
def test_reverse_over_reverse_with_arrays_and_scalars(m, lang):
    # The reverse derivative adds into dx and returns dk: the outer seeds are the
    # shadow of dx (c_x) and the seed of dk (c_k); the adjoints are H (c_x, c_k).
    f, extra = (scaled_cubes, ()) if lang == "numba" else (m.scaled_cubes, (3,))
    consts = (ez.Const,) * len(extra)
    df = ez.autodiff(f, ez.Reverse, ez.Duplicated, ez.Active, *consts, ez.ActiveOnly)
    ddf = ez.autodiff(
        df, ez.Reverse, ez.Duplicated, ez.Duplicated, ez.Active, *consts, ez.Const, ez.ActiveOnly
    )
    cx, ck = np.array([1.0, 0.5, -2.0]), 0.7
    sx, dx, sdx = np.zeros(3), np.zeros(3), cx.copy()
    primal, dk = ddf(X, sx, dx, sdx, K, *extra, 1.0, ck)
    assert primal is None
    np.testing.assert_allclose(sx, 6 * K * K * X * cx + 6 * K * X**2 * ck, rtol=1e-12)
    assert dk == pytest.approx(np.sum(6 * K * X**2 * cx) + 2 * np.sum(X**3) * ck, rel=1e-12)
    np.testing.assert_allclose(dx, 3 * K * K * X**2, rtol=1e-12)  # df's own output
    np.testing.assert_array_equal(sdx, cx)  # the shadow's shadow: its own adjoint


def test_second_derivatives_are_not_differentiated_again(m):
    df = ez.autodiff(m.cube_sin, ez.Reverse, ez.Active, ez.ActiveOnly)
    ddf = ez.autodiff(df, ez.Reverse, ez.Active, ez.Const, ez.ActiveOnly)
    with pytest.raises(ez.ActivityError, match="ez.Forward"):
        ez.autodiff(ddf, ez.Reverse, ez.Active, ez.Const, ez.Const, ez.ActiveOnly)
    with pytest.raises(TypeError, match="third derivatives"):
        ez.grad(ddf)(0.5, 1.0, 1.0)
    made = ez.autodiff(ez.grad(cube_sin), ez.Forward, ez.Dual, ez.Dual)
    with pytest.raises(TypeError, match="third derivatives"):
        ez.autodiff(made, ez.Forward, ez.Dual, ez.Const, ez.Dual)
    with pytest.raises(TypeError, match="third derivatives"):
        ez.vjp(made, 0.5, 1.0)
