"""grad, value_and_grad, jvp, vjp, jacobian and hessian for Numba, C and IR functions."""

import math

import numpy as np
import pytest

import enzyme_py as ez
from benchmarks.kernels import rosenbrock_gradient

from reference import fd_gradient

numba = pytest.importorskip("numba")
pytestmark = pytest.mark.needs_enzyme


@numba.njit
def rosen(x):
    s = 0.0
    for i in range(x.shape[0] - 1):
        s += 100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2
    return s


@numba.njit
def scaled(x, a, n):
    s = 0.0
    for i in range(n):
        s += a * math.sin(x[i]) ** 2
    return s


@numba.njit
def mapping(x, out):
    for i in range(out.shape[0]):
        out[i] = math.sin(x[i]) * x[(i + 1) % x.shape[0]]


C = (
    ez.c(
        """
    #include <math.h>
    double rosen(const double *x, int n) {
        double s = 0.0;
        for (int i = 0; i + 1 < n; ++i)
            s += 100.0 * pow(x[i + 1] - x[i] * x[i], 2) + pow(1.0 - x[i], 2);
        return s;
    }
    void mapping(const double *x, double *out, int n) {
        for (int i = 0; i < n; ++i) out[i] = sin(x[i]) * x[(i + 1) % n];
    }
    """
    )
    if ez.has_autodiff()
    else None
)


def rosen_np(x):
    return float(np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2))


def rosen_hess(x):
    n = len(x)
    h = np.zeros((n, n))
    for i in range(n - 1):
        h[i, i] += 1200 * x[i] ** 2 - 400 * x[i + 1] + 2
        h[i, i + 1] = h[i + 1, i] = -400 * x[i]
        h[i + 1, i + 1] += 200
    return h


X = np.array([0.5, 1.2, -0.3, 0.8, 1.1, -0.7, 0.2, 0.9, 1.4, -1.0, 0.3])


@pytest.fixture(params=["numba", "c"])
def rosen_fn(request):
    if request.param == "numba":
        return rosen, (X,)
    return C.rosen, (X, len(X))


def test_grad_and_value_and_grad(rosen_fn):
    f, args = rosen_fn
    np.testing.assert_allclose(ez.grad(f)(*args), rosenbrock_gradient(X), rtol=1e-13)
    value, g = ez.value_and_grad(f)(*args)
    assert value == pytest.approx(rosen_np(X), rel=1e-14)
    np.testing.assert_allclose(g, rosenbrock_gradient(X), rtol=1e-13)


def test_hessian_larger_than_one_batch(rosen_fn):
    f, args = rosen_fn
    h = ez.hessian(f)(*args)
    assert h.shape == (len(X), len(X))
    np.testing.assert_allclose(h, rosen_hess(X), rtol=1e-12, atol=1e-12)


def test_jvp_and_vjp(rosen_fn):
    f, args = rosen_fn
    v = np.linspace(-1, 1, len(X))
    tangents = (v,) + (None,) * (len(args) - 1)
    y, dy = ez.jvp(f, args, tangents)
    assert y == pytest.approx(rosen_np(X), rel=1e-14)
    assert dy == pytest.approx(float(rosenbrock_gradient(X) @ v), rel=1e-12)
    value, pullback = ez.vjp(f, *args)
    assert value == pytest.approx(rosen_np(X), rel=1e-14)
    back = pullback(3.0)
    np.testing.assert_allclose(back[0], 3.0 * rosenbrock_gradient(X), rtol=1e-13)
    assert all(b is None for b in back[1:])  # integer arguments have no cotangent


def test_tangents_and_cotangents_are_real_numbers():
    x = np.linspace(0.1, 1.0, 5)
    for bad, what in ((x * (1 + 1j), "dtype complex128"), (["1"] * 5, "list")):
        with pytest.raises(
            TypeError, match=f"tangent of argument 0 must hold real numbers.*{what}"
        ):
            ez.jvp(scaled, (x, 2.5, 5), (bad, None, None))
    for bad in ("1.5", b"1", 1 + 1j):  # None: no tangent, the argument is Const
        with pytest.raises(
            TypeError, match=r"tangent of argument 1 is a float scalar.*real number"
        ):
            ez.jvp(scaled, (x, 2.5, 5), (None, bad, None))
    _, pullback = ez.vjp(scaled, x, 2.5, 5)
    for bad in ("3", None, np.complex128(3)):
        with pytest.raises(TypeError, match="cotangent given to vjp_fn .* real number"):
            pullback(bad)
    # Real numbers of any kind are taken: ints, NumPy scalars, 0-d arrays, int arrays.
    _, dy = ez.jvp(scaled, (x, 2.5, 5), (np.ones(5, np.int64), np.float32(0.0), None))
    assert dy == pytest.approx(float(np.sum(2.5 * np.sin(2 * x))), rel=1e-13)
    np.testing.assert_allclose(pullback(np.array(2))[0], 2 * pullback(1)[0], rtol=1e-15)


