"""ez.grad / ez.value_and_grad's calls made in C++ (_reverse_plan.NativeCall): after the
first call with arguments of some kinds, later calls with arguments of the same kinds
skip the Python plan. The same numbers as the Python path, every other call taking
that path: other kinds, keywords, large shadows, overlapping arrays, views, errors."""

import math

import numpy as np
import pytest
from test_numba import checked_sum  # raises OverflowError above its limit

import enzyme_py as ez
from benchmarks.kernels import rosenbrock as rosen
from benchmarks.kernels import rosenbrock_gradient as rosen_gradient

from reference import fd_gradient

numba = pytest.importorskip("numba")
pytestmark = pytest.mark.needs_enzyme


@numba.njit
def weighted(x, w, a, n):
    s = 0.0
    for i in range(n):
        s += a * w[i] * math.sin(x[i]) ** 2
    return s


@numba.njit
def with_default(x, scale=2.0):
    s = 0.0
    for i in range(x.shape[0]):
        s += scale * x[i] ** 3
    return s


def weighted_np(x, w, a):
    return float(np.sum(a * w * np.sin(x) ** 2))


def native_calls(g):
    """The C++ calls g keeps, by argument count (what the tests check was taken)."""
    return dict(g._native)


def test_later_calls_run_in_cpp_with_the_python_paths_numbers():
    g = ez.grad(rosen)
    rng = np.random.default_rng(0)
    first = rng.standard_normal(10)
    np.testing.assert_allclose(g(first), rosen_gradient(first), rtol=1e-12)
    assert 1 in native_calls(g)
    for _ in range(5):
        x = rng.standard_normal(10)
        got = g(x)
        assert type(got) is np.ndarray and got.dtype == np.float64 and got.shape == (10,)
        np.testing.assert_allclose(got, rosen_gradient(x), rtol=1e-12)
    # Each call's gradient is its own array (fresh zeros, not one reused).
    a, b = g(first), g(first)
    assert a is not b and not np.shares_memory(a, b)
    np.testing.assert_array_equal(a, b)


def test_value_and_grad_of_several_arguments_picks_shadows_and_adjoints():
    vg = ez.value_and_grad(weighted, argnums=(2, 0, 1))
    rng = np.random.default_rng(1)
    for k in range(4):
        x, w = rng.standard_normal(7), rng.uniform(0.5, 1.5, 7)
        a = 0.5 + k
        value, (da, dx, dw) = vg(x, w, a, 7)
        assert value == pytest.approx(weighted_np(x, w, a), rel=1e-12)
        assert isinstance(da, float)
        assert da == pytest.approx(weighted_np(x, w, 1.0), rel=1e-12)
        np.testing.assert_allclose(dx, a * w * 2 * np.sin(x) * np.cos(x), rtol=1e-12)
        np.testing.assert_allclose(dw, a * np.sin(x) ** 2, rtol=1e-12)
        if k:
            assert 4 in native_calls(vg)


def test_kinds_that_change_between_calls_each_get_their_own_gradient():
    g = ez.grad(rosen)
    rng = np.random.default_rng(2)
    x64 = rng.standard_normal(9)
    x32 = x64.astype(np.float32)
    for _ in range(3):
        got64 = g(x64)
        got32 = g(x32)
        assert got64.dtype == np.float64 and got32.dtype == np.float32
        np.testing.assert_allclose(got64, rosen_gradient(x64), rtol=1e-12)
        np.testing.assert_allclose(got32, rosen_gradient(x64), rtol=2e-4, atol=2e-3)
    # A view (another layout), a read-only array, then the first kind again.
    view = rng.standard_normal(20)[::2]
    np.testing.assert_allclose(g(view), rosen_gradient(np.ascontiguousarray(view)), rtol=1e-12)
    frozen = x64.copy()
    frozen.flags.writeable = False
    np.testing.assert_allclose(g(frozen), rosen_gradient(x64), rtol=1e-12)
    np.testing.assert_allclose(g(x64), rosen_gradient(x64), rtol=1e-12)


@numba.njit
def cubes(m):
    s = 0.0
    for i in range(m.shape[0]):
        for j in range(m.shape[1]):
            s += (i + 1) * m[i, j] ** 3
    return s


