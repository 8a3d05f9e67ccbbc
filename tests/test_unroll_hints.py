"""Loops the loop vectoriser made or visited, loops that make calls, and loops holding
either, are not unrolled again by a run-time count (src/unroll_hints.h): the second
pipeline's loop-unroll still unrolls the loops left scalar (sums LLVM may not reorder),
not the vector bodies, whose copies only made derivatives' modules larger (heat's 60%)
and their first calls slower, nor the loops around them (C++ GMM's reverse on a Zen
host: 50 -> 28 ms), nor loops calling exp (GMM prange's serial code: 120 copies)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import enzyme_py as ez
from benchmarks import kernels
from enzyme_py._pipeline import KEEP_VECTOR_LOOPS_ROLLED, PASSES
from enzyme_py.frontends.ir import parse_module

from reference import fd_gradient

pytestmark = pytest.mark.needs_enzyme

# Two loops summing a[0..n): the first marked as the vectoriser marks its loops.
TWO_LOOPS = """
define double @two_sums(double* %a, i64 %n) {
entry:
  %some = icmp sgt i64 %n, 0
  br i1 %some, label %first, label %done
first:
  %i = phi i64 [ 0, %entry ], [ %i.next, %first ]
  %s = phi double [ 0.0, %entry ], [ %s.next, %first ]
  %p = getelementptr double, double* %a, i64 %i
  %x = load double, double* %p
  %s.next = fadd double %s, %x
  %i.next = add nuw nsw i64 %i, 1
  %first.stop = icmp eq i64 %i.next, %n
  br i1 %first.stop, label %between, label %first, !llvm.loop !0
between:
  br label %second
second:
  %j = phi i64 [ 0, %between ], [ %j.next, %second ]
  %t = phi double [ %s.next, %between ], [ %t.next, %second ]
  %q = getelementptr double, double* %a, i64 %j
  %y = load double, double* %q
  %t.next = fadd double %t, %y
  %j.next = add nuw nsw i64 %j, 1
  %second.stop = icmp eq i64 %j.next, %n
  br i1 %second.stop, label %done, label %second, !llvm.loop !2
done:
  %r = phi double [ 0.0, %entry ], [ %t.next, %second ]
  ret double %r
}
!0 = distinct !{!0, !1}
!1 = !{!"llvm.loop.isvectorized", i32 1}
!2 = distinct !{!2}
"""


# An outer loop over rows holding an inner loop over columns marked as vectorised.
NESTED = """
define double @rows(double* %a, i64 %n, i64 %m) {
entry:
  br label %outer
outer:
  %i = phi i64 [ 0, %entry ], [ %i.next, %outer.end ]
  %s = phi double [ 0.0, %entry ], [ %t.next, %outer.end ]
  %row = mul i64 %i, %m
  br label %inner
inner:
  %j = phi i64 [ 0, %outer ], [ %j.next, %inner ]
  %t = phi double [ %s, %outer ], [ %t.next, %inner ]
  %k = add i64 %row, %j
  %p = getelementptr double, double* %a, i64 %k
  %x = load double, double* %p
  %t.next = fadd double %t, %x
  %j.next = add nuw nsw i64 %j, 1
  %inner.stop = icmp eq i64 %j.next, %m
  br i1 %inner.stop, label %outer.end, label %inner, !llvm.loop !0
outer.end:
  %i.next = add nuw nsw i64 %i, 1
  %outer.stop = icmp eq i64 %i.next, %n
  br i1 %outer.stop, label %done, label %outer, !llvm.loop !2
done:
  ret double %t.next
}
!0 = distinct !{!0, !1}
!1 = !{!"llvm.loop.isvectorized", i32 1}
!2 = distinct !{!2}
"""


# A loop over rows around a scalar loop calling llvm.exp.f64 (libm's exp once
# compiled), then a loop of arithmetic only.
CALLS = """
declare double @llvm.exp.f64(double)

