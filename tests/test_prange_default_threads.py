"""threads= left out: the reverse derivative of a parallel=True function runs its prange
loops on every thread Numba uses where a loop's body has a loop of its own, or where no
prange loop is inside another loop; else on one thread (docs/design.md §8). Checked
against analytic gradients and finite differences; the threaded derivative is
recognised in its IR by its launches."""

from __future__ import annotations

import math
import warnings

import numba
import numpy as np
import pytest
from numba import prange

import enzyme_py as ez
from enzyme_py.frontends._numba_parfor import (
    has_prange_with_inner_loop,
    prange_loops_once_per_call,
)

pytestmark = pytest.mark.needs_enzyme

# A launch's reverse on the threads (its primal launch is dropped where nothing reads it).
ON_THREADS = "@__enzyme_py_parfor_reverse("
CORES = numba.get_num_threads()

rng = np.random.default_rng(11)


@numba.njit(parallel=True)
def row_softplus(a, w):
    # A loop per index: the kind of body that pays for threads.
    s = 0.0
    for i in numba.prange(a.shape[0]):
        r = 0.0
        for j in range(a.shape[1]):
            r += w[j] * a[i, j] * a[i, j]
        s += math.log(1.0 + math.exp(r))
    return s


def row_softplus_gradient(a, w):
    r = (w * a * a).sum(axis=1)
    return (1.0 / (1.0 + np.exp(-r)))[:, None] * 2.0 * w * a


@numba.njit(parallel=True)
def light_squares(x):
    s = 0.0
    for i in numba.prange(x.shape[0]):
        s += x[i] * x[i] * x[i]
    return s


@numba.njit(parallel=True)
def while_in_body(x):
    s = 0.0
    for i in numba.prange(x.shape[0]):
        k = 0
        v = x[i]
        while k < 3:
            v = v * x[i]
            k += 1
        s += v
    return s


@numba.njit(parallel=True)
def imported_prange(x):
    s = 0.0
    for i in prange(x.shape[0]):  # the name imported from numba
        for j in range(2):
            s += x[i] * j
    return s


@numba.njit(parallel=True)
def smoothed(x, steps):
    # A light prange loop inside a time loop: launched once per step.
    a = x.copy()
    b = np.empty_like(x)
    for _ in range(steps):
        b[0] = a[0]
        b[-1] = a[-1]
        for i in numba.prange(1, x.shape[0] - 1):
            b[i] = 0.5 * a[i] + 0.25 * (a[i - 1] + a[i + 1])
        a, b = b, a
    s = 0.0
    for i in numba.prange(x.shape[0]):
        s += a[i] * a[i]
    return s


def smoothed_gradient(x, steps):
    """The gradient of smoothed: (the step's matrix)^steps, transposed, applied to 2a."""
    n = x.shape[0]
    step = np.zeros((n, n))
    step[0, 0] = step[-1, -1] = 1.0
    for i in range(1, n - 1):
        step[i, i - 1 : i + 2] = (0.25, 0.5, 0.25)
    power = np.linalg.matrix_power(step, steps)
    return power.T @ (2.0 * (power @ x))


@numba.njit(parallel=True)
def light_in_while(x):
    s = 0.0
    k = 0
    while k < 2:
        for i in numba.prange(x.shape[0]):
            s += x[i] * k
        k += 1
    return s


@numba.njit
def serial_with_loops(x):
    s = 0.0
    for i in range(x.shape[0]):
        for j in range(3):
            s += x[i] * j
    return s


def on_threads(df, call):
    return ON_THREADS in df.for_arguments(call).inspect_llvm(optimized=True)


def no_performance_warning(caught):
    assert not [w for w in caught if issubclass(w.category, ez.PerformanceWarning)]


def test_which_prange_loops_have_a_loop_of_their_own():
    assert has_prange_with_inner_loop(row_softplus.py_func)
    assert has_prange_with_inner_loop(while_in_body.py_func)
    assert has_prange_with_inner_loop(imported_prange.py_func)
    assert not has_prange_with_inner_loop(light_squares.py_func)
    assert not has_prange_with_inner_loop(light_in_while.py_func)  # inside, not in it
    assert not has_prange_with_inner_loop(smoothed.py_func)


