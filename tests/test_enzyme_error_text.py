"""Enzyme's failures reach the user as its own words, without the dump of the function
it may print with them (half a megabyte for a second derivative through
np.linalg.solve); the error's ``enzyme_output`` keeps the whole text."""

from __future__ import annotations

import numba
import numpy as np
import pytest

import enzyme_py as ez
from enzyme_py._build_errors import _shortened

DUMP = "\n".join(
    [
        "no derivative: ; Function Attrs: mustprogress willreturn",
        "define void @f(double* %x) {",
        "entry:",
        *[f"  %v{i} = fadd double %a, %b" for i in range(400)],
        "for.body:                      ; preds = %entry",
        "}",
        *[f" constantinst[  %v{i} = fadd double %a, %b] = 1 val:1 type: {{}}" for i in range(400)],
        "cannot handle unknown binary operator:   %m = mul i64 %a, %b",
        "python: Enzyme/GradientUtils.cpp:1641: Assertion `found' failed.",
    ]
)


def test_a_dump_is_left_out_and_enzymes_last_words_kept():
    short = _shortened(DUMP)
    assert len(short) < 700, short
    lines = short.splitlines()
    assert lines[0] == "no derivative: ; Function Attrs: mustprogress willreturn [...]"
    assert "804 lines of Enzyme's dump" in lines[1]  # all but the first and last two
    assert lines[2:] == [  # its own words: no label, definition or dump line
        "cannot handle unknown binary operator:   %m = mul i64 %a, %b",
        "python: Enzyme/GradientUtils.cpp:1641: Assertion `found' failed.",
    ]


def test_short_messages_are_left_whole():
    message = "mixed activity: Mismatched activity for:   store double* %x\nmore"
    assert _shortened(message) == message


@numba.njit(cache=False)
def solved(a, b):
    m = a @ a.T + 3.0 * np.eye(a.shape[0])
    return np.linalg.solve(m, b) @ b


@pytest.mark.needs_enzyme
def test_a_second_derivative_enzyme_refuses_reads_in_a_few_lines():
    rng = np.random.default_rng(4)
    a, b = rng.normal(size=(4, 4)), rng.normal(size=4)
    with pytest.raises(ez.EnzymeError) as caught:
        ez.hessian(solved, argnums=1)(a, b)
    message = str(caught.value)
    assert len(message) < 2000, message[:3000]
    assert "cannot handle unknown binary operator" in message
    assert "(while differentiating 'reverse derivative of solved'" in message
    assert len(caught.value.enzyme_output) > 100 * len(message)
