"""Enzyme's clang-plugin interface inside ez.c / ez.cpp source (issue 18, item 1):
__enzyme_autodiff / __enzyme_fwddiff calls are honoured (Enzyme's own pass runs on the
module), checked against finite differences; the rule and inactivity globals
(__enzyme_register_gradient_* / __enzyme_register_derivative_*, __enzyme_inactivefn,
__enzyme_function_like) and annotate("enzyme_inactive") are honoured as Enzyme honours
them, by the marker calls and by ez.autodiff; every other marker is refused with a
CompileError naming it and what to write with enzyme_py instead, never ignored."""

import re

import numpy as np
import pytest

import enzyme_py as ez

from reference import fd_gradient

pytestmark = pytest.mark.needs_enzyme

SQUARE = "double sq(double x) { return x * x; }\n"


@pytest.mark.parametrize(
    ("source", "marker", "advice"),
    [
        (
            "double __enzyme_fwdsplit(void *, ...);\n"
            "double fs(double x) { return __enzyme_fwdsplit((void *)sq, x, 1.0, (void *)0); }",
            "__enzyme_fwdsplit",
            "differentiate the function from Python instead",
        ),
        (
            "double fwd_sq(double x, double dx) { return 2 * x * dx; }\n"
            "void *__enzyme_register_splitderivative_sq[3] = {(void *)sq, (void *)fwd_sq, "
            "(void *)fwd_sq};",
            "__enzyme_register_splitderivative_sq",
            r"ez.register_derivative\('sq', forward=m.fwd_sq\)",
        ),
        (
            "double g = 1.0;\nvoid *__enzyme_inactive_global[1] = {(void *)&g};",
            "__enzyme_inactive_global",
            "no equivalent of inactive globals",
        ),
        (
            '__attribute__((annotate("enzyme_nofree"))) double keep(double x) { return x; }',
            r'annotate\("enzyme_nofree"\)',
            'the annotation enzyme_py honours is "enzyme_inactive"',
        ),
        (
            "__attribute__((enzyme_inactive)) double logger(double x) { return x; }",
            r"__attribute__\(\(enzyme_inactive\)\)",
            r'annotate\("enzyme_inactive"\)',
        ),
    ],
)
def test_marker_is_refused(source, marker, advice):
    with pytest.raises(ez.CompileError, match="Enzyme's clang-plugin interface beyond") as info:
        ez.c(SQUARE + source)
    message = str(info.value)
    assert re.search(marker, message), message
    assert re.search(advice, message), message


def test_attribute_refused_even_with_warnings_off():
    with pytest.raises(ez.CompileError, match=r"enzyme_inactive"):
        ez.c("__attribute__((enzyme_inactive)) double f(double x) { return x; }", ["-w"])


def test_cpp_attribute_is_refused():
    with pytest.raises(ez.CompileError, match="enzyme_inactive"):
        ez.cpp("[[enzyme_inactive]] double f(double x) { return x; }")


HONOURED = r"""
#include <math.h>
int enzyme_dup, enzyme_const, enzyme_dupnoneed, enzyme_out;
double __enzyme_autodiff(void *, ...);
double __enzyme_fwddiff(void *, ...);

double energy(const double *x, int n) {
    double e = 0.0;
    for (int i = 0; i < n; ++i) e += x[i] * x[i] * sin(x[i]) + 0.5 * x[i] * x[(i + 1) % n];
    return e;
}
void gradient(const double *x, double *dx, int n) {
    __enzyme_autodiff((void *)energy, enzyme_dup, x, dx, enzyme_const, n);
}
double tangent(const double *x, const double *v, int n) {
    return __enzyme_fwddiff((void *)energy, enzyme_dup, x, v, enzyme_const, n);
}
double rosen(double a, double b) { return (1 - a) * (1 - a) + 100 * (b - a * a) * (b - a * a); }
/* active scalars: Enzyme returns their adjoints as a struct */
typedef struct { double da, db; } pair;
pair __enzyme_autodiff_pair(void *, double, double);
pair rosen_grad(double a, double b) { return __enzyme_autodiff_pair((void *)rosen, a, b); }
void square_into(double *out, const double *x, int n) {
    for (int i = 0; i < n; ++i) out[i] = x[i] * x[i] * x[i];
}
/* an output array's shadow carries the seed; dupnoneed: its values are not needed */
void square_vjp(double *out, double *dout, const double *x, double *dx, int n) {
    __enzyme_autodiff((void *)square_into, enzyme_dupnoneed, out, dout, enzyme_dup, x, dx,
                      enzyme_const, n);
}
"""


@pytest.fixture(scope="module")
def honoured():
    return ez.c(HONOURED)


