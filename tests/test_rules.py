"""Custom derivative rules for functions Enzyme cannot differentiate."""

import ctypes
import os
import shutil
import subprocess

import numpy as np
import pytest

import enzyme_py as ez

pytestmark = pytest.mark.needs_enzyme

LIBRARY = (
    "double opaque_dot(int n, const double *x, const double *y) {"
    " double s = 0; for (int i = 0; i < n; ++i) s += x[i] * y[i]; return s; }\n"
    "double opaque_power(int n, double x) { double p = 1; while (n-- > 0) p *= x; return p; }"
)
USER = """
double opaque_dot(int n, const double *x, const double *y);
double opaque_power(int n, double x);
double loss(const double *x, const double *y, int n) { return 3.0 * opaque_dot(n, x, y); }
double cube(double x) { return 2.0 * opaque_power(3, x); }
"""
RULES = """
double opaque_dot(int n, const double *x, const double *y);
double aug_dot(int n, int dn, const double *x, const double *dx,
               const double *y, const double *dy) { return opaque_dot(n, x, y); }
void rev_dot(int n, int dn, const double *x, double *dx, const double *y, double *dy,
             double dret) {
    /* A Const argument's shadow is the argument itself: leave it alone. */
    for (int i = 0; i < n; ++i) {
        if (dx != x) dx[i] += dret * y[i];
        if (dy != y) dy[i] += dret * x[i];
    }
}
void rev_wrong(const double *x, double dret) {}
typedef struct { double value, tangent; } dual;
double opaque_power(int n, double x);
dual fwd_power(int n, int dn, double x, double dx) {
    dual d = {opaque_power(n, x), n * opaque_power(n - 1, x) * dx};
    return d;
}
dual fwd_dot(int n, int dn, const double *x, const double *dx,
             const double *y, const double *dy) {
    dual d = {opaque_dot(n, x, y), 0.0};
    for (int i = 0; i < n; ++i) {
        if (dx != x) d.tangent += dx[i] * y[i];
        if (dy != y) d.tangent += x[i] * dy[i];
    }
    return d;
}
"""
X, Y = np.arange(1.0, 4.0), np.array([2.0, -1.0, 0.5])
ACTS = (ez.Duplicated, ez.Duplicated, ez.Const, ez.ActiveOnly)


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    clang = shutil.which("clang-15") or shutil.which("clang")
    if not clang:
        pytest.skip("clang is needed to build the test library")
    folder = tmp_path_factory.mktemp("lib")
    source, lib = folder / "dot.c", folder / "libdot.so"
    source.write_text(LIBRARY)
    subprocess.run([clang, "-O2", "-shared", "-fPIC", str(source), "-o", str(lib)], check=True)
    ctypes.CDLL(str(lib), mode=ctypes.RTLD_GLOBAL)  # the JIT finds opaque_dot here
    return ez.c(USER), ez.c(RULES)


@pytest.fixture(autouse=True)
def no_rules_left():
    yield
    if ez.has_autodiff():
        ez.clear_rules()


def test_library_function_needs_a_rule(library):
    user, _ = library
    with pytest.raises(ez.EnzymeError, match="No reverse pass found for opaque_dot"):
        ez.autodiff(user.loss, ez.Reverse, *ACTS)


def test_reverse_rule_is_used(library):
    user, rules = library
    ez.register_gradient("opaque_dot", augment=rules.aug_dot, gradient=rules.rev_dot)
    dx, dy = np.zeros(3), np.zeros(3)
    assert ez.autodiff(user.loss, ez.Reverse, *ACTS)(X, dx, Y, dy, 3, 1.0) == (None,)
    np.testing.assert_allclose(dx, 3 * Y)
    np.testing.assert_allclose(dy, 3 * X)
    y = Y.copy()
    np.testing.assert_allclose(ez.grad(user.loss)(X, y, 3), 3 * Y)
    np.testing.assert_array_equal(y, Y)  # the Const array was not written
    ez.clear_rules("opaque_dot")
    with pytest.raises(ez.EnzymeError, match="No reverse pass found"):
        ez.autodiff(user.loss, ez.Reverse, ez.Duplicated, ez.Const, ez.Const, ez.ActiveOnly)


