"""A running maximum or minimum used inside its loop (`m = max(m, x[i]); s += m`, a
drawdown's running peak, a cumulative maximum): Enzyme v0.0.289 tracks the index of the
element selected and its reverse pass reads that index's value after the loop's last
iteration for every iteration, a silently wrong gradient ([0, 0, 0, 0, 2, 0] for
[2, 0, 2, 0, 2, 0] on a running-maximum sum). The engine selects from a `freeze` of the
running value instead (src/rewrites.h: freeze_running_extrema). Checked against central
differences, in the Numba and C frontends, in reverse and forward mode; a pure
reduction (np.max, a logsumexp's maximum) keeps its form and its gradient."""

from __future__ import annotations

import numba
import numpy as np
import pytest
from corpus.functions import logsumexp_loop as logsumexp

import enzyme_py as ez

from reference import fd_gradient

pytestmark = pytest.mark.needs_enzyme


@numba.njit
def running_max_sum(x):
    s = 0.0
    m = x[0]
    for i in range(x.shape[0]):
        m = max(m, x[i])
        s += m
    return s


@numba.njit
def drawdown_sum(prices):
    peak = prices[0]
    worst = 0.0
    s = 0.0
    for i in range(prices.shape[0]):
        peak = max(peak, prices[i])
        worst = max(worst, (peak - prices[i]) / peak)
        s += worst
    return s


@numba.njit
def cumulative_max(x):
    out = np.empty_like(x)
    m = x[0]
    for i in range(x.shape[0]):
        if x[i] > m:
            m = x[i]
        out[i] = m
    return np.sum(out * np.arange(1.0, x.shape[0] + 1.0))


@numba.njit
def row_running_min(a):
    s = 0.0
    for i in range(a.shape[0]):
        m = a[i, 0]
        for j in range(a.shape[1]):
            m = min(m, a[i, j])
            s += m * (j + 1)
    return s


X = np.array([1.0, 0.5, 2.0, 0.3, 3.0, 0.1])


def test_the_running_maximum_of_the_report():
    # x[0] is the maximum for iterations 0-1, x[2] for 2-3, x[4] for 4-5.
    np.testing.assert_array_equal(ez.grad(running_max_sum)(X), [2, 0, 2, 0, 2, 0])
    np.testing.assert_array_equal(ez.jacfwd(running_max_sum)(X), [2, 0, 2, 0, 2, 0])


@pytest.mark.parametrize(
    "f", [running_max_sum, drawdown_sum, cumulative_max, row_running_min, logsumexp]
)
def test_against_central_differences(f):
    generator = np.random.default_rng(3)
    for _ in range(4):
        x = generator.normal(size=(3, 5)) if f is row_running_min else generator.normal(size=9)
        if f is drawdown_sum:
            x = np.abs(x) + 1.0
        expected = fd_gradient(f.py_func, x)
        np.testing.assert_allclose(ez.grad(f)(x), expected, rtol=1e-7, atol=1e-8)
        np.testing.assert_allclose(ez.jacfwd(f)(x), expected, rtol=1e-7, atol=1e-8)
        value, gradient = ez.value_and_grad(f)(x.astype(np.float32))
        assert value == pytest.approx(f(x.astype(np.float32)), rel=1e-6)
        assert gradient.dtype == np.float32
        np.testing.assert_allclose(gradient, expected, rtol=1e-4, atol=1e-4)


C_SOURCE = """
double running_max_sum(const double *x, int n) {
    double s = 0.0, m = x[0];
    for (int i = 0; i < n; ++i) { if (x[i] > m) m = x[i]; s += m; }
    return s;
}
"""


def test_c_frontend():
    f = ez.c(C_SOURCE).running_max_sum
    dx = np.zeros_like(X)
    ez.autodiff(f, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)(X, dx, X.size, 1.0)
    np.testing.assert_array_equal(dx, [2, 0, 2, 0, 2, 0])
    generator = np.random.default_rng(5)
    for _ in range(3):
        x = generator.normal(size=11)
        dx = np.zeros_like(x)
        ez.autodiff(f, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)(x, dx, x.size, 1.0)
        np.testing.assert_allclose(dx, fd_gradient(lambda v: f(v, v.size), x), atol=1e-8)
