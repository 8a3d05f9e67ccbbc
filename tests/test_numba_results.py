"""Numba functions that return arrays or tuples, differentiated as written: the
return activity applies to every part of the result (see enzyme_py/_numba_results.py).
Each against float64 central finite differences."""

import numba
import numpy as np
import pytest

import enzyme_py as ez

from reference import fd_jacobian

pytestmark = pytest.mark.needs_enzyme


@numba.njit
def smooth(x, k):
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = k * np.sin(x[i]) * x[i]
    return out


@numba.njit
def outer_rows(x):
    out = np.zeros((2, x.shape[0]))
    for i in range(x.shape[0]):
        out[0, i] = x[i] ** 2
        out[1, i] = x[i] * x[(i + 1) % x.shape[0]]
    return out


@numba.njit
def stats(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] ** 3
    return x * 2.0, s


@numba.njit
def filtered(x):
    return x[x > 0.0] ** 2  # a result whose shape depends on the values


@numba.njit
def view_result(x):
    return x[::2] * 3.0


def jacobian_fd(f, x, h=1e-6):
    """d f(x) / d x by central differences: shape f(x).shape + x.shape."""
    columns = []
    for j in range(x.size):
        e = np.zeros(x.size)
        e[j] = h
        e = e.reshape(x.shape)
        columns.append((np.asarray(f(x + e)) - np.asarray(f(x - e))) / (2 * h))
    return np.moveaxis(np.array(columns), 0, -1).reshape(np.shape(f(x)) + x.shape)


X = np.linspace(-1.0, 2.0, 6)


def test_reverse_mode_of_an_array_result_takes_its_cotangent():
    df = ez.autodiff(smooth, ez.Reverse, ez.Duplicated, ez.Const, ez.Duplicated)
    cotangent = np.linspace(1.0, 2.0, 6)
    kept = cotangent.copy()
    dx = np.zeros(6)
    (result,) = df(X, dx, 3.0, cotangent)
    np.testing.assert_allclose(result, smooth(X, 3.0))
    expected = cotangent @ jacobian_fd(lambda v: smooth(v, 3.0), X)
    np.testing.assert_allclose(dx, expected, rtol=1e-6)
    np.testing.assert_array_equal(cotangent, kept)  # the cotangent is left alone


def test_forward_mode_of_an_array_result_returns_its_tangent():
    tangent = np.linspace(0.5, 1.5, 6)
    expected = jacobian_fd(lambda v: smooth(v, 3.0), X) @ tangent
    dual = ez.autodiff(smooth, ez.Forward, ez.Dual, ez.Const, ez.Dual)
    y, dy = dual(X, tangent, 3.0)
    np.testing.assert_allclose(y, smooth(X, 3.0))
    np.testing.assert_allclose(dy, expected, rtol=1e-6)
    only = ez.autodiff(smooth, ez.Forward, ez.Dual, ez.Const, ez.DualOnly)
    np.testing.assert_allclose(only(X, tangent, 3.0), expected, rtol=1e-6)
    const = ez.autodiff(smooth, ez.Forward, ez.Const, ez.Const, ez.Const)
    np.testing.assert_allclose(const(X, 3.0), smooth(X, 3.0))


def test_a_two_dimensional_result():
    cotangent = np.arange(12.0).reshape(2, 6) / 5.0
    dx = np.zeros(6)
    ez.autodiff(outer_rows, ez.Reverse, ez.Duplicated, ez.Duplicated)(X, dx, cotangent)
    jac = jacobian_fd(outer_rows, X)
    np.testing.assert_allclose(dx, np.tensordot(cotangent, jac, axes=2), rtol=1e-6)
    _, dy = ez.autodiff(outer_rows, ez.Forward, ez.Dual, ez.Dual)(X, np.ones(6))
    np.testing.assert_allclose(dy, jac @ np.ones(6), rtol=1e-6)


def test_a_tuple_of_an_array_and_a_scalar():
    dx = np.zeros(6)
    cot_array = np.linspace(0.0, 1.0, 6)
    ((doubled, total),) = ez.autodiff(stats, ez.Reverse, ez.Duplicated, ez.Duplicated)(
        X, dx, (cot_array, 0.5)
    )
    np.testing.assert_allclose(doubled, 2 * X)
    assert total == pytest.approx(np.sum(X**3))
    np.testing.assert_allclose(dx, 2.0 * cot_array + 0.5 * 3 * X**2, rtol=1e-12)
    (y, s), (dy, ds) = ez.autodiff(stats, ez.Forward, ez.Dual, ez.Dual)(X, np.ones(6))
    np.testing.assert_allclose(y, 2 * X)
    assert s == pytest.approx(np.sum(X**3))
    np.testing.assert_allclose(dy, 2.0 * np.ones(6))
    assert ds == pytest.approx(np.sum(3 * X**2))


