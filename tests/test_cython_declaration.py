"""Derivatives called from Cython (Derivative.cython_declaration()): a Cython module
built with cythonize includes the declarations and calls them without the GIL; the
results match the Python path's, and its status codes say what went wrong."""

from __future__ import annotations

import gc
import os

import numba
import numpy as np
import pytest

import enzyme_py as ez

import _cython_kernels as kernels
from _cython_kernels import build, fd_hessian, fortran_np, quad_np, wsum_np
from numba_functions import scaled_squares_then_sines, squares_then_sines
from reference import fd_gradient

pytestmark = pytest.mark.needs_enzyme

pytest.importorskip("Cython")
pytest.importorskip("setuptools")


C_CUBE = r"""
double cube(const double *x, int n) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += x[i] * x[i] * x[i];
    return s;
}
"""


@numba.njit(parallel=True, boundscheck=True)
def shifted_product(x, k):
    s = 0.0
    for i in numba.prange(x.shape[0]):
        s += x[i] * x[i + k]  # an IndexError for k > 0, on the last chunk's thread
    return s


CALLER = r"""
include "decls.pxi"

def call_shift(double[::1] x, double[::1] dx, int64_t k):
    cdef int status
    with nogil:
        status = dshift(x, dx, k, 1.0)
    return status

def call_wsum(const double[:] x, double[:] dx, double[:] w, double[:] dw):
    cdef double value = 0.0
    cdef int status
    with nogil:
        status = dwsum(x, dx, w, dw, 1.0, &value)
    return status, value

def call_scaled(const double[::1] x, double[::1] dx, double k):
    cdef double value = 0.0, dk = 0.0
    cdef int status
    with nogil:
        status = dscaled(x, dx, k, 2.0, &value, &dk)
    return status, value, dk

def call_forward(const double[::1] x, double[::1] tx, double k):
    cdef double y = 0.0, dy = 0.0
    cdef int status = fscaled(x, tx, k, &y, &dy)
    return status, y, dy

def call_cube(double[::1] x, double[::1] dx):
    cdef double value = 0.0
    cdef int status = dcube(&x[0], &dx[0], <int>x.shape[0], 1.0, &value)
    return status, value

def call_sines(double[::1] x, double[::1] dx, double[::1] scratch):
    cdef int status
    with nogil:
        status = dsines(x, dx, scratch, 1.0)
    return status

def call_scaled_sines(double[::1] x, double[::1] dx, double[::1] c, double[::1] scratch):
    cdef int status
    with nogil:
        status = dssines(x, dx, c, scratch, 1.0)
    return status

def call_at(double[::1] x, double[::1] dx, Py_ssize_t i):
    cdef int status = dat(x, dx, i, 1.0, NULL)
    return status

# Second derivatives over strided views: the first derivative's shadow parameter (dx,
# g, da) is a view laid out as its array, as are the shadows.
def call_fwsum(const double[:] x, double[:] tx, double[:] dx, double[:] tdx, double[:] w):
    cdef int status
    with nogil:
        status = fwsum(x, tx, dx, tdx, w, 1.0)
    return status

def call_rwsum(const double[:] x, double[:] dx, double[:] g, double[:] v, double[:] w):
    cdef int status
    with nogil:
        status = rwsum(x, dx, g, v, w, 1.0)
    return status

def call_fquad(double[:, :] a, double[:, :] ta, double[:, :] da, double[:, :] tda,
               const double[:, :] b):
    cdef int status
    with nogil:
        status = fquad(a, ta, da, tda, b, 1.0)
    return status

def call_ffortran(double[::1, :] a, double[::1, :] ta, double[::1, :] da,
                  double[::1, :] tda):
    cdef int status
    with nogil:
        status = ffortran(a, ta, da, tda, 1.0)
    return status
"""


