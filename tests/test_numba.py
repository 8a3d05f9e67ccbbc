"""Numba @njit functions: what differentiates, checked against independent references."""

import math

import numpy as np
import pytest

import enzyme_py as ez

from reference import fd_gradient, fd_scalar

numba = pytest.importorskip("numba")

from numba_functions import squares_then_sines  # noqa: E402

pytestmark = pytest.mark.needs_enzyme
njit = numba.njit


@njit
def weighted_sin(x, s, n):
    t = 0.0
    for i in range(n):
        t += s * math.sin(x[i]) * x[i]
    return t


@njit
def scalar_mix(a, b, k, flag):
    r = a * a * b
    if flag:
        r = r + math.exp(b)
    if k > 2:
        return r * k  # early return
    return r - math.tanh(a) + math.sqrt(b) + math.log(b) + abs(a) ** 1.5 + min(a, b) + max(a, b)


@njit
def rank3(x):
    s = 0.0
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            for k in range(x.shape[2]):
                s += math.cos(x[i, j, k]) * (i + 1)
    return s


@njit
def helper(v):
    return v * v


@njit
def calls_helper(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += helper(x[i]) + np.sin(x[i]) ** 2 + np.exp(-x[i]) + np.power(x[i], 3)
    return s


@njit
def temporaries(x):
    y = np.empty_like(x)
    z = np.zeros(x.shape[0])
    for i in range(x.shape[0]):
        y[i] = math.sin(x[i])
        z[i] = y[i] * x[i]
    return y.sum() + (z * z).sum()


@njit
def write_output(x, out):
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            out[i, j] = x[i, j] ** 2 + math.exp(x[i, j])


@njit
def float32_sum(x):
    s = np.float32(0.0)
    for i in range(x.shape[0]):
        s += x[i] * x[i]
    return s


@njit(boundscheck=True)
def picks(x, i):
    return x[i] * 2.0


@njit
def divide(a, b):
    return a / b


def test_array_scalar_int_params():
    x = np.linspace(0, 1, 7)
    dx = np.zeros(7)
    df = ez.autodiff(weighted_sin, ez.Reverse, ez.Duplicated, ez.Active, ez.Const, ez.Active)
    value, ds = df(x, dx, 2.0, 7, 1.0)
    assert value == pytest.approx(2.0 * np.sum(np.sin(x) * x), rel=1e-14)
    assert ds == pytest.approx(np.sum(np.sin(x) * x), rel=1e-14)
    np.testing.assert_allclose(dx, 2.0 * (np.cos(x) * x + np.sin(x)), rtol=1e-13)


@pytest.mark.parametrize(("k", "flag"), [(1, True), (1, False), (3, True)])
def test_branches_early_return_and_math(k, flag):
    a, b = 0.7, 1.3
    df = ez.autodiff(scalar_mix, ez.Reverse, ez.Active, ez.Active, ez.Const, ez.Const, ez.Active)
    value, da, db = df(a, b, k, flag, 1.0)
    f = scalar_mix.py_func
    assert value == pytest.approx(f(a, b, k, flag), rel=1e-14)
    assert da == pytest.approx(fd_scalar(lambda t: f(t, b, k, flag), a), rel=1e-7)
    assert db == pytest.approx(fd_scalar(lambda t: f(a, t, k, flag), b), rel=1e-7)


def test_forward_mode_scalars():
    df = ez.autodiff(scalar_mix, ez.Forward, ez.Dual, ez.Const, ez.Const, ez.Const, ez.Dual)
    y, dy = df(0.7, 1.0, 1.3, 1, True)
    f = scalar_mix.py_func
    assert y == pytest.approx(f(0.7, 1.3, 1, True))
    assert dy == pytest.approx(fd_scalar(lambda t: f(t, 1.3, 1, True), 0.7), rel=1e-7)


def test_rank3_arrays():
    x = np.random.default_rng(1).normal(size=(2, 3, 4))
    dx = np.zeros_like(x)
    (value,) = ez.autodiff(rank3, ez.Reverse, ez.Duplicated, ez.Active)(x, dx, 1.0)
    weights = np.arange(1, 3)[:, None, None]
    assert value == pytest.approx(np.sum(np.cos(x) * weights), rel=1e-13)
    np.testing.assert_allclose(dx, -np.sin(x) * weights, rtol=1e-13)


def test_calls_between_njit_functions_and_ufuncs():
    x = np.linspace(0.2, 1.5, 6)
    g = ez.grad(calls_helper)(x)
    expected = 2 * x + 2 * np.sin(x) * np.cos(x) - np.exp(-x) + 3 * x**2
    np.testing.assert_allclose(g, expected, rtol=1e-13)


def test_temporaries_inside_the_function():
    x = np.linspace(0.1, 1.0, 5)
    dx = np.zeros(5)
    (value,) = ez.autodiff(temporaries, ez.Reverse, ez.Duplicated, ez.Active)(x, dx, 1.0)
    assert value == pytest.approx(temporaries.py_func(x), rel=1e-14)
    np.testing.assert_allclose(dx, fd_gradient(temporaries.py_func, x), rtol=1e-6, atol=1e-9)
    for _ in range(3):  # temporaries are released after each call
        dx[:] = 0
        ez.autodiff(temporaries, ez.Reverse, ez.Duplicated, ez.Active)(x, dx, 1.0)
    np.testing.assert_allclose(dx, fd_gradient(temporaries.py_func, x), rtol=1e-6, atol=1e-9)


def test_output_arrays_reverse_and_forward():
    x = np.random.default_rng(2).random((3, 4))
    out, dout, dx = np.zeros_like(x), np.ones_like(x), np.zeros_like(x)
    dw = ez.autodiff(write_output, ez.Reverse, ez.Duplicated, ez.Duplicated)
    assert dw(x, dx, out, dout) == (None,)
    np.testing.assert_allclose(out, x**2 + np.exp(x), rtol=1e-15)
    np.testing.assert_allclose(dx, 2 * x + np.exp(x), rtol=1e-14)
    tx = np.random.default_rng(3).random((3, 4))
    out, tout = np.zeros_like(x), np.zeros_like(x)
    assert ez.autodiff(write_output, ez.Forward, ez.Dual, ez.Dual)(x, tx, out, tout) is None
    np.testing.assert_allclose(tout, (2 * x + np.exp(x)) * tx, rtol=1e-14)


def test_float32():
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    dx = np.zeros_like(x)
    (value,) = ez.autodiff(float32_sum, ez.Reverse, ez.Duplicated, ez.Active)(x, dx, 1.0)
    assert value == pytest.approx(float(np.sum(x.astype(np.float64) ** 2)), rel=1e-6)
    np.testing.assert_allclose(dx, 2 * x, rtol=1e-6)
    assert dx.dtype == np.float32


def test_signature_from_sig_and_lazily_per_types():
    @njit
    def sq(x):
        return x * x

    lazy = ez.autodiff(sq, ez.Reverse, ez.Active, ez.Active)
    assert lazy(3.0, 1.0) == (9.0, 6.0)
    assert lazy(np.float32(2.0), 1.0) == (4.0, 4.0)  # a second specialisation
    typed = ez.autodiff(sq, ez.Reverse, ez.Active, ez.Active, sig="float64(float64)")
    assert typed(1.5, 2.0) == (2.25, 6.0)


def test_a_dispatchers_only_signature_does_not_bind_calls_of_other_types():
    @njit
    def cubes(x):
        s = 0.0
        for i in range(x.shape[0]):
            s += x[i] ** 3
        return s

    cubes(np.ones(3, np.float32))  # earlier use of the function, in float32
    df = ez.autodiff(cubes, ez.Reverse, ez.Duplicated, ez.Active)
    assert len(df._by_types) == 1  # built at once, from that signature
    x32, dx32 = np.array([1.0, 2.0], np.float32), np.zeros(2, np.float32)
    assert df(x32, dx32, 1.0) == (9.0,)
    x, dx = np.array([1.0, 2.0]), np.zeros(2)
    assert df(x, dx, 1.0) == (9.0,)  # was: "needs dtype float32"
    assert dx.tolist() == [3.0, 12.0] and dx32.tolist() == [3.0, 12.0]
    np.testing.assert_allclose(ez.grad(cubes)(np.array([0.5, 1.5])), [0.75, 6.75])


@njit("float64(float64[::1], float64)")
def typed_sum_of_squares(x, k):
    s = 0.0
    for i in range(x.shape[0]):
        s += k * x[i] ** 2
    return s


def test_a_function_compiled_for_explicit_signatures_differentiates():
    # Numba's compile() of any signature raised "compilation disabled" there.
    x = np.arange(3.0)
    gx, gk = ez.grad(typed_sum_of_squares, argnums=(0, 1))(x, 2.0)
    np.testing.assert_array_equal(gx, [0.0, 4.0, 8.0])
    assert gk == 5.0
    with pytest.raises(TypeError, match=r"'typed_sum_of_squares' was compiled for explicit"):
        ez.grad(typed_sum_of_squares)(x.astype(np.float32), 2.0)


@njit
def discounted(x, n):
    if n == 0:
        return 0.0
    return x[n - 1] ** 2 * x[0] + 0.5 * discounted(x, n - 1)


@njit
def discounted_sum(x):
    return discounted(x, x.shape[0])


@njit
def discounted_into(x, out):
    out[0] = discounted(x, x.shape[0])
    out[1] = x[1]


def test_recursion_is_differentiated_one_direction_at_a_time():
    # Enzyme v0.0.289 gave zeros or garbage for width > 1 through recursion.
    x = np.linspace(0.3, 1.2, 6)
    with pytest.raises(ez.ActivityError, match=r"'discounted_sum' is recursive.*width=3"):
        ez.autodiff(discounted_sum, ez.Forward, ez.Dual, ez.DualOnly, width=3)(x, np.eye(6)[:3])
    gradient = ez.grad(discounted_sum)
    np.testing.assert_allclose(gradient(x), fd_gradient(discounted_sum.py_func, x), rtol=1e-7)
    fd = np.column_stack([fd_gradient(lambda v, i=i: gradient(v)[i], x) for i in range(6)])
    np.testing.assert_allclose(ez.hessian(discounted_sum)(x), fd, rtol=1e-6, atol=1e-6)
    jacobian = ez.jacobian(discounted_into, 0, output=1)(x, np.zeros(2))
    np.testing.assert_allclose(jacobian[0], gradient(x), rtol=1e-14)
    np.testing.assert_array_equal(jacobian[1], np.eye(6)[1])


@njit
def piecewise(a):
    if abs(a - 1.0) > 0.5:  # abs only in a condition
        return a * a
    return 3.0 * a


@njit
def newton_sqrt(a):
    y = a
    while abs(y * y - a) > 1e-12:  # a convergence test
        y = 0.5 * (y + a / y)
    return y


def test_abs_in_conditions_differentiates():
    # Enzyme v0.0.289 aborted ("getting diffe of constant value") on fabs feeding only
    # comparisons; the engine writes those comparisons without fabs.
    assert ez.grad(piecewise)(2.3) == pytest.approx(4.6, rel=1e-15)
    assert ez.grad(piecewise)(1.2) == pytest.approx(3.0, rel=1e-15)
    assert ez.grad(piecewise)(0.2) == pytest.approx(0.4, rel=1e-15)
    assert ez.grad(newton_sqrt)(2.0) == pytest.approx(0.5 / math.sqrt(2.0), rel=1e-12)
    fwd = ez.autodiff(newton_sqrt, ez.Forward, ez.Dual, ez.Dual)
    assert fwd(9.0, 1.0) == pytest.approx((3.0, 1.0 / 6.0), rel=1e-12)


def test_unsigned_integer_arguments_are_refused_before_the_build():
    # Entry points pass signed integers: an unsigned one was a bare KeyError.
    df = ez.autodiff(weighted_sin, ez.Reverse, ez.Duplicated, ez.Const, ez.Const, ez.Active)
    x, dx = np.ones(3), np.zeros(3)
    for n in (np.uint8(3), np.uint32(3), np.uint64(3)):
        with pytest.raises(TypeError, match=r"parameter 'n' of 'weighted_sin' is an unsigned"):
            df(x, dx, 1.0, n, 1.0)
    with pytest.raises(TypeError, match=r"'n' .* unsigned integer \(uint32\).*np.int64\(n\)"):
        ez.grad(weighted_sin)(x, 1.0, np.uint32(3))
    assert not any("uint" in str(s) for s in weighted_sin.signatures)  # not compiled
    assert df(x, dx, 1.0, np.int32(3), 1.0) == (pytest.approx(3 * math.sin(1.0)),)


def test_function_without_parameters():
    @njit
    def constant():
        return 1.5

    assert ez.autodiff(constant, ez.Reverse, ez.Active)(1.0) == (1.5,)
    assert ez.autodiff(constant, ez.Forward, ez.Dual)() == (1.5, 0.0)
    assert ez.autodiff(constant, ez.Forward, ez.DualOnly)() == 0.0


def test_numba_exceptions_surface_as_python_exceptions():
    dp = ez.autodiff(picks, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)
    x, dx = np.ones(3), np.zeros(3)
    assert dp(x, dx, 1, 1.0) == (2.0,)
    np.testing.assert_array_equal(dx, [0.0, 2.0, 0.0])
    with pytest.raises(IndexError, match="index is out of bounds"):
        dp(x, dx, 7, 1.0)
    dd = ez.autodiff(divide, ez.Reverse, ez.Active, ez.Active, ez.Active)
    assert dd(1.0, 2.0, 1.0) == (0.5, 0.5, -0.25)
    with pytest.raises(ZeroDivisionError, match="division by zero"):
        dd(1.0, 0.0, 1.0)


@numba.njit
def checked_sum(x, limit):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i]
    if s > limit:
        raise OverflowError("sum above the limit")
    if s < 0.5:
        raise ValueError("sum below one half")
    return s


