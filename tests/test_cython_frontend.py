"""Cython modules (ez.cython): cdef/cpdef functions over C-contiguous memoryviews,
checked against float64 central finite differences."""

from __future__ import annotations

import json
import pickle
import sys

import numpy as np
import pytest

import enzyme_py as ez

from reference import fd_gradient, fd_scalar

pytestmark = pytest.mark.needs_enzyme

SOURCE = r"""
cimport cython
from libc.math cimport sin, exp, log

@cython.boundscheck(False)
cdef double energy(double[::1] x, double k) noexcept nogil:
    cdef double e = 0.0
    cdef Py_ssize_t i
    for i in range(x.shape[0]):
        e += k * x[i] * x[i] * sin(x[i])
    return e

@cython.boundscheck(False)
@cython.wraparound(False)
cdef double last_weighted(const double[::1] x) noexcept:
    # wraparound off: plain indexing
    cdef double s = 0.0
    cdef Py_ssize_t i
    for i in range(x.shape[0]):
        s += <double>(i + 1) * exp(x[i])
    return s

@cython.boundscheck(False)
cdef double negative_index(double[::1] x) noexcept:
    # wraparound on: x[-1] is the last element
    return x[-1] * x[-1] * x[0]

@cython.boundscheck(False)
cdef inline double sq(double v) noexcept nogil:
    return v * v

@cython.boundscheck(False)
cdef double calls(double[::1] x) noexcept nogil:
    cdef double s = 0.0
    for i in range(x.shape[0]):
        s += sq(log(1.0 + sq(x[i])))
    return s

@cython.boundscheck(False)
cdef void square_sin(double[::1] out, const double[::1] x) noexcept nogil:
    for i in range(x.shape[0]):
        out[i] = x[i] * x[i] * sin(x[i])

@cython.boundscheck(False)
cdef int scale_rows(double[:, ::1] a, double[::1] s) except -1:
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            a[i, j] *= s[i] * s[i]
    return 0

@cython.boundscheck(False)
cdef double block(double[::1] x) noexcept:
    cdef double s = 0.0
    with nogil:
        for i in range(x.shape[0]):
            s += x[i] * x[i] * x[i]
    return s

@cython.boundscheck(False)
cdef cython.floating fsum(cython.floating[::1] x) noexcept nogil:
    cdef cython.floating s = 0
    for i in range(x.shape[0]):
        s += x[i] * x[i]
    return s

cpdef double poly(double x, int n):
    cdef double s = 0.0, p = 1.0
    cdef int i
    for i in range(n):
        p *= x
        s += p
    return s

cdef double by_pointer(double *x, int n) noexcept nogil:
    cdef double s = 0.0
    for i in range(n):
        s += x[i] * x[i] * x[i]
    return s

cdef double checked(double[::1] x) noexcept:
    # boundscheck and wraparound on (Cython's defaults)
    cdef double s = 0.0
    cdef Py_ssize_t i
    for i in range(x.shape[0]):
        s += x[i] * x[-1 - i]
    return s

cdef double at(double[::1] x, Py_ssize_t i) except? -1:
    return x[i] * x[i] * x[i]

cdef double at_nogil(double[::1] x, Py_ssize_t i) noexcept nogil:
    return x[i] * x[i] * x[i]

cdef double raises(double v) except? -1:
    if v < 0:
        raise ValueError("negative", v)  # a run-time value: not a plain raise
    return v * v

cdef double takes_object(object o) noexcept:
    return 1.0
"""


@pytest.fixture(scope="module")
def m():
    return ez.cython(SOURCE)


def energy_np(x, k=3.0):
    return float(np.sum(k * x * x * np.sin(x)))


def test_functions_listed_and_fused_specialisations_named(m):
    names = m.functions()
    for name in ("energy", "calls", "square_sin", "scale_rows", "block", "poly", "by_pointer"):
        assert name in names
    assert "fsum[float]" in names and "fsum[double]" in names
    with pytest.raises(AttributeError, match=r"fused function: pick a specialisation"):
        _ = m.fsum
    assert m["energy"] is m.energy
    assert [p.name for p in m.energy.params if p.hidden is None] == ["x", "k"]


def test_reverse_memoryview_against_fd(m):
    x = np.linspace(-1.0, 2.0, 7)
    dx = np.zeros_like(x)
    (value,) = ez.autodiff(m.energy, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)(
        x, dx, 3.0, 1.0
    )
    assert value == pytest.approx(energy_np(x), rel=1e-13)
    np.testing.assert_allclose(dx, fd_gradient(energy_np, x), rtol=1e-6, atol=1e-8)


