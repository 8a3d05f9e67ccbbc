"""What a prange body knows of the signs of its launch's arguments
(``assume_signs_of_calls``, src/index_signs.h; ``assume_body_signs``,
frontends/_numba_parfor_ir.py).

A prange body gets its launch's arguments through int64 slots, so the sizes its
caller knows (GMM's ``d`` from ``x.shape``) reach it as numbers of unknown sign, and
Numba's wraparound of every index built on them stayed in the body and in Enzyme's
reverse of it. On hand-written IR: which parameters the body comes to assume (every
call proven, a stand-in that passes on the parameter that received the argument) and
which it must not (an argument of unknown sign, a stand-in that computes it or passes
on another parameter or a shadow, a launch whose callers are unknown). On Numba code:
a launch argument that is negative on purpose keeps its wraparound (gradients against
analytic ones, on two threads), and GMM's threaded derivative keeps no more sign tests
than its serial twin.
"""

from __future__ import annotations

import re

import numba
import numpy as np
import pytest

import enzyme_py as ez
from benchmarks import kernels
from enzyme_py._pipeline import FOLD_INDEX_SIGNS
from enzyme_py.frontends.ir import parse_module

pytestmark = pytest.mark.needs_enzyme

# @body stands for a prange body given @launch's arguments: Numba's wraparound of
# each. The caller asserts n >= 0 (as Numba's wrapper does of a shape), not m.
LAUNCH_IR = r"""
declare void @llvm.assume(i1)

define i64 @body(i64 %a, i64 %b) {
entry:
  %a.negative = icmp slt i64 %a, 0
  %a.wrap = select i1 %a.negative, i64 1000, i64 0
  %a.index = add i64 %a, %a.wrap
  %b.negative = icmp slt i64 %b, 0
  %b.wrap = select i1 %b.negative, i64 1000, i64 0
  %b.index = add i64 %b, %b.wrap
  %r = add i64 %a.index, %b.index
  ret i64 %r
}

define void @launch(i64 %a, i64 %b) noinline {
entry:
  ret void
}

define void @caller(i64 %n, i64 %m) {
entry:
  %sign = icmp sge i64 %n, 0
  call void @llvm.assume(i1 %sign)
  %twice = mul nsw i64 %n, 2
  call void @launch(i64 %twice, i64 %m)
  ret void
}

EXTRA
"""

# A rule run in place of a call of @launch, with that call's arguments.
STAND_IN = r"""
define void @rule(i64 %p, i64 %q) {
entry:
  %p.less = add i64 %p, -1
  call void @launch(i64 ARG, i64 %q)
  ret void
}
"""

# The same rule given each argument followed by its shadow, as Enzyme calls a rule.
STAND_IN_SHADOWED = r"""
define void @rule(i64 %p, i64 %dp, i64 %q, i64 %dq) {
entry:
  call void @launch(i64 ARG, i64 %q)
  ret void
}
"""

# @launch's address escapes: it may be called from anywhere, with anything.
ESCAPED = r"""
@keep = global void (i64, i64)* @launch
"""


def assumed_and_folded(extra: str, stand_ins: list[str]) -> tuple[int, str]:
    """How many assumes @body gets, and @body once the sign tests are folded."""
    module = parse_module(LAUNCH_IR.replace("EXTRA", extra))
    added = module.native.assume_signs_of_calls("launch", "body", [(0, 0), (1, 1)], stand_ins)
    module.native.optimize(f"function({FOLD_INDEX_SIGNS})")
    ir = module.native.ir()
    return added, ir[ir.index("define i64 @body") : ir.index("define void @launch")]


def test_a_parameter_every_call_proves_non_negative_is_assumed_and_its_test_folds():
    added, body = assumed_and_folded("", [])
    assert added == 1
    assert "%a.negative = icmp" not in body  # 2 * n, n asserted: folded
    assert "%b.negative = icmp slt i64 %b, 0" in body  # m unknown: kept
    # The assume's own test stays: later passes (and Enzyme) still read the fact.
    assert re.search(r"icmp s(?:ge i64 %a, 0|gt i64 %a, -1)", body), body


