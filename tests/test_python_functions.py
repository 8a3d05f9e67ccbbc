"""Helpers of Python functions that call a function enzyme_py differentiates:
``ez.grad(lambda x: loss(x, data))``, a ``def``, a ``functools.partial`` (issue 17:
helpers as JAX users write them). Checked against analytic derivatives; captured
values are read at every call (nothing frozen); what cannot be lowered is refused
with a TypeError saying what to write."""

from __future__ import annotations

import functools

import numba
import numpy as np
import pytest

import enzyme_py as ez

pytestmark = pytest.mark.needs_enzyme


@numba.njit
def loss(x, data, w=2.0):
    s = 0.0
    for i in range(x.shape[0]):
        s += w * (x[i] - data[i]) ** 2
    return s


def loss_gradient(x, data, w=2.0):
    return 2.0 * w * (x - data)


@numba.njit
def quartic(t, a):
    return a * t**4


@numba.njit
def squares(x, out):
    for i in range(x.shape[0]):
        out[i] = x[i] * x[i]


@numba.njit
def shifted(data):
    return data + 1.0


@numba.njit
def loss_and_count(x, data):
    return loss(x, data), x.shape[0]


DATA = np.array([0.0, 1.0, 2.0])


def test_grad_of_a_lambda_over_a_global_array_reads_it_at_every_call():
    global DATA
    x = np.array([1.0, 1.5, -2.0])
    g = ez.grad(lambda x: loss(x, DATA))
    np.testing.assert_allclose(g(x), loss_gradient(x, DATA))
    DATA[:] = 5.0  # changed in place: the next call sees it, as Python does
    np.testing.assert_allclose(g(x), loss_gradient(x, np.full(3, 5.0)))
    DATA = np.array([3.0, -1.0, 0.5])  # bound again: the same
    np.testing.assert_allclose(g(x), loss_gradient(x, DATA))


def test_grad_of_a_closure_and_of_a_default_follows_their_values():
    x = np.array([0.5, -1.0, 2.0])
    data = np.array([1.0, 2.0, 3.0])
    weight = 3.0
    g = ez.grad(lambda x, w=weight: loss(x, data, w))
    np.testing.assert_allclose(g(x), loss_gradient(x, data, 3.0))
    data *= -1.0
    np.testing.assert_allclose(g(x), loss_gradient(x, data, 3.0))
    np.testing.assert_allclose(g(x, 0.5), loss_gradient(x, data, 0.5))


def test_a_def_with_tuple_argnums_keywords_and_a_call_it_does_not_differentiate():
    def objective(d, x, w):
        return loss(x, shifted(d), w=w)  # shifted(d) runs: it takes no marked argument

    x, d = np.array([1.0, 2.0, 3.0]), np.array([0.0, 0.0, 1.0])
    gx, gw = ez.grad(objective, argnums=(1, 2))(d, x, w=1.5)
    np.testing.assert_allclose(gx, loss_gradient(x, d + 1.0, 1.5))
    np.testing.assert_allclose(gw, np.sum((x - d - 1.0) ** 2))


def test_partial_with_positional_and_keyword_arguments():
    x = np.array([2.0, -1.0, 0.0])
    g = ez.grad(functools.partial(loss, data=DATA, w=4.0))
    np.testing.assert_allclose(g(x), loss_gradient(x, DATA, 4.0))
    by_position = functools.partial(quartic, 2.0)  # t = 2 given; the argument is a
    assert ez.grad(by_position)(3.0) == pytest.approx(16.0)