def test_concurrent_calls_that_raise_each_report_their_own_exception():
    # Numba's exception info is written into each call's own slot: threads
    # running the derivative at once (the GIL is released) never swap details.
    from concurrent.futures import ThreadPoolExecutor

    df = ez.autodiff(checked_sum, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)
    big, small = np.full(200_000, 2.0), np.full(3, 0.1)

    def call(x):
        try:
            df(x, np.zeros_like(x), 1000.0, 1.0)
        except (OverflowError, ValueError) as exc:
            return type(exc)
        return None

    inputs = [big, small] * 100
    with ThreadPoolExecutor(4) as pool:
        kinds = list(pool.map(call, inputs))
    assert kinds == [OverflowError, ValueError] * 100


def test_activity_errors_name_python_parameters():
    with pytest.raises(
        ez.ActivityError, match=r"parameter 2 \('n'\) of 'weighted_sin' is an integer"
    ):
        ez.autodiff(
            weighted_sin,
            ez.Reverse,
            ez.Duplicated,
            ez.Active,
            ez.Active,
            ez.Active,
            sig="float64(float64[::1], float64, int64)",
        )
    df = ez.autodiff(weighted_sin, ez.Reverse, ez.Duplicated, ez.Active, ez.Const, ez.Active)
    with pytest.raises(ValueError, match="shadow of parameter 0 \\('x'\\)"):
        df(np.ones(3), np.zeros(4), 1.0, 3, 1.0)
    with pytest.raises(TypeError, match=r"takes 5 arguments \(x, dx, s, n, seed\); got 4"):
        df(np.ones(3), np.zeros(3), 1.0, 3)


