"""PyTorch and JAX bridges (skipped where torch or jax is not installed)."""

import math
import warnings

import numpy as np
import pytest

import enzyme_py as ez

numba = pytest.importorskip("numba")

from numba_functions import cubes  # noqa: E402

pytestmark = pytest.mark.needs_enzyme


@numba.njit
def loss(x, k, n):
    s = 0.0
    for i in range(n):
        s += k * math.sin(x[i]) * x[i]
    return s


def expected(x, k):
    return k * np.sum(np.sin(x) * x), k * (np.cos(x) * x + np.sin(x)), np.sum(np.sin(x) * x)


def test_torch_function_backward_and_gradcheck():
    torch = pytest.importorskip("torch")
    fn = ez.torch.function(loss)
    x = torch.linspace(0, 1, 5, dtype=torch.float64, requires_grad=True)
    k = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    y = fn(x, k, 5)
    y.backward()
    value, dx, dk = expected(np.linspace(0, 1, 5), 2.0)
    assert float(y.detach()) == pytest.approx(value, rel=1e-14)
    np.testing.assert_allclose(x.grad.numpy(), dx, rtol=1e-13)
    assert float(k.grad) == pytest.approx(dk, rel=1e-13)
    # Inside a model: the loss of a linear layer's output.
    lin = torch.nn.Linear(3, 5, dtype=torch.float64)
    out = fn(lin(torch.ones(3, dtype=torch.float64)), torch.tensor(1.5, dtype=torch.float64), 5)
    out.backward()
    assert lin.weight.grad is not None and torch.isfinite(lin.weight.grad).all()
    inputs = (x.detach().clone().requires_grad_(), k.detach().clone().requires_grad_(), 5)
    assert torch.autograd.gradcheck(fn, inputs)


def test_jax_primitive_grad_jit_and_jvp():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    g = ez.jax.primitive(loss)
    x = jnp.linspace(0, 1, 5)
    value, dx, dk = expected(np.linspace(0, 1, 5), 2.0)
    assert float(g(x, 2.0, 5)) == pytest.approx(value, rel=1e-14)
    gx, gk = jax.grad(g, argnums=(0, 1))(x, 2.0, 5)
    np.testing.assert_allclose(np.asarray(gx), dx, rtol=1e-13)
    assert float(gk) == pytest.approx(dk, rel=1e-13)
    jitted = jax.jit(jax.grad(g), static_argnums=2)
    np.testing.assert_allclose(np.asarray(jitted(x, 2.0, 5)), dx, rtol=1e-13)
    forward = ez.jax.primitive(loss, mode="jvp")
    y, dy = jax.jvp(lambda a: forward(a, 2.0, 5), (x,), (jnp.ones(5),))
    assert float(y) == pytest.approx(value, rel=1e-14)
    assert float(dy) == pytest.approx(float(np.sum(dx)), rel=1e-13)
    with pytest.raises(ValueError, match="mode must be 'vjp' or 'jvp'"):
        ez.jax.primitive(loss, mode="both")


