"""A Numba kernel as a JAX function: ez.jax.primitive under jax.grad, jit, vmap and,
in its custom_jvp form, jacfwd (needs jax).

python examples/jax_bridge.py
"""

import jax
import jax.numpy as jnp
import numba
import numpy as np

import enzyme_py as ez

jax.config.update("jax_enable_x64", True)


@numba.njit
def energy(x, n):
    e = 0.0
    for i in range(n - 1):
        d = x[i + 1] - x[i]
        e += d * d * d * d
    return e


f = ez.jax.primitive(energy)
x = jnp.linspace(0.0, 1.0, 8) ** 2
grad = jax.jit(jax.grad(f), static_argnums=1)(x, 8)
d = np.diff(np.asarray(x))
expected = np.zeros(8)
expected[:-1] -= 4 * d**3
expected[1:] += 4 * d**3
print("jax.grad through enzyme_py:", np.asarray(grad).round(5))
if not np.allclose(np.asarray(grad), expected, rtol=1e-12):
    raise SystemExit("jax_bridge: wrong gradient")


# The custom_jvp form: forward mode (jacfwd) and reverse mode (grad), against JAX's
# own autodiff of the same energy in jax.numpy.
def energy_jax(x, n):
    return jnp.sum(jnp.diff(x[:n]) ** 4)


g = ez.jax.primitive(energy, mode="jvp")
xs = jnp.stack([x, 2 * x, x - 0.5])
forward = jax.jit(jax.vmap(jax.jacfwd(g), in_axes=(0, None)), static_argnums=1)(xs, 8)
reverse = jax.vmap(jax.grad(g), in_axes=(0, None))(xs, 8)
want = jax.vmap(jax.grad(energy_jax), in_axes=(0, None))(xs, 8)
if not (np.allclose(forward, want, rtol=1e-12) and np.allclose(reverse, want, rtol=1e-12)):
    raise SystemExit("jax_bridge: jacfwd / grad of the custom_jvp form disagree with JAX's")
print("jax_bridge: OK")
