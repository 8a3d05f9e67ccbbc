"""A prange loop's primal launch that nothing reads is dropped from a derivative on
threads (src/unread_launches.h): ez.grad of a sum needs no sum. Its reverse pass
recomputes the body and raises what the launch would have raised. Where the sum is
needed (returned, or read by the reverse of what follows), the launch stays."""

from __future__ import annotations

import math
import re

import numba
import numpy as np
import pytest

import enzyme_py as ez
from benchmarks.kernels import rosenbrock_gradient
from benchmarks.kernels import rosenbrock_prange as rosenbrock

pytestmark = pytest.mark.needs_enzyme

# A call of a launch (its definition stays in the module: the runner's reverse calls
# its chunks through other functions).
LAUNCH_CALL = re.compile(r"call (?:fastcc )?void @__enzyme_py_parfor_\d+\(")


@numba.njit(parallel=True)
def root_of_sum(x):
    # The reverse of sqrt needs the sum: the launch must run.
    s = 0.0
    for i in numba.prange(x.shape[0]):
        s += x[i] * x[i]
    return math.sqrt(s)


@numba.njit(parallel=True)
def scaled_sum(x, n):
    # np.empty(n) raises for n < 0 (Numba's ValueError) in every chunk.
    s = 0.0
    for i in numba.prange(x.shape[0]):
        t = np.empty(n)
        for j in range(n):
            t[j] = x[i] * (j + 1.0)
        for j in range(n):
            s += t[j] * x[i]
    return s


def derivative_ir(f, activities, args):
    df = ez.autodiff(f, ez.Reverse, *activities, threads=2)
    return df, df.for_arguments(args).inspect_llvm(optimized=True)


def test_the_sum_ez_grad_does_not_return_is_not_computed():
    x = np.random.default_rng(0).uniform(-1.0, 2.0, 40_000)
    dx = np.zeros_like(x)
    df, ir = derivative_ir(rosenbrock, (ez.Duplicated, ez.ActiveOnly), (x, dx, 1.0))
    assert "@__enzyme_py_parfor_reverse(" in ir  # on threads
    assert not LAUNCH_CALL.search(ir)
    df(x, dx, 1.0)
    np.testing.assert_allclose(dx, rosenbrock_gradient(x), rtol=1e-12, atol=1e-12)


def test_a_returned_sum_keeps_its_launch():
    x = np.random.default_rng(1).uniform(-1.0, 2.0, 40_000)
    dx = np.zeros_like(x)
    df, ir = derivative_ir(rosenbrock, (ez.Duplicated, ez.Active), (x, dx, 1.0))
    assert LAUNCH_CALL.search(ir)
    (value,) = df(x, dx, 1.0)
    a = x[1:] - x[:-1] ** 2
    assert value == pytest.approx(np.sum(100.0 * a * a + (1.0 - x[:-1]) ** 2), rel=1e-12)
    np.testing.assert_allclose(dx, rosenbrock_gradient(x), rtol=1e-12, atol=1e-12)


def test_a_sum_the_reverse_reads_keeps_its_launch():
    x = np.random.default_rng(2).uniform(-1.0, 1.0, 40_000)
    dx = np.zeros_like(x)
    df, ir = derivative_ir(root_of_sum, (ez.Duplicated, ez.ActiveOnly), (x, dx, 1.0))
    assert LAUNCH_CALL.search(ir)
    df(x, dx, 1.0)
    np.testing.assert_allclose(dx, x / np.sqrt(np.sum(x * x)), rtol=1e-12)


def test_a_dropped_launch_raises_from_its_reverse():
    x = np.random.default_rng(3).uniform(-1.0, 1.0, 40_000)
    dx = np.zeros_like(x)
    df, ir = derivative_ir(scaled_sum, (ez.Duplicated, ez.Const, ez.ActiveOnly), (x, dx, 3, 1.0))
    assert not LAUNCH_CALL.search(ir)
    df(x, dx, 3, 1.0)
    # s = sum_i x_i^2 * (1 + 2 + 3)
    np.testing.assert_allclose(dx, 12.0 * x, rtol=1e-13)
    # What the function raises, run serially (Numba's parallel=True code gives a
    # SystemError for an exception in a prange body).
    with pytest.raises(ValueError, match="negative dimensions"):
        numba.njit(scaled_sum.py_func)(x, -1)
    with pytest.raises(ValueError, match="negative dimensions"):
        df(x, np.zeros_like(x), -1, 1.0)
    dx[:] = 0.0
    df(x, dx, 2, 1.0)  # and works again after
    np.testing.assert_allclose(dx, 6.0 * x, rtol=1e-13)
