"""Numba's negative-index tests, folded where the index cannot be negative
(src/index_signs.h), and kept where it can.

On hand-written IR, the pass alone: which sign tests it folds (a loop counter that
runs from S to E - 1 behind a guard S < E, a cycle of nsw adds from a non-negative
start) and which it must keep (no guard, a counter stepping by 2, adds that may wrap,
a start not known non-negative), each run and compared with the same IR unfolded.
On Numba code, gradients against analytic ones and central differences: loops whose
indices are negative on purpose (Python's a[-1]) and GMM's triangular loop, whose
tests fold.
"""

from __future__ import annotations

import warnings

import numba
import numpy as np
import pytest

import enzyme_py as ez
from benchmarks import kernels
from enzyme_py._pipeline import FOLD_INDEX_SIGNS
from enzyme_py.frontends.ir import parse_module

pytestmark = pytest.mark.needs_enzyme

# sum over r = s .. e - 1 of (r < 0 ? r + 1000 : r): Numba's wraparound of r in a
# range(s, e) loop as LLVM leaves it (a guard, a preheader, an exit where r + 1 == e).
# GUARD, STEP and the assumes are replaced per case.
COUNTER_IR = r"""
declare void @llvm.assume(i1)

define i64 @count(i64 %s, i64 %e) {
entry:
  %s.sign = icmp sge i64 %s, 0
  ASSUME_S
  %e.sign = icmp sge i64 %e, 0
  call void @llvm.assume(i1 %e.sign)
  %d = sub i64 %e, %s
  %skip = icmp slt i64 %d, 1
  %skip.unsigned = icmp uge i64 %s, %e
  br i1 GUARD, label %done, label %pre
pre:
  br label %loop
loop:
  %r = phi i64 [ %s, %pre ], [ %next, %loop ]
  %sum = phi i64 [ 0, %pre ], [ %sum.next, %loop ]
  %negative = icmp slt i64 %r, 0
  %wrap = select i1 %negative, i64 1000, i64 0
  %index = add i64 %r, %wrap
  %sum.next = add i64 %sum, %index
  %next = add i64 %r, STEP
  %stop = icmp eq i64 %next, %e
  br i1 %stop, label %done, label %loop
done:
  %total = phi i64 [ 0, %entry ], [ %sum.next, %loop ]
  ret i64 %total
}
"""


def counter_ir(guard: str = "%skip", step: int = 1, assume_s: bool = True) -> str:
    return (
        COUNTER_IR.replace("GUARD", guard)
        .replace("STEP", str(step))
        .replace("ASSUME_S", "call void @llvm.assume(i1 %s.sign)" if assume_s else "")
    )


# idx starts at n (>= 0) and goes up by 1 (nsw, or not) per iteration of two nested
# loops, as GMM's idx over its triangular loop; its wraparound as Numba's.
NESTED_IR = r"""
declare void @llvm.assume(i1)

define i64 @nested(i64 %n, i64 %start) {
entry:
  %n.sign = icmp sge i64 %n, 0
  call void @llvm.assume(i1 %n.sign)
  %empty = icmp slt i64 %n, 1
  br i1 %empty, label %done, label %outer
outer:
  %j = phi i64 [ 0, %entry ], [ %j.next, %outer.end ]
  %idx.outer = phi i64 [ START, %entry ], [ %idx.next, %outer.end ]
  %sum.outer = phi i64 [ 0, %entry ], [ %sum.next, %outer.end ]
  br label %inner
inner:
  %k = phi i64 [ 0, %outer ], [ %k.next, %inner ]
  %idx = phi i64 [ %idx.outer, %outer ], [ %idx.next, %inner ]
  %sum = phi i64 [ %sum.outer, %outer ], [ %sum.next, %inner ]
  %negative = icmp slt i64 %idx, 0
  %wrap = select i1 %negative, i64 1000, i64 0
  %index = add i64 %idx, %wrap
  %sum.next = add i64 %sum, %index
  %idx.next = add FLAGS i64 %idx, 1
  %k.next = add nuw nsw i64 %k, 1
  %inner.stop = icmp eq i64 %k.next, 3
  br i1 %inner.stop, label %outer.end, label %inner
outer.end:
  %j.next = add nuw nsw i64 %j, 1
  %outer.stop = icmp eq i64 %j.next, %n
  br i1 %outer.stop, label %done, label %outer
done:
  %total = phi i64 [ 0, %entry ], [ %sum.next, %outer.end ]
  ret i64 %total
}
"""


def folded_alone(text: str) -> str:
    module = parse_module(text)
    module.native.optimize(f"function({FOLD_INDEX_SIGNS})")
    return module.native.ir()


def sign_tests(ir: str) -> int:
    return ir.count("%negative = icmp slt")


def run_both(text: str, name: str, *args: int) -> tuple[int, int]:
    """The function's result as written, and after the pass alone."""
    as_written = ez.llvm_ir(text, name)
    folded = ez.llvm_ir(folded_alone(text), name)
    return int(as_written(*args)), int(folded(*args))


