"""C and C++ kernels over NumPy arrays, compiled by clang 15."""

import numpy as np
import pytest

import enzyme_py as ez

from reference import fd_gradient

pytestmark = pytest.mark.needs_enzyme

C_SOURCE = r"""
#include <math.h>
double energy(const double *x, int n) {
    double e = 0.0;
    for (int i = 0; i < n; ++i) e += x[i] * x[i] * sin(x[i]);
    return e;
}
void square_sin(double *out, const double *x, long n) {
    for (long i = 0; i < n; ++i) out[i] = x[i] * x[i] * sin(x[i]);
}
float sumsq_f(const float *x, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; ++i) s += x[i] * x[i];
    return s;
}
double weighted(const double *x, const double *w, double scale, int n) {
    double s = 0.0;
    for (int i = 0; i < n; ++i) s += w[i] * exp(scale * x[i]);
    return s;
}
static double helper(double x) { return x; }
"""


@pytest.fixture(scope="module")
def kernels():
    return ez.c(C_SOURCE)


def energy_np(x):
    return float(np.sum(x * x * np.sin(x)))


def test_functions_are_attributes(kernels):
    assert kernels.functions() == ["energy", "square_sin", "sumsq_f", "weighted"]
    with pytest.raises(AttributeError, match="no non-static function 'helper'"):
        _ = kernels.helper
    p = kernels.weighted.params
    assert [q.name for q in p] == ["x", "w", "scale", "n"]
    assert [q.kind for q in p] == ["pointer", "pointer", "float", "int"]
    assert p[0].dtype == np.float64


@pytest.mark.parametrize("shape", [(7,), (3, 4), (2, 3, 2)])
def test_reverse_array_any_rank(kernels, shape):
    rng = np.random.default_rng(0)
    x = rng.normal(size=shape)
    dx = np.zeros_like(x)
    df = ez.autodiff(kernels.energy, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)
    (value,) = df(x, dx, x.size, 1.0)
    assert value == pytest.approx(energy_np(x), rel=1e-14)
    np.testing.assert_allclose(dx, 2 * x * np.sin(x) + x**2 * np.cos(x), rtol=1e-13)
    np.testing.assert_allclose(dx, fd_gradient(energy_np, x), rtol=1e-6, atol=1e-8)


def test_reverse_accumulates_into_shadow(kernels):
    x = np.linspace(-1, 1, 5)
    dx = np.ones_like(x)
    ez.autodiff(kernels.energy, ez.Reverse, ez.Duplicated, ez.Const, ez.ActiveOnly)(x, dx, 5, 1.0)
    np.testing.assert_allclose(dx, 1 + 2 * x * np.sin(x) + x**2 * np.cos(x), rtol=1e-13)


def test_output_array_shadow_is_the_seed(kernels):
    x = np.linspace(0.1, 2, 6)
    out = np.zeros_like(x)
    dout = np.linspace(1, 2, 6)
    seed = dout.copy()
    dx = np.zeros_like(x)
    df = ez.autodiff(kernels.square_sin, ez.Reverse, ez.Duplicated, ez.Duplicated, ez.Const)
    assert df(out, dout, x, dx, 6) == (None,)
    np.testing.assert_allclose(out, x * x * np.sin(x), rtol=1e-15)
    np.testing.assert_allclose(dx, seed * (2 * x * np.sin(x) + x**2 * np.cos(x)), rtol=1e-13)
    np.testing.assert_array_equal(dout, 0.0)  # the seed is consumed


def test_forward_array_tangent(kernels):
    x = np.linspace(0.1, 2, 6)
    tx = np.linspace(-1, 1, 6)
    out, tout = np.zeros_like(x), np.zeros_like(x)
    df = ez.autodiff(kernels.square_sin, ez.Forward, ez.Dual, ez.Dual, ez.Const)
    assert df(out, tout, x, tx, 6) is None
    np.testing.assert_allclose(tout, tx * (2 * x * np.sin(x) + x**2 * np.cos(x)), rtol=1e-13)


