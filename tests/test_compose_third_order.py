"""Third derivatives by composing the helpers (forward over forward over reverse):
grad(grad(grad(f))), jvp of a second derivative (T v), jacobian / jacfwd / jacrev of a
second derivative (the blocks), hessian and hvp of grad(f, a), and Jacobians of
scalar-valued functions differentiated again as gradients (jacfwd(jacrev(f)), ...);
on Numba and C functions, in float64 and float32, against analytic third derivatives
and float64 central differences of the second derivative. What stays refused raises
NotComposable (a TypeError) saying what to write."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from numba import njit

import enzyme_py as ez
from enzyme_py._transforms import NotComposable

from reference import fd_gradient, fd_scalar

pytestmark = pytest.mark.needs_enzyme

C_SOURCE = r"""
#include <math.h>
double cube_sin(double x) { return x * x * x * sin(x); }
double mixed(double x, double y) { return x * x * y + sin(x * y); }
double chain(const double *x, double k, int n) {
    double s = 0.0;
    for (int i = 0; i < n; ++i) s += k * k * x[i] * x[i] * x[i] * x[i];
    for (int i = 0; i + 1 < n; ++i) s += x[i] * x[i] * x[i + 1];
    return s;
}
float chain32(const float *x, float k, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; ++i) s += k * k * x[i] * x[i] * x[i] * x[i];
    for (int i = 0; i + 1 < n; ++i) s += x[i] * x[i] * x[i + 1];
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
def chain(x, k):
    s = 0.0
    for i in range(x.shape[0]):
        s += k * k * x[i] ** 4
    for i in range(x.shape[0] - 1):
        s += x[i] * x[i] * x[i + 1]
    return s


@njit
def vector(x):
    return x * x


def d2(x):
    return 6 * x * math.sin(x) + 6 * x * x * math.cos(x) - x**3 * math.sin(x)


def d3(x):
    return 6 * math.sin(x) + 18 * x * math.cos(x) - 9 * x * x * math.sin(x) - x**3 * math.cos(x)


def mixed_second(x, y):
    """d^2 f / dx dy of x^2 y + sin(x y)."""
    return 2 * x + math.cos(x * y) - x * y * math.sin(x * y)


def mixed_third(x, y):
    """(d/dx, d/dy) of d^2 f / dx dy."""
    c, s = math.cos(x * y), math.sin(x * y)
    return 2 - 2 * y * s - x * y * y * c, -2 * x * s - x * x * y * c


def chain_hessian(x, k):
    n = x.size
    h = np.diag(12 * k * k * x**2)
    for i in range(n - 1):
        h[i, i] += 2 * x[i + 1]
        h[i, i + 1] += 2 * x[i]
        h[i + 1, i] += 2 * x[i]
    return h


def chain_third(x, k):
    """T[i, j, l] = d^3 f / dx_i dx_j dx_l, and d/dk of the Hessian."""
    n = x.size
    t = np.zeros((n, n, n))
    for i in range(n):
        t[i, i, i] = 24 * k * k * x[i]
    for i in range(n - 1):
        for p in ((i, i, i + 1), (i, i + 1, i), (i + 1, i, i)):
            t[p] += 2.0
    return t, np.diag(24 * k * x**2)


X = np.array([0.5, 1.2, -0.7, 0.9])
K = 1.5


@pytest.fixture(params=["numba", "c"])
def fns(request, m):
    """(cube_sin, mixed, chain as f(x, k), chain's trailing arguments)."""
    if request.param == "numba":
        return cube_sin, mixed, chain, ()
    return m.cube_sin, m.mixed, m.chain, (X.size,)


def fd_hessian_along(f, extra, x, k, v, dk=0.0, h=1e-5):
    """Central differences of ez.hessian (float64) along (v, dk)."""
    hess = ez.hessian(f)
    return (hess(x + h * v, k + h * dk, *extra) - hess(x - h * v, k - h * dk, *extra)) / (2 * h)


