"""Reverse loops of stencils, split so that each add vectorises (src/scatter_adds.h).

The reverse of ``b[i] = f(a[i-1], a[i], a[i+1])`` adds into the shadow of ``a`` at
three offsets of i in one loop; the derivative pipeline splits such a loop into one
loop per add. These tests check the split derivatives against exact references
(the heat equation's adjoint as a matrix power, float64 central differences), at
lengths that exercise vector bodies, remainders and loops too short for either; that
the split happened; and, on loops written in LLVM IR, the run-time check that falls
back to the untouched loop when the arrays overlap, and a loop that must not be split
(it reads what an earlier iteration zeroed).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

import enzyme_py as ez
from benchmarks import kernels
from benchmarks.cython_gradients import C_SOURCE
from enzyme_py._pipeline import SPLIT_SCATTER_ADDS
from enzyme_py.frontends.ir import parse_module

pytestmark = pytest.mark.needs_enzyme

R = kernels.HEAT_R
heat = kernels.heat_loss  # the benchmark's kernel: a stencil over a and b, swapped


def heat_gradient(u0: np.ndarray, target: np.ndarray, steps: int) -> np.ndarray:
    """The exact gradient: with S one step's matrix, (S^steps)^T (S^steps u0 - target)."""
    n = u0.shape[0]
    step = np.eye(n)
    for i in range(1, n - 1):
        step[i, i - 1 : i + 2] = [R, 1.0 - 2.0 * R, R]
    power = np.linalg.matrix_power(step, steps)
    u0, target = u0.astype(np.float64), target.astype(np.float64)
    return power.T @ (power @ u0 - target)  # type: ignore[no-any-return]


def split_loops(ir: str) -> list[str]:
    """The blocks of the split loops (their labels), in order."""
    return sorted(set(re.findall(r"^([\w.]*\.scatter\d+):", ir, re.MULTILINE)))


def rewritten(ir: str) -> bool:
    """Whether the pass rewrote a loop: into the fused loop or the split loops."""
    return ".scatter.fused:" in ir or bool(split_loops(ir))


@pytest.mark.parametrize("n", [3, 4, 5, 8, 17, 64, 101])
@pytest.mark.parametrize("steps", [1, 2, 7])
def test_heat_gradient_matches_the_exact_adjoint(n, steps):
    rng = np.random.default_rng(10 * n + steps)
    u0, target = rng.uniform(size=n), rng.uniform(size=n)
    got = ez.grad(heat)(u0, target, steps)
    np.testing.assert_allclose(got, heat_gradient(u0, target, steps), rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("n", [5, 33, 100])
def test_heat_gradient_in_float32(n):
    rng = np.random.default_rng(n)
    u0 = rng.uniform(size=n).astype(np.float32)
    target = rng.uniform(size=n).astype(np.float32)
    got = ez.grad(heat)(u0, target, 5)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, heat_gradient(u0, target, 5), rtol=2e-5, atol=2e-6)


def test_the_heat_reverse_stencil_loop_is_fused_and_short_loops_run_as_written():
    n = 64
    u0, target = np.ones(n), np.zeros(n)
    df = ez.autodiff(heat, ez.Reverse, ez.Duplicated, ez.Const, ez.Const, ez.ActiveOnly)
    ir = df.for_arguments((u0, np.zeros(n), target, 3, 1.0)).inspect_llvm(optimized=True)
    # The adds into the shadow's neighbours gathered in one loop; a loop too short for
    # it runs as written (an untouched copy), not as split loops.
    assert ".scatter.fused:" in ir and ".scatter.fallback:" in ir
    assert not split_loops(ir), split_loops(ir)


SMOOTH = r"""
double smooth_loss(double *out, const double *in, long n, long steps) {
  double s = 0.0;
  for (long t = 0; t < steps; ++t) {
    for (long i = 1; i < n - 1; ++i) out[i] = 0.25 * in[i - 1] + 0.5 * in[i] + 0.25 * in[i + 1];
  }
  for (long i = 0; i < n; ++i) s += out[i] * out[i] * (1.0 + 0.1 * i);
  return s;
}
"""


