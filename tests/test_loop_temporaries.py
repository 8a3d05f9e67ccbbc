"""Numba loops that allocate arrays in every iteration (a user's prange body, or any
loop with temporaries of its own): their derivatives against analytic gradients and
finite differences, Numba's size checks of those arrays inside the loop
(src/invariant_exits.h), and the chunks small temporaries are carved from between
calls (src/arena.cpp)."""

import math

import numba
import numpy as np
import pytest

import enzyme_py as ez

from reference import fd_partial

pytestmark = pytest.mark.needs_enzyme


@numba.njit
def sample_term(xi, a, b, m):
    """(sum_j c_j xi sin(c_j xi))^2, c_j = j + 1, through the temporaries a and b."""
    for j in range(m):
        a[j] = xi * (j + 1.0)
        b[j] = math.sin(a[j])
    t = 0.0
    for j in range(m):
        t += a[j] * b[j]
    return t * t


@numba.njit
def temporaries_per_sample(x, m, k):
    # Two temporaries per iteration (k >= m): the second one's size checks (k < 0,
    # k * 8 overflowing) come after the first one's allocation, inside the loop.
    s = 0.0
    for i in range(x.shape[0]):
        a = np.empty(m)
        b = np.empty(k)
        s += sample_term(x[i], a, b, m)
    return s


def temporaries_per_sample_gradient(x: np.ndarray, m: int) -> np.ndarray:
    """d/dx_i of (sum_j c_j x_i sin(c_j x_i))^2 with c_j = j + 1."""
    c = np.arange(1.0, m + 1.0)
    g = np.empty_like(x)
    for i, xi in enumerate(x):
        t = np.sum(c * xi * np.sin(c * xi))
        dt = np.sum(c * np.sin(c * xi) + c * xi * c * np.cos(c * xi))
        g[i] = 2.0 * t * dt
    return g


def test_gradient_of_a_loop_with_temporaries_matches_analytic_and_fd():
    x = np.linspace(-0.7, 0.9, 7)
    got = ez.grad(temporaries_per_sample)(x, 4, 6)
    np.testing.assert_allclose(got, temporaries_per_sample_gradient(x, 4), rtol=1e-12)
    want = fd_partial(temporaries_per_sample, [x, 4, 6], 0)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)


def test_loop_with_temporaries_has_its_caches_sized_once():
    # The size checks of the second temporary, moved before the loop, leave it one
    # exit: Enzyme counts its iterations and allocates each cache once, where it grew
    # them by realloc (src/invariant_exits.h).
    x = np.linspace(-0.7, 0.9, 7)
    dx = np.zeros_like(x)
    df = ez.autodiff(
        temporaries_per_sample, ez.Reverse, ez.Duplicated, ez.Const, ez.Const, ez.Active
    )
    df(x, dx, 4, 6, 1.0)
    np.testing.assert_allclose(dx, temporaries_per_sample_gradient(x, 4), rtol=1e-12)
    module = df.for_arguments((x, dx, 4, 6, 1.0)).inspect_llvm(optimized=True)
    assert "@__enzyme_py_tape_alloc(" in module
    assert "@__enzyme_py_tape_realloc(" not in module


def test_size_check_moved_before_the_loop_still_raises_where_numba_does():
    x = np.linspace(-0.7, 0.9, 7)
    with pytest.raises(ValueError, match="negative dimensions"):
        temporaries_per_sample(x, 2, -1)
    with pytest.raises(ValueError, match="negative dimensions"):
        ez.grad(temporaries_per_sample)(x, 2, -1)
    # No iteration, no check: the primal returns 0 and the gradient is empty.
    empty = np.zeros(0)
    assert temporaries_per_sample(empty, 2, -1) == 0.0
    assert ez.grad(temporaries_per_sample)(empty, 2, -1).shape == (0,)


@numba.njit
def many_temporaries(x, width):
    # 3 temporaries (and 3 shadows) per iteration, 2000 iterations: several of the
    # arena's 1 MiB chunks in one call.
    s = 0.0
    for i in range(x.shape[0]):
        u = np.empty(width)
        v = np.empty(width)
        w = np.empty(width)
        for j in range(width):
            u[j] = x[i] + j
            v[j] = u[j] * u[j]
            w[j] = v[j] * x[i]
        for j in range(width):
            s += w[j]
    return s


def many_temporaries_gradient(x: np.ndarray, width: int) -> np.ndarray:
    """d/dx_i of sum_j (x_i + j)^2 x_i."""
    j = np.arange(float(width))
    return np.array([np.sum((xi + j) ** 2 + 2.0 * (xi + j) * xi) for xi in x])


def test_temporaries_from_reused_chunks_start_at_zero_every_call():
    # The chunks a call carved its temporaries from serve the next call: the shadows
    # there must be zero again, or the gradients would add up across calls.
    x = np.linspace(-1.0, 1.0, 2000)
    want = many_temporaries_gradient(x, 24)
    grad = ez.grad(many_temporaries)
    for _ in range(3):
        np.testing.assert_allclose(grad(x, 24), want, rtol=1e-12)


def test_large_temporaries_beside_small_ones():
    # Temporaries above the small-block limit (64 KiB: 10,000 doubles here) are
    # allocated one by one, the small ones from chunks, in the same call.
    x = np.linspace(-1.0, 1.0, 5)
    for width in (3, 10_000):
        np.testing.assert_allclose(
            ez.grad(many_temporaries)(x, width), many_temporaries_gradient(x, width), rtol=1e-11
        )


@numba.njit(parallel=True)
def prange_temporaries(x, m, k):
    out = np.zeros(x.shape[0])
    for i in numba.prange(x.shape[0]):
        a = np.empty(m)
        b = np.empty(k)
        out[i] = sample_term(x[i], a, b, m)
    return out.sum()


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_prange_body_with_temporaries_on_threads(threads):
    # Each worker carves its temporaries from chunks of its own, set back after
    # each of its chunks of iterations.
    x = np.linspace(-0.7, 0.9, 301)
    dx = np.zeros_like(x)
    df = ez.autodiff(
        prange_temporaries,
        ez.Reverse,
        ez.Duplicated,
        ez.Const,
        ez.Const,
        ez.Active,
        threads=threads,
    )
    for _ in range(2):
        dx[:] = 0.0
        df(x, dx, 5, 7, 1.0)
        np.testing.assert_allclose(dx, temporaries_per_sample_gradient(x, 5), rtol=1e-12)
