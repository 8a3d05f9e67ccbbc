"""Recursive @njit functions, differentiated: Numba calls a recursion whose argument
types change (``f(x, n - 1)`` from ``f(x, 3)``, n a literal), and mutual recursion,
through a global it fills when it loads the code (``.numba.unresolved$NAME``), on which
Enzyme aborted; the compile differentiated links the callee's compile in and calls it
directly (``_numba_compile.with_recursion_resolved``). Each derivative against float64
central differences of the function itself (Numba's code), or its analytic form."""

import json
import math

import numba
import numpy as np
import pytest

import enzyme_py as ez
from enzyme_py.frontends import _numba_compile

from conftest import run_python
from reference import fd_gradient, fd_jacobian

pytestmark = pytest.mark.needs_enzyme


@numba.njit
def _power(x, n):
    if n == 0:
        return 1.0
    return x * _power(x, n - 1)


@numba.njit
def literal_depths(x):
    # _power(x, 3) and _power(x, 2) are compiled for Literal[int]; their recursive
    # calls go to _power(float64, int64).
    return _power(x[0], 3) + 2.0 * _power(x[1], 2)


@numba.njit
def _even_part(x, n):
    if n == 0:
        return 0.0
    return math.sin(x[n - 1]) + _odd_part(x, n - 1)


@numba.njit
def _odd_part(x, n):
    if n == 0:
        return 0.0
    return x[n - 1] ** 2 * _even_part(x, n - 1)


@numba.njit
def mutual(x):
    return _even_part(x, x.shape[0])


@numba.njit
def _product_tree(x, lo, hi):
    if hi - lo == 1:
        return 1.0 + x[lo] ** 2
    mid = (lo + hi) // 2
    return _product_tree(x, lo, mid) * _product_tree(x, mid, hi)


@numba.njit
def product_tree(x):
    return _product_tree(x, 0, x.shape[0])


@numba.njit
def _fill(x, out, n):
    if n == 0:
        return
    out[n - 1] = x[n - 1] * _power(x[n - 1], n)
    _fill(x, out, n - 1)


@numba.njit
def filled(x):
    out = np.empty_like(x)
    _fill(x, out, x.shape[0])
    return out


X = np.array([0.7, -1.1, 1.3, 0.4, 0.9])


def test_a_recursion_whose_argument_types_change():
    x = X[:2].copy()
    np.testing.assert_allclose(
        ez.grad(literal_depths)(x), [3.0 * x[0] ** 2, 4.0 * x[1]], rtol=1e-14
    )
    np.testing.assert_allclose(
        ez.jacfwd(literal_depths)(x), [3.0 * x[0] ** 2, 4.0 * x[1]], rtol=1e-14
    )


def test_mutual_recursion():
    expected = fd_gradient(mutual.py_func, X)
    np.testing.assert_allclose(ez.grad(mutual)(X), expected, rtol=1e-7, atol=1e-9)
    hessian = fd_jacobian(lambda v: ez.grad(mutual)(v), X)
    np.testing.assert_allclose(ez.hessian(mutual)(X), hessian, rtol=1e-6, atol=1e-7)


def test_a_recursion_over_halves_in_both_modes():
    expected = fd_gradient(product_tree.py_func, X)
    np.testing.assert_allclose(ez.grad(product_tree)(X), expected, rtol=1e-7)
    tangent = np.linspace(-1.0, 1.0, 5)
    _, derivative = ez.jvp(product_tree, (X,), (tangent,))
    assert derivative == pytest.approx(expected @ tangent, rel=1e-7)
    # Batched directions through recursion stay refused (Enzyme batches them wrongly).
    with pytest.raises(ez.ActivityError, match=r"'product_tree' is recursive.*width=3"):
        ez.autodiff(product_tree, ez.Forward, ez.Dual, ez.DualOnly, width=3)(X, np.eye(5)[:3])


def test_a_recursion_writing_an_array_result():
    expected = fd_jacobian(filled.py_func, X)
    np.testing.assert_allclose(ez.jacrev(filled)(X), expected, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(ez.jacfwd(filled)(X), expected, rtol=1e-7, atol=1e-9)


def test_the_python_name_of_a_numba_symbol():
    name = "_ZN8__main__8fact_recB2v3B38c8tJTIeFIjxB2IKSgI4CrvQClQZ6FczSBAA_3dEdx"
    assert _numba_compile._python_name(name) == "'__main__.fact_rec'"
    assert _numba_compile._python_name("plain") == "'plain'"


_COMPILED_BEFORE_IMPORT = """
import json
import numba, numpy as np

@numba.njit
def power(x, n):
    if n == 0:
        return 1.0
    return x * power(x, n - 1)

@numba.njit
def literal_depths(x):
    return power(x[0], 3) + 2.0 * power(x[1], 2)

x = np.array([1.1, 0.7])
literal_depths(x)  # compiled before enzyme_py is imported: no module kept of it

import enzyme_py as ez

print(json.dumps(list(ez.grad(literal_depths)(x))))

@numba.njit
def compiled_after(y):  # Numba links the library of power(float64, int64) again
    s = 0.0
    for i in range(3):
        s += power(y, i)
    return s

print(compiled_after(1.5))
"""


def test_a_recursion_compiled_before_import_leaves_numbas_modules_whole(tmp_path):
    # The recursion's target comes from Numba's own module for linking, which linking
    # consumes: enzyme_py links a copy, so that Numba's later compiles that link the
    # same library still work (they failed with a dead module pointer).
    done = run_python(_COMPILED_BEFORE_IMPORT, env={"ENZYME_PY_CACHE_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]
    gradient, value = done.stdout.split("\n")[:2]
    np.testing.assert_allclose(json.loads(gradient), [3.0 * 1.1**2, 4.0 * 0.7], rtol=1e-14)
    assert float(value) == pytest.approx(1.0 + 1.5 + 1.5**2, rel=1e-14)
