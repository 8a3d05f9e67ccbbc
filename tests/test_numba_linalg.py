"""np.linalg.solve, inv, det, slogdet, cholesky and matrix norms inside an @njit
function, differentiated in forward and reverse mode against float64 central
differences of the function itself (Numba's LAPACK code).

The compile enzyme_py differentiates sees these through substitutes written as loops
(LU with partial pivoting, Cholesky: python/enzyme_py/frontends/_numba_linalg.py);
the function called by itself keeps Numba's code. Errors are Numba's, raised again
from the derivative."""

import math

import numba
import numpy as np
import pytest
from numpy import linalg
from numpy.linalg import cholesky as chol
from numpy.linalg import solve

import enzyme_py as ez

from _helpers import check_grad_and_jvp, general_matrix, spd_matrix
from reference import fd_jacobian, fd_partial

pytestmark = pytest.mark.needs_enzyme

LinAlgError = np.linalg.LinAlgError


def check(f, args, diff, rtol=1e-6, atol=1e-8, dtype=np.float64):
    """check_grad_and_jvp with the arrays in ``dtype`` (float64 unless asked)."""
    check_grad_and_jvp(f, args, diff, rtol, atol, dtype)


# Partial pivoting swaps rows at every step of this one (tiny leading pivots).
PIVOTING = np.array([[1e-3, 2.0, 0.5], [1.0, 2e-3, 3.0], [2.5, 1.0, 3e-3]])


# ---------------------------------------------------------------- the functions


@numba.njit
def solve_vector(a, b):
    x = np.linalg.solve(a, b)
    return np.sum(x * x) + x[0]


@numba.njit
def solve_matrix(a, b):
    x = np.linalg.solve(a, b)
    s = 0.0
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            s += (i + 2.0 * j + 1.0) * x[i, j] * x[i, j]
    return s


@numba.njit
def inverse(a):
    y = np.linalg.inv(a)
    return np.sum(y * y) + y[0, -1]


@numba.njit
def determinant(a):
    return np.linalg.det(a)


@numba.njit
def log_determinant(a):
    sign, logdet = np.linalg.slogdet(a)
    return sign * logdet + sign


@numba.njit
def cholesky_cubes(a):
    lower = np.linalg.cholesky(a)
    return np.sum(lower * lower * lower) + lower[-1, 0]


@numba.njit
def norm_frobenius(a):
    return np.linalg.norm(a) ** 3


@numba.njit
def norm_one(a):
    return np.linalg.norm(a, 1) * np.linalg.norm(a, -1)


@numba.njit
def norm_inf(a):
    return np.linalg.norm(a, np.inf) + 2.0 * np.linalg.norm(a, -np.inf)


def _b(n, seed=5):
    return np.random.default_rng(seed).standard_normal(n)


def _bb(n, seed=6):
    return np.random.default_rng(seed).standard_normal((n, 2))


