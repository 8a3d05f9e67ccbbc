"""Numba functions called as users call them: arrays of any layout (views, negative
strides, Fortran order, read-only), shadows of any layout, explicit signatures with
layout 'A', parameters with defaults left out. Each against finite differences."""

import numba
import numpy as np
import pytest

import enzyme_py as ez

from reference import fd_gradient, fd_jacobian

pytestmark = pytest.mark.needs_enzyme


@numba.njit
def weighted_cubes(x, w):
    s = 0.0
    for i in range(x.shape[0]):
        s += w[i] * x[i] ** 3
    return s


@numba.njit
def row_weighted_squares(a):
    s = 0.0
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            s += (i + 1) * a[i, j] ** 2 + 0.5 * j * a[i, j]
    return s


@numba.njit
def squares_into(x, out):
    for i in range(x.shape[0]):
        out[i] = x[i] * x[i]


def _every_other_column_of(a):
    wide = np.zeros((a.shape[0], 2 * a.shape[1]))
    wide[:, ::2] = a
    return wide[:, ::2]


def _views():
    base = np.linspace(0.5, 2.0, 20)
    return {
        "every other": base[::2],
        "reversed": base[::-1][:10],
        "offset view": base[3:13],
        "reversed, every other": base[::-2],
    }


@pytest.mark.parametrize("view", list(_views()))
def test_gradient_of_a_strided_view(view):
    x = _views()[view]
    w = np.arange(1.0, 11.0)[::-1]  # negative strides too
    expected = fd_gradient(lambda v: weighted_cubes(v, w), x)
    np.testing.assert_allclose(ez.grad(weighted_cubes)(x, w), expected, rtol=1e-6)
    # A shadow laid out like its array, and one that is not.
    for dx in (np.zeros(20)[::2], np.zeros(10)):
        df = ez.autodiff(weighted_cubes, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)
        (value,) = df(x, dx, w, 2.0)
        assert value == pytest.approx(weighted_cubes(x, w))
        np.testing.assert_allclose(dx, 2.0 * expected, rtol=1e-6)


@pytest.mark.parametrize("view", list(_views()))
def test_a_strided_views_gradient_is_an_array_of_its_own(view):
    # Its shadow is made laid out as the view (no copy in and out of a stand-in);
    # the gradient returned is still compact, and a new array at each call.
    x = _views()[view]
    w = np.arange(1.0, 11.0)
    expected = fd_gradient(lambda v: weighted_cubes(v, w), x)
    grad = ez.grad(weighted_cubes)
    first, second = grad(x, w), grad(x, w)
    for g in (first, second):
        np.testing.assert_allclose(g, expected, rtol=1e-6)
        assert g.shape == x.shape and g.flags.c_contiguous
        assert g.nbytes == x.nbytes and not np.shares_memory(g, x)
    assert not np.shares_memory(first, second)
    value, g = ez.value_and_grad(weighted_cubes)(x, w)
    assert value == pytest.approx(weighted_cubes(np.ascontiguousarray(x), w))
    np.testing.assert_allclose(g, expected, rtol=1e-6)


def test_a_fortran_ordered_arrays_gradient_keeps_its_order():
    a = np.asfortranarray(np.arange(12.0).reshape(3, 4) / 7.0)
    expected = fd_gradient(row_weighted_squares, np.ascontiguousarray(a))
    g = ez.grad(row_weighted_squares)(a)
    np.testing.assert_allclose(g, expected, rtol=1e-6)
    assert g.flags.f_contiguous and not np.shares_memory(g, a)


@pytest.mark.parametrize(
    "make",
    [
        lambda a: np.asfortranarray(a),
        lambda a: np.ascontiguousarray(a.T).T,
        lambda a: _every_other_column_of(a),
        lambda a: np.pad(a, 1)[1:-1, 1:-1],
    ],
    ids=["Fortran order", "transposed view", "column slice", "inner window"],
)
def test_two_dimensional_arrays_of_any_layout(make):
    a = make(np.arange(12.0).reshape(3, 4) / 7.0)
    expected = fd_gradient(row_weighted_squares, np.ascontiguousarray(a))
    np.testing.assert_allclose(ez.grad(row_weighted_squares)(a), expected, rtol=1e-6)
    tangent = np.ones_like(a)
    y, dy = ez.jvp(row_weighted_squares, (a,), (tangent,))
    assert y == pytest.approx(row_weighted_squares(np.ascontiguousarray(a)))
    assert dy == pytest.approx(float(np.sum(expected)), rel=1e-6)