@njit
def axpy_sum(a, x, y):
    s = 0.0
    for i in range(x.shape[0]):
        y[i] += a * x[i]
        s += y[i] * x[i]
    return s


def test_overlapping_arrays_use_the_alias_safe_derivative():
    # Array data pointers are given to Enzyme as noalias; a call whose arrays overlap
    # must still be right, through the derivative built without that promise.
    df = ez.autodiff(axpy_sum, ez.Reverse, ez.Const, ez.Duplicated, ez.Duplicated, ez.Active)

    def run(x, dx, y, dy):
        return df(2.0, x, dx, y, dy, 1.0)

    x = np.linspace(0.5, 1.5, 6)
    # Disjoint: y' = y + 2x, s = sum(y' x); ds/dx = y' + 2x (through y'), ds/dy = x.
    y = np.ones(6)
    dx, dy = np.zeros(6), np.zeros(6)
    (s,) = run(x.copy(), dx, y, dy)
    np.testing.assert_allclose(s, np.sum((1 + 2 * x) * x), rtol=1e-14)
    np.testing.assert_allclose(dx, (1 + 2 * x) + 2 * x, rtol=1e-14)
    np.testing.assert_allclose(dy, x, rtol=1e-14)
    assert "noalias %a1" in df.only().function.module.ir()  # what Enzyme was promised
    # Overlapping: x and y are the same memory, so each step reads what it wrote.
    z = np.linspace(0.5, 1.5, 6)
    expected = axpy_sum.py_func(2.0, z.copy(), z.copy())  # not aliased in Python either
    w = z.copy()
    dz1, dz2 = np.zeros(6), np.zeros(6)
    (s_alias,) = df(2.0, w, dz1, w, dz2, 1.0)
    w_ref = z.copy()
    assert s_alias == pytest.approx(axpy_sum.py_func(2.0, w_ref, w_ref), rel=1e-14)
    assert s_alias != pytest.approx(expected)  # aliasing really changes the result