def _second_derivatives(m):
    """Forward over reverse of wsum, quad and fortran, reverse over reverse of wsum."""
    dw = ez.autodiff(m.wsum, ez.Reverse, ez.Duplicated, ez.Const, ez.ActiveOnly)
    dq = ez.autodiff(m.quad, ez.Reverse, ez.Duplicated, ez.Const, ez.ActiveOnly)
    df = ez.autodiff(m.fortran, ez.Reverse, ez.Duplicated, ez.ActiveOnly)
    return {
        "fwsum": ez.autodiff(dw, ez.Forward, ez.Dual, ez.Dual, ez.Const, ez.Const),
        "rwsum": ez.autodiff(dw, ez.Reverse, ez.Duplicated, ez.Duplicated, ez.Const, ez.Const),
        "fquad": ez.autodiff(dq, ez.Forward, ez.Dual, ez.Dual, ez.Const, ez.Const),
        "ffortran": ez.autodiff(df, ez.Forward, ez.Dual, ez.Dual, ez.Const),
    }


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    m = kernels.module()
    derivatives = {
        **_second_derivatives(m),
        "dwsum": ez.autodiff(m.wsum, ez.Reverse, ez.Duplicated, ez.Duplicated, ez.Active),
        "dscaled": ez.autodiff(m.scaled, ez.Reverse, ez.Duplicated, ez.Active, ez.Active),
        "fscaled": ez.autodiff(m.scaled, ez.Forward, ez.Dual, ez.Const, ez.Dual),
        "dat": ez.autodiff(m.at, ez.Reverse, ez.Duplicated, ez.Const, ez.Active),
        # A C function through ez.c: raw pointers, no shapes.
        "dcube": ez.autodiff(ez.c(C_CUBE).cube, ez.Reverse, ez.Duplicated, ez.Const, ez.Active),
        # A Numba function writing its Const scratch array.
        "dsines": ez.autodiff(
            squares_then_sines, ez.Reverse, ez.Duplicated, ez.Const, ez.ActiveOnly
        ).for_arguments((np.ones(4), np.zeros(4), np.zeros(4), 1.0)),
        # Its build for overlapping arrays refused (tests/test_const_memory.py).
        "dssines": ez.autodiff(
            scaled_squares_then_sines, ez.Reverse, ez.Duplicated, ez.Const, ez.Const, ez.ActiveOnly
        ).for_arguments((np.ones(4), np.zeros(4), np.ones(4), np.zeros(4), 1.0)),
        # A Numba prange loop on two threads (tests/test_prange.py).
        "dshift": ez.autodiff(
            shifted_product, ez.Reverse, ez.Duplicated, ez.Const, ez.ActiveOnly, threads=2
        ).for_arguments((np.ones(8), np.zeros(8), 0, 1.0)),
    }
    folder = str(tmp_path_factory.mktemp("cython_declaration"))
    text = "\n".join(d.cython_declaration(name) for name, d in derivatives.items())
    with open(os.path.join(folder, "decls.pxi"), "w") as f:
        f.write(text)
    module = build(folder, "enzyme_py_test_declarations", CALLER)
    return m, derivatives, module, text  # derivatives kept alive with the module


def test_reverse_strided_views_match_the_python_path(built):
    _, derivatives, module, _ = built
    x = np.linspace(-1.0, 2.0, 12)[::-2]
    w = np.linspace(0.5, 1.5, 12)[::2]
    dx, dw = np.zeros(12)[::-2], np.zeros(12)[::2]  # laid out as their arrays
    status, value = module.call_wsum(x, dx, w, dw)
    assert status == 0
    rx, rw = np.zeros(6), np.zeros(6)
    (expected,) = derivatives["dwsum"](x, rx, w, rw, 1.0)
    assert value == pytest.approx(expected, rel=1e-14)
    np.testing.assert_allclose(dx, rx, rtol=1e-14)
    np.testing.assert_allclose(dw, rw, rtol=1e-14)


def test_a_prange_chunk_that_raises_returns_failed_not_out_of_memory(built):
    from enzyme_py import _cython_call, _state

    _, _, module, _ = built
    before = _state.native.set_parfor_grain_limit(1)  # short range, several threads
    try:
        x, dx = np.linspace(0.5, 1.5, 101), np.zeros(101)
        assert module.call_shift(x, dx, 0) == 0
        np.testing.assert_allclose(dx, 2.0 * x, rtol=1e-14)
        status = module.call_shift(x, np.zeros(101), 1)  # x[101]: the IndexError
    finally:
        _state.native.set_parfor_grain_limit(before)
    assert status == _cython_call.FAILED


def test_shadow_unlike_its_array_is_refused(built):
    _, _, module, _ = built
    x = np.linspace(-1.0, 2.0, 12)[::-2]
    w = np.ones(6)
    assert module.call_wsum(x, np.zeros(6), w, np.zeros(6))[0] == 1  # dx: other strides
    assert module.call_wsum(x, np.zeros(12)[::-2][:5], w, np.zeros(6))[0] == 1  # shape
    # A shadow that is its array's memory.
    assert module.call_wsum(np.ones(6), np.zeros(6), w, w)[0] == 1
    # An array whose elements share memory (stride 0), with a shadow laid out so: the
    # six adjoints would add into one place.
    shared = np.lib.stride_tricks.as_strided(np.ones(1), shape=(6,), strides=(0,))
    shared_dx = np.lib.stride_tricks.as_strided(np.zeros(1), shape=(6,), strides=(0,))
    assert module.call_wsum(shared, shared_dx, w, np.zeros(6))[0] == 1