def test_primal_with_a_rule_says_to_use_active_only(library):
    user, rules = library
    ez.register_gradient("opaque_dot", augment=rules.aug_dot, gradient=rules.rev_dot)
    with pytest.raises(ez.EnzymeError, match="ask for ActiveOnly"):
        ez.autodiff(user.loss, ez.Reverse, ez.Duplicated, ez.Duplicated, ez.Const, ez.Active)


def test_wrong_rule_signature_is_reported(library):
    user, rules = library
    ez.register_gradient("opaque_dot", augment=rules.aug_dot, gradient=rules.rev_wrong)
    with pytest.raises(ez.EnzymeError, match=r"(?s)expected gradient function.*argument types"):
        ez.autodiff(user.loss, ez.Reverse, *ACTS)


def test_forward_rule_on_an_opaque_body():
    # A body Enzyme cannot follow (a call through a volatile function pointer) with a
    # forward rule that scales the true derivative by 10, so its use is visible.
    # A forward rule returns {value, tangent}.
    source = """
    static double twice(double x) { return 2.0 * x; }
    double (*volatile impl)(double) = twice;
    __attribute__((noinline)) double hidden(double x) { return impl(x); }
    double f(double x) { return hidden(x) * x; }
    typedef struct { double value, tangent; } dual;
    dual fwd_hidden(double x, double dx) { dual d = {hidden(x), 20.0 * dx}; return d; }
    """
    m = ez.c(source)
    ez.register_derivative("hidden", forward=m.fwd_hidden)
    y, dy = ez.autodiff(m.f, ez.Forward, ez.Dual, ez.Dual)(3.0, 1.0)
    assert y == pytest.approx(18.0)
    assert dy == pytest.approx(20.0 * 3.0 + 6.0)  # rule's d(hidden) * x + hidden(x)
    assert ez.autodiff(m.f, ez.Forward, ez.Dual, ez.DualOnly)(3.0, 1.0) == pytest.approx(66.0)


def test_forward_rule_for_a_library_function(library):
    user, rules = library
    with pytest.raises(ez.EnzymeError, match="No forward mode derivative found for opaque_power"):
        ez.autodiff(user.cube, ez.Forward, ez.Dual, ez.Dual)
    ez.register_derivative("opaque_power", forward=rules.fwd_power)
    assert ez.autodiff(user.cube, ez.Forward, ez.Dual, ez.Dual)(1.5, 1.0) == pytest.approx(
        (2 * 1.5**3, 6 * 1.5**2)
    )
    # With pointer arguments Enzyme v0.0.289 does not find a declaration's forward
    # rule (rules.py says so): such a function needs a body (see the test above).
    ez.register_derivative("opaque_dot", forward=rules.fwd_dot)
    with pytest.raises(ez.EnzymeError, match="No forward mode derivative found for opaque_dot"):
        ez.autodiff(user.loss, ez.Forward, ez.Dual, ez.Const, ez.Const, ez.Dual)


def test_a_derivative_using_rules_says_why_it_cannot_be_pickled(library):
    import pickle

    user, rules = library
    ez.register_gradient("opaque_dot", augment=rules.aug_dot, gradient=rules.rev_dot)
    df = ez.autodiff(user.loss, ez.Reverse, *ACTS)
    with pytest.raises(TypeError, match=r"uses custom rules \(for opaque_dot\)"):
        pickle.dumps(df)


def test_rules_must_be_compiled_functions():
    with pytest.raises(TypeError, match="must be a compiled function"):
        ez.register_gradient("f", augment=lambda x: x, gradient=lambda x: x)


def test_a_rule_is_for_a_function_name(library):
    user, rules = library
    for target in (123, user.loss, ""):
        with pytest.raises(TypeError, match="a rule's target is the name of the function"):
            ez.register_gradient(target, augment=rules.aug_dot, gradient=rules.rev_dot)
    with pytest.warns(UserWarning, match="call sin as the LLVM intrinsic llvm.sin"):
        ez.register_derivative("sin", forward=rules.fwd_dot)
    assert os.environ.get("ENZYME_PY_DISABLE", "") in ("", "0")