def test_grad_of_grad_of_grad_of_a_scalar_function(fns):
    f, _, _, _ = fns
    for x in (0.7, -1.3, 2.0):
        third = ez.grad(ez.grad(ez.grad(f)))(x)
        assert third == pytest.approx(d3(x), rel=1e-12)
        assert third == pytest.approx(fd_scalar(ez.grad(ez.grad(f)), x), rel=1e-7)
        assert ez.value_and_grad(ez.grad(ez.grad(f)))(x) == pytest.approx((d2(x), d3(x)), rel=1e-12)
        value, tangent = ez.jvp(ez.grad(ez.grad(f)), (x,), (0.5,))
        assert (value, tangent) == pytest.approx((d2(x), 0.5 * d3(x)), rel=1e-12)
        # The same number by every spelling JAX users write.
        for made in (
            ez.hessian(ez.grad(f)),
            ez.jacfwd(ez.jacrev(ez.grad(f))),
            ez.jacobian(ez.jacobian(ez.jacobian(f))),
            ez.jacrev(ez.hessian(f)),
            ez.grad(ez.jacfwd(ez.jacrev(f))),
        ):
            assert made(x) == pytest.approx(d3(x), rel=1e-12), made
        assert ez.hvp(ez.grad(f), (x,), (2.0,)) == pytest.approx((d2(x), 2 * d3(x)), rel=1e-12)


def test_mixed_third_partials_of_two_scalars(fns):
    _, g, _, _ = fns
    x, y = 0.5, 0.7
    expected = mixed_third(x, y)
    third = ez.grad(ez.grad(ez.grad(g, 0), 1), (0, 1))(x, y)
    assert third == pytest.approx(expected, rel=1e-12)
    fd = (
        fd_scalar(lambda z: ez.grad(ez.grad(g, 0), 1)(z, y), x),
        fd_scalar(lambda z: ez.grad(ez.grad(g, 0), 1)(x, z), y),
    )
    assert third == pytest.approx(fd, rel=1e-7)
    value, third = ez.value_and_grad(ez.grad(ez.grad(g, 1), 0), 1)(x, y)
    assert (value, third) == pytest.approx((mixed_second(x, y), expected[1]), rel=1e-12)
    # jvp along (1, 2): the directional derivative of d^2 f / dx dy.
    value, tangent = ez.jvp(ez.grad(ez.grad(g, 0), 1), (x, y), (1.0, 2.0))
    assert value == pytest.approx(mixed_second(x, y), rel=1e-12)
    assert tangent == pytest.approx(expected[0] + 2 * expected[1], rel=1e-12)
    # The whole tensor as nested blocks of floats.
    blocks = ez.jacobian(ez.jacfwd(ez.grad(g, (0, 1)), (0, 1)), (0, 1))(x, y)
    assert blocks[0][1][0] == pytest.approx(expected[0], rel=1e-12)
    assert blocks[1][0][1] == pytest.approx(expected[1], rel=1e-12)
    assert blocks[0][1][1] == pytest.approx(blocks[1][1][0], rel=1e-12)


