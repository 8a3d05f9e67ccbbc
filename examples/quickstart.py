"""Quickstart: the gradient of a C kernel over a NumPy array, checked against calculus.

python examples/quickstart.py
"""

import numpy as np

import enzyme_py as ez

kernel = ez.c(
    """
    #include <math.h>
    double energy(const double *x, int n) {
        double e = 0.0;
        for (int i = 0; i < n; ++i) e += x[i] * x[i] * sin(x[i]);
        return e;
    }
    """
)

# Reverse mode: x is Duplicated (its adjoint lands in dx), n is Const, the result Active.
denergy = ez.autodiff(kernel.energy, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)

x = np.linspace(0.0, 2.0, 5)
dx = np.zeros_like(x)
(value,) = denergy(x, dx, len(x), 1.0)

analytic = 2 * x * np.sin(x) + x**2 * np.cos(x)
error = float(np.max(np.abs(dx - analytic)))
print(f"energy(x)          = {value:.12f}")
print(f"d energy / dx      = {np.array2string(dx, precision=12)}")
print(f"analytic           = {np.array2string(analytic, precision=12)}")
print(f"max |error|        = {error:.3e}")
if not np.isclose(value, np.sum(x**2 * np.sin(x))) or error > 1e-12:
    raise SystemExit("quickstart: the derivative does NOT match the analytic one")
print("quickstart: OK, Enzyme's gradient matches the analytic one")
