"""Helpers that were silently wrong: functions that overwrite their inputs (per batch,
per pullback), scratch arrays, DuplicatedOnly / DualOnly outputs read back, and
hessian's tuple argnums. Every number against float64 central finite differences."""

import math

import numpy as np
import pytest

import enzyme_py as ez

from reference import fd_gradient, fd_jacobian

numba = pytest.importorskip("numba")
pytestmark = pytest.mark.needs_enzyme


@numba.njit
def overwrite_map(x, out):
    for i in range(x.shape[0]):
        x[i] = math.sin(x[i])  # overwrites its input
    for i in range(out.shape[0]):
        out[i] = x[i] * x[(i + 1) % x.shape[0]]


def overwrite_map_np(z):
    z = z.copy()
    out = np.zeros_like(z)
    overwrite_map.py_func(z, out)
    return out


@pytest.mark.parametrize("helper", [ez.jacobian, ez.jacfwd, ez.jacrev])
def test_jacobian_batches_start_from_the_input_as_given(helper):
    # 16 columns: two batches; the second ran on the input the first overwrote
    # (columns 8-15 were wrong).
    x = np.linspace(0.3, 1.7, 16)
    given = x.copy()
    jac = helper(overwrite_map, 0, output=1)(x, np.zeros(16))
    np.testing.assert_allclose(jac, fd_jacobian(overwrite_map_np, given), rtol=1e-7, atol=1e-9)
    np.testing.assert_array_equal(x, given)  # the caller's arrays are left as given


@numba.njit
def overwrite_energy(x):
    for i in range(x.shape[0]):
        x[i] = x[i] * x[i]  # overwrites its input
    s = 0.0
    for i in range(x.shape[0] - 1):
        s += math.sin(x[i]) * x[i + 1]
    return s


def overwrite_energy_grad(z):
    return fd_gradient(lambda v: overwrite_energy.py_func(v.copy()), z)


def test_hessian_batches_start_from_the_input_as_given():
    x = np.linspace(0.2, 1.3, 11)  # two batches of columns
    given = x.copy()
    h = ez.hessian(overwrite_energy)(x)

    def analytic_grad(z):  # d/dz of sum sin(z_i^2) z_{i+1}^2
        g = np.zeros_like(z)
        g[:-1] += np.cos(z[:-1] ** 2) * 2 * z[:-1] * z[1:] ** 2
        g[1:] += np.sin(z[:-1] ** 2) * 2 * z[1:]
        return g

    np.testing.assert_allclose(analytic_grad(given), overwrite_energy_grad(given), rtol=1e-6)
    np.testing.assert_allclose(h, fd_jacobian(analytic_grad, given), rtol=1e-6, atol=1e-8)
    np.testing.assert_array_equal(x, given)


@numba.njit
def squares_first(x):
    x[0] = x[0] * x[0]  # overwrites its input
    return x[0] * x[1]


def test_vjp_pullback_differentiates_where_vjp_was_called():
    x = np.array([1.5, 2.0])
    value, pullback = ez.vjp(squares_first, x)
    assert value == pytest.approx(4.5, rel=1e-15)
    assert x[0] == 2.25  # f ran once on the caller's array, as a call does
    expected = fd_gradient(lambda v: squares_first.py_func(v.copy()), np.array([1.5, 2.0]))
    for _ in range(2):  # the second call runs on what the first overwrote, before
        np.testing.assert_allclose(pullback(1.0)[0], expected, rtol=1e-8)
    # jvp runs once: its tangent is the derivative at the input as given.
    _, dy = ez.jvp(squares_first, (np.array([1.5, 2.0]),), (np.array([0.0, 1.0]),))
    assert dy == pytest.approx(expected[1], rel=1e-8)


@numba.njit
def through_scratch(x, tmp):
    for i in range(x.shape[0]):
        tmp[i] = math.sin(x[i])
    s = 0.0
    for i in range(x.shape[0]):
        s += tmp[i] * tmp[i] * x[i]
    return s


def test_scratch_arrays_carry_the_derivative():
    # tmp was Const: Enzyme dropped what went through it (a zero gradient).
    x = np.linspace(0.1, 1.0, 4)
    f = lambda z: through_scratch.py_func(z, np.zeros(4))  # noqa: E731
    expected = fd_gradient(f, x)
    np.testing.assert_allclose(ez.grad(through_scratch)(x, np.zeros(4)), expected, rtol=1e-8)
    v = np.linspace(-1.0, 1.0, 4)
    _, dy = ez.jvp(through_scratch, (x, np.zeros(4)), (v, None))
    assert dy == pytest.approx(float(expected @ v), rel=1e-8)
    np.testing.assert_allclose(ez.jacfwd(through_scratch)(x, np.zeros(4)), expected, rtol=1e-8)
    np.testing.assert_allclose(
        ez.hessian(through_scratch)(x, np.zeros(4)),
        fd_jacobian(lambda z: fd_gradient(f, z, 1e-5), x, 1e-4),
        rtol=1e-4,
        atol=1e-6,
    )


@numba.njit
def normalise(x, out):
    s = 0.0
    for i in range(x.shape[0]):
        out[i] = x[i] * x[i]
        s += out[i]
    for i in range(x.shape[0]):
        out[i] /= s  # reads back what it wrote