def test_a_shadow_overlapping_another_array_is_refused():
    df = ez.autodiff(axpy_sum, ez.Reverse, ez.Const, ez.Duplicated, ez.Duplicated, ez.Active)
    x, y = np.array([1.0, 2.0, 3.0]), np.array([4.0, 5.0, 6.0])
    # The shadow of x is y: the derivative would add into y while reading it.
    with pytest.raises(
        ValueError,
        match=r"the shadow of parameter 1 \('x'\) of 'axpy_sum' overlaps parameter 2 \('y'\)",
    ):
        df(2.0, x, y, y, np.zeros(3), 1.0)
    buffer = np.zeros(4)
    with pytest.raises(ValueError, match=r"shadow of parameter 2 \('y'\).* overlaps parameter 1"):
        df(2.0, buffer[:3], np.zeros(3), y, buffer[1:], 1.0)
    # One shadow for two arrays: the shadow of y, which f writes, is read back, so the
    # adjoints would mix (here 21, 33, 45 instead of dx + dy = 9, 15, 21).
    shared = np.zeros(3)
    with pytest.raises(ValueError, match=r"shadow of parameter 2 .* overlaps the shadow of"):
        df(2.0, x, shared, y, shared, 1.0)
    assert y.tolist() == [4.0, 5.0, 6.0] and x.tolist() == [1.0, 2.0, 3.0]
    assert shared.tolist() == [0.0] * 3
    # One array passed twice may take one shadow twice: they overlap alike. In place,
    # w becomes 3w and s = sum(9 w^2), so ds/dw = 18 w.
    w, dw = x.copy(), np.zeros(3)
    assert df(2.0, w, dw, w, dw, 1.0) == (pytest.approx(9 * np.sum(x**2)),)
    np.testing.assert_allclose(dw, 18 * x, rtol=1e-15)