def test_forward_and_helpers(m):
    x = np.linspace(0.1, 1.5, 5)
    t = np.linspace(1.0, -1.0, 5)
    y, dy = ez.autodiff(m.energy, ez.Forward, ez.Dual, ez.Const, ez.Dual)(x, t, 3.0)
    assert y == pytest.approx(energy_np(x))
    assert dy == pytest.approx(float(fd_gradient(energy_np, x) @ t), rel=1e-6)
    np.testing.assert_allclose(ez.grad(m.energy)(x, 3.0), fd_gradient(energy_np, x), rtol=1e-6)
    h = ez.hessian(m.energy)(x, 3.0)
    fd_h = np.array(
        [fd_gradient(lambda z, i=i: float(ez.grad(m.energy)(z, 3.0)[i]), x) for i in range(x.size)]
    )
    np.testing.assert_allclose(h, fd_h, rtol=1e-5, atol=1e-7)


def test_wraparound_off_and_on(m):
    x = np.linspace(-0.5, 0.5, 4)

    def lw(z):
        return float(np.sum(np.arange(1, 5) * np.exp(z)))

    np.testing.assert_allclose(ez.grad(m.last_weighted)(x), fd_gradient(lw, x), rtol=1e-6)
    np.testing.assert_allclose(
        ez.grad(m.negative_index)(x),
        fd_gradient(lambda z: z[-1] ** 2 * z[0], x),
        rtol=1e-6,
        atol=1e-9,
    )


def test_calls_between_cdef_functions(m):
    x = np.linspace(-1.0, 1.0, 6)
    ref = fd_gradient(lambda z: float(np.sum(np.log1p(z * z) ** 2)), x)
    np.testing.assert_allclose(ez.grad(m.calls)(x), ref, rtol=1e-6, atol=1e-9)


def test_output_memoryview_jacobian(m):
    x = np.linspace(0.2, 1.2, 4)
    out = np.zeros_like(x)
    j = ez.jacobian(m.square_sin, argnums=1, output=0)(out, x)
    ref = np.diag(2 * x * np.sin(x) + x * x * np.cos(x))
    np.testing.assert_allclose(j, ref, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(out, 0.0)  # jacobian runs on copies: the caller's arrays stay


def test_except_minus_one_two_dimensional(m):
    a = np.arange(6.0).reshape(2, 3) + 1.0
    s = np.array([0.5, 2.0])
    da = np.ones_like(a)  # seed of the output (a is written in place)
    ds = np.zeros_like(s)
    a0 = a.copy()
    ez.autodiff(m.scale_rows, ez.Reverse, ez.Duplicated, ez.Duplicated, ez.Const)(a, da, s, ds)
    np.testing.assert_allclose(a, a0 * (s * s)[:, None])

    def total(z):
        return float(np.sum(a0 * (z * z)[:, None]))

    np.testing.assert_allclose(ds, fd_gradient(total, s), rtol=1e-6)


def test_with_nogil_block(m):
    x = np.linspace(-1.0, 1.0, 5)
    np.testing.assert_allclose(
        ez.grad(m.block)(x), fd_gradient(lambda z: float(np.sum(z**3)), x), rtol=1e-6, atol=1e-9
    )


@pytest.mark.parametrize(
    ("name", "dtype", "rtol"),
    [("fsum[float]", np.float32, 1e-5), ("fsum[double]", np.float64, 1e-12)],
)
def test_fused_specialisations(m, name, dtype, rtol):
    x = np.linspace(-1.0, 1.0, 5).astype(dtype)
    g = ez.grad(m[name])(x)
    assert g.dtype == dtype
    np.testing.assert_allclose(g, 2 * x.astype(np.float64), rtol=rtol)
    ref = fd_gradient(lambda z: float(np.sum(z * z)), x.astype(np.float64))
    np.testing.assert_allclose(g, ref, rtol=1e-4, atol=1e-6)


def test_cpdef_scalar_and_int_const(m):
    g = ez.grad(m.poly)(1.3, 4)
    assert g == pytest.approx(
        fd_scalar(lambda v: sum(v ** (i + 1) for i in range(4)), 1.3), rel=1e-7
    )


def test_raw_pointer(m):
    x = np.linspace(0.5, 1.5, 3)
    g = ez.grad(m.by_pointer)(x, 3)
    np.testing.assert_allclose(g, fd_gradient(lambda z: float(np.sum(z**3)), x), rtol=1e-6)


def test_argument_errors_name_the_parameter(m):
    g = ez.grad(m.energy)
    with pytest.raises(ValueError, match=r"'x'.*dtype float64"):
        g(np.ones(3, dtype=np.float32), 1.0)
    with pytest.raises(ValueError, match=r"'x'.*1 dimension"):
        g(np.ones((2, 3)), 1.0)
    with pytest.raises(ValueError, match=r"'x'.*C-contiguous.*np.ascontiguousarray"):
        g(np.ones(6)[::2], 1.0)
    ro = np.ones(3)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match=r"'x'.*read-only"):
        g(ro, 1.0)
    with pytest.raises(ValueError, match=r"'a'.*2 dimension"):
        ez.autodiff(m.scale_rows, ez.Reverse, ez.Duplicated, ez.Duplicated, ez.Const)(
            np.ones(3), np.ones(3), np.ones(2), np.zeros(2)
        )


