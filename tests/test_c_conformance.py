"""C/C++ conformance: cases written from the maths of Enzyme's published integration
tests (enzyme/test/Integration: loops, nested loops, recursion, heap temporaries,
structs, control flow, custom rules), each compiled by ez.c with its defaults and
differentiated in reverse and forward mode against float64 central differences of the
function's own values (called directly, no Enzyme) or analytic values (issue 18, item 5).

The generic cases live in tests/c_cases/*.c: ``double NAME(double *x, int n)``, which may
overwrite x (each evaluation gets a fresh copy). Known Enzyme v0.0.289 limitations are
``xfail(strict=True)`` with the reason, and listed in the README.
"""

from pathlib import Path

import numpy as np
import pytest

import enzyme_py as ez

from reference import fd_gradient

pytestmark = pytest.mark.needs_enzyme

CASES_DIR = Path(__file__).parent / "c_cases"

# case -> (file, n, low, high): inputs uniform in [low, high) from a seed of its own.
CASES = {
    "loop_sum": ("loops.c", 2, 0.1, 0.9),
    "loop_double_nested": ("loops.c", 2, 0.1, 0.9),
    "loop_triple": ("loops.c", 2, 0.1, 0.9),
    "loop_triangular": ("loops.c", 7, 0.1, 0.9),
    "sum_until": ("loops.c", 8, 0.55, 0.95),
    "sum_until_while": ("loops.c", 8, 0.1, 0.6),
    "read_write_loop": ("loops.c", 10, 0.1, 0.9),
    "count_from_memory": ("loops.c", 6, 0.1, 0.9),
    "taylor_log": ("loops.c", 1, 0.1, 0.5),
    "series_cos": ("loops.c", 1, 0.2, 1.5),
    "integrate_euler": ("loops.c", 2, 0.5, 1.5),
    "integrate_rk4": ("loops.c", 2, 0.2, 0.8),
    "forward_solve": ("loops.c", 9, 0.1, 0.9),
    "insertion_sort_sum": ("loops.c", 9, 0.1, 0.9),
    "vector_max_min": ("loops.c", 9, 0.1, 0.9),
    "many_max": ("loops.c", 9, 0.1, 0.9),
    "many_div": ("loops.c", 6, 0.5, 1.5),
    "recursive_power": ("memory.c", 2, 0.5, 1.2),
    "recursive_sum": ("memory.c", 11, 0.1, 0.9),
    "recursive_tree": ("memory.c", 1, 0.2, 0.9),
    "malloc_temporary": ("memory.c", 7, 0.1, 0.9),
    "realloc_grow": ("memory.c", 11, 0.1, 0.9),
    "realloc_once": ("memory.c", 2, 0.1, 0.9),
    "aligned_temporary": ("memory.c", 8, 0.1, 0.9),
    "memcpy_copy": ("memory.c", 6, 0.1, 0.9),
    "struct_mixed": ("memory.c", 6, 0.1, 0.9),
    "struct_heap": ("memory.c", 6, 0.1, 0.9),
    "struct_return": ("memory.c", 2, 0.3, 1.2),
    "struct_array": ("memory.c", 12, 0.1, 0.9),
    "cache_before_overwrite": ("memory.c", 2, 0.3, 1.2),
    "goto_flow": ("memory.c", 2, 0.6, 0.95),
    "nested_branches": ("memory.c", 12, 0.0, 1.0),
    "newton_inverse": ("memory.c", 1, 0.5, 3.0),
    "fixed_point": ("memory.c", 2, 0.2, 0.9),
    "frexp_mantissa": ("memory.c", 1, 0.11, 0.19),
    "constant_table": ("memory.c", 8, 0.1, 0.9),
    "binops": ("memory.c", 2, 0.6, 0.9),
}


@pytest.fixture(scope="module")
def modules():
    return {name: ez.c((CASES_DIR / name).read_text()) for name in ("loops.c", "memory.c")}


def _input(name):
    _, n, low, high = CASES[name]
    seed = sum(map(ord, name))
    return np.random.default_rng(seed).uniform(low, high, n)