define double @exps(double* %a, i64 %n, i64 %m) {
entry:
  br label %outer
outer:
  %i = phi i64 [ 0, %entry ], [ %i.next, %outer.end ]
  %s = phi double [ 0.0, %entry ], [ %t.next, %outer.end ]
  %row = mul i64 %i, %m
  br label %inner
inner:
  %j = phi i64 [ 0, %outer ], [ %j.next, %inner ]
  %t = phi double [ %s, %outer ], [ %t.next, %inner ]
  %k = add i64 %row, %j
  %p = getelementptr double, double* %a, i64 %k
  %x = load double, double* %p
  %e = call double @llvm.exp.f64(double %x)
  %t.next = fadd double %t, %e
  %j.next = add nuw nsw i64 %j, 1
  %inner.stop = icmp eq i64 %j.next, %m
  br i1 %inner.stop, label %outer.end, label %inner, !llvm.loop !0
outer.end:
  %i.next = add nuw nsw i64 %i, 1
  %outer.stop = icmp eq i64 %i.next, %n
  br i1 %outer.stop, label %plain, label %outer, !llvm.loop !1
plain:
  %l = phi i64 [ 0, %outer.end ], [ %l.next, %plain ]
  %u = phi double [ %t.next, %outer.end ], [ %u.next, %plain ]
  %q = getelementptr double, double* %a, i64 %l
  %y = load double, double* %q
  %u.next = fadd double %u, %y
  %l.next = add nuw nsw i64 %l, 1
  %plain.stop = icmp eq i64 %l.next, %n
  br i1 %plain.stop, label %done, label %plain, !llvm.loop !2
done:
  ret double %u.next
}
!0 = distinct !{!0}
!1 = distinct !{!1}
!2 = distinct !{!2}
"""


def _loop_id_line(ir: str, branch: str) -> str:
    """The metadata line of the loop ID on ``branch``'s ``!llvm.loop``."""
    line = next(line for line in ir.splitlines() if branch in line)
    loop_id = line.split("!llvm.loop ")[1].split()[0]
    return next(line for line in ir.splitlines() if line.startswith(f"{loop_id} ="))


def test_the_pass_marks_only_the_vectorised_loop():
    module = parse_module(TWO_LOOPS)
    module.native.optimize(f"function({KEEP_VECTOR_LOOPS_ROLLED})")
    ir = module.native.ir()
    assert ir.count('!"llvm.loop.unroll.runtime.disable"') == 1, ir
    first = _loop_id_line(ir, "br i1 %first.stop")
    second = _loop_id_line(ir, "br i1 %second.stop")
    # "!0 = distinct !{!0, !1, !2}": itself twice, the vectoriser's mark, the new one.
    assert len(re.findall(r"!\d+", first)) == 4, first
    assert len(re.findall(r"!\d+", second)) == 2, second  # itself only: unchanged


def test_the_pass_marks_the_loop_around_a_vectorised_loop():
    module = parse_module(NESTED)
    module.native.optimize(f"function({KEEP_VECTOR_LOOPS_ROLLED})")
    ir = module.native.ir()
    assert ir.count('!"llvm.loop.unroll.runtime.disable"') == 1, ir  # one node, twice used
    outer = _loop_id_line(ir, "br i1 %outer.stop")
    inner = _loop_id_line(ir, "br i1 %inner.stop")
    assert len(re.findall(r"!\d+", outer)) == 3, outer  # itself twice, the new mark
    assert len(re.findall(r"!\d+", inner)) == 4, inner


def test_the_pass_marks_loops_that_call_and_the_loops_around_them():
    module = parse_module(CALLS)
    module.native.optimize(f"function({KEEP_VECTOR_LOOPS_ROLLED})")
    ir = module.native.ir()
    for branch in ("br i1 %inner.stop", "br i1 %outer.stop"):
        line = _loop_id_line(ir, branch)
        assert len(re.findall(r"!\d+", line)) == 3, line  # itself twice, the new mark
    plain = _loop_id_line(ir, "br i1 %plain.stop")
    assert len(re.findall(r"!\d+", plain)) == 2, plain  # arithmetic only: unchanged
    # loop-unroll after it copies the arithmetic loop only; the sums stay right.
    module.native.optimize("function(loop-unroll<O2>)")
    unrolled = module.native.ir()
    assert "plain.epil" in unrolled or "plain.prol" in unrolled, unrolled
    assert unrolled.count("call double @llvm.exp.f64") == 1, unrolled
    f = ez.llvm_ir(unrolled, "exps")
    a = np.linspace(-1.0, 1.0, 35)
    for n, m in ((1, 1), (3, 5), (5, 7)):
        expected = np.exp(a[: n * m]).sum() + a[:n].sum()
        assert f(a, n, m) == pytest.approx(expected, rel=1e-14)


# What GMM's serial code around its prange loop does (qdiag = exp(icf), summed by row),
# in Numba: its derivative's exp loops stay rolled, the gradient right.
@pytest.fixture(scope="module")
def exp_rows():
    numba = pytest.importorskip("numba")

    @numba.njit(cache=False)
    def exp_rows(icf, w):
        k, d = icf.shape
        total = 0.0
        for c in range(k):
            s = 0.0
            for j in range(d):
                s += w[j] * math.exp(icf[c, j])
            total += s * s
        return total

    return exp_rows


