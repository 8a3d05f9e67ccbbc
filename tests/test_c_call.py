"""Calling C, C++ and LLVM IR functions directly: the primal, without Enzyme (issue 18,
item 2), with the argument checks derivatives make."""

import pickle

import numpy as np
import pytest

import enzyme_py as ez

from conftest import run_python

pytestmark = pytest.mark.needs_enzyme

SOURCE = r"""
#include <math.h>
double energy(const double *x, int n) {
    double e = 0.0;
    for (int i = 0; i < n; ++i) e += x[i] * x[i] * sin(x[i]);
    return e;
}
void square_sin(double *out, const double *x, long n) {
    for (long i = 0; i < n; ++i) out[i] = x[i] * x[i] * sin(x[i]);
}
float sum_f(const float *x, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; ++i) s += x[i];
    return s;
}
long count_odd(const int *k, int n) {
    long c = 0;
    for (int i = 0; i < n; ++i) c += k[i] % 2 != 0;
    return c;
}
typedef struct { double lo, hi; } range;
range bounds(const double *x, int n) {
    range r = {x[0], x[0]};
    for (int i = 1; i < n; ++i) { r.lo = fmin(r.lo, x[i]); r.hi = fmax(r.hi, x[i]); }
    return r;
}
double scaled(double a, double b) { return a * exp(b); }
"""


@pytest.fixture(scope="module")
def m():
    return ez.c(SOURCE)


def test_values_against_numpy(m):
    x = np.linspace(-1.0, 2.0, 7)
    assert m.energy(x, x.size) == pytest.approx(float(np.sum(x * x * np.sin(x))), rel=1e-14)
    assert m.scaled(1.5, 0.25) == pytest.approx(1.5 * np.exp(0.25), rel=1e-15)
    assert m.sum_f(np.arange(4, dtype=np.float32), 4) == 6.0
    assert m.count_odd(np.arange(7, dtype=np.int32), 7) == 3
    assert m.bounds(x, x.size) == pytest.approx((x.min(), x.max()))


def test_void_function_writes_its_output(m):
    x = np.linspace(0.1, 2.0, 6)
    out = np.full_like(x, np.nan)
    assert m.square_sin(out, x, x.size) is None
    np.testing.assert_allclose(out, x * x * np.sin(x), rtol=1e-15)
    x2 = np.linspace(0.0, 1.0, 12).reshape(3, 4)  # any rank: its data pointer
    out2 = np.zeros_like(x2)
    m.square_sin(out2, x2, x2.size)
    np.testing.assert_allclose(out2, x2 * x2 * np.sin(x2), rtol=1e-15)


def test_arguments_are_checked(m):
    x = np.linspace(0.0, 1.0, 4)
    with pytest.raises(ValueError, match=r"parameter 0 \('x'\) of 'energy' needs dtype float64"):
        m.energy(x.astype(np.float32), 4)
    with pytest.raises(ValueError, match=r"'x'\) of 'sum_f' needs dtype float32"):
        m.sum_f(x, 4)
    with pytest.raises(ValueError, match=r"'k'\) of 'count_odd' needs dtype int32"):
        m.count_odd(np.arange(3), 3)
    with pytest.raises(TypeError, match=r"'energy' takes 2 arguments \(x, n\); got 3"):
        m.energy(x, 4, 5)
    with pytest.raises(TypeError, match=r"'x'\) of 'energy' is an array; got str"):
        m.energy("x", 4)
    with pytest.raises(ValueError, match=r"'x'\) of 'square_sin' must be C-contiguous"):
        m.square_sin(np.zeros(2), np.linspace(0.0, 1.0, 4)[::2], 2)
    read_only = np.zeros(4)
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match=r"'out'\) of 'square_sin' is read-only"):
        m.square_sin(read_only, x, 4)


def test_primal_agrees_with_the_derivatives_value(m):
    x = np.linspace(0.3, 1.1, 5)
    df = ez.autodiff(m.energy, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)
    (value,) = df(x, np.zeros_like(x), 5, 1.0)
    assert m.energy(x, 5) == value


def test_cpp_and_ir_functions_are_callable():
    cpp = ez.cpp(
        "#include <cmath>\n"
        "template <class T> T cube(T x) { return x * x * x; }\n"
        "template double cube<double>(double);\n"
        'extern "C" double hyp(double a, double b) { return std::hypot(a, b); }'
    )
    assert cpp.cube(1.5) == 1.5**3
    assert cpp.hyp(3.0, 4.0) == 5.0
    ir = ez.llvm_ir(
        "define double @twice_plus(double %x, double %y) {\n"
        "  %d = fmul double %x, 2.0\n  %s = fadd double %d, %y\n  ret double %s\n}",
        "twice_plus",
    )
    assert ir(1.25, 0.5) == 3.0


def test_pickled_function_is_callable(m):
    x = np.linspace(0.0, 1.0, 5)
    again = pickle.loads(pickle.dumps(m.energy))
    assert again(x, 5) == m.energy(x, 5)
    blob = pickle.dumps(m.square_sin).hex()
    proc = run_python(
        "import pickle, numpy as np\n"
        f"f = pickle.loads(bytes.fromhex('{blob}'))\n"
        "x = np.linspace(0.1, 1.0, 4); out = np.zeros(4); f(out, x, 4)\n"
        "print(float(np.abs(out - x * x * np.sin(x)).max()))"
    )
    assert proc.returncode == 0, proc.stderr
    assert float(proc.stdout) < 1e-15