def _case(modules, name):
    fn = modules[CASES[name][0]][name]
    x = _input(name)
    n = x.size
    reference = fd_gradient(lambda z: fn(z.copy(), n), x)
    return fn, x, n, reference


@pytest.mark.parametrize("name", list(CASES))
def test_reverse(modules, name):
    fn, x, n, reference = _case(modules, name)
    dx = np.zeros_like(x)
    (value,) = ez.autodiff(fn, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)(x.copy(), dx, n, 1.0)
    assert value == pytest.approx(fn(x.copy(), n), rel=1e-14)
    scale = max(1.0, float(np.abs(reference).max()))
    np.testing.assert_allclose(dx, reference, rtol=1e-5, atol=1e-6 * scale)


@pytest.mark.parametrize("name", list(CASES))
def test_forward(modules, name):
    fn, x, n, reference = _case(modules, name)
    v = np.random.default_rng(1).normal(size=n)
    y, dy = ez.autodiff(fn, ez.Forward, ez.Dual, ez.Const, ez.Dual)(x.copy(), v.copy(), n)
    assert y == pytest.approx(fn(x.copy(), n), rel=1e-14)
    scale = max(1.0, float(np.abs(reference).max()))
    assert dy == pytest.approx(float(reference @ v), rel=1e-5, abs=1e-6 * scale)


RECURSIVE_SOURCE = """
double discounted(const double *x, int n) {
  if (n == 0) return 0.0;
  return x[n - 1] * x[n - 1] * x[0] + 0.5 * discounted(x, n - 1);
}
"""


def test_grad_of_a_recursive_function():
    # ez.grad's derivative zeroes a C pointer's shadow itself, its byte size a parameter
    # added to the derivative; a recursive derivative calls itself, so the caller zeroes
    # the shadow (adding the parameter raised an internal error).
    fn = ez.c(RECURSIVE_SOURCE)["discounted"]
    x = np.linspace(0.3, 1.2, 6)
    reference = fd_gradient(lambda z: fn(z, 6), x)
    np.testing.assert_allclose(ez.grad(fn)(x, 6), reference, rtol=1e-7)
    value, gradient = ez.value_and_grad(fn)(x, 6)
    assert value == pytest.approx(fn(x, 6), rel=1e-14)
    np.testing.assert_allclose(gradient, reference, rtol=1e-7)


def test_analytic_values(modules):
    # Enzyme's expected values where the maths gives them in closed form.
    loops, memory = modules["loops.c"], modules["memory.c"]
    grad = {}
    for name, module, x in [
        ("loop_sum", loops, np.array([2.0, 3.0])),
        ("loop_triple", loops, np.array([2.0, 3.0])),
        ("recursive_power", memory, np.array([1.1, 0.7])),
        ("newton_inverse", memory, np.array([2.0])),
        ("taylor_log", loops, np.array([0.3])),
    ]:
        dx = np.zeros_like(x)
        ez.autodiff(module[name], ez.Reverse, ez.Duplicated, ez.Const, ez.Active)(
            x, dx, x.size, 1.0
        )
        grad[name] = dx
    np.testing.assert_allclose(grad["loop_sum"], [100.0, 100.0], rtol=1e-15)
    np.testing.assert_allclose(grad["loop_triple"], [8000.0, 8000.0], rtol=1e-15)
    np.testing.assert_allclose(grad["recursive_power"], [7 * 1.1**6, 4 * 0.7**3], rtol=1e-14)
    y = memory.newton_inverse(np.array([2.0]), 1)  # y^3 + y = 2: y = 1
    assert y == pytest.approx(1.0, abs=1e-14)
    np.testing.assert_allclose(grad["newton_inverse"], [1 / (3 * y * y + 1)], rtol=1e-12)
    # -sum_{i<=40} t^i / i has derivative -sum t^(i-1) = -(1 - t^40) / (1 - t)
    np.testing.assert_allclose(grad["taylor_log"], [-(1 - 0.3**40) / 0.7], rtol=1e-14)