def test_a_result_whose_shape_depends_on_the_values():
    x = np.array([-1.0, 2.0, 0.5, -3.0, 1.5])
    y, dy = ez.autodiff(filtered, ez.Forward, ez.Dual, ez.Dual)(x, np.ones(5))
    np.testing.assert_allclose(y, x[x > 0] ** 2)
    np.testing.assert_allclose(dy, 2 * x[x > 0])
    dx = np.zeros(5)
    ez.autodiff(filtered, ez.Reverse, ez.Duplicated, ez.Duplicated)(x, dx, np.ones(3))
    np.testing.assert_allclose(dx, np.where(x > 0, 2 * x, 0.0))


def test_a_result_that_is_a_strided_view():
    dx = np.zeros(6)
    (y,) = ez.autodiff(view_result, ez.Reverse, ez.Duplicated, ez.Duplicated)(X, dx, np.ones(3))
    np.testing.assert_allclose(y, 3 * X[::2])
    np.testing.assert_allclose(dx, [3.0, 0, 3.0, 0, 3.0, 0])


def test_batched_forward_mode_of_an_array_result():
    df = ez.autodiff(smooth, ez.Forward, ez.Dual, ez.Const, ez.DualOnly, width=2)
    tangents = np.stack([np.ones(6), np.linspace(0, 1, 6)])
    jac = jacobian_fd(lambda v: smooth(v, 2.0), X)
    np.testing.assert_allclose(df(X, tangents, 2.0), tangents @ jac.T, rtol=1e-6)


def test_a_cotangent_of_the_wrong_shape_is_a_value_error():
    df = ez.autodiff(smooth, ez.Reverse, ez.Duplicated, ez.Const, ez.Duplicated)
    with pytest.raises(ValueError, match="another shape"):
        df(X, np.zeros(6), 3.0, np.ones(5))
    with pytest.raises(ValueError, match="1 dimensions"):
        df(X, np.zeros(6), 3.0, np.ones((6, 1)))


def test_array_results_need_duplicated_in_reverse_mode():
    with pytest.raises(ez.ActivityError, match="returns an array.*Duplicated.*Active is for"):
        ez.autodiff(smooth, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)(
            X, np.zeros(6), 3.0, 1.0
        )


def test_a_tuple_cotangent_must_be_a_tuple():
    df = ez.autodiff(stats, ez.Reverse, ez.Duplicated, ez.Duplicated)
    with pytest.raises(TypeError, match="tuple of 2"):
        df(X, np.zeros(6), np.ones(6))


@pytest.mark.parametrize("how", ["jacobian", "jacfwd", "jacrev"])
def test_the_jacobian_of_an_array_result(how):
    jac = getattr(ez, how)(smooth)(X, 3.0)
    np.testing.assert_allclose(jac, jacobian_fd(lambda v: smooth(v, 3.0), X), rtol=1e-6)
    jac2 = getattr(ez, how)(outer_rows)(X)
    assert jac2.shape == (2, 6, 6)
    np.testing.assert_allclose(jac2, jacobian_fd(outer_rows, X), rtol=1e-6, atol=1e-9)


def test_jvp_and_vjp_of_an_array_result():
    tangent = np.linspace(0.5, 1.5, 6)
    jac = jacobian_fd(lambda v: smooth(v, 3.0), X)
    y, dy = ez.jvp(smooth, (X, 3.0), (tangent, None))
    np.testing.assert_allclose(y, smooth(X, 3.0))
    np.testing.assert_allclose(dy, jac @ tangent, rtol=1e-6)
    value, vjp_fn = ez.vjp(smooth, X, 3.0)
    np.testing.assert_allclose(value, smooth(X, 3.0))
    cotangent = np.linspace(-1.0, 1.0, 6)
    dx, dk = vjp_fn(cotangent)
    np.testing.assert_allclose(dx, cotangent @ jac, rtol=1e-6)
    assert dk == pytest.approx(float(cotangent @ (np.sin(X) * X)))
    (dtx,) = ez.vjp(stats, X)[1]((np.ones(6), 2.0))
    np.testing.assert_allclose(dtx, 2.0 + 2.0 * 3 * X**2)


@numba.njit
def loss_and_residuals(x, k):
    r = k * x * x - 1.0
    s = 0.0
    for i in range(r.shape[0]):
        s += r[i] * r[i]
    return s, r


@numba.njit
def sine_and_square(x):
    return np.sin(x), x * x