@njit
def weighted_by(x, w):
    s = 0.0
    for i in range(x.shape[0]):
        s += w[i] * x[i] * x[i]
    return s


def test_a_written_const_array_sharing_memory_with_a_shadowed_one_is_refused():
    # Enzyme takes a Const argument's memory for constant: with scratch a view of x, what
    # flows from x through scratch was lost (a zero gradient, no error).
    df = ez.autodiff(squares_then_sines, ez.Reverse, ez.Duplicated, ez.Const, ez.ActiveOnly)
    x = np.array([0.3, -1.2, 2.0, 0.7])
    w, dw = x.copy(), np.zeros(4)
    with pytest.raises(
        ValueError,
        match=r"parameter 1 \('scratch'\) of 'squares_then_sines' is Const and shares memory "
        r"with 'x', which has a shadow, and 'squares_then_sines' writes 'scratch'.*pass "
        r"'scratch' as Duplicated",
    ):
        df(w, dw, w, 1.0)
    assert w.tolist() == x.tolist() and dw.tolist() == [0.0] * 4  # refused before the call
    # As Duplicated, the same call is right: s = sum(sin(x^2)) of the x passed.
    both = ez.autodiff(squares_then_sines, ez.Reverse, ez.Duplicated, ez.Duplicated, ez.ActiveOnly)
    w, dw = x.copy(), np.zeros(4)
    both(w, dw, w, dw, 1.0)
    np.testing.assert_allclose(dw, np.cos(x * x) * 2.0 * x, rtol=1e-14)


def test_a_const_array_the_function_only_reads_may_share_memory_with_a_shadowed_one():
    # One array passed twice, one of them Const: a partial derivative (d/dx of
    # sum(w x^2) at w = x is 2 w x), as before.
    df = ez.autodiff(weighted_by, ez.Reverse, ez.Duplicated, ez.Const, ez.ActiveOnly)
    x = np.array([0.5, -1.5, 2.0])
    dx = np.zeros(3)
    df(x, dx, x, 1.0)
    np.testing.assert_allclose(dx, 2.0 * x * x, rtol=1e-15)