def test_sum_until_zeroes_what_it_read(modules):
    # The early exit: the entries read before the break are zeroed, with their shadows
    # in forward mode; the break is taken inside the array (a real test of it).
    fn = modules["loops.c"]["sum_until"]
    x = _input("sum_until")
    y = x.copy()
    fn(y, x.size)
    zeroed = int(np.sum(y == 0.0))
    assert 0 < zeroed < x.size - 1
    v = np.ones_like(x)
    ez.autodiff(fn, ez.Forward, ez.Dual, ez.Const, ez.Dual)(x.copy(), v, x.size)
    np.testing.assert_array_equal(v[:zeroed], 0.0)
    np.testing.assert_array_equal(v[zeroed:], 1.0)


def test_float32_loop():
    # Enzyme's loops.c in single precision: sum of (a + b) over 100 iterations.
    m = ez.c(
        "float loops(const float *x, int n) { float s = 0; "
        "for (int i = 0; i < 100; i++) s += x[0] * x[1] + x[0]; return s; }"
    )
    x = np.array([2.0, 3.0], np.float32)
    dx = np.zeros_like(x)
    ez.autodiff(m.loops, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)(x, dx, 2, 1.0)
    np.testing.assert_allclose(dx, [100 * 4.0, 100 * 2.0], rtol=1e-6)
    _, dy = ez.autodiff(m.loops, ez.Forward, ez.Dual, ez.Const, ez.Dual)(
        x, np.array([1.0, 0.0], np.float32), 2
    )
    assert dy == pytest.approx(400.0, rel=1e-6)


def test_pointer_to_rows():
    # A matrix as an array of row pointers, Duplicated with an array of shadow rows.
    m = ez.c(
        "double frob(double **rows, int r, int c) { double s = 0;"
        " for (int i = 0; i < r; i++) for (int j = 0; j < c; j++)"
        " s += rows[i][j] * rows[i][j] * (i + 1); return s; }"
    )
    rows = [np.linspace(0.1, 0.9, 4) + i for i in range(3)]
    drows = [np.zeros(4) for _ in rows]
    ptrs = np.array([r.ctypes.data for r in rows], dtype=np.uintp)
    dptrs = np.array([d.ctypes.data for d in drows], dtype=np.uintp)
    ez.autodiff(m.frob, ez.Reverse, ez.Duplicated, ez.Const, ez.Const, ez.Active)(
        ptrs, dptrs, 3, 4, 1.0
    )
    for i in range(3):
        np.testing.assert_allclose(drows[i], 2 * rows[i] * (i + 1), rtol=1e-15)


def test_batched_forward_width(modules):
    # width=3: three tangents in one pass, against the finite-difference gradient.
    fn, x, n, reference = _case(modules, "loop_triangular")
    tangents = np.random.default_rng(2).normal(size=(3, n))
    df = ez.autodiff(fn, ez.Forward, ez.Dual, ez.Const, ez.DualOnly, width=3)
    dy = df(x.copy(), tangents.copy(), n)
    np.testing.assert_allclose(dy, tangents @ reference, rtol=1e-5)


def test_cpp_templates_and_operators():
    m = ez.cpp(
        r"""
        #include <cmath>
        template <class T> struct Vec3 {
            T x, y, z;
            Vec3 operator+(const Vec3 &o) const { return {x + o.x, y + o.y, z + o.z}; }
            Vec3 operator*(T s) const { return {x * s, y * s, z * s}; }
            T dot(const Vec3 &o) const { return x * o.x + y * o.y + z * o.z; }
        };
        extern "C" double spring(const double *p, int n) {
            double e = 0;
            for (int i = 0; i + 1 < n; ++i) {
                Vec3<double> a{p[3 * i], p[3 * i + 1], p[3 * i + 2]};
                Vec3<double> b{p[3 * i + 3], p[3 * i + 4], p[3 * i + 5]};
                Vec3<double> d = a + b * -1.0;
                e += std::pow(std::sqrt(d.dot(d)) - 1.0, 2);
            }
            return e;
        }"""
    )
    p = np.random.default_rng(8).uniform(0.0, 2.0, 12)
    reference = fd_gradient(lambda z: m.spring(z, 4), p)
    dp = np.zeros_like(p)
    ez.autodiff(m.spring, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)(p, dp, 4, 1.0)
    np.testing.assert_allclose(dp, reference, rtol=1e-5, atol=1e-7)


