"""Second derivatives of Numba functions that return an array, as JAX gives them:
``ez.hessian(f)`` of f: R^n -> R^m has shape ``out.shape + x.shape + x.shape``, and
``jacfwd(jacrev(f))`` (and every other Jacobian of a Jacobian) is the same array.
Checked against analytic values and second-order central differences of f itself."""

from __future__ import annotations

import math

import numba
import numpy as np
import pytest

import enzyme_py as ez
from enzyme_py._transforms import NotComposable

pytestmark = pytest.mark.needs_enzyme


@numba.njit
def curve(x, k):
    out = np.empty(3)
    out[0] = x[0] * x[0] * x[1] * k
    out[1] = math.sin(x[0]) * x[1] ** 3 * k * k
    out[2] = math.exp(x[0] * x[1])
    return out


def curve_hessian(x, k):
    """d^2 curve_i / dx_a dx_b, by hand."""
    a, b = x
    h = np.zeros((3, 2, 2))
    h[0] = [[2 * b * k, 2 * a * k], [2 * a * k, 0.0]]
    h[1] = [
        [-math.sin(a) * b**3 * k * k, 3 * math.cos(a) * b**2 * k * k],
        [3 * math.cos(a) * b**2 * k * k, 6 * math.sin(a) * b * k * k],
    ]
    e = math.exp(a * b)
    h[2] = [[b * b * e, (1 + a * b) * e], [(1 + a * b) * e, a * a * e]]
    return h


@numba.njit
def layer(x, w):
    # A tanh layer returning a 2-D array: out[i, j] = tanh(w[i, j] * x[j] + x[i]).
    n = x.shape[0]
    out = np.empty((w.shape[0], n))
    for i in range(w.shape[0]):
        for j in range(n):
            out[i, j] = np.tanh(w[i, j] * x[j] + x[i % n])
    return out


@numba.njit(parallel=True)
def cubes(x):
    out = np.empty_like(x)
    for i in numba.prange(x.shape[0]):
        out[i] = x[i] ** 3 * x[(i + 1) % x.shape[0]]
    return out


def second_differences(f, args, i, m, h=1e-4):
    """d^2 f / d args[i] d args[m] by central differences of f: out.shape + shapes."""
    out = np.asarray(f(*args))
    xi, xm = np.asarray(args[i], float), np.asarray(args[m], float)
    result = np.zeros(out.shape + xi.shape + xm.shape)

    def at(di, dm):
        call = [np.array(a, dtype=float) if isinstance(a, np.ndarray) else a for a in args]
        if i == m:
            call[i] = xi + di + dm
        else:
            call[i], call[m] = xi + di, xm + dm
        if not isinstance(args[i], np.ndarray):
            call[i] = float(call[i])
        if not isinstance(args[m], np.ndarray):
            call[m] = float(call[m])
        return np.asarray(f(*call), dtype=float)

    for p in np.ndindex(xi.shape):
        for q in np.ndindex(xm.shape):
            ei, em = np.zeros(xi.shape), np.zeros(xm.shape)
            ei[p], em[q] = h, h
            if i == m:
                em = em.reshape(xi.shape)
            value = (at(ei, em) - at(ei, -em) - at(-ei, em) + at(-ei, -em)) / (4 * h * h)
            result[(..., *p, *q)] = value
    return result


rng = np.random.default_rng(11)


