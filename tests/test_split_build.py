"""A module that falls apart into parts optimised and compiled on threads of their own
(src/split_build.h): the entry's part and each function reached only through its
address, a variable they share kept as one, a helper both call copied into each,
symbols they share renamed per derivative; GMM prange's entry and reverse chunk built
so, the forward chunk its derivative no longer launches dropped; one thread keeps one
module. Results against values computed here and central differences."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from conftest import run_until_done

pytestmark = pytest.mark.needs_enzyme

STEPS = 800  # per stage: two instructions each, the part over the 1500 threshold
MODULE_START = "; ModuleID"


def _stage(name: str, mul: float, add: float, steps: int = STEPS) -> str:
    """v <- v * mul + add, ``steps`` times, after counting the call in @calls and scaling
    by @scale (shared by both stages) through @bump (a helper both stages call)."""
    lines = [
        f"define internal double @{name}(double %x) {{",
        "  %c = load i64, i64* @calls",
        "  %c1 = add i64 %c, 1",
        "  store i64 %c1, i64* @calls",
        "  %s = load double, double* getelementptr ([2 x double], [2 x double]* @scale, "
        "i64 0, i64 0)",
        "  %v0 = fmul double %x, %s",
    ]
    for k in range(steps):
        lines.append(f"  %m{k} = fmul double %v{k}, {mul!r}")
        lines.append(f"  %v{k + 1} = fadd double %m{k}, {add!r}")
    lines += [f"  %r = call double @bump(double %v{steps})", "  ret double %r", "}"]
    return "\n".join(lines)


STAGES = {"stage_a": (0.999, 1e-3), "stage_b": (1.001, -2e-3), "stage_c": (0.998, 3e-3)}
SOURCE = "\n".join(
    [
        "@calls = internal global i64 0",
        "@scale = internal constant [2 x double] [double 1.5, double 0.5]",
        "define internal double @bump(double %v) noinline {",
        "  %w = fadd double %v, 0.25",
        "  ret double %w",
        "}",
        *(_stage(name, *constants) for name, constants in STAGES.items()),
        # Each stage reached through its address (a function pointer in memory): a root.
        "define double @f(double %x) {",
        "  %slot = alloca double (double)*",
        "  store double (double)* @stage_a, double (double)** %slot",
        "  %a = load double (double)*, double (double)** %slot",
        "  %ya = call double %a(double %x)",
        "  store double (double)* @stage_b, double (double)** %slot",
        "  %b = load double (double)*, double (double)** %slot",
        "  %yb = call double %b(double %x)",
        # stage_c called directly: in the entry's part.
        "  %yc = call double @stage_c(double %x)",
        "  %n = load i64, i64* @calls",
        "  %nf = sitofp i64 %n to double",
        "  %ab = fadd double %ya, %yb",
        "  %sum = fadd double %ab, %yc",
        "  %r = fadd double %sum, %nf",
        "  ret double %r",
        "}",
    ]
)


# stage_b's address taken only by a store that the optimiser drops: its part, left
# defining nothing once no other part reaches it, is not compiled.
UNREACHED = SOURCE.replace(
    "  %yb = call double %b(double %x)", "  %yb = fadd double 0.0, 0.0"
).replace("  %b = load double (double)*, double (double)** %slot\n", "")


# A fourth root, small (SMALL_STEPS steps): it joins the entry's part once the other
# parts hold the 1500 instructions a part needs, not the least loaded of them.
SMALL_STEPS = 10
SMALL_STAGE = (1.002, -1e-3)
WITH_SMALL_ROOT = SOURCE.replace(
    "define double @f(double %x) {",
    _stage("stage_d", *SMALL_STAGE, steps=SMALL_STEPS) + "\ndefine double @f(double %x) {",
).replace(
    "  %r = fadd double %sum, %nf",
    "  store double (double)* @stage_d, double (double)** %slot\n"
    "  %d = load double (double)*, double (double)** %slot\n"
    "  %yd = call double %d(double %x)\n"
    "  %sumd = fadd double %sum, %yd\n"
    "  %r = fadd double %sumd, %nf",
)


def _stage_value(x: float, mul: float, add: float, steps: int = STEPS) -> float:
    v = x * 1.5
    for _ in range(steps):
        v = v * mul + add
    return v + 0.25


def expected(x: float, call: int) -> float:
    """f's value on its call-th call (from 1): each call counts three stage calls."""
    a, b, c = (_stage_value(x, *constants) for constants in STAGES.values())
    return ((a + b) + c) + 3.0 * call


_PRELUDE = """
import re
import sys
sys.path.insert(0, {tests!r})
import numpy as np
import enzyme_py as ez
import test_split_build as t
"""


def _in_new_process(body: str, cache: Path, **env: str) -> None:
    run_until_done(_PRELUDE.format(tests=os.path.dirname(__file__)), body, cache, **env)