def test_torch_double_backward_is_a_hessian_vector_product():
    torch = pytest.importorskip("torch")
    fn = ez.torch.function(cubes)
    x = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # float() of a grad_output that requires grad warns
        (g,) = torch.autograd.grad(fn(x) + (x**2).sum(), x, create_graph=True)
        (h,) = torch.autograd.grad(g.sum(), x)
    # The contribution of fn's second derivative (6 x) was dropped: [2, 2].
    np.testing.assert_allclose(h.numpy(), [8.0, 14.0], rtol=1e-14)
    # Against finite differences of the backward pass, with respect to every input
    # and the incoming gradient, for an array, a 0-d tensor and an int together.
    loss_of = ez.torch.function(loss)
    xs = torch.linspace(0.1, 1.0, 5, dtype=torch.float64, requires_grad=True)
    k = torch.tensor(1.5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradgradcheck(lambda a, b: loss_of(a, b, 5), (xs, k))
    assert torch.autograd.gradgradcheck(lambda a: loss_of(a, 1.5, 5), (xs,))
    # A third derivative is refused, also where other terms would have hidden it.
    y = loss_of(xs, k, 5) + (xs**4).sum()
    (gx,) = torch.autograd.grad(y, xs, create_graph=True)
    (hx,) = torch.autograd.grad(gx.sum(), xs, create_graph=True)
    with pytest.raises(RuntimeError, match="third derivatives are not supported"):
        torch.autograd.grad(hx.sum(), xs)


def test_jax_vmap_matches_a_loop():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    g = ez.jax.primitive(loss)
    xs = jnp.stack([jnp.linspace(0, 1, 5), jnp.linspace(-1, 2, 5), jnp.ones(5)])
    ks = jnp.array([2.0, 0.5, -1.0])
    values = jax.vmap(g, in_axes=(0, 0, None))(xs, ks, 5)
    grads = jax.jit(jax.vmap(jax.grad(g), in_axes=(0, None, None)), static_argnums=2)(xs, 2.0, 5)
    for row in range(3):
        x = np.asarray(xs[row])
        value, _, _ = expected(x, float(ks[row]))
        assert float(values[row]) == pytest.approx(value, rel=1e-14)
        np.testing.assert_allclose(np.asarray(grads[row]), expected(x, 2.0)[1], rtol=1e-13)
    forward = ez.jax.primitive(loss, mode="jvp")
    dys = jax.vmap(lambda x: jax.jvp(lambda a: forward(a, 2.0, 5), (x,), (jnp.ones(5),))[1])(xs)
    for row in range(3):
        dy = np.sum(expected(np.asarray(xs[row]), 2.0)[1])
        assert float(dys[row]) == pytest.approx(dy, rel=1e-13)


def test_jax_second_derivatives_are_refused():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    g = ez.jax.primitive(loss)
    x = jnp.linspace(0, 1, 5)
    with pytest.raises(NotImplementedError, match=r"'loss'\) is differentiable once"):
        jax.hessian(g)(x, 2.0, 5)
    with pytest.raises(NotImplementedError, match="ez.hessian"):
        jax.grad(lambda a: jax.grad(g)(a, 2.0, 5).sum())(x)
    forward = ez.jax.primitive(loss, mode="jvp")

    def tangent(a):
        return jax.jvp(lambda b: forward(b, 2.0, 5), (a,), (jnp.ones(5),))[1]

    with pytest.raises(NotImplementedError, match="differentiable once"):
        jax.jvp(tangent, (x,), (jnp.ones(5),))


def test_jax_float64_parameter_needs_x64():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    m = ez.c(
        "double sq(const double *x, int n) { double s = 0; for (int i = 0; i < n; ++i) "
        "s += x[i] * x[i]; return s; }\n"
        "float sqf(const float *x, int n) { float s = 0; for (int i = 0; i < n; ++i) "
        "s += x[i] * x[i]; return s; }"
    )
    g, gf = ez.jax.primitive(m.sq), ez.jax.primitive(m.sqf)
    jax.config.update("jax_enable_x64", False)
    try:
        x = jnp.linspace(0, 1, 4)  # float32: JAX's default 32-bit mode
        for call in (
            lambda: g(x, 4),
            lambda: jax.grad(g)(x, 4),
            lambda: jax.jit(g, static_argnums=1)(x, 4),
        ):
            with pytest.raises(
                ValueError, match=r"parameter 0 \('x'\) needs a float64 array.*jax_enable_x64"
            ):
                call()
        np.testing.assert_allclose(np.asarray(jax.grad(gf)(x, 4)), 2 * np.asarray(x), rtol=1e-6)
    finally:
        jax.config.update("jax_enable_x64", True)
    with pytest.raises(ValueError, match=r"needs a float64 array; got float32: convert it"):
        g(jnp.linspace(0, 1, 4, dtype=jnp.float32), 4)
    np.testing.assert_allclose(
        np.asarray(jax.grad(g)(jnp.linspace(0, 1, 4), 4)), 2 * np.linspace(0, 1, 4)
    )
