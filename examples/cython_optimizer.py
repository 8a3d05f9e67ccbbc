"""A gradient-descent loop written in Cython that calls an enzyme_py derivative
without Python and without the GIL (``Derivative.cython_declaration()``, the twin
of ``Derivative.njit()``).

The loss is a Cython cdef function, differentiated with ez.cython; its reverse
derivative's declaration is written to a ``.pxi`` that an optimizer module includes;
that module is built with ``cythonize`` (setuptools, in a temporary folder) and its
``descend`` runs every step inside ``with nogil:``. The result is checked against the
same loop in Python over ``ez.grad``.
"""

import importlib.util
import os
import sys
import tempfile

import numpy as np

import enzyme_py as ez

LOSS = """
cimport cython
from libc.math cimport sin

@cython.boundscheck(False)
@cython.wraparound(False)
cdef double loss(const double[::1] x, const double[::1] target) noexcept nogil:
    # least squares to a target, a smoothness term and a small wiggle
    cdef double s = 0.0, d
    cdef Py_ssize_t i
    for i in range(x.shape[0]):
        d = x[i] - target[i]
        s += d * d + 0.05 * sin(3.0 * x[i])
    for i in range(x.shape[0] - 1):
        d = x[i + 1] - x[i]
        s += 0.5 * d * d
    return s
"""

OPTIMIZER = """
cimport cython
include "dloss.pxi"

@cython.boundscheck(False)
@cython.wraparound(False)
def descend(double[::1] x, double[::1] g, const double[::1] target, double lr, int steps):
    cdef int step, status = 0
    cdef Py_ssize_t i
    cdef double value = 0.0
    with nogil:
        for step in range(steps):
            for i in range(x.shape[0]):
                g[i] = 0.0  # the derivative adds into its shadow
            status = dloss(x, g, target, 1.0, &value)
            if status != 0:
                break
            for i in range(x.shape[0]):
                x[i] -= lr * g[i]
    if status != 0:
        raise RuntimeError(f"dloss returned {status}")
    return value
"""


def build(folder, name, source):
    """Cythonize and compile ``source`` as module ``name`` in ``folder``; import it.
    (tests/test_cython_declaration.py builds its modules with this function too.)"""
    from Cython.Build import cythonize
    from setuptools import Distribution, Extension

    pyx = os.path.join(folder, f"{name}.pyx")
    with open(pyx, "w") as f:
        f.write(source)
    extensions = cythonize(
        [Extension(name, [pyx])], quiet=True, compiler_directives={"language_level": 3}
    )
    dist = Distribution({"ext_modules": extensions, "script_name": "setup.py"})
    command = dist.get_command_obj("build_ext")
    command.build_lib = folder
    command.build_temp = os.path.join(folder, "build")
    dist.run_command("build_ext")
    spec = importlib.util.spec_from_file_location(name, command.get_ext_fullpath(name))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    m = ez.cython(LOSS)
    dloss = ez.autodiff(m.loss, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)
    declaration = dloss.cython_declaration("dloss")
    print(declaration.splitlines()[0])

    n, lr, steps = 50, 0.05, 300
    target = np.cos(np.linspace(0.0, 3.0, n))
    with tempfile.TemporaryDirectory(prefix="enzyme_py_optimizer_") as folder:
        with open(os.path.join(folder, "dloss.pxi"), "w") as f:
            f.write(declaration)
        optimizer = build(folder, "enzyme_py_cython_optimizer", OPTIMIZER)
        x = np.zeros(n)
        start = m.loss(x, target)
        final = optimizer.descend(x, np.zeros(n), target, lr, steps)  # the last step's loss

    # The same descent from Python, one ez.grad call per step.
    grad = ez.grad(m.loss)
    z = np.zeros(n)
    for _ in range(steps):
        z -= lr * grad(z, target)
    error = float(np.max(np.abs(x - z)))
    print(
        f"loss {start:.4f} -> {final:.4f} in {steps} nogil steps; "
        f"max |x - Python's x| = {error:.1e}"
    )
    assert final < 0.1 * start
    assert error < 1e-12
    sys.stdout.flush()
    print("cython_optimizer: OK, a Cython loop called the derivative through its C address")


if __name__ == "__main__":
    main()
