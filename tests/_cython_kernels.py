"""The Cython kernels, NumPy twins and references shared by the tests of strided views,
higher order and cython_declaration() (tests/test_cython_strided.py,
test_cython_higher_order.py, test_cython_declaration.py): one module source, compiled
once per test process (``module()``), and the one cythonize builder (``build``, the
example's: examples/cython_optimizer.py)."""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import enzyme_py as ez

SOURCE = r"""
cimport cython
from libc.math cimport sin

@cython.boundscheck(False)
@cython.wraparound(False)
cdef double wsum(const double[:] x, double[:] w) noexcept nogil:
    cdef double s = 0.0
    cdef Py_ssize_t i
    for i in range(x.shape[0]):
        s += w[i] * sin(x[i]) * x[i]
    for i in range(x.shape[0] - 1):
        s += w[i] * x[i] * x[i + 1]
    return s

@cython.boundscheck(False)
@cython.wraparound(False)
cdef double quad(double[:, :] a, const double[:, :] b) noexcept nogil:
    cdef double s = 0.0
    cdef Py_ssize_t i, j
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            s += a[i, j] * a[i, j] * a[i, j] * b[i, j] + sin(a[i, j]) * (i + 1)
            if j > 0:
                s += a[i, j] * a[i, j - 1]
    return s

@cython.boundscheck(False)
@cython.wraparound(False)
cdef cython.floating fcube(cython.floating[:, :] a) noexcept nogil:
    cdef cython.floating s = 0
    cdef Py_ssize_t i, j
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            s += a[i, j] * a[i, j] * a[i, j]
            if i > 0:
                s += a[i, j] * a[i - 1, j] * a[i - 1, j]
    return s

@cython.boundscheck(False)
@cython.wraparound(False)
cdef double fortran(double[::1, :] a) noexcept nogil:
    cdef double s = 0.0
    cdef Py_ssize_t i, j
    for j in range(a.shape[1]):
        for i in range(a.shape[0]):
            s += (i + 1) * a[i, j] * a[i, j] * a[i, j] + j * a[i, j]
            if i > 0:
                s += a[i, j] * a[i - 1, j]
    return s

@cython.boundscheck(False)
@cython.wraparound(False)
cdef void apply(double[:] out, const double[:, :] a, const double[:] x) noexcept nogil:
    cdef Py_ssize_t i, j
    cdef double s
    for i in range(a.shape[0]):
        s = 0.0
        for j in range(a.shape[1]):
            s += a[i, j] * sin(x[j])
        out[i] = s

cdef double ends(double[:] x) noexcept:
    # boundscheck and wraparound on: x[-1] is the last element of the view
    return x[-1] * x[-1] * x[0] + x[1]

@cython.boundscheck(False)
cdef double scaled(const double[::1] x, double k) noexcept nogil:
    cdef double s = 0.0
    cdef Py_ssize_t i
    for i in range(x.shape[0]):
        s += k * k * x[i] * x[i]
    return s

cdef double at(double[::1] x, Py_ssize_t i) noexcept nogil:
    # boundscheck on: an IndexError inside a derivative
    return x[i] * x[i] * x[i]
"""


@functools.cache
def module() -> Any:
    """``ez.cython(SOURCE)``, compiled once per process."""
    return ez.cython(SOURCE)


# --- NumPy twins of the kernels (float64) --------------------------------------


def wsum_np(x: np.ndarray, w: np.ndarray) -> float:
    return float(np.sum(w * np.sin(x) * x) + np.sum(w[:-1] * x[:-1] * x[1:]))


def quad_np(a: np.ndarray, b: np.ndarray) -> float:
    rows = np.arange(1, a.shape[0] + 1)[:, None]
    return float(np.sum(a**3 * b + np.sin(a) * rows) + np.sum(a[:, 1:] * a[:, :-1]))


def fcube_np(a: np.ndarray) -> float:
    a = a.astype(np.float64)
    return float(np.sum(a**3) + np.sum(a[1:] * a[:-1] ** 2))


def fortran_np(a: np.ndarray) -> float:
    rows = np.arange(1, a.shape[0] + 1)[:, None]
    cols = np.arange(a.shape[1])[None, :]
    return float(np.sum(rows * a**3 + cols * a) + np.sum(a[1:] * a[:-1]))


def fd_hessian(f: Callable[[np.ndarray], float], x: np.ndarray, h: float = 1e-4) -> np.ndarray:
    """Central second differences of f at x (float64), shaped x.shape + x.shape."""
    x = np.array(x, dtype=np.float64)
    n = x.size
    out = np.empty((n, n))
    for i in range(n):
        for j in range(n):

            def at(a: float, b: float, i: int = i, j: int = j) -> float:
                z = x.copy().reshape(-1)
                z[i] += a
                z[j] += b
                return f(z.reshape(x.shape))

            out[i, j] = (at(h, h) - at(h, -h) - at(-h, h) + at(-h, -h)) / (4 * h * h)
    return out.reshape(*x.shape, *x.shape)


# --- building Cython modules that call derivatives -------------------------------


def _example() -> Any:
    """examples/cython_optimizer.py as a module (its main() does not run): the one
    place that builds a Cython module with cythonize, for the example and the tests."""
    path = Path(__file__).resolve().parents[1] / "examples" / "cython_optimizer.py"
    spec = importlib.util.spec_from_file_location("enzyme_py_example_cython_optimizer", path)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    return example


def build(folder: str, name: str, source: str) -> Any:
    """Cythonize and compile ``source`` as module ``name`` in ``folder``; import it."""
    return _example().build(folder, name, source)