def test_jacobian_of_hessian_is_the_third_derivative_tensor(fns):
    _, _, f, extra = fns
    t, dk_hessian = chain_third(X, K)
    for made in (
        ez.jacobian(ez.hessian(f)),
        ez.jacfwd(ez.hessian(f)),
        ez.jacrev(ez.jacfwd(ez.jacrev(f))),
        ez.jacobian(ez.jacobian(ez.jacobian(f))),
    ):
        got = made(X, K, *extra)
        assert got.shape == (4, 4, 4) and got.dtype == np.float64
        np.testing.assert_allclose(got, t, rtol=1e-12, atol=1e-12)
    for e in range(X.size):
        v = np.zeros(X.size)
        v[e] = 1.0
        np.testing.assert_allclose(got[:, :, e], fd_hessian_along(f, extra, X, K, v), atol=1e-6)
    # Blocks over (x, k), nested as JAX nests them: [a][b][c].
    blocks = ez.jacobian(ez.hessian(f, (0, 1)), (0, 1))(X, K, *extra)
    np.testing.assert_allclose(blocks[0][0][0], t, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(blocks[0][0][1], dk_hessian, rtol=1e-12)
    np.testing.assert_allclose(blocks[0][1][0], dk_hessian, rtol=1e-12)
    np.testing.assert_allclose(blocks[1][0][0], dk_hessian, rtol=1e-12)
    np.testing.assert_allclose(blocks[0][1][1], 8 * X**3, rtol=1e-12)
    assert blocks[0][1][1].shape == (4,) and blocks[1][1][0].shape == (4,)
    assert blocks[1][1][1] == pytest.approx(0.0, abs=1e-12)
    fd = fd_hessian_along(f, extra, X, K, np.zeros(X.size), dk=1.0)
    np.testing.assert_allclose(blocks[0][0][1], fd, atol=1e-6)


def test_jvp_of_hessian(fns):
    _, _, f, extra = fns
    t, dk_hessian = chain_third(X, K)
    v = np.array([1.0, -0.5, 2.0, 0.25])
    nones = (None,) * len(extra)
    hess, tangent = ez.jvp(ez.hessian(f), (X, K, *extra), (v, None, *nones))
    np.testing.assert_allclose(hess, chain_hessian(X, K), rtol=1e-12)
    np.testing.assert_allclose(tangent, t @ v, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(tangent, fd_hessian_along(f, extra, X, K, v), atol=1e-6)
    # A tangent on the scalar k too adds d/dk of the Hessian (one column at a time).
    hess, tangent = ez.jvp(ez.hessian(f), (X, K, *extra), (v, 0.5, *nones))
    np.testing.assert_allclose(hess, chain_hessian(X, K), rtol=1e-12)
    np.testing.assert_allclose(tangent, t @ v + 0.5 * dk_hessian, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(tangent, fd_hessian_along(f, extra, X, K, v, 0.5), atol=1e-6)
    # jvp of jacfwd(jacrev(f)) is the same.
    _, again = ez.jvp(ez.jacfwd(ez.jacrev(f)), (X, K, *extra), (v, None, *nones))
    np.testing.assert_allclose(again, t @ v, rtol=1e-12, atol=1e-12)
    # jvp of a Jacobian of a scalar-valued f is the Hessian-vector product.
    grad, hv = ez.jvp(ez.jacrev(f), (X, K, *extra), (v, None, *nones))
    np.testing.assert_allclose(hv, chain_hessian(X, K) @ v, rtol=1e-12)
    np.testing.assert_allclose(grad, ez.grad(f)(X, K, *extra), rtol=1e-15)


def test_hessian_and_hvp_of_a_gradient_with_respect_to_a_scalar(fns):
    _, _, f, extra = fns
    _, dk_hessian = chain_third(X, K)
    np.testing.assert_allclose(ez.hessian(ez.grad(f, 1))(X, K, *extra), dk_hessian, rtol=1e-12)
    v = np.array([1.0, -0.5, 2.0, 0.25])
    nones = (None,) * len(extra)
    gk, hv = ez.hvp(ez.grad(f, 1), (X, K, *extra), (v, None, *nones))
    np.testing.assert_allclose(gk, 8 * K * X**3, rtol=1e-12)
    np.testing.assert_allclose(hv, dk_hessian @ v, rtol=1e-12)
    fd = fd_gradient(lambda z: float(np.dot(ez.grad(ez.grad(f, 1))(z, K, *extra), v)), X)
    np.testing.assert_allclose(hv, fd, rtol=1e-6)
    # grad of grad with respect to the scalar twice, then the array: d/dx f_kk = 8 x^3.
    np.testing.assert_allclose(ez.grad(ez.grad(ez.grad(f, 1), 1), 0)(X, K, *extra), 8 * X**3)


def test_float32(m):
    x32 = X.astype(np.float32)
    t, _ = chain_third(X, K)
    for f, extra in ((chain, ()), (m.chain32, (X.size,))):
        got = ez.jacobian(ez.hessian(f))(x32, np.float32(K), *extra)
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, t, rtol=1e-5, atol=1e-5)
        v = np.array([1.0, -0.5, 2.0, 0.25], dtype=np.float32)
        hess, tangent = ez.jvp(
            ez.hessian(f), (x32, np.float32(K), *extra), (v, None, *([None] * len(extra)))
        )
        assert hess.dtype == np.float32 and tangent.dtype == np.float32
        np.testing.assert_allclose(hess, chain_hessian(X, K), rtol=1e-5)
        np.testing.assert_allclose(tangent, t @ v.astype(np.float64), rtol=1e-5, atol=1e-5)
    third = ez.grad(ez.grad(ez.grad(cube_sin)))(np.float32(0.7))
    assert third == pytest.approx(d3(0.7), rel=1e-5)


def test_keywords_pickles_and_the_callers_arrays():
    made = ez.jacobian(ez.hessian(chain))
    x = X.copy()
    np.testing.assert_allclose(made(x, k=K), chain_third(X, K)[0], rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(x, X)
    again = pickle.loads(pickle.dumps(made))
    assert repr(again) == repr(made)
    np.testing.assert_allclose(again(X, K), chain_third(X, K)[0], rtol=1e-12, atol=1e-12)
    third = pickle.loads(pickle.dumps(ez.grad(ez.grad(ez.grad(cube_sin)))))
    assert third(0.7) == pytest.approx(d3(0.7), rel=1e-12)


@pytest.mark.parametrize(
    ("make", "advice"),
    [
        (lambda: ez.grad(ez.grad(ez.grad(ez.grad(cube_sin))))(0.5), "fourth derivatives"),
        (lambda: ez.jvp(ez.grad(ez.grad(ez.grad(cube_sin))), (0.5,), (1.0,)), "fourth"),
        (lambda: ez.jacobian(ez.jacobian(ez.hessian(chain)))(X, K), "fourth derivatives"),
        (lambda: ez.hessian(ez.hessian(chain))(X, K), "fourth derivatives"),
        (lambda: ez.hvp(ez.hessian(chain), (X, K), (X, None)), "fourth derivatives"),
        (lambda: ez.hessian(ez.grad(ez.grad(cube_sin)))(0.5), "fourth derivatives"),
        (lambda: ez.autodiff(ez.jacobian(ez.hessian(chain)), ez.Forward, ez.Dual), "fourth"),
        (lambda: ez.vjp(ez.jacobian(ez.hessian(chain)), X, K), "fourth derivatives"),
        (lambda: ez.grad(ez.hessian(chain))(X, K), "argument 0 is an array"),
        (lambda: ez.grad(ez.grad(ez.grad(chain, 1)))(X, K), "argument 0 is an array"),
        (lambda: ez.grad(ez.value_and_grad(ez.grad(cube_sin)))(0.5), "returns a pair"),
        (lambda: ez.jacfwd(ez.value_and_grad(ez.grad(cube_sin))), "ez.grad\\(grad\\(cube"),
        (lambda: ez.jvp(ez.value_and_grad(ez.grad(cube_sin)), (0.5,), (1.0,)), "a pair"),
        (lambda: ez.grad(ez.jacfwd(ez.grad(mixed, (0, 1)), (0, 1)))(0.5, 0.7), "tuple"),
        (lambda: ez.hessian(ez.grad(mixed, (0, 1))), "tuple of gradients"),
        (lambda: ez.vjp(ez.hessian(vector), X), "pullback of its second derivatives"),
        (lambda: ez.grad(ez.jacobian(chain, output=1)), "output="),
        (lambda: ez.jacobian(ez.hessian(chain), output=1), "output=1"),
    ],
)
def test_what_stays_refused_says_what_to_write(make, advice):
    with pytest.raises(NotComposable, match=advice):
        make()


@pytest.mark.parametrize("n", [9, 11])
def test_more_columns_than_one_batch(n):
    # Batches of 8 lanes, then the rest (one lane for n = 9).
    x = np.linspace(-1.0, 1.2, n)
    t, _ = chain_third(x, K)
    np.testing.assert_allclose(ez.jacobian(ez.hessian(chain))(x, K), t, rtol=1e-12, atol=1e-12)
    v = np.cos(np.arange(n))
    _, tangent = ez.jvp(ez.hessian(chain), (x, K), (v, None))
    np.testing.assert_allclose(tangent, t @ v, rtol=1e-12, atol=1e-12)


def test_vjp_of_a_second_derivative(fns):
    f, g, h, extra = fns
    t, dk_hessian = chain_third(X, K)
    c = np.cos(np.arange(16.0)).reshape(4, 4)
    hess, vjp_fn = ez.vjp(ez.hessian(h), X, K, *extra)
    np.testing.assert_allclose(hess, chain_hessian(X, K), rtol=1e-12)
    dx, dk, *rest = vjp_fn(c)
    np.testing.assert_allclose(dx, np.einsum("ab,abj->j", c, t), rtol=1e-12, atol=1e-12)
    assert dk == pytest.approx(np.sum(c * dk_hessian), rel=1e-12)
    assert all(r is None for r in rest)
    fd = fd_gradient(lambda z: float(np.sum(c * ez.hessian(h)(z, K, *extra))), X)
    np.testing.assert_allclose(dx, fd, rtol=1e-6, atol=1e-6)
    # Nested blocks over (x, k): the cotangent nests as the value does. The blocks
    # (x, k) and (k, x) are both 8 k x^3, the block (k, k) is 2 sum x^4.
    _, vjp_fn = ez.vjp(ez.hessian(h, (0, 1)), X, K, *extra)
    cx, ck = np.linspace(-1, 1, 4), 0.3
    dx, dk, *_ = vjp_fn(((c, cx), (cx, ck)))
    expected_x = np.einsum("ab,abj->j", c, t) + 2 * dk_hessian @ cx + ck * 8 * X**3
    np.testing.assert_allclose(dx, expected_x, rtol=1e-12, atol=1e-12)
    assert dk == pytest.approx(np.sum(c * dk_hessian) + 2 * np.dot(cx, 8 * X**3), rel=1e-12)
    # A scalar: the pullback of c is c f'''(x).
    value, vjp_fn = ez.vjp(ez.grad(ez.grad(f)), 0.7)
    assert value == pytest.approx(d2(0.7), rel=1e-12)
    assert vjp_fn(2.0) == pytest.approx((2.0 * d3(0.7),), rel=1e-12)
    # grad(grad(g, 0), 1): d^2 g / dx dy; its pullback is c (d/dx, d/dy) of it.
    value, vjp_fn = ez.vjp(ez.grad(ez.grad(g, 0), 1), 0.5, 0.7)
    assert value == pytest.approx(mixed_second(0.5, 0.7), rel=1e-12)
    expected = tuple(-1.5 * v for v in mixed_third(0.5, 0.7))
    assert vjp_fn(-1.5) == pytest.approx(expected, rel=1e-12)
    with pytest.raises(ValueError, match="shape"):
        ez.vjp(ez.hessian(h), X, K, *extra)[1](np.ones(3))
    with pytest.raises(TypeError, match="nested as its value"):
        ez.vjp(ez.hessian(h, (0, 1)), X, K, *extra)[1](c)


def test_vjp_of_a_hessian_in_float32():
    x32 = X.astype(np.float32)
    t, _ = chain_third(X, K)
    c = np.cos(np.arange(16.0)).reshape(4, 4)
    hess, vjp_fn = ez.vjp(ez.hessian(chain), x32, K)
    assert hess.dtype == np.float32
    dx, _ = vjp_fn(c)
    assert dx.dtype == np.float32
    np.testing.assert_allclose(dx, np.einsum("ab,abj->j", c, t), rtol=1e-5, atol=1e-4)


def test_helpers_over_raw_derivatives(m):
    # grad of grad of grad of a forward derivative x -> f'(x) dx: the fourth derivative.
    def d4(x):
        c, s = math.cos(x), math.sin(x)
        return 24 * c - 36 * x * s - 12 * x * x * c + x**3 * s

    fwd = ez.autodiff(m.cube_sin, ez.Forward, ez.Dual, ez.DualOnly)
    assert ez.grad(ez.grad(ez.grad(fwd)))(0.7, 1.0) == pytest.approx(d4(0.7), rel=1e-10)
    # A reverse derivative returning adjoints is not differentiated twice by the helpers.
    rev = ez.autodiff(m.cube_sin, ez.Reverse, ez.Active, ez.ActiveOnly)
    assert ez.grad(rev)(0.7, 1.0) == pytest.approx(d2(0.7), rel=1e-12)
    with pytest.raises(NotComposable, match="forward over reverse"):
        ez.grad(ez.grad(rev))(0.7, 1.0)


RECURSIVE = r"""
double cubes_from(const double *x, int i, int n) {
    if (i == n) return 0.0;
    return x[i] * x[i] * x[i] * x[(i + 1) % n] + cubes_from(x, i + 1, n);
}
double cubes(const double *x, int n) { return cubes_from(x, 0, n); }
"""


def test_recursion_goes_one_lane_at_a_time():
    # Enzyme batches derivatives of recursion wrongly: width is refused there, and the
    # third derivatives are made one column at a time, with the same numbers.
    m = ez.c(RECURSIVE)
    n = X.size
    t = np.zeros((n, n, n))
    for a in range(n):  # the term x_a^3 x_b
        b = (a + 1) % n
        t[a, a, a] += 6 * X[b]
        for p in ((a, a, b), (a, b, a), (b, a, a)):
            t[p] += 6 * X[a]
    np.testing.assert_allclose(ez.jacobian(ez.hessian(m.cubes))(X, n), t, rtol=1e-12)
    v = np.array([1.0, -0.5, 2.0, 0.25])
    _, tangent = ez.jvp(ez.hessian(m.cubes), (X, n), (v, None))
    np.testing.assert_allclose(tangent, t @ v, rtol=1e-12, atol=1e-12)


@njit
def squares_in_place(x):
    # Overwrites its argument: each of the many calls behind a third derivative must
    # start from the point (and the tangents) given.
    for i in range(x.shape[0]):
        x[i] = x[i] * x[i]
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i]
    return s


def test_a_function_that_overwrites_its_argument():
    n = 10  # more than one batch of columns
    x0 = np.linspace(-1.0, 1.3, n)
    t = np.zeros((n, n, n))
    t[np.arange(n), np.arange(n), np.arange(n)] = 24 * x0  # f = sum x^4
    x = x0.copy()
    np.testing.assert_allclose(ez.jacobian(ez.hessian(squares_in_place))(x), t, rtol=1e-12)
    np.testing.assert_array_equal(x, x0)
    v = np.cos(np.arange(n))
    hess, tangent = ez.jvp(ez.hessian(squares_in_place), (x,), (v,))
    np.testing.assert_allclose(hess, np.diag(12 * x0**2), rtol=1e-12)
    np.testing.assert_allclose(tangent, t @ v, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(v, np.cos(np.arange(n)))  # the caller's tangent
    _, vjp_fn = ez.vjp(ez.hessian(squares_in_place), x0.copy())
    c = np.cos(np.arange(n * n)).reshape(n, n)
    (dx,) = vjp_fn(c)
    np.testing.assert_allclose(dx, np.einsum("ab,abj->j", c, t), rtol=1e-12, atol=1e-12)
