"""``Module.keep_reached`` and ``Module.read_only_params`` (src/kernel_ir.h): what LLVM
infers of a function is asked of a copy holding only what the function reaches."""

import re

import pytest

from enzyme_py import _state
from enzyme_py.frontends.ir import parse_module

pytestmark = pytest.mark.needs_enzyme

MODULE = r"""
declare void @opaque(double*)

define internal double @reads(double* %p) {
  %v = load double, double* %p
  ret double %v
}

define internal void @writes(double* %p) {
  store double 1.0, double* %p
  ret void
}

define internal double @reads_through_callee(double* %p, double* %q) {
  %v = call double @reads(double* %p)
  call void @writes(double* %q)
  ret double %v
}

define internal double @cast_callee(i8* %p) {
  %d = bitcast i8* %p to double*
  %v = load double, double* %d
  ret double %v
}

define double @calls_through_a_cast(double* %p) {
  %v = call double bitcast (double (i8*)* @cast_callee to double (double*)*)(double* %p)
  ret double %v
}

define void @unrelated(double* %p) {
  call void @opaque(double* %p)
  ret void
}

define internal void @aliased(double* %p) {
  store double 2.0, double* %p
  ret void
}

@alias = internal alias void (double*), void (double*)* @aliased

define double @caller(double* %p, double* %q) {
  %v = call double @reads_through_callee(double* %p, double* %q)
  ret double %v
}
"""

_DEFINED = re.compile(r"^define [^\n]*@([-\w.$]+)\(", re.M)


def test_an_internal_function_whose_callers_are_dropped_is_still_inferred():
    # 'reads' is internal and only 'reads_through_callee' calls it: with the callers'
    # bodies deleted, LLVM's call-graph passes would not visit it unless it is a root
    # made external, and the answer would be "may write" (every parameter copied).
    module = parse_module(MODULE)
    assert module.native.read_only_params("reads") == [True]
    assert module.native.read_only_params("writes") == [False]
    # Through its callees, which are kept: p only read, q written.
    assert module.native.read_only_params("reads_through_callee") == [True, False]
    assert module.native.read_only_params("caller") == [True, False]
    # The callee of a call through a bitcast is reached too.
    assert module.native.read_only_params("calls_through_a_cast") == [True]
    # A declaration's callee: unknown, so writable.
    assert module.native.read_only_params("unrelated") == [False]


def _inferred_on_the_whole_module(name: str) -> list[bool]:
    """The same inference with every body kept: the parameters' attributes as LLVM
    prints them on the definition."""
    whole = parse_module(MODULE)
    whole.native.optimize("function(sroa,early-cse),cgscc(function-attrs)")
    define = re.search(rf"^define [^\n]*@{name}\((.*)\)[^\n]*\{{$", whole.native.ir(), re.M)
    assert define is not None
    params = define.group(1).split(", ")
    return [bool(re.search(r"\b(readonly|readnone)\b", p)) for p in params]


def test_the_answers_are_those_of_the_whole_module():
    module = parse_module(MODULE)
    names = ("caller", "reads_through_callee", "reads", "writes", "calls_through_a_cast")
    for name in (*names, "unrelated"):
        expected = _inferred_on_the_whole_module(name)
        assert module.native.read_only_params(name) == expected, name
        assert _state.native.read_only_params(MODULE, name) == expected, name


def test_read_only_params_leaves_the_module_as_it_was():
    module = parse_module(MODULE)
    before = module.native.ir()
    module.native.read_only_params("reads")
    assert module.native.ir() == before


def test_keep_reached_deletes_only_what_no_root_reaches():
    module = parse_module(MODULE)
    module.native.keep_reached(["caller"])
    text = module.native.ir()
    # caller, what it calls and what that calls; the aliased function keeps its body
    assert set(_DEFINED.findall(text)) == {
        "caller",
        "reads_through_callee",
        "reads",
        "writes",
        "aliased",
    }
    assert re.search(r"^declare void @unrelated\(double\*", text, re.M)
    assert re.search(r"^declare (dso_local )?double @cast_callee\(i8\*", text, re.M)
    parse_module(text)  # still a valid module


def test_keep_reached_refuses_an_unknown_root():
    module = parse_module(MODULE)
    with pytest.raises(RuntimeError, match="missing"):
        module.native.keep_reached(["missing"])