def test_a_tuple_with_arrays_after_its_first_part():
    # (loss, residuals) and (array, array): Enzyme's type analysis refused both until
    # the wrapper stopped storing a part's position where Numba keeps its exception info.
    k, seed_r = 1.5, np.linspace(-1.0, 1.0, 6)
    dx = np.zeros(6)
    ((s, r),) = ez.autodiff(loss_and_residuals, ez.Reverse, ez.Duplicated, ez.Const,
                            ez.Duplicated)(X, dx, k, (0.5, seed_r.copy()))  # fmt: skip
    residuals = k * X * X - 1.0
    np.testing.assert_allclose(r, residuals, rtol=1e-15)
    assert s == pytest.approx(np.sum(residuals**2), rel=1e-14)
    np.testing.assert_allclose(dx, (0.5 * 2.0 * residuals + seed_r) * 2.0 * k * X, rtol=1e-12)
    (s, r), (ds, dr) = ez.autodiff(loss_and_residuals, ez.Forward, ez.Dual, ez.Const,
                                   ez.Dual)(X, np.ones(6), k)  # fmt: skip
    assert ds == pytest.approx(np.sum(2.0 * residuals * 2.0 * k * X), rel=1e-12)
    np.testing.assert_allclose(dr, 2.0 * k * X, rtol=1e-14)

    a, b = np.linspace(0.1, 1.0, 6), np.linspace(2.0, -1.0, 6)
    dx = np.zeros(6)
    ((sine, square),) = ez.autodiff(sine_and_square, ez.Reverse, ez.Duplicated, ez.Duplicated)(
        X, dx, (a.copy(), b.copy())
    )
    np.testing.assert_allclose(sine, np.sin(X), rtol=1e-15)
    np.testing.assert_allclose(square, X * X, rtol=1e-15)
    np.testing.assert_allclose(dx, a * np.cos(X) + b * 2.0 * X, rtol=1e-12)
    fd = jacobian_fd(lambda z: np.concatenate(sine_and_square(z)), X)
    np.testing.assert_allclose(dx, np.concatenate([a, b]) @ fd, rtol=1e-6, atol=1e-8)


def test_the_part_with_another_shape_is_named():
    df = ez.autodiff(sine_and_square, ez.Reverse, ez.Duplicated, ez.Duplicated)
    with pytest.raises(ValueError, match="part 1 of its result with another shape"):
        df(X, np.zeros(6), (np.ones(6), np.ones(5)))
    with pytest.raises(ValueError, match="part 0 of its result with another shape"):
        df(X, np.zeros(6), (np.ones(4), np.ones(6)))


@numba.njit
def value_count_signs(x):
    return np.sum(x * x), x.shape[0], x > 0.0


@numba.njit
def value_sign_scale(x):
    return np.sum(x * x), x[0] > 0.0, x.shape[0] * 1.5


def test_integer_and_boolean_parts_have_no_derivative():
    dx = np.zeros(6)
    reverse = ez.autodiff(value_count_signs, ez.Reverse, ez.Duplicated, ez.Duplicated)
    ((s, n, positive),) = reverse(X, dx, (1.0, None, None))
    assert s == pytest.approx(np.sum(X * X), rel=1e-14) and n == 6
    np.testing.assert_array_equal(positive, X > 0.0)
    np.testing.assert_allclose(dx, 2.0 * X, rtol=1e-14)
    forward = ez.autodiff(value_count_signs, ez.Forward, ez.Dual, ez.Dual)
    (s, n, positive), tangent = forward(-X, np.ones(6))
    assert tangent[1:] == (None, None) and n == 6
    assert tangent[0] == pytest.approx(np.sum(-2.0 * X), rel=1e-14)

    dx = np.zeros(6)
    reverse = ez.autodiff(value_sign_scale, ez.Reverse, ez.Duplicated, ez.Duplicated)
    ((s, first, scale),) = reverse(X, dx, (1.0, None, 2.0))
    assert first is bool(X[0] > 0.0) and scale == 9.0  # a boolean scalar: a byte in the tuple
    np.testing.assert_allclose(dx, 2.0 * X, rtol=1e-14)
    forward = ez.autodiff(value_sign_scale, ez.Forward, ez.Dual, ez.Dual)
    (s, first, scale), tangent = forward(-X, np.ones(6))
    assert first is bool(-X[0] > 0.0) and tangent[1:] == (None, 0.0)


@numba.njit
def reversed_view(x):
    return x[::-1]


@numba.njit
def reversed_rows(a):
    return a[::-1, ::2]


@pytest.mark.parametrize("f", [reversed_view, reversed_rows])
def test_a_returned_view_with_negative_strides_in_both_modes(f):
    # The view's strides (negative) were untyped to Enzyme's type analysis: forward
    # mode refused it ("mixed activity") until the wrapper marks the result's shape
    # and strides as integers.
    x = np.linspace(0.5, 2.0, 6) if f is reversed_view else np.arange(12.0).reshape(3, 4) / 5
    expected = fd_jacobian(lambda v: np.ascontiguousarray(f(v)), x)
    np.testing.assert_allclose(ez.jacfwd(f)(x), expected, atol=1e-9)
    np.testing.assert_allclose(ez.jacrev(f)(x), expected, atol=1e-9)
    tangent = np.arange(1.0, x.size + 1).reshape(x.shape)
    y, dy = ez.jvp(f, (x,), (tangent,))
    np.testing.assert_allclose(y, f(x))
    np.testing.assert_allclose(dy, f(tangent), atol=1e-12)  # linear: its own tangent map