@pytest.mark.parametrize("isolate", ["1", "0"])
def test_parts_share_one_variable_and_call_each_other(tmp_path, isolate):
    """Three parts on threads (the entry's with stage_c, stage_a's, stage_b's): @calls,
    written by every stage and read by the entry, is one variable (the count goes up by
    three a call); the stages' names in the object carry the entry's; the values exact."""
    body = r"""
        f = ez.llvm_ir(t.SOURCE, "f")
        for call in (1, 2, 3):
            got = f(0.5)
            assert got == t.expected(0.5, call), (call, got, t.expected(0.5, call))
        built = f._primal._compiled.artifact
        ir = f._primal.inspect_llvm(optimized=True)
        assert ir.count(t.MODULE_START) == 3, ir.count(t.MODULE_START)
        first = ir.split(t.MODULE_START)[1]
        assert "declare double @stage_a(" in first and "declare double @stage_b(" in first
        assert re.search(r"^define [^\n]*@stage_a\(", ir, re.M)
        # @bump copied into each part, internal in each.
        assert len(re.findall(r"^define internal [^\n]*@bump\(", ir, re.M)) == 3
        # @calls defined once (in the entry's part), declared in the stages'.
        assert len(re.findall(r"^@calls = [^\n]*global i64 0$", ir, re.M)) == 1
        assert len(re.findall(r"^@calls = external [^\n]*global i64$", ir, re.M)) == 2
        entry = built.entry_name
        assert ("stage_a." + entry).encode() in built.object
        assert built.object.startswith(b"\x7fEZPYOBJ")
        """
    _in_new_process(body, tmp_path, ENZYME_PY_CODEGEN_THREADS="4", ENZYME_PY_ISOLATE=isolate)


def test_a_part_nothing_reaches_is_not_compiled(tmp_path):
    """stage_b's part (planned before optimisation) dropped: two modules, two objects,
    stage_b defined in neither; the values exact (two counted calls a call)."""
    body = r"""
        f = ez.llvm_ir(t.UNREACHED, "f")
        a, b, c = (t._stage_value(0.5, *k) for k in t.STAGES.values())
        for call in (1, 2):
            got = f(0.5)
            assert got == ((a + 0.0) + c) + 2.0 * call, (call, got)
        built = f._primal._compiled.artifact
        ir = f._primal.inspect_llvm(optimized=True)
        assert ir.count(t.MODULE_START) == 2, ir.count(t.MODULE_START)
        assert not re.search(r"^define [^\n]*@stage_b\(", ir, re.M)
        assert built.object.startswith(b"\x7fEZPYOBJ")
        assert int.from_bytes(built.object[8:16], "little") == 2
        """
    _in_new_process(body, tmp_path, ENZYME_PY_CODEGEN_THREADS="4")


def test_a_small_root_joins_the_entrys_part(tmp_path):
    """stage_d (a root of 20 instructions) goes to the entry's part, not to stage_a's
    or stage_b's (the least loaded once those are dealt); three parts; the
    values exact (four counted calls a call, the fourth after the entry reads them)."""
    body = r"""
        f = ez.llvm_ir(t.WITH_SMALL_ROOT, "f")
        a, b, c = (t._stage_value(0.5, *k) for k in t.STAGES.values())
        d = t._stage_value(0.5, *t.SMALL_STAGE, steps=t.SMALL_STEPS)
        for call in (1, 2):
            got = f(0.5)
            # @calls is read before stage_d counts its call.
            assert got == (((a + b) + c) + d) + (4.0 * call - 1.0), (call, got)
        ir = f._primal.inspect_llvm(optimized=True)
        modules = ir.split(t.MODULE_START)[1:]
        assert len(modules) == 3, len(modules)
        # In the entry's part it is inlined where its address is loaded back (so
        # not defined there either); in another part, the entry's would declare it.
        assert "@stage_d(" not in modules[0], modules[0][:3000]
        define_d = re.compile(r"^define [^\n]*@stage_d\(", re.M)
        assert not any(define_d.search(m) for m in modules[1:])
        """
    _in_new_process(body, tmp_path, ENZYME_PY_CODEGEN_THREADS="4")


def test_one_thread_keeps_one_module(tmp_path):
    body = """
        f = ez.llvm_ir(t.SOURCE, "f")
        assert f(0.5) == t.expected(0.5, 1)
        built = f._primal._compiled.artifact
        assert f._primal.inspect_llvm(optimized=True).count(t.MODULE_START) == 1
        assert built.object.startswith(b"\\x7fELF")
        """
    _in_new_process(body, tmp_path, ENZYME_PY_CODEGEN_THREADS="1")


def test_gmm_prange_entry_and_reverse_chunk_built_apart(tmp_path):
    """GMM prange's derivative: the entry's part declares the reverse chunk another
    part defines; the forward launch nothing reads dropped, its chunk with it; the
    gradient the same as the one-module build's and central differences'."""
    pytest.importorskip("numba")
    body = """
        import os
        sys.path.insert(0, os.path.dirname({tests!r}))
        from test_split_codegen import gmm_prange_derivative_checked
        df, args = gmm_prange_derivative_checked()
        ir = df.inspect_llvm(optimized=True)
        modules = ir.split(t.MODULE_START)[1:]
        assert len(modules) == {parts}, len(modules)
        if {parts} == 2:
            assert "declare i32 @__enzyme_py_parfor_0.reverse(" in modules[0]
            assert "@__enzyme_py_parfor_0.reverse(" in modules[1].split("define", 1)[1]
        assert "__enzyme_py_parfor_0.chunk(" not in ir
        np.save({out!r}, np.concatenate([args[k].ravel() for k in (1, 3, 5)]))
        """
    tests = os.path.dirname(__file__)
    results = []
    for threads, parts in (("2", 2), ("1", 1)):
        out = str(tmp_path / f"gradient{threads}.npy")
        code = body.format(tests=tests, parts=parts, out=out)
        _in_new_process(code, tmp_path / threads, ENZYME_PY_CODEGEN_THREADS=threads)
        results.append(np.load(out))
    np.testing.assert_allclose(results[0], results[1], rtol=1e-12, atol=1e-14)
