"""The substitutes (np.linalg.solve/inv/det/slogdet/cholesky/norm, np.sort, np.median,
np.outer, np.diff, print: python/enzyme_py/frontends/_numba_substitutes.py) in the @njit
functions the function differentiated calls, at any depth: the compile differentiated
calls clones of those callees with the substitutes; callees that use none keep their
own compiles. Each derivative in forward and reverse mode against float64 central
differences of the function itself (Numba's code)."""

import math

import numba
import numpy as np
import pytest

import enzyme_py as ez
from enzyme_py.frontends import _numba_substitutes as subs

from _helpers import check_grad_and_jvp as check
from _helpers import general_matrix, random_vector, spd_matrix

pytestmark = pytest.mark.needs_enzyme


# ---------------------------------------------------------------- the functions


@numba.njit
def _logpdf(x, mu, cov):
    # A multivariate normal log-density helper, as real code writes it.
    lower = np.linalg.cholesky(cov)
    d = x - mu
    z = np.linalg.solve(cov, d)
    _sign, logdet = np.linalg.slogdet(cov)
    s = 0.0
    for i in range(x.shape[0]):
        s += math.log(lower[i, i])
    return -0.5 * np.sum(d * z) - 0.25 * logdet - 0.5 * s


@numba.njit
def loglik(x, mu, cov):
    return 2.0 * _logpdf(x, mu, cov) + np.sum(x)


@numba.njit
def _leaf(a):
    return np.linalg.det(a) + np.sum(np.linalg.inv(a)) + np.linalg.norm(a)


@numba.njit
def _middle(a, x):
    return _leaf(a) * x[0] + np.sum(x * x)


@numba.njit
def two_levels(a, x):
    return _middle(a, x) + 1.5 * x[1]


@numba.njit
def _sorted_stats(x):
    s = np.sort(x)
    return s[0] * s[-1] + np.median(x) * 3.0


@numba.njit
def calls_sort(x):
    return _sorted_stats(x * 2.0) + x[0]


@numba.njit
def _quadratic_solve(a, b):
    return np.sum(np.linalg.solve(a, b) ** 2)


@numba.njit
def called_twice(a, b):
    return _quadratic_solve(a, b) + _quadratic_solve(a + np.eye(a.shape[0]), 2.0 * b)


@numba.njit
def _power(x, k):
    # Recursive, and no substitute: keeps its own compile.
    if k == 0:
        return 1.0
    return x * _power(x, k - 1)


