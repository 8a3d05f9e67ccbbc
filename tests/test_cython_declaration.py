"""Derivatives called from Cython (Derivative.cython_declaration()): a Cython module
built with cythonize includes the declarations and calls them without the GIL; the
results match the Python path's, and its status codes say what went wrong."""

from __future__ import annotations

import gc
import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest

import enzyme_py as ez

pytestmark = pytest.mark.needs_enzyme

pytest.importorskip("Cython")
pytest.importorskip("setuptools")


def _example():
    """examples/cython_optimizer.py as a module (its main() does not run): the one
    place that builds a Cython module with cythonize, for the example and these tests."""
    path = Path(__file__).resolve().parents[1] / "examples" / "cython_optimizer.py"
    spec = importlib.util.spec_from_file_location("enzyme_py_example_cython_optimizer", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build = _example().build

KERNELS = r"""
cimport cython
from libc.math cimport sin

@cython.boundscheck(False)
@cython.wraparound(False)
cdef double wsum(const double[:] x, double[:] w) noexcept nogil:
    cdef double s = 0.0
    cdef Py_ssize_t i
    for i in range(x.shape[0]):
        s += w[i] * sin(x[i]) * x[i]
    return s

@cython.boundscheck(False)
cdef double scaled(const double[::1] x, double k) noexcept nogil:
    cdef double s = 0.0
    cdef Py_ssize_t i
    for i in range(x.shape[0]):
        s += k * k * x[i] * x[i]
    return s

cdef double at(double[::1] x, Py_ssize_t i) noexcept nogil:
    return x[i] * x[i] * x[i]
"""

C_CUBE = r"""
double cube(const double *x, int n) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += x[i] * x[i] * x[i];
    return s;
}
"""

CALLER = r"""
include "decls.pxi"

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

def call_at(double[::1] x, double[::1] dx, Py_ssize_t i):
    cdef int status = dat(x, dx, i, 1.0, NULL)
    return status
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    m = ez.cython(KERNELS)
    derivatives = {
        "dwsum": ez.autodiff(m.wsum, ez.Reverse, ez.Duplicated, ez.Duplicated, ez.Active),
        "dscaled": ez.autodiff(m.scaled, ez.Reverse, ez.Duplicated, ez.Active, ez.Active),
        "fscaled": ez.autodiff(m.scaled, ez.Forward, ez.Dual, ez.Const, ez.Dual),
        "dat": ez.autodiff(m.at, ez.Reverse, ez.Duplicated, ez.Const, ez.Active),
        # A C function through ez.c: raw pointers, no shapes.
        "dcube": ez.autodiff(ez.c(C_CUBE).cube, ez.Reverse, ez.Duplicated, ez.Const, ez.Active),
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


def test_shadow_unlike_its_array_is_refused(built):
    _, _, module, _ = built
    x = np.linspace(-1.0, 2.0, 12)[::-2]
    w = np.ones(6)
    assert module.call_wsum(x, np.zeros(6), w, np.zeros(6))[0] == 1  # dx: other strides
    assert module.call_wsum(x, np.zeros(12)[::-2][:5], w, np.zeros(6))[0] == 1  # shape
    # A shadow that is its array's memory.
    assert module.call_wsum(np.ones(6), np.zeros(6), w, w)[0] == 1


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
    np.testing.assert_allclose(dz, 2 * z * np.sin(z) + z * z * np.cos(z), rtol=1e-12)


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