def test_a_written_const_array_sharing_memory_is_refused_from_njit_code_too():
    df = ez.autodiff(squares_then_sines, ez.Reverse, ez.Duplicated, ez.Const, ez.ActiveOnly)
    call = df.njit()

    @njit
    def step(x, dx, scratch):
        return call(x, dx, scratch, 1.0)

    x = np.array([0.3, -1.2, 2.0, 0.7])
    w, dw = x.copy(), np.zeros(4)
    with pytest.raises(
        ValueError,
        match=r"parameter 1 \('scratch'\) of 'squares_then_sines' is Const and shares memory "
        r"with 'x', which has a shadow.*pass 'scratch' as Duplicated",
    ):
        step(w, dw, w)
    big = np.concatenate([x, [0.0, 0.0]])
    with pytest.raises(ValueError, match="is Const and shares memory with 'x'"):
        step(big[:4], dw, big[2:])  # partly
    assert w.tolist() == x.tolist() and dw.tolist() == [0.0] * 4  # refused before the call
    step(w, dw, np.zeros(4))  # memory of its own
    np.testing.assert_allclose(dw, np.cos(x * x) * 2.0 * x, rtol=1e-14)
    # A Const array the function only reads may share memory, from @njit code too.
    partial = ez.autodiff(weighted_by, ez.Reverse, ez.Duplicated, ez.Const, ez.ActiveOnly)
    weighted = partial.njit()

    @njit
    def weighted_step(x, dx):
        return weighted(x, dx, x, 1.0)

    dx = np.zeros(4)
    weighted_step(x, dx)
    np.testing.assert_allclose(dx, 2.0 * x * x, rtol=1e-15)


def test_gmm_gradient_against_finite_differences():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks import kernels

    args = list(kernels.gmm_inputs(d=3, k=4, n=20, seed=3))
    grads = ez.grad(kernels.gmm_objective, argnums=(0, 1, 2))(*args)
    for which, g in zip((0, 1, 2), grads, strict=True):

        def f(v, which=which):
            call = list(args)
            call[which] = v
            return kernels.gmm_objective.py_func(*call)

        np.testing.assert_allclose(g, fd_gradient(f, args[which].copy()), rtol=1e-6, atol=1e-6)


@njit
def log_det(a):
    return np.log(np.linalg.det(a))  # loops in the compile differentiated


@njit
def eigenvalue_sum(a):
    return np.sum(np.linalg.eigvalsh(a) ** 2)  # LAPACK (numba_ez_xxxevd): no derivative


@njit
def corner_product(x):
    y = x.reshape((2, 2))
    return y[0, 0] * y[1, 1]


def test_reshape_differentiates():
    # numba_attempt_nocopy_reshape only computes strides: inactive (_numba_runtime.py).
    x = np.array([1.0, 2.0, 3.0, 4.0])
    np.testing.assert_array_equal(ez.grad(corner_product)(x), [4.0, 0.0, 0.0, 1.0])
    _, dy = ez.jvp(corner_product, (x,), (np.array([1.0, 0.0, 0.0, 2.0]),))
    assert dy == 4.0 + 2.0


@njit
def shifted_energy(x):
    t = np.zeros(x.shape[0] + 1)
    t[1:] = x  # Numba's slice assignment (its size check raises with run-time values)
    return (t * t).sum()


def test_constructs_enzyme_cannot_differentiate_get_advice_that_fits():
    # Slice assignment differentiates since its exception's arguments do
    # (_numba_runtime.py); tests/test_numba_runtime_constructs.py has more forms.
    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(ez.grad(shifted_energy)(x), 2 * x, rtol=1e-14)
    # parallel=True functions: tests/test_prange.py


@njit
def ramp_weighted(x):
    return (x * np.arange(x.shape[0])).sum()  # an int64 array in float arithmetic


@njit
def first_fields(x, r):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * r[i]["a"]
    return s


def test_mixed_activity_and_record_arrays_get_advice():
    x = np.ones(3)
    # np.arange's int64 array is allocated inactive (_numba_runtime.py): it differentiates.
    np.testing.assert_array_equal(ez.grad(ramp_weighted)(x), [0.0, 1.0, 2.0])
    assert ez.jvp(ramp_weighted, (x,), (np.array([1.0, 1.0, 0.5]),))[1] == 2.0
    df = ez.autodiff(ramp_weighted, ez.Reverse, ez.Duplicated, ez.ActiveOnly, runtime_activity=True)
    dx = np.zeros(3)
    df(x, dx, 1.0)
    np.testing.assert_array_equal(dx, [0.0, 1.0, 2.0])
    records = np.zeros(3, np.dtype([("a", np.float64), ("b", np.float64)]))
    with pytest.raises(TypeError, match=r"parameter 'r' of 'first_fields' is an array of Record"):
        ez.grad(first_fields)(x, records)


@njit
def _scatter_doubled(out, x, idx):
    for i in range(idx.size):
        out[idx[i]] = 2.0 * x[i]


@njit
def reversed_energy(x):
    idx = np.arange(x.size)[::-1].copy()  # an index array made inside the function
    u = np.zeros(x.size)
    _scatter_doubled(u, x, idx)
    return np.sum(u * x)