RULES = r"""
#include <math.h>
typedef struct { double value, tangent; } dual;
/* a body Enzyme cannot follow: a call through a volatile function pointer */
static double sumsq_impl(const double *x, int n) {
    double s = 0; for (int i = 0; i < n; ++i) s += x[i] * x[i]; return s;
}
double (*volatile sumsq_ptr)(const double *, int) = sumsq_impl;
__attribute__((noinline)) double opaque_sumsq(const double *x, int n) { return sumsq_ptr(x, n); }
double loss(const double *x, int n) { return 3.0 * opaque_sumsq(x, n) + sin(x[0]); }

double aug_sumsq(const double *x, const double *dx, int n, int dn) { return opaque_sumsq(x, n); }
void rev_sumsq(const double *x, double *dx, int n, int dn, double dret) {
    if (dx != x) for (int i = 0; i < n; ++i) dx[i] += 2.0 * dret * x[i];
}
dual fwd_sumsq(const double *x, const double *dx, int n, int dn) {
    dual d = {opaque_sumsq(x, n), 0.0};
    for (int i = 0; i < n; ++i) d.tangent += 2.0 * x[i] * dx[i];
    return d;
}
/* a log1p-like function whose rule is what is used (Enzyme's customlog1p.c) */
static double twice(double a) { return 2.0 * a; }
double (*volatile twice_ptr)(double) = twice;
__attribute__((noinline)) double log1p_like(double a) { return twice_ptr(a); }
double uses_log1p(double a) { return log1p_like(a) * 3.0; }
dual fwd_log1p_like(double a, double da) { dual d = {log1p_like(a), da / (1.0 + a)}; return d; }
"""


@pytest.fixture
def rules():
    yield ez.c(RULES)
    ez.clear_rules()


def test_custom_reverse_rule(rules):
    ez.register_gradient("opaque_sumsq", augment=rules.aug_sumsq, gradient=rules.rev_sumsq)
    x = np.linspace(0.2, 1.0, 5)
    dx = np.zeros_like(x)
    ez.autodiff(rules.loss, ez.Reverse, ez.Duplicated, ez.Const, ez.ActiveOnly)(x, dx, 5, 1.0)
    expected = 6.0 * x
    expected[0] += np.cos(x[0])
    np.testing.assert_allclose(dx, expected, rtol=1e-14)


def test_custom_forward_rules(rules):
    ez.register_derivative("opaque_sumsq", forward=rules.fwd_sumsq)
    ez.register_derivative("log1p_like", forward=rules.fwd_log1p_like)
    x = np.linspace(0.2, 1.0, 5)
    v = np.linspace(-1.0, 1.0, 5)
    y, dy = ez.autodiff(rules.loss, ez.Forward, ez.Dual, ez.Const, ez.Dual)(x, v, 5)
    assert y == pytest.approx(3.0 * float(x @ x) + np.sin(x[0]))
    assert dy == pytest.approx(6.0 * float(x @ v) + np.cos(x[0]) * v[0], rel=1e-14)
    y, dy = ez.autodiff(rules.uses_log1p, ez.Forward, ez.Dual, ez.Dual)(0.5, 1.0)
    assert (y, dy) == pytest.approx((3.0, 3.0 / 1.5))  # the rule's 1/(1+a), not 2


def test_fabs_at_signed_zero_and_max_ties():
    # Conventions checked where Enzyme's rules meet kinks: |x|' is the same at +0.0
    # and -0.0 in both modes, and at a tie fmax's adjoint (also under -ffast-math)
    # goes to one argument: a subgradient, summing to 1.
    m = ez.c("#include <math.h>\ndouble a(double x) { return fabs(x); }")
    at = [ez.autodiff(m.a, ez.Reverse, ez.Active, ez.Active)(z, 1.0)[1] for z in (0.0, -0.0)]
    fw = [ez.autodiff(m.a, ez.Forward, ez.Dual, ez.DualOnly)(z, 1.0) for z in (0.0, -0.0)]
    assert at[0] == at[1] == fw[0] == fw[1]
    src = (
        "#include <math.h>\ndouble amax(const double *x, int n) { double m = x[0];"
        " for (int i = 1; i < n; ++i) m = fmax(m, x[i]); return m; }"
    )
    x = np.array([1.0, 3.0, 3.0, 2.0, 3.0])
    for flags in (None, ["-ffast-math"]):
        fm = ez.c(src, flags)
        dx = np.zeros_like(x)
        ez.autodiff(fm.amax, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)(x, dx, 5, 1.0)
        assert dx.sum() == 1.0 and set(np.flatnonzero(dx)) <= {1, 2, 4}