def test_autodiff_marker_computes_the_gradient(honoured):
    x = np.linspace(0.1, 1.7, 7)
    dx = np.zeros_like(x)
    assert honoured.gradient(x, dx, 7) is None
    np.testing.assert_allclose(dx, fd_gradient(lambda z: honoured.energy(z, 7), x), rtol=1e-6)
    np.testing.assert_allclose(dx, ez.grad(honoured.energy)(x, 7), rtol=1e-14)


def test_fwddiff_marker_computes_the_tangent(honoured):
    x = np.linspace(0.1, 1.7, 7)
    v = np.random.default_rng(0).normal(size=7)
    reference = float(fd_gradient(lambda z: honoured.energy(z, 7), x) @ v)
    assert honoured.tangent(x, v, 7) == pytest.approx(reference, rel=1e-6)


def test_active_scalars_and_output_arrays(honoured):
    da, db = honoured.rosen_grad(0.5, 0.8)
    assert (da, db) == pytest.approx((-2 * 0.5 - 400 * 0.5 * (0.8 - 0.25), 200 * (0.8 - 0.25)))
    x = np.linspace(0.5, 1.5, 4)
    out, dout, dx = np.zeros(4), np.array([1.0, 2.0, 3.0, 4.0]), np.zeros(4)
    honoured.square_vjp(out, dout, x, dx, 4)
    np.testing.assert_allclose(dx, 3 * x * x * np.array([1.0, 2.0, 3.0, 4.0]), rtol=1e-14)


def test_marker_enzyme_cannot_honour_is_an_error():
    # A wrong activity count (Enzyme's own error), not a skipped call.
    src = (
        "double __enzyme_autodiff(void *, ...);\n"
        "double f(double x, double y) { return x * y; }\n"
        "double g(double x) { return __enzyme_autodiff((void *)f, x); }"
    )
    with pytest.raises(ez.CompileError, match="Enzyme's pass could not differentiate"):
        ez.c(src)


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


def test_cpp_marker_is_honoured():
    # Mangled (no extern "C"): Enzyme's pass matches the name inside.
    m = ez.cpp(
        "#include <cmath>\n"
        "double __enzyme_autodiff(void *, double);\n"
        "double f(double x) { return std::sin(x) * x; }\n"
        "double df(double x) { return __enzyme_autodiff((void *)f, x); }"
    )
    assert m.df(0.7) == pytest.approx(np.cos(0.7) * 0.7 + np.sin(0.7), rel=1e-14)


RULES = r"""
#include <math.h>
#include <stddef.h>
double __enzyme_autodiff(void *, ...);
double __enzyme_fwddiff(void *, ...);

/* Rules that deliberately differ from the true derivative (3 x^2): Enzyme uses them. */
void cube(const double *x, double *y) { *y = *x * *x * *x; }
void *aug_cube(const double *x, const double *dx, double *y, double *dy) {
    *y = *x * *x * *x;
    return NULL;
}
void rev_cube(const double *x, double *dx, const double *y, double *dy, void *tape) {
    *dx += 7.0 * *x * *dy;
    *dy = 0.0;
}
void fwd_cube(const double *x, const double *dx, double *y, double *dy) {
    *y = *x * *x * *x;
    *dy = 5.0 * *x * *dx;
}
void *__enzyme_register_gradient_cube[3] = {(void *)cube, (void *)aug_cube, (void *)rev_cube};
void *__enzyme_register_derivative_cube[2] = {(void *)cube, (void *)fwd_cube};

/* Inactive: no derivative, though clang -O2 would inline both. */
double scale(double x) { return 3.0 * x; }
void *__enzyme_inactivefn_scale[1] = {(void *)scale};
__attribute__((annotate("enzyme_inactive"))) double shift(double x) { return x * x; }

/* Differentiated as log (1/x), whatever its body computes (2x). */
double fake_log(double x) { return 2.0 * x; }
void *__enzyme_function_like_log[2] = {(void *)fake_log, (void *)"log"};

double f(double x) {
    double y;
    cube(&x, &y);
    return y + sin(x) + scale(x) + shift(x) + fake_log(x);
}
double df(double x) { return __enzyme_autodiff((void *)f, x); }
double tf(double x, double dx) { return __enzyme_fwddiff((void *)f, x, dx); }
"""


def _registered_reverse(x):
    return 7 * x + np.cos(x) + 1 / x


def _registered_forward(x):
    return 5 * x + np.cos(x) + 1 / x


@pytest.fixture(scope="module")
def rules():
    return ez.c(RULES)


