"""Enzyme's cache loads scoped apart from the stores that cannot write the tape
(src/tape_scopes.h), in combined reverse derivatives, and the Numba function's body
inlined into enzyme_py's wrapper for them (``IRFunction.combined_form``).

Each gradient is checked against float64 central differences (or an analytic one):
stencils whose temporaries swap every step (their shadows cached per step: the
loads the pass lets LICM hoist, after which the scatter pass takes the reverse loop,
outlined as a ``.fused`` function), caches of pointers to other caches (a triangular
loop's, whose count varies), a recursive function (left called), and split mode
(the body left called, its temporaries' shadows kept between the halves).
"""

from __future__ import annotations

import math

import numba
import numpy as np
import pytest

import enzyme_py as ez
from tests.reference import fd_gradient, fd_partial

pytestmark = pytest.mark.needs_enzyme


@numba.njit
def swapped_stencil(u0, steps):
    n = u0.shape[0]
    a = u0.copy()
    b = np.empty_like(u0)
    for _ in range(steps):
        b[0] = a[0]
        b[n - 1] = a[n - 1]
        for i in range(1, n - 1):
            b[i] = a[i] + 0.25 * (a[i - 1] - 2.0 * a[i] + a[i + 1])
        a, b = b, a
    s = 0.0
    for i in range(n):
        s += (i + 1.0) * a[i] * a[i]
    return s


def test_swapped_temporaries_reverse_loop_is_fused():
    u0 = np.random.default_rng(0).uniform(0.0, 1.0, 300)
    df = ez.autodiff(swapped_stencil, ez.Reverse, ez.Duplicated, ez.Const, ez.ActiveOnly)
    du = np.zeros_like(u0)
    df(u0, du, 25, 1.0)
    want = fd_gradient(lambda v: swapped_stencil(v, 25), u0)
    np.testing.assert_allclose(du, want, rtol=1e-6, atol=1e-6 * np.abs(want).max())
    ir = df.inspect_llvm(optimized=True)
    # The shadows' pointers hoisted out of the reverse loop, the scatter pass fused it
    # into one gather, outlined for the thread pool.
    assert ".fused(" in ir


@numba.njit
def triangular_steps(x, lower, steps):
    # Per step a temporary and, per row, a dot product whose length varies: Enzyme
    # keeps caches of pointers to caches.
    d = x.shape[0]
    v = x.copy()
    w = np.empty_like(x)
    total = 0.0
    for _ in range(steps):
        for r in range(d):
            t = 0.0
            for j in range(r + 1):
                t += lower[r, j] * math.sin(v[j])
            w[r] = t
            total += t * t
        v, w = w, v
    return total


def test_caches_of_caches_keep_their_gradient():
    rng = np.random.default_rng(4)
    x = rng.uniform(-1.0, 1.0, 7)
    lower = rng.uniform(-0.5, 0.5, (7, 7))
    args = (x, lower, 4)
    gx, gl = ez.grad(triangular_steps, argnums=(0, 1))(*args)
    np.testing.assert_allclose(gx, fd_partial(triangular_steps, args, 0), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gl, fd_partial(triangular_steps, args, 1), rtol=1e-6, atol=1e-8)


@numba.njit
def discounted(x, n):
    if n == 0:
        return 0.0
    return x[n - 1] ** 2 * x[0] + 0.5 * discounted(x, n - 1)


@numba.njit
def discounted_sum(x):
    return discounted(x, x.shape[0])


def test_recursion_is_left_called():
    # Inlined into the wrapper with the recursive call left, Enzyme v0.0.289 added the
    # recursion's adjoints twice.
    x = np.linspace(0.3, 1.2, 6)
    want = fd_gradient(discounted_sum.py_func, x)
    np.testing.assert_allclose(ez.grad(discounted_sum)(x), want, rtol=1e-7)
    dx = np.zeros_like(x)
    ez.autodiff(discounted_sum, ez.Reverse, ez.Duplicated, ez.Active)(x, dx, 1.0)
    np.testing.assert_allclose(dx, want, rtol=1e-7)


@numba.njit
def with_temporary(x):
    t = np.sin(x) * x
    s = 0.0
    for i in range(t.shape[0]):
        s += t[i] * t[i]
    return s


def test_split_mode_and_combined_agree():
    # Split mode takes the body as called (inlined, its temporary's shadow was lost
    # between the halves: zeros); the combined derivative takes it inlined.
    x = np.linspace(0.1, 1.0, 7)
    want = 2.0 * np.sin(x) * x * (np.cos(x) * x + np.sin(x))
    split = ez.autodiff(with_temporary, ez.ReverseSplit, ez.Duplicated, ez.Active)
    dx = np.zeros_like(x)
    _, tape = split.forward(x, dx)
    split.reverse(tape, x, dx, 1.0)
    np.testing.assert_allclose(dx, want, rtol=1e-12)
    np.testing.assert_allclose(ez.grad(with_temporary)(x), want, rtol=1e-12)
    _, pull = ez.vjp(with_temporary, x)
    np.testing.assert_allclose(pull(1.0)[0], want, rtol=1e-12)


STRIDED_PROGRAM = """
import numba
import numpy as np
import enzyme_py as ez

@numba.njit
def norm_of_cumsum(x):
    return np.linalg.norm(np.cumsum(x))

base = np.linspace(-1.0, 1.0, 6)
x = np.stack([base, base + 1.0], axis=1)[:, 0]  # a strided view
g = ez.grad(norm_of_cumsum)(x)
h = 1e-6
fd = np.array([
    (norm_of_cumsum(x + h * e) - norm_of_cumsum(x - h * e)) / (2 * h) for e in np.eye(6)
])
print(float(np.max(np.abs(g - fd))))
"""


def test_the_inlined_reverse_of_a_strided_cumsum_ends():
    # Inlined, the reverse derivative of this function of a strided view crashed the
    # interpreter: Enzyme's loop limit `add nuw n, -1`, folded to -1 by LLVM (the flag
    # is dropped after Enzyme since; the called form crashed the same way on
    # np.cumsum(x) - x.copy(), tests/test_numba_layouts.py).
    from conftest import run_python

    proc = run_python(STRIDED_PROGRAM, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert float(proc.stdout.strip().splitlines()[-1]) < 1e-6