def test_a_derivative_keeps_its_exp_loops_rolled_and_its_gradient_right(exp_rows):
    rng = np.random.default_rng(5)
    icf, w = rng.normal(scale=0.3, size=(25, 10)), rng.normal(size=10)
    df = ez.autodiff(exp_rows, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)
    dicf = np.zeros_like(icf)
    df(icf, dicf, w, 1.0)
    expected = fd_gradient(lambda v: exp_rows(v.reshape(icf.shape), w), icf.ravel())
    np.testing.assert_allclose(dicf.ravel(), expected, rtol=1e-6)
    ir = df.for_arguments((icf, dicf, w, 1.0)).inspect_llvm(optimized=True)
    # A scalar exp per loop that calls it (one here: the reverse takes the forward's
    # from its tape), the vectoriser's remainders at most: unrolled by a run-time
    # count (by 8, and the loop over rows by 4 around that), there were 45.
    assert 0 < ir.count("call double @llvm.exp.f64") <= 6, ir


# A triangular loop nest as ADBench's C++ GMM writes it: the reverse of the inner
# dot product is vectorised; the loop over rows around it was unrolled by 4 on a
# Zen host, each copy with the vector loop's run-time checks and remainders.
TRIANGLE = r"""
double tri(int n, int d, const double *q, const double *x, const double *m) {
    double total = 0.0;
    for (int i = 0; i < n; ++i) {
        const double *xi = x + i * d;
        double sq = 0.0;
        for (int r = 0; r < d; ++r) {
            double t = 0.0;
            for (int j = 0; j <= r; ++j)
                t += q[r * d + j] * (xi[j] - m[j]);
            sq += t * t;
        }
        total += sq;
    }
    return total;
}
"""


def test_a_reverse_triangle_keeps_its_row_loop_rolled_and_its_gradient_right():
    rng = np.random.default_rng(3)
    n, d = 7, 10
    q, x, m = rng.normal(size=d * d), rng.normal(size=n * d), rng.normal(size=d)
    f = ez.c(TRIANGLE).tri
    C, Dup = ez.Const, ez.Duplicated
    df = ez.autodiff(f, ez.Reverse, C, C, Dup, C, Dup, ez.Active)
    dq, dm = np.zeros_like(q), np.zeros_like(m)
    args = (n, d, q, dq, x, m, dm, 1.0)
    df(*args)
    np.testing.assert_allclose(dq, fd_gradient(lambda v: f(n, d, v, x, m), q), rtol=1e-6)
    np.testing.assert_allclose(dm, fd_gradient(lambda v: f(n, d, q, x, v), m), rtol=1e-6)
    ir = df.inspect_llvm(optimized=True)
    labels = [line.split(":")[0] for line in ir.splitlines() if re.match(r"[\w.]+:", line)]
    vector_loops = [label for label in labels if label.startswith("vector.body")]
    assert vector_loops  # the reverse's dot products are vectorised
    # ... and not copied by unrolling the loop around them (vector.body.1, .epil).
    assert not [label for label in vector_loops if re.search(r"\.(\d+|epil|prol)$", label)]


def test_loop_unroll_then_unrolls_only_the_scalar_loop():
    module = parse_module(TWO_LOOPS)
    module.native.optimize(f"function({KEEP_VECTOR_LOOPS_ROLLED},loop-unroll<O2>)")
    ir = module.native.ir()
    assert "second.epil" in ir or "second.prol" in ir, ir  # unrolled by a run-time count
    assert "first.epil" not in ir and "first.prol" not in ir
    f = ez.llvm_ir(ir, "two_sums")
    a = np.linspace(0.5, 3.0, 11)
    for n in (0, 1, 3, 4, 5, 11):
        assert f(a, n) == pytest.approx(2.0 * a[:n].sum(), rel=1e-15)


def test_heats_vector_bodies_stay_rolled_and_its_gradient_right():
    assert KEEP_VECTOR_LOOPS_ROLLED in PASSES
    u0, target = kernels.heat_inputs(40)
    df = ez.autodiff(kernels.heat_loss, ez.Reverse, ez.Duplicated, ez.Const, ez.Const, ez.Active)
    du = np.zeros_like(u0)
    df(u0, du, target, 25, 1.0)
    expected = fd_gradient(lambda u: kernels.heat_loss(u, target, 25), u0)
    np.testing.assert_allclose(du, expected, rtol=1e-6, atol=1e-12)
    ir = df.for_arguments((u0, du, target, 25, 1.0)).inspect_llvm(optimized=True)
    assert "vector.body" in ir
    bodies = [line for line in ir.splitlines() if line.startswith("vector.body")]
    assert not [b for b in bodies if ".epil" in b.split(":")[0] or ".prol" in b.split(":")[0]]
