"""Numba functions compiled with parallel=True (prange loops, parallel array
expressions): differentiated as their serial twin (prange runs as range), in reverse
and forward mode, checked against finite differences."""

from __future__ import annotations

import math
import warnings

import numba
import numpy as np
import pytest

import enzyme_py as ez

pytestmark = pytest.mark.needs_enzyme


@numba.njit(parallel=True)
def parallel_squares(x):
    s = 0.0
    for i in numba.prange(x.shape[0]):
        s += x[i] * x[i]
    return s


@numba.njit(parallel=True)
def prange_rosenbrock(x):
    s = 0.0
    for i in numba.prange(x.shape[0] - 1):
        a = x[i + 1] - x[i] * x[i]
        b = 1.0 - x[i]
        s += 100.0 * a * a + b * b
    return s


@numba.njit(parallel=True)
def weighted_log(x, w):
    # Serial code around the prange, a reduction that many indices share w's entries in
    # (its adjoint gathers from every index), and a nonlinear epilogue.
    scale = 0.0
    for j in range(w.shape[0]):
        scale += w[j] * w[j]
    s = 0.0
    for i in numba.prange(x.shape[0]):
        s += w[i % w.shape[0]] * math.sin(x[i]) * scale
    return math.log(1.0 + s * s)


@numba.njit(parallel=True)
def prange_map(x, a, out):
    for i in numba.prange(x.shape[0]):
        out[i] = a * x[i] * x[i] + math.exp(-x[i])


@numba.njit(parallel=True)
def prange_heat(u0, target, steps):
    n = u0.shape[0]
    a = u0.copy()
    b = np.empty_like(u0)
    for _ in range(steps):
        b[0] = a[0]
        b[n - 1] = a[n - 1]
        for i in numba.prange(1, n - 1):
            b[i] = a[i] + 0.25 * (a[i - 1] - 2.0 * a[i] + a[i + 1])
        a, b = b, a
    s = 0.0
    for i in numba.prange(n):
        d = a[i] - target[i]
        s += d * d
    return 0.5 * s


@numba.njit(parallel=True)
def array_expression(x):
    return np.sum(np.exp(-x * x) * x)  # parallel=True makes this a parfor too


def central(f, args, index, h=1e-6):
    """Central finite differences of f with respect to args[index] (an array)."""
    x = args[index]
    g = np.zeros_like(x)
    for k in np.ndindex(x.shape):
        up = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
        down = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
        up[index][k] += h
        down[index][k] -= h
        g[k] = (f(*up) - f(*down)) / (2 * h)
    return g


rng = np.random.default_rng(7)


@pytest.mark.parametrize("f", [parallel_squares, prange_rosenbrock, array_expression])
def test_reverse_of_a_prange_reduction_matches_finite_differences(f):
    x = rng.uniform(-1.0, 1.0, 13)
    value, g = ez.value_and_grad(f)(x)
    assert value == pytest.approx(f(x), rel=1e-12)
    np.testing.assert_allclose(g, central(f, (x,), 0), rtol=1e-6, atol=1e-8)


