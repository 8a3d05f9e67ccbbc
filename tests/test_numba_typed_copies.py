"""Arrays a Numba function fills through memset or memcpy (np.zeros_like, x.copy())
and then reads only at indices taken from data, or through array expressions:
Enzyme's type analysis could not tell what those calls move ("Cannot deduce type of
memset"), and the derivative was refused. enzyme_py marks the first element of each
such call's memory with Enzyme's type mark (_numba_runtime._typed_memory_intrinsics).
Checked against central differences in reverse and forward mode."""

from __future__ import annotations

import numba
import numpy as np
import pytest

import enzyme_py as ez

from reference import fd_gradient

pytestmark = pytest.mark.needs_enzyme

EDGES = np.array([[0, 1], [1, 2], [2, 3], [3, 4], [4, 5], [5, 0], [1, 4]])


@numba.njit
def scattered_into_zeros(x, heads, tails):
    forces = np.zeros_like(x)
    for e in range(heads.shape[0]):
        a, b = heads[e], tails[e]
        forces[a] += 0.1 * x[b]
        forces[b] -= 0.1 * x[a]
    return np.sum(forces**3)


@numba.njit
def laplacian_smoothing(x, edges, steps):
    v = x.copy()
    for _ in range(steps):
        smoothed = v.copy()
        for e in range(edges.shape[0]):
            a, b = edges[e, 0], edges[e, 1]
            d = v[b] - v[a]
            smoothed[a] += 0.1 * d
            smoothed[b] -= 0.1 * d
        v = smoothed
    return np.sum(v**3)


@numba.njit
def float32_histogram(x, bins):
    counts = np.zeros(8, dtype=np.float32)
    for i in range(x.shape[0]):
        counts[bins[i]] += x[i] * x[i]
    return np.sum(counts * counts)


X = np.random.default_rng(17).normal(size=6)


def test_an_array_of_zeros_only_scattered_into():
    heads, tails = EDGES[:, 0].copy(), EDGES[:, 1].copy()
    expected = fd_gradient(lambda v: scattered_into_zeros(v, heads, tails), X)
    np.testing.assert_allclose(
        ez.grad(scattered_into_zeros)(X, heads, tails), expected, rtol=1e-7, atol=1e-9
    )
    np.testing.assert_allclose(
        ez.jacfwd(scattered_into_zeros)(X, heads, tails), expected, rtol=1e-7, atol=1e-9
    )


def test_smoothing_steps_along_graph_edges():
    expected = fd_gradient(lambda v: laplacian_smoothing(v, EDGES, 4), X)
    np.testing.assert_allclose(
        ez.grad(laplacian_smoothing)(X, EDGES, 4), expected, rtol=1e-7, atol=1e-9
    )
    np.testing.assert_allclose(
        ez.jacfwd(laplacian_smoothing)(X, EDGES, 4), expected, rtol=1e-7, atol=1e-9
    )


def test_float32_memory():
    x = X.astype(np.float32)
    bins = np.array([0, 3, 3, 7, 1, 0])
    gradient = ez.grad(float32_histogram)(x, bins)
    assert gradient.dtype == np.float32
    counts = np.zeros(8)
    np.add.at(counts, bins, X.astype(np.float32).astype(np.float64) ** 2)
    expected = 4.0 * counts[bins] * x  # d/dx_i of sum(counts**2)
    np.testing.assert_allclose(gradient, expected, rtol=1e-5)
