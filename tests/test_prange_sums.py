"""The sums of a threaded prange loop's forward launches may be reordered
(``reorder_loop_sums`` in src/rewrites.h: Numba leaves a prange reduction's order
open), so that they vectorise: which sums the rule takes, and that values and
gradients built on them stay right."""

from __future__ import annotations

import math
import warnings

import numba
import numpy as np
import pytest

import enzyme_py as ez

pytestmark = pytest.mark.needs_enzyme

# An outer loop (a prange body's chunk loop) with four loop-carried values: %s, a sum
# of what an inner loop computes (reordered); %u, a sum whose running value is also
# stored (kept: other code sees each partial sum); %w = v - w (kept: not a sum of
# terms); and the inner loop's own sum %t (kept: not the outermost loop).
LOOP_SUMS = """
define double @f(double* %x, double* %y, i64 %n) {
entry:
  br label %outer
outer:
  %i = phi i64 [ 0, %entry ], [ %i.next, %latch ]
  %s = phi double [ 0.0, %entry ], [ %s.next, %latch ]
  %u = phi double [ 0.0, %entry ], [ %u.next, %latch ]
  %w = phi double [ 0.0, %entry ], [ %w.next, %latch ]
  %p = getelementptr double, double* %x, i64 %i
  %v = load double, double* %p
  br label %inner
inner:
  %j = phi i64 [ 0, %outer ], [ %j.next, %inner ]
  %t = phi double [ %v, %outer ], [ %t.next, %inner ]
  %t.next = fadd double %t, 1.0
  %j.next = add i64 %j, 1
  %more = icmp slt i64 %j.next, 4
  br i1 %more, label %inner, label %latch
latch:
  %s.next = fadd double %s, %t.next
  %u.next = fadd double %u, %v
  %q = getelementptr double, double* %y, i64 %i
  store double %u.next, double* %q
  %w.next = fsub double %v, %w
  %i.next = add i64 %i, 1
  %again = icmp slt i64 %i.next, %n
  br i1 %again, label %outer, label %exit
exit:
  %r1 = fadd double %s.next, %u.next
  %r = fadd double %r1, %w.next
  ret double %r
}
"""


def test_only_pure_sums_of_the_outermost_loop_are_reordered():
    from enzyme_py.frontends.ir import parse_module

    module = parse_module(LOOP_SUMS)
    assert module.native.reorder_loop_sums("f") == 1
    ir = module.ir()
    assert "%s.next = fadd reassoc double %s, %t.next" in ir
    for kept in (
        "%t.next = fadd double %t, 1.0",
        "%u.next = fadd double %u, %v",
        "%w.next = fsub double %v, %w",
        "%r1 = fadd double %s.next, %u.next",
    ):
        assert kept in ir, kept
    parse_module(ir)  # still valid IR
    with pytest.raises(RuntimeError, match="no function named 'g'"):
        module.native.reorder_loop_sums("g")


@numba.njit(parallel=True)
def log_of_sum(x):
    # A body with a loop of its own: threaded by default. The prange sum feeds serial
    # code whose derivative reads it (the forward launch's value, summed reordered).
    s = 0.0
    for i in numba.prange(x.shape[0]):
        t = 0.0
        for k in range(3):
            t += math.sin(x[i] + k)
        s += t * t
    return math.log(1.0 + s)


def test_the_primal_chunks_run_the_body_whose_sums_are_reordered():
    # The sums are flagged in K.body after Enzyme's pass; a chunk that had the body
    # inlined before would run an unflagged copy (Rosenbrock prange's value_and_grad
    # on two threads: about 1.0 ms so, 0.7 ms calling K.body).
    import re

    x = np.random.default_rng(1).uniform(-2.0, 2.0, 100)
    df = ez.autodiff(log_of_sum, ez.Reverse, ez.Duplicated, ez.Active, threads=2)
    dx = np.zeros_like(x)
    assert df(x, dx, 1.0)[0] == pytest.approx(log_of_sum.py_func(x), rel=1e-12)
    module = df._bound_for((x, dx, 1.0)).derivative.ir_texts().derivative_module
    chunk = re.search(r"^define internal i32 @(\w+)\.chunk\(.*?^}", module, re.M | re.S)
    assert chunk is not None
    assert f"call i32 @{chunk.group(1)}.body(" in chunk.group(0)
    body = re.search(r"^define internal i32 @\w+\.body\(.*?^}", module, re.M | re.S)
    assert body is not None and "fadd reassoc" in body.group(0)


def _central(f, x, h=1e-6):
    out = np.empty_like(x)
    for k in range(x.shape[0]):
        e = np.zeros_like(x)
        e[k] = h
        out[k] = (f(x + e) - f(x - e)) / (2.0 * h)
    return out


@pytest.fixture
def short_chunks():
    """Chunks of any length (a light body asks for 16384 indices per chunk at least):
    the sums of several chunks are added after the launch."""
    from enzyme_py import _state

    before = _state.native.set_parfor_grain_limit(1)
    yield
    _state.native.set_parfor_grain_limit(before)


@pytest.mark.parametrize("n", [3, 64, 5001])
def test_a_reordered_prange_sum_gives_the_value_and_gradient(n, short_chunks):
    x = np.random.default_rng(n).uniform(-2.0, 2.0, n)
    value, grad = ez.value_and_grad(log_of_sum)(x)
    assert value == pytest.approx(log_of_sum.py_func(x), rel=1e-12)
    serial = np.zeros_like(x)
    ez.autodiff(log_of_sum, ez.Reverse, ez.Duplicated, ez.Active, threads=1)(x, serial, 1.0)
    np.testing.assert_allclose(grad, serial, rtol=1e-11, atol=1e-14)
    if n <= 64:
        fd = _central(log_of_sum.py_func, x)
        np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-8)


@numba.njit(parallel=True)
def several_reductions(x):
    # A sum, a difference, a conditional sum (a PHI of two values: not reordered) and
    # a product (not a sum: kept), each a prange reduction of its own.
    s = 0.0
    d = 1.0
    c = 0.0
    p = 1.0
    for i in numba.prange(x.shape[0]):
        v = math.sin(x[i])
        s += v * v
        d -= 0.5 * x[i]
        if v > 0.0:
            c += v
        p *= 1.0 + 0.01 * x[i]
    return s + math.exp(0.1 * d) + 0.01 * c * c + p


@pytest.mark.parametrize("dtype,rtol", [(np.float64, 1e-11), (np.float32, 2e-4)])
def test_several_prange_reductions_on_threads_match_serial_and_finite_differences(
    dtype, rtol, short_chunks
):
    x = np.random.default_rng(5).uniform(-1.0, 1.0, 257).astype(dtype)
    derivatives = {}
    for threads in (1, 2, 3):
        dx = np.zeros_like(x)
        with warnings.catch_warnings():
            warnings.simplefilter("error", ez.PerformanceWarning)  # on threads, or fail
            df = ez.autodiff(several_reductions, ez.Reverse, ez.Duplicated, ez.Active,
                             threads=threads)  # fmt: skip
            (value,) = df(x, dx, dtype(1.0))
        assert value == pytest.approx(float(several_reductions.py_func(x)), rel=rtol)
        derivatives[threads] = dx
    for threads in (2, 3):
        np.testing.assert_allclose(derivatives[threads], derivatives[1], rtol=rtol, atol=rtol)
    fd = _central(several_reductions.py_func, x.astype(np.float64))
    np.testing.assert_allclose(derivatives[1], fd, rtol=max(rtol, 1e-6), atol=max(rtol, 1e-7))