def test_which_prange_loops_run_once_per_call():
    assert prange_loops_once_per_call(light_squares.py_func)
    assert prange_loops_once_per_call(row_softplus.py_func)
    assert not prange_loops_once_per_call(smoothed.py_func)  # one in a for loop
    assert not prange_loops_once_per_call(light_in_while.py_func)
    assert not prange_loops_once_per_call(serial_with_loops.py_func)  # no prange
    assert not has_prange_with_inner_loop(serial_with_loops.py_func)  # no prange


@pytest.mark.parametrize("dtype,rtol", [(np.float64, 1e-12), (np.float32, 2e-5)])
def test_default_runs_a_prange_loop_with_an_inner_loop_on_every_thread(dtype, rtol):
    a = rng.uniform(-1.0, 1.0, (40_001, 6)).astype(dtype)
    w = rng.uniform(0.5, 1.5, 6).astype(dtype)
    da = np.zeros_like(a)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = ez.autodiff(row_softplus, ez.Reverse, ez.Duplicated, ez.Const, ez.ActiveOnly)
        df(a, da, w, dtype(1.0))
    no_performance_warning(caught)
    assert df.threads == CORES
    assert on_threads(df, (a, da, w, dtype(1.0))) == (CORES > 1)
    expected = row_softplus_gradient(a.astype(np.float64), w.astype(np.float64))
    np.testing.assert_allclose(da, expected, rtol=rtol, atol=rtol)
    # ez.grad leaves threads= out too.
    np.testing.assert_allclose(ez.grad(row_softplus)(a, w), expected, rtol=rtol, atol=rtol)


def test_default_keeps_a_light_prange_loop_on_one_thread_without_the_primal():
    """ez.grad's case (ActiveOnly): a light body launched once per call is the serial
    derivative's, whose reverse loop runs on every core by itself where it is fused
    (src/fused_threads.h), writing the fresh gradient without zeroing it first."""
    x = rng.uniform(-1.0, 1.0, 200_001)
    dx = np.zeros_like(x)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = ez.autodiff(light_squares, ez.Reverse, ez.Duplicated, ez.ActiveOnly)
        df(x, dx, 1.0)
        grad = ez.grad(light_squares)(x)
    no_performance_warning(caught)
    assert df.threads == 1 and not on_threads(df, (x, dx, 1.0))
    np.testing.assert_allclose(dx, 3.0 * x * x, rtol=1e-14)
    np.testing.assert_allclose(grad, 3.0 * x * x, rtol=1e-14)


def test_default_runs_a_light_prange_loop_on_every_thread_with_the_primal():
    """The value is wanted too (Active, ez.value_and_grad): the primal launch is work
    the serial derivative does as well, now shared out."""
    x = rng.uniform(-1.0, 1.0, 40_001)
    dx = np.zeros_like(x)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = ez.autodiff(light_squares, ez.Reverse, ez.Duplicated, ez.Active)
        (value,) = df(x, dx, 1.0)
        value_vg, grad_vg = ez.value_and_grad(light_squares)(x)
    no_performance_warning(caught)
    assert df.threads == CORES and on_threads(df, (x, dx, 1.0)) == (CORES > 1)
    exact = float(np.sum(x**3))
    assert value == pytest.approx(exact, rel=1e-12, abs=1e-12)
    assert value_vg == pytest.approx(exact, rel=1e-12, abs=1e-12)
    np.testing.assert_allclose(dx, 3.0 * x * x, rtol=1e-14)
    np.testing.assert_allclose(grad_vg, 3.0 * x * x, rtol=1e-14)


