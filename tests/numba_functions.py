"""Numba functions shared by test modules (import after pytest.importorskip("numba"))."""

import numba


@numba.njit
def cubes(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] ** 3
    return s