def test_forward_and_reverse_into_a_strided_output():
    x = np.linspace(0.5, 2.0, 20)[::2]
    out, tout = np.zeros(20)[::2], np.zeros(10)
    ez.autodiff(squares_into, ez.Forward, ez.Dual, ez.Dual)(x, np.ones(10), out, tout)
    np.testing.assert_allclose(out, x * x)
    np.testing.assert_allclose(tout, 2 * x)
    dx, dout = np.zeros(10), np.full(20, 3.0)[::2]
    ez.autodiff(squares_into, ez.Reverse, ez.Duplicated, ez.Duplicated)(x, dx, out, dout)
    np.testing.assert_allclose(dx, 6 * x)
    np.testing.assert_array_equal(dout, 0.0)  # the seed in the shadow is consumed


def test_batched_forward_mode_on_a_strided_view():
    x = np.linspace(0.5, 2.0, 20)[::2]
    w = np.arange(1.0, 11.0)
    df = ez.autodiff(weighted_cubes, ez.Forward, ez.Dual, ez.Const, ez.Dual, width=2)
    directions = np.stack([np.ones(10), np.arange(10.0)])
    _, dy = df(x, directions, w)
    g = 3 * w * x**2
    np.testing.assert_allclose(dy, [g.sum(), (g * np.arange(10)).sum()], rtol=1e-12)


def test_read_only_inputs():
    w = np.linspace(0.0, 1.0, 10)
    w.flags.writeable = False
    x = np.linspace(1.0, 2.0, 10)
    x.flags.writeable = False
    np.testing.assert_allclose(ez.grad(weighted_cubes, 0)(x, w), 3 * w * x**2)
    np.testing.assert_allclose(ez.grad(weighted_cubes, 1)(x, w), x**3)


def test_a_read_only_array_the_function_writes_is_refused():
    x = np.linspace(1.0, 2.0, 4)
    out = np.zeros(4)
    out.flags.writeable = False
    df = ez.autodiff(squares_into, ez.Forward, ez.Dual, ez.Dual)
    with pytest.raises(TypeError, match="read-only array: parameter 'out'"):
        df(x, np.ones(4), out, np.zeros(4))


@numba.njit("float64(float64[:], float64[:])")
def precompiled_weighted_cubes(x, w):
    s = 0.0
    for i in range(x.shape[0]):
        s += w[i] * x[i] ** 3
    return s


@numba.njit("void(float64[:], float64[:])")
def precompiled_squares_into(x, out):
    for i in range(x.shape[0]):
        out[i] = x[i] * x[i]


def test_functions_precompiled_for_layout_a_take_any_array():
    w = np.arange(1.0, 11.0)
    for x in (np.linspace(0.5, 2.0, 10), np.linspace(0.5, 2.0, 20)[::2]):
        np.testing.assert_allclose(ez.grad(precompiled_weighted_cubes)(x, w), 3 * w * x**2)
    x = np.linspace(0.5, 2.0, 10)
    out, tout = np.zeros(10), np.zeros(10)
    df = ez.autodiff(precompiled_squares_into, ez.Forward, ez.Dual, ez.Dual)
    df(x, np.ones(10), out, tout)
    np.testing.assert_allclose(tout, 2 * x)


def test_precompiled_signature_still_refuses_other_dtypes():
    with pytest.raises(TypeError, match="explicit signatures only"):
        ez.grad(precompiled_weighted_cubes)(np.ones(3, np.float32), np.ones(3, np.float32))


