"""A per-index kernel and its reverse-mode derivative, on the default device.

python examples/offload_kernel.py

Particles on a line interact through the soft pair potential 1 / ((x_i - x_j)^2 + s).
The kernel body computes particle i's share of the energy, e[i] = 1/2 sum_{j != i}
1 / ((x_i - x_j)^2 + s), one index per thread (the CPU device's threads, or a GPU's).
Its reverse derivative with e's shadow set to ones is the gradient of the total energy:
every index scatters into the shadows of all x_j, which the derivative kernel adds
atomically. The gradient is checked against the analytic one, in float64.

The default device is the first CUDA GPU liboffload lists, else the CPU device; the
launch is the same either way. Arrays can live on the device across launches
(``ez.offload.to_device``), freed when their ``with`` block ends.
"""

import numba
import numpy as np

import enzyme_py as ez

SOFTENING = 0.1


@numba.njit
def energy_share(i, x, e):
    total = 0.0
    for j in range(x.shape[0]):
        if j != i:
            d = x[i] - x[j]
            total += 1.0 / (d * d + SOFTENING)
    e[i] = 0.5 * total


kernel = ez.offload.kernel(energy_share)
gradient = ez.autodiff(kernel, ez.Reverse, ez.Duplicated, ez.Duplicated)

device = ez.offload.default_device()
n = 2000
x = np.random.default_rng(1).uniform(-5.0, 5.0, n)
e = np.zeros(n)
kernel.launch(n, x, e, device=device)  # host arrays: copied to the device and back

dx, de = np.zeros(n), np.ones(n)  # de = 1: the adjoint of the total energy
gradient.launch(n, x, dx, np.zeros(n), de, device=device)

diff = x[:, None] - x[None, :]
inverse = 1.0 / (diff * diff + SOFTENING)
np.fill_diagonal(inverse, 0.0)
expected_energy = 0.5 * inverse.sum()
# dE/dx_k = sum_{j != k} f'(x_k - x_j), f(d) = 1 / (d^2 + s): both halves of the pair sum
# contribute, f' being odd.
expected_gradient = (-2.0 * diff * inverse * inverse).sum(axis=1)
print(f"device: {device.name}; energy {e.sum():.6f} (expected {expected_energy:.6f})")
error = np.abs(dx - expected_gradient).max() / np.abs(expected_gradient).max()
print(f"relative gradient error against the analytic one: {error:.1e}")

# The same launch on arrays that stay on the device between launches.
with ez.offload.to_device(x, device) as x_on, ez.offload.to_device(np.zeros(n), device) as e_on:
    kernel.launch(n, x_on, e_on, device=device)
    kept = e_on.to_host()

assert np.isclose(e.sum(), expected_energy, rtol=1e-12)
assert error < 1e-12
np.testing.assert_allclose(kept, e, rtol=1e-15)
print("OK")