@njit
def reversed_energy_given(x, idx):
    u = np.zeros(x.size)
    _scatter_doubled(u, x, idx)
    return np.sum(u * x)


def test_an_index_array_made_inside_or_passed_in_works():
    x = np.linspace(0.5, 2.0, 5)
    # d/dx sum_i 2 x_i x_(n-1-i) = 4 x reversed; np.arange's array is allocated inactive.
    np.testing.assert_allclose(ez.grad(reversed_energy)(x), 4 * x[::-1], rtol=1e-14)
    t = np.linspace(1.0, 0.2, 5)
    assert ez.jvp(reversed_energy, (x,), (t,))[1] == pytest.approx(4 * x[::-1] @ t, rel=1e-14)
    idx = np.arange(x.size)[::-1].copy()
    np.testing.assert_allclose(ez.grad(reversed_energy_given)(x, idx), 4 * x[::-1], rtol=1e-14)


def test_lapack_call_gives_enzyme_error_with_advice():
    # BLAS (np.dot, @) differentiates: tests/test_numba_blas.py; np.linalg.det, solve,
    # inv, slogdet, cholesky and norm too: tests/test_numba_linalg.py.
    a = np.eye(3) + 0.1
    np.testing.assert_allclose(ez.grad(log_det)(a), np.linalg.inv(a).T, rtol=1e-12)
    with pytest.raises(ez.EnzymeError) as info:
        ez.grad(eigenvalue_sum)(a)
    text = str(info.value)
    assert "'eigenvalue_sum'" in text and "numba_ez_" in text
    assert "What to do:" in text and "write the step as loops" in text


def test_ctypes_call_gives_enzyme_error_with_advice():
    import ctypes
    import ctypes.util

    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    c_sin = libm.sin
    c_sin.restype, c_sin.argtypes = ctypes.c_double, [ctypes.c_double]

    @njit
    def via_ctypes(x):
        return c_sin(x) * x

    assert via_ctypes(1.0) == pytest.approx(math.sin(1.0))
    with pytest.raises(ez.EnzymeError, match=r"(?s)'via_ctypes'.*calls a ctypes or cffi function"):
        ez.grad(via_ctypes)(1.0)


def test_derivative_callable_from_njit_code():
    df = ez.autodiff(weighted_sin, ez.Reverse, ez.Duplicated, ez.Active, ez.Const, ez.Active)
    x = np.linspace(0.1, 1.2, 6)
    dx_py = np.zeros(6)
    expected = df(x, dx_py, 2.0, 6, 1.0)
    inner = df.njit()

    @njit
    def optimizer_step(x, s, lr):
        dx = np.zeros_like(x)
        value, ds = inner(x, dx, s, x.shape[0], 1.0)
        x2 = x - lr * dx
        return value, ds, dx, x2

    value, ds, dx, x2 = optimizer_step(x, 2.0, 0.1)
    assert (value, ds) == pytest.approx(expected)
    np.testing.assert_allclose(dx, dx_py, rtol=1e-15)
    np.testing.assert_allclose(x2, x - 0.1 * dx_py, rtol=1e-15)
    with pytest.raises(ValueError, match="shadow of .x. needs the shape and dtype of its array"):
        inner(x, np.zeros(3), 2.0, 6, 1.0)


def test_njit_caller_uses_the_alias_safe_build_for_overlapping_arrays():
    df = ez.autodiff(axpy_sum, ez.Reverse, ez.Const, ez.Duplicated, ez.Duplicated, ez.Active)
    z = np.linspace(0.5, 1.5, 6)
    w1, w2 = z.copy(), z.copy()
    (python_result,) = df(2.0, w1, np.zeros(6), w1, np.zeros(6), 1.0)
    (njit_result,) = df.njit()(2.0, w2, np.zeros(6), w2, np.zeros(6), 1.0)
    assert njit_result == pytest.approx(python_result, rel=1e-15)
    np.testing.assert_allclose(w1, w2)


@njit
def squares(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i]
    return s


