"""``declares`` (python/enzyme_py/frontends/_ir_lines.py) answers as the pattern it
replaced, ``^declare [^\\n]*@name\\(`` over the whole text, on the lines that tell them
apart: a call naming the function, a longer name, a declaration not at a line start,
the first and last line, a definition; and ``_numba_parfor._copy_flags`` as the
pattern it replaced."""

from __future__ import annotations

import re

import pytest

from enzyme_py.frontends._ir_lines import declares

TEXTS = [
    "declare double @lgamma(double)",
    "; ModuleID = 'x'\ndeclare i8* @malloc(i64)\n",
    "define void @f() {\n  %a = call i8* @malloc(i64 8)\n  ret void\n}\n",
    "define void @f() {\n  %a = call i8* @malloc(i64 8)\n}\ndeclare noalias i8* @malloc(i64)",
    "declare void @freeze(i8*)\n  declare void @free(i8*)\n",
    "declare void @free.1(i8*)\ndefine void @free(i8* %p) {\n  ret void\n}\n",
    '  call void @free(i8* %p)\n; declare void @free(i8*)\ndeclare void @"free"(i8*)\n',
    "x\ndeclare void @g(void (i8*)* @free(i8* null))",
    "",
]
NAMES = ["malloc", "free", "lgamma", "freeze", "g", "free.1"]


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("name", NAMES)
def test_declares_answers_as_the_pattern(text, name):
    pattern = re.search(rf"^declare [^\n]*@{re.escape(name)}\(", text, re.M)
    assert declares(text, name) == (pattern is not None)


def test_declares_examples():
    assert declares("a\ndeclare i8* @malloc(i64)\n", "malloc")
    assert not declares("  %p = call i8* @malloc(i64 8)\n", "malloc")
    assert not declares("declare void @freeze(i8*)\n", "free")


COPY_FLAG_TEXTS = [
    "@__enzyme_py_parfor_0.copy.3 = global i1 true\nx",
    "x\n@__enzyme_py_parfor_1.copy.2 = global i1 true",
    "@__enzyme_py_parfor_0.keep = global i8* null\n"
    "@__enzyme_py_parfor_0.copy.1 = internal global i1 true\n"
    "  @__enzyme_py_parfor_0.copy.9 = global i1 true\n"
    "@__enzyme_py_parfor_0.copy.4 = global i1 false\n"
    "@__enzyme_py_parfor_2.copy.12 = global i1 true, align 1",
    "",
    "define void @f() {\n  %a = load i1, i1* @__enzyme_py_parfor_0.copy.3\n}",
]


@pytest.mark.parametrize("text", COPY_FLAG_TEXTS)
def test_copy_flags_as_the_pattern(text):
    """threaded_module's snapshot flags (``_numba_parfor._copy_flags``), found from the
    lines starting with a launch's name, are what the pattern over every line found."""
    from enzyme_py.frontends._numba_parfor import _copy_flags

    pattern = re.compile(
        r"^(@__enzyme_py_parfor_\d+\.copy\.\d+) = [^\n]*global i1 true[^\n]*$", re.M
    )
    assert _copy_flags(text) == [m.group(1) for m in pattern.finditer(text)]


def test_copy_flags_example():
    from enzyme_py.frontends._numba_parfor import _copy_flags

    assert _copy_flags(COPY_FLAG_TEXTS[2]) == [
        "@__enzyme_py_parfor_0.copy.1",
        "@__enzyme_py_parfor_2.copy.12",
    ]
