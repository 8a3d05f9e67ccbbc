"""ez.jax.primitive in both forms (custom_vjp, custom_jvp) under JAX's transforms, against
JAX's own autodiff of the same function written in jax.numpy."""

import numpy as np
import pytest

import enzyme_py as ez

numba = pytest.importorskip("numba")
jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

from _helpers import close  # noqa: E402
from numba_functions import loss  # noqa: E402

pytestmark = pytest.mark.needs_enzyme


@numba.njit
def picked(x, idx):
    s = 0.0
    for j in range(idx.shape[0]):
        s += x[idx[j]] ** 3
    return s


def reference(x, k):
    return k * jnp.sum(jnp.sin(x) * x * x)


@pytest.fixture(autouse=True)
def x64():
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", True)


X = np.linspace(-1.0, 1.5, 6)


@pytest.mark.parametrize("mode", ["vjp", "jvp"])
def test_reverse_mode_jit_and_vmap_in_both_forms(mode):
    g = ez.jax.primitive(loss, mode=mode)
    x, k = jnp.asarray(X), 1.7
    want = jax.grad(reference, argnums=(0, 1))(x, k)
    for how, found in {
        "grad": jax.grad(g, argnums=(0, 1))(x, k, 6),
        "jacrev": jax.jacrev(g, argnums=(0, 1))(x, k, 6),
        "jit(grad)": jax.jit(jax.grad(g, argnums=(0, 1)), static_argnums=2)(x, k, 6),
        # The int traced by jit (no static_argnums) is passed as a constant.
        "jit(grad), n traced": jax.jit(jax.grad(g, argnums=(0, 1)))(x, k, 6),
    }.items():
        for got, ref in zip(found, want, strict=True):
            close(got, ref, how=how)
    close(jax.jit(g)(x, k, 6), reference(x, k))
    xs = jnp.stack([x, 2 * x, x - 0.5])
    close(jax.vmap(g, in_axes=(0, None, None))(xs, k, 6), jax.vmap(reference, (0, None))(xs, k))
    close(
        jax.jit(jax.vmap(jax.grad(g), in_axes=(0, None, None)))(xs, k, 6),
        jax.vmap(jax.grad(reference), (0, None))(xs, k),
    )


def test_the_custom_jvp_form_evaluates_f_once_per_point(monkeypatch):
    # Its rule takes the value and the gradient from one reverse pass: no separate
    # evaluation of f under jax.jvp or jax.grad (f ran twice per point before).
    from enzyme_py import _bridge

    calls = {"value": 0, "value_and_gradient": 0}
    for method in calls:
        original = getattr(_bridge.HostKernel, method)

        def counted(self, *args, method=method, original=original):
            calls[method] += 1
            return original(self, *args)

        monkeypatch.setattr(_bridge.HostKernel, method, counted)
    g = ez.jax.primitive(loss, mode="jvp")
    x, k = jnp.asarray(X), 1.7
    y, dy = jax.jvp(lambda a: g(a, k, 6), (x,), (jnp.ones(6),))
    close(y, reference(x, k))
    close(dy, jnp.sum(jax.grad(reference)(x, k)))
    value, grad = jax.value_and_grad(g)(x, k, 6)
    close(value, reference(x, k))
    close(grad, jax.grad(reference)(x, k))
    assert calls == {"value": 0, "value_and_gradient": 2}


def test_forward_mode_of_the_custom_jvp_form():
    g = ez.jax.primitive(loss, mode="jvp")
    x, k = jnp.asarray(X), 1.7
    tx = jnp.cos(3 * x)
    y, dy = jax.jvp(lambda a, b: g(a, b, 6), (x, k), (tx, 0.3))
    ry, rdy = jax.jvp(reference, (x, k), (tx, 0.3))
    close(y, ry)
    close(dy, rdy)
    close(jax.jacfwd(g)(x, k, 6), jax.jacfwd(reference)(x, k))
    close(jax.jit(jax.jacfwd(g))(x, k, 6), jax.jacfwd(reference)(x, k))
    xs = jnp.stack([x, 2 * x])
    close(
        jax.vmap(jax.jacfwd(g), in_axes=(0, None, None))(xs, k, 6),
        jax.vmap(jax.jacfwd(reference), (0, None))(xs, k),
    )


def test_custom_vjp_form_has_no_forward_mode_in_jax():
    g = ez.jax.primitive(loss, mode="vjp")
    with pytest.raises(TypeError, match="custom_vjp"):
        jax.jacfwd(g)(jnp.asarray(X), 1.7, 6)


@pytest.mark.parametrize("mode", ["vjp", "jvp"])
def test_integer_arrays_and_traced_ints_are_constants(mode):
    g = ez.jax.primitive(picked, mode=mode)
    x = jnp.asarray(X)
    idx = jnp.array([0, 2, 2, 5])
    want = np.zeros(6)
    np.add.at(want, [0, 2, 2, 5], 3 * X[[0, 2, 2, 5]] ** 2)
    close(jax.grad(g)(x, idx), want)
    close(jax.jit(jax.grad(g))(x, idx), want)
    close(jax.jit(g)(x, idx), np.sum(X[[0, 2, 2, 5]] ** 3))
    with pytest.raises(TypeError, match="int"):
        jax.grad(g, argnums=1)(x, idx)  # JAX's own refusal: an int input has no gradient


@pytest.mark.parametrize("mode", ["vjp", "jvp"])
def test_float32_in_jax_default_mode(mode):
    jax.config.update("jax_enable_x64", False)
    g = ez.jax.primitive(loss, mode=mode)
    x = jnp.asarray(X, dtype=jnp.float32)
    found = jax.jit(jax.grad(g))(x, 1.7, 6)
    assert found.dtype == jnp.float32
    close(found, jax.grad(reference)(x, 1.7), rtol=2e-5)
    if mode == "jvp":
        close(jax.jacfwd(g)(x, 1.7, 6), jax.grad(reference)(x, 1.7), rtol=2e-5)


@pytest.mark.parametrize("mode", ["vjp", "jvp"])
def test_second_derivatives_are_refused_in_both_forms(mode):
    g = ez.jax.primitive(loss, mode=mode)
    with pytest.raises(NotImplementedError, match=r"'loss'\) is differentiable once.*ez.hessian"):
        jax.hessian(g)(jnp.asarray(X), 1.7, 6)