def test_hessian_of_a_function_returning_an_array_is_jax_shaped():
    x = np.array([0.7, 1.3])
    h = ez.hessian(curve)(x, 2.0)
    assert h.shape == (3, 2, 2) and h.dtype == np.float64
    np.testing.assert_allclose(h, curve_hessian(x, 2.0), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(x, [0.7, 1.3])  # the caller's array is left as given


def test_hessian_of_an_array_result_with_tuple_argnums_and_a_float_scalar():
    x = np.array([0.4, -0.9])
    h = ez.hessian(curve, argnums=(0, 1))(x, 1.5)
    shapes = [[np.shape(b) for b in row] for row in h]
    assert shapes == [[(3, 2, 2), (3, 2)], [(3, 2), (3,)]]
    for a, i in enumerate((0, 1)):
        for b, m in enumerate((0, 1)):
            reference = second_differences(curve, (x, 1.5), i, m)
            np.testing.assert_allclose(h[a][b], reference, rtol=1e-6, atol=1e-7)


def test_every_jacobian_of_a_jacobian_is_the_hessian():
    x = rng.uniform(-1.0, 1.0, 4)
    w = rng.uniform(-1.0, 1.0, (2, 4))
    expected = ez.hessian(layer)(x, w)
    assert expected.shape == (2, 4, 4, 4)
    np.testing.assert_allclose(expected, second_differences(layer, (x, w), 0, 0), atol=1e-6)
    for outer in (ez.jacfwd, ez.jacrev, ez.jacobian):
        for inner in (ez.jacfwd, ez.jacrev, ez.jacobian):
            np.testing.assert_allclose(outer(inner(layer))(x, w), expected, rtol=1e-12, atol=1e-14)


def test_jacfwd_of_jacrev_nests_its_argnums_as_jax_does():
    x = rng.uniform(-1.0, 1.0, 3)
    w = rng.uniform(-1.0, 1.0, (2, 3))
    blocks = ez.jacfwd(ez.jacrev(layer, argnums=(0, 1)), argnums=1)(x, w)
    assert isinstance(blocks, tuple) and len(blocks) == 2
    assert blocks[0].shape == (2, 3, 3, 2, 3)  # layer's shape, x's, w's: d/dw of d/dx
    assert blocks[1].shape == (2, 3, 2, 3, 2, 3)  # d/dw of d/dw
    np.testing.assert_allclose(blocks[0], second_differences(layer, (x, w), 0, 1), atol=1e-6)
    np.testing.assert_allclose(blocks[1], second_differences(layer, (x, w), 1, 1), atol=1e-6)


def test_float32_and_parallel_functions_and_keywords():
    x32 = np.array([0.3, 0.5, 0.9], dtype=np.float32)
    h32 = ez.hessian(cubes)(x32)
    assert h32.dtype == np.float32 and h32.shape == (3, 3, 3)
    h64 = ez.hessian(cubes)(x32.astype(np.float64))
    np.testing.assert_allclose(
        h64, second_differences(cubes, (x32.astype(float),), 0, 0), atol=1e-6
    )
    np.testing.assert_allclose(h32, h64, rtol=1e-5, atol=1e-6)
    x = np.array([0.7, 1.3])
    np.testing.assert_allclose(ez.hessian(curve)(x, k=2.0), curve_hessian(x, 2.0), rtol=1e-12)


@numba.njit
def pair(x):
    return x * 2.0, x * 3.0


@numba.njit
def counts(x):
    return (x > 0.0).astype(np.int64)


def test_what_has_no_second_derivative_here_is_refused_with_the_fix():
    x = np.array([0.7, 1.3])
    with pytest.raises(TypeError, match="pair returns a tuple"):
        ez.hessian(pair)(x)
    with pytest.raises(TypeError, match="counts returns an array of int64"):
        ez.hessian(counts)(x)
    with pytest.raises(TypeError, match=r"H v is for scalar-valued functions.*ez.hessian\(curve\)"):
        ez.hvp(curve, (x, 2.0), (x, 0.0))


@numba.njit
def tanh_layer_sum(x, w):
    total = 0.0
    for i in range(w.shape[0]):
        s = 0.0
        for j in range(x.shape[0]):
            s += w[i, j] * x[j]
        total += math.tanh(s)
    return total


def test_hessian_where_the_reverse_derivative_mixes_activity():
    # The reverse derivative of this loop selects between a constant zero and an
    # adjoint; differentiating it again needs Enzyme's run-time activity (it refused
    # with "mixed activity" before).
    x = rng.normal(size=6)
    w = rng.normal(size=(5, 6)) * 0.3
    t = np.tanh(w @ x)
    expected = np.einsum("i,ij,ik->jk", -2.0 * t * (1.0 - t * t), w, w)
    np.testing.assert_allclose(ez.hessian(tanh_layer_sum)(x, w), expected, rtol=1e-12, atol=1e-14)


def test_third_derivatives_of_an_array_result():
    # The Jacobian of the Hessian (result.shape + x.shape * 3) and (H, T v), against
    # central differences of the analytic Hessian.
    x, h = np.array([0.7, 1.3]), 1e-5
    expected = np.stack(
        [
            (curve_hessian(x + h * e, 2.0) - curve_hessian(x - h * e, 2.0)) / (2 * h)
            for e in np.eye(2)
        ],
        axis=-1,
    )
    tensor = ez.jacobian(ez.hessian(curve))(x, 2.0)
    assert tensor.shape == (3, 2, 2, 2)
    np.testing.assert_allclose(tensor, expected, rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(ez.jacfwd(ez.jacrev(ez.jacrev(curve)))(x, 2.0), tensor, rtol=1e-12)
    v = np.array([1.0, -0.5])
    hessian, tv = ez.jvp(ez.hessian(curve), (x, 2.0), (v, None))
    np.testing.assert_allclose(hessian, curve_hessian(x, 2.0), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(tv, expected @ v, rtol=1e-7, atol=1e-8)
    blocks = ez.jacobian(ez.hessian(curve, argnums=(0, 1)), argnums=-1)(x, 2.0)  # d/dk
    assert [[np.shape(b) for b in row] for row in blocks] == [[(3, 2, 2), (3, 2)], [(3, 2), (3,)]]
    with pytest.raises(NotComposable, match="pullback of its second derivatives"):
        ez.vjp(ez.hessian(curve), x, 2.0)