def test_strided_derivatives_are_differentiated_again():
    # The shadow parameter dx is indexed with x's strides: given in another layout, a
    # stand-in laid out like x is passed (and copied back); of another shape, refused.
    df = ez.autodiff(precompiled_weighted_cubes, ez.Reverse, ez.Duplicated, ez.Const, ez.ActiveOnly)
    fwd = ez.autodiff(df, ez.Forward, ez.Dual, ez.Dual, ez.Const, ez.Const)
    x, w = np.linspace(0.5, 2.0, 12)[::-3], np.arange(1.0, 5.0)
    t = np.array([1.0, -1.0, 0.5, 2.0])
    dx, tdx = np.zeros(4), np.zeros(8)[::2]
    fwd(x, t, dx, tdx, w, 1.0)
    np.testing.assert_allclose(dx, fd_gradient(lambda z: float(np.sum(w * z**3)), x.copy()))
    h_t = fd_gradient(lambda z: float(np.sum(3 * w * z**2 * t)), x.copy())  # (H t)_i
    np.testing.assert_allclose(tdx, h_t, rtol=1e-6)
    with pytest.raises(ValueError, match="'dx'.*shape"):
        fwd(x, t, np.zeros(3), tdx, w, 1.0)


@numba.njit
def minkowski(x, y, p=2.0):
    s = 0.0
    for i in range(x.shape[0]):
        s += abs(x[i] - y[i]) ** p
    return s ** (1.0 / p)


@numba.njit
def scaled_squares_into(x, out, scale=2.0):
    for i in range(x.shape[0]):
        out[i] = scale * x[i] ** 2


X, Y = np.array([1.0, 2.0, 4.0]), np.array([0.5, -1.0, 2.0])


def test_a_parameter_with_a_default_can_be_left_out():
    df = ez.autodiff(minkowski, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)
    dx = np.zeros(3)
    (value,) = df(X, dx, Y, 1.0)
    assert value == pytest.approx(np.linalg.norm(X - Y))
    np.testing.assert_allclose(dx, fd_gradient(lambda v: minkowski(v, Y), X), rtol=1e-6)
    fw = ez.autodiff(minkowski, ez.Forward, ez.Dual, ez.Const, ez.Dual)
    y, dy = fw(X, np.array([1.0, 0.0, 0.0]), Y)
    assert y == pytest.approx(np.linalg.norm(X - Y))
    assert dy == pytest.approx(dx[0])


def test_a_parameter_with_a_default_can_still_be_given():
    df = ez.autodiff(minkowski, ez.Reverse, ez.Duplicated, ez.Const, ez.Const, ez.Active)
    dx = np.zeros(3)
    (value,) = df(X, dx, Y, 3.0, 1.0)
    assert value == pytest.approx(np.sum(np.abs(X - Y) ** 3) ** (1 / 3))
    np.testing.assert_allclose(dx, fd_gradient(lambda v: minkowski(v, Y, 3.0), X), rtol=1e-6)


def test_a_function_returning_nothing_with_a_default_left_out():
    df = ez.autodiff(scaled_squares_into, ez.Forward, ez.Dual, ez.Dual)
    out, tout = np.zeros(3), np.zeros(3)
    assert df(X, np.ones(3), out, tout) is None
    np.testing.assert_allclose(out, 2 * X**2)
    np.testing.assert_allclose(tout, 4 * X)


def test_too_few_activities_for_the_parameters_without_defaults():
    with pytest.raises(ez.ActivityError, match="at least 2"):
        ez.autodiff(minkowski, ez.Reverse, ez.Duplicated)


@numba.njit
def scaled_product(a, b):
    return a * a * b


def test_an_earlier_call_with_other_types_does_not_poison_the_derivative():
    scaled_product(1, 2)  # ints: the dispatcher's only signature
    assert ez.grad(scaled_product)(1.5, 2.0) == pytest.approx(6.0)
    df = ez.autodiff(scaled_product, ez.Reverse, ez.Active, ez.Const, ez.Active)
    assert df(1.5, 2.0, 1.0)[1] == pytest.approx(6.0)


