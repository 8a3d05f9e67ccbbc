"""A custom derivative rule for an opaque library function.

    python examples/custom_rule.py

`opaque_dot` lives in a shared library (compiled here with clang, loaded with ctypes):
Enzyme sees only its declaration and cannot differentiate a function that calls it.
Registering a reverse rule (augmented forward pass + gradient), written in C with ez.c,
makes the same function differentiable. (Forward rules, ez.register_derivative, work the
same way, except on a declaration with pointer arguments: see enzyme_py.rules.)
"""

import ctypes
import os
import subprocess
import tempfile

import numpy as np

import enzyme_py as ez

LIBRARY = (
    "double opaque_dot(int n, const double *x, const double *y) {"
    " double s = 0; for (int i = 0; i < n; ++i) s += x[i] * y[i]; return s; }"
)

USER_CODE = r"""
double opaque_dot(int n, const double *x, const double *y);   /* from the library */
double loss(const double *x, const double *y, int n) { return 3.0 * opaque_dot(n, x, y); }
"""

# Enzyme's conventions: every argument followed by its shadow (the int's too); the
# gradient adds into the shadows, given the adjoint of the result.
RULES = r"""
double opaque_dot(int n, const double *x, const double *y);
double aug_dot(int n, int dn, const double *x, const double *dx,
               const double *y, const double *dy) { return opaque_dot(n, x, y); }
void rev_dot(int n, int dn, const double *x, double *dx, const double *y, double *dy,
             double dret) {
    /* A Const argument's shadow is the argument itself: leave it alone. */
    for (int i = 0; i < n; ++i) {
        if (dx != x) dx[i] += dret * y[i];
        if (dy != y) dy[i] += dret * x[i];
    }
}
"""


def build_library(folder: str) -> str:
    source, library = os.path.join(folder, "dot.c"), os.path.join(folder, "libdot.so")
    with open(source, "w") as f:
        f.write(LIBRARY)
    clang = os.environ.get("ENZYME_PY_CLANG", "clang-15")
    subprocess.run([clang, "-O2", "-shared", "-fPIC", source, "-o", library], check=True)
    return library


with tempfile.TemporaryDirectory() as tmp:
    # RTLD_GLOBAL: the JIT finds opaque_dot among the process's symbols.
    ctypes.CDLL(build_library(tmp), mode=ctypes.RTLD_GLOBAL)
    user = ez.c(USER_CODE)
    rules = ez.c(RULES)
    x, y = np.arange(1.0, 4.0), np.array([2.0, -1.0, 0.5])
    acts = (ez.Duplicated, ez.Duplicated, ez.Const, ez.ActiveOnly)
    try:
        ez.autodiff(user.loss, ez.Reverse, *acts)
        raise SystemExit("custom_rule: expected an EnzymeError without the rule")
    except ez.EnzymeError as exc:
        print("without a rule:", str(exc).splitlines()[0])

    ez.register_gradient("opaque_dot", augment=rules.aug_dot, gradient=rules.rev_dot)
    dx, dy = np.zeros(3), np.zeros(3)
    ez.autodiff(user.loss, ez.Reverse, *acts)(x, dx, y, dy, 3, 1.0)
    print("with the rule: dloss/dx =", dx, " dloss/dy =", dy)
    if not (np.allclose(dx, 3 * y) and np.allclose(dy, 3 * x)):
        raise SystemExit("custom_rule: wrong derivatives")
    ez.clear_rules()
print("custom_rule: OK")