def test_a_written_const_array_sharing_memory_with_a_shadowed_one_is_refused(built):
    # Enzyme takes a Const argument's memory for constant: the gradient through the
    # memory they share would be lost (tests/test_numba.py).
    _, _, module, _ = built
    x = np.array([0.3, -1.2, 2.0, 0.7])
    w, dw = x.copy(), np.zeros(4)
    assert module.call_sines(w, dw, w) == 1
    big = np.concatenate([x, [0.0, 0.0]])
    assert module.call_sines(big[:4], dw, big[2:]) == 1  # partly
    assert module.call_sines(w, dw, np.zeros(4)) == 0  # memory of its own
    np.testing.assert_allclose(dw, np.cos(x * x) * 2.0 * x, rtol=1e-14)
    assert w.tolist() == x.tolist()


def test_overlapping_arrays_are_refused_where_their_build_is(built):
    # x and c overlapping take the build without the no-overlap promise, which loses
    # the derivative through the Const scratch array and is refused: status 1.
    _, _, module, _ = built
    x = np.array([0.3, -1.2, 2.0, 0.7])
    dx = np.zeros(4)
    assert module.call_scaled_sines(x, dx, x, np.zeros(4)) == 1
    assert not dx.any()
    assert module.call_scaled_sines(x, dx, x.copy(), np.zeros(4)) == 0
    np.testing.assert_allclose(dx, x * np.cos(x * x) * 2.0 * x, rtol=1e-14)


def test_overlapping_arrays_take_the_build_without_noalias(built):
    _, derivatives, module, text = built
    assert derivatives["dwsum"].may_overlap and "_safe" in text
    z = np.linspace(-1.0, 1.0, 7)
    dz = np.zeros(7)
    status, value = module.call_wsum(z, dz, z, dz)
    assert status == 0
    rz = np.zeros(7)
    (expected,) = derivatives["dwsum"](z, rz, z, rz, 1.0)
    assert value == pytest.approx(expected, rel=1e-14)
    np.testing.assert_allclose(dz, rz, rtol=1e-14)
    reference = fd_gradient(lambda v: wsum_np(v, v), z)
    np.testing.assert_allclose(dz, reference, rtol=1e-6, atol=1e-9)


def test_active_scalar_adjoint_and_forward_tangent(built):
    _, _, module, _ = built
    x = np.linspace(0.5, 1.5, 5)
    dx = np.zeros(5)
    status, value, dk = module.call_scaled(x, dx, 3.0)
    assert status == 0
    assert value == pytest.approx(9.0 * np.sum(x * x))
    assert dk == pytest.approx(2.0 * 2 * 3.0 * np.sum(x * x))  # seed 2
    np.testing.assert_allclose(dx, 2.0 * 2 * 9.0 * x)
    t = np.linspace(1.0, -1.0, 5)
    status, y, dy = module.call_forward(x, t, 3.0)
    assert status == 0
    assert y == pytest.approx(9.0 * np.sum(x * x))
    assert dy == pytest.approx(float(np.sum(18.0 * x * t)))


def test_a_c_function_through_raw_pointers(built):
    _, _, module, _ = built
    x = np.linspace(0.5, 1.5, 4)
    dx = np.zeros(4)
    status, value = module.call_cube(x, dx)
    assert status == 0
    assert value == pytest.approx(float(np.sum(x**3)))
    np.testing.assert_allclose(dx, 3 * x * x)


def test_a_failure_inside_is_a_status(built):
    _, _, module, _ = built
    x = np.linspace(0.5, 1.5, 3)
    dx = np.zeros(3)
    assert module.call_at(x, dx, 1) == 0
    np.testing.assert_allclose(dx, [0.0, 3.0, 0.0])
    assert module.call_at(x, np.zeros(3), 7) == 3  # a bounds check's IndexError
    # The exception is dropped, not leaked.
    gc.collect()
    # type(), not isinstance(): a dead weakref.proxy among the objects raises on the latter
    before = sum(type(o) is IndexError for o in gc.get_objects())
    for _ in range(20):
        assert module.call_at(x, np.zeros(3), 7) == 3
    gc.collect()
    assert sum(type(o) is IndexError for o in gc.get_objects()) - before < 5


def test_refused_derivatives(built):
    m = built[0]
    wide = ez.autodiff(m.scaled, ez.Forward, ez.Dual, ez.Const, ez.Dual, width=2)
    with pytest.raises(ValueError, match="width=2"):
        wide.cython_declaration()
    d = ez.autodiff(m.scaled, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)
    with pytest.raises(ValueError, match="identifier"):
        d.cython_declaration("not a name")
    assert "cdef inline int dscaled(" in d.cython_declaration()