def test_autodiff_reverse_with_serial_code_around_the_prange():
    x = rng.uniform(-2.0, 2.0, 40)
    w = rng.uniform(0.5, 1.5, 3)
    dx, dw = np.zeros_like(x), np.zeros_like(w)
    df = ez.autodiff(weighted_log, ez.Reverse, ez.Duplicated, ez.Duplicated, ez.Active)
    (value,) = df(x, dx, w, dw, 1.0)
    assert value == pytest.approx(weighted_log(x, w), rel=1e-12)
    np.testing.assert_allclose(dx, central(weighted_log, (x, w), 0), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(dw, central(weighted_log, (x, w), 1), rtol=1e-6, atol=1e-8)


def test_forward_of_a_prange_function_matches_finite_differences():
    x = rng.uniform(-2.0, 2.0, 40)
    w = rng.uniform(0.5, 1.5, 3)
    tx, tw = rng.normal(size=x.shape), rng.normal(size=w.shape)
    df = ez.autodiff(weighted_log, ez.Forward, ez.Dual, ez.Dual, ez.Dual)
    y, dy = df(x, tx, w, tw)
    h = 1e-6
    fd = (weighted_log(x + h * tx, w + h * tw) - weighted_log(x - h * tx, w - h * tw)) / (2 * h)
    assert y == pytest.approx(weighted_log(x, w), rel=1e-12)
    assert dy == pytest.approx(fd, rel=1e-6)


def test_prange_writing_an_output_array_in_both_modes():
    x = rng.uniform(-1.0, 1.0, 9)
    out, dout = np.zeros_like(x), rng.normal(size=x.shape)
    dx = np.zeros_like(x)
    seed = dout.copy()
    df = ez.autodiff(prange_map, ez.Reverse, ez.Duplicated, ez.Active, ez.Duplicated)
    (_, da) = df(x, dx, 1.5, out, dout)
    np.testing.assert_allclose(out, 1.5 * x * x + np.exp(-x), rtol=1e-12)
    np.testing.assert_allclose(dx, seed * (3.0 * x - np.exp(-x)), rtol=1e-12)
    assert da == pytest.approx(float(np.sum(seed * x * x)), rel=1e-12)
    tx = rng.normal(size=x.shape)
    fwd = ez.autodiff(prange_map, ez.Forward, ez.Dual, ez.Const, ez.Dual)
    tout = np.zeros_like(x)
    fwd(x, tx, 1.5, out, tout)
    np.testing.assert_allclose(tout, tx * (3.0 * x - np.exp(-x)), rtol=1e-12)


def test_prange_inside_a_serial_time_loop():
    u0 = rng.uniform(0.0, 1.0, 12)
    target = rng.uniform(0.0, 1.0, 12)
    value, g = ez.value_and_grad(prange_heat)(u0, target, 5)
    assert value == pytest.approx(prange_heat(u0, target, 5), rel=1e-12)
    np.testing.assert_allclose(g, central(prange_heat, (u0, target, 5), 0), rtol=1e-6, atol=1e-9)


def test_the_dispatcher_stays_parallel_and_keeps_its_types():
    x = rng.uniform(-1.0, 1.0, 5).astype(np.float32)
    g = ez.grad(parallel_squares)(x)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, 2 * x, rtol=1e-6)
    assert parallel_squares.targetoptions["parallel"]  # the user's function untouched
    assert parallel_squares(x) == pytest.approx(float(np.sum(x.astype(np.float64) ** 2)))


def test_a_callee_compiled_with_parallel_true_is_refused_with_advice():
    @numba.njit
    def calls_parallel(x):
        return parallel_squares(x) + 1.0

    with pytest.raises(ez.EnzymeError) as info:
        ez.grad(calls_parallel)(np.ones(3))
    text = str(info.value)
    assert "'calls_parallel' calls a function compiled with parallel=True" in text
    assert "Numba's runtime" not in text and "ctypes" not in text


def test_helpers_and_second_order_of_a_prange_function():
    x = rng.uniform(-1.0, 1.0, 6)
    t = rng.normal(size=x.shape)
    y, dy = ez.jvp(parallel_squares, (x,), (t,))
    assert y == pytest.approx(float(x @ x), rel=1e-12)
    assert dy == pytest.approx(float(2.0 * x @ t), rel=1e-12)
    np.testing.assert_allclose(ez.hessian(parallel_squares)(x), 2.0 * np.eye(6), atol=1e-12)


@pytest.mark.parametrize("numba_optimized", [False, True])
def test_both_compiles_for_differentiation_are_serial(numba_optimized):
    from enzyme_py.frontends import numba as numba_frontend

    x, w = rng.uniform(-1.0, 1.0, 7), rng.uniform(0.5, 1.5, 2)
    expected = math.log(1.0 + (np.sum(w[np.arange(7) % 2] * np.sin(x)) * (w @ w)) ** 2)
    assert weighted_log(x, w) == pytest.approx(expected, rel=1e-12)
    sig = (numba.typeof(x), numba.typeof(w))
    spec = numba_frontend.specialize(weighted_log, sig, numba_optimized, strided=True)
    ir = spec.wrapper.ir()
    assert "numba_parallel_for" not in ir and "do_scheduling" not in ir
    assert weighted_log.targetoptions["parallel"]  # the dispatcher itself stays parallel


