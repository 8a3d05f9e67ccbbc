"""PyTorch and JAX bridges (skipped where torch or jax is not installed)."""

import math

import numpy as np
import pytest

import enzyme_py as ez

numba = pytest.importorskip("numba")
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
