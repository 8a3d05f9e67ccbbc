"""Enzyme's clang-plugin interface inside ez.c / ez.cpp source: each marker is refused
with a CompileError naming it and what to write with enzyme_py instead, never ignored
(issue 18, item 1, detection)."""

import re

import numpy as np
import pytest

import enzyme_py as ez

pytestmark = pytest.mark.needs_enzyme

SQUARE = "double sq(double x) { return x * x; }\n"


@pytest.mark.parametrize(
    ("source", "marker", "advice"),
    [
        (
            "int enzyme_dup, enzyme_const;\ndouble __enzyme_autodiff(void *, ...);\n"
            "double dsq(double x) { return __enzyme_autodiff((void *)sq, x); }",
            "__enzyme_autodiff",
            r"ez.autodiff\(m.f, ez.Reverse, ez.Duplicated, ez.Const, ez.Active\)",
        ),
        (
            "double __enzyme_fwddiff(void *, ...);\n"
            "double tsq(double x) { return __enzyme_fwddiff((void *)sq, x, 1.0); }",
            "__enzyme_fwddiff",
            "ez.Forward with ez.Dual",
        ),
        (
            "void *__enzyme_augmentfwd(void *, ...);\n"
            "void *aug(double x) { return __enzyme_augmentfwd((void *)sq, x); }",
            "__enzyme_augmentfwd",
            "combined reverse derivatives",
        ),
        (
            "extern int enzyme_dup;\ndouble __enzyme_autodiff(void *, ...);\n"
            "void g(double *x, double *dx) { __enzyme_autodiff((void *)sq, enzyme_dup, x, dx); }",
            "enzyme_dup",
            r"ez.Duplicated \(ez.Dual in Forward mode\)",
        ),
        ("int enzyme_width = 4;", "enzyme_width", "width=k"),
        ("int enzyme_out;", "enzyme_out", "ez.Active"),
        ("int enzyme_dupnoneed;", "enzyme_dupnoneed", "ez.DuplicatedOnly"),
        (
            "double aug_sq(double x) { return x; }\ndouble rev_sq(double x, double d) "
            "{ return d; }\nvoid *__enzyme_register_gradient_sq[3] = "
            "{(void *)sq, (void *)aug_sq, (void *)rev_sq};",
            "__enzyme_register_gradient_sq",
            r"ez.register_gradient\('sq', augment=m.aug_sq, gradient=m.rev_sq\)",
        ),
        (
            "double fwd_sq(double x, double dx) { return 2 * x * dx; }\n"
            "void *__enzyme_register_derivative_sq[2] = {(void *)sq, (void *)fwd_sq};",
            "__enzyme_register_derivative_sq",
            r"ez.register_derivative\('sq', forward=m.fwd_sq\)",
        ),
        (
            "void *__enzyme_inactivefn[1] = {(void *)sq};",
            "__enzyme_inactivefn",
            "no inactivity marker: pass the inputs it should not differentiate as ez.Const",
        ),
        (
            'void *__enzyme_function_like[2] = {(void *)sq, (void *)"sqrt"};',
            "__enzyme_function_like",
            "give the function rules instead",
        ),
        (
            "__attribute__((enzyme_inactive)) double logger(double x) { return x; }",
            r"__attribute__\(\(enzyme_inactive\)\)",
            "rule with a zero derivative",
        ),
    ],
)
def test_marker_is_refused(source, marker, advice):
    with pytest.raises(ez.CompileError, match="Enzyme's clang-plugin interface") as info:
        ez.c(SQUARE + source)
    message = str(info.value)
    assert re.search(marker, message), message
    assert re.search(advice, message), message


def test_attribute_refused_even_with_warnings_off():
    with pytest.raises(ez.CompileError, match=r"enzyme_inactive"):
        ez.c("__attribute__((enzyme_inactive)) double f(double x) { return x; }", ["-w"])


def test_cpp_markers_are_refused():
    # Mangled (no extern "C"): Enzyme matches the name inside, and so does enzyme_py.
    src = (
        "double __enzyme_autodiff(void *, double);\n"
        "double sq(double x) { return x * x; }\n"
        "double dsq(double x) { return __enzyme_autodiff((void *)sq, x); }"
    )
    with pytest.raises(ez.CompileError, match=r"_Z17__enzyme_autodiffPvd: differentiate"):
        ez.cpp(src)
    with pytest.raises(ez.CompileError, match="enzyme_inactive"):
        ez.cpp("[[enzyme_inactive]] double f(double x) { return x; }")


def test_look_alike_names_are_not_markers():
    # Names that merely start with "enzyme" are the user's own.
    m = ez.c(
        "double enzyme_rate = 2.0;\n"
        "double enzyme_scale(const double *x, int n) { double s = 0;"
        " for (int i = 0; i < n; ++i) s += enzyme_rate * x[i] * x[i]; return s; }"
    )
    x = np.array([1.0, 2.0])
    assert m.enzyme_scale(x, 2) == 10.0
    np.testing.assert_allclose(ez.grad(m.enzyme_scale)(x, 2), 4.0 * x)