def smooth_loss(out: np.ndarray, inp: np.ndarray, n: int, steps: int) -> float:
    for _ in range(steps):
        for i in range(1, n - 1):
            out[i] = 0.25 * inp[i - 1] + 0.5 * inp[i] + 0.25 * inp[i + 1]
    return float(np.sum(out * out * (1.0 + 0.1 * np.arange(n))))


@pytest.fixture(scope="module")
def smooth():
    """smooth_loss's gradient with respect to out and in (both Duplicated)."""
    f = ez.c(SMOOTH).smooth_loss
    return ez.autodiff(f, ez.Reverse, ez.Duplicated, ez.Duplicated, ez.Const, ez.Const, ez.Active)


@pytest.mark.parametrize("n", [3, 4, 9, 100, 1001])
def test_c_stencil_gradient_matches_central_differences(smooth, n):
    rng = np.random.default_rng(n)
    out, inp = rng.uniform(size=n), rng.uniform(size=n)
    df = smooth
    dout, din = np.zeros(n), np.zeros(n)
    df(out.copy(), dout, inp, din, n, 2, 1.0)
    h = 1e-2  # the loss is quadratic: central differences are exact but for rounding
    for k in sorted({0, 1, n // 2, n - 2, n - 1}):
        e = np.zeros(n)
        e[k] = h
        numeric = (
            smooth_loss(out.copy(), inp + e, n, 2) - smooth_loss(out.copy(), inp - e, n, 2)
        ) / (2 * h)
        assert din[k] == pytest.approx(numeric, rel=1e-7, abs=1e-8), k
    assert rewritten(df.inspect_llvm(optimized=True))


@pytest.mark.parametrize("shift", [1, 2, 5])
def test_c_stencil_on_overlapping_arrays_matches_central_differences(smooth, shift):
    # out and in are one buffer, `shift` apart (their shadows too): the split loops'
    # run-time check sees the shadows overlap and runs the untouched loop.
    n = 200
    buf = np.random.default_rng(shift).uniform(size=n + shift)
    df = smooth

    def loss(b: np.ndarray) -> float:
        b = b.copy()
        return smooth_loss(b[shift:], b[:n], n, 1)

    work, shadow = buf.copy(), np.zeros(n + shift)
    df(work[shift:], shadow[shift:], work[:n], shadow[:n], n, 1, 1.0)
    h = 1e-2  # quadratic, as above
    for k in (0, 1, shift, n // 2, n + shift - 2, n + shift - 1):
        e = np.zeros(n + shift)
        e[k] = h
        numeric = (loss(buf + e) - loss(buf - e)) / (2 * h)
        assert shadow[k] == pytest.approx(numeric, rel=1e-7, abs=1e-8), k


# A reverse loop as Enzyme writes one, running downwards: g[j] is read and zeroed,
# a[j], a[j+1], a[j+2] are added into (fast-math adds).
SCATTER_IR = r"""
define void @scatter(double* %a, double* %g, i64 %n) {
entry:
  %empty = icmp slt i64 %n, 1
  br i1 %empty, label %done, label %loop
loop:
  %i = phi i64 [ %n, %entry ], [ %next, %loop ]
  %next = add i64 %i, -1
  %pg = getelementptr double, double* %g, i64 READ
  %v = load double, double* %pg
  %pz = getelementptr double, double* %g, i64 %next
  store double 0.0, double* %pz
  %p0 = getelementptr double, double* %a, i64 %next
  %x0 = load double, double* %p0
  %h = fmul fast double %v, 0.25
  %y0 = fadd fast double %x0, %h
  store double %y0, double* %p0
  %p1 = getelementptr double, double* %a, i64 %i
  %x1 = load double, double* %p1
  %y1 = fadd fast double %x1, %v
  store double %y1, double* %p1
  %i2 = add i64 %i, 1
  %p2 = getelementptr double, double* %a, i64 %i2
  %x2 = load double, double* %p2
  %y2 = fadd fast double %x2, %h
  store double %y2, double* %p2
  %more = icmp sgt i64 %next, 0
  br i1 %more, label %loop, label %done
done:
  ret void
}
"""


def scatter_reference(a: np.ndarray, g: np.ndarray, n: int, ahead: int) -> None:
    for j in range(n - 1, -1, -1):
        v = g[j + ahead]
        g[j] = 0.0
        a[j] += 0.25 * v
        a[j + 1] += v
        a[j + 2] += 0.25 * v


@pytest.fixture(scope="module")
def scatter():
    return ez.llvm_ir(SCATTER_IR.replace("READ", "%next"), "scatter")


def test_a_scatter_loop_is_split_and_exact(scatter):
    n = 1001
    rng = np.random.default_rng(1)
    a, g = rng.uniform(size=n + 2), rng.uniform(size=n)
    a_ref, g_ref = a.copy(), g.copy()
    scatter(a, g, n)
    scatter_reference(a_ref, g_ref, n, 0)
    np.testing.assert_allclose(a, a_ref, rtol=1e-14)
    np.testing.assert_array_equal(g, g_ref)
    ir = scatter.__dict__["_primal"].inspect_llvm(optimized=True)
    # Rewritten (its run-time check that a and g do not overlap: the pass alone below,
    # and overlapping arrays after it).
    assert rewritten(ir)


def block(ir: str, label: str) -> str:
    """The text of the block ``label`` in ``ir``."""
    text = ir[ir.index(f"\n{label}:") :]
    return text[: text.index("\n\n")]


def split_by_the_pass_alone(text: str) -> str:
    module = parse_module(text)
    module.native.optimize(f"function({SPLIT_SCATTER_ADDS})")
    return module.native.ir()


@pytest.mark.parametrize("noalias", [True, False])
def test_the_pass_alone_splits_and_its_result_runs(noalias):
    # The pass on its own (in the derivative pipeline the first vectoriser runs before
    # it): the fused loop, an untouched copy for loops too short for it, and a run-time
    # check that sends overlapping arrays to that copy only where a and g may overlap.
    text = SCATTER_IR.replace("READ", "%next")
    if noalias:
        text = text.replace("double* %a, double* %g", "double* noalias %a, double* noalias %g")
    split = split_by_the_pass_alone(text)
    assert "loop.scatter.fused:" in split and "loop.scatter.fallback:" in split
    assert ("loop.scatter.check:" in split) is not noalias
    n = 515
    rng = np.random.default_rng(3)
    a, g = rng.uniform(size=n + 2), rng.uniform(size=n)
    a_ref, g_ref = a.copy(), g.copy()
    ez.llvm_ir(split, "scatter")(a, g, n)
    scatter_reference(a_ref, g_ref, n, 0)
    np.testing.assert_allclose(a, a_ref, rtol=1e-14)
    np.testing.assert_array_equal(g, g_ref)


@pytest.mark.parametrize("start", [0, 1, 3, 500, 1002])
def test_overlapping_arrays_take_the_untouched_loop(scatter, start):
    # g is the same memory as part of a (from `start`; 1002 overlaps one entry, the
    # last a[n + 1]): the loop's own order of loads, zeroing and adds must hold.
    n = 1001
    buf = np.random.default_rng(start).uniform(size=start + 2 * n + 4)
    expected = buf.copy()
    scatter(buf[: n + 2], buf[start : start + n], n)
    scatter_reference(expected[: n + 2], expected[start : start + n], n, 0)
    np.testing.assert_allclose(buf, expected, rtol=1e-14)


def test_a_loop_reading_what_an_earlier_iteration_zeroed_is_not_split():
    # g[j + 1] was zeroed by the iteration before: loops split apart would read it
    # before it was zeroed.
    scatter_ahead = ez.llvm_ir(SCATTER_IR.replace("READ", "%i"), "scatter")
    n = 257
    rng = np.random.default_rng(2)
    a, g = rng.uniform(size=n + 2), rng.uniform(size=n + 1)
    a_ref, g_ref = a.copy(), g.copy()
    scatter_ahead(a, g, n)
    scatter_reference(a_ref, g_ref, n, 1)
    np.testing.assert_allclose(a, a_ref, rtol=1e-14)
    np.testing.assert_array_equal(g, g_ref)
    ir = scatter_ahead.__dict__["_primal"].inspect_llvm(optimized=True)
    assert not rewritten(ir)


# The fused loop (src/scatter_fusion.h): one loop adding, into each entry, every add's
# value for it; the split loops for loops too short for it (n - 1 backedges below the
# shifts' spread + 7). Lengths on both sides of that, and around the vector widths.
FUSED_LENGTHS = [1, 2, 3, 8, 9, 10, 11, 12, 17, 64, 515]


@pytest.mark.parametrize("n", FUSED_LENGTHS)
def test_the_fused_loop_is_exact_at_every_length(n):
    text = SCATTER_IR.replace("READ", "%next").replace(
        "double* %a, double* %g", "double* noalias %a, double* noalias %g"
    )
    fused = split_by_the_pass_alone(text)
    assert "loop.scatter.fused:" in fused and "loop.scatter.guard:" in fused
    # g[j] is read for three iterations (w + 2, w + 1, w): the second carried in a phi
    # from the first's load, the third loaded (carried from a carried value, it would
    # be a second-order recurrence, which LLVM 15's vectoriser refuses).
    assert fused.count("%v.carried = phi double") == 1
    rng = np.random.default_rng(n)
    a, g = rng.uniform(size=n + 2), rng.uniform(size=n)
    a_ref, g_ref = a.copy(), g.copy()
    ez.llvm_ir(fused, "scatter")(a, g, n)
    scatter_reference(a_ref, g_ref, n, 0)
    np.testing.assert_allclose(a, a_ref, rtol=1e-14)
    np.testing.assert_array_equal(g, g_ref)


# Enzyme's reverse of a stencil that carries a neighbour (heat's): a[i] gets 0.5 v plus
# the 0.25 v the iteration before computed, carried in a phi (0.0 before the first).
CARRIED_IR = r"""
define void @carried(double* noalias %a, double* noalias %g, i64 %n) {
entry:
  %empty = icmp slt i64 %n, 1
  br i1 %empty, label %done, label %loop
loop:
  %i = phi i64 [ %n, %entry ], [ %next, %loop ]
  %carry = phi double [ 0.0, %entry ], [ %h, %loop ]
  %next = add i64 %i, -1
  %pg = getelementptr double, double* %g, i64 %next
  %v = load double, double* %pg
  store double 0.0, double* %pg
  %h = fmul fast double %v, 0.25
  %i1 = add i64 %i, 1
  %p2 = getelementptr double, double* %a, i64 %i1
  %x2 = load double, double* %p2
  %y2 = fadd fast double %x2, %h
  store double %y2, double* %p2
  %m = fmul fast double %v, 0.5
  %mc = fadd fast double %m, %carry
  %p1 = getelementptr double, double* %a, i64 %i
  %x1 = load double, double* %p1
  %y1 = fadd fast double %mc, %x1
  store double %y1, double* %p1
  %more = icmp sgt i64 %next, 0
  br i1 %more, label %loop, label %done
done:
  ret void
}
"""


def carried_reference(a: np.ndarray, g: np.ndarray, n: int) -> None:
    carry = 0.0
    for j in range(n - 1, -1, -1):  # i = j + 1
        v = g[j]
        g[j] = 0.0
        a[j + 2] += 0.25 * v
        a[j + 1] += 0.5 * v + carry
        carry = 0.25 * v


def run_carried(ir: str, n: int, seed: int) -> tuple[Any, np.ndarray, np.ndarray]:
    """``ir``'s @carried on random arrays for n, its a checked against
    ``carried_reference``'s; what it returned, its g and the reference's, for the
    caller to check."""
    rng = np.random.default_rng(seed)
    a, g = rng.uniform(size=n + 2), rng.uniform(size=n)
    a_ref, g_ref = a.copy(), g.copy()
    result = ez.llvm_ir(ir, "carried")(a, g, n)
    carried_reference(a_ref, g_ref, n)
    np.testing.assert_allclose(a, a_ref, rtol=1e-14)
    return result, g, g_ref


@pytest.mark.parametrize("n", FUSED_LENGTHS)
def test_a_carried_neighbour_is_fused_and_exact(n):
    fused = split_by_the_pass_alone(CARRIED_IR)
    assert "loop.scatter.fused:" in fused
    _, g, g_ref = run_carried(fused, n, 100 + n)
    np.testing.assert_array_equal(g, g_ref)


def test_a_carried_value_that_does_not_start_at_zero_is_not_fused():
    # Carried from 1.0 on: the first iteration adds 1.0, which no shifted term holds.
    text = CARRIED_IR.replace("[ 0.0, %entry ]", "[ 1.0, %entry ]")
    split = split_by_the_pass_alone(text)
    assert "scatter.fused" not in split and split_loops(split)
    n = 33
    rng = np.random.default_rng(5)
    a, g = rng.uniform(size=n + 2), rng.uniform(size=n)
    a_ref, g_ref = a.copy(), g.copy()
    ez.llvm_ir(split, "carried")(a, g, n)
    carried_reference(a_ref, g_ref, n)
    a_ref[n] += 1.0  # the first iteration (i = n) adds the carried 1.0 into a[n]
    np.testing.assert_allclose(a, a_ref, rtol=1e-14)


# CARRIED_IR with what Enzyme's reverse of heat's step carries out of the loop: a sum
# that adds the carried value only in the iteration that leaves (`select` of the
# branch's condition), returned after the loop.
LAST_SUM_IR = (
    CARRIED_IR.replace("define void @carried(", "define double @last_sum(")
    .replace(
        "  %carry = phi double [ 0.0, %entry ], [ %h, %loop ]\n",
        "  %carry = phi double [ 0.0, %entry ], [ %h, %loop ]\n"
        "  %s = phi double [ INIT, %entry ], [ %s.next, %loop ]\n",
    )
    .replace(
        "  br i1 %more, label %loop, label %done\n",
        "  %last = select i1 %more, double STAY, double %h\n"
        "  %s.next = fadd FLAGS double %s, %last\n"
        "  br i1 %more, label %loop, label %done\n",
    )
    .replace(
        "done:\n  ret void",
        "done:\n  %r = phi double [ INIT, %entry ], [ %s.next, %loop ]\n  ret double %r",
    )
)


@pytest.mark.parametrize(
    ("init", "stay", "flags", "settled"),
    [
        ("0.5", "0.0", "fast", True),
        ("-0.0", "-0.0", "", True),  # adding -0.0 changes nothing, flags or not
        ("0.0", "0.0", "", True),  # +0.0 plus +0.0 stays +0.0
        ("-0.0", "0.0", "", False),  # -0.0 + 0.0 is +0.0: the sum's zero sign would change
        ("0.5", "1.0", "fast", False),  # every iteration adds: a real sum
    ],
)
def test_a_sum_of_the_leaving_iteration_is_not_carried_through_the_loop(init, stay, flags, settled):
    # Its phi carries nothing (the vectoriser made a masked sum over every iteration of
    # it: a quarter of heat's gradient), and its value is what it was. Settled, it lets
    # the rest of the loop (zeroing g) join the fused path: the loop's block is left to
    # compute its last iteration once, before it, the sum from its first value.
    text = LAST_SUM_IR.replace("INIT", init).replace("STAY", stay).replace("FLAGS", flags)
    fused = split_by_the_pass_alone(text)
    assert "loop.scatter.fused:" in fused
    rest = block(fused, "loop")
    if settled:
        assert "phi" not in rest and "br label %loop.scatter.guard" in rest, rest
        assert f"%s.next = fadd {flags} double {float(init):e}".replace("  ", " ") in rest, rest
    else:
        assert re.search(r"%s = phi double \[ [^]]+ \], \[ %s.next, %loop \]", rest), rest
    for n in (1, 2, 9, 64):
        rng = np.random.default_rng(200 + n)
        a, g = rng.uniform(size=n + 2), rng.uniform(size=n)
        a_ref, g_ref = a.copy(), g.copy()
        first_g = g[0]
        total = ez.llvm_ir(fused, "last_sum")(a, g, n)
        carried_reference(a_ref, g_ref, n)
        np.testing.assert_allclose(a, a_ref, rtol=1e-14)
        np.testing.assert_array_equal(g, g_ref)
        # Iterations next = n-1 .. 0 add STAY, the last (next = 0) adds 0.25 * g[0].
        expected = float(init) + (n - 1) * float(stay) + 0.25 * first_g
        assert total == pytest.approx(expected, rel=1e-14, abs=0.0)


def test_the_heat_derivative_runs_the_fused_loop():
    n = 64
    u0, target = np.ones(n), np.zeros(n)
    df = ez.autodiff(heat, ez.Reverse, ez.Duplicated, ez.Const, ez.Const, ez.ActiveOnly)
    ir = df.for_arguments((u0, np.zeros(n), target, 3, 1.0)).inspect_llvm(optimized=True)
    assert ".scatter.fused:" in ir


WIDE = r"""
double wide_loss(double *out, const double *in, long n) {
  for (long i = 2; i < n - 2; ++i)
    out[i] = 0.1 * in[i - 2] + 0.2 * in[i - 1] + 0.4 * in[i] + 0.2 * in[i + 1] + 0.1 * in[i + 2];
  double s = 0.0;
  for (long i = 2; i < n - 2; ++i) s += out[i] * out[i] * (1.0 + 0.01 * i);
  return s;
}
"""


def wide_loss(inp: np.ndarray, n: int) -> float:
    out = np.zeros(n)
    for i in range(2, n - 2):
        out[i] = (
            0.1 * inp[i - 2] + 0.2 * inp[i - 1] + 0.4 * inp[i] + 0.2 * inp[i + 1] + 0.1 * inp[i + 2]
        )
    return float(sum(out[i] * out[i] * (1.0 + 0.01 * i) for i in range(2, n - 2)))


@pytest.mark.parametrize("n", [5, 6, 9, 14, 15, 16, 40, 257])
def test_a_five_point_stencil_gradient_matches_central_differences(n):
    # Five adds into the shadow of `in`, two entries either side: shifts up to 4 apart.
    f = ez.c(WIDE).wide_loss
    df = ez.autodiff(f, ez.Reverse, ez.Duplicated, ez.Duplicated, ez.Const, ez.Active)
    rng = np.random.default_rng(n)
    inp = rng.uniform(size=n)
    din = np.zeros(n)
    df(np.zeros(n), np.zeros(n), inp, din, n, 1.0)
    h = 1e-2  # quadratic: central differences exact but for rounding
    for k in range(n):
        e = np.zeros(n)
        e[k] = h
        numeric = (wide_loss(inp + e, n) - wide_loss(inp - e, n)) / (2 * h)
        assert din[k] == pytest.approx(numeric, rel=1e-8, abs=1e-10), k
    assert ".scatter.fused:" in df.inspect_llvm(optimized=True)


def test_a_loop_left_with_nothing_to_do_runs_once():
    # Without the zeroing store, every store of the loop is an add, all moved to the
    # fused and split loops: what is left only counted its iterations, and now runs once.
    text = (
        SCATTER_IR.replace("READ", "%next")
        .replace("  store double 0.0, double* %pz\n", "")
        .replace("double* %a, double* %g", "double* noalias %a, double* noalias %g")
    )
    fused = split_by_the_pass_alone(text)
    rest = block(fused, "loop")
    assert "br label %done" in rest and "br i1" not in rest, rest
    for n in (3, 40):
        rng = np.random.default_rng(n)
        a, g = rng.uniform(size=n + 2), rng.uniform(size=n)
        a_ref, g_read = a.copy(), g.copy()
        ez.llvm_ir(fused, "scatter")(a, g, n)
        scatter_reference(a_ref, g_read.copy(), n, 0)  # the reference zeroes its g
        np.testing.assert_allclose(a, a_ref, rtol=1e-14)
        np.testing.assert_array_equal(g, g_read)  # this loop only reads g


@pytest.mark.parametrize("n", [2, 3, 9, 10, 11, 100, 1001, 70_001])
def test_a_reassociated_add_is_fused_and_exact(n):
    # clang's reverse of Rosenbrock adds into dx[i] as (v + dx[i]) + w: the load is a
    # leaf of a tree of adds. Fused (before: vectorised with a store-to-load forward that
    # failed every iteration, three times slower), and exact against the analytic gradient
    # (at 70,001 on the thread pool: src/fused_threads.h).
    f = ez.c(C_SOURCE).rosenbrock  # the benchmark suite's C kernel
    df = ez.autodiff(f, ez.Reverse, ez.Duplicated, ez.Const, ez.ActiveOnly)
    x = np.random.default_rng(n).uniform(-1.0, 2.0, n)
    dx = np.zeros(n)
    df(x, dx, n, 1.0)
    np.testing.assert_allclose(dx, kernels.rosenbrock_gradient(x), rtol=1e-13, atol=1e-12)
    assert ".scatter.fused:" in df.inspect_llvm(optimized=True)


@pytest.mark.parametrize("n", [2, 3, 9, 10, 11, 100, 1001])
def test_the_serial_numba_rosenbrock_reverse_loop_is_fused_and_exact(n):
    # The pass runs before loop-load elimination and load PRE, which would otherwise
    # carry grad[i + 1] in a register first (a loop storing every entry twice, which
    # the pass does not take): Numba's reverse loop is fused, and exact.
    f = kernels.rosenbrock
    df = ez.autodiff(f, ez.Reverse, ez.Duplicated, ez.ActiveOnly)
    x = np.random.default_rng(n).uniform(-1.0, 2.0, n)
    dx = np.zeros(n)
    df(x, dx, 1.0)
    np.testing.assert_allclose(dx, kernels.rosenbrock_gradient(x), rtol=1e-13, atol=1e-12)
    assert ".scatter.fused:" in df.for_arguments((x, dx, 1.0)).inspect_llvm(optimized=True)


def fused_vector_loop(ir: str) -> str:
    """The fused loop, vectorised: the vector body of the function it was moved into
    (``<function>.fused``, src/fused_threads.h)."""
    (chunk,) = re.findall(r"^define [^\n]*\.fused\(.*?^}", ir, re.MULTILINE | re.DOTALL)
    return str(chunk.split("\nvector.body:", 1)[1].split("\n\n", 1)[0])


def reversing_shuffles(ir: str) -> list[str]:
    """The shufflevector masks in ``ir`` that reverse a vector (k-1, ..., 1, 0)."""
    found = []
    for mask in re.findall(r"shufflevector [^\n]*<(i32 \d+(?:, i32 \d+)+)>", ir):
        lanes = [int(lane) for lane in re.findall(r"\d+", mask.replace("i32", ""))]
        if lanes == list(range(len(lanes) - 1, -1, -1)):
            found.append(mask)
    return found


@pytest.mark.parametrize("n", [100, 1001])
def test_the_fused_loop_walks_memory_upwards(n):
    # A reverse pass's loop runs downwards; its fused loop takes the iterations in the
    # opposite order, so that, vectorised, no vector of loads or stores is reversed
    # (6 permutes per 8 entries before): the same terms per entry, the same bits.
    f = kernels.rosenbrock
    x = np.random.default_rng(n).uniform(-1.0, 2.0, n)
    df = ez.autodiff(f, ez.Reverse, ez.Duplicated, ez.ActiveOnly)
    dx = np.zeros(n)
    df(x, dx, 1.0)
    ir = df.for_arguments((x, dx, 1.0)).inspect_llvm(optimized=True)
    loop = fused_vector_loop(ir)
    assert " store <" in loop, "the fused loop is vectorised"
    assert reversing_shuffles(loop) == []
    np.testing.assert_allclose(dx, kernels.rosenbrock_gradient(x), rtol=1e-13, atol=1e-12)
    np.testing.assert_array_equal(ez.grad(f)(x), dx)
