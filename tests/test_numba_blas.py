"""Slice and fancy-index assignment, and Numba's BLAS helpers (np.dot, @),
differentiated in forward and reverse mode against finite differences.

src/numba_rewrites.cpp keeps Numba's exception helpers (a slice assignment's shape check)
out of Enzyme's way and gives numba_xxdot / numba_xxgemv / numba_xxgemm / numba_xxnrm2
loop bodies with BLAS's semantics (src/numba_blas.c)."""

import numba
import numpy as np
import pytest

import enzyme_py as ez

from reference import fd_gradient

pytestmark = pytest.mark.needs_enzyme

RNG = np.random.default_rng(7)


def _fd_directional(f, args, tangents, h=1e-6):
    plus = [a + h * t if t is not None else a for a, t in zip(args, tangents, strict=True)]
    minus = [a - h * t if t is not None else a for a, t in zip(args, tangents, strict=True)]
    return (f(*plus) - f(*minus)) / (2 * h)


def check(f, *args, rtol=1e-6, atol=1e-8):
    """Reverse (ez.grad of every float array) and forward (ez.jvp along random
    tangents) against central differences of f's Python function in float64."""
    py = f.py_func
    floats = [k for k, a in enumerate(args) if isinstance(a, np.ndarray) and a.dtype.kind == "f"]
    grads = ez.grad(f, tuple(floats))(*args)
    for k, g in zip(floats, grads, strict=True):

        def along(x, k=k):
            return py(*[x if j == k else a for j, a in enumerate(args)])

        expected = fd_gradient(along, np.ascontiguousarray(args[k], dtype=np.float64))
        np.testing.assert_allclose(g, expected, rtol=rtol, atol=atol)
    tangents = [
        RNG.standard_normal(a.shape).astype(a.dtype) if k in floats else None
        for k, a in enumerate(args)
    ]
    value, tangent = ez.jvp(f, args, tuple(tangents))
    assert value == pytest.approx(py(*args), rel=max(rtol, 1e-12))
    f64 = [a.astype(np.float64) if k in floats else a for k, a in enumerate(args)]
    t64 = [t.astype(np.float64) if t is not None else None for t in tangents]
    assert tangent == pytest.approx(_fd_directional(py, f64, t64), rel=rtol, abs=atol)


# ---- slice and fancy-index assignment


@numba.njit
def shifted(x):
    t = np.zeros(x.shape[0] + 1)
    t[1:] = x
    s = 0.0
    for i in range(t.shape[0]):
        s += (i + 1.0) * t[i] * t[i]
    return s


@numba.njit
def into_column_and_row(x):
    n = x.shape[0]
    a = np.zeros((n, n))
    a[:, 0] = x
    a[1, :] = x * x
    s = 0.0
    for i in range(n):
        for j in range(n):
            s += (i + 2.0 * j + 1.0) * a[i, j] * a[i, j]
    return s


@numba.njit
def scalar_into_slice(x):
    t = np.ones(x.shape[0] + 2)
    t[2:] = 3.0 * x[0]
    t[:2] = x[1:3]
    s = 0.0
    for i in range(t.shape[0]):
        s += (i + 1.0) * np.sin(t[i])
    return s


@numba.njit
def fancy_index(x, idx):
    t = np.zeros(6)
    t[idx] = x
    s = 0.0
    for i in range(t.shape[0]):
        s += (i + 1.0) * t[i] ** 3
    return s


@pytest.mark.parametrize(
    "f, args",
    [
        (shifted, (np.linspace(0.3, 1.2, 4),)),
        (into_column_and_row, (np.linspace(-0.5, 1.0, 3),)),
        (scalar_into_slice, (np.linspace(0.1, 0.9, 4),)),
        (fancy_index, (np.linspace(0.5, 1.5, 3), np.array([0, 3, 5]))),
    ],
    ids=["slice", "column-and-row", "scalar-into-slice", "fancy-index"],
)
def test_assignments(f, args):
    check(f, *args)


def test_a_shape_mismatch_in_a_slice_assignment_still_raises():
    @numba.njit
    def bad(x):
        t = np.zeros(x.shape[0] + 2)
        t[1:] = x
        return t.sum()

    with pytest.raises(ValueError):
        ez.grad(bad)(np.ones(3))


# ---- BLAS helpers


@numba.njit
def vdot(x, y):
    return np.dot(x, y) ** 2


@numba.njit
def matvec(a, x):
    y = a @ x
    return np.sum(np.sin(y))


@numba.njit
def vecmat(x, a):
    y = x @ a
    return np.sum(y * y)


@numba.njit
def matmat(a, b):
    c = a @ b
    s = 0.0
    for i in range(c.shape[0]):
        for j in range(c.shape[1]):
            s += (i + 1.0) * np.cos(c[i, j]) + j * c[i, j]
    return s


def _m(*shape):
    return RNG.standard_normal(shape)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(
    "f, args",
    [
        (vdot, (_m(5), _m(5))),
        (matvec, (_m(4, 3), _m(3))),
        (vecmat, (_m(4), _m(4, 3))),
        (matmat, (_m(3, 4), _m(4, 2))),
        (matmat, (np.asfortranarray(_m(3, 4)), _m(4, 2))),
    ],
    ids=["np.dot", "A@x", "x@A", "A@B", "F(A)@B"],
)
def test_blas(f, args, dtype):
    args = tuple(np.asarray(a, dtype=dtype, order="K") for a in args)
    if dtype == np.float32:
        # float32 arithmetic against float64 differences of the same function
        check(f, *args, rtol=2e-3, atol=2e-3)
    else:
        check(f, *args)
