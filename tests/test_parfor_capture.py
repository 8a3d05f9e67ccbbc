"""The prange loops of Numba's own parallel compiles, marked and kept so that a
derivative on threads takes that compile's module instead of compiling the function a
second time (``frontends/_numba_parfor_capture``): the derivatives against finite
differences and analytic gradients, the compiled function left Numba's own, and the
loops a typed launch cannot express refused without compiling."""

import itertools
import math
import warnings

import numba
import numpy as np
import pytest

import enzyme_py as ez
from benchmarks.kernels import rosenbrock_gradient
from enzyme_py.frontends import _numba_compile, _numba_parfor, _numba_parfor_capture

from reference import fd_partial

pytestmark = pytest.mark.needs_enzyme

# A launch's reverse on the threads (its primal launch is dropped where nothing reads it).
ON_THREADS = "@__enzyme_py_parfor_reverse("
rng = np.random.default_rng(11)


@pytest.fixture(autouse=True)
def short_chunks():
    """Chunks of any length (a light body asks for 16384 indices per chunk at least)."""
    from enzyme_py import _state

    before = _state.native.set_parfor_grain_limit(1)
    yield
    _state.native.set_parfor_grain_limit(before)


@pytest.fixture
def no_second_compile(monkeypatch):
    """A second parallel compile of the function fails the test."""

    def compiled_again(*args, **kwargs):
        raise AssertionError("the function was compiled a second time")

    monkeypatch.setattr(_numba_compile, "ad_compile_ir", compiled_again)


_salts = itertools.count(1)


def make_functions():
    """Fresh dispatchers (a compile of their own, marked now): a reduction, a map into
    an output array with serial code after it, and a time loop of stencils with a
    launch per step and a reduction after. Each call's are new code to enzyme_py's
    caches too (``salt``, a closure value, is part of the code's key), so that no
    derivative comes from a cache."""
    salt = float(next(_salts))

    @numba.njit(parallel=True)
    def rosenbrock(x):
        s = 0.0 * salt
        for i in numba.prange(x.shape[0] - 1):
            a = x[i + 1] - x[i] * x[i]
            b = 1.0 - x[i]
            s += 100.0 * a * a + b * b
        return s

    @numba.njit(parallel=True)
    def mapped(x, w, out):
        for i in numba.prange(x.shape[0]):
            out[i] = math.sin(x[i]) * w[i % w.shape[0]] ** 2
        s = 0.0 * salt
        for i in range(out.shape[0]):
            s += out[i] * out[i]
        return s

    @numba.njit(parallel=True)
    def heat(u0, target, steps):
        n = u0.shape[0]
        a = u0.copy()
        b = np.empty_like(u0)
        for _ in range(steps):
            b[0] = a[0]
            b[n - 1] = a[n - 1]
            for i in numba.prange(1, n - 1):
                b[i] = a[i] + 0.25 * (a[i - 1] - 2.0 * a[i] + a[i + 1])
            a, b = b, a
        s = 0.0 * salt
        for i in numba.prange(n):
            d = a[i] - target[i]
            s += d * d
        return 0.5 * s

    return rosenbrock, mapped, heat


def on_threads(df, call):
    return ON_THREADS in df.for_arguments(call).inspect_llvm(optimized=True)