def test_argnums_tuple_with_scalar():
    x = np.linspace(0.1, 1.0, 5)
    gx, ga = ez.grad(scaled, argnums=(0, 1))(x, 2.5, 5)
    np.testing.assert_allclose(gx, 2.5 * 2 * np.sin(x) * np.cos(x), rtol=1e-13)
    assert ga == pytest.approx(float(np.sum(np.sin(x) ** 2)), rel=1e-14)
    assert ez.grad(scaled, argnums=1)(x, 2.5, 5) == pytest.approx(ga, rel=1e-14)
    with pytest.raises(TypeError, match="argument 2 is int; only float scalars"):
        ez.grad(scaled, argnums=2)(x, 2.5, 5)
    with pytest.raises(ValueError, match="argnums 5 is out of range"):
        ez.grad(scaled, argnums=5)(x, 2.5, 5)
    # NumPy integers are positions too; a bool is not (True was taken as 1).
    np.testing.assert_array_equal(ez.grad(scaled, argnums=np.int64(0))(x, 2.5, 5), gx)
    with pytest.raises(TypeError, match="argnums must be argument positions .ints.; got True"):
        ez.grad(scaled, argnums=True)(x, 2.5, 5)


def test_jacobian_of_output_function():
    x = np.linspace(0.3, 1.7, 11)  # more columns than one batch

    def numeric(z):
        out = np.zeros_like(z)
        mapping.py_func(z, out)
        return out

    expected = np.column_stack(
        [fd_gradient(lambda z, r=r: numeric(z)[r], x) for r in range(len(x))]
    ).T
    j_numba = ez.jacobian(mapping, 0, output=1)(x, np.zeros_like(x))
    assert j_numba.shape == (11, 11)
    np.testing.assert_allclose(j_numba, expected, rtol=1e-6, atol=1e-8)
    j_c = ez.jacobian(C.mapping, 0, output=1)(x, np.zeros_like(x), len(x))
    np.testing.assert_allclose(j_c, j_numba, rtol=1e-14)


def test_jacobian_refuses_an_output_that_is_its_input():
    # The output was never given a tangent of its own: an all-zero Jacobian came back.
    x = np.linspace(0.3, 1.7, 4)
    with pytest.raises(ValueError, match=r"input \(argnums\) and the output are both argument 0"):
        ez.jacobian(mapping, 0, output=0)(x, np.zeros(4))
    buffer = np.linspace(0.3, 1.7, 6)
    with pytest.raises(ValueError, match=r"output \(arguments 0 and 1\) overlap"):
        ez.jacobian(mapping, 0, output=1)(buffer[:4], buffer[2:])
    np.testing.assert_array_equal(buffer, np.linspace(0.3, 1.7, 6))


def test_jacobian_of_scalar_function_is_its_gradient(rosen_fn):
    f, args = rosen_fn
    np.testing.assert_allclose(ez.jacobian(f)(*args), rosenbrock_gradient(X), rtol=1e-13)


def test_grad_of_ir_scalar_function():
    f = ez.llvm_ir(
        "declare double @exp(double)\n"
        "define double @f(double %x) {\n %e = call double @exp(double %x)\n"
        " %r = fmul double %e, %x\n ret double %r\n}",
        "f",
    )
    assert ez.grad(f)(0.5) == pytest.approx(math.exp(0.5) * 1.5, rel=1e-15)


def test_one_shot_helpers_reuse_their_derivatives(rosen_fn):
    from enzyme_py import _transforms

    f, args = rosen_fn
    v = np.linspace(-1, 1, len(X))
    tangents = (v,) + (None,) * (len(args) - 1)
    first = ez.jvp(f, args, tangents)
    ez.vjp(f, *args)[1](1.0)
    made = dict(_transforms.derivatives_of(f)._made)
    assert made, "the helpers keep what they built with f"
    assert ez.jvp(f, args, tangents) == first
    ez.vjp(f, *args)[1](2.0)
    assert _transforms.derivatives_of(f)._made == made, "the second calls built nothing"


@numba.njit
def doubles_first(x):
    x[0] *= 2.0  # writes its input
    return x[0] + x[1]


def test_helpers_take_their_inputs_as_given_and_once():
    x = np.array([1.0, 2.0])
    # Repeated argnums: a bare StopIteration before.
    with pytest.raises(ValueError, match=r"argnums \(0, 0\) names an argument twice"):
        ez.grad(scaled, argnums=(0, 0))(x, 2.0, 2)
    with pytest.raises(ValueError, match="names an argument twice"):
        ez.grad(scaled, argnums=(1, -2))(x, 2.0, 2)
    with pytest.raises(ValueError, match="names an argument twice"):
        ez.jacobian(mapping, (0, 0), output=1)(x, np.zeros(2))
    # vjp_fn differentiates where vjp was called, whatever happens to x afterwards.
    _, pullback = ez.vjp(rosen, x)
    expected = pullback(1.0)[0]
    x[:] = 0.0
    np.testing.assert_array_equal(pullback(1.0)[0], expected)
    # A function that writes its input does not write the caller's tangent.
    tangent = np.array([1.0, 0.0])
    _, dy = ez.jvp(doubles_first, (np.array([1.0, 2.0]),), (tangent,))
    assert dy == 2.0 and tangent.tolist() == [1.0, 0.0]