def test_rule_globals_are_honoured_by_marker_calls(rules):
    for x in (0.4, 1.3, 2.0):
        assert rules.df(x) == pytest.approx(_registered_reverse(x), rel=1e-14)
        assert rules.tf(x, 0.5) == pytest.approx(0.5 * _registered_forward(x), rel=1e-14)
        # The primal is the function's own body.
        assert rules.f(x) == pytest.approx(x**3 + np.sin(x) + 3 * x + x * x + 2 * x, rel=1e-14)


def test_rule_globals_are_honoured_by_ez_autodiff(rules):
    reverse = ez.autodiff(rules.f, ez.Reverse, ez.Active, ez.Active)
    forward = ez.autodiff(rules.f, ez.Forward, ez.Dual, ez.Dual)
    for x in (0.4, 1.3, 2.0):
        primal, dx = reverse(x, 1.0)
        assert dx == pytest.approx(_registered_reverse(x), rel=1e-14)
        assert primal == pytest.approx(rules.f(x), rel=1e-14)
        primal, tangent = forward(x, 0.5)
        assert tangent == pytest.approx(0.5 * _registered_forward(x), rel=1e-14)


def test_a_registered_rule_is_used_for_the_function_itself(rules):
    x, dx, y, dy = np.array([1.5]), np.zeros(1), np.zeros(1), np.array([2.0])
    ez.autodiff(rules.cube, ez.Reverse, ez.Duplicated, ez.DuplicatedOnly)(x, dx, y, dy)
    assert dx[0] == pytest.approx(7 * 1.5 * 2.0, rel=1e-14)
    dy = np.zeros(1)
    ez.autodiff(rules.cube, ez.Forward, ez.Dual, ez.Dual)(x, np.array([1.0]), y, dy)
    assert dy[0] == pytest.approx(5 * 1.5, rel=1e-14)


def test_true_derivatives_without_the_rules():
    # The same module without the globals: Enzyme's own derivatives (finite differences).
    plain = RULES.split("void *__enzyme_register_gradient_cube")[0] + (
        "double scale(double x) { return 3.0 * x; }\n"
        "double f(double x) { double y; cube(&x, &y); return y + sin(x) + scale(x); }\n"
    )
    m = ez.c(plain)
    x = np.array([1.3])
    reference = fd_gradient(lambda z: m.f(float(z[0])), x)[0]
    assert ez.autodiff(m.f, ez.Reverse, ez.Active, ez.Active)(1.3, 1.0)[1] == pytest.approx(
        reference, rel=1e-7
    )


def test_malformed_rule_global_is_an_error():
    with pytest.raises(ez.CompileError, match="__enzyme_register_gradient_sq"):
        ez.c(SQUARE + "void *__enzyme_register_gradient_sq[1] = {(void *)sq};")


SPLIT = r"""
#include <math.h>
int enzyme_dup, enzyme_const, enzyme_allocated, enzyme_tape, enzyme_width, enzyme_dupv;
void *__enzyme_augmentfwd(void *, ...);
double __enzyme_augmentfwd_sized(void *, ...);
void __enzyme_reverse(void *, ...);
long __enzyme_augmentsize(void *, ...);
double __enzyme_autodiff(void *, ...);

void waves(const double *x, double *y, int n) {
    for (int i = 0; i < n; ++i) y[i] = sin(x[i]) * x[i];
}
/* Split reverse mode: the seed of the reverse pass comes from the forward pass's output
   (the gradient of sum(y^2)); the tape travels between them. */
void split_grad(const double *x, double *dx, double *y, double *dy, int n) {
    void *tape = __enzyme_augmentfwd((void *)waves, enzyme_dup, x, dx, enzyme_dup, y, dy,
                                     enzyme_const, n);
    for (int i = 0; i < n; ++i) dy[i] = 2.0 * y[i];
    __enzyme_reverse((void *)waves, enzyme_dup, x, dx, enzyme_dup, y, dy, enzyme_const, n, tape);
}
double total(const double *x, int n) {
    double s = 0.0;
    for (int i = 0; i < n; ++i) s += sin(x[i]) * x[i];
    return s;
}
/* The tape in the caller's memory (enzyme_allocated / enzyme_tape); the reverse pass's
   seed for the active return is its last argument: the gradient of total^2. */
double sized_grad(const double *x, double *dx, int n) {
    long size = __enzyme_augmentsize((void *)total, enzyme_dup, enzyme_const);
    char cache[size];
    double v = __enzyme_augmentfwd_sized((void *)total, enzyme_allocated, size, enzyme_tape,
                                         cache, enzyme_dup, x, dx, enzyme_const, n);
    __enzyme_reverse((void *)total, enzyme_allocated, size, enzyme_tape, cache, enzyme_dup, x,
                     dx, enzyme_const, n, 2.0 * v);
    return v;
}
double quad(const double *x) { return x[0] * x[0] * x[1] + 3.0 * x[1]; }
/* Two shadows, 2 doubles (16 bytes) apart: each gets the gradient. */
void two_gradients(const double *x, double *shadows) {
    __enzyme_autodiff((void *)quad, enzyme_width, 2, enzyme_dupv, (long)(2 * sizeof(double)), x,
                      shadows);
}
"""


