"""A prange body with a loop of its own has its reverse derivative run a block of
indices at a time (``_numba_parfor_ir``: its tape is a block's, not a chunk's), where
the indices are independent and its reductions are sums nothing else reads
(``reductions_only_accumulated``, src/parfor_reductions.h). Elsewhere (a running sum,
a product or a maximum, a light body) the reverse runs over the whole chunk as
before. Gradients against central differences either way."""

from __future__ import annotations

import numba
import numpy as np
import pytest

import enzyme_py as ez
from benchmarks.kernels import rosenbrock_prange

from reference import fd_gradient

pytestmark = pytest.mark.needs_enzyme


@numba.njit(parallel=True)
def row_norms(a):
    s = 0.0
    for i in numba.prange(a.shape[0]):
        r = 0.0
        for j in range(a.shape[1]):
            r += a[i, j] * a[i, j]
        s += np.sqrt(r + 1.0)
    return s


@numba.njit(parallel=True)
def counted_rows(a):
    # An integer count beside the sum: its reduction array is written, and is a sum too.
    s = 0.0
    n = 0
    for i in numba.prange(a.shape[0]):
        r = 0.0
        for j in range(a.shape[1]):
            r += a[i, j]
        if r > 0.0:
            n += 1
            s += r * r
    return s * n


@numba.njit(parallel=True)
def running_rows(a, out):
    # s is read in the loop (out[i] = s): each index's value depends on the indices
    # before it in its chunk.
    s = 0.0
    for i in numba.prange(a.shape[0]):
        r = 0.0
        for j in range(a.shape[1]):
            r += a[i, j] * a[i, j]
        s += r
        out[i] = s
    return np.sum(out * out)


@numba.njit(parallel=True)
def row_product(a):
    p = 1.0
    for i in numba.prange(a.shape[0]):
        r = 0.0
        for j in range(a.shape[1]):
            r += a[i, j]
        p *= 1.0 + 0.01 * r
    return p


@numba.njit(parallel=True)
def row_max(a):
    m = -np.inf
    for i in numba.prange(a.shape[0]):
        r = 0.0
        for j in range(a.shape[1]):
            r += a[i, j] * (j + 1.0)
        m = max(m, r)
    return m


def _reverse_text(f, *args):
    """The generated IR of f's launches (before Enzyme), on 2 threads."""
    from enzyme_py.frontends import _numba_parfor

    f(*args)
    signature = tuple(numba.typeof(a) for a in args)
    compiled, launches = _numba_parfor.parfor_compile(f, signature)
    text, _ = _numba_parfor.threaded_ir(compiled.ir, launches, threads=2)
    start = text.index("define internal i32 @__enzyme_py_parfor_0.reverse(")
    return text[start : text.index("\n}\n", start)]


def test_only_independent_heavy_bodies_with_plain_sums_run_in_blocks():
    a = np.ones((6, 3))
    in_blocks = "%i = phi i64 [ %first, %entry ], [ %i.next, %next ]"
    assert in_blocks in _reverse_text(row_norms, a)
    assert in_blocks in _reverse_text(counted_rows, a)
    assert in_blocks not in _reverse_text(running_rows, a, np.zeros(6))
    assert in_blocks not in _reverse_text(row_product, a)
    assert in_blocks not in _reverse_text(row_max, a)
    assert in_blocks not in _reverse_text(rosenbrock_prange, np.ones(6))  # light