# threads= above 1: the prange loops of a reverse derivative run on enzyme_py's threads
# (frontends/_numba_parfor.py, src/parfor_runner.h).
# A launch's reverse on the threads (its primal launch is dropped where nothing reads it).
ON_THREADS = "@__enzyme_py_parfor_reverse("


@pytest.fixture(autouse=True)
def short_chunks():
    """Chunks of any length: a light loop body asks for 16384 indices per chunk at
    least, and these tests' ranges are short; they are meant to run on threads."""
    from enzyme_py import _state

    before = _state.native.set_parfor_grain_limit(1)
    yield
    _state.native.set_parfor_grain_limit(before)


def threaded(f, mode, *activities, threads, call):
    """``ez.autodiff(f, mode, *activities, threads=threads)`` called once on ``call``:
    (the derivative, its result, whether it ran on threads). Holds the contract of
    threads=: above 1 the prange loops run on threads, or a PerformanceWarning says
    the derivative runs serially; never serial in silence."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # Built by autodiff where f has one compiled signature, else at the first call.
        df = ez.autodiff(f, mode, *activities, threads=threads)
        result = df(*call)
    warned = [w for w in caught if issubclass(w.category, ez.PerformanceWarning)]
    on_threads = ON_THREADS in df.for_arguments(call).inspect_llvm(optimized=True)
    if threads == 1:
        assert not warned and not on_threads
    else:
        assert on_threads != bool(warned), (on_threads, [str(w.message) for w in warned])
        for w in warned:
            message = str(w.message)
            assert f"autodiff({f.__name__}, ..., threads={threads})" in message
            assert "runs on one thread instead" in message
            assert w.filename == __file__  # reported at the caller's line
    return df, result, on_threads


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_threads_reverse_matches_finite_differences(threads):
    x = rng.uniform(-2.0, 2.0, 301)
    w = rng.uniform(0.5, 1.5, 3)
    for f in (parallel_squares, prange_rosenbrock):
        dx = np.zeros_like(x)
        _, (value,), on_threads = threaded(
            f, ez.Reverse, ez.Duplicated, ez.ActiveOnly, threads=threads, call=(x, dx, 1.0)
        )
        assert value is None
        assert on_threads == (threads > 1)  # reductions over arrays it only reads
        fd = central(f, (x,), 0)
        np.testing.assert_allclose(dx, fd, rtol=1e-6, atol=1e-7 * np.abs(fd).max())
        np.testing.assert_allclose(dx, ez.grad(f)(x), rtol=1e-13, atol=1e-13)
    dx, dw = np.zeros_like(x), np.zeros_like(w)
    threaded(
        weighted_log, ez.Reverse, ez.Duplicated, ez.Duplicated, ez.ActiveOnly,
        threads=threads, call=(x, dx, w, dw, 1.0),
    )  # fmt: skip
    np.testing.assert_allclose(dx, central(weighted_log, (x, w), 0), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(dw, central(weighted_log, (x, w), 1), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 64])
@pytest.mark.parametrize("threads", [2, 3, 4])
def test_threads_short_ranges_and_more_threads_than_indices(n, threads):
    x = rng.uniform(-2.0, 2.0, n + 1)
    dx = np.zeros_like(x)
    _, _, on_threads = threaded(
        prange_rosenbrock, ez.Reverse, ez.Duplicated, ez.ActiveOnly, threads=threads,
        call=(x, dx, 1.0),
    )  # fmt: skip
    assert on_threads
    np.testing.assert_allclose(dx, ez.grad(prange_rosenbrock)(x), rtol=1e-13, atol=1e-13)


@numba.njit(parallel=True)
def libm_in_the_body(x):
    # tanh, cosh, lgamma (enzyme_py's own rule): libm calls Numba declares readonly,
    # which Enzyme marks readnone.
    s = 0.0
    for i in numba.prange(x.shape[0]):
        if abs(x[i]) > 1.5:
            s += x[i] * x[i]
        else:
            s += np.tanh(x[i]) * x[i] + 0.1 * np.cosh(x[i]) + math.lgamma(x[i] + 3.0)
    return s


def _digamma(y):
    """psi(y) for y >= 1: the recurrence up to 10, then the asymptotic series."""
    shift = 0.0
    while y < 10.0:
        shift -= 1.0 / y
        y += 1.0
    r = 1.0 / (y * y)
    series = r * (1 / 12 - r * (1 / 120 - r * (1 / 252 - r * (1 / 240 - r / 132))))
    return shift + math.log(y) - 0.5 / y - series


def test_threads_a_body_calling_libm_functions_numba_declares_readonly():
    x = rng.uniform(-2.0, 2.0, 301)
    dx = np.zeros_like(x)
    _, _, on_threads = threaded(
        libm_in_the_body, ez.Reverse, ez.Duplicated, ez.ActiveOnly, threads=2,
        call=(x, dx, 1.0),
    )  # fmt: skip
    # It ran on one thread ("Attributes 'readnone and readonly' are incompatible").
    assert on_threads
    t = np.tanh(x)
    # d lgamma(y) / dy at y = x + 3: digamma(x + 3) = digamma(x) + 1/x + 1/(x+1) + 1/(x+2).
    digamma = np.array([_digamma(v + 3.0) for v in x])
    smooth = (1.0 - t * t) * x + t + 0.1 * np.sinh(x) + digamma
    expected = np.where(np.abs(x) > 1.5, 2.0 * x, smooth)
    np.testing.assert_allclose(dx, expected, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(dx, central(libm_in_the_body, (x,), 0), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("threads", [2, 4])
def test_threads_forward_output_arrays_and_a_time_loop(threads):
    x = rng.uniform(-2.0, 2.0, 50)
    w = rng.uniform(0.5, 1.5, 3)
    tx, tw = rng.normal(size=x.shape), rng.normal(size=w.shape)
    _, (y, dy), on_threads = threaded(
        weighted_log, ez.Forward, ez.Dual, ez.Dual, ez.Dual, threads=threads, call=(x, tx, w, tw)
    )
    assert not on_threads  # forward mode: serial, with the warning
    h = 1e-6
    fd = (weighted_log(x + h * tx, w + h * tw) - weighted_log(x - h * tx, w - h * tw)) / (2 * h)
    assert y == pytest.approx(weighted_log(x, w), rel=1e-12)
    assert dy == pytest.approx(fd, rel=1e-6)

    out, dout, dx = np.zeros_like(x), rng.normal(size=x.shape), np.zeros_like(x)
    seed = dout.copy()
    _, (_, da), _ = threaded(
        prange_map, ez.Reverse, ez.Duplicated, ez.Active, ez.Duplicated,
        threads=threads, call=(x, dx, 1.5, out, dout),
    )  # fmt: skip
    np.testing.assert_allclose(dx, seed * (3.0 * x - np.exp(-x)), rtol=1e-12)
    assert da == pytest.approx(float(np.sum(seed * x * x)), rel=1e-12)

    u0, target = rng.uniform(0.0, 1.0, 40), rng.uniform(0.0, 1.0, 40)
    du0 = np.zeros_like(u0)
    threaded(
        prange_heat, ez.Reverse, ez.Duplicated, ez.Const, ez.Const, ez.ActiveOnly,
        threads=threads, call=(u0, du0, target, 7, 1.0),
    )  # fmt: skip
    np.testing.assert_allclose(du0, central(prange_heat, (u0, target, 7), 0), rtol=1e-6, atol=1e-9)


@numba.njit(parallel=True)
def shared_weights(x, w):
    s = 0.0
    for i in numba.prange(x.shape[0]):
        s += w[i % w.shape[0]] * math.sin(x[i])
    return s * s


@numba.njit(parallel=True, boundscheck=True)
def shifted_product(x, k):
    s = 0.0
    for i in numba.prange(x.shape[0]):
        s += x[i] * x[i + k]
    return s


def test_threads_race_many_indices_adding_into_few_entries():
    # 200000 indices add into w's 3 adjoint entries from every thread: an unsynchronised
    # add would lose some of them (one lost term is a relative error of about 1/n).
    n = 200_000
    x = np.linspace(0.1, 3.0, n)
    w = np.array([0.5, 1.0, 1.5])
    for f, exact in ((shared_weights, True), (weighted_log, False)):
        dx, dw = np.zeros_like(x), np.zeros_like(w)
        _, _, on_threads = threaded(
            f, ez.Reverse, ez.Duplicated, ez.Duplicated, ez.ActiveOnly,
            threads=4, call=(x, dx, w, dw, 1.0),
        )  # fmt: skip
        assert on_threads == exact  # weighted_log's body takes a float: serial
    dx, dw = np.zeros_like(x), np.zeros_like(w)
    threaded(
        shared_weights, ez.Reverse, ez.Duplicated, ez.Duplicated, ez.ActiveOnly,
        threads=4, call=(x, dx, w, dw, 1.0),
    )  # fmt: skip
    s = float(np.sum(w[np.arange(n) % 3] * np.sin(x)))
    sines = np.array([np.sin(x[k::3]).sum() for k in range(3)])
    np.testing.assert_allclose(dw, 2.0 * s * sines, rtol=1e-10)
    np.testing.assert_allclose(dx, 2.0 * s * w[np.arange(n) % 3] * np.cos(x), rtol=1e-10)


@pytest.mark.parametrize("threads", [2, 4])
def test_threads_stencils_add_in_place_in_two_waves(threads):
    """x[i] and x[i + 1] (Rosenbrock), a[i - 1], a[i], a[i + 1] into b[i] (heat): each
    index owns the entries within a reach of its own, so the reverse pass adds into
    the shadows in place, even chunks then odd ones. Long ranges: a wave mixing
    neighbouring chunks would lose adds (checked against the serial derivative)."""
    x = rng.uniform(-2.0, 2.0, 200_001)
    dx = np.zeros_like(x)
    df, _, on_threads = threaded(
        prange_rosenbrock, ez.Reverse, ez.Duplicated, ez.ActiveOnly, threads=threads,
        call=(x, dx, 1.0),
    )  # fmt: skip
    assert on_threads
    ir = df.for_arguments((x, dx, 1.0)).inspect_llvm(optimized=True)
    assert "@__enzyme_py_parfor_reverse(" in ir
    for _ in range(3):  # the same numbers every call
        np.testing.assert_allclose(dx, ez.grad(prange_rosenbrock)(x), rtol=1e-13, atol=1e-13)
        dx[:] = 0.0
        df(x, dx, 1.0)
    u0, target = rng.uniform(0.0, 1.0, 50_000), rng.uniform(0.0, 1.0, 50_000)
    du0 = np.zeros_like(u0)
    _, _, on_threads = threaded(
        prange_heat, ez.Reverse, ez.Duplicated, ez.Const, ez.Const, ez.ActiveOnly,
        threads=threads, call=(u0, du0, target, 4, 1.0),
    )  # fmt: skip
    assert on_threads
    serial = ez.grad(prange_heat)(u0, target, 4)
    np.testing.assert_allclose(du0, serial, rtol=1e-13, atol=1e-15)


def test_threads_a_body_that_raises_raises_its_exception():
    # An index out of bounds in a chunk on another thread: the derivative call ends with
    # the body's own IndexError, and the derivative works again after.
    x = np.arange(1000) * 0.25
    df = ez.autodiff(shifted_product, ez.Reverse, ez.Duplicated, ez.Const, ez.ActiveOnly,
                     threads=2)  # fmt: skip
    dx = np.zeros_like(x)
    df(x, dx, 0, 1.0)
    np.testing.assert_allclose(dx, 2.0 * x, rtol=1e-14)
    assert ON_THREADS in df.for_arguments((x, dx, 0, 1.0)).inspect_llvm(optimized=True)
    with pytest.raises(IndexError, match="out of bounds"):
        df(x, np.zeros_like(x), 5, 1.0)
    dx = np.zeros_like(x)
    df(x, dx, 0, 1.0)
    np.testing.assert_allclose(dx, 2.0 * x, rtol=1e-14)


def test_threads_is_checked():
    with pytest.raises(ValueError, match="threads="):
        ez.autodiff(parallel_squares, ez.Reverse, ez.Duplicated, ez.Active, threads=0)
    with pytest.raises(TypeError, match="threads="):
        ez.autodiff(ez.llvm_ir("define double @f(double %x) {\n  ret double %x\n}", "f"),
                    ez.Reverse, ez.Active, ez.Active, threads=2)  # fmt: skip


def test_threads_builds_from_a_parallel_compile_with_typed_launches():
    from enzyme_py.frontends import numba as numba_frontend

    x = rng.uniform(-1.0, 1.0, 7)
    parallel_squares(x)
    sig = (numba.typeof(x),)
    ir = numba_frontend.specialize(parallel_squares, sig, strided=True, threads=2).wrapper.ir()
    assert "@__enzyme_py_parfor_0.augment" in ir and "numba_parallel_for" not in ir
    # On one thread: the loop a plain call of its body (frontends/_numba_parfor_serial).
    serial = numba_frontend.specialize(parallel_squares, sig, strided=True).wrapper.ir()
    assert ".augment" not in serial and "@__enzyme_py_parfor_run(" not in serial
    assert "numba_parallel_for" not in serial


def test_performance_warning_is_public():
    assert issubclass(ez.PerformanceWarning, UserWarning)
    assert "PerformanceWarning" in ez.__all__
    assert ez.PerformanceWarning is ez.core.PerformanceWarning


@numba.njit(parallel=True)
def row_norms(a, w):
    # A 2-D array read a row per index, a Const weight array, float32 or float64.
    s = 0.0
    for i in numba.prange(a.shape[0]):
        r = 0.0
        for j in range(a.shape[1]):
            r += w[j] * a[i, j] * a[i, j]
        s += math.sqrt(r + 1.0)
    return s


@numba.njit(parallel=True)
def two_inputs(x, y):
    s = 0.0
    for i in numba.prange(x.shape[0]):
        s += x[i] * math.sin(y[i])
    return s


@pytest.mark.parametrize("dtype,rtol", [(np.float64, 1e-12), (np.float32, 2e-5)])
def test_threads_rows_of_a_matrix_and_a_const_weight_array(dtype, rtol):
    a = rng.uniform(-1.0, 1.0, (257, 5)).astype(dtype)
    w = rng.uniform(0.5, 1.5, 5).astype(dtype)
    da = np.zeros_like(a)
    _, _, on_threads = threaded(
        row_norms, ez.Reverse, ez.Duplicated, ez.Const, ez.ActiveOnly, threads=3,
        call=(a, da, w, dtype(1.0)),
    )  # fmt: skip
    assert on_threads
    a64, w64 = a.astype(np.float64), w.astype(np.float64)
    r = (a64 * a64 * w64).sum(axis=1)
    expected = w64 * a64 / np.sqrt(r + 1.0)[:, None]
    np.testing.assert_allclose(da, expected, rtol=rtol, atol=rtol)
    np.testing.assert_array_equal(w, w.astype(dtype))  # the Const array is not written


def test_threads_with_one_array_passed_twice():
    # x and y the same memory: the derivative without the noalias promise, which keeps
    # its snapshots (docs/design.md §8).
    x = rng.uniform(-1.0, 1.0, 1001)
    dx = np.zeros_like(x)
    df = ez.autodiff(two_inputs, ez.Reverse, ez.Duplicated, ez.Duplicated, ez.ActiveOnly,
                     threads=2)  # fmt: skip
    df(x, dx, x, dx, 1.0)
    np.testing.assert_allclose(dx, np.sin(x) + x * np.cos(x), rtol=1e-12, atol=1e-14)
    y, dy = x.copy(), np.zeros_like(x)
    dx = np.zeros_like(x)
    df(x, dx, y, dy, 1.0)
    np.testing.assert_allclose(dx, np.sin(y), rtol=1e-14)
    np.testing.assert_allclose(dy, x * np.cos(y), rtol=1e-14)


@numba.njit(parallel=True)
def write_then_read(x, out):
    s = 0.0
    for i in numba.prange(x.shape[0]):
        out[i] = math.sin(x[i])
        s += out[i] * out[i] * x[i]  # reads back what it wrote
    return s


@pytest.mark.parametrize("threads", [2, 4])
def test_threads_a_loop_reading_back_what_it_wrote(threads):
    """out is written at each index's own entry, so the loop runs on threads and its
    reverse needs no primal value of out (Enzyme is told so): the value read back must
    still be the one written."""
    x = rng.uniform(-1.0, 1.0, 1001)
    out, dout, dx = np.zeros_like(x), rng.normal(size=x.shape), np.zeros_like(x)
    seed = dout.copy()
    _, (value,), on_threads = threaded(
        write_then_read, ez.Reverse, ez.Duplicated, ez.Duplicated, ez.Active,
        threads=threads, call=(x, dx, out, dout, 1.0),
    )  # fmt: skip
    assert on_threads
    assert value == pytest.approx(float(np.sum(np.sin(x) ** 2 * x)), rel=1e-12)
    np.testing.assert_allclose(out, np.sin(x), rtol=1e-15)
    expected = 2 * np.sin(x) * np.cos(x) * x + np.sin(x) ** 2 + seed * np.cos(x)
    np.testing.assert_allclose(dx, expected, rtol=1e-12, atol=1e-14)


@numba.njit(parallel=True)
def wrapped_pairs(x):
    s = 0.0
    for i in numba.prange(-3, x.shape[0] - 3):  # x[-3] is x[n - 3]: indices wrap around
        s += x[i] * x[i + 1] * x[i + 1]
    return s


def test_threads_a_range_starting_below_zero():
    """What an index touches is worked out for indices >= 0; a range starting below 0
    (Numba wraps x[-3] to x[n - 3]) runs its chunks in order on one thread: the numbers
    of the serial derivative."""
    x = rng.uniform(-1.0, 1.0, 50_001)
    dx = np.zeros_like(x)
    _, _, on_threads = threaded(
        wrapped_pairs, ez.Reverse, ez.Duplicated, ez.ActiveOnly, threads=4, call=(x, dx, 1.0)
    )
    assert on_threads
    np.testing.assert_allclose(dx, ez.grad(wrapped_pairs)(x), rtol=1e-13, atol=1e-13)


@numba.njit(parallel=True)
def squared_shift(a, b):
    for i in numba.prange(1, a.shape[0]):
        b[i] = a[i - 1] * a[i - 1]
    s = 0.0
    for i in range(b.shape[0]):
        s += b[i]
    return s


def test_threads_a_loop_writing_an_array_it_also_reads_through_another():
    """b is a: each index then reads what another index wrote. The threaded
    derivative's snapshot would copy a and b apart and differentiate another loop: the
    call takes the serial derivative (the numbers of threads=1); distinct arrays run on
    threads."""
    x = rng.uniform(0.5, 1.5, 500)
    df = ez.autodiff(squared_shift, ez.Reverse, ez.Duplicated, ez.Duplicated, ez.ActiveOnly,
                     threads=2)  # fmt: skip
    serial = ez.autodiff(squared_shift, ez.Reverse, ez.Duplicated, ez.Duplicated,
                         ez.ActiveOnly, threads=1)  # fmt: skip
    y, dy = x.copy(), np.zeros_like(x)
    value = df(y, dy, y, dy, 1.0)
    y1, dy1 = x.copy(), np.zeros_like(x)
    assert value == serial(y1, dy1, y1, dy1, 1.0)
    np.testing.assert_array_equal(dy, dy1)
    a, da, b, db = x.copy(), np.zeros_like(x), np.zeros_like(x), np.zeros_like(x)
    df(a, da, b, db, 1.0)
    assert ON_THREADS in df.for_arguments((a, da, b, db, 1.0)).inspect_llvm(optimized=True)
    expected = 2.0 * x
    expected[-1] = 0.0
    np.testing.assert_allclose(da, expected, rtol=1e-14)


def test_threads_with_width_runs_serially_and_says_so():
    x = rng.uniform(-1.0, 1.0, 101)
    dxs = np.zeros((2, x.size))
    with pytest.warns(ez.PerformanceWarning, match="with width=2 the prange loops run on one"):
        df = ez.autodiff(parallel_squares, ez.Reverse, ez.Duplicated, ez.ActiveOnly,
                         threads=2, width=2)  # fmt: skip
        df(x, dxs, np.array([1.0, 3.0]))
    np.testing.assert_allclose(dxs, [2.0 * x, 6.0 * x], rtol=1e-14)


@numba.njit(parallel=True)
def through_a_temporary(x):
    # The body reads an array made inside the function: the reverse pass reads the
    # snapshot of it that the derivative call keeps with its temporaries.
    y = np.empty_like(x)
    for i in range(x.shape[0]):
        y[i] = x[i] * x[i]
    s = 0.0
    for i in numba.prange(x.shape[0]):
        s += math.sin(y[i]) * x[i]
    return s


def test_threads_derivatives_called_from_several_python_threads_at_once():
    # While one call's chunks run on the workers, the others run theirs on their own
    # thread: each must keep its own temporaries (a chunk index above 0 on the caller's
    # thread once freed them).
    import threading

    xs = [rng.uniform(-1.0, 1.0, 20_000 + 7 * k) for k in range(4)]
    expected = [np.sin(x * x) + 2.0 * x * x * np.cos(x * x) for x in xs]
    df = ez.autodiff(through_a_temporary, ez.Reverse, ez.Duplicated, ez.ActiveOnly, threads=2)
    assert ON_THREADS in df.for_arguments((xs[0], np.zeros_like(xs[0]), 1.0)).inspect_llvm(
        optimized=True
    )
    errors: list[float] = []

    def work(k: int) -> None:
        for _ in range(40):
            dx = np.zeros_like(xs[k])
            df(xs[k], dx, 1.0)
            errors.append(float(np.max(np.abs(dx - expected[k]))))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(errors) == 160
    assert max(errors) < 1e-12


@numba.njit(parallel=True)
def row_extremes(a):
    s = 0.0
    for i in numba.prange(a.shape[0]):
        largest = a[i, 0]
        smallest = a[i, 0]
        for v in a[i, 1:]:
            if v > largest:
                largest = v
            if v < smallest:
                smallest = v
        s += (2.0 * largest - smallest) * (i + 1)
    return s


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_threads_a_body_keeping_each_rows_extremes(threads):
    # The bodies were linked after Numba's code generation (which rewrites a module in
    # place); Enzyme's reverse of this body in that form put adjoints on the wrong
    # elements on two and four threads, with no error.
    generator = np.random.default_rng(11)
    for _ in range(3):
        a = generator.normal(size=(6, 5))
        row_extremes(a)
        expected = np.zeros_like(a)
        for i, row in enumerate(a):
            expected[i, np.argmax(row)] += 2.0 * (i + 1)
            expected[i, np.argmin(row)] -= i + 1
        da = np.zeros_like(a)
        ez.autodiff(row_extremes, ez.Reverse, ez.Duplicated, ez.Active, threads=threads)(a, da, 1.0)
        np.testing.assert_allclose(da, expected, rtol=1e-14)
        np.testing.assert_allclose(ez.grad(row_extremes)(a), expected, rtol=1e-14)