def test_default_keeps_a_light_prange_loop_inside_a_time_loop_on_one_thread():
    x = rng.uniform(-1.0, 1.0, 200)
    dx = np.zeros_like(x)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = ez.autodiff(smoothed, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)
        (value,) = df(x, dx, 7, 1.0)
    no_performance_warning(caught)
    assert df.threads == 1 and not on_threads(df, (x, dx, 7, 1.0))
    assert value == pytest.approx(smoothed.py_func(x, 7), rel=1e-12)
    np.testing.assert_allclose(dx, smoothed_gradient(x, 7), rtol=1e-12, atol=1e-14)


def test_default_falls_back_to_one_thread_without_a_warning():
    # A Fortran-order array: the threaded derivative refuses the loop (non-C layout),
    # the serial one differentiates it, and threads= was not asked for.
    a = np.asfortranarray(rng.uniform(-1.0, 1.0, (301, 4)))
    w = rng.uniform(0.5, 1.5, 4)
    da = np.zeros_like(a)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = ez.autodiff(row_softplus, ez.Reverse, ez.Duplicated, ez.Const, ez.ActiveOnly)
        df(a, da, w, 1.0)
    no_performance_warning(caught)
    assert not on_threads(df, (a, da, w, 1.0))
    np.testing.assert_allclose(da, row_softplus_gradient(a, w), rtol=1e-12, atol=1e-14)
    # Asked for, the same fallback says so.
    with pytest.warns(ez.PerformanceWarning, match="runs on one thread instead"):
        asked = ez.autodiff(row_softplus, ez.Reverse, ez.Duplicated, ez.Const, ez.ActiveOnly,
                            threads=2)  # fmt: skip
        asked(a, np.zeros_like(a), w, 1.0)


def test_default_forward_mode_runs_serially_without_a_warning():
    a = rng.uniform(-1.0, 1.0, (50, 3))
    w = rng.uniform(0.5, 1.5, 3)
    t = rng.normal(size=a.shape)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = ez.autodiff(row_softplus, ez.Forward, ez.Dual, ez.Const, ez.DualOnly)
        tangent = df(a, t, w)
    no_performance_warning(caught)
    expected = float(np.sum(row_softplus_gradient(a, w) * t))
    assert tangent == pytest.approx(expected, rel=1e-12)


def test_threaded_derivative_differentiated_again_is_the_serial_ones():
    """Enzyme cannot differentiate the threads' launches: a Hessian of a function whose
    gradient runs on threads comes from the serial gradient (central differences of the
    analytic gradient as reference)."""
    a = rng.uniform(-1.0, 1.0, (5, 3))
    w = rng.uniform(0.5, 1.5, 3)
    hessian = ez.hessian(row_softplus)(a, w)
    h = 1e-6
    reference = np.zeros((a.size, a.size))
    for k in range(a.size):
        up, down = a.copy().ravel(), a.copy().ravel()
        up[k] += h
        down[k] -= h
        reference[:, k] = (
            row_softplus_gradient(up.reshape(a.shape), w)
            - row_softplus_gradient(down.reshape(a.shape), w)
        ).ravel() / (2 * h)
    np.testing.assert_allclose(hessian.reshape(a.size, a.size), reference, atol=1e-7)
    # The threaded derivative, differentiated again, stands for the serial one.
    df = ez.autodiff(row_softplus, ez.Reverse, ez.Duplicated, ez.Const, ez.ActiveOnly,
                     sig="(float64[:, ::1], float64[::1])")  # fmt: skip
    assert on_threads(df, (a, np.zeros_like(a), w, 1.0)) == (CORES > 1)
    assert ON_THREADS not in df.as_function().ir()


@numba.njit(parallel=True)
def shift_squares(a, b):
    # Each index writes its own b[i] from a row of a: threads, where a and b are apart.
    for i in numba.prange(1, a.shape[0]):
        v = 0.0
        for j in range(2):
            v += a[i - 1] * a[i - 1] * (j + 1)
        b[i] = v
    s = 0.0
    for i in range(b.shape[0]):
        s += b[i]
    return s