def test_a_c_function_takes_a_shadow_of_any_layout():
    # The derivative indexes the shadow as its (C-contiguous) array: a strided shadow
    # gets a stand-in, whose adjoints are added into it after the call.
    m = ez.c(
        "double dot(const double *a, const double *b, int n) {"
        " double s = 0; for (int i = 0; i < n; ++i) s += a[i] * b[i]; return s; }"
    )
    a, b = np.arange(1.0, 5.0), np.array([2.0, -1.0, 0.5, 3.0])
    wide = np.ones(8)
    df = ez.autodiff(m.dot, ez.Reverse, ez.Duplicated, ez.Const, ez.Const, ez.Active)
    df(a, wide[::2], b, 4, 2.0)
    np.testing.assert_allclose(wide[::2], 1.0 + 2.0 * b)
    np.testing.assert_array_equal(wide[1::2], 1.0)  # the gaps are left alone


@numba.njit
def shifted_copy(x, y):
    # Reads x, writes y: with noalias, Enzyme may keep x's values from before y's writes.
    for i in range(y.shape[0]):
        y[i] = 2.0 * x[i] * x[i]
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i] * x[i]
    return s


def test_arrays_that_overlap_below_a_reversed_view_use_the_alias_safe_build():
    # x runs backwards from base[8] to base[4]: its bytes lie below its data pointer,
    # where y = base[:5] overlaps it at base[4]. The call must see the overlap (the
    # build that promises noalias would be wrong here).
    def views(b):
        return b[4:9][::-1], b[:5]

    def primal(b):
        return shifted_copy(*views(b.copy()))

    start = np.linspace(0.5, 1.5, 10)
    base, dbase = start.copy(), np.zeros(10)
    (x, y), (dx, dy) = views(base), views(dbase)
    df = ez.autodiff(shifted_copy, ez.Reverse, ez.Duplicated, ez.Duplicated, ez.Active)
    (value,) = df(x, dx, y, dy, 1.0)
    assert value == pytest.approx(primal(start))
    np.testing.assert_allclose(dbase, fd_gradient(primal, start), rtol=1e-6, atol=1e-9)


def test_the_overlap_check_sees_the_bytes_below_a_reversed_view():
    from enzyme_py._arguments import byte_span, overlapping

    base = np.zeros(10)
    x, y = base[4:9][::-1], base[:5]
    assert byte_span(x) == (base.ctypes.data + 32, base.ctypes.data + 72)
    assert overlapping([x, y])  # they share base[4]
    assert not overlapping([base[5:][::-1], base[:5]])
    assert overlapping([base[::2], base[1::2]])  # interleaved: conservatively together


STRIDED_COPY_PROGRAM = """
import numba
import numpy as np
import enzyme_py as ez

@numba.njit
def norm_of_cumsum_minus_copy(x):
    return np.linalg.norm(np.cumsum(x) - x.copy())

base = np.linspace(-1.0, 1.0, 5)
h = 1e-6
for x in (np.stack([base, base + 1.0], axis=1)[:, 0], base[::-1], base.copy()):
    g = ez.grad(norm_of_cumsum_minus_copy)(x)
    fd = np.array([
        (norm_of_cumsum_minus_copy(x + h * e) - norm_of_cumsum_minus_copy(x - h * e)) / (2 * h)
        for e in np.eye(5)
    ])
    print(float(np.max(np.abs(g - fd))))
"""


