"""Constructs whose Numba code calls runtime helpers that carry no derivative
(python/enzyme_py/frontends/_numba_runtime.py): reshape / ravel, np.max / np.min,
math.lgamma and math.gamma of an active value (float64, float32), random draws,
exceptions raised with run-time values; and what must stay refused (objmode, print).
Each against finite differences or the draws themselves."""

import cmath
import math
import random

import numba
import numpy as np
import pytest

import enzyme_py as ez

from reference import fd_jacobian

pytestmark = pytest.mark.needs_enzyme


def fd_grad(f, x, h=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[i] += h
        xm[i] -= h
        g[i] = (f(xp) - f(xm)) / (2 * h)
    return g


@numba.njit
def reshaped(x):
    a = x.reshape((2, 3))
    return np.sum(a[0] * a[1] * a[1])


@numba.njit
def extremes(x):
    return np.max(x) * 2.0 - np.min(x) + x.max()


@numba.njit
def lgammas(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += math.lgamma(x[i]) * x[i]
    return s


@numba.njit
def gammas(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += math.gamma(x[i]) * x[i]
    return s


@numba.njit
def gammas32(x):
    s = np.float32(0.0)
    for i in range(x.shape[0]):
        s += math.gamma(x[i]) + math.lgamma(x[i]) * x[i]
    return s


@numba.njit
def raises_with_value(x):
    s = 0.0
    for i in range(x.shape[0]):
        if x[i] < 0.0:
            raise ValueError("negative value at", i)
        s += math.sqrt(x[i])
    return s


@pytest.mark.parametrize(
    "f, x",
    [
        (reshaped, np.linspace(0.1, 1.2, 6)),
        (extremes, np.array([0.4, -1.2, 2.5, 0.3])),
        (lgammas, np.array([0.3, 1.7, 4.2, -0.6, 12.5])),
        (gammas, np.array([0.3, 1.7, 4.2, -0.6, 2.9, -2.5])),
        (raises_with_value, np.array([0.5, 2.0, 3.0])),
    ],
)
def test_gradient_and_tangent(f, x):
    want = fd_grad(f, x)
    np.testing.assert_allclose(ez.grad(f)(x), want, rtol=1e-6, atol=1e-8)
    t = np.linspace(0.5, 1.5, x.size)
    y, dy = ez.jvp(f, (x,), (t,))
    assert y == pytest.approx(f(x), rel=1e-15)
    assert dy == pytest.approx(want @ t, rel=1e-6)


def test_lgamma_value_is_libm_and_second_derivative_is_trigamma():
    x = np.array([0.7, 3.3])
    y, _ = ez.jvp(lgammas, (x,), (np.ones(2),))
    assert y == lgammas(x)  # the primal is libm's lgamma, bit for bit
    h = ez.hessian(lgammas)(x)

    # d2/dx2 [x lgamma(x)] = 2 digamma(x) + x trigamma(x), by differences of digamma.
    def digamma(v, e=1e-5):
        return (math.lgamma(v + e) - math.lgamma(v - e)) / (2 * e)

    for i, v in enumerate(x):
        trigamma = (digamma(v + 1e-4) - digamma(v - 1e-4)) / 2e-4
        assert h[i, i] == pytest.approx(2 * digamma(v) + v * trigamma, rel=1e-4)
    assert h[0, 1] == 0.0


def _digamma(v, e=1e-5):
    return (math.lgamma(v + e) - math.lgamma(v - e)) / (2 * e)


def test_gamma_value_is_numbas_and_second_derivative_is_gammas():
    x = np.array([0.7, 3.3, -1.4])
    y, _ = ez.jvp(gammas, (x,), (np.ones(3),))
    assert y == gammas(x)  # the primal is Numba's gamma, bit for bit
    h = ez.hessian(gammas)(x)
    for i, v in enumerate(x):
        # d2/dx2 [x gamma(x)] = 2 gamma'(x) + x gamma''(x), with gamma' = gamma digamma and
        # gamma'' = gamma (digamma^2 + trigamma).
        psi = _digamma(v)
        trigamma = (_digamma(v + 1e-4) - _digamma(v - 1e-4)) / 2e-4
        want = 2 * math.gamma(v) * psi + v * math.gamma(v) * (psi * psi + trigamma)
        assert h[i, i] == pytest.approx(want, rel=1e-4)
    assert h[0, 1] == 0.0


def test_float32_gamma_and_lgamma():
    x = np.array([0.3, 1.7, 4.2, -0.6], dtype=np.float32)
    y, _ = ez.jvp(gammas32, (x,), (np.ones(4, dtype=np.float32),))
    assert y == gammas32(x)  # libm's and Numba's float32 values, bit for bit
    g = ez.grad(gammas32)(x)
    assert g.dtype == np.float32
    v = x.astype(np.float64)
    want = [math.gamma(a) * _digamma(a) + math.lgamma(a) + a * _digamma(a) for a in v]
    np.testing.assert_allclose(g, want, rtol=2e-6)


def test_exception_with_a_run_time_value_is_raised_from_the_derivative():
    with pytest.raises(ValueError, match="negative value at"):
        ez.grad(raises_with_value)(np.array([1.0, -2.0]))


@numba.njit
def through_objmode(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i]
    with numba.objmode(t="float64"):
        t = s * 3.0
    return t


def test_objmode_stays_refused():
    # Its result comes from Python: a derivative through it would silently be zero.
    with pytest.raises(ez.EnzymeError, match="objmode"):
        ez.grad(through_objmode)(np.array([1.0, 2.0]))


@numba.njit
def reseed(seed):
    np.random.seed(seed)
    random.seed(seed)


@numba.njit
def noisy(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * np.random.standard_normal()
    return s


@numba.njit
def normal_draws(n):
    z = np.empty(n)
    for i in range(n):
        z[i] = np.random.standard_normal()
    return z


@numba.njit
def monte_carlo(mu, sigma):
    # E[(mu + sigma e)^2] over 1000 draws of e ~ N(0, 1): a reparameterised estimate.
    s = 0.0
    for _ in range(1000):
        v = mu[0] + sigma[0] * random.gauss(0.0, 1.0)
        s += v * v
    return s / 1000


@numba.njit
def gauss_draws(n):
    z = np.empty(n)
    for i in range(n):
        z[i] = random.gauss(0.0, 1.0)
    return z


def test_random_draws_are_constants_of_the_derivative():
    # A derivative call draws as one call of the function does; its reverse pass uses
    # the draws of its forward pass.
    x = np.linspace(0.5, 2.0, 7)
    reseed(0)
    g = ez.grad(noisy)(x)
    reseed(0)
    np.testing.assert_array_equal(g, normal_draws(7))
    reseed(1)
    value, g = ez.value_and_grad(noisy)(x)
    assert value == pytest.approx(float(np.dot(x, g)), rel=1e-14)
    t = np.linspace(-1.0, 1.0, 7)
    reseed(2)
    y, dy = ez.jvp(noisy, (x,), (t,))
    reseed(2)
    z = normal_draws(7)
    assert (y, dy) == (
        pytest.approx(float(x @ z), rel=1e-14),
        pytest.approx(float(t @ z), rel=1e-14),
    )


def test_a_monte_carlo_gradient_is_the_gradient_of_its_samples():
    mu, sigma = np.array([0.3]), np.array([1.2])
    reseed(3)
    d_mu, d_sigma = ez.grad(monte_carlo, argnums=(0, 1))(mu, sigma)
    reseed(3)
    e = gauss_draws(1000)
    v = mu[0] + sigma[0] * e
    np.testing.assert_allclose(d_mu, [np.mean(2 * v)], rtol=1e-12)
    np.testing.assert_allclose(d_sigma, [np.mean(2 * v * e)], rtol=1e-12)


@numba.njit(parallel=True)
def noisy_prange(x):
    s = 0.0
    for i in numba.prange(x.shape[0]):
        s += x[i] * np.random.standard_normal()
    return s


def test_random_draws_in_a_prange_loop_keep_its_derivative_on_one_thread():
    # On threads, a body's reverse did not use its forward pass's draws (the gradient
    # disagreed with the value it came with): refused, with the warning threads= owes.
    x = np.linspace(0.5, 2.0, 64)
    dx = np.zeros_like(x)
    df = ez.autodiff(noisy_prange, ez.Reverse, ez.Duplicated, ez.Active, threads=2)
    with pytest.warns(ez.PerformanceWarning, match="draws random numbers"):
        (value,) = df(x, dx, 1.0)
    assert value == pytest.approx(float(np.dot(x, dx)), rel=1e-13)


@numba.njit
def complex_power(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += abs(complex(x[i], 1.0) ** 2.5)
    return s


@numba.njit
def complex_power_written_out(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += abs(cmath.exp(2.5 * cmath.log(complex(x[i], 1.0))))
    return s


def test_complex_power_is_refused_with_the_form_that_differentiates():
    x = np.array([0.5, 1.5])
    with pytest.raises(ez.EnzymeError, match="cmath.exp\\(p \\* cmath.log\\(z\\)\\)"):
        ez.grad(complex_power)(x)
    want = fd_grad(complex_power, x)
    np.testing.assert_allclose(ez.grad(complex_power_written_out)(x), want, rtol=1e-6)


@numba.njit
def printing(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i]
    print("s =", s)
    return s


def test_print_does_not_change_the_derivative_and_is_skipped_in_it(capfd):
    # print has side effects only: the derivative's call skips it (documented in
    # frontends/_numba_substitutes.py); the function called by itself prints.
    x = np.array([1.0, 2.0])
    np.testing.assert_allclose(ez.grad(printing)(x), 2 * x, rtol=1e-15)
    y, dy = ez.jvp(printing, (x,), (np.array([1.0, -0.5]),))
    assert (y, dy) == (5.0, 0.0)
    assert "s =" not in capfd.readouterr().out
    printing(x)
    assert "s = 5.0" in capfd.readouterr().out


@numba.njit
def extremes_after_print(x):
    print("extremes of", x.shape[0])
    largest = x[0]
    smallest = x[0]
    for v in x[1:]:
        if v > largest:
            largest = v
        if v < smallest:
            smallest = v
    return 2.0 * largest - smallest


@numba.njit
def extremes_after_sort(x):
    ordered = np.sort(x)
    largest = x[0]
    smallest = x[0]
    for v in x[1:]:
        if v > largest:
            largest = v
        if v < smallest:
            smallest = v
    return 2.0 * largest - smallest + 0.5 * ordered[1]


@pytest.mark.parametrize("f", [extremes_after_print, extremes_after_sort])
def test_a_function_with_a_substitute_is_differentiated_before_code_generation(f):
    # A function using print (or np.sort, ...) is compiled again with the substitutes;
    # Numba's code generation rewrites a module in place, and Enzyme's reverse of this
    # max/min loop in that form put the minimum's adjoint on the wrong element
    # (x[1] instead of x[2] here) with no error. enzyme_py takes the module before it.
    x = np.array([0.5, 2.0, -3.0, 0.2, 4.0, 1.0])
    expected = np.zeros(6)
    expected[4], expected[2] = 2.0, -1.0
    if f is extremes_after_sort:
        expected[3] += 0.5  # np.sort(x)[1] is x[3]
    np.testing.assert_array_equal(ez.grad(f)(x), expected)
    np.testing.assert_array_equal(ez.value_and_grad(f)(x)[1], expected)
    np.testing.assert_array_equal(ez.jacfwd(f)(x), expected)
    rng = np.random.default_rng(7)
    for _ in range(4):
        y = rng.normal(size=7)
        np.testing.assert_allclose(ez.grad(f)(y), fd_jacobian(f, y), atol=1e-7)


@numba.njit
def column_assigned(x):
    t = np.zeros((x.shape[0], 2))
    t[:, 0] = x
    t[:, 1] = x * x
    return np.sum(t * t) + t[0, 1] * t[1, 0]


@numba.njit
def strided_assigned(x):
    t = np.zeros(2 * x.shape[0])
    t[::2] = x
    t[1::2] = np.sin(x)
    s = 0.0
    for i in range(t.shape[0]):
        s += (i + 1) * t[i] ** 2
    return s


@numba.njit
def overlapping_assigned(x):
    t = x.copy()
    t[1:] = t[:-1] * 2.0
    return np.sum(t**3)


@numba.njit
def scalar_assigned(x):
    t = np.zeros(4)
    t[1:3] = x[0] * x[1]
    return np.sum(t * np.arange(4.0))


@pytest.mark.parametrize(
    "f", [column_assigned, strided_assigned, overlapping_assigned, scalar_assigned]
)
def test_slice_assignment(f):
    # Numba's size check raises with run-time values; with those differentiable,
    # slice assignment is plain loops to Enzyme.
    x = np.array([0.3, 1.1, -0.7])
    want = fd_grad(f, x)
    np.testing.assert_allclose(ez.grad(f)(x), want, rtol=1e-6, atol=1e-8)
    _, dy = ez.jvp(f, (x,), (np.ones(3),))
    assert dy == pytest.approx(want.sum(), rel=1e-6)


# Integer arrays made inside the function (their allocations are inactive), sorting
# and the NumPy functions replaced by differentiable loops (_numba_substitutes.py),
# lists of fixed size (nested-list literals, np.cross with a list).


@numba.njit
def index_by_arange(x):
    idx = np.arange(x.shape[0])
    s = 0.0
    for i in range(x.shape[0]):
        s += x[idx[i]] * (i + 1.0) * x[i]
    return s


@numba.njit
def index_by_argsort(x):
    order = np.argsort(x)
    s = 0.0
    for i in range(x.shape[0]):
        s += x[order[i]] * (i + 1.0) * x[i]
    return s


@numba.njit
def index_by_empty_int(x):
    n = x.shape[0]
    idx = np.empty(n, np.int64)
    for i in range(n):
        idx[i] = n - 1 - i
    s = 0.0
    for i in range(n):
        s += x[idx[i]] * x[i] * (i + 1.0)
    return s


@numba.njit
def weighted_sorted(x):
    a = np.sort(x)
    s = 0.0
    for i in range(a.shape[0]):
        s += a[i] * (i + 1.0) * a[i]
    return s


@numba.njit
def median_even(x):
    return np.median(x * x) * 2.0


@numba.njit
def median_odd(x):
    return np.median(x[:-1]) + np.median(np.sin(x))


@numba.njit
def outer_sum(x):
    return np.sum(np.outer(x, x) * np.outer(x, np.sin(x)))


@numba.njit
def diff_cubed(x):
    d = np.diff(x)
    return np.sum(d * d * d) + np.sum(np.diff(x, 2) ** 2)


@numba.njit
def vector_norm(x):
    return np.linalg.norm(x) ** 3 + np.linalg.norm(x * x)


@numba.njit
def cross_with_list(x):
    c = np.cross([0.0, 0.0, 1.0], x)
    return np.sum(c * c * x)


@numba.njit
def nested_literal(x):
    m = np.array([[x[0], x[1], 1.0], [x[1] * x[2], 3.0, x[0]], [0.5, x[2], x[0] * x[1]]])
    return np.sum(m @ m * m)


@numba.njit
def reinterpreted(x):
    a = np.zeros(x.shape[0], np.int64)
    b = a.view(np.float64)
    for i in range(x.shape[0]):
        b[i] = x[i] * x[i]
    s = 0.0
    for i in range(x.shape[0]):
        s += b[i]
    return s


@pytest.mark.parametrize(
    "f",
    [
        index_by_arange,
        index_by_argsort,
        index_by_empty_int,
        weighted_sorted,
        median_even,
        median_odd,
        outer_sum,
        diff_cubed,
        vector_norm,
        cross_with_list,
        nested_literal,
        reinterpreted,
    ],
)
def test_constructs_made_differentiable(f):
    x = np.array([0.3, 1.1, -0.7, 0.45])
    if f in (cross_with_list, nested_literal):
        x = x[:3].copy()
    want = fd_grad(f, x)
    np.testing.assert_allclose(ez.grad(f)(x), want, rtol=1e-6, atol=1e-8)
    t = np.linspace(0.5, 1.5, x.size)
    y, dy = ez.jvp(f, (x,), (t,))
    assert y == pytest.approx(f(x), rel=1e-14)
    assert dy == pytest.approx(want @ t, rel=1e-6)


def test_median_of_a_nan_is_nan():
    y = ez.jvp(median_even, (np.array([1.0, np.nan]),), (np.ones(2),))[0]
    assert np.isnan(y)


@numba.njit
def matrix_norm(x):
    return np.linalg.norm(x.reshape((2, 2))) ** 2 + np.linalg.norm(x, 1)


def test_matrix_norm():
    # Matrix norms and vector norms with an order are loops in the compile
    # differentiated (tests/test_numba_linalg.py).
    x = np.array([0.3, 1.1, -0.7, 0.5])
    np.testing.assert_allclose(ez.grad(matrix_norm)(x), fd_grad(matrix_norm, x), rtol=1e-6)


@numba.njit
def calls_matrix_norm(x):
    return matrix_norm(x) * x[0]


def test_norm_in_a_called_function():
    # The @njit functions it calls see the substitutes too
    # (tests/test_numba_substitutes_in_callees.py).
    x = np.array([0.3, 1.1, -0.7, 0.5])
    want = fd_grad(calls_matrix_norm, x)
    np.testing.assert_allclose(ez.grad(calls_matrix_norm)(x), want, rtol=1e-6)
    t = np.linspace(0.5, 1.5, x.size)
    y, dy = ez.jvp(calls_matrix_norm, (x,), (t,))
    assert y == pytest.approx(calls_matrix_norm(x), rel=1e-14)
    assert dy == pytest.approx(want @ t, rel=1e-6)


@numba.njit
def column_sums(a):
    return a.sum(axis=0)


@numba.njit
def row_means(a):
    return np.sum(a, axis=1) / a.shape[1]


@numba.njit
def row_norms_total(a):
    return np.sum(np.sqrt(np.sum(a * a, axis=1)))


@pytest.mark.parametrize("f", [column_sums, row_means])
def test_reductions_along_an_axis(f):
    # Numba builds the result's shape in a list that grows (list.append): its storage,
    # integers only, goes through inactive thunks; Enzyme refused every axis reduction
    # ("No augmented forward pass found for NRT_MemInfo_new_varsize_dtor").
    a = np.array([[0.3, 1.1, -0.7], [0.45, 2.0, 0.1]])
    expected = fd_jacobian(f, a)
    np.testing.assert_allclose(ez.jacrev(f)(a), expected, atol=1e-9)
    np.testing.assert_allclose(ez.jacfwd(f)(a), expected, atol=1e-9)
    np.testing.assert_allclose(ez.jacfwd(f)(np.asfortranarray(a)), expected, atol=1e-9)


def test_a_scalar_made_of_an_axis_reduction():
    a = np.array([[0.3, 1.1, -0.7], [0.45, 2.0, 0.1]])
    norms = np.sqrt(np.sum(a * a, axis=1))
    np.testing.assert_allclose(ez.grad(row_norms_total)(a), a / norms[:, None], rtol=1e-12)


def test_header_zeroing_is_rewritten_only_where_the_name_is_a_header():
    # Value names are per function: %1 is an array structure in the first function and
    # a shape tuple ([2 x i64]) in the second, whose memset must stay a memset (it got
    # null pointers, and Enzyme's type analysis gave up on np.outer(x, x[::-1])).
    from enzyme_py.frontends import _numba_runtime

    ir = """
define void @f({ i8*, i8*, i64, i64, double*, [1 x i64], [1 x i64] }* %a) {
  %1 = bitcast { i8*, i8*, i64, i64, double*, [1 x i64], [1 x i64] }* %a to i8*
  call void @llvm.memset.p0i8.i64(i8* %1, i8 0, i64 16, i1 false)
  ret void
}

define void @g() {
  %s = alloca [2 x i64]
  %1 = bitcast [2 x i64]* %s to i8*
  call void @llvm.memset.p0i8.i64(i8* %1, i8 0, i64 16, i1 false)
  ret void
}
"""
    out = _numba_runtime._typed_header_zeroing(ir)
    f_body = out[out.index("define void @f") : out.index("define void @g")]
    g_body = out[out.index("define void @g") :]
    assert "llvm.memset" not in f_body and f_body.count("store i8* null") == 2
    assert "llvm.memset" in g_body and "store i8* null" not in g_body
