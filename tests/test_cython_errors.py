"""What ez.cython refuses, and how: each message names the parameter or construct of
the user's Cython code and says what to write instead, in Cython's terms (no advice
about Numba or C sources)."""

from __future__ import annotations

import numpy as np
import pytest

import enzyme_py as ez

pytestmark = pytest.mark.needs_enzyme

SOURCE = r"""
from cython cimport view

ctypedef struct Pair:
    double a
    double b

cdef extern from *:
    '''
    double enzyme_py_test_opaque(double x);
    '''
    double enzyme_py_test_opaque(double x) nogil

cdef double pointers(double **p) noexcept nogil:
    return p[0][0]

cdef double long_doubles(long double[::1] p) noexcept nogil:
    return <double>p[0]

cdef double takes_object(object o) noexcept:
    return 1.0

cdef double indirect(double[::view.indirect, ::1] a) noexcept nogil:
    return a[0, 0]

cdef Pair returns_struct(double x) noexcept nogil:
    cdef Pair p
    p.a = x
    p.b = x
    return p

cdef double raises(double x) except? -1:
    if x < 0:
        raise ValueError("negative", x)  # a run-time value: not a plain raise
    return x * x

cdef double opaque(double x) noexcept nogil:
    return enzyme_py_test_opaque(x) * x
"""


@pytest.fixture(scope="module")
def m():
    return ez.cython(SOURCE)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("pointers", r"parameter 'p' \(double \*\*\).*pointer to pointers.*2-D memoryview"),
        ("long_doubles", r"parameter 'p' \(long double\[::1\]\).*long double.*declare it"),
        ("takes_object", r"parameter 'o'.*Python object.*declare it with one of those"),
        ("indirect", r"parameter 'a'.*indirect memoryview.*declare it direct"),
        ("returns_struct", r"'returns_struct' returns Pair.*output memoryview"),
        ("raises", r"'raises'.*reaches Python.*raise statement.*other raise statements out"),
    ],
)
def test_refused_functions_say_what_to_write(m, name, message):
    assert name not in m.functions()
    with pytest.raises(TypeError, match=message) as info:
        ez.grad(m[name])
    assert "numba" not in str(info.value).lower() and "njit" not in str(info.value)
    with pytest.raises(KeyError, match=rf"with types enzyme_py cannot pass: .*{name}"):
        m["no_such_function"]


def test_unknown_external_function_advice_is_cython(m):
    with pytest.raises(ez.EnzymeError) as info:
        ez.grad(m.opaque)(1.5)
    text = str(info.value)
    assert "enzyme_py_test_opaque" in text
    assert "cdef function of the Cython module" in text
    assert "numba" not in text.lower() and "njit" not in text and "ez.c" not in text


def test_argument_errors_name_the_parameter(m):
    fused = ez.cython(
        "cimport cython\n"
        "cdef double f(const double[::1] x, double[::1, :] a) noexcept nogil:\n"
        "    return x[0] * a[0, 0]\n"
    )
    g = ez.grad(fused.f, argnums=(0, 1))
    a = np.asfortranarray(np.ones((2, 2)))
    with pytest.raises(ValueError, match=r"'x'.*C-contiguous.*np.ascontiguousarray"):
        g(np.ones(4)[::2], a)
    with pytest.raises(ValueError, match=r"'a'.*Fortran-contiguous.*np.asfortranarray"):
        g(np.ones(2), np.ones((2, 2)))
    with pytest.raises(ValueError, match=r"'x'.*dtype float64"):
        g(np.ones(2, np.float32), a)
