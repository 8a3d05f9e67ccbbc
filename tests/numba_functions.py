"""Numba functions shared by test modules (import after pytest.importorskip("numba"))."""

import math

import numba


@numba.njit
def cubes(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] ** 3
    return s


@numba.njit
def loss(x, k, n):
    # The bridges' tests (JAX, PyTorch): k * sum(sin(x) * x**2) over the first n.
    s = 0.0
    for i in range(n):
        s += k * math.sin(x[i]) * x[i] * x[i]
    return s
