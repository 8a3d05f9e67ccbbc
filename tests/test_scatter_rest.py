"""The rest of a fused reverse stencil loop joining the fused loop (src/scatter_fusion.h).

Enzyme's reverse of a stencil zeroes each entry of the shadow it read; once the adds
are fused, that zeroing was a loop of its own after them. Where the rest of the loop
stores only zeros, at one affine entry per iteration, and leaves only its last
iteration's values for after the loop, the fused loop zeroes each entry right after
its last read of it (the few at either end after the loop), the last iteration's
values are computed once before, and on threads the zeros run in a loop of their own
after the threads' shares. These tests check the exact values of loops written in
LLVM IR, walking memory either way, at lengths on both sides of the fused loop's
threshold; a rest that stores something else stays a loop; and heat's gradient against
its exact adjoint and central differences, on one thread and on the pool.
"""

from __future__ import annotations

import numpy as np
import pytest

import enzyme_py as ez
from benchmarks import kernels
from tests.reference import fd_gradient
from tests.test_scatter_adds import (
    CARRIED_IR,
    FUSED_LENGTHS,
    block,
    heat_gradient,
    run_carried,
    split_by_the_pass_alone,
)

pytestmark = pytest.mark.needs_enzyme

ZERO_MARK = "!enzyme_py.fused.zero"


def test_a_downward_loop_zeroes_in_its_fused_loop():
    fused = split_by_the_pass_alone(CARRIED_IR)
    loop = block(fused, "loop.scatter.fused")
    assert ZERO_MARK in loop, loop
    # What the rest left for after the loop is nothing: its block runs once, no loop.
    rest = block(fused, "loop")
    assert "br i1" not in rest and "store" not in rest, rest


@pytest.mark.parametrize("n", [1, 9, 10, 64])
def test_a_counter_used_after_the_loop_keeps_its_last_value(n):
    # The loop's counter leaves it (its last value, 1): the once-run block gives the
    # counter's value at the last iteration.
    text = CARRIED_IR.replace("define void @carried(", "define i64 @carried(").replace(
        "done:\n  ret void", "done:\n  %r = phi i64 [ 0, %entry ], [ %i, %loop ]\n  ret i64 %r"
    )
    fused = split_by_the_pass_alone(text)
    assert ZERO_MARK in block(fused, "loop.scatter.fused")
    last, g, g_ref = run_carried(fused, n, 500 + n)
    assert last == 1
    np.testing.assert_array_equal(g, g_ref)


# Two shadows zeroed, walked upwards: the reverse of a loop that ran downwards.
UPWARD_IR = r"""
define void @upward(double* noalias %a, double* noalias %g, double* noalias %q, i64 %n) {
entry:
  %empty = icmp slt i64 %n, 1
  br i1 %empty, label %done, label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %loop ]
  %carry = phi double [ 0.0, %entry ], [ %h, %loop ]
  %pg = getelementptr double, double* %g, i64 %i
  %v = load double, double* %pg
  store double 0.0, double* %pg
  %pq = getelementptr double, double* %q, i64 %i
  %z = load double, double* %pq
  store double 0.0, double* %pq
  %h = fmul fast double %v, 0.25
  %p0 = getelementptr double, double* %a, i64 %i
  %x0 = load double, double* %p0
  %y0 = fadd fast double %x0, %h
  store double %y0, double* %p0
  %vz = fadd fast double %v, %z
  %m = fmul fast double %vz, 0.5
  %mc = fadd fast double %m, %carry
  %i1 = add i64 %i, 1
  %p1 = getelementptr double, double* %a, i64 %i1
  %x1 = load double, double* %p1
  %y1 = fadd fast double %mc, %x1
  store double %y1, double* %p1
  %next = add i64 %i, 1
  %more = icmp slt i64 %next, %n
  br i1 %more, label %loop, label %done
done:
  ret void
}
"""


def upward_reference(a: np.ndarray, g: np.ndarray, q: np.ndarray, n: int) -> None:
    carry = 0.0
    for i in range(n):
        v, z = g[i], q[i]
        g[i] = 0.0
        q[i] = 0.0
        a[i] += 0.25 * v
        a[i + 1] += 0.5 * (v + z) + carry
        carry = 0.25 * v