def test_value_and_grad_hessian_and_jacobians_of_a_lambda():
    x, y = np.array([1.0, 2.0, 4.0]), np.array([0.5, 0.5, 0.5])
    value, gradient = ez.value_and_grad(lambda x: loss(x, y))(x)
    assert value == pytest.approx(2.0 * np.sum((x - y) ** 2))
    np.testing.assert_allclose(gradient, loss_gradient(x, y))
    h = ez.hessian(lambda t, a: quartic(t, a), argnums=(0, 1))(2.0, 3.0)
    np.testing.assert_allclose(np.array(h), [[12 * 3.0 * 4.0, 4 * 8.0], [4 * 8.0, 0.0]])
    np.testing.assert_allclose(ez.hessian(lambda x: loss(x, y))(x), 4.0 * np.eye(3))
    for jac in (ez.jacobian, ez.jacfwd, ez.jacrev):
        # output= names the lambda's argument; it reaches squares as its argument 1
        j = jac(lambda out, x: squares(x, out), argnums=1, output=0)(np.zeros(3), x)
        np.testing.assert_allclose(j, np.diag(2.0 * x))


def test_jvp_vjp_and_hvp_of_a_lambda():
    x, t = np.array([1.0, -2.0, 0.5]), np.array([1.0, 0.0, 2.0])
    value, tangent = ez.jvp(lambda x: loss(x, DATA), (x,), (t,))
    assert value == pytest.approx(2.0 * np.sum((x - DATA) ** 2))
    assert tangent == pytest.approx(np.dot(loss_gradient(x, DATA), t))
    value, pullback = ez.vjp(lambda x, scale: quartic(x, scale), 2.0, 0.5)
    assert value == pytest.approx(8.0)
    assert pullback(1.0) == pytest.approx((4 * 0.5 * 8.0, 16.0))
    gradient, hv = ez.hvp(lambda x: loss(x, DATA), (x,), (t,))
    np.testing.assert_allclose(gradient, loss_gradient(x, DATA))
    np.testing.assert_allclose(hv, 4.0 * t)


def test_jvp_of_a_lambda_writing_an_output_array():
    x, t, out = np.array([1.0, -2.0, 3.0]), np.array([1.0, 0.5, -1.0]), np.zeros(3)
    nothing, (tx, tout) = ez.jvp(lambda x, out: squares(x, out), (x, out), (t, None))
    assert nothing is None
    np.testing.assert_allclose(tx, t)
    np.testing.assert_allclose(tout, 2.0 * x * t)
    np.testing.assert_allclose(out, x * x)


def test_second_derivative_of_a_lambda_and_has_aux():
    d2 = ez.grad(ez.grad(lambda t, a: quartic(t, a)))
    assert d2(2.0, 3.0) == pytest.approx(12 * 3.0 * 4.0)
    x = np.array([1.0, 2.0, 3.0])
    gradient, count = ez.grad(lambda x: loss_and_count(x, DATA), has_aux=True)(x)
    np.testing.assert_allclose(gradient, loss_gradient(x, DATA))
    assert count == 3


def test_a_lambda_over_an_ir_function():
    cube = ez.llvm_ir(
        "define double @cube(double %x) {\n %a = fmul double %x, %x\n"
        " %b = fmul double %a, %x\n ret double %b\n}",
        "cube",
    )
    assert ez.grad(lambda u: cube(u))(2.0) == pytest.approx(12.0)


COUNTER = 0


def counting(x):
    global COUNTER
    COUNTER += 1
    return loss(x, DATA)


def _counting_closure():
    calls = 0

    def counted(x):
        nonlocal calls
        calls += 1
        return loss(x, DATA)

    return counted