def _grad(f, args, diff, threads):
    acts = [ez.Duplicated if i in diff else ez.Const for i in range(len(args))]
    df = ez.autodiff(f, ez.Reverse, *acts, ez.ActiveOnly, threads=threads)
    flat, shadows = [], []
    for i, arg in enumerate(args):
        flat.append(arg)
        if i in diff:
            shadows.append(np.zeros_like(arg))
            flat.append(shadows[-1])
    df(*flat, 1.0)
    return shadows


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_block_reverse_of_a_sum_matches_the_analytic_gradient(threads):
    a = np.random.default_rng(0).normal(size=(301, 7))
    (got,) = _grad(row_norms, [a], (0,), threads)
    want = a / np.sqrt(np.sum(a * a, axis=1, keepdims=True) + 1.0)  # analytic
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    small = a[:20]
    (got,) = _grad(row_norms, [small], (0,), threads)
    fd = fd_gradient(lambda v: row_norms(v.reshape(small.shape)), small.ravel())
    np.testing.assert_allclose(got, fd.reshape(small.shape), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("threads", [2, 4])
def test_block_reverse_beside_an_integer_count(threads):
    a = np.random.default_rng(4).normal(size=(40, 3))
    (got,) = _grad(counted_rows, [a], (0,), threads)
    want = fd_gradient(lambda v: counted_rows(v.reshape(a.shape)), a.ravel()).reshape(a.shape)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("threads", [2, 4])
def test_a_running_sum_keeps_the_chunk_reverse(threads):
    """out[i] holds the sum of the rows before it in its chunk (what Numba's prange
    computes too): the gradient agrees with central differences of the derivative's
    own value (the same chunks); a block-wise reverse would see each block alone."""
    a = np.random.default_rng(1).normal(size=(40, 3))
    # out carries the derivative (Duplicated; a Const out would be taken for constant).
    df = ez.autodiff(
        running_rows, ez.Reverse, ez.Duplicated, ez.Duplicated, ez.Active, threads=threads
    )

    def value(v):
        (result,) = df(v.reshape(a.shape), np.zeros(a.shape), np.zeros(40), np.zeros(40), 1.0)
        return result

    got = np.zeros_like(a)
    df(a, got, np.zeros(40), np.zeros(40), 1.0)
    want = fd_gradient(value, a.ravel()).reshape(a.shape)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("f", [row_product, row_max])
def test_products_and_maxima_keep_the_chunk_reverse(f, threads):
    a = np.random.default_rng(2).normal(size=(50, 4))
    (got,) = _grad(f, [a], (0,), threads)
    want = fd_gradient(lambda v: f(v.reshape(a.shape)), a.ravel()).reshape(a.shape)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)


def test_the_tape_is_a_blocks_not_the_chunks():
    """The calling thread runs the first chunk (threads=1 takes the serial twin): its
    tape at most is what one block of rows needs, however many rows (a chunk's reverse
    kept a value per row: 8,320 and 80,320 bytes)."""
    from enzyme_py import _state

    peaks = []
    for rows in (2_000, 20_000):
        a = np.random.default_rng(3).normal(size=(rows, 16))
        _grad(row_norms, [a], (0,), 2)
        peaks.append(_state.native.tape_bytes()[2])
    assert peaks[0] == peaks[1] <= 4096, peaks


# Reduction arrays as Numba's outlined bodies use them: loaded once, updated in the
# loop, stored back. Each function's first parameter is the reduction array.
_SUM = """
define void @sum(double* %red, double* %x, i64 %n) {
entry:
  %s0 = load double, double* %red
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i.next, %loop ]
  %s = phi double [ %s0, %entry ], [ %s.next, %loop ]
  %p = getelementptr double, double* %x, i64 %i
  %v = load double, double* %p
  %s.next = {update}
  {extra}
  %i.next = add i64 %i, 1
  %more = icmp slt i64 %i.next, %n
  br i1 %more, label %loop, label %exit
exit:
  store double {final}, double* %red
  ret void
}
"""


@pytest.mark.parametrize(
    "update,extra,final,expected",
    [
        ("fadd double %s, %v", "", "%s.next", True),
        ("fadd double %v, %s", "", "%s.next", True),
        ("fsub double %s, %v", "", "%s.next", True),
        ("fsub double %v, %s", "", "%s.next", False),  # v - s: not a sum
        ("fmul double %s, %v", "", "%s.next", False),  # a product
        ("fadd double %s, %s", "", "%s.next", False),  # doubled
        ("fadd double %s, %v", "store double %s.next, double* %p", "%s.next", False),
        ("fadd double %s, %v", "", "0.0", False),  # something else stored back
    ],
)
def test_reductions_only_accumulated_on_ir(update, extra, final, expected):
    from enzyme_py import _state

    ir = _SUM.replace("{update}", update).replace("{extra}", extra).replace("{final}", final)
    assert _state.native.reductions_only_accumulated(ir, "sum", [0]) is expected