def test_two_dimensional_arrays_in_c_and_fortran_order():
    g = ez.grad(cubes)
    rng = np.random.default_rng(6)
    m = rng.standard_normal((3, 4))
    rows = np.arange(1, 4)[:, None]
    for order in ("C", "F", "C", "F"):
        a = np.asarray(m, order=order)
        got = g(a)
        assert got.shape == (3, 4)
        np.testing.assert_allclose(got, 3 * rows * m**2, rtol=1e-12)
    assert 1 in native_calls(g)


class Tagged(np.ndarray):
    pass


def test_a_subclass_keywords_and_defaults_take_the_python_path():
    g = ez.grad(with_default)
    x = np.linspace(-1.0, 1.0, 6)
    expected = 2.0 * 3 * x**2
    np.testing.assert_allclose(g(x), expected, rtol=1e-12)  # the default filled in
    assert native_calls(g) == {}
    np.testing.assert_allclose(g(x, 2.0), expected, rtol=1e-12)
    np.testing.assert_allclose(g(x, 2.0), expected, rtol=1e-12)  # in C++ now
    assert 2 in native_calls(g)
    np.testing.assert_allclose(g(x, scale=3.0), 1.5 * expected, rtol=1e-12)
    np.testing.assert_allclose(g(x.view(Tagged), 2.0), expected, rtol=1e-12)
    np.testing.assert_allclose(g(x, 2.0), expected, rtol=1e-12)


def test_a_large_shadow_takes_the_python_path_with_the_same_numbers():
    g = ez.grad(rosen)
    rng = np.random.default_rng(3)
    small = rng.standard_normal(16)
    g(small)
    big = rng.standard_normal(40_000)  # 320 kB: its shadow comes from the pool
    for _ in range(2):
        np.testing.assert_allclose(g(big), rosen_gradient(big), rtol=1e-12)
        np.testing.assert_allclose(g(small), rosen_gradient(small), rtol=1e-12)


def test_the_functions_own_error_and_bad_arguments_are_named_as_on_the_python_path():
    g = ez.grad(checked_sum)
    x = np.array([1.0, 2.0])
    np.testing.assert_allclose(g(x, 10.0), 2 * x, rtol=1e-12)
    np.testing.assert_allclose(g(x, 10.0), 2 * x, rtol=1e-12)
    assert 2 in native_calls(g)
    with pytest.raises(OverflowError, match="sum above the limit"):
        g(x, 1.0)
    np.testing.assert_allclose(g(x, 10.0), 2 * x, rtol=1e-12)
    with pytest.raises(TypeError, match=r"argument 0 is list"):
        g([1.0, 2.0], 10.0)
    with pytest.raises(TypeError, match=r"'limit'"):
        g(x, "ten")
    np.testing.assert_allclose(g(x, 10.0), 2 * x, rtol=1e-12)


def test_the_same_array_twice_is_differentiated_as_on_the_python_path():
    vg = ez.grad(weighted, argnums=(0, 1))
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal(5), rng.standard_normal(5)
    vg(x, w, 1.5, 5)
    assert 4 in native_calls(vg)
    # x passed as both x and w: each gradient is the partial in its slot.
    dx, dw = vg(x, x, 1.5, 5)
    np.testing.assert_allclose(dx, 1.5 * x * 2 * np.sin(x) * np.cos(x), rtol=1e-12)
    np.testing.assert_allclose(dw, 1.5 * np.sin(x) ** 2, rtol=1e-12)
    total = fd_gradient(lambda v: weighted_np(v, v, 1.5), x)
    np.testing.assert_allclose(dx + dw, total, rtol=1e-6, atol=1e-8)


def test_a_c_functions_gradient_runs_in_cpp_too():
    lib = ez.c(
        """
        #include <math.h>
        double norm2(const double *x, int n) {
            double s = 0.0;
            for (int i = 0; i < n; ++i) s += x[i] * x[i];
            return sqrt(s);
        }
        """
    )
    g = ez.grad(lib["norm2"])
    rng = np.random.default_rng(5)
    for k in range(3):
        x = rng.standard_normal(8)
        np.testing.assert_allclose(g(x, 8), x / np.linalg.norm(x), rtol=1e-12)
        if k:
            assert 2 in native_calls(g)
    np.testing.assert_allclose(
        g(x, 8), fd_gradient(lambda v: float(np.linalg.norm(v)), x), rtol=1e-6
    )