def test_reverse_rule_written_with_numba_cfunc(library):
    numba = pytest.importorskip("numba")
    from numba import types

    user, _ = library
    pointer = types.CPointer(types.float64)
    augment = numba.cfunc(
        types.float64(types.int32, types.int32, pointer, pointer, pointer, pointer)
    )(lambda n, dn, x, dx, y, dy: 0.0)  # the primal is not needed under ActiveOnly

    @numba.cfunc(
        types.void(types.int32, types.int32, pointer, pointer, pointer, pointer, types.float64)
    )
    def gradient(n, dn, x, dx, y, dy, dret):
        for i in range(n):
            dx[i] += dret * y[i]
            dy[i] += dret * x[i]

    ez.register_gradient("opaque_dot", augment=augment, gradient=gradient)
    dx, dy = np.zeros(3), np.zeros(3)
    ez.autodiff(user.loss, ez.Reverse, *ACTS)(X, dx, Y, dy, 3, 1.0)
    np.testing.assert_allclose(dx, 3 * Y)
    np.testing.assert_allclose(dy, 3 * X)


def test_forward_mode_through_a_function_pointer_is_refused():
    # Enzyme v0.0.289 computes wrong values here in forward mode, silently; reverse mode
    # is right. enzyme_py refuses the forward derivative instead of returning them.
    m = ez.c(
        """
        static double twice(double x) { return 2.0 * x; }
        double (*volatile impl)(double) = twice;
        double f(double x) { return impl(x) * x; }
        """
    )
    with pytest.raises(ez.EnzymeError, match="calls through a function pointer"):
        ez.autodiff(m.f, ez.Forward, ez.Dual, ez.Dual)
    assert ez.autodiff(m.f, ez.Reverse, ez.Active, ez.Active)(3.0, 1.0) == (18.0, 12.0)


KERNEL_BODY = """
double opaque_dot(int n, const double *x, const double *y);
void row_dot(long i, const double *x, const double *y, double *out, int n) {
    out[i] = 3.0 * opaque_dot(n, x + i * n, y);
}
"""


@pytest.mark.parametrize("threads", [1, 2])
def test_a_rule_applies_inside_a_kernel(library, threads):
    # Rules are applied where every derivative is built: a kernel's too.
    _, rules = library
    ez.register_gradient("opaque_dot", augment=rules.aug_dot, gradient=rules.rev_dot)
    body = ez.c(KERNEL_BODY).row_dot
    dk = ez.autodiff(
        ez.offload.kernel(body), ez.Reverse, ez.Duplicated, ez.Const, ez.Duplicated, ez.Const
    )
    m, n = 5, 3
    x = np.arange(1.0, 1.0 + m * n).reshape(m, n)
    dx, out, dout = np.zeros_like(x), np.zeros(m), np.linspace(1.0, 2.0, m)
    seeds = dout.copy()
    dk.launch(m, x, dx, Y, out, dout, n, threads=threads)
    np.testing.assert_allclose(out, 3.0 * x @ Y)
    np.testing.assert_allclose(dx, 3.0 * seeds[:, None] * Y[None, :])


def test_a_rule_applies_to_a_derivative_differentiated_again(library):
    # Forward over reverse of a function whose rules are linked in already: the rules'
    # module is not linked twice. The tangent of the seed flows through the rule's
    # gradient (which has a body Enzyme differentiates) into the tangent of dx.
    user, rules = library
    ez.register_gradient("opaque_dot", augment=rules.aug_dot, gradient=rules.rev_dot)
    first = ez.autodiff(user.loss, ez.Reverse, ez.Duplicated, ez.Const, ez.Const, ez.ActiveOnly)
    second = ez.autodiff(first, ez.Forward, ez.Const, ez.Dual, ez.Const, ez.Const, ez.Dual)
    dx, tdx = np.zeros(3), np.zeros(3)
    second(X, dx, tdx, Y, 3, 2.0, 0.5)
    np.testing.assert_allclose(dx, 3 * Y * 2.0)  # the first derivative, computed again
    np.testing.assert_allclose(tdx, 3 * Y * 0.5)  # its derivative along the seed