def test_float32_arrays(kernels):
    x = np.linspace(-1, 1, 9, dtype=np.float32)
    dx = np.zeros_like(x)
    (s,) = ez.autodiff(kernels.sumsq_f, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)(
        x, dx, 9, 1.0
    )
    assert s == pytest.approx(float(np.sum(x.astype(np.float64) ** 2)), rel=1e-6)
    np.testing.assert_allclose(dx, 2 * x, rtol=1e-6)


def test_mixed_scalar_and_array_activities(kernels):
    x = np.linspace(0, 1, 4)
    w = np.array([1.0, 2.0, 3.0, 4.0])
    dw = np.zeros_like(w)
    df = ez.autodiff(
        kernels.weighted, ez.Reverse, ez.Const, ez.Duplicated, ez.Active, ez.Const, ez.Active
    )
    value, dscale = df(x, w, dw, 0.5, 4, 1.0)
    assert value == pytest.approx(float(np.sum(w * np.exp(0.5 * x))), rel=1e-14)
    np.testing.assert_allclose(dw, np.exp(0.5 * x), rtol=1e-14)
    assert dscale == pytest.approx(float(np.sum(w * x * np.exp(0.5 * x))), rel=1e-14)


def test_batched_reverse_shadows(kernels):
    x = np.linspace(0.1, 1, 5)
    dx = np.zeros((3, 5))
    df = ez.autodiff(kernels.energy, ez.Reverse, ez.Duplicated, ez.Const, ez.Active, width=3)
    (value,) = df(x, dx, 5, [1.0, 2.0, -1.0])
    assert value == pytest.approx(energy_np(x), rel=1e-14)
    g = 2 * x * np.sin(x) + x**2 * np.cos(x)
    np.testing.assert_allclose(dx, np.outer([1.0, 2.0, -1.0], g), rtol=1e-13)


def test_cpp_plain_names():
    m = ez.cpp(
        """
        #include <cmath>
        double cube(double x) { return x * x * x; }
        extern "C" double twice(double x) { return 2 * std::sin(x); }
        """
    )
    assert ez.autodiff(m.cube, ez.Reverse, ez.Active, ez.ActiveOnly)(2.0, 1.0)[1] == 12.0
    assert ez.grad(m.twice)(0.0) == pytest.approx(2.0)


def test_compile_error_has_diagnostics():
    with pytest.raises(ez.CompileError, match="undeclared identifier 'y'"):
        ez.c("double f(double x) { return y; }")


def test_grad_of_arrays(kernels):
    x = np.linspace(0.1, 1, 5)
    g = ez.grad(kernels.energy)(x, 5)
    np.testing.assert_allclose(g, 2 * x * np.sin(x) + x**2 * np.cos(x), rtol=1e-13)


def test_unpassable_types_fail_only_their_function():
    m = ez.c(
        """
        long double ld(long double x) { return x * x; }
        struct M { double a; int b; };
        struct M mixed(double x) { struct M m = {x, 1}; return m; }
        double good(double x) { return x * x; }
        """
    )
    assert m.functions() == ["good"]
    assert ez.grad(m.good)(3.0) == 6.0
    with pytest.raises(TypeError, match=r"cannot call 'ld': parameter 'x' has LLVM type x86_fp80"):
        _ = m.ld
    with pytest.raises(TypeError, match=r"'mixed': the return value has LLVM type \{ double, i32"):
        _ = m["mixed"]
    with pytest.raises(AttributeError, match="with types enzyme_py cannot pass: ld, mixed"):
        _ = m.nope


def test_unpassable_ir_types_name_the_function():
    with pytest.raises(TypeError, match=r"cannot call 'f': parameter 'x' has LLVM type i128"):
        ez.llvm_ir("define i128 @f(i128 %x) { ret i128 %x }", "f")


