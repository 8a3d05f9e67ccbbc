"""Reverse loops that add into neighbouring gradient entries (Rosenbrock's grad[i] and
grad[i+1]) vectorise: the derivative pipeline's second part runs the loop vectoriser
again with LLVM's store-to-load forwarding heuristic off (_pipeline.py, src/jit.cpp).
The heuristic is a cost rule, not a legality rule; these tests check the vectorised
derivatives against float64 references, at lengths that exercise the vector body, its
remainder and loops too short for either, and that the loop did vectorise."""

from __future__ import annotations

import numba
import numpy as np
import pytest

import enzyme_py as ez
from benchmarks.kernels import rosenbrock_gradient

pytestmark = pytest.mark.needs_enzyme

SIZES = [2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 33, 1000, 1001]


@numba.njit
def rosenbrock(x):
    s = 0.0
    for i in range(x.shape[0] - 1):
        a = x[i + 1] - x[i] * x[i]
        b = 1.0 - x[i]
        s += 100.0 * a * a + b * b
    return s


@numba.njit
def three_neighbours(x, w):
    # Writes grad[i + 2], grad[i] and grad[i + 1] in the reverse loop, in that order.
    s = 0.0
    for i in range(x.shape[0] - 2):
        s += w[0] * x[i + 2] ** 2 + w[1] * x[i] * x[i + 1] + w[2] * np.sin(x[i + 1])
    return s


def three_neighbours_reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    g = np.zeros_like(x)
    n = x.shape[0] - 2
    g[2 : n + 2] += 2.0 * w[0] * x[2 : n + 2]
    g[:n] += w[1] * x[1 : n + 1]
    g[1 : n + 1] += w[1] * x[:n] + w[2] * np.cos(x[1 : n + 1])
    return g


@numba.njit
def strided_pairs(x):
    # Entries two apart: grad[i] and grad[i + 2].
    s = 0.0
    for i in range(x.shape[0] - 2):
        d = x[i + 2] - x[i]
        s += d * d * d
    return s


def strided_pairs_reference(x: np.ndarray) -> np.ndarray:
    g = np.zeros_like(x)
    d = x[2:] - x[:-2]
    g[2:] += 3.0 * d * d
    g[:-2] -= 3.0 * d * d
    return g


@pytest.mark.parametrize("n", SIZES)
def test_rosenbrock_gradient_matches_the_float64_reference(n):
    x = np.random.default_rng(n).uniform(-2.0, 2.0, n)
    np.testing.assert_allclose(
        ez.grad(rosenbrock)(x), rosenbrock_gradient(x), rtol=1e-13, atol=1e-12
    )


@pytest.mark.parametrize("n", SIZES[1:])
def test_three_neighbours_in_another_order_match(n):
    rng = np.random.default_rng(100 + n)
    x, w = rng.uniform(-1.0, 1.0, n), np.array([0.7, -1.3, 2.1])
    got = ez.grad(three_neighbours)(x, w)
    np.testing.assert_allclose(got, three_neighbours_reference(x, w), rtol=1e-13, atol=1e-12)


@pytest.mark.parametrize("n", SIZES[1:])
def test_entries_two_apart_match(n):
    x = np.random.default_rng(200 + n).uniform(-1.0, 1.0, n)
    np.testing.assert_allclose(
        ez.grad(strided_pairs)(x), strided_pairs_reference(x), rtol=1e-13, atol=1e-12
    )


def test_the_accumulated_gradient_adds_into_what_was_there():
    # A shadow given by the caller is added into: the vector body must read it too.
    x = np.random.default_rng(7).uniform(-2.0, 2.0, 1001)
    start = np.random.default_rng(8).uniform(-1.0, 1.0, 1001)
    shadow = start.copy()
    ez.autodiff(rosenbrock, ez.Reverse, ez.Duplicated, ez.ActiveOnly)(x, shadow, 1.0)
    np.testing.assert_allclose(shadow, start + rosenbrock_gradient(x), rtol=1e-13, atol=1e-12)


def test_the_rosenbrock_reverse_loop_is_vectorised():
    x = np.ones(16)
    df = ez.autodiff(rosenbrock, ez.Reverse, ez.Duplicated, ez.ActiveOnly)
    specialised = df.for_arguments((x, np.zeros(16), 1.0))
    ir = specialised.inspect_llvm(optimized=True)
    # Its loop body loads and stores vectors of the gradient (the scalar loop had none).
    assert "x double>" in ir, ir


@numba.njit
def exp_rows(x, e):
    # GMM's shape: per row, short loops (over the dimension, 10 here) through an
    # array, one of them calling exp. (Through a temporary of its own, the reads of e
    # are computed again from x before Enzyme, src/scratch_forwarding.h, and the loop
    # filling e, then unread, is dropped: src/unread_stores.h.)
    n, d = x.shape
    s = 0.0
    for i in range(n):
        for j in range(d):
            e[j] = np.exp(x[i, j])
        for j in range(d):
            s += e[j] * x[i, j]
    return s


def test_short_loops_calling_exp_vectorise_their_remainder():
    # 10 iterations never fill the vector body (4 lanes, 4 interleaved: 16); the
    # pipeline vectorises the remainder of loops in modules that call exp, log, sin,
    # cos or pow (src/jit.cpp), so exp runs there as libmvec's 4-lane function.
    x = np.random.default_rng(3).uniform(-1.0, 1.0, (3, 10))
    e = np.empty(10)
    expected = np.exp(x) * (1.0 + x)
    np.testing.assert_allclose(ez.grad(exp_rows)(x, e), expected, rtol=1e-13, atol=1e-13)
    df = ez.autodiff(exp_rows, ez.Reverse, ez.Duplicated, ez.Duplicated, ez.ActiveOnly)
    ir = df.for_arguments((x, np.zeros_like(x), e, np.zeros(10), 1.0)).inspect_llvm(optimized=True)
    assert "\nvec.epilog.vector.body:" in ir, ir
    epilogue = ir[ir.index("\nvec.epilog.vector.body:") :]
    assert "_ZGVdN4v_exp" in epilogue[: epilogue.index("\n\n")], ir