@pytest.mark.parametrize("n", FUSED_LENGTHS)
def test_an_upward_loop_zeroing_two_shadows_is_fused_and_exact(n):
    fused = split_by_the_pass_alone(UPWARD_IR)
    assert block(fused, "loop.scatter.fused").count(ZERO_MARK) == 2
    rng = np.random.default_rng(300 + n)
    a, g, q = rng.uniform(size=n + 1), rng.uniform(size=n), rng.uniform(size=n)
    a_ref, g_ref, q_ref = a.copy(), g.copy(), q.copy()
    ez.llvm_ir(fused, "upward")(a, g, q, n)
    upward_reference(a_ref, g_ref, q_ref, n)
    np.testing.assert_allclose(a, a_ref, rtol=1e-14)
    np.testing.assert_array_equal(g, np.zeros(n))
    np.testing.assert_array_equal(q, np.zeros(n))


@pytest.mark.parametrize("n", [9, 10, 64])
def test_a_rest_storing_something_else_stays_a_loop(n):
    # 1.0 left in g, not a zero: the entries other iterations read must keep their
    # values until then, so the rest runs after the fused loop, as a loop.
    text = CARRIED_IR.replace("store double 0.0, double* %pg", "store double 1.0, double* %pg")
    fused = split_by_the_pass_alone(text)
    assert "loop.scatter.fused:" in fused and ZERO_MARK not in fused
    assert "br i1 %more, label %loop" in block(fused, "loop")
    _, g, _ = run_carried(fused, n, 400 + n)
    np.testing.assert_array_equal(g, np.ones(n))


def heat_adjoint(u0: np.ndarray, target: np.ndarray, steps: int) -> np.ndarray:
    """The exact gradient, S^T applied `steps` times to S^steps u0 - target (S: one step)."""
    r = kernels.HEAT_R
    a = u0.copy()
    for _ in range(steps):
        b = a.copy()
        b[1:-1] = a[1:-1] + r * (a[:-2] - 2.0 * a[1:-1] + a[2:])
        a = b
    y = a - target
    for _ in range(steps):
        x = np.zeros_like(y)
        x[0], x[-1] = y[0], y[-1]
        x[1:-1] += (1.0 - 2.0 * r) * y[1:-1]
        x[:-2] += r * y[1:-1]
        x[2:] += r * y[1:-1]
        y = x
    return y


@pytest.mark.parametrize("n", [5, 12, 13, 200])
def test_heat_zeroes_in_its_fused_loop_and_is_exact(n):
    kernel = kernels.heat_loss
    u0, target = kernels.heat_inputs(n, seed=n)
    steps = 7
    df = ez.autodiff(
        kernel, ez.Reverse, ez.Duplicated, ez.Const, ez.Const, ez.ActiveOnly, threads=1
    )
    du = np.zeros(n)
    ir = df.for_arguments((u0, du, target, steps, 1.0)).inspect_llvm(optimized=True)
    assert ZERO_MARK in ir
    df(u0, du, target, steps, 1.0)
    np.testing.assert_allclose(du, heat_gradient(u0, target, steps), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(du, heat_adjoint(u0, target, steps), rtol=1e-12, atol=1e-13)
    fd = fd_gradient(lambda u: kernel(u, target, steps), u0)
    np.testing.assert_allclose(du, fd, rtol=1e-6, atol=1e-8)


def test_on_threads_the_zeros_run_after_the_shares():
    # 70,003 cells: the fused loop runs on the pool, its zeros in a loop of their own
    # after it; the same bits as one thread, where the zeros are in the fused loop.
    kernel = kernels.heat_loss
    n, steps = 70_003, 3
    u0, target = kernels.heat_inputs(n, seed=1)
    args = (u0, np.zeros(n), target, steps, 1.0)
    threaded = ez.autodiff(kernel, ez.Reverse, ez.Duplicated, ez.Const, ez.Const, ez.ActiveOnly)
    one = ez.autodiff(
        kernel, ez.Reverse, ez.Duplicated, ez.Const, ez.Const, ez.ActiveOnly, threads=1
    )
    assert ".scatter.fused.zeroes:" in threaded.for_arguments(args).inspect_llvm(optimized=True)
    assert ".scatter.fused.zeroes:" not in one.for_arguments(args).inspect_llvm(optimized=True)
    du, du_one = np.zeros(n), np.zeros(n)
    threaded(u0, du, target, steps, 1.0)
    one(u0, du_one, target, steps, 1.0)
    np.testing.assert_array_equal(du, du_one)
    np.testing.assert_allclose(du, heat_adjoint(u0, target, steps), rtol=1e-12, atol=1e-13)
    h = 1e-6
    for i in (0, n // 2, n - 1):
        e = np.zeros(n)
        e[i] = h
        fd = (kernel(u0 + e, target, steps) - kernel(u0 - e, target, steps)) / (2 * h)
        assert du[i] == pytest.approx(fd, rel=1e-5, abs=1e-8)