VOID_AND_CHAR = r"""
#include <stdint.h>
double vsum(const void *p, int n) {
    const double *x = (const double *)p;
    double s = 0.0;
    for (int i = 0; i < n; ++i) s += x[i] * x[i];
    return s;
}
double masked(const char *mask, const double *x, int n) {
    double s = 0.0;
    for (int i = 0; i < n; ++i) if (mask[i]) s += x[i] * x[i];
    return s;
}
double weighted_u8(const uint8_t *w, const double *x, int n) {
    double s = 0.0;
    for (int i = 0; i < n; ++i) s += w[i] * x[i] * x[i];
    return s;
}
double rows_dot(double **rows, int n) {
    double s = 0.0;
    for (int i = 0; i < n; ++i) s += rows[i][0] * rows[i][1];
    return s;
}
"""


def test_void_and_char_pointers_take_any_array():
    m = ez.c(VOID_AND_CHAR)
    assert m.vsum.params[0].dtype is None  # void*: the pointee is unknown
    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_array_equal(ez.grad(m.vsum)(x, 3), 2 * x)
    mask = np.array([1, 0, 1], dtype=np.int8)
    np.testing.assert_array_equal(ez.grad(m.masked, argnums=1)(mask, x, 3), [2.0, 0.0, 6.0])
    np.testing.assert_array_equal(
        ez.grad(m.masked, argnums=1)(mask.astype(np.bool_), x, 3), [2.0, 0.0, 6.0]
    )
    w = np.array([1, 0, 2], dtype=np.uint8)
    np.testing.assert_array_equal(ez.grad(m.weighted_u8, argnums=1)(w, x, 3), [2.0, 0.0, 12.0])


def test_pointer_to_pointer_takes_addresses():
    m = ez.c(VOID_AND_CHAR)
    rows = [np.array([2.0, 5.0]), np.array([3.0, 7.0])]
    addresses = np.array([r.ctypes.data for r in rows], dtype=np.uintp)
    primal = ez.autodiff(m.rows_dot, ez.Forward, ez.Const, ez.Const, ez.Const)
    assert primal(addresses, 2) == 31.0
    with pytest.raises(ValueError, match=r"'rows'\) of 'rows_dot' needs dtype uint64; got float64"):
        primal(np.array([2.0, 5.0]), 2)  # would be dereferenced as addresses
    # Duplicated: the shadow holds the addresses of the rows' shadows.
    shadow_rows = [np.zeros(2), np.zeros(2)]
    shadow = np.array([r.ctypes.data for r in shadow_rows], dtype=np.uintp)
    grad = ez.autodiff(m.rows_dot, ez.Reverse, ez.Duplicated, ez.Const, ez.ActiveOnly)
    assert grad(addresses, shadow, 2, 1.0) == (None,)
    np.testing.assert_array_equal(shadow_rows[0], [5.0, 2.0])
    np.testing.assert_array_equal(shadow_rows[1], [7.0, 3.0])


CPP_NAMES = r"""
template <class T> T sq(T x) { return x * x; }
template double sq<double>(double);
template float sq<float>(float);
template <class T> T cube(T x) { return x * x * x; }
template double cube<double>(double);
struct A { static double s(double x) { return 3 * x; } };
double (*keep)(double) = &A::s;
double over(double x) { return x * x; }
double over(float x) { return x; }
extern "C" double _under(double x) { return 5 * x; }
extern "C" double functions(double x) { return 7 * x; }
extern "C" double ir(double x) { return 9 * x; }
"""


def test_cpp_names_items_and_templates():
    m = ez.cpp(CPP_NAMES)
    assert m.functions() == [
        "_Z2sqIdET_S0_",
        "_Z2sqIfET_S0_",
        "_Z4cubeIdET_S0_",
        "_Z4overd",
        "_Z4overf",
        "_under",
        "cube",
        "functions",
        "ir",
    ]
    assert ez.grad(m.cube)(2.0) == 12.0  # the only instance: its plain name
    assert ez.grad(m._Z2sqIdET_S0_)(3.0) == 6.0  # explicit instances (weak_odr)
    assert ez.grad(m["_Z2sqIdET_S0_"])(3.0) == 6.0
    assert ez.grad(m._Z4overd)(3.0) == 6.0  # an overload, by its mangled name
    assert ez.grad(m._under)(1.0) == 5.0
    # Names CModule's methods take are items; linkonce_odr functions items only.
    assert ez.grad(m["functions"])(1.0) == 7.0
    assert ez.grad(m["ir"])(1.0) == 9.0
    assert callable(m.functions) and isinstance(m.ir(), str)
    assert ez.grad(m["_ZN1A1sEd"])(1.0) == 3.0
    assert "_ZN1A1sEd" in m and "nope" not in m
    with pytest.raises(KeyError, match="no non-static function 'nope'"):
        _ = m["nope"]
    with pytest.raises(AttributeError, match="no non-static function '_nope'"):
        _ = m._nope
    with pytest.raises(AttributeError, match="__deepcopy__"):
        _ = m.__deepcopy__  # copy and pickle protocols probe dunders


