"""Fused reverse stencil loops on the CPU thread pool (src/fused_threads.h).

A fused loop writes each entry of a shadow at one iteration, from memory the loop does
not write, so its iterations run in contiguous shares on the pool's threads (loops of
65,536 iterations or more; shorter ones in place), each entry computed as on one
thread: the same bits. These tests check that against the gradient the derivative
built with threads=1 computes (and, in every case, an analytic gradient or float64
central differences), on both sides of that length; that threads=1 leaves the loop as
it was; and that a fused loop inside a prange chunk (a task of the pool already) runs
on that chunk's thread.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from numba import njit, prange

import enzyme_py as ez
from benchmarks import kernels

pytestmark = pytest.mark.needs_enzyme


def fused_workers(ir: str) -> list[int]:
    """The `workers` argument of each call of the fused loops' runtime in ``ir``."""
    return [int(w) for w in re.findall(r"call void @__enzyme_py_fused_run\(.*, i64 (\d+)\)", ir)]


@pytest.mark.parametrize("n", [10, 1001, 65_537, 65_540, 70_001, 131_075])
def test_threaded_rosenbrock_gradients_have_the_bits_of_one_thread(n):
    x = np.random.default_rng(n).uniform(-1.0, 2.0, n)
    one = ez.autodiff(kernels.rosenbrock, ez.Reverse, ez.Duplicated, ez.ActiveOnly, threads=1)
    dx_one = np.zeros(n)
    one(x, dx_one, 1.0)
    threaded = ez.grad(kernels.rosenbrock)(x)
    np.testing.assert_array_equal(threaded, dx_one)
    np.testing.assert_allclose(threaded, kernels.rosenbrock_gradient(x), rtol=1e-13, atol=1e-12)


def test_a_long_loop_takes_the_pool_by_default_and_one_thread_when_asked():
    n = 200_001  # shares of at least 32768 iterations: several
    x = np.random.default_rng(0).uniform(-1.0, 2.0, n)
    default = ez.autodiff(kernels.rosenbrock, ez.Reverse, ez.Duplicated, ez.ActiveOnly)
    one = ez.autodiff(kernels.rosenbrock, ez.Reverse, ez.Duplicated, ez.ActiveOnly, threads=1)
    dx, dx_one = np.zeros(n), np.zeros(n)
    default(x, dx, 1.0)
    one(x, dx_one, 1.0)
    assert fused_workers(default.for_arguments((x, dx, 1.0)).inspect_llvm(optimized=True)) == [0]
    assert fused_workers(one.for_arguments((x, dx_one, 1.0)).inspect_llvm(optimized=True)) == []
    np.testing.assert_array_equal(dx, dx_one)
    np.testing.assert_allclose(dx, kernels.rosenbrock_gradient(x), rtol=1e-13, atol=1e-12)
    # Adjoints added into the shadow given (the user's convention), on every thread.
    default(x, dx, 1.0)
    np.testing.assert_allclose(dx, 2.0 * kernels.rosenbrock_gradient(x), rtol=1e-13, atol=1e-11)


@pytest.mark.parametrize("cells", [257, 70_003])
def test_threaded_heat_gradients_have_the_bits_of_one_thread(cells):
    # Heat's reverse time loop runs its fused stencil loop once per step.
    u0, target = kernels.heat_inputs(cells, seed=cells)
    steps = 5
    one = ez.autodiff(
        kernels.heat_loss,
        ez.Reverse,
        ez.Duplicated,
        ez.Const,
        ez.Const,
        ez.ActiveOnly,
        threads=1,
    )
    du_one = np.zeros(cells)
    one(u0, du_one, target, steps, 1.0)
    threaded = ez.grad(kernels.heat_loss)(u0, target, steps)
    np.testing.assert_array_equal(threaded, du_one)
    h = 1e-6
    for i in (0, cells // 2, cells - 1):
        e = np.zeros(cells)
        e[i] = h
        fd = kernels.heat_loss(u0 + e, target, steps) - kernels.heat_loss(u0 - e, target, steps)
        assert threaded[i] == pytest.approx(fd / (2 * h), rel=1e-6, abs=1e-9)


@njit(parallel=True)
def rows_rosenbrock(a):
    s = 0.0
    for r in prange(a.shape[0]):
        for i in range(a.shape[1] - 1):
            d = a[r, i + 1] - a[r, i] * a[r, i]
            s += 100.0 * d * d + (1.0 - a[r, i]) * (1.0 - a[r, i])
    return s


def test_a_fused_loop_inside_a_prange_chunk_runs_on_its_thread():
    # Each row's reverse loop is fused, and long enough for the pool; the rows run on
    # the pool, whose tasks run their fused loops themselves (the launch holds it).
    a = np.random.default_rng(1).uniform(-1.0, 2.0, (4, 70_000))
    df = ez.autodiff(rows_rosenbrock, ez.Reverse, ez.Duplicated, ez.ActiveOnly, threads=2)
    da = np.zeros_like(a)
    df(a, da, 1.0)
    expected = np.stack([kernels.rosenbrock_gradient(row) for row in a])
    np.testing.assert_allclose(da, expected, rtol=1e-13, atol=1e-12)


def _gradient_in_child(x: np.ndarray) -> np.ndarray:
    return np.asarray(ez.grad(kernels.rosenbrock)(x))


def test_a_forked_child_runs_threaded_loops_too():
    # A child made by fork has none of its parent's workers: it starts a pool of its
    # own (before, a multiprocessing worker calling a gradient its parent had called on
    # the pool waited for workers that were not there).
    import multiprocessing

    x = np.random.default_rng(3).uniform(-1.0, 2.0, 200_001)
    expected = ez.grad(kernels.rosenbrock)(x)  # the pool's workers started here
    with multiprocessing.get_context("fork").Pool(1) as children:
        got = children.apply_async(_gradient_in_child, (x,)).get(timeout=120)
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_allclose(got, kernels.rosenbrock_gradient(x), rtol=1e-13, atol=1e-12)