CASES = {
    "solve(A, b)": (solve_vector, lambda n, s: (general_matrix(n, s), _b(n)), (0, 1)),
    "solve(A, B)": (solve_matrix, lambda n, s: (general_matrix(n, s), _bb(n)), (0, 1)),
    "inv": (inverse, lambda n, s: (general_matrix(n, s),), (0,)),
    "det": (determinant, lambda n, s: (general_matrix(n, s),), (0,)),
    "slogdet": (log_determinant, lambda n, s: (general_matrix(n, s),), (0,)),
    "cholesky": (cholesky_cubes, lambda n, s: (spd_matrix(n, s),), (0,)),
    "norm": (norm_frobenius, lambda n, s: (general_matrix(n, s),), (0,)),
    "norm(A, 1)": (norm_one, lambda n, s: (general_matrix(n, s),), (0,)),
    "norm(A, inf)": (norm_inf, lambda n, s: (general_matrix(n, s),), (0,)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_float64_sizes(name):
    f, make, diff = CASES[name]
    for n, seed in ((1, 11), (2, 12), (3, 13), (5, 14)):
        check(f, make(n, seed), diff)


@pytest.mark.parametrize("name", list(CASES))
def test_pivoting_matrix(name):
    f, make, diff = CASES[name]
    args = list(make(3, 0))
    args[0] = PIVOTING @ PIVOTING.T + 0.5 * np.eye(3) if name == "cholesky" else PIVOTING
    check(f, args, diff)


@pytest.mark.parametrize("name", list(CASES))
def test_float32(name):
    f, make, diff = CASES[name]
    # float32 arithmetic against float64 differences of the same function
    check(f, make(4, 21), diff, rtol=3e-3, atol=3e-3, dtype=np.float32)


def test_values_equal_numpys():
    # The loops' values (seen through ez.jvp's primal result) against NumPy's.
    rng = np.random.default_rng(8)
    for n in (1, 3, 6):
        a = rng.standard_normal((n, n)) + np.eye(n)
        s = spd_matrix(n, n)
        b = rng.standard_normal(n)
        bb = rng.standard_normal((n, 3))

        def value(f, *args):
            tangents = tuple(np.zeros_like(x) for x in args)
            return ez.jvp(f, args, tangents)[0]

        assert value(determinant, a) == pytest.approx(np.linalg.det(a), rel=1e-12)
        sign, logdet = np.linalg.slogdet(a)
        assert value(log_determinant, a) == pytest.approx(sign * logdet + sign, rel=1e-12)
        assert value(norm_one, a) == pytest.approx(
            np.linalg.norm(a, 1) * np.linalg.norm(a, -1), rel=1e-13
        )
        x = np.linalg.solve(a, b)
        assert value(solve_vector, a, b) == pytest.approx(np.sum(x * x) + x[0], rel=1e-11)
        lower = np.linalg.cholesky(s)
        want = np.sum(lower**3) + lower[-1, 0]
        assert value(cholesky_cubes, s) == pytest.approx(want, rel=1e-12)
        y = np.linalg.inv(a)
        assert value(inverse, a) == pytest.approx(np.sum(y * y) + y[0, -1], rel=1e-11)
        x2 = np.linalg.solve(a, bb)
        w = np.add.outer(np.arange(n) + 1.0, 2.0 * np.arange(3))
        assert value(solve_matrix, a, bb) == pytest.approx(np.sum(w * x2 * x2), rel=1e-11)


# ---------------------------------------------------------------- array results


@numba.njit
def inverse_of(a):
    return np.linalg.inv(a)


@numba.njit
def solution_of(a, b):
    return np.linalg.solve(a, b)


@numba.njit
def cholesky_of(a):
    return np.linalg.cholesky(a)


def test_array_results_through_jacobian():
    # inv and 2-d solve give Fortran-ordered arrays, as Numba's.
    a = general_matrix(3, 31)
    np.testing.assert_allclose(
        ez.jacobian(inverse_of)(a), fd_jacobian(inverse_of, a), rtol=1e-6, atol=1e-8
    )
    bb = _bb(3)
    np.testing.assert_allclose(
        ez.jacobian(solution_of, 1)(a, bb),
        fd_jacobian(lambda b: solution_of(a, b), bb),
        rtol=1e-6,
        atol=1e-8,
    )
    s = spd_matrix(3, 32)
    np.testing.assert_allclose(
        ez.jacobian(cholesky_of)(s), fd_jacobian(cholesky_of, s), rtol=1e-6, atol=1e-8
    )


def test_cholesky_reads_the_lower_triangle():
    # As Numba and NumPy: the entries above the diagonal are not read (zero derivative).
    s = spd_matrix(4, 33)
    s[0, 3] += 5.0
    g = ez.grad(cholesky_cubes)(s)
    np.testing.assert_allclose(g, fd_partial(cholesky_cubes, [s], 0), rtol=1e-6, atol=1e-8)
    assert np.all(g[np.triu_indices(4, 1)] == 0.0)


# ---------------------------------------------------------------- in combination


@numba.njit
def used_twice(a, b):
    x = np.linalg.solve(a, b)
    y = np.linalg.solve(a, x)
    return x @ (a @ y) + np.linalg.det(a) * np.linalg.det(a.T)


@numba.njit
def in_a_loop(a, b):
    n = a.shape[0]
    x = b.copy()
    s = 0.0
    for k in range(3):
        x = np.linalg.solve(a + k * np.eye(n), x)
        s += np.linalg.norm(np.linalg.inv(a + 0.5 * k * np.eye(n)), 1) * x[0]
    return s + np.sum(x)


@numba.njit
def gaussian_log_density(x, mean, cov):
    # The multivariate normal log-density through cholesky and triangular structure.
    lower = np.linalg.cholesky(cov)
    z = np.linalg.solve(lower, x - mean)
    n = x.shape[0]
    half_logdet = 0.0
    for i in range(n):
        half_logdet += math.log(lower[i, i])
    return -0.5 * (z @ z) - half_logdet - 0.5 * n * math.log(2.0 * math.pi)


@numba.njit
def imported_names(a, b):
    # from numpy.linalg import solve, cholesky as chol; from numpy import linalg
    x = solve(a, b)
    lower = chol(a @ a.T + np.eye(a.shape[0]))
    return np.sum(x * x) + np.sum(lower) + linalg.det(a) + linalg.norm(a, np.inf)


def test_used_twice_and_with_matmul():
    a, b = general_matrix(3, 41), _b(3)
    check(used_twice, (a, b), (0, 1))


def test_inside_a_loop():
    a, b = general_matrix(3, 42), _b(3)
    check(in_a_loop, (a, b), (0, 1))


def test_gaussian_log_density():
    x, mean, cov = _b(4, 1), _b(4, 2), spd_matrix(4, 43)
    check(gaussian_log_density, (x, mean, cov), (0, 1, 2))
    s = np.linalg.slogdet(cov)[1]
    d = x - mean
    want = -0.5 * d @ np.linalg.solve(cov, d) - 0.5 * s - 2.0 * math.log(2.0 * math.pi)
    assert gaussian_log_density(x, mean, cov) == pytest.approx(want, rel=1e-12)


@numba.njit
def log_determinant_from_diagonal(a):
    # np.diag's code was compiled with the function itself, fully optimised (a
    # vectorised gather, which Enzyme has no reverse for): the derivative was refused,
    # naming LAPACK's potrf. Each library compiled before is now linked as the module
    # enzyme_py kept of it, before Numba's optimisation.
    lower = np.linalg.cholesky(a @ a.T + np.eye(a.shape[0]))
    return 2.0 * np.sum(np.log(np.diag(lower)))


def test_cholesky_with_np_diag_of_its_factor():
    a = general_matrix(4, 44)
    log_determinant_from_diagonal(a)  # compiled first, as a user's script does
    check(log_determinant_from_diagonal, (a,), (0,))
    want = np.linalg.slogdet(a @ a.T + np.eye(4))[1]
    assert log_determinant_from_diagonal(a) == pytest.approx(want, rel=1e-12)


def test_names_imported_from_numpy_linalg():
    a, b = general_matrix(3, 44), _b(3)
    check(imported_names, (a, b), (0, 1))


def test_fortran_and_strided_inputs():
    a = general_matrix(4, 45)
    check(inverse, (np.asfortranarray(a),), (0,))
    big = general_matrix(6, 46)
    view = big[::2, 1::2]
    g = ez.grad(determinant)(view)
    np.testing.assert_allclose(
        g, fd_partial(determinant, [np.ascontiguousarray(view)], 0), rtol=1e-6, atol=1e-8
    )


# ---------------------------------------------------------------- errors, as Numba's


def _both_raise(f, args, error, match):
    """f itself and its derivatives (reverse and forward) raise the same error."""
    with pytest.raises(error, match=match):
        f(*args)
    with pytest.raises(error, match=match):
        ez.grad(f)(*args)
    tangents = tuple(np.zeros_like(a) for a in args)
    with pytest.raises(error, match=match):
        ez.jvp(f, args, tangents)


SINGULAR = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.5, 1.0, 1.0]])