def normalise_np(z):
    out = np.zeros_like(z)
    normalise.py_func(z, out)
    return out


def test_duplicated_only_and_dual_only_outputs_read_back():
    x = np.linspace(0.5, 1.5, 5)
    jac = fd_jacobian(normalise_np, x)
    w = np.linspace(-1.0, 2.0, 5)
    reverse = ez.autodiff(normalise, ez.Reverse, ez.Duplicated, ez.DuplicatedOnly)
    dx, out = np.zeros(5), np.zeros(5)
    reverse(x, dx, out, w.copy())
    np.testing.assert_allclose(dx, w @ jac, rtol=1e-7)  # was wrong (DUP_NONEED)
    np.testing.assert_allclose(out, normalise_np(x), rtol=1e-15)  # written too
    forward = ez.autodiff(normalise, ez.Forward, ez.Dual, ez.DualOnly)
    dout, out = np.zeros(5), np.zeros(5)
    forward(x, w.copy(), out, dout)
    np.testing.assert_allclose(dout, jac @ w, rtol=1e-7)  # was wrong (DUP_NONEED)
    np.testing.assert_allclose(out, normalise_np(x), rtol=1e-15)


@numba.njit
def coupled(x, y):
    s = 0.0
    for i in range(x.shape[0]):
        for j in range(y.shape[0]):
            s += math.sin(x[i] * y[j]) + x[i] ** 2 * y[j] ** 3
    return s


def coupled_grads(x, y):
    xy = np.outer(x, y)
    gx = np.sum(np.cos(xy) * y + 2 * np.outer(x, y**3), axis=1)
    gy = np.sum(np.cos(xy) * x[:, None] + 3 * np.outer(x**2, y**2), axis=0)
    return gx, gy


def test_hessian_tuple_argnums_gives_the_nested_blocks():
    x, y = np.linspace(0.2, 0.9, 3), np.linspace(-0.5, 0.7, 10)  # y: two batches
    h = ez.hessian(coupled, argnums=(0, 1))(x, y)
    assert isinstance(h, tuple) and len(h) == 2 and all(len(row) == 2 for row in h)
    expected = {
        (0, 0): fd_jacobian(lambda z: coupled_grads(z, y)[0], x),
        (0, 1): fd_jacobian(lambda z: coupled_grads(x, z)[0], y),
        (1, 0): fd_jacobian(lambda z: coupled_grads(z, y)[1], x),
        (1, 1): fd_jacobian(lambda z: coupled_grads(x, z)[1], y),
    }
    for (a, b), block in expected.items():
        assert h[a][b].shape == ((x, y)[a].shape + (x, y)[b].shape)
        np.testing.assert_allclose(h[a][b], block, rtol=1e-7, atol=1e-8)
    h1 = ez.hessian(coupled, argnums=1)(x, y)  # an int: the plain block
    np.testing.assert_allclose(h1, expected[1, 1], rtol=1e-7, atol=1e-8)
    reversed_order = ez.hessian(coupled, argnums=(1, 0))(x, y)
    np.testing.assert_allclose(reversed_order[0][1], expected[1, 0], rtol=1e-7, atol=1e-8)
    with pytest.raises(ValueError, match="names an argument twice"):
        ez.hessian(coupled, argnums=(0, -2))(x, y)
    with pytest.raises(TypeError, match=r"hessian\(coupled\): argument 1 is str; only float"):
        ez.hessian(coupled, argnums=1)(x, "y")


@numba.njit
def matrix_energy(a):
    s = 0.0
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            s += a[i, j] ** 3 * a[(i + 1) % a.shape[0], j]
    return s


def test_hessian_of_a_matrix_argument():
    a = np.linspace(0.1, 1.2, 6).reshape(2, 3)
    h = ez.hessian(matrix_energy)(a)
    assert h.shape == (2, 3, 2, 3)

    def gradient(z):
        return fd_gradient(matrix_energy.py_func, z, 1e-5)

    np.testing.assert_allclose(h, fd_jacobian(gradient, a, 1e-4), rtol=1e-4, atol=1e-6)


@numba.njit
def weighted(x, w):
    s = 0.0
    for i in range(x.shape[0]):
        s += w[i] * x[i] ** 3
    return s


def test_only_arrays_the_function_may_write_get_shadows():
    # A shadow for every float array would be exact but slower: arrays that LLVM infers
    # readonly (data the function only reads) stay Const; scratch arrays get one.
    x = np.linspace(0.1, 1.0, 4)
    g = ez.grad(weighted)
    np.testing.assert_allclose(g(x, np.ones(4) * 2.0), 6.0 * x**2, rtol=1e-14)
    assert [key[1] for key in g._derivatives._made] == [(ez.Duplicated, ez.Const)]
    s = ez.grad(through_scratch)
    s(x, np.zeros(4))
    assert [key[1] for key in s._derivatives._made] == [(ez.Duplicated, ez.Duplicated)]


def test_jacobians_of_scalar_functions_leave_the_arguments_as_given():
    expected = fd_gradient(lambda v: squares_first.py_func(v.copy()), np.array([1.5, 2.0]))
    for helper in (ez.jacobian, ez.jacfwd, ez.jacrev):
        x = np.array([1.5, 2.0])
        np.testing.assert_allclose(helper(squares_first)(x), expected, rtol=1e-8)
        assert x.tolist() == [1.5, 2.0]
