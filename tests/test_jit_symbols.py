"""Derivatives whose code calls functions: from libm, C++'s runtime, or nowhere; and
the profiling aid that names loaded code for perf."""

import os
import subprocess
import sys

import numpy as np
import pytest

import enzyme_py as ez

pytestmark = pytest.mark.needs_enzyme


def test_a_derivative_calling_a_function_nobody_defines_is_an_enzyme_error_naming_it():
    # Enzyme's derivative of tgamma calls digamma, which libm does not have (enzyme_py's
    # rule for tgamma stands aside where the code takes its address, as here). Loading
    # it failed with ORC's generic message, and again with "Duplicate definition".
    m = ez.c(
        "#include <math.h>\ndouble (*const kept)(double) = tgamma;\n"
        "double gamma_of(double x) { return tgamma(x); }"
    )
    for _ in range(2):  # the failed code is unloaded: the same error again
        with pytest.raises(
            ez.EnzymeError, match=r"calls functions this process does not have: digamma"
        ) as caught:
            ez.grad(m.gamma_of)(1.5)
        advice = str(caught.value).split("What to do: ")[1]
        assert "call them directly" in advice
        # Advice for this code only: nothing of Numba's, C++'s or OpenMP's.
        assert not any(word in advice for word in ("Numba", "@njit", "cfunc", "C++", "OpenMP"))
    m = ez.c("#include <math.h>\ndouble fine(double x) { return x * sin(x); }")
    assert ez.grad(m.fine)(1.5) == pytest.approx(np.sin(1.5) + 1.5 * np.cos(1.5), rel=1e-15)


def test_ir_calling_an_undefined_function_is_an_enzyme_error_naming_it():
    f = ez.llvm_ir(
        """
declare double @nowhere_defined(double)
define double @twice(double %x) {
  %y = call double @nowhere_defined(double %x)
  %z = fmul double %y, 2.0
  ret double %z
}
""",
        "twice",
    )
    with pytest.raises(ez.EnzymeError, match="does not have: nowhere_defined") as caught:
        ez.autodiff(f, ez.Forward, ez.Const, ez.Const)(1.0)
    advice = str(caught.value).split("What to do: ")[1]
    assert "define it in the source or IR given to enzyme_py" in advice
    assert not any(word in advice for word in ("Numba", "@njit", "cfunc", "digamma"))


def test_cpp_code_using_the_standard_library_differentiates():
    # operator new, std::vector's length error: C++'s runtime, loaded by enzyme_py's
    # own extension but not visible to the JIT until made so.
    m = ez.cpp(
        """
#include <cmath>
#include <vector>
extern "C" double weighted(const double *x, int n) {
    std::vector<double> copy(x, x + n);
    double s = 0.0;
    for (double v : copy) s += std::sin(v) * v;
    return s;
}
"""
    )
    x = np.linspace(0.1, 1.0, 5)
    np.testing.assert_allclose(ez.grad(m.weighted)(x, 5), np.cos(x) * x + np.sin(x), rtol=1e-14)


def test_enzyme_py_perf_names_loaded_code_for_perf(tmp_path):
    # The profiling aid (ENZYME_PY_PERF=1): a perf map line per loaded function and a
    # copy of its code, in a fresh process (the listener is set up with the JIT).
    script = (
        "import os, enzyme_py as ez\n"
        "m = ez.c('double cube(double x) { return x * x * x; }')\n"
        "assert ez.grad(m.cube)(2.0) == 12.0\n"
        "print(os.getpid())\n"
    )
    env = dict(os.environ, ENZYME_PY_PERF="1", ENZYME_PY_CACHE_DIR=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    pid = done.stdout.split()[-1]
    map_path = f"/tmp/perf-{pid}.map"
    try:
        with open(map_path) as kept:
            lines = [line.split() for line in kept.read().splitlines()]
        entries = [(int(a, 16), int(n, 16)) for a, n, name in lines if "__enzyme_py_entry" in name]
        assert entries, lines
        for address, size in entries:
            code = f"/tmp/perf-{pid}-{address:x}.bin"
            assert os.path.getsize(code) == size > 0
            os.remove(code)
    finally:
        os.remove(map_path)