@numba.njit
def calls_recursive(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += _power(x[i], 3)
    return s


@numba.njit
def _sort_recursive(x, k):
    # Recursive, with a substitute: the clone calls itself.
    if k == 0:
        return np.sum(np.sort(x) * np.arange(1.0, x.shape[0] + 1.0))
    return x[0] * _sort_recursive(x, k - 1)


@numba.njit
def calls_sort_recursive(x):
    return _sort_recursive(x, 2)


@numba.njit(fastmath=True, error_model="numpy", boundscheck=True)
def _fast_solve(a, b):
    return np.sum(np.linalg.solve(a, b) * b)


@numba.njit
def calls_fast_solve(a, b):
    return _fast_solve(a, b) * 2.0


def _closing_over(helper):
    @numba.njit
    def f(a, b):
        return helper(a, b) + a[0, 0]

    return f


calls_through_a_closure = _closing_over(_quadratic_solve)


# ---------------------------------------------------------------- the tests


def test_cholesky_solve_slogdet_in_a_callee():
    x, mu, cov = random_vector(4, 1), random_vector(4, 2), spd_matrix(4, 3)
    assert subs.uses_substitutes(loglik.py_func)
    check(loglik, (x, mu, cov), (0, 1, 2))


def test_two_levels_deep():
    check(two_levels, (general_matrix(3, 4), random_vector(3, 5)), (0, 1))


def test_sort_and_median_in_a_callee():
    x = np.array([0.4, -1.3, 2.2, 0.9, -0.2])
    check(calls_sort, (x,), (0,))


def test_a_callee_called_twice():
    check(called_twice, (general_matrix(3, 6), random_vector(3, 7)), (0, 1))


def test_a_callee_through_a_closure_cell():
    check(calls_through_a_closure, (general_matrix(3, 8), random_vector(3, 9)), (0, 1))


def test_a_recursive_callee_using_no_substitute_is_unchanged():
    assert not subs.uses_substitutes(calls_recursive.py_func)
    # Nothing replaced: the clone compiles the function itself, calling _power's own
    # dispatcher.
    assert subs.with_substitutes(calls_recursive.py_func) is calls_recursive.py_func
    # Numba calls _power(x, k - 1) (k an int64) from _power(x, 3) (k a literal) through
    # a symbol it resolves when it loads the code (".numba.unresolved$..."); the compile
    # differentiated links that compile in and calls it directly
    # (_numba_compile.with_recursion_resolved).
    x = np.array([0.5, -1.5, 2.0])
    assert calls_recursive(x) == pytest.approx(np.sum(x**3), rel=1e-15)
    np.testing.assert_allclose(ez.grad(calls_recursive)(x), 3.0 * x**2, rtol=1e-14)


def test_a_recursive_callee_using_a_substitute():
    clone = subs.with_substitutes(calls_sort_recursive.py_func)
    inner = clone.__globals__["_sort_recursive"]
    assert inner is not _sort_recursive
    assert inner.py_func.__globals__["_sort_recursive"] is inner  # recursion: itself
    # Its clone compiles; the clone's recursive call, to another compile of the clone
    # (k - 1 an int64, 2 a literal), is not resolved in that full compile: refused
    # before Enzyme runs (which aborted on it), naming the callee.
    with pytest.raises(
        ez.EnzymeError,
        match=r"recursive call of the @njit function "
        r"'[\w.]*_sort_recursive'.*as a loop",
    ):
        ez.grad(calls_sort_recursive)(np.array([0.7, -0.4, 1.9, 0.1]))


def test_a_callee_keeps_its_options():
    clone = subs.with_substitutes(calls_fast_solve.py_func)
    inner = clone.__globals__["_fast_solve"]
    assert inner is not _fast_solve
    for option in ("fastmath", "error_model", "boundscheck"):
        assert inner.targetoptions[option] == _fast_solve.targetoptions[option]
    check(calls_fast_solve, (general_matrix(3, 10), random_vector(3, 11)), (0, 1), rtol=1e-5)


def test_only_callees_using_substitutes_are_cloned():
    clone = subs.with_substitutes(two_levels.py_func)
    assert clone.__globals__["_middle"] is not _middle
    assert clone.__globals__["_middle"].py_func.__globals__["_leaf"] is not _leaf
    assert subs.with_substitutes(_power.py_func) is _power.py_func


@numba.njit
def _printing(x):
    s = np.sum(x * x)
    print("s =", s)
    return s


@numba.njit
def calls_printing(x):
    return _printing(x) * 2.0


def test_print_in_a_callee_is_skipped_by_the_derivative(capfd):
    x = np.array([1.0, 2.0, -0.5])
    check(calls_printing, (x,), (0,))  # its finite differences print
    capfd.readouterr()
    np.testing.assert_allclose(ez.grad(calls_printing)(x), 4.0 * x, rtol=1e-15)
    assert "s =" not in capfd.readouterr().out
    calls_printing(x)
    assert "s = 5.25" in capfd.readouterr().out


SOURCE = """
import numpy as np
import numba

@numba.njit
def helper(a, b):
    return np.sum(np.linalg.solve(a, b)) * SCALE

@numba.njit
def f(a, b):
    return helper(a, b) + b[0]
"""


def test_a_callee_edited_between_two_derivatives():
    # As in a notebook cell run again after an edit: the derivative is of the new
    # code (the caches key on the callee's code), not a stale one.
    a, b = general_matrix(3, 12), random_vector(3, 13)
    grads = []
    for scale in ("1.0", "3.0 * b[1]"):
        namespace: dict = {"__name__": "edited_cell"}
        exec(SOURCE.replace("SCALE", scale), namespace)
        f = namespace["f"]
        check(f, (a, b), (0, 1))
        grads.append(ez.grad(f, 1)(a, b))
    assert not np.allclose(grads[0], grads[1])


@numba.njit
def _eigenvalues(a):
    return np.sum(np.linalg.eigvals(a).real)


@numba.njit
def calls_eigvals(a):
    return _eigenvalues(a) * 2.0


def test_lapack_without_loops_in_a_callee_is_refused_with_advice():
    a = spd_matrix(3, 14)
    with pytest.raises(ez.EnzymeError, match=r"(?s)LAPACK.*eig"):
        ez.grad(calls_eigvals)(a)
