"""Loads from a scratch array an earlier loop filled, computed again from what it stored
(src/scratch_forwarding.h), instead of cached on Enzyme's tape.

Where the pass forwards (a per-row temporary filled, then read in later loops; float64
and float32; GMM as the benchmark writes it), the gradient matches an analytic one or
float64 central differences and the tape no longer holds the temporary's values.
Where it must not (something else writes the temporary or what its values came from
between the fill and the read, a fill that skips iterations or carries a value from
the iteration before, a read past the filled range or shifted from it), the gradient
still matches central differences, and the tape still holds the values read.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import pytest

import enzyme_py as ez
from benchmarks import kernels
from tests.reference import fd_partial

from numba_functions import squares_then_sines

pytestmark = pytest.mark.needs_enzyme

ROWS, COLUMNS = 400, 6
# What caching one temporary's loads costs: a value per element per row.
ONE_CACHE = ROWS * COLUMNS * 8


def _tape_bytes_of_last_call() -> int:
    from enzyme_py import _state

    return int(_state.native.tape_bytes()[2])


@numba.njit
def centred_sines(x, w):
    n, d = x.shape
    xc = np.empty(d, dtype=x.dtype)
    s = 0.0
    for i in range(n):
        for j in range(d):
            xc[j] = x[i, j] - w[j]
        for j in range(d):
            s += math.sin(xc[j]) * xc[j]
        for j in range(d):
            s += xc[j] * xc[j] * w[j]
    return s


def centred_sines_gradients(x, w):
    xc = x - w[None, :]
    inner = np.cos(xc) * xc + np.sin(xc) + 2.0 * xc * w[None, :]
    return inner, -inner.sum(axis=0) + (xc * xc).sum(axis=0)


def _inputs(dtype=np.float64):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((ROWS, COLUMNS)).astype(dtype)
    w = rng.standard_normal(COLUMNS).astype(dtype)
    return x, w


def _gradients(f, x, w):
    dx, dw = np.zeros_like(x), np.zeros_like(w)
    df = ez.autodiff(f, ez.Reverse, ez.Duplicated, ez.Duplicated, ez.ActiveOnly)
    df(x, dx, w, dw, 1.0)
    return dx, dw, _tape_bytes_of_last_call()


def test_a_filled_temporary_is_computed_again_not_cached():
    x, w = _inputs()
    dx, dw, tape = _gradients(centred_sines, x, w)
    want_dx, want_dw = centred_sines_gradients(x, w)
    np.testing.assert_allclose(dx, want_dx, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dw, want_dw, rtol=1e-12, atol=1e-10)
    # Two loops read xc: cached, the tape would hold it twice.
    assert tape < ONE_CACHE // 4, tape


def test_float32_temporary_is_computed_again():
    x, w = _inputs(np.float32)
    dx, dw, tape = _gradients(centred_sines, x, w)
    want_dx, want_dw = centred_sines_gradients(x.astype(np.float64), w.astype(np.float64))
    np.testing.assert_allclose(dx, want_dx, rtol=2e-4, atol=2e-4)
    np.testing.assert_allclose(dw, want_dw, rtol=2e-4, atol=2e-2)
    assert tape < ONE_CACHE // 8, tape


@numba.njit
def overwritten_between(x, w):
    n, d = x.shape
    xc = np.empty(d)
    s = 0.0
    for i in range(n):
        for j in range(d):
            xc[j] = x[i, j] - w[j]
        xc[0] = 3.0 * x[i, 0]  # a second writer: xc[0] is not what the fill stored
        for j in range(d):
            s += math.sin(xc[j]) * xc[j]
    return s


@numba.njit
def source_overwritten_between(x, w):
    n, d = x.shape
    xc = np.empty(d)
    y = np.empty(d)
    s = 0.0
    for i in range(n):
        for j in range(d):
            y[j] = x[i, j] * w[j]
        for j in range(d):
            xc[j] = y[j] - w[j]
        for j in range(d):
            y[j] = 2.0 * y[j]  # what the fill read is no longer there
        for j in range(d):
            s += math.sin(xc[j]) * xc[j] + y[j] * y[j]
    return s


@numba.njit
def filled_on_condition(x, w):
    n, d = x.shape
    xc = np.zeros(d)
    s = 0.0
    for i in range(n):
        for j in range(d):
            if x[i, j] > 0.0:
                xc[j] = x[i, j] - w[j]
        for j in range(d):
            s += math.sin(xc[j]) * xc[j]
    return s


@numba.njit
def filled_in_some_rows(x, w):
    n, d = x.shape
    xc = np.zeros(d)
    s = 0.0
    for i in range(n):
        if x[i, 0] > 0.0:  # other rows read the last row filled
            for j in range(d):
                xc[j] = x[i, j] - w[j]
        for j in range(d):
            s += math.sin(xc[j]) * xc[j]
    return s


@numba.njit
def prefix_sums(x, w):
    n, d = x.shape
    acc = np.empty(d)
    s = 0.0
    for i in range(n):
        run = 0.0
        for j in range(d):
            run += x[i, j] * w[j]
            acc[j] = run
        for j in range(d):
            s += math.sin(acc[j]) * acc[j]
    return s


WIDE = 200  # constant counts: no guards, the fill's exit reaches the reads alone


@numba.njit
def read_past_the_fill(x, w):
    n = x.shape[0]
    xc = np.ones(WIDE)
    s = 0.0
    for i in range(n):
        for j in range(WIDE - 1):
            xc[j] = x[i, j] - w[j]
        for j in range(WIDE):
            s += math.sin(xc[j]) * xc[j]
    return s


def test_a_read_past_the_filled_range_stays_on_the_tape():
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((4, WIDE)), rng.standard_normal(WIDE)
    dx, dw, tape = _gradients(read_past_the_fill, x, w)
    xc = x[:, : WIDE - 1] - w[None, : WIDE - 1]
    inner = np.cos(xc) * xc + np.sin(xc)
    want_dx = np.zeros_like(x)
    want_dx[:, : WIDE - 1] = inner
    want_dw = np.zeros_like(w)
    want_dw[: WIDE - 1] = -inner.sum(axis=0)
    np.testing.assert_allclose(dx, want_dx, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dw, want_dw, rtol=1e-12, atol=1e-12)
    assert tape >= 4 * (WIDE - 1) * 8, tape


@numba.njit
def read_shifted(x, w):
    n, d = x.shape
    xc = np.empty(d)
    s = 0.0
    for i in range(n):
        for j in range(d):
            xc[j] = x[i, j] - w[j]
        for j in range(d - 1):
            s += math.sin(xc[j + 1]) * xc[j]
    return s


@pytest.mark.parametrize(
    "f",
    [
        overwritten_between,
        source_overwritten_between,
        filled_on_condition,
        filled_in_some_rows,
        prefix_sums,
        read_shifted,
    ],
    ids=lambda f: f.__name__,
)
def test_reads_the_pass_must_leave_to_the_tape(f):
    x, w = _inputs()
    x, w = x[:40].copy(), w  # central differences: a few hundred primal calls
    dx, dw, tape = _gradients(f, x, w)
    np.testing.assert_allclose(dx, fd_partial(f, (x, w), 0), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(dw, fd_partial(f, (x, w), 1), rtol=1e-6, atol=1e-6)
    # The read values stayed on the tape: a value per element (and row) read.
    assert tape >= 40 * (COLUMNS - 1) * 8, tape


def test_gmm_keeps_neither_copy_of_the_centred_sample():
    d, k, n = 4, 3, 200
    alphas, means, icf, x, gamma, m = kernels.gmm_inputs(d, k, n)
    grads = ez.grad(kernels.gmm_objective, argnums=(0, 1, 2))(alphas, means, icf, x, gamma, m)
    tape = _tape_bytes_of_last_call()

    def objective(a, mu, q):
        return kernels.gmm_objective(a, mu, q, x, gamma, m)

    assert len(grads) == 3
    for k_arg, got in enumerate(grads):
        want = fd_partial(objective, (alphas, means, icf), k_arg)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    # Still cached per component and sample: qxc (d values), idx (d counters), the
    # main terms (1): 2 d + 1 values. Each copy of xc would add d more.
    assert tape < n * k * (2 * d + 1) * 8 + n * k * d * 8 // 2, tape


def test_an_argument_filled_then_read_keeps_its_adjoint():
    # The read is computed from x again; what the caller seeds scratch's shadow with
    # (scratch as an output of the function) still reaches x through the fill.
    x = np.array([0.3, -1.2, 2.0, 0.7])
    scratch, seed = np.zeros(4), np.array([1.0, -2.0, 0.5, 3.0])
    dx, dscratch = np.zeros(4), seed.copy()
    df = ez.autodiff(squares_then_sines, ez.Reverse, ez.Duplicated, ez.Duplicated, ez.ActiveOnly)
    df(x, dx, scratch, dscratch, 1.0)
    np.testing.assert_allclose(scratch, x * x)
    np.testing.assert_allclose(dx, (np.cos(x * x) + seed) * 2.0 * x, rtol=1e-14)
    np.testing.assert_allclose(dscratch, 0.0)  # overwritten by the fill: its adjoint spent
    assert _tape_bytes_of_last_call() < 4 * 8


# Reads in a loop nested deeper than the fill: a triangular product of the filled
# temporary (GMM's Cholesky factor applied to the centred sample, written densely).
@numba.njit
def triangular_squares(x, lower):
    n, d = x.shape
    xc = np.empty(d)
    s = 0.0
    for i in range(n):
        for j in range(d):
            xc[j] = x[i, j] - lower[j, j]
        for r in range(d):
            t = 0.0
            for j in range(r + 1):
                t += lower[r, j] * xc[j]
            s += t * t
    return s


def triangular_squares_gradients(x, lower):
    xc = x - np.diag(lower)[None, :]
    tri = np.tril(lower)
    t = xc @ tri.T  # (n, d): t[i, r] = sum_{j <= r} lower[r, j] xc[i, j]
    dxc = 2.0 * t @ tri  # d s / d xc
    dlower = np.tril(2.0 * t.T @ xc)
    dlower[np.diag_indices_from(dlower)] -= dxc.sum(axis=0)
    return dxc, dlower


def test_reads_in_a_deeper_loop_are_computed_again():
    rng = np.random.default_rng(11)
    x = rng.standard_normal((ROWS, COLUMNS))
    lower = rng.standard_normal((COLUMNS, COLUMNS))
    dx, dlower, tape = _gradients(triangular_squares, x, lower)
    want_dx, want_dlower = triangular_squares_gradients(x, lower)
    np.testing.assert_allclose(dx, want_dx, rtol=1e-12, atol=1e-10)
    np.testing.assert_allclose(dlower, want_dlower, rtol=1e-12, atol=1e-8)
    # The tape keeps each row's d sums t (what t * t's derivative reads); cached, xc's
    # loads would add d (d + 1) / 2 values a row.
    assert tape < ONE_CACHE + ROWS * COLUMNS * (COLUMNS + 1) // 2 * 8 // 2, tape


@numba.njit
def triangular_past_the_fill(x, lower):
    n, d = x.shape
    xc = np.zeros(d + 1)
    s = 0.0
    for i in range(n):
        for j in range(d - 1):
            xc[j] = x[i, j] - lower[j, j]
        for r in range(d):
            t = 0.0
            for j in range(r + 2):  # reaches xc[d - 1] and xc[d], which no fill wrote
                t += lower[r, min(j, d - 1)] * xc[j]
            s += t * t
    return s


@numba.njit
def triangular_written_between(x, lower):
    n, d = x.shape
    xc = np.empty(d)
    s = 0.0
    for i in range(n):
        for j in range(d):
            xc[j] = x[i, j] - lower[j, j]
        for r in range(d):
            t = 0.0
            for j in range(r + 1):
                t += lower[r, j] * xc[j]
            xc[r] = t  # later rows read this, not what the fill stored
            s += t * t
    return s


@pytest.mark.parametrize(
    "f", [triangular_past_the_fill, triangular_written_between], ids=lambda f: f.__name__
)
def test_deeper_reads_the_pass_must_leave_to_the_tape(f):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((30, COLUMNS))
    lower = rng.standard_normal((COLUMNS, COLUMNS))
    dx, dlower, tape = _gradients(f, x, lower)
    np.testing.assert_allclose(dx, fd_partial(f, (x, lower), 0), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(dlower, fd_partial(f, (x, lower), 1), rtol=1e-6, atol=1e-6)
    # The values read stayed on the tape: at least one per row and column.
    assert tape >= 30 * COLUMNS * 8, tape