@pytest.mark.parametrize(
    "f, message",
    [
        (lambda x: loss(x, DATA) * 2.0, "unsupported operand"),
        (lambda x: (loss(x, DATA), 1.0), "returns something else than that call's result"),
        (lambda x: loss(x[::-1], DATA), "must call one function enzyme_py differentiates"),
        (lambda x: loss(np.sin(x), DATA), "is read as an array"),
        (lambda x: loss(DATA, DATA), "passes none of arguments [0]"),
        (lambda x: loss(x, x), "passes argument 0 to loss twice"),
        (lambda x: loss(x, DATA) + loss(x, DATA), "must call one function"),
        (lambda x: loss(x, DATA) if x else 0.0, "is tested for truth"),
        (lambda x: 0.0 if x == 0.0 else loss(x, DATA), "is compared"),
        (lambda x: loss(x, DATA) if isinstance(x, np.ndarray) else 0.0, "calls isinstance"),
        (lambda x: loss(x, DATA) if type(x) is np.ndarray else 0.0, "calls type"),
        (counting, "assigns a global or nonlocal variable"),
        (_counting_closure(), "assigns a global or nonlocal variable"),
    ],
)
def test_what_is_not_one_call_is_refused_with_advice(f, message):
    with pytest.raises(TypeError, match="grad") as info:
        ez.grad(f)(np.array([1.0, 2.0, 3.0]))
    assert message in str(info.value)


def test_a_branch_on_a_scalar_argument_is_refused_not_followed_wrongly():
    # Without the refusal the trace would take the marker's branch (truthy, unequal):
    # at t = 0 that is quartic(t, 1.0)'s, where Python takes quartic(t, 2.0)'s.
    branching = lambda t: quartic(t, 1.0) if t else quartic(t, 2.0)  # noqa: E731
    with pytest.raises(TypeError, match="is tested for truth"):
        ez.grad(branching)(0.0)
    with pytest.raises(TypeError, match="is compared"):
        ez.grad(lambda t: quartic(t, 1.0) if t != 0.0 else quartic(t, 2.0))(1.0)


def _caught(x):
    # In Python np.asarray(x) works and loss is called; a trace that swallowed the
    # marker's failure would differentiate quartic instead.
    try:
        return loss(np.asarray(x), DATA)
    except TypeError:
        return quartic(x, 1.0)


def test_a_function_that_catches_a_read_of_its_argument_is_refused():
    with pytest.raises(TypeError, match="argument 0 is read"):
        ez.grad(_caught)(np.array([1.0, 2.0, 3.0]))
    with pytest.raises(TypeError, match="used in arithmetic"):
        ez.grad(lambda x: loss(x * 1.0, DATA))(np.array([1.0, 2.0, 3.0]))


def test_argnums_of_a_python_function_are_checked():
    with pytest.raises(ValueError, match="negative positions"):
        ez.grad(lambda x: loss(x, DATA), argnums=-1)
    with pytest.raises(TypeError, match="argument positions"):
        ez.grad(lambda x: loss(x, DATA), argnums=1.0)
    with pytest.raises(ValueError, match="out of range"):
        ez.grad(lambda x: loss(x, DATA), argnums=3)(np.ones(3))


def test_check_grad_of_a_lambda_names_its_arguments():
    x = np.array([1.0, -0.5, 2.0])
    report = ez.check_grad(lambda d, x: loss(x, d), DATA.copy(), x, argnums=1)
    assert report.ok
    assert [row["argument"] for row in report.rows] == ["arg 1"]
    assert report.worst < 1e-6


class Model:
    def __init__(self, data, weight):
        self.data, self.weight = data, weight

    def loss(self, x):
        return loss(x, self.data, self.weight)


def test_grad_of_a_bound_method_reads_the_objects_attributes():
    x = np.array([1.0, 2.0, 3.0])
    model = Model(np.array([0.0, 1.0, 1.0]), 2.5)
    g = ez.grad(model.loss)
    np.testing.assert_allclose(g(x), loss_gradient(x, model.data, 2.5))
    model.weight = 0.5
    np.testing.assert_allclose(g(x), loss_gradient(x, model.data, 0.5))


def objective_of_module(x, d):
    return loss(x, d)


def test_the_helper_of_a_module_level_def_pickles():
    import pickle

    x = np.array([1.0, 0.0, -1.0])
    g = ez.grad(functools.partial(objective_of_module, d=DATA))
    g(x)
    again = pickle.loads(pickle.dumps(g))
    np.testing.assert_allclose(again(x), loss_gradient(x, DATA))
