"""clang's warnings from ez.c / ez.cpp reach the user as ez.CompilerWarning."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import enzyme_py as ez

UNINITIALISED = """
double total(const double *x, int n) {
    double acc;                      /* never set: clang -O2 makes it whatever it likes */
    for (int i = 0; i < n; ++i) acc += x[i] * x[i];
    return acc;
}
"""

CLEAN = """
double total(const double *x, int n) {
    double acc = 0.0;
    for (int i = 0; i < n; ++i) acc += x[i] * x[i];
    return acc;
}
"""


def test_compiler_warning_is_a_user_warning_in_every_build():
    assert issubclass(ez.CompilerWarning, UserWarning)
    assert "CompilerWarning" in ez.__all__
    assert ez.CompilerWarning is ez.core.CompilerWarning


@pytest.mark.needs_enzyme
def test_an_uninitialised_variable_warns_with_its_name():
    with pytest.warns(ez.CompilerWarning, match="variable 'acc' is uninitialized") as caught:
        m = ez.c(UNINITIALISED)
    (w,) = [w for w in caught if issubclass(w.category, ez.CompilerWarning)]
    message = str(w.message)
    assert message.startswith("clang's warnings for the C source:\n")
    assert "source.c:4:" in message and "[-Wuninitialized]" in message
    assert "warning generated" not in message  # clang's tally is left out
    assert w.filename == __file__  # reported at the call of ez.c
    assert "total" in m.functions()  # a warning, not an error: the module is usable


@pytest.mark.needs_enzyme
def test_clean_source_compiles_without_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = ez.c(CLEAN)
    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(ez.grad(m.total)(x, 3), 2 * x)


@pytest.mark.needs_enzyme
def test_user_flags_add_and_silence_warnings():
    unused = "double f(double x) { int unused = 3; return x; }"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ez.c(unused)  # -Wunused-variable is not on by default
        ez.c(UNINITIALISED, flags=["-w"])
        ez.c(UNINITIALISED, flags=["-Wno-uninitialized"])
    with pytest.warns(ez.CompilerWarning, match=r"unused variable 'unused' \[-Wunused-variable\]"):
        ez.c(unused, flags=["-Wall"])


@pytest.mark.needs_enzyme
def test_cpp_warnings_name_the_language():
    source = 'extern "C" double g(double x) { double y; return y * x; }'
    with pytest.warns(ez.CompilerWarning, match="(?s)C\\+\\+ source:.*variable 'y'"):
        ez.cpp(source)


@pytest.mark.needs_enzyme
def test_errors_stay_compile_errors():
    with pytest.raises(ez.CompileError, match="error: use of undeclared identifier 'z'"):
        ez.c("double f(double x) { return z; }")
    with pytest.raises(ez.CompileError, match="variable 'acc' is uninitialized"):
        ez.c(UNINITIALISED, flags=["-Werror"])