@pytest.mark.parametrize("threads", [2, 4])
def test_a_compiled_prange_function_is_differentiated_from_its_own_compile(
    threads, no_second_compile
):
    rosenbrock, mapped, heat = make_functions()
    for dtype in (np.float64, np.float32):
        x = rng.uniform(-1.5, 1.5, 203).astype(dtype)
        rosenbrock(x)
        assert _numba_parfor_capture.from_primal(rosenbrock, (numba.typeof(x),)) is not None
        dx = np.zeros_like(x)
        df = ez.autodiff(rosenbrock, ez.Reverse, ez.Duplicated, ez.ActiveOnly, threads=threads)
        df(x, dx, 1.0)
        assert on_threads(df, (x, dx, 1.0))
        tol = 1e-12 if dtype == np.float64 else 2e-5
        expected = rosenbrock_gradient(x.astype(np.float64))
        np.testing.assert_allclose(dx, expected, rtol=tol, atol=tol * np.abs(expected).max())

    x, w, out = rng.uniform(-2.0, 2.0, 97), rng.uniform(0.5, 1.5, 3), np.zeros(97)
    mapped(x, w, out)
    dx, dw, dout = np.zeros_like(x), np.zeros_like(w), np.zeros_like(out)
    df = ez.autodiff(
        mapped, ez.Reverse, ez.Duplicated, ez.Duplicated, ez.Duplicated, ez.ActiveOnly,
        threads=threads,
    )  # fmt: skip
    df(x, dx, w, dw, out, dout, 1.0)
    assert on_threads(df, (x, dx, w, dw, out, dout, 1.0))

    def value(x, w):
        return mapped(x, w, np.zeros_like(x))

    np.testing.assert_allclose(dx, fd_partial(value, (x, w), 0), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(dw, fd_partial(value, (x, w), 1), rtol=1e-6, atol=1e-7)

    u0, target = rng.uniform(0.0, 1.0, 40), rng.uniform(0.0, 1.0, 40)
    heat(u0, target, 6)
    du0 = np.zeros_like(u0)
    df = ez.autodiff(
        heat, ez.Reverse, ez.Duplicated, ez.Const, ez.Const, ez.ActiveOnly, threads=threads
    )
    df(u0, du0, target, 6, 1.0)
    assert on_threads(df, (u0, du0, target, 6, 1.0))
    # The loss is quadratic in u0: central differences are exact up to rounding.
    expected = fd_partial(lambda u: heat(u, target, 6), (u0,), 0)
    np.testing.assert_allclose(du0, expected, rtol=1e-7, atol=1e-9)


def test_the_compiled_function_runs_numbas_own_launch():
    rosenbrock, _, heat = make_functions()
    x = rng.uniform(-1.5, 1.5, 301)
    value = rosenbrock(x)
    twin = numba.njit(rosenbrock.py_func)
    assert value == pytest.approx(twin(x), rel=1e-13)
    u0, target = rng.uniform(0.0, 1.0, 50), rng.uniform(0.0, 1.0, 50)
    assert heat(u0, target, 5) == pytest.approx(numba.njit(heat.py_func)(u0, target, 5))
    # The marks are gone from the code Numba runs: the branch to them was never taken.
    for f in (rosenbrock, heat):
        (optimized,) = f.inspect_llvm().values()
        assert "__enzyme_py_parfor" not in optimized
        assert "numba_parallel_for" in optimized or "do_scheduling" in optimized


def test_the_kept_module_is_the_second_compiles():
    rosenbrock, _, heat = make_functions()
    for f, args in ((rosenbrock, (np.ones(10),)), (heat, (np.ones(10), np.ones(10), 2))):
        f(*args)
        signature = tuple(numba.typeof(a) for a in args)
        captured = _numba_parfor_capture.from_primal(f, signature)
        assert captured is not None
        ir, fndesc, launches = captured
        assert fndesc.mangled_name == f.overloads[signature].fndesc.mangled_name
        again, second = _numba_parfor.parfor_compile(
            numba.njit(parallel=True)(f.py_func), signature
        )
        assert [(launch.name, launch.groups) for launch in launches] == [
            (launch.name, launch.groups) for launch in second
        ]
        for launch in launches:
            assert f"call void @{launch.name}(i64 " in ir
            assert f"@{launch.name}.keep = global" in ir
        for text in (ir, again.ir):
            assert "numba_parallel_for" not in text and "do_scheduling" not in text
            assert _numba_parfor_capture.SELECT not in text


def test_a_loop_a_typed_launch_cannot_express_is_refused_without_compiling(
    no_second_compile,
):
    @numba.njit(parallel=True)
    def columns(a):
        s = 0.0
        for i in numba.prange(a.shape[0]):
            s += a[i, 0] * a[i, 1]
        return s

    a = np.asfortranarray(rng.uniform(-1.0, 1.0, (20, 2)))
    columns(a)
    with pytest.raises(_numba_parfor.ParforUnsupported, match="F-layout"):
        _numba_parfor.parfor_compile(columns, (numba.typeof(a),))


def test_the_refused_loop_falls_back_to_the_serial_derivative_and_says_why():
    @numba.njit(parallel=True)
    def columns(a):
        s = 0.0
        for i in numba.prange(a.shape[0]):
            s += a[i, 0] * a[i, 1] * a[i, 1]
        return s

    a = np.asfortranarray(rng.uniform(-1.0, 1.0, (20, 2)))
    columns(a)
    da = np.zeros_like(a)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ez.autodiff(columns, ez.Reverse, ez.Duplicated, ez.ActiveOnly, threads=2)(a, da, 1.0)
    messages = [str(w.message) for w in caught if issubclass(w.category, ez.PerformanceWarning)]
    assert len(messages) == 1 and "F-layout" in messages[0], messages
    expected = np.stack([a[:, 1] ** 2, 2.0 * a[:, 0] * a[:, 1]], axis=1)
    np.testing.assert_allclose(da, expected, rtol=1e-13)


def test_a_function_not_compiled_yet_is_compiled_for_its_derivative():
    rosenbrock, _, _ = make_functions()
    x = rng.uniform(-1.5, 1.5, 64)
    assert _numba_parfor_capture.from_primal(rosenbrock, (numba.typeof(x),)) is None
    dx = np.zeros_like(x)
    ez.autodiff(rosenbrock, ez.Reverse, ez.Duplicated, ez.ActiveOnly, threads=2)(x, dx, 1.0)
    np.testing.assert_allclose(dx, rosenbrock_gradient(x), rtol=1e-12, atol=1e-12)


def test_a_failure_while_marking_leaves_numbas_compile_whole(monkeypatch):
    """Marking is an optimisation: where emitting the typed launch fails half-way (a
    call emitted, then an error), Numba's compile goes on, its function computes what
    the serial twin does, and the derivative says why it runs on one thread."""
    real = _numba_parfor_capture.emit_launch

    def half_way(*args, **kwargs):
        real(*args, **kwargs)
        raise RuntimeError("emission failed")

    monkeypatch.setattr(_numba_parfor_capture, "emit_launch", half_way)
    rosenbrock, _, heat = make_functions()
    x = rng.uniform(-1.5, 1.5, 101)
    assert rosenbrock(x) == pytest.approx(numba.njit(rosenbrock.py_func)(x), rel=1e-13)
    u0, target = rng.uniform(0.0, 1.0, 30), rng.uniform(0.0, 1.0, 30)
    assert heat(u0, target, 3) == pytest.approx(numba.njit(heat.py_func)(u0, target, 3))
    with pytest.raises(_numba_parfor.ParforUnsupported, match="not marked .emission failed"):
        _numba_parfor_capture.from_primal(rosenbrock, (numba.typeof(x),))
    monkeypatch.undo()
    dx = np.zeros_like(x)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ez.autodiff(rosenbrock, ez.Reverse, ez.Duplicated, ez.ActiveOnly, threads=2)(x, dx, 1.0)
    messages = [str(w.message) for w in caught]
    assert any("emission failed" in message for message in messages), messages
    np.testing.assert_allclose(dx, rosenbrock_gradient(x), rtol=1e-12, atol=1e-12)


def test_a_loop_left_unmarked_is_never_taken_for_a_typed_launch(monkeypatch):
    """A second loop the hook could not look at (its groups failed) leaves Numba's
    launch in the module: the kept module is not used, the function compiled again."""
    real = _numba_parfor_capture.launch_groups
    calls = []

    def second_fails(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyError("groups")
        return real(*args, **kwargs)

    monkeypatch.setattr(_numba_parfor_capture, "launch_groups", second_fails)
    _, _, heat = make_functions()
    u0, target = rng.uniform(0.0, 1.0, 30), rng.uniform(0.0, 1.0, 30)
    heat(u0, target, 3)
    monkeypatch.undo()
    assert len(calls) == 2
    signature = tuple(numba.typeof(a) for a in (u0, target, 3))
    with pytest.raises(_numba_parfor.ParforUnsupported, match="not marked"):
        _numba_parfor_capture.from_primal(heat, signature)


# On one thread: the prange loops as plain calls of their bodies, from the same module
# (frontends/_numba_parfor_serial.py), where the bodies have no loop of their own.


@pytest.fixture
def no_twin_compile(monkeypatch, no_second_compile):
    """Nor a compile of the serial twin (the full form included)."""

    def compiled_again(*args, **kwargs):
        raise AssertionError("the serial twin was compiled")

    monkeypatch.setattr(_numba_compile, "_ad_compile_full", compiled_again)


def test_one_thread_runs_the_loops_of_the_own_compile_in_place(no_twin_compile):
    rosenbrock, mapped, heat = make_functions()
    for dtype in (np.float64, np.float32):
        x = rng.uniform(-1.5, 1.5, 203).astype(dtype)
        rosenbrock(x)
        assert _numba_parfor_capture.serial_from_primal(rosenbrock, (numba.typeof(x),))
        dx = np.zeros_like(x)
        df = ez.autodiff(rosenbrock, ez.Reverse, ez.Duplicated, ez.ActiveOnly, threads=1)
        df(x, dx, 1.0)
        assert not on_threads(df, (x, dx, 1.0))
        tol = 1e-12 if dtype == np.float64 else 2e-5
        expected = rosenbrock_gradient(x.astype(np.float64))
        np.testing.assert_allclose(dx, expected, rtol=tol, atol=tol * np.abs(expected).max())

    # Forward mode too (always on one thread).
    x, w, out = rng.uniform(-2.0, 2.0, 57), rng.uniform(0.5, 1.5, 3), np.zeros(57)
    mapped(x, w, out)
    tx, tw = rng.normal(size=57), rng.normal(size=3)
    df = ez.autodiff(mapped, ez.Forward, ez.Dual, ez.Dual, ez.Dual, ez.Dual)
    y, dy = df(x, tx, w, tw, out, np.zeros(57))
    h = 1e-6
    ahead = mapped(x + h * tx, w + h * tw, np.zeros(57))
    behind = mapped(x - h * tx, w - h * tw, np.zeros(57))
    assert y == pytest.approx(mapped(x, w, np.zeros(57)), rel=1e-13)
    assert dy == pytest.approx((ahead - behind) / (2 * h), rel=1e-6)

    u0, target = rng.uniform(0.0, 1.0, 40), rng.uniform(0.0, 1.0, 40)
    heat(u0, target, 6)
    du0 = ez.grad(heat)(u0, target, 6)  # the default: one thread (a time loop)
    expected = fd_partial(lambda u: heat(u, target, 6), (u0,), 0)
    np.testing.assert_allclose(du0, expected, rtol=1e-7, atol=1e-9)


def test_one_thread_ends_the_call_with_the_bodys_exception():
    @numba.njit(parallel=True, boundscheck=True)
    def shifted(x, k):
        s = 0.0
        for i in numba.prange(x.shape[0]):
            s += x[i] * x[i + k]
        return s

    x = np.arange(100) * 0.25
    shifted(x, 0)
    assert _numba_parfor_capture.serial_from_primal(shifted, (numba.typeof(x), numba.int64))
    df = ez.autodiff(shifted, ez.Reverse, ez.Duplicated, ez.Const, ez.ActiveOnly, threads=1)
    dx = np.zeros_like(x)
    df(x, dx, 0, 1.0)
    np.testing.assert_allclose(dx, 2.0 * x, rtol=1e-14)
    with pytest.raises(IndexError, match="out of bounds"):
        df(x, np.zeros_like(x), 3, 1.0)
    dx = np.zeros_like(x)
    df(x, dx, 0, 1.0)  # and works again after
    np.testing.assert_allclose(dx, 2.0 * x, rtol=1e-14)


def test_one_thread_compiles_the_twin_for_bodies_with_loops_of_their_own():
    @numba.njit(parallel=True)
    def rows(a):
        s = 0.0
        for i in numba.prange(a.shape[0]):
            t = 0.0
            for j in range(a.shape[1]):
                t += a[i, j] * a[i, j]
            s += math.sqrt(t)
        return s

    a = rng.uniform(0.5, 1.5, (9, 4))
    rows(a)
    assert _numba_parfor_capture.serial_from_primal(rows, (numba.typeof(a),)) is None
    da = np.zeros_like(a)
    ez.autodiff(rows, ez.Reverse, ez.Duplicated, ez.ActiveOnly, threads=1)(a, da, 1.0)
    np.testing.assert_allclose(da, a / np.sqrt((a * a).sum(axis=1))[:, None], rtol=1e-13)