def test_boundscheck_on(m):
    x = np.linspace(-1.0, 1.0, 5)
    ref = fd_gradient(lambda z: float(np.sum(z * z[::-1])), x)
    np.testing.assert_allclose(ez.grad(m.checked)(x), ref, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("name", ["at", "at_nogil"])
def test_index_error_inside_a_derivative_is_raised_again(m, name):
    x = np.array([1.0, 2.0, 3.0])
    dx = np.zeros_like(x)
    df = ez.autodiff(m[name], ez.Reverse, ez.Duplicated, ez.Const, ez.Active)
    (value,) = df(x, dx, -1, 1.0)  # wraparound: the last element
    assert value == pytest.approx(27.0)
    np.testing.assert_allclose(dx, [0.0, 0.0, 27.0])
    for bad in (3, -4):
        with pytest.raises(IndexError, match="Out of bounds on buffer access"):
            df(x, dx, bad, 1.0)
    fwd = ez.autodiff(m[name], ez.Forward, ez.Dual, ez.Const, ez.Dual)
    assert fwd(x, np.ones(3), 1) == (pytest.approx(8.0), pytest.approx(12.0))
    with pytest.raises(IndexError, match="Out of bounds"):
        fwd(x, np.ones(3), 7)


def test_python_reaching_functions_are_refused(m):
    with pytest.raises(TypeError, match=r"'raises'.*reaches Python.*raise statement"):
        _ = m.raises
    with pytest.raises(TypeError, match=r"'o'.*Python object"):
        _ = m.takes_object
    assert "raises" not in m.functions() and "takes_object" not in m.functions()


def test_boundscheck_off_by_directive():
    mod = ez.cython(
        "cdef double sumsq(double[::1] x) noexcept:\n"
        "    cdef double s = 0\n"
        "    for i in range(x.shape[0]):\n"
        "        s += x[i] * x[i]\n"
        "    return s\n",
        directives={"boundscheck": False},
    )
    x = np.linspace(-1.0, 1.0, 4)
    np.testing.assert_allclose(ez.grad(mod.sumsq)(x), 2 * x, rtol=1e-13)


def test_cython_errors_are_compile_errors(tmp_path):
    with pytest.raises(ez.CompileError, match=r"bad\.pyx:2:"):
        path = tmp_path / "bad.pyx"
        path.write_text("cdef double f(double x) noexcept:\n    return x +\n")
        ez.cython(path=str(path))
    with pytest.raises(ez.CompileError, match="unknown Cython compiler directive 'nosuch'"):
        ez.cython("cdef double f(double x) noexcept:\n    return x\n", directives={"nosuch": 1})
    with pytest.raises(TypeError, match="path="):
        ez.cython()
    with pytest.raises(TypeError, match="directives is a dict"):
        ez.cython("x = 1", directives=["boundscheck"])


def test_path_and_pickle(tmp_path, m):
    path = tmp_path / "kern.pyx"
    path.write_text("cdef double cube(double x) noexcept nogil:\n    return x * x * x\n")
    mod = ez.cython(path=path)
    assert mod.functions() == ["cube"]
    assert ez.grad(mod.cube)(2.0) == pytest.approx(12.0)
    again = pickle.loads(pickle.dumps(mod))
    assert again.functions() == ["cube"]
    fn = pickle.loads(pickle.dumps(m.energy))
    x = np.linspace(0.0, 1.0, 3)
    np.testing.assert_allclose(ez.grad(fn)(x, 3.0), ez.grad(m.energy)(x, 3.0))
    df = pickle.loads(
        pickle.dumps(ez.autodiff(m.energy, ez.Reverse, ez.Duplicated, ez.Const, ez.Active))
    )
    dx = np.zeros_like(x)
    df(x, dx, 3.0, 1.0)
    np.testing.assert_allclose(dx, fd_gradient(energy_np, x), rtol=1e-6, atol=1e-9)


def test_missing_cython_or_clang_is_a_compile_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "Cython", None)  # find_spec raises for None entries
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(ez.CompileError, match=r"pip install 'enzyme_py\[cython\]'"):
        ez.cython("cdef double other(double x) noexcept:\n    return x\n")
    monkeypatch.undo()
    monkeypatch.setenv("ENZYME_PY_CLANG", "/nonexistent/clang-15")
    with pytest.raises(ez.CompileError, match="clang"):
        ez.cython("cdef double other2(double x) noexcept:\n    return x\n")


