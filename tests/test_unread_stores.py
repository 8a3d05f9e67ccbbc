"""Stores into fresh memory that nothing reads are dropped (src/unread_stores.h): the
prange sum ez.grad does not want, which Numba stores into a reduction array of its own,
no longer keeps a forward loop alive in the combined derivative of a serial twin.
Every other use of the memory keeps its stores."""

from __future__ import annotations

import re

import numba
import numpy as np
import pytest

import enzyme_py as ez
from benchmarks.kernels import rosenbrock_gradient
from benchmarks.kernels import rosenbrock_prange as rosenbrock
from enzyme_py._pipeline import DROP_UNREAD_STORES, PASSES
from enzyme_py.frontends.ir import parse_module

pytestmark = pytest.mark.needs_enzyme

# A sum over x stored into fresh memory; USE stands for what else touches it.
SUM_IR = """
declare noalias i8* @NRT_MemInfo_alloc_aligned(i64, i32)
declare i8* @plain_alloc(i64)
declare void @opaque(i8*)

define double @f(double* %x, i64 %n, double** %out) {
entry:
  %m = call nonnull i8* @ALLOC(i64 72, i32 32)
  %data = getelementptr inbounds i8, i8* %m, i64 64
  %cell = bitcast i8* %data to double*
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %loop ]
  %s = phi double [ 0.0, %entry ], [ %sum, %loop ]
  %at = getelementptr double, double* %x, i64 %i
  %v = load double, double* %at
  %sum = fadd double %s, %v
  %next = add i64 %i, 1
  %done = icmp eq i64 %next, %n
  br i1 %done, label %exit, label %loop
exit:
  STORE
  USE
  ret double 0.0
}
"""

STORE = "store double %sum, double* %cell"


def after_pass(use: str = "", store: str = STORE, alloc: str = "NRT_MemInfo_alloc_aligned") -> str:
    text = SUM_IR.replace("USE", use).replace("STORE", store).replace("ALLOC", alloc)
    if alloc == "plain_alloc":
        text = text.replace("(i64 72, i32 32)", "(i64 72)")
    module = parse_module(text)
    module.native.optimize(f"function({DROP_UNREAD_STORES})")
    return module.native.ir()


def test_a_store_nothing_reads_is_dropped_and_the_sum_with_it():
    ir = after_pass()
    assert "store double %sum" not in ir
    module = parse_module(ir)
    module.native.optimize("function(adce,loop-deletion,simplifycfg)")
    assert "fadd" not in module.native.ir()  # nothing else wanted the sum


@pytest.mark.parametrize(
    "use",
    [
        "%back = load double, double* %cell",
        "call void @opaque(i8* %m)",
        "call void @opaque(i8* %data)",
        "store double* %cell, double** %out",
        "%c = ptrtoint double* %cell to i64",
    ],
    ids=["loaded", "passed-to-a-call", "its-data-passed", "pointer-stored", "ptrtoint"],
)
def test_memory_read_or_reachable_keeps_its_stores(use):
    assert "store double %sum, double* %cell" in after_pass(use)


def test_volatile_stores_and_allocations_without_noalias_are_kept():
    assert "store volatile double %sum" in after_pass(store=f"store volatile {STORE[6:]}")
    assert STORE in after_pass(alloc="plain_alloc")


def test_the_pass_runs_before_adce_in_the_derivative_pipeline():
    position = PASSES.index(DROP_UNREAD_STORES)
    assert PASSES.index("adce", position) == position + len(DROP_UNREAD_STORES) + 1


def stores_into_fresh_memory(ir: str) -> list[str]:
    """The stores whose address is made (GEPs, casts) from an NRT allocation."""
    fresh = set(re.findall(r"(%[\w.]+) = (?:tail )?call [^\n]*@NRT_MemInfo_alloc_aligned\(", ir))
    grown = True
    while grown:
        grown = False
        for name, base in re.findall(
            r"(%[\w.]+) = (?:getelementptr (?:inbounds )?i8, i8\* |bitcast i8\* )(%[\w.]+)", ir
        ):
            if base in fresh and name not in fresh:
                fresh.add(name)
                grown = True
    return [
        line.strip()
        for line in ir.splitlines()
        if (m := re.search(r"^\s*store [^,]+, [^,]+ (%[\w.]+)", line)) and m.group(1) in fresh
    ]


@pytest.mark.parametrize("n", [2, 3, 17, 40_000])
def test_rosenbrock_prange_on_one_thread_computes_no_sum_for_ez_grad(n):
    x = np.random.default_rng(n).uniform(-1.0, 2.0, n)
    dx = np.zeros_like(x)
    df = ez.autodiff(rosenbrock, ez.Reverse, ez.Duplicated, ez.ActiveOnly, threads=1)
    ir = df.for_arguments((x, dx, 1.0)).inspect_llvm(optimized=True)
    assert "@NRT_MemInfo_alloc_aligned(" in ir  # Numba's reduction array, still made
    assert stores_into_fresh_memory(ir) == []
    df(x, dx, 1.0)
    np.testing.assert_allclose(dx, rosenbrock_gradient(x), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ez.grad(rosenbrock)(x), rosenbrock_gradient(x), rtol=1e-12)


@numba.njit(parallel=True)
def shifted_sum_of_squares(x, c):
    s = 0.0
    for i in numba.prange(x.shape[0]):
        s += (x[i] - c) ** 2
    return s + c


def test_the_value_on_one_thread_is_still_the_sum():
    x = np.random.default_rng(5).standard_normal(1001)
    dx = np.zeros_like(x)
    df = ez.autodiff(
        shifted_sum_of_squares, ez.Reverse, ez.Duplicated, ez.Active, ez.Active, threads=1
    )
    value, dc = df(x, dx, 0.25, 1.0)
    assert value == pytest.approx(float(np.sum((x - 0.25) ** 2)) + 0.25, rel=1e-12)
    assert dc == pytest.approx(1.0 - 2.0 * float(np.sum(x - 0.25)), rel=1e-10)
    np.testing.assert_allclose(dx, 2.0 * (x - 0.25), rtol=1e-12)
