"""A Cython kernel over typed memoryviews, differentiated with ez.cython.

Cython translates the module to C, clang 15 compiles it to LLVM IR, and Enzyme
differentiates the cdef function; the gradient is checked against the analytic one.
"""

import numpy as np

import enzyme_py as ez

SOURCE = """
cimport cython
from libc.math cimport sin

@cython.boundscheck(False)
@cython.wraparound(False)
cdef double energy(const double[::1] x, double k) noexcept nogil:
    cdef double e = 0.0
    cdef Py_ssize_t i
    for i in range(x.shape[0]):
        e += k * x[i] * x[i] * sin(x[i])
    return e
"""

m = ez.cython(SOURCE)
print("functions:", m.functions())

x = np.linspace(0.0, 2.0, 5)
dx = np.zeros_like(x)
denergy = ez.autodiff(m.energy, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)
(value,) = denergy(x, dx, 3.0, 1.0)  # x, its shadow, k, the seed; dx += d energy / dx

analytic = 3.0 * (2 * x * np.sin(x) + x * x * np.cos(x))
error = float(np.max(np.abs(dx - analytic)))
print(f"energy = {value:.6f}, max |error| of the gradient = {error:.3e}")
assert error < 1e-12
assert np.allclose(ez.grad(m.energy)(x, 3.0), analytic)
print("cython_kernel: OK, Enzyme's gradient of a Cython cdef function matches the analytic one")