def test_item_lookup_survives_pickling():
    import pickle

    m = ez.c("double functions(double x) { return x * x * x; }")
    df = ez.autodiff(m["functions"], ez.Reverse, ez.Active, ez.Active)
    assert pickle.loads(pickle.dumps(df))(2.0, 1.0) == (8.0, 12.0)


def test_user_flags_keep_the_required_ones():
    src = "double f(const double *x) { return x[0] * x[0]; }"
    for flags in (["-O0"], ["-I/nonexistent"], ["-DUNUSED=1", "-O1"]):
        g = ez.grad(ez.c(src, flags=flags).f)(np.array([3.0]))
        np.testing.assert_array_equal(g, [6.0])
    # -O0 wins over the default -O2: the IR keeps its stack slots.
    assert "alloca" in ez.c(src, flags=["-O0"]).ir()
    assert "alloca" not in ez.c(src).ir()
    with pytest.raises(TypeError, match=r"not a string: pass flags=\['-O1'\]"):
        ez.c(src, flags="-O1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="got int 1"):
        ez.c(src, flags=[1])  # type: ignore[list-item]


def test_opaque_pointer_ir_says_how_to_get_typed_pointers():
    opaque = "define double @f(ptr %x) {\n  %v = load double, ptr %x\n  ret double %v\n}"
    with pytest.raises(ez.CompileError, match="opaque pointers.*-Xclang -no-opaque-pointers"):
        ez.llvm_ir(opaque, "f")


def test_fabs_in_a_condition_differentiates():
    m = ez.c(
        """
#include <math.h>
double huber(double r, double delta) {
    if (fabs(r) <= delta) return 0.5 * r * r;
    return delta * (fabs(r) - 0.5 * delta);
}
double clipped(double x) { return fabs(x) >= 1.0 ? 0.0 : x * x; }
"""
    )
    grad = ez.autodiff(m.huber, ez.Reverse, ez.Active, ez.Const, ez.Active)
    for r, expected in ((0.3, 0.3), (-2.0, -1.5), (2.0, 1.5), (1.5, 1.5)):
        assert grad(r, 1.5, 1.0)[1] == pytest.approx(expected, rel=1e-15)
    clipped = ez.autodiff(m.clipped, ez.Reverse, ez.Active, ez.Active)
    assert clipped(0.5, 1.0)[1] == pytest.approx(1.0) and clipped(-1.0, 1.0)[1] == 0.0


def test_a_struct_return_cannot_be_const():
    # Enzyme v0.0.289 aborted (an isolated build killed by signal 6).
    m = ez.c(
        "typedef struct { double a, b; } pair;\npair sc(double x, double y) "
        "{ pair p = {x * y, x + y * y}; return p; }"
    )
    assert ez.autodiff(m.sc, ez.Forward, ez.Dual, ez.Dual, ez.Dual)(2.0, 1.0, 3.0, 0.0) == (
        (6.0, 11.0),
        (3.0, 1.0),
    )
    for mode, acts in ((ez.Forward, (ez.Dual, ez.Dual)), (ez.Reverse, (ez.Active, ez.Active))):
        with pytest.raises(ez.ActivityError, match=r"struct of 2 values.*cannot leave Const"):
            ez.autodiff(m.sc, mode, *acts, ez.Const)
