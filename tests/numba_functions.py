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


@numba.njit
def squares_then_sines(x, scratch):
    # A scratch array filled in one loop and read in the next: its stores forwarded to
    # its loads before Enzyme (src/scratch_forwarding.h), right as Const.
    for i in range(x.shape[0]):
        scratch[i] = x[i] * x[i]
    s = 0.0
    for i in range(x.shape[0]):
        s += math.sin(scratch[i])
    return s


@numba.njit
def scaled_squares_then_sines(x, c, scratch):
    # The same, weighted by c: x and c may overlap, which takes the build without the
    # no-overlap promise, where scratch is not forwarded (tests/test_const_memory.py).
    for i in range(x.shape[0]):
        scratch[i] = x[i] * x[i]
    s = 0.0
    for i in range(x.shape[0]):
        s += c[i] * math.sin(scratch[i])
    return s
