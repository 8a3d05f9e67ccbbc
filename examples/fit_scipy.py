"""Fit a model with SciPy, the gradient of a Numba loss from enzyme_py.

    python examples/fit_scipy.py

Data from y = a * exp(-b t) + c plus noise; the loss is the sum of squared residuals,
written as a plain Numba loop. ``ez.value_and_grad`` gives the loss and its exact
gradient in one reverse pass, which is what ``scipy.optimize.minimize(jac=True)`` wants.
"""

import math

import numba
import numpy as np
from scipy.optimize import minimize

import enzyme_py as ez


@numba.njit
def loss(params, t, y):
    a, b, c = params[0], params[1], params[2]
    total = 0.0
    for i in range(t.shape[0]):
        r = a * math.exp(-b * t[i]) + c - y[i]
        total += r * r
    return total


rng = np.random.default_rng(0)
true = np.array([2.5, 1.3, 0.5])
t = np.linspace(0.0, 4.0, 200)
y = true[0] * np.exp(-true[1] * t) + true[2] + rng.normal(scale=0.01, size=t.size)

loss_and_grad = ez.value_and_grad(loss)  # with respect to params (argnums=0)
result = minimize(loss_and_grad, x0=np.array([1.0, 1.0, 0.0]), args=(t, y), jac=True, method="BFGS")

print(f"fitted a, b, c = {np.array2string(result.x, precision=4)}  (true {true})")
print(f"loss {result.fun:.3e} after {result.nit} iterations, {result.njev} gradients")
if not result.success or np.max(np.abs(result.x - true)) > 0.05:
    raise SystemExit("fit_scipy: the fit did not converge to the true parameters")
print("fit_scipy: OK")
