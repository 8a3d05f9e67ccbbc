"""``Module.copy``, ``Module.drop_param_memory_attributes``, ``Module.settle_flags`` and
the functions ``Module.optimize`` and ``Module.simplify_for_enzyme`` leave alone
(src/kernel_ir.h, src/llvm_util.h): what a prange derivative's preparation
(``threaded_module``) asks of the module Enzyme's marker pass returned, parsed once,
instead of editing its text and parsing it again, and what it simplifies."""

import re

import pytest

from enzyme_py.frontends.ir import parse_module

pytestmark = pytest.mark.needs_enzyme

MODULE = r"""
@K.copy.2 = global i1 true
@K.copy.5 = global i1 true
@count = global i64 0

declare void @opaque(double* readonly)

define internal double @body(double* readonly %p, double* writeonly %q, i8* readnone %r) {
  %v = load double, double* %p
  store double %v, double* %q
  ret double %v
}

define double @caller(double* noalias readonly %p, double* %q) {
  %v = call double @body(double* readonly %p, double* %q, i8* null)
  call void @opaque(double* %p)
  ret double %v
}
"""

_MEMORY = re.compile(r" (readonly|readnone|writeonly)\b")


def _define_lines_stripped(text: str) -> str:
    """What the attribute dropping did before (threaded_module, until 2026-12-07): the
    memory attributes taken off every ``define`` line of the text."""
    return "\n".join(
        _MEMORY.sub("", line) if line.startswith("define ") else line for line in text.split("\n")
    )


def test_copy_is_a_module_of_its_own():
    module = parse_module(MODULE).native
    copy = module.copy()
    assert copy.ir() == module.ir()
    copy.drop_param_memory_attributes()
    assert copy.ir() != module.ir()
    assert "double* readonly %p, double* writeonly %q" in module.ir()


def test_memory_attributes_dropped_from_definitions_only():
    module = parse_module(MODULE).native
    module.drop_param_memory_attributes()
    text = module.ir()
    assert "define internal double @body(double* %p, double* %q, i8* %r)" in text
    assert re.search(r"define double @caller\(double\* noalias %p, double\* %q\)", text)
    # Declarations and call sites keep theirs.
    assert "declare void @opaque(double* readonly)" in text
    assert "call double @body(double* readonly %p" in text
    printed = parse_module(MODULE).native.ir()
    assert text == parse_module(_define_lines_stripped(printed)).native.ir()


def test_flags_made_constants():
    module = parse_module(MODULE).native
    module.settle_flags([("K.copy.2", False), ("K.copy.5", True)])
    text = module.ir()
    assert "@K.copy.2 = internal constant i1 false" in text
    assert "@K.copy.5 = internal constant i1 true" in text
    assert "@count = global i64 0" in text


@pytest.mark.parametrize(
    "name", ["K.copy.9", "count", "opaque"], ids=["missing", "not i1", "a function"]
)
def test_settle_flags_refuses_what_is_not_an_i1_variable(name):
    module = parse_module(MODULE).native
    with pytest.raises(RuntimeError, match=f"no i1 variable named '{name}'"):
        module.settle_flags([(name, True)])


SIMPLIFIABLE = r"""
define internal i64 @twice(i64 %x) {
  %slot = alloca i64
  store i64 %x, i64* %slot
  %v = load i64, i64* %slot
  %r = add i64 %v, %v
  ret i64 %r
}

define i64 @glue(i64 %x) {
  %slot = alloca i64
  store i64 %x, i64* %slot
  %v = load i64, i64* %slot
  %r = call i64 @twice(i64 %v)
  ret i64 %r
}

define i64 @kept_inline(i64 %x) noinline {
  %slot = alloca i64
  store i64 %x, i64* %slot
  %v = load i64, i64* %slot
  ret i64 %v
}
"""


def _function(text: str, name: str) -> str:
    start = text.index(f"@{name}(")
    return text[text.rindex("\n", 0, start) + 1 : text.index("\n}\n", start)]


def _attributes(text: str, name: str) -> str:
    """The function attributes of ``name``'s definition in ``text`` (its group's)."""
    group = re.search(r"\) (#\d+) \{$", _function(text, name).splitlines()[0])
    if group is None:
        return ""
    found = re.search(rf"^attributes {group.group(1)} = \{{ ([^}}]*) \}}", text, re.M)
    return found.group(1) if found else ""


@pytest.mark.parametrize("how", ["optimize", "simplify_for_enzyme"])
def test_the_functions_left_alone_keep_their_code_and_attributes(how):
    """The pipelines skip the functions named in ``leaving`` (optnone while they run:
    the prange launches' glue, which Enzyme never reads); the others are simplified;
    afterwards no function carries an optnone, and one that was noinline before
    stays so."""
    module = parse_module(SIMPLIFIABLE)
    if how == "optimize":
        module.native.optimize("function(sroa)", leaving=["glue", "kept_inline", "absent"])
    else:
        module.native.simplify_for_enzyme(leaving=["glue", "kept_inline", "absent"])
    text = module.native.ir()
    assert "alloca" not in _function(text, "twice")
    assert "alloca" in _function(text, "glue") and "alloca" in _function(text, "kept_inline")
    assert "optnone" not in text
    # Only kept_inline is noinline, as before.
    assert "noinline" in _attributes(text, "kept_inline")
    assert "noinline" not in _attributes(text, "glue") + _attributes(text, "twice")
    # Without `leaving`, glue is simplified too.
    everything = parse_module(SIMPLIFIABLE)
    everything.native.optimize("function(sroa)")
    assert "alloca" not in _function(everything.native.ir(), "glue")
