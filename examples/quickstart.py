"""Quickstart: the gradient of a Numba function over a NumPy array, checked by calculus.

python examples/quickstart.py
"""

import math

import numba
import numpy as np

import enzyme_py as ez


@numba.njit
def energy(x, k):
    e = 0.0
    for i in range(x.shape[0]):
        e += k * x[i] * x[i] * math.sin(x[i])
    return e


# The Python twin of Rust's #[autodiff(denergy, Reverse, Duplicated, Const, Active)]:
# x is Duplicated (its adjoint lands in dx), k is Const, the result Active.
denergy = ez.autodiff(energy, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)

x = np.linspace(0.0, 2.0, 5)
dx = np.zeros_like(x)
(value,) = denergy(x, dx, 3.0, 1.0)  # arguments: x, dx, k, then the seed of the result

analytic = 3.0 * (2 * x * np.sin(x) + x**2 * np.cos(x))
error = float(np.max(np.abs(dx - analytic)))
print(f"energy(x)          = {value:.12f}")
print(f"d energy / dx      = {np.array2string(dx, precision=12)}")
print(f"analytic           = {np.array2string(analytic, precision=12)}")
print(f"max |error|        = {error:.3e}")
if not np.isclose(value, energy(x, 3.0)) or error > 1e-12:
    raise SystemExit("quickstart: the derivative does NOT match the analytic one")
print("ez.grad(energy)(x, 3.0) gives the same:", np.allclose(ez.grad(energy)(x, 3.0), dx))
print("quickstart: OK, Enzyme's gradient of a Numba function matches the analytic one")