@pytest.mark.parametrize(
    ("arg", "listed", "expected"),
    [
        ("%p", True, 1),  # passes on what the call it stands for passed
        ("%p", False, 0),  # an ordinary caller: %p is of unknown sign
        ("%p.less", True, 0),  # computes the argument: its sign is unknown
        ("%q", True, 0),  # passes on what the call passed as another argument (m)
    ],
    ids=["stand-in passing on", "not a stand-in", "stand-in computing", "stand-in swapping"],
)
def test_a_stand_in_counts_only_where_it_passes_its_own_parameter_on(arg, listed, expected):
    added, body = assumed_and_folded(STAND_IN.replace("ARG", arg), ["rule"] if listed else [])
    assert added == expected
    assert ("%a.negative = icmp" in body) is (expected == 0)


@pytest.mark.parametrize(("arg", "expected"), [("%p", 1), ("%dp", 0), ("%dq", 0)])
def test_a_stand_in_given_shadows_counts_the_argument_not_its_shadow(arg, expected):
    added, body = assumed_and_folded(STAND_IN_SHADOWED.replace("ARG", arg), ["rule"])
    assert added == expected
    assert ("%a.negative = icmp" in body) is (expected == 0)


def test_a_launch_whose_address_escapes_gives_its_body_nothing():
    added, body = assumed_and_folded(ESCAPED, [])
    assert added == 0
    assert "%a.negative = icmp slt i64 %a, 0" in body


@numba.njit(parallel=True, cache=False)
def shifted(x, s):
    # x[i + s]: with s = -1, x[-1] (the last entry) at i = 0; with s = -n, x[i] again.
    n = x.shape[0]
    total = 0.0
    for i in numba.prange(n):
        t = 0.0
        for _ in range(2):
            t += x[i + s] * x[i]
        total += t
    return total


def shifted_gradient(x: np.ndarray, s: int) -> np.ndarray:
    # total = 2 * sum_i x[(i + s) % n] * x[i]
    return 2.0 * (np.roll(x, -s) + np.roll(x, s))


@pytest.mark.parametrize("s", [-1, -3, "-n", 0])
def test_a_launch_argument_negative_on_purpose_keeps_its_wraparound(s):
    x = np.random.default_rng(5).uniform(-1.0, 1.0, 37)
    shift = -x.shape[0] if s == "-n" else int(s)
    df = ez.autodiff(shifted, ez.Reverse, ez.Duplicated, ez.Const, ez.Active, threads=2)
    dx = np.zeros_like(x)
    (value,) = df(x, dx, shift, 1.0)
    assert value == pytest.approx(shifted.py_func(x, shift), rel=1e-13)
    np.testing.assert_allclose(dx, shifted_gradient(x, shift), rtol=1e-13, atol=1e-14)


def sign_tests(ir: str) -> int:
    """Sign tests of integers in ``ir`` but those an assume states."""
    tests = re.findall(r"(%[\w.\"']+) = icmp (?:slt i64 %[\w.\"']+, 0|sgt i64 %[\w.\"']+, -1)", ir)
    assumed = set(re.findall(r"@llvm\.assume\(i1 (%[\w.\"']+)\)", ir))
    return len([t for t in tests if t not in assumed])


def test_gmm_on_threads_keeps_no_more_sign_tests_than_its_serial_twin():
    args = list(kernels.gmm_inputs(3, 4, 50))
    acts = [ez.Duplicated] * 3 + [ez.Const] * 3
    flat = [v for a in args[:3] for v in (a, np.zeros_like(a))] + args[3:] + [1.0]
    counts, gradients = {}, {}
    for threads in (1, 2):
        df = ez.autodiff(
            kernels.gmm_objective_prange, ez.Reverse, *acts, ez.ActiveOnly, threads=threads
        )
        counts[threads] = sign_tests(df.for_arguments(tuple(flat)).inspect_llvm(optimized=True))
        shadows = [np.zeros_like(a) for a in args[:3]]
        df(*[v for a, d in zip(args[:3], shadows, strict=True) for v in (a, d)], *args[3:], 1.0)
        gradients[threads] = shadows
    # Before the body assumed its launch's sizes: 18 on two threads, 3 on one.
    assert counts[2] <= counts[1], counts
    for one, two in zip(gradients[1], gradients[2], strict=True):
        np.testing.assert_allclose(two, one, rtol=1e-12, atol=1e-12)