@pytest.fixture(scope="module")
def split():
    return ez.c(SPLIT)


def _waves_derivative(x):
    return np.cos(x) * x + np.sin(x)


def test_split_reverse_markers(split):
    x = np.linspace(0.2, 1.9, 5)
    dx, y, dy = np.zeros(5), np.zeros(5), np.zeros(5)
    split.split_grad(x, dx, y, dy, 5)
    np.testing.assert_allclose(y, np.sin(x) * x, rtol=1e-14)
    np.testing.assert_allclose(dx, 2 * y * _waves_derivative(x), rtol=1e-13)
    reference = fd_gradient(lambda z: float(np.sum((np.sin(z) * z) ** 2)), x)
    np.testing.assert_allclose(dx, reference, rtol=1e-6)


def test_split_reverse_markers_with_a_caller_allocated_tape(split):
    x = np.linspace(0.2, 1.9, 5)
    dx = np.zeros(5)
    v = split.sized_grad(x, dx, 5)
    assert v == pytest.approx(split.total(x, 5), rel=1e-14)
    np.testing.assert_allclose(dx, 2 * v * _waves_derivative(x), rtol=1e-13)
    np.testing.assert_allclose(dx, fd_gradient(lambda z: split.total(z, 5) ** 2, x), rtol=1e-6)


def test_dupv_fills_each_shadow(split):
    x = np.array([2.0, 5.0])
    shadows = np.zeros(4)
    split.two_gradients(x, shadows)
    gradient = [2 * x[0] * x[1], x[0] ** 2 + 3.0]
    np.testing.assert_allclose(shadows, gradient * 2, rtol=1e-14)


CPP_RULES = r"""
#include <cmath>
double cube(double x) { return x * x * x; }
/* Enzyme's forward rule for a scalar function returns {value, tangent}. */
struct value_tangent { double value, tangent; };
value_tangent fwd_cube(double x, double dx) { return {x * x * x, 5.0 * x * dx}; }
void *__enzyme_register_derivative_cube[2] = {(void *)cube, (void *)fwd_cube};
[[clang::annotate("enzyme_inactive")]] double shift(double x) { return x * x; }
extern "C" double f(double x) { return cube(x) + std::sin(x) + shift(x); }
"""


def test_cpp_rule_globals_are_honoured_by_ez_autodiff():
    m = ez.cpp(CPP_RULES)
    value, tangent = ez.autodiff(m.f, ez.Forward, ez.Dual, ez.Dual)(1.3, 1.0)
    assert value == pytest.approx(1.3**3 + np.sin(1.3) + 1.3**2, rel=1e-14)
    assert tangent == pytest.approx(5 * 1.3 + np.cos(1.3), rel=1e-14)


def test_a_rule_global_clang_drops_is_an_error():
    with pytest.raises(ez.CompileError, match="__enzyme_inactivefn.*declare it without static"):
        ez.c(SQUARE + "static void *__enzyme_inactivefn[1] = {(void *)sq};")


@pytest.mark.parametrize(
    ("source", "what"),
    [
        ('__attribute__((annotate("enzyme_inactive"))) double g = 2.0;', "on g"),
        (
            "double h(double x) {\n"
            '    __attribute__((annotate("enzyme_inactive"))) double t = x * x;\n'
            "    return t;\n}",
            "on a local variable",
        ),
    ],
)
def test_inactive_annotation_on_a_variable_is_an_error(source, what):
    with pytest.raises(ez.CompileError, match=rf'annotate\("enzyme_inactive"\) {what}'):
        ez.c(SQUARE + source)


@pytest.mark.parametrize("flags", [["-O0"], ["-O1"], ["-O3", "-fvectorize"]])
def test_rule_globals_under_other_optimisation_levels(flags):
    m = ez.c(RULES, flags)
    x = 1.3
    assert m.df(x) == pytest.approx(_registered_reverse(x), rel=1e-14)
    assert m.tf(x, 1.0) == pytest.approx(_registered_forward(x), rel=1e-14)
    _, dx = ez.autodiff(m.f, ez.Reverse, ez.Active, ez.Active)(x, 1.0)
    assert dx == pytest.approx(_registered_reverse(x), rel=1e-14)