def test_second_derivatives_over_strided_views(built):
    """Forward over reverse and reverse over reverse of wsum on reversed and stepped
    views, called from nogil Cython code: H v against central second differences, the
    gradient against central differences, both against the Python path."""
    _, derivatives, module, _ = built
    n = 6
    x = np.linspace(-1.0, 2.0, 2 * n)[::-2]  # reversed, step 2
    w = np.linspace(0.5, 1.5, 3 * n)[::3]
    x0, w0 = x.copy(), w.copy()
    h = fd_hessian(lambda z: wsum_np(z, w0), x0)
    g = fd_gradient(lambda z: wsum_np(z, w0), x0)
    t = np.linspace(1.0, -1.0, n)

    def like_x():  # zeros laid out as x (its strides)
        return np.zeros(2 * n)[::-2]

    tx, dx, tdx = like_x(), like_x(), like_x()
    tx[...] = t
    assert module.call_fwsum(x, tx, dx, tdx, w) == 0
    np.testing.assert_allclose(dx, g, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(tdx, h @ t, rtol=1e-5, atol=1e-6)
    ex, etdx = np.zeros(n), np.zeros(n)
    derivatives["fwsum"](x, t, ex, etdx, w, 1.0)
    np.testing.assert_allclose(dx, ex, rtol=1e-14)
    np.testing.assert_allclose(tdx, etdx, rtol=1e-14)
    np.testing.assert_array_equal(x, x0)
    # Reverse over reverse: the cotangent v of the gradient gives H v in dx.
    dx, gg, v = like_x(), like_x(), like_x()
    v[...] = t
    assert module.call_rwsum(x, dx, gg, v, w) == 0
    np.testing.assert_allclose(dx, h @ t, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gg, g, rtol=1e-6, atol=1e-8)
    rdx, rg = np.zeros(n), np.zeros(n)
    derivatives["rwsum"](x, rdx, rg, t.copy(), w, 1.0)
    np.testing.assert_allclose(dx, rdx, rtol=1e-14)
    # Status 1: the first derivative's shadow parameter (or a shadow) unlike x.
    assert module.call_fwsum(x, tx, np.zeros(n), like_x(), w) == 1  # dx: other strides
    assert module.call_fwsum(x, tx, like_x(), np.zeros(n), w) == 1  # tdx: other strides
    assert module.call_fwsum(x, tx, np.zeros(2 * n)[::-2][: n - 1], like_x(), w) == 1
    assert module.call_rwsum(x, like_x(), np.zeros(n), v, w) == 1


@pytest.mark.parametrize("layout", ["transposed", "reversed rows, every other column"])
def test_second_derivative_over_2d_views(built, layout):
    _, _, module, _ = built
    shape = (4, 3) if layout == "transposed" else (6, 8)

    def view(buffer):
        return buffer.T if layout == "transposed" else buffer[::-2, ::2]

    def like_a():
        return view(np.zeros(shape))

    a = view(np.linspace(-1.0, 1.0, shape[0] * shape[1]).reshape(shape))
    b = np.linspace(0.5, 2.0, a.size).reshape(a.shape)
    a0 = a.copy()
    ta, da, tda = like_a(), like_a(), like_a()
    ta[...] = np.linspace(1.0, -1.0, a.size).reshape(a.shape)
    assert module.call_fquad(a, ta, da, tda, b) == 0
    h = fd_hessian(lambda z: quad_np(z, b), a0)
    np.testing.assert_allclose(tda, np.tensordot(h, ta, axes=2), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(da, fd_gradient(lambda z: quad_np(z, b), a0), rtol=1e-6, atol=1e-8)
    assert module.call_fquad(a, ta, np.zeros(a.shape), like_a(), b) == 1


def test_second_derivative_over_a_fortran_view(built):
    _, _, module, _ = built
    a = np.asfortranarray(np.linspace(-1.0, 1.0, 12).reshape(3, 4))
    ta = np.asfortranarray(np.linspace(1.0, 2.0, 12).reshape(3, 4))
    da, tda = np.zeros((3, 4), order="F"), np.zeros((3, 4), order="F")
    assert module.call_ffortran(a, ta, da, tda) == 0
    h = fd_hessian(fortran_np, a.copy())
    np.testing.assert_allclose(tda, np.tensordot(h, ta, axes=2), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(da, fd_gradient(fortran_np, a.copy()), rtol=1e-6, atol=1e-8)
    # The shadow parameter as a Fortran view of another shape: status 1.
    assert module.call_ffortran(a, ta, np.zeros((3, 3), order="F"), tda) == 1