def test_a_guarded_counter_from_a_non_negative_start_is_folded():
    assert sign_tests(folded_alone(counter_ir())) == 0
    for s, e in [(0, 1), (0, 7), (3, 10), (5, 6), (9, 4), (4, 4)]:
        written, folded = run_both(counter_ir(), "count", s, e)
        assert written == folded == sum(range(s, e)), (s, e)


def test_an_unsigned_guard_between_non_negative_bounds_is_folded():
    # instcombine makes the guard unsigned once assumes say both bounds are >= 0.
    text = counter_ir(guard="%skip.unsigned")
    assert sign_tests(folded_alone(text)) == 0
    for s, e in [(0, 1), (3, 10), (9, 4), (4, 4)]:
        written, folded = run_both(text, "count", s, e)
        assert written == folded == sum(range(s, e)), (s, e)


@pytest.mark.parametrize(
    "case",
    [
        {"guard": "false"},  # entered for any s, e: r may wrap round to negative values
        {"step": 2},  # steps over e: may never stop where r + 1 == e
        {"assume_s": False},  # s may be negative
        {"guard": "%skip.unsigned", "assume_s": False},  # s <u e says nothing of s's sign
    ],
    ids=["no guard", "step 2", "start unknown", "unsigned guard, start unknown"],
)
def test_a_counter_without_every_condition_keeps_its_test(case):
    text = counter_ir(**case)
    assert sign_tests(folded_alone(text)) == 1
    if case.get("assume_s") is False:
        # s = -3: the test is what makes the sum right (-3 + 1000, -2 + 1000, ...);
        # behind the unsigned guard, -3 is above 2 and the loop does not run.
        written, folded = run_both(text, "count", -3, 2)
        wrapped = sum(r + 1000 if r < 0 else r for r in range(-3, 2))
        assert written == folded == (0 if "guard" in case else wrapped)


def test_a_cycle_of_nsw_adds_from_a_non_negative_start_is_folded():
    text = NESTED_IR.replace("START", "%n").replace("FLAGS", "nsw")
    assert sign_tests(folded_alone(text)) == 0
    for n in (1, 2, 5):
        written, folded = run_both(text, "nested", n, 0)
        assert written == folded == sum(range(n, n + 3 * n))


@pytest.mark.parametrize(
    ("start", "flags"), [("%n", ""), ("%n", "nuw"), ("%start", "nsw"), ("-2", "nsw")]
)
def test_a_cycle_that_may_go_negative_keeps_its_test(start, flags):
    # Adds without nsw may wrap; a start not known non-negative (an unasserted
    # argument, a negative constant) may be negative.
    text = NESTED_IR.replace("START", start).replace("FLAGS", flags)
    assert sign_tests(folded_alone(text)) == 1
    if start == "-2":
        written, folded = run_both(text, "nested", 2, 0)
        expected = sum(i + 1000 if i < 0 else i for i in range(-2, -2 + 6))
        assert written == folded == expected


@numba.njit(cache=False)
def periodic(x):
    # x[i - 1] is x[-1], the last entry, at i = 0.
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i - 1] * x[i] * x[i]
    return s


def periodic_gradient(x: np.ndarray) -> np.ndarray:
    before = np.roll(x, 1)  # x[i - 1]
    after = np.roll(x, -1)  # x[i + 1]
    return 2.0 * before * x + after * after


@numba.njit(cache=False)
def from_the_end(x, k):
    # Indices counted down from -k: all negative, Python's x[-k] .. x[-1].
    s = 0.0
    j = -k
    for i in range(k):
        s += (i + 1.0) * x[j] * x[j]
        j += 1
    return s


@numba.njit(cache=False)
def triangle(a, x):
    # GMM's triangular loop: r from j + 1 to d, idx from d up; its tests fold.
    d = x.shape[0]
    out = np.zeros(d)
    idx = d
    for j in range(d):
        for r in range(j + 1, d):
            out[r] += a[idx] * x[j]
            idx += 1
    s = 0.0
    for r in range(d):
        s += out[r] * out[r]
    return s


def central_differences(f, args: list, k: int, h: float = 1e-6) -> np.ndarray:
    x = args[k]
    g = np.zeros_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = h
        up, down = list(args), list(args)
        up[k], down[k] = x + e, x - e
        g[i] = (f(*up) - f(*down)) / (2 * h)
    return g


