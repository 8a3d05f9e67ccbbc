"""``declares`` (python/enzyme_py/frontends/_ir_lines.py) answers as the pattern it
replaced, ``^declare [^\\n]*@name\\(`` over the whole text, on the lines that tell them
apart: a call naming the function, a longer name, a declaration not at a line start,
the first and last line, a definition; and which global variables
``_numba_parfor._copy_flag_of`` takes for snapshot flags."""

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


@pytest.mark.parametrize(
    ("variable", "flag"),
    [
        ("__enzyme_py_parfor_0.copy.3", True),
        ("__enzyme_py_parfor_2.copy.12", True),
        ("__enzyme_py_parfor_1.copy.2", False),  # not a launch asked about
        ("__enzyme_py_parfor_0.keep", False),
        ("__enzyme_py_parfor_0.copy.", False),
        ("__enzyme_py_parfor_0.copy.x", False),
        ("__enzyme_py_parfor_0.copy.3.1", False),
        ("__enzyme_py_parfor_0.body.copy.3", False),
        ("copy.3", False),
    ],
)
def test_copy_flag_of(variable, flag):
    """threaded_module's snapshot flags: ``K.copy.<slot>`` of the launches named."""
    from enzyme_py.frontends._numba_parfor import _copy_flag_of

    assert _copy_flag_of(variable, ["__enzyme_py_parfor_0", "__enzyme_py_parfor_2"]) is flag