def test_singular_matrix_raises_linalgerror():
    _both_raise(inverse, (SINGULAR,), LinAlgError, "singular")
    _both_raise(solve_vector, (SINGULAR, np.ones(3)), LinAlgError, "singular")
    _both_raise(solve_matrix, (np.zeros((2, 2)), np.ones((2, 2))), LinAlgError, "singular")


def test_not_square_raises_linalgerror():
    rect = np.ones((2, 3))
    for f in (inverse, determinant, log_determinant, cholesky_cubes):
        _both_raise(f, (rect,), LinAlgError, "must be square")
    with pytest.raises(LinAlgError, match="must be square"):
        ez.grad(solve_vector)(rect, np.ones(2))
    _both_raise(solve_vector, (np.eye(3), np.ones(2)), LinAlgError, "not dimensionally valid")


def test_not_positive_definite_raises_linalgerror():
    _both_raise(cholesky_cubes, (np.array([[1.0, 2.0], [2.0, 1.0]]),), LinAlgError, "positive")
    # A NaN is no error (Numba's LAPACK call carries it on): NaNs, as the function's.
    nan = np.array([[4.0, 0.0], [np.nan, 1.0]])
    assert np.isnan(cholesky_cubes(nan))
    assert np.isnan(ez.jvp(cholesky_cubes, (nan,), (np.ones((2, 2)),))[0])