def test_the_reverse_of_a_strided_copy_ends():
    # Enzyme wrote the last index of x.copy()'s loop (x strided) as `add nuw n, -1`,
    # which LLVM folds to -1: the reverse loop never ended and crashed the interpreter
    # (found by the random array-expression search). In a fresh interpreter, so that a
    # crash fails this test only.
    from conftest import run_python

    proc = run_python(STRIDED_COPY_PROGRAM, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    errors = [float(line) for line in proc.stdout.split()]
    assert len(errors) == 3
    assert max(errors) < 1e-6


def test_which_arrays_overlap_themselves():
    from enzyme_py._arguments import overlaps_itself

    base = np.arange(12.0)
    windows = np.lib.stride_tricks.sliding_window_view(base, 3)  # rows overlap
    apart = [base, base[::2], base[::-1], base.reshape(3, 4).T, base.reshape(3, 4)[:, ::2]]
    sharing = [np.broadcast_to(base[:1], (4,)), np.broadcast_to(base[:4], (3, 4)), windows]
    assert not any(overlaps_itself(a) for a in apart)
    assert all(overlaps_itself(a) for a in sharing)


def test_a_broadcast_arrays_derivatives_are_per_element():
    # np.broadcast_to gives every element the same memory (stride 0): a shadow laid
    # out so added every element's adjoint into one place (all four read 40, not
    # 4, 8, 12, 16). The derivative gets a contiguous copy of the values instead.
    x = np.broadcast_to(np.array([2.0]), (4,))
    w = np.ones(4)
    expected = 3.0 * w * x**2  # weighted_cubes: d/dx_i of w_i x_i^3
    np.testing.assert_allclose(ez.grad(weighted_cubes)(x, w), expected, rtol=1e-12)
    value, g = ez.value_and_grad(weighted_cubes)(x, w)
    assert value == pytest.approx(8.0 * 4)
    np.testing.assert_allclose(g, expected, rtol=1e-12)
    tangent = np.arange(1.0, 5.0)
    _, dy = ez.jvp(weighted_cubes, (x, w), (tangent, np.zeros(4)))
    assert dy == pytest.approx(float(expected @ tangent), rel=1e-12)
    dx = np.zeros(4)
    df = ez.autodiff(weighted_cubes, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)
    df(x, dx, w, 1.0)
    np.testing.assert_allclose(dx, expected, rtol=1e-12)
    # Two dimensions: a row repeated.
    a = np.broadcast_to(np.array([0.5, 1.0, 1.5, 2.0]), (3, 4))
    expected_2d = fd_gradient(row_weighted_squares, np.ascontiguousarray(a))
    np.testing.assert_allclose(ez.grad(row_weighted_squares)(a), expected_2d, rtol=1e-6)


def test_a_writable_array_sharing_memory_or_such_a_shadow_is_refused():
    shared = np.lib.stride_tricks.as_strided(np.arange(1.0, 4.0), shape=(4,), strides=(0,))
    w = np.ones(4)
    with pytest.raises(ValueError, match=r"'x'.* share memory.*np\.ascontiguousarray"):
        ez.grad(weighted_cubes)(shared, w)
    x = np.linspace(0.5, 2.0, 4)
    shadow = np.lib.stride_tricks.as_strided(np.zeros(1), shape=(4,), strides=(0,))
    df = ez.autodiff(weighted_cubes, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)
    with pytest.raises(ValueError, match=r"shadow.* share memory"):
        df(x, shadow, w, 1.0)


@numba.njit
def reshaped_twice(x):
    return x.reshape(2, 3) * 2.0


@numba.njit
def reshaped_squares(x):
    return np.sum(x.reshape(2, 3) ** 2)


def test_code_for_contiguous_arrays_given_a_view():
    # Numba compiles x.reshape only for contiguous arrays. The Jacobian helpers call
    # the derivative with contiguous copies: they asked about the view whether the
    # function returns an array, got Numba's refusal, took it for a scalar function
    # and failed (an ActivityError; a NumPy broadcast error).
    x = np.linspace(0.5, 2.0, 6)[::-1]
    expected = fd_jacobian(lambda v: reshaped_twice(np.ascontiguousarray(v)), x)
    np.testing.assert_allclose(ez.jacrev(reshaped_twice)(x), expected, atol=1e-9)
    np.testing.assert_allclose(ez.jacfwd(reshaped_twice)(x), expected, atol=1e-9)
    # ez.grad passes the view itself: refused, saying what Numba refused and what to do.
    with pytest.raises(TypeError, match=r"'x'.*np\.ascontiguousarray.*reshape\(\) supports"):
        ez.grad(reshaped_squares)(x)
    np.testing.assert_allclose(
        ez.grad(reshaped_squares)(np.ascontiguousarray(x)), 2.0 * x, rtol=1e-12
    )
