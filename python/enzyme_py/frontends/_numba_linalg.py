"""Substitutes for ``np.linalg.solve``, ``inv``, ``det``, ``slogdet``, ``cholesky`` and
``norm`` of float arrays, written as loops that Enzyme differentiates (Numba's code
calls LAPACK through its helper library, which Enzyme cannot see into).

Used by ``_numba_substitutes`` in the compile enzyme_py differentiates only; the
function called by itself keeps Numba's (LAPACK's) code. The factorisations:

- LU with partial pivoting (the row of the largest absolute value in the column, the
  first of equal ones, as LAPACK's getrf): ``solve``, ``inv``, ``slogdet``, ``det``.
  The derivative follows the pivoting chosen at the point (a piecewise-smooth choice
  that does not change the derivative of the result where it is differentiable);
- Cholesky, column by column, reading the lower triangle only (as Numba and NumPy do:
  the derivative of an entry above the diagonal is zero).

Results have Numba's types and layouts (``inv`` and 2-d ``solve``: Fortran order;
``det``, ``slogdet`` and matrix norms: float64) and its errors: ``LinAlgError`` for a
non-square matrix, infs or NaNs, a singular matrix (``solve``, ``inv``), a matrix that
is not positive definite; ``ValueError`` for a matrix norm order Numba does not know
(it knows None, 1, -1, inf, -inf, 2 and -2, no strings). Where the loops differ from
the function itself they raise, never return another number:

- ``det`` and ``slogdet`` of an exactly singular matrix (Numba: 0.0 and (0.0, -inf)):
  the derivative there (the cofactor matrix) is not what the loops compute, so the
  derivative raises ``LinAlgError``;
- a matrix norm with ord 2 or -2 (the extreme singular values, an SVD) raises
  ``EnzymeError`` naming the construct.

Values equal NumPy's to rounding (the loops are not LAPACK's blocked code).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from enzyme_py.core import EnzymeError

LinAlgError = np.linalg.LinAlgError
SINGULAR = "Matrix is singular to machine precision."
SQUARE = "Last 2 dimensions of the array must be square."
FINITE = "Array must not contain infs or NaNs."
NOT_PD = "Matrix is not positive definite."
SIZES = "Incompatible array sizes, system is not dimensionally valid."
NORM_ORDER = "Invalid norm order for matrices."
SINGULAR_DET = (
    "Matrix is singular to machine precision: the derivative of np.linalg.det and "
    "np.linalg.slogdet at an exactly singular matrix is not computed by enzyme_py (its "
    "LU loops need nonzero pivots; the function itself returns 0.0 and (0.0, -inf))."
)
NORM_SVD = (
    "np.linalg.norm(A, 2) and np.linalg.norm(A, -2) of a matrix (its largest or "
    "smallest singular value) need an SVD, which enzyme_py cannot differentiate in a "
    "@njit function. What to do: differentiate another norm (np.linalg.norm(A), ord=1, "
    "np.inf), compute the singular values outside the function and pass them in as a "
    "Const argument, or write a power iteration on A.T @ A as loops."
)

NAMES = ("solve", "inv", "det", "slogdet", "cholesky", "norm")


def definitions() -> dict[str, Any]:
    """The substitutes, by np.linalg name (Numba is imported here)."""
    import numba
    from numba.core import types
    from numba.extending import overload
    from numba.np.numpy_support import as_dtype

    def _float_matrix(a: Any, ndims: tuple[int, ...] = (2,)) -> bool:
        return isinstance(a, types.Array) and isinstance(a.dtype, types.Float) and a.ndim in ndims

    def _numpy_type(a: Any) -> Any:
        return getattr(np, str(as_dtype(a.dtype)))

    def _omitted(value: Any) -> bool:
        return value is None or isinstance(value, (types.NoneType, types.Omitted))

    @numba.njit
    def _check_square(a):  # type: ignore[no-untyped-def]
        if a.shape[0] != a.shape[1]:
            raise LinAlgError(SQUARE)

    @numba.njit
    def _check_finite(a):  # type: ignore[no-untyped-def]
        for v in np.nditer(a):
            if not np.isfinite(v.item()):
                raise LinAlgError(FINITE)

    @numba.njit
    def _lu(a, lu, perm):  # type: ignore[no-untyped-def]
        """Factor the square ``a`` as P a = L U into ``lu`` (L below the diagonal, its
        unit diagonal implied; U on and above) and ``perm`` (row i of P a is row
        perm[i] of a). Returns the sign of P, or 0 at the first zero pivot."""
        n = a.shape[0]
        for i in range(n):
            perm[i] = i
            for j in range(n):
                lu[i, j] = a[i, j]
        sign = 1
        for k in range(n):
            p = k
            big = abs(lu[k, k])
            for i in range(k + 1, n):
                v = abs(lu[i, k])
                if v > big:
                    big = v
                    p = i
            if big == 0.0:
                return 0
            if p != k:
                for j in range(n):
                    t = lu[k, j]
                    lu[k, j] = lu[p, j]
                    lu[p, j] = t
                q = perm[k]
                perm[k] = perm[p]
                perm[p] = q
                sign = -sign
            pivot = lu[k, k]
            for i in range(k + 1, n):
                f = lu[i, k] / pivot
                lu[i, k] = f
                for j in range(k + 1, n):
                    lu[i, j] -= f * lu[k, j]
        return sign

    @numba.njit
    def _lu_nonsingular(a):  # type: ignore[no-untyped-def]
        """``_lu`` of the square ``a`` into new arrays of its dtype: ``(lu, perm)``;
        ``LinAlgError`` at a zero pivot (``solve``, ``inv``: a singular matrix)."""
        n = a.shape[0]
        lu = np.empty((n, n), a.dtype)
        perm = np.empty(n, np.int64)
        if _lu(a, lu, perm) == 0:
            raise LinAlgError(SINGULAR)
        return lu, perm

    @numba.njit
    def _lu_solve(lu, x):  # type: ignore[no-untyped-def]
        """Overwrite ``x`` (already permuted: P b) with the solution of L U x = P b."""
        n = lu.shape[0]
        for i in range(n):
            s = x[i]
            for k in range(i):
                s -= lu[i, k] * x[k]
            x[i] = s
        for i in range(n - 1, -1, -1):
            s = x[i]
            for k in range(i + 1, n):
                s -= lu[i, k] * x[k]
            x[i] = s / lu[i, i]

    def solve(a, b):  # type: ignore[no-untyped-def]
        return np.linalg.solve(a, b)

    @overload(solve)
    def _solve(a, b):  # type: ignore[no-untyped-def]
        if not (_float_matrix(a) and _float_matrix(b, (1, 2)) and a.dtype == b.dtype):
            return lambda a, b: np.linalg.solve(a, b)
        kind = _numpy_type(a)
        if b.ndim == 1:

            def solve_vector(a, b):  # type: ignore[no-untyped-def]
                _check_finite(a)
                _check_finite(b)
                if a.shape[0] != b.shape[0]:
                    raise LinAlgError(SIZES)
                _check_square(a)
                n = a.shape[0]
                lu, perm = _lu_nonsingular(a)
                x = np.empty(n, kind)
                for i in range(n):
                    x[i] = b[perm[i]]
                _lu_solve(lu, x)
                return x

            return solve_vector

        def solve_matrix(a, b):  # type: ignore[no-untyped-def]
            _check_finite(a)
            _check_finite(b)
            if a.shape[0] != b.shape[0]:
                raise LinAlgError(SIZES)
            _check_square(a)
            n = a.shape[0]
            nrhs = b.shape[1]
            out = np.empty((nrhs, n), kind).T  # Fortran order, as Numba's
            if n == 0:
                return out
            lu, perm = _lu_nonsingular(a)
            x = np.empty(n, kind)
            for j in range(nrhs):
                for i in range(n):
                    x[i] = b[perm[i], j]
                _lu_solve(lu, x)
                for i in range(n):
                    out[i, j] = x[i]
            return out

        return solve_matrix

    def inv(a):  # type: ignore[no-untyped-def]
        return np.linalg.inv(a)

    @overload(inv)
    def _inv(a):  # type: ignore[no-untyped-def]
        if not _float_matrix(a):
            return lambda a: np.linalg.inv(a)
        kind = _numpy_type(a)

        def impl(a):  # type: ignore[no-untyped-def]
            _check_square(a)
            _check_finite(a)
            n = a.shape[0]
            out = np.empty((n, n), kind).T  # Fortran order, as Numba's
            if n == 0:
                return out
            lu, perm = _lu_nonsingular(a)
            x = np.empty(n, kind)
            for j in range(n):
                for i in range(n):
                    x[i] = 1.0 if perm[i] == j else 0.0
                _lu_solve(lu, x)
                for i in range(n):
                    out[i, j] = x[i]
            return out

        return impl

    @numba.njit
    def _slogdet(a):  # type: ignore[no-untyped-def]
        _check_square(a)
        n = a.shape[0]
        if n == 0:
            return (1.0, 0.0)
        _check_finite(a)
        lu = np.empty((n, n), a.dtype)
        perm = np.empty(n, np.int64)
        sign = _lu(a, lu, perm)
        if sign == 0:
            raise LinAlgError(SINGULAR_DET)
        s = 1.0 if sign > 0 else -1.0
        acc = 0.0
        for k in range(n):
            v = lu[k, k]
            if v < 0.0:
                s = -s
                v = -v
            acc = acc + np.log(v)
        return (s, acc)

    def slogdet(a):  # type: ignore[no-untyped-def]
        return np.linalg.slogdet(a)

    @overload(slogdet)
    def _slogdet_overload(a):  # type: ignore[no-untyped-def]
        if not _float_matrix(a):
            return lambda a: np.linalg.slogdet(a)
        return lambda a: _slogdet(a)

    def det(a):  # type: ignore[no-untyped-def]
        return np.linalg.det(a)

    @overload(det)
    def _det(a):  # type: ignore[no-untyped-def]
        if not _float_matrix(a):
            return lambda a: np.linalg.det(a)

        def impl(a):  # type: ignore[no-untyped-def]
            s, logdet = _slogdet(a)
            return s * np.exp(logdet)  # as Numba's (and NumPy's): through the logarithm

        return impl

    def cholesky(a):  # type: ignore[no-untyped-def]
        return np.linalg.cholesky(a)

    @overload(cholesky)
    def _cholesky(a):  # type: ignore[no-untyped-def]
        if not _float_matrix(a):
            return lambda a: np.linalg.cholesky(a)
        kind = _numpy_type(a)

        def impl(a):  # type: ignore[no-untyped-def]
            _check_square(a)
            n = a.shape[0]
            out = np.zeros((n, n), kind)
            for j in range(n):
                d = a[j, j]
                for k in range(j):
                    d -= out[j, k] * out[j, k]
                if d <= 0.0:  # a NaN goes on, as in Numba's (LAPACK's potrf)
                    raise LinAlgError(NOT_PD)
                d = np.sqrt(d)
                out[j, j] = d
                for i in range(j + 1, n):
                    t = a[i, j]
                    for k in range(j):
                        t -= out[i, k] * out[j, k]
                    out[i, j] = t / d
            return out

        return impl

    @numba.njit
    def _frobenius(x):  # type: ignore[no-untyped-def]
        s = 0.0
        for i in range(x.shape[0]):
            for j in range(x.shape[1]):
                s += x[i, j] * x[i, j]
        return np.sqrt(s)

    @numba.njit
    def _matrix_norm(x, order):  # type: ignore[no-untyped-def]
        m, n = x.shape
        if x.size == 0:
            return 0.0
        if order == np.inf or order == -np.inf:  # the largest (smallest) row sum
            best = 0.0
            for i in range(m):
                t = 0.0
                for j in range(n):
                    t += abs(x[i, j])
                if i == 0 or (t > best if order > 0 else t < best):
                    best = t
            return best
        if order == 1 or order == -1:  # the largest (smallest) column sum
            best = 0.0
            for j in range(n):
                t = 0.0
                for i in range(m):
                    t += abs(x[i, j])
                if j == 0 or (t > best if order > 0 else t < best):
                    best = t
            return best
        if order == 2 or order == -2:
            raise EnzymeError(NORM_SVD)
        raise ValueError(NORM_ORDER)

    @numba.njit
    def _vector_norm(x, order):  # type: ignore[no-untyped-def]
        n = x.shape[0]
        if n == 0:
            return 0.0
        s = 0.0
        if order == np.inf or order == -np.inf:
            s = abs(x[0])
            for k in range(1, n):
                v = abs(x[k])
                if (v > s) if order > 0 else (v < s):
                    s = v
            return s
        if order == 0:
            for k in range(n):
                if x[k] != 0.0:
                    s += 1.0
            return s
        if order == 1:
            for k in range(n):
                s += abs(x[k])
            return s
        if order == 2:
            for k in range(n):
                s += x[k] * x[k]
            return np.sqrt(s)
        for k in range(n):
            s += abs(x[k]) ** order
        return s ** (1.0 / order)

    def norm(x, ord=None):  # type: ignore[no-untyped-def]
        return np.linalg.norm(x, ord)

    @overload(norm)
    def _norm(x, ord=None):  # type: ignore[no-untyped-def]
        numeric = isinstance(ord, (types.Integer, types.Float))
        if _float_matrix(x) and _omitted(ord):
            return lambda x, ord=None: 0.0 if x.size == 0 else _frobenius(x)
        if _float_matrix(x) and numeric:
            return lambda x, ord=None: _matrix_norm(x, ord)
        if _float_matrix(x) and isinstance(ord, (types.UnicodeType, types.StringLiteral)):

            def invalid(x, ord=None):  # type: ignore[no-untyped-def]
                if x.size == 0:  # as Numba's: no error for an empty matrix
                    return 0.0
                raise ValueError(NORM_ORDER)

            return invalid
        if _float_matrix(x, (1,)) and numeric:
            return lambda x, ord=None: _vector_norm(x, ord)
        if _omitted(ord):
            return lambda x, ord=None: np.linalg.norm(x)
        return lambda x, ord=None: np.linalg.norm(x, ord)

    return {
        "solve": solve,
        "inv": inv,
        "det": det,
        "slogdet": slogdet,
        "cholesky": cholesky,
        "norm": norm,
    }