def test_infs_and_nans_raise_linalgerror():
    a = np.eye(2)
    a[1, 0] = np.inf
    _both_raise(inverse, (a,), LinAlgError, "infs or NaNs")
    _both_raise(solve_vector, (np.eye(2), np.array([1.0, np.nan])), LinAlgError, "infs or NaNs")


def test_det_of_a_singular_matrix_raises_in_the_derivative():
    # The function itself returns 0.0; the loops' derivative there would not be the
    # cofactor matrix, so the derivative refuses instead of returning a number.
    assert determinant(SINGULAR) == 0.0
    with pytest.raises(LinAlgError, match="derivative of np.linalg.det"):
        ez.grad(determinant)(SINGULAR)
    with pytest.raises(LinAlgError, match="derivative of np.linalg.det"):
        ez.grad(log_determinant)(SINGULAR)


@numba.njit
def spectral_norm(a):
    return np.linalg.norm(a, 2)


@numba.njit
def named_norm(a):
    return np.linalg.norm(a, "fro")


def test_norm_orders_needing_an_svd_are_refused():
    a = general_matrix(3, 51)
    assert spectral_norm(a) == pytest.approx(np.linalg.norm(a, 2), rel=1e-12)
    with pytest.raises(ez.EnzymeError, match=r"np\.linalg\.norm\(A, 2\).*What to do"):
        ez.grad(spectral_norm)(a)
    with pytest.raises(ez.EnzymeError, match=r"np\.linalg\.norm\(A, 2\)"):
        ez.jvp(spectral_norm, (a,), (np.ones((3, 3)),))


def test_string_norm_orders_raise_as_numbas():
    # Numba 0.61 knows no string orders ('fro', 'nuc'): np.linalg.norm(A) is the
    # Frobenius norm.
    _both_raise(named_norm, (np.eye(2),), ValueError, "Invalid norm order")


def test_vector_norm_orders():
    @numba.njit
    def vector_norms(x):
        return (
            np.linalg.norm(x, 1)
            + np.linalg.norm(x, np.inf)
            + np.linalg.norm(x, 3)
            + np.linalg.norm(x, 2) ** 2
            + np.linalg.norm(x, -np.inf)
            + np.linalg.norm(x)
        )

    x = np.array([0.3, -1.2, 0.7, 2.0])
    check(vector_norms, (x,), (0,))


@numba.njit
def solve_in_callee(a, b):
    return np.linalg.solve(a, b)


@numba.njit
def calls_solve(a, b):
    return np.sum(solve_in_callee(a, b))


def test_linalg_in_a_called_function():
    # The @njit functions it calls see the substitutes too (more forms:
    # tests/test_numba_substitutes_in_callees.py).
    a, b = general_matrix(3, 52), _b(3)
    check(calls_solve, (a, b), (0, 1))


@numba.njit
def eig_in_callee(a):
    return np.sum(np.linalg.eigvals(a).real)


@numba.njit
def calls_eig(a):
    return eig_in_callee(a) * 2.0


def test_linalg_without_loops_in_a_called_function_is_refused_with_advice():
    with pytest.raises(ez.EnzymeError, match=r"(?s)LAPACK.*numba_ez_rgeev.*eigvals.*no derivative"):
        ez.grad(calls_eig)(general_matrix(3, 53))