def test_width_two_and_value_and_grad(m):
    x = np.linspace(0.1, 1.0, 4)
    t = np.stack([np.ones(4), np.linspace(-1.0, 1.0, 4)])
    dfw = ez.autodiff(m.energy, ez.Forward, ez.DualOnly, ez.Const, ez.DualOnly, width=2)
    np.testing.assert_allclose(dfw(x, t, 3.0), t @ fd_gradient(energy_np, x), rtol=1e-6)
    value, g = ez.value_and_grad(m.energy)(x, 3.0)
    assert value == pytest.approx(energy_np(x))
    np.testing.assert_allclose(g, fd_gradient(energy_np, x), rtol=1e-6)


def test_derivative_unpickled_in_a_fresh_process(m):
    from conftest import run_python

    df = ez.autodiff(m.energy, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)
    code = f"""
import json, pickle, numpy as np
df = pickle.loads({pickle.dumps(df)!r})
x = np.linspace(0.0, 1.0, 3)
dx = np.zeros_like(x)
df(x, dx, 3.0, 1.0)
print(json.dumps(dx.tolist()))
"""
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    x = np.linspace(0.0, 1.0, 3)
    np.testing.assert_allclose(
        json.loads(proc.stdout), fd_gradient(energy_np, x), rtol=1e-6, atol=1e-9
    )


STRUCTS = r"""
from libc.math cimport exp

ctypedef struct Spring:
    double k
    double c

ctypedef struct FPair:
    float a
    float b

ctypedef struct Mixed:
    double a
    int n

cdef double energy(const Spring *s, double x) noexcept nogil:
    return s.k * x * x + s.c * exp(x)

cdef void stretch(Spring *s, double x) noexcept nogil:
    s.k = s.k * x * x
    s.c = s.c + s.k

cdef float fpair(FPair *p) noexcept nogil:
    return p.a * p.a * p.b

cdef double mixed(Mixed *m) noexcept nogil:
    return m.a * m.n
"""


def test_structs_of_doubles_by_pointer():
    s = ez.cython(STRUCTS)
    assert "energy" in s.functions() and "mixed" not in s.functions()
    p, x = np.array([2.0, 3.0]), 0.5

    def energy_np(q, z):
        return q[0] * z * z + q[1] * np.exp(z)

    dp = np.zeros(2)
    value, dx = ez.autodiff(s.energy, ez.Reverse, ez.Duplicated, ez.Active, ez.Active)(
        p, dp, x, 1.0
    )
    assert value == pytest.approx(energy_np(p, x), rel=1e-14)
    np.testing.assert_allclose(dp, fd_gradient(lambda q: energy_np(q, x), p), rtol=1e-7)
    assert dx == pytest.approx(fd_scalar(lambda z: energy_np(p, z), x), rel=1e-7)
    # Forward, and a struct written through its pointer (Duplicated, in and out).
    tp = np.array([1.0, -1.0])
    _, dy = ez.autodiff(s.energy, ez.Forward, ez.Dual, ez.Const, ez.Dual)(p, tp, x)
    assert dy == pytest.approx(x * x - np.exp(x), rel=1e-12)
    q, dq = np.array([2.0, 3.0]), np.array([0.0, 1.0])  # seed: d/dq of the new c
    ez.autodiff(s.stretch, ez.Reverse, ez.Duplicated, ez.Const)(q, dq, x)
    np.testing.assert_allclose(q, [0.5, 3.5])
    # c' = c + k x^2: d c'/dk = x^2, d c'/dc = 1
    np.testing.assert_allclose(dq, [x * x, 1.0])
    # float32 fields; ez.grad.
    g = ez.grad(s.fpair)(np.array([1.5, 2.0], dtype=np.float32))
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, [2 * 1.5 * 2.0, 1.5 * 1.5], rtol=1e-6)
    # Too few values for the struct, a wrong dtype: errors naming the parameter.
    with pytest.raises(ValueError, match=r"'s'.*struct of 2 doubles \(k, c\).*at least 2"):
        ez.grad(s.energy)(np.array([1.0]), 0.5)
    with pytest.raises(ValueError, match=r"'s'.*float64"):
        ez.grad(s.energy)(np.array([1.0, 2.0], dtype=np.float32), 0.5)
    with pytest.raises(TypeError, match=r"'m'.*not all double or all float"):
        s.mixed  # noqa: B018