def test_njit_caller_checks_its_arrays_as_the_python_path_does():
    # Numba compiles the caller for whatever it is given: without these checks a
    # float32, strided or reversed shadow was written 8 bytes per element from its
    # data pointer, past its end.
    from numba.core.errors import TypingError

    grad = ez.autodiff(squares, ez.Reverse, ez.Duplicated, ez.Active, sig="float64(float64[::1])")
    inner = grad.njit()

    @njit
    def gradient(x, dx):
        return inner(x, dx, 1.0)

    x = np.arange(1.0, 5.0)
    dx = np.zeros(4)
    assert gradient(x, dx) == (30.0,)
    assert dx.tolist() == [2.0, 4.0, 6.0, 8.0]
    wide = np.zeros(8)
    read_only = x.copy()
    read_only.flags.writeable = False
    typing_errors = {
        "the shadow of 'x' must be a writable float64 array": (x, np.zeros(8, np.float32)[:4]),
        "parameter 'x' must be a writable float64 array of 1 dimension; got array.int64": (
            np.arange(4),
            np.zeros(4),
        ),
        "got array.float64, 2d": (np.ones((2, 2)), np.zeros((2, 2))),
        "got readonly array": (read_only, np.zeros(4)),
    }
    for message, args in typing_errors.items():
        with pytest.raises(TypingError, match=message):
            gradient(*args)
    value_errors = {
        "the shadow of 'x' must be C-contiguous": (x, wide[::2]),
        "the shadow of 'x' must be C-contiguous$": (x, wide[4:][::-1]),
        "parameter 'x' must be C-contiguous": (np.arange(1.0, 9.0)[::2], np.zeros(4)),
        "the shadow of 'x' overlaps its array": (x, x),
        "the shadow of 'x' needs the shape and dtype of its array": (x, np.zeros(3)),
    }
    for message, args in value_errors.items():
        with pytest.raises(ValueError, match=message):
            gradient(*args)
    assert wide.tolist() == [0.0] * 8  # nothing was written
    assert x.tolist() == [1.0, 2.0, 3.0, 4.0]


@njit
def dot(x, y):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * y[i]
    return s


def test_njit_caller_refuses_a_shadow_overlapping_another_array():
    sig = "float64(float64[::1], float64[::1])"
    inner = ez.autodiff(dot, ez.Reverse, ez.Duplicated, ez.Const, ez.Active, sig=sig).njit()
    x, y = np.array([1.0, 2.0, 3.0]), np.array([4.0, 5.0, 6.0])
    with pytest.raises(ValueError, match="the shadow of 'x' overlaps parameter 'y'"):
        inner(x, y, y, 1.0)
    assert y.tolist() == [4.0, 5.0, 6.0]
    dx = np.zeros(3)
    assert inner(x, dx, y, 1.0) == (32.0,)
    assert dx.tolist() == [4.0, 5.0, 6.0]
    # Two shadows may share memory only as their arrays do.
    sig = "float64(float64, float64[::1], float64[::1])"
    df = ez.autodiff(
        axpy_sum, ez.Reverse, ez.Const, ez.Duplicated, ez.Duplicated, ez.Active, sig=sig
    )
    both = df.njit()
    x, y, shared = np.linspace(0.5, 1.5, 6), np.linspace(1.0, 2.0, 6), np.zeros(6)
    with pytest.raises(ValueError, match="the shadow of 'y' overlaps the shadow of 'x'"):
        both(2.0, x, shared, y, shared, 1.0)
    w1, w2, s1, s2 = x.copy(), x.copy(), np.zeros(6), np.zeros(6)
    assert both(2.0, w1, s1, w1, s1, 1.0) == pytest.approx(df(2.0, w2, s2, w2, s2, 1.0))
    np.testing.assert_allclose(s1, s2, rtol=1e-15)


NUMBA_SCRIPT = """
import numba, numpy as np, enzyme_py as ez
@numba.njit
def cube_sum(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] ** 3
    return s
x = np.linspace(0, 1, 5)
first = ez.autodiff(cube_sum, ez.Reverse, ez.Duplicated, ez.Active)
again = ez.autodiff(cube_sum, ez.Reverse, ez.Duplicated, ez.Active)
dx = np.zeros(5)
first(x, dx, 1.0)
again(x, np.zeros(5), 1.0)
print(first.only().entry == again.only().entry, np.allclose(dx, 3 * x**2))
"""


def test_numba_derivatives_are_cached_in_memory_and_on_disk(tmp_path):
    from conftest import run_python

    env = {"ENZYME_PY_CACHE_DIR": str(tmp_path), "ENZYME_PY_LOG": "1"}
    first = run_python(NUMBA_SCRIPT, env=env)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == "True True"  # one build for both, right gradient
    assert first.stderr.count("from Enzyme") == 1
    second = run_python(NUMBA_SCRIPT, env=env)  # a new process, the same code
    assert second.returncode == 0, second.stderr
    assert "from disk cache" in second.stderr and "from Enzyme" not in second.stderr
    assert second.stdout.strip() == "True True"