def test_forward_division_by_a_large_number():
    # Enzyme v0.0.289's forward rule for x / y divides by y * y, which overflows for
    # |y| > 1e154 (the tangent came out 0); enzyme_py multiplies by 1 / y twice instead.
    m = ez.c(
        "double q(double x, double y) { return x / y; }\n"
        "float qf(float x, float y) { return x / y; }\n"
        "void qs(const double *x, const double *y, double *out, int n) {\n"
        "  for (int i = 0; i < n; ++i) out[i] = x[i] / y[i]; }",
        flags=["-fvectorize"],
    )
    dy = ez.autodiff(m.q, ez.Forward, ez.Const, ez.Dual, ez.DualOnly)(1e300, 1e200, 1.0)
    assert dy == pytest.approx(-1e-100, rel=1e-12, abs=0.0)  # d(x/y)/dy = -x / y^2
    y, dq = ez.autodiff(m.q, ez.Forward, ez.Dual, ez.Dual, ez.Dual)(1e300, 2.0, 1e200, 3.0)
    assert y == 1e100 and dq == pytest.approx(2e-200 - 3e-100, rel=1e-12)
    dq = ez.autodiff(m.q, ez.Forward, ez.Dual, ez.Dual, ez.DualOnly)(1.0, 2.0, 3.0, 5.0)
    assert dq == pytest.approx((2.0 * 3.0 - 1.0 * 5.0) / 9.0, rel=1e-15)
    dyf = ez.autodiff(m.qf, ez.Forward, ez.Const, ez.Dual, ez.DualOnly)(1e30, 1e25, 1.0)
    assert dyf == pytest.approx(-1e-20, rel=1e-6)  # float: 1e25 * 1e25 overflowed too
    n = 9
    x, y = np.full(n, 1e300), np.geomspace(1e160, 1e200, n)
    out, dout = np.zeros(n), np.zeros(n)
    ez.autodiff(m.qs, ez.Forward, ez.Const, ez.Dual, ez.Dual, ez.Const)(
        x, y, np.ones(n), out, dout, n
    )
    np.testing.assert_allclose(dout, -x / y / y, rtol=1e-12)


def test_reverse_division_by_a_large_number():
    m = ez.c("double q(double x, double y) { return x / y; }")
    _, dx, _ = ez.autodiff(m.q, ez.Reverse, ez.Active, ez.Active, ez.Active)(1.0, 1e200, 1.0)
    assert dx == pytest.approx(1e-200, rel=1e-12, abs=0.0)
    _, dy = ez.autodiff(m.q, ez.Reverse, ez.Const, ez.Active, ez.Active)(1e300, 1e200, 1.0)
    assert dy == pytest.approx(-1e-100, rel=1e-12, abs=0.0)


def test_forward_division_by_a_large_number_in_numba_code():
    import numba

    @numba.njit
    def q(x, y):
        return x / y

    @numba.njit(fastmath=True)
    def r(x, y):
        return x / (y * y)  # fast-math: the user's own X / (Y * Y) may divide twice too

    assert ez.jvp(q, (1e300, 1e200), (0.0, 1.0)) == (1e100, pytest.approx(-1e-100, rel=1e-12))
    # d/dy x / y^2 = -2 x / y^3; Enzyme's tangent divided by (y * y) * (y * y) = 1e400.
    y, dy = ez.autodiff(r, ez.Forward, ez.Const, ez.Dual, ez.Dual)(1.0, 1e100, 1.0)
    assert y == pytest.approx(1e-200, rel=1e-12) and dy == pytest.approx(-2e-300, rel=1e-12)