@pytest.mark.parametrize("n", [1, 2, 5, 33])
def test_a_periodic_index_keeps_its_wraparound(n):
    x = np.random.default_rng(n).uniform(-1.0, 1.0, n)
    np.testing.assert_allclose(ez.grad(periodic)(x), periodic_gradient(x), rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("k", [1, 3, 8])
def test_indices_counted_from_the_end_keep_their_wraparound(k):
    x = np.random.default_rng(k).uniform(-1.0, 1.0, 10)
    expected = np.zeros(10)
    for i in range(k):
        expected[10 - k + i] = 2.0 * (i + 1.0) * x[10 - k + i]
    np.testing.assert_allclose(ez.grad(from_the_end)(x, k), expected, rtol=1e-13, atol=0)


@pytest.mark.parametrize("d", [1, 2, 4, 10])
def test_the_triangular_loop_gradient_matches_central_differences(d):
    rng = np.random.default_rng(d)
    a, x = rng.uniform(-1.0, 1.0, d + d * (d - 1) // 2), rng.uniform(-1.0, 1.0, d)
    da, dx = ez.grad(triangle, argnums=(0, 1))(a, x)
    np.testing.assert_allclose(da, central_differences(triangle, [a, x], 0), rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(dx, central_differences(triangle, [a, x], 1), rtol=1e-7, atol=1e-9)


def test_the_gmm_gradient_is_unchanged_by_the_fold():
    # The benchmark's GMM (its triangular loop's tests fold) against its prange twin,
    # on two threads (a refusal would warn: Numba's parallel IR declares llvm.assume
    # too, which the wrapper's assumes must not declare again), and central differences
    # on a few entries.
    args = list(kernels.gmm_inputs(3, 4, 50))
    grads = ez.grad(kernels.gmm_objective, argnums=(0, 1, 2))(*args)
    acts = [ez.Duplicated] * 3 + [ez.Const] * 3
    shadows = [np.zeros_like(a) for a in args[:3]]
    with warnings.catch_warnings():
        warnings.simplefilter("error", ez.PerformanceWarning)
        twin = ez.autodiff(
            kernels.gmm_objective_prange, ez.Reverse, *acts, ez.ActiveOnly, threads=2
        )
        twin(*[v for a, s in zip(args[:3], shadows, strict=True) for v in (a, s)], *args[3:], 1.0)
    for g, t in zip(grads, shadows, strict=True):
        np.testing.assert_allclose(g, t, rtol=1e-12, atol=1e-12)
    icf = args[2]
    for c, j in [(0, 0), (1, 3), (3, 5)]:
        e = np.zeros_like(icf)
        e[c, j] = 1e-6
        up, down = list(args), list(args)
        up[2], down[2] = icf + e, icf - e
        numeric = (kernels.gmm_objective(*up) - kernels.gmm_objective(*down)) / 2e-6
        assert grads[2][c, j] == pytest.approx(numeric, rel=1e-6, abs=1e-6)


# A caller asserting n >= 0 (as Numba's wrapper does of every shape) before or after
# it calls a function defined beside it: only a call after the assume lets the callee
# assume it too (before, the callee may run with any n).
CALLER_IR = r"""
declare void @llvm.assume(i1)

define i64 @wrapped(i64 %n) {
entry:
  %negative = icmp slt i64 %n, 0
  %wrap = select i1 %negative, i64 1000, i64 0
  %index = add i64 %n, %wrap
  ret i64 %index
}

define i64 @wrapper(i64 %n) {
entry:
  %sign = icmp sge i64 %n, 0
  BEFORE
  call void @llvm.assume(i1 %sign)
  AFTER
  ret i64 %r
}
"""


@pytest.mark.parametrize("after", [True, False])
def test_a_callee_assumes_what_its_caller_asserted_before_the_call(after):
    call = "%r = call i64 @wrapped(i64 %n)"
    text = CALLER_IR.replace("AFTER" if after else "BEFORE", call)
    text = text.replace("BEFORE", "").replace("AFTER", "")
    module = parse_module(text)
    module.native.simplify_for_enzyme()
    ir = module.native.ir()
    wrapped = ir[ir.index("define i64 @wrapped") : ir.index("define i64 @wrapper")]
    assert ("icmp slt" in wrapped) is not after, wrapped
    assert int(ez.llvm_ir(ir, "wrapper")(7)) == 7


# An argument's test before a call that may not return, and its assume after it: a run
# that leaves at the call never meets the assume, so the test stays; without the call,
# every run meets it and the test folds.
LATE_ASSUME_IR = r"""
declare void @llvm.assume(i1)
declare void @may_not_return()

define i64 @late(i64 %n) {
entry:
  %negative = icmp slt i64 %n, 0
  %wrap = select i1 %negative, i64 1000, i64 0
  %index = add i64 %n, %wrap
  CALL
  %sign = icmp sge i64 %n, 0
  call void @llvm.assume(i1 %sign)
  ret i64 %index
}
"""


@pytest.mark.parametrize("call", [True, False])
def test_an_argument_is_taken_as_asserted_only_where_every_run_meets_the_assume(call):
    text = LATE_ASSUME_IR.replace("CALL", "call void @may_not_return()" if call else "")
    assert sign_tests(folded_alone(text)) == (1 if call else 0)