@pytest.mark.parametrize("threads", [None, 2])
def test_overlapping_arrays_take_the_serial_derivative(threads):
    """b passed as a: the threaded derivative's snapshots would copy them apart (each
    index then reads what another wrote); the call takes the serial derivative, which
    follows the loop as range would, with the numbers of threads=1."""
    x = rng.uniform(0.5, 1.5, 500)
    df = ez.autodiff(shift_squares, ez.Reverse, ez.Duplicated, ez.Duplicated, ez.ActiveOnly,
                     threads=threads)  # fmt: skip
    serial = ez.autodiff(shift_squares, ez.Reverse, ez.Duplicated, ez.Duplicated,
                         ez.ActiveOnly, threads=1)  # fmt: skip
    y, dy = x.copy(), np.zeros_like(x)
    df(y, dy, y, dy, 1.0)
    y1, dy1 = x.copy(), np.zeros_like(x)
    serial(y1, dy1, y1, dy1, 1.0)
    np.testing.assert_array_equal(y, y1)
    np.testing.assert_allclose(dy, dy1, rtol=1e-14)
    # Apart, on threads: d/da_k of sum_i 3 a_{i-1}^2 = 6 a_k (k < n - 1).
    a, da, b, db = x.copy(), np.zeros_like(x), np.zeros_like(x), np.zeros_like(x)
    df(a, da, b, db, 1.0)
    assert on_threads(df, (a, da, b, db, 1.0)) == (CORES > 1)
    expected = 6.0 * x
    expected[-1] = 0.0
    np.testing.assert_allclose(da, expected, rtol=1e-14)


@numba.njit(parallel=True)
def shift_inside(x):
    # Two views of one array made inside the function: no argument overlaps another.
    a = x[:-1]
    b = x[1:]
    for i in numba.prange(a.shape[0]):
        v = 0.0
        for j in range(2):
            v += a[i] * (j + 1)
        b[i] = v
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i]
    return s


def test_views_of_one_array_made_inside_are_refused_on_threads():
    if CORES < 2:
        pytest.skip("one Numba thread: the derivative is the serial one")
    x = rng.uniform(0.5, 1.5, 100)
    df = ez.autodiff(shift_inside, ez.Reverse, ez.Duplicated, ez.ActiveOnly)
    with pytest.raises(ValueError) as info:
        df(x.copy(), np.zeros_like(x), 1.0)
    text = str(info.value)
    assert "a prange loop of 'shift_inside' writes an array that shares memory" in text
    assert "pass or make a copy of one (.copy())" in text
    assert "ez.autodiff(shift_inside, ..., threads=1)" in text
    assert "with the helpers (ez.grad, ez.vjp, ...), that loop written with range" in text
    # The helpers take no threads=: their message says what to write in the function.
    with pytest.raises(ValueError, match="that loop written with range instead of prange"):
        ez.grad(shift_inside)(x.copy())


@numba.njit(parallel=True)
def rows_into(a, w, out):
    # w is only read, out is written: ez.grad gives out a shadow and w none.
    s = 0.0
    for i in numba.prange(a.shape[0]):
        r = 0.0
        for j in range(a.shape[1]):
            r += w[j] * a[i, j] * a[i, j]
        out[i] = r
        s += r
    return s


def test_grad_asks_the_threaded_module_which_arrays_are_written():
    # Where the derivative runs on threads whatever the helper, the threaded module
    # answers ez.grad's question too: no serial twin compiled for it alone.
    a = rng.uniform(-1.0, 1.0, (5_000, 4))
    w = rng.uniform(0.5, 1.5, 4)
    g = ez.grad(rows_into)
    np.testing.assert_allclose(g(a, w, np.zeros(5_000)), 2.0 * w * a, rtol=1e-13)
    assert [key[1] for key in g._derivatives._made] == [(ez.Duplicated, ez.Const, ez.Duplicated)]
    # The serial twin's Numba compile (memo key "ad_compile") never ran.
    compiled = [key for key in rows_into._enzyme_py_specialized if key[0] == "ad_compile"]
    assert (compiled == []) == (CORES > 1)
