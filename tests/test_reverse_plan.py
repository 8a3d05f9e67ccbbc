"""The helpers' reverse calls planned once per kind of arguments (_reverse_plan.py).

After a first call, ``ez.grad`` and the other reverse helpers skip working out the
activities, the derivative and its shadows for arguments of the same kinds. These tests
check that later calls reuse the plan, and that every call, planned or not, gives the
exact gradient: arguments whose kinds change from call to call (dtype, layout,
writability, scalar types), sizes on both sides of the pool's threshold, C functions,
arguments that take no plan, and errors raised again on each call.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import pytest

import enzyme_py as ez
from benchmarks import kernels
from enzyme_py import _transforms
from enzyme_py._shadow_pool import LARGE_SHADOW_BYTES
from tests.reference import fd_gradient

pytestmark = pytest.mark.needs_enzyme


@numba.njit
def weighted(x, w, scale):
    s = 0.0
    for i in range(x.shape[0]):
        s += scale * w[i] * math.sin(x[i]) ** 2
    return s


def weighted_gradient(x, w, scale):
    return scale * w * 2.0 * np.sin(x) * np.cos(x)


@numba.njit
def divided(x, scale):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i] / scale
    return s


@numba.njit
def square(v):
    return v * v


@numba.njit
def cube(v):
    return v * v * v


@numba.njit
def apply_sum(x, fn):
    s = 0.0
    for i in range(x.shape[0]):
        s += fn(x[i])
    return s


def count_full_paths(monkeypatch) -> list[int]:
    """A list that grows by one at each call that works out its activities."""
    calls: list[int] = []
    original = _transforms.activities_for

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(_transforms, "activities_for", counted)
    return calls


def test_later_calls_of_the_same_kinds_take_the_plan(monkeypatch):
    calls = count_full_paths(monkeypatch)
    g = ez.grad(kernels.rosenbrock)
    for seed in range(4):
        x = np.random.default_rng(seed).uniform(-1.0, 2.0, 50)
        np.testing.assert_allclose(g(x), kernels.rosenbrock_gradient(x), rtol=1e-12)
    assert len(calls) == 1
    # Another size, the same kinds: still the plan.
    x = np.random.default_rng(9).uniform(-1.0, 2.0, 7)
    np.testing.assert_allclose(g(x), kernels.rosenbrock_gradient(x), rtol=1e-12)
    assert len(calls) == 1


def test_each_kind_of_arguments_gets_its_own_plan(monkeypatch):
    calls = count_full_paths(monkeypatch)
    g = ez.grad(weighted, argnums=(0, 1))
    rng = np.random.default_rng(0)
    base = rng.uniform(-1.0, 1.0, 40)
    w = rng.uniform(0.5, 1.5, 40)
    read_only = base.copy()
    read_only.flags.writeable = False
    strided = np.repeat(base, 2)[::2]
    variants = [
        (base, w, 0.5),  # float64, C, float scale
        (base.astype(np.float32), w.astype(np.float32), 0.5),
        (strided, w, 0.5),  # a strided view
        (read_only, w, 0.5),  # read-only x
        (base, w, 2),  # an int scale
        (base, w, np.float64(1.5)),  # a NumPy scalar
    ]
    for _ in range(2):  # the second round: every call from a plan
        for x, ww, scale in variants:
            gx, gw = g(x, ww, scale)
            assert gx.dtype == x.dtype and gw.dtype == ww.dtype
            x64, w64 = x.astype(np.float64), ww.astype(np.float64)
            tol = 1e-12 if x.dtype == np.float64 else 1e-5
            np.testing.assert_allclose(gx, weighted_gradient(x64, w64, scale), rtol=tol, atol=tol)
            np.testing.assert_allclose(gw, scale * np.sin(x64) ** 2, rtol=tol, atol=tol)
    assert len(calls) == len(variants)


def test_planned_calls_across_the_pool_threshold_are_exact():
    """Shadows the derivative zeroes come uninitialised from the pool once large: a
    plan made on a small call serves large calls (and the reverse), each exact, with
    the earlier results kept alive as an optimisation loop keeps them."""
    large = LARGE_SHADOW_BYTES // 8 + 1000
    g = ez.value_and_grad(kernels.rosenbrock)
    kept = []
    for n in [10, large, 10, large, large, 3, large]:
        x = np.random.default_rng(n + len(kept)).uniform(-1.0, 2.0, n)
        value, got = g(x)
        assert value == pytest.approx(kernels.rosenbrock(x), rel=1e-12)
        np.testing.assert_allclose(got, kernels.rosenbrock_gradient(x), rtol=1e-12, atol=1e-12)
        kept.append(got)
    for got in kept:
        assert np.isfinite(got).all()


def test_planned_calls_of_a_c_function(monkeypatch):
    module = ez.c(
        """
        #include <math.h>
        double energy(const double *x, int n) {
            double s = 0.0;
            for (int i = 0; i < n; ++i) s += x[i] * x[i] * x[i];
            return s;
        }
        """
    )
    calls = count_full_paths(monkeypatch)
    g = ez.grad(module.energy)
    for n in [5, 5, 70_000, 70_000]:
        x = np.random.default_rng(n).uniform(-1.0, 1.0, n)
        np.testing.assert_allclose(g(x, n), 3.0 * x * x, rtol=1e-12)
    assert len(calls) == 1


def test_arguments_that_take_no_plan_still_get_exact_gradients(monkeypatch):
    """A Numba function passed as an argument picks a specialisation of its own (its
    type does not tell which): such calls take the full path, each exact."""
    calls = count_full_paths(monkeypatch)
    g = ez.grad(apply_sum)
    x = np.random.default_rng(1).uniform(-1.0, 1.0, 12)
    for fn, want in [(square, 2.0 * x), (cube, 3.0 * x * x), (square, 2.0 * x)]:
        np.testing.assert_allclose(g(x, fn), want, rtol=1e-12)
        reference = fd_gradient(lambda v, f=fn: apply_sum(v, f), x)
        np.testing.assert_allclose(g(x, fn), reference, rtol=1e-6)
    assert len(calls) == 6


def test_errors_are_raised_again_after_a_plan():
    g = ez.grad(divided)
    x = np.linspace(0.1, 1.0, 8)
    np.testing.assert_allclose(g(x, 2.0), x, rtol=1e-12)
    for _ in range(2):
        with pytest.raises(TypeError, match="only float arrays can be differentiated"):
            g(np.arange(8), 2.0)
        # Raised inside the derivative, with the kinds of the planned call.
        with pytest.raises(ZeroDivisionError):
            g(x, 0.0)
    np.testing.assert_allclose(g(x, 4.0), x / 2.0, rtol=1e-12)


def test_shadows_a_derivative_does_not_zero_are_zeros():
    """A prange derivative on threads adds into its shadows (zeroed by the caller):
    planned calls give it zeros, even where the pool holds buffers full of earlier
    gradients of the same size."""
    n = LARGE_SHADOW_BYTES // 8 + 1000
    x = np.random.default_rng(3).uniform(-1.0, 2.0, n)
    want = kernels.rosenbrock_gradient(x)
    serial, threaded = ez.grad(kernels.rosenbrock), ez.grad(kernels.rosenbrock_prange)
    for _ in range(3):
        dirty = [serial(x), serial(x)]  # buffers of the pool, holding gradients
        del dirty
        np.testing.assert_allclose(threaded(x), want, rtol=1e-12, atol=1e-12)


@numba.njit
def squares_into(x, out):
    for i in range(x.shape[0]):
        out[i] = x[i] * x[i]


def test_jvp_asks_numba_what_a_function_returns_once_per_kinds(monkeypatch):
    """ez.jvp's question whether f returns a value is memoised by the arguments' kinds
    (Numba's typeof per argument was 40% of a small JVP's call): each kind gets its own
    answer, once, and exact tangents."""
    from enzyme_py.frontends import numba as numba_frontend

    rng = np.random.default_rng(5)

    def check_both(dtype):
        x = rng.uniform(-1.0, 1.0, 9).astype(dtype)
        w = rng.uniform(0.5, 1.5, 9).astype(dtype)
        t = rng.uniform(-1.0, 1.0, 9).astype(dtype)
        y, dy = ez.jvp(weighted, (x, w, 0.5), (t, None, None))
        tol = 1e-12 if dtype == np.float64 else 1e-5
        assert y == pytest.approx(weighted(x, w, 0.5), rel=tol)
        want = float(np.dot(weighted_gradient(x.astype(float), w.astype(float), 0.5), t))
        assert dy == pytest.approx(want, rel=tol, abs=tol)
        out = np.zeros_like(x)
        none, (dx, dout) = ez.jvp(squares_into, (x, out), (t, None))
        assert none is None
        np.testing.assert_allclose(dx, t)
        np.testing.assert_allclose(out, x * x, rtol=tol)
        np.testing.assert_allclose(dout, 2.0 * x * t, rtol=tol, atol=tol)

    for dtype in [np.float64, np.float32]:
        check_both(dtype)

    def unexpected(*args, **kwargs):
        raise AssertionError("asked Numba again for arguments of known kinds")

    monkeypatch.setattr(numba_frontend, "returns_value", unexpected)
    for dtype in [np.float64, np.float32, np.float64]:
        check_both(dtype)
