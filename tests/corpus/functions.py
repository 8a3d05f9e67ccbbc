"""The corpus: @njit functions in the styles of public Numba libraries, written for
these tests, each with the arguments a user would pass and its expected outcome.

Categories: distance metrics, probability densities and log-likelihoods, economics,
time series, astrodynamics, interpolation, optimal transport, Numba's own examples,
and the constructs issue #16 lists (list-literal arrays, reshape/ravel, np.max/np.min,
lgamma, print, exceptions with run-time values, np.linalg solve, inv, det, slogdet,
cholesky and norm).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .harness import Entry

ENTRIES: list[Entry] = []


def entry(category: str, make, **kwargs):
    """Decorator: register the @njit function below it as a corpus entry."""

    def register(fn):
        ENTRIES.append(Entry(fn.py_func.__name__, category, fn, make, **kwargs))
        return fn

    return register


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _vec(n: int, seed: int, lo: float = -1.0, hi: float = 1.0) -> np.ndarray:
    return _rng(seed).uniform(lo, hi, n)


def _pos(n: int, seed: int) -> np.ndarray:
    return _rng(seed).uniform(0.5, 2.0, n)


# --------------------------------------------------------------------------- distances


@entry("distance", lambda: (_vec(6, 1), _vec(6, 2)), diff=(0, 1))
@njit
def euclidean(u, v):
    s = 0.0
    for i in range(u.shape[0]):
        d = u[i] - v[i]
        s += d * d
    return math.sqrt(s)


@entry("distance", lambda: (_vec(6, 3), _vec(6, 4)), diff=(0, 1))
@njit(fastmath=True)
def sqeuclidean(u, v):
    return np.sum((u - v) ** 2)


@entry("distance", lambda: (_vec(6, 5), _vec(6, 6) + 3.0), diff=(0, 1))
@njit
def cityblock(u, v):
    s = 0.0
    for i in range(u.shape[0]):
        s += abs(u[i] - v[i])
    return s


@entry("distance", lambda: (_vec(6, 7), _vec(6, 8) + 2.0), diff=(0,), note="default p omitted")
@njit
def minkowski(u, v, p=3.0):
    s = 0.0
    for i in range(u.shape[0]):
        s += abs(u[i] - v[i]) ** p
    return s ** (1.0 / p)


@entry("distance", lambda: (_vec(5, 9), _vec(5, 10)), diff=(0, 1))
@njit
def cosine(u, v):
    uv = 0.0
    uu = 0.0
    vv = 0.0
    for i in range(u.shape[0]):
        uv += u[i] * v[i]
        uu += u[i] * u[i]
        vv += v[i] * v[i]
    return 1.0 - uv / math.sqrt(uu * vv)


@entry("distance", lambda: (_vec(7, 11), _vec(7, 12)), diff=(0, 1))
@njit
def correlation(u, v):
    mu = u.mean()
    mv = v.mean()
    return 1.0 - np.sum((u - mu) * (v - mv)) / math.sqrt(
        np.sum((u - mu) ** 2) * np.sum((v - mv) ** 2)
    )


@entry(
    "distance",
    lambda: (np.array([0.1, 0.9, -0.4, 0.3]), np.array([0.5, -0.2, 0.6, 0.0])),
    diff=(0, 1),
)
@njit
def chebyshev(u, v):
    m = 0.0
    for i in range(u.shape[0]):
        d = abs(u[i] - v[i])
        if d > m:
            m = d
    return m


@entry("distance", lambda: (_pos(6, 13), _pos(6, 14)), diff=(0, 1))
@njit("float64(float64[:], float64[:])")
def canberra(u, v):
    s = 0.0
    for i in range(u.shape[0]):
        s += abs(u[i] - v[i]) / (abs(u[i]) + abs(v[i]))
    return s


@entry("distance", lambda: (_pos(6, 15), _pos(6, 16)), diff=(0, 1))
@njit
def braycurtis(u, v):
    return np.sum(np.abs(u - v)) / np.sum(np.abs(u + v))


def _mahalanobis_args():
    a = _rng(17).standard_normal((3, 3))
    return _vec(3, 18), _vec(3, 19), a @ a.T + 3.0 * np.eye(3)


@entry("distance", _mahalanobis_args, diff=(0, 1, 2))
@njit
def mahalanobis(u, v, vi):
    d = u - v
    s = 0.0
    for i in range(d.shape[0]):
        for j in range(d.shape[0]):
            s += d[i] * vi[i, j] * d[j]
    return math.sqrt(s)


@entry(
    "distance",
    lambda: (_vec(12, 20)[::2], _vec(6, 21), _pos(6, 22)),
    diff=(0, 2),
    note="explicit layout-'A' signature, strided input",
)
@njit("float64(float64[:], float64[:], float64[:])")
def weighted_euclidean(u, v, w):
    s = 0.0
    for i in range(u.shape[0]):
        s += w[i] * (u[i] - v[i]) ** 2
    return math.sqrt(s)


@entry("distance", lambda: (_rng(23).standard_normal((4, 3)),))
@njit
def pairwise(x):
    n = x.shape[0]
    out = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1, n):
            s = 0.0
            for k in range(x.shape[1]):
                s += (x[i, k] - x[j, k]) ** 2
            out[i, j] = math.sqrt(s)
            out[j, i] = out[i, j]
    return out


@entry("distance", lambda: (0.7, 0.2, 0.4, 1.1), diff=(0, 1, 2, 3))
@njit
def haversine(lat1, lon1, lat2, lon2):
    dlat = lat2 - lat1
    dlon = lon2 - lon1
    a = math.sin(dlat / 2) ** 2 + math.cos(lat1) * math.cos(lat2) * math.sin(dlon / 2) ** 2
    return 2.0 * 6371.0 * math.asin(math.sqrt(a))


@entry("distance", lambda: (_pos(5, 24), _pos(5, 25)), diff=(0, 1))
@njit
def hellinger(p, q):
    s = 0.0
    for i in range(p.shape[0]):
        s += (math.sqrt(p[i]) - math.sqrt(q[i])) ** 2
    return math.sqrt(s / 2.0)


# --------------------------------------------------------------------------- densities


@entry("density", lambda: (_vec(8, 30), 0.3, 1.4), diff=(0, 1, 2))
@njit
def normal_loglik(x, mu, sigma):
    n = x.shape[0]
    s = 0.0
    for i in range(n):
        z = (x[i] - mu) / sigma
        s += -0.5 * z * z
    return s - n * math.log(sigma) - 0.5 * n * math.log(2.0 * math.pi)


@entry(
    "density",
    lambda: (_vec(6, 31), 0.1, 1.2, 4.5),
    diff=(0, 1, 2, 3),
    note="lgamma of an active value",
)
@njit
def student_t_loglik(x, mu, scale, nu):
    n = x.shape[0]
    c = math.lgamma((nu + 1.0) / 2.0) - math.lgamma(nu / 2.0) - 0.5 * math.log(nu * math.pi)
    s = n * (c - math.log(scale))
    for i in range(n):
        z = (x[i] - mu) / scale
        s -= (nu + 1.0) / 2.0 * math.log1p(z * z / nu)
    return s


@entry("density", lambda: (_pos(6, 32), 2.5, 0.8), diff=(0, 1, 2))
@njit
def gamma_loglik(x, k, theta):
    s = 0.0
    for i in range(x.shape[0]):
        s += (k - 1.0) * math.log(x[i]) - x[i] / theta
    return s - x.shape[0] * (math.lgamma(k) + k * math.log(theta))


@entry("density", lambda: (_rng(33).uniform(0.1, 0.9, 6), 2.0, 3.5), diff=(0, 1, 2))
@njit
def beta_loglik(x, a, b):
    lbeta = math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
    s = 0.0
    for xi in x:
        s += (a - 1.0) * math.log(xi) + (b - 1.0) * math.log1p(-xi)
    return s - x.shape[0] * lbeta


@entry("density", lambda: (_vec(7, 34) * 3.0,))
@njit
def logsumexp_loop(x):
    m = x[0]
    for i in range(1, x.shape[0]):
        if x[i] > m:
            m = x[i]
    s = 0.0
    for i in range(x.shape[0]):
        s += math.exp(x[i] - m)
    return m + math.log(s)


@entry("density", lambda: (_vec(7, 35) * 3.0,), note="np.max")
@njit
def logsumexp_npmax(x):
    m = np.max(x)
    return m + np.log(np.sum(np.exp(x - m)))


@entry("density", lambda: (_vec(5, 36) * 2.0,), jacobian=True, note="np.max, array result")
@njit
def softmax(x):
    e = np.exp(x - np.max(x))
    return e / e.sum()


def _mixture_args():
    return _vec(10, 37) * 2.0, np.array([-0.5, 0.8]), np.array([0.7, 1.3]), np.array([0.4, 0.6])


@entry("density", _mixture_args, diff=(1, 2, 3))
@njit
def gmm1d_loglik(x, means, sigmas, weights):
    total = 0.0
    for i in range(x.shape[0]):
        p = 0.0
        for k in range(means.shape[0]):
            z = (x[i] - means[k]) / sigmas[k]
            p += weights[k] * math.exp(-0.5 * z * z) / (sigmas[k] * math.sqrt(2.0 * math.pi))
        total += math.log(p)
    return total


@entry(
    "density",
    lambda: (_pos(5, 38) * 2.0, np.array([1, 0, 3, 2, 5], dtype=np.int64)),
    note="lgamma of an integer (Const) value",
)
@njit
def poisson_loglik(lam, k):
    s = 0.0
    for i in range(lam.shape[0]):
        s += k[i] * math.log(lam[i]) - lam[i] - math.lgamma(k[i] + 1.0)
    return s


def _logreg_args():
    x = _rng(39).standard_normal((8, 3))
    y = (_rng(40).uniform(size=8) > 0.5).astype(np.float64)
    return _vec(3, 41), x, y


@entry("density", _logreg_args, diff=(0, 1))
@njit
def logistic_nll(w, x, y):
    s = 0.0
    for i in range(x.shape[0]):
        z = 0.0
        for j in range(x.shape[1]):
            z += x[i, j] * w[j]
        s += math.log1p(math.exp(-z)) + (1.0 - y[i]) * z
    return s


@entry("density", lambda: (_vec(6, 42) + 3.0, 0.2, 0.9), diff=(1, 2))
@njit
def laplace_loglik(x, loc, b):
    s = 0.0
    for i in range(x.shape[0]):
        s -= abs(x[i] - loc) / b
    return s - x.shape[0] * math.log(2.0 * b)


@entry("density", lambda: (_vec(6, 43), 0.1, 0.7), diff=(0, 1, 2))
@njit
def cauchy_loglik(x, x0, gamma):
    s = 0.0
    for i in range(x.shape[0]):
        z = (x[i] - x0) / gamma
        s -= math.log(math.pi * gamma * (1.0 + z * z))
    return s


@entry(
    "density", lambda: (_rng(44).standard_normal((5, 3)), _vec(3, 45), _pos(3, 46)), diff=(0, 1, 2)
)
@njit
def mvn_diag_loglik(x, mu, var):
    n, d = x.shape
    s = 0.0
    for i in range(n):
        for j in range(d):
            s -= 0.5 * (x[i, j] - mu[j]) ** 2 / var[j]
    for j in range(d):
        s -= 0.5 * n * math.log(2.0 * math.pi * var[j])
    return s


# --------------------------------------------------------------------------- economics


@entry("economics", lambda: (_pos(6, 50),), note="default gamma omitted")
@njit
def crra_utility(c, gamma=2.0):
    u = 0.0
    for i in range(c.shape[0]):
        u += (c[i] ** (1.0 - gamma) - 1.0) / (1.0 - gamma)
    return u


@entry("economics", lambda: (1.3, 0.8, 0.33), diff=(0, 1, 2))
@njit("float64(float64, float64, float64)")
def cobb_douglas(k, labour, alpha):
    return k**alpha * labour ** (1.0 - alpha)


@entry("economics", lambda: (_pos(4, 51), _pos(4, 52), -0.5), diff=(0, 1, 2))
@njit
def ces_aggregate(x, shares, rho):
    s = 0.0
    for i in range(x.shape[0]):
        s += shares[i] * x[i] ** rho
    return s ** (1.0 / rho)


@entry("economics", lambda: (_vec(8, 53) + 1.0, 0.05), diff=(0, 1))
@njit
def present_value(cashflows, rate):
    pv = 0.0
    disc = 1.0
    for t in range(cashflows.shape[0]):
        disc /= 1.0 + rate
        pv += cashflows[t] * disc
    return pv


def _bellman_args():
    grid = np.linspace(0.5, 3.0, 6)
    return np.log(grid) + _vec(6, 54) * 0.05, grid, 0.95


@entry("economics", _bellman_args, diff=(0,), note="max over choices")
@njit
def bellman_step(v, grid, beta):
    n = grid.shape[0]
    out = np.empty(n)
    for i in range(n):
        best = -1e300
        for j in range(n):
            c = grid[i] * 1.1 - 0.3 * grid[j]
            if c > 0.0:
                val = math.log(c) + beta * v[j]
                if val > best:
                    best = val
        out[i] = best
    return out


@entry(
    "economics",
    lambda: (
        np.linspace(0.0, 2.0, 7),
        np.sin(np.linspace(0.0, 2.0, 7)) + 2.0,
        np.array([0.13, 0.77, 1.41, 1.9]),
    ),
    diff=(1, 2),
)
@njit
def interp_on_grid(grid, values, xs):
    out = np.empty(xs.shape[0])
    for k in range(xs.shape[0]):
        i = np.searchsorted(grid, xs[k]) - 1
        i = min(max(i, 0), grid.shape[0] - 2)
        t = (xs[k] - grid[i]) / (grid[i + 1] - grid[i])
        out[k] = (1.0 - t) * values[i] + t * values[i + 1]
    return out


@entry(
    "economics",
    lambda: (
        np.array([0.13, 0.77, 1.41, 1.9]),
        np.linspace(0.0, 2.0, 7),
        np.cos(np.linspace(0.0, 2.0, 7)),
    ),
    diff=(0, 2),
    note="np.interp",
)
@njit
def np_interp_sum(xs, grid, values):
    return np.sum(np.interp(xs, grid, values) ** 2)


@entry("economics", lambda: (_pos(5, 55), _pos(5, 56), 0.96, 0.04), diff=(0, 1, 2, 3))
@njit
def euler_residuals(c, c_next, beta, r):
    s = 0.0
    for t in range(c.shape[0]):
        e = beta * (1.0 + r) * (c[t] / c_next[t]) ** 2.0 - 1.0
        s += e * e
    return s


@entry(
    "economics",
    lambda: (_pos(5, 57), _pos(5, 58), np.zeros(5)),
    diff=(0, 1),
    outputs=(2,),
    jacobian=True,
    note="output parameter",
)
@njit
def marginal_products(k, labour, out):
    for i in range(k.shape[0]):
        out[i] = 0.3 * k[i] ** -0.7 * labour[i] ** 0.7


# --------------------------------------------------------------------------- time series


@entry("time series", lambda: (_vec(8, 60), 0.3), diff=(0, 1))
@njit
def ewma(x, alpha):
    out = np.empty_like(x)
    out[0] = x[0]
    for t in range(1, x.shape[0]):
        out[t] = alpha * x[t] + (1.0 - alpha) * out[t - 1]
    return out


@entry(
    "time series",
    lambda: (_vec(8, 61), np.array([0.5, -0.2]), np.zeros(8)),
    diff=(0, 1),
    outputs=(2,),
)
@njit
def ar_filter(e, phi, out):
    p = phi.shape[0]
    for t in range(e.shape[0]):
        y = e[t]
        for k in range(p):
            if t - k - 1 >= 0:
                y += phi[k] * out[t - k - 1]
        out[t] = y


@entry("time series", lambda: (_vec(9, 62), 3))
@njit
def rolling_mean(x, window):
    n = x.shape[0] - window + 1
    out = np.empty(n)
    s = 0.0
    for i in range(window):
        s += x[i]
    out[0] = s / window
    for i in range(1, n):
        s += x[i + window - 1] - x[i - 1]
        out[i] = s / window
    return out


@entry("time series", lambda: (_vec(9, 63), 4))
@njit
def rolling_std(x, window):
    n = x.shape[0] - window + 1
    out = np.empty(n)
    for i in range(n):
        w = x[i : i + window]
        m = w.mean()
        out[i] = math.sqrt(np.sum((w - m) ** 2) / (window - 1))
    return out


@entry("time series", lambda: (_vec(10, 64), 0.4, 0.8), diff=(0, 1, 2))
@njit
def ar1_loglik(x, phi, sigma):
    s = 0.0
    for t in range(1, x.shape[0]):
        e = x[t] - phi * x[t - 1]
        s += -0.5 * (e / sigma) ** 2 - math.log(sigma)
    return s


@entry("time series", lambda: (_vec(10, 65) * 0.1, 0.01, 0.1, 0.8), diff=(0, 1, 2, 3))
@njit
def garch11_loglik(r, omega, alpha, beta):
    h = omega / (1.0 - alpha - beta)
    s = 0.0
    for t in range(r.shape[0]):
        s -= 0.5 * (math.log(h) + r[t] * r[t] / h)
        h = omega + alpha * r[t] * r[t] + beta * h
    return s


@entry("time series", lambda: (_vec(10, 66), 2))
@njit
def autocorrelation(x, lag):
    m = x.mean()
    num = 0.0
    for t in range(lag, x.shape[0]):
        num += (x[t] - m) * (x[t - lag] - m)
    return num / np.sum((x - m) ** 2)


@entry("time series", lambda: (_vec(10, 67) + np.arange(10) * 0.3, 0.5, 0.3), diff=(0, 1, 2))
@njit
def holt_sse(y, alpha, beta):
    level = y[0]
    trend = y[1] - y[0]
    sse = 0.0
    for t in range(1, y.shape[0]):
        pred = level + trend
        e = y[t] - pred
        sse += e * e
        new_level = alpha * y[t] + (1.0 - alpha) * pred
        trend = beta * (new_level - level) + (1.0 - beta) * trend
        level = new_level
    return sse


@entry("time series", lambda: (_vec(10, 68), 0.9, 0.3, 0.5), diff=(0, 1, 2, 3))
@njit
def kalman_loglik(y, a, q, r):
    m = 0.0
    p = 1.0
    ll = 0.0
    for t in range(y.shape[0]):
        m = a * m
        p = a * a * p + q
        s = p + r
        v = y[t] - m
        ll -= 0.5 * (math.log(2.0 * math.pi * s) + v * v / s)
        k = p / s
        m = m + k * v
        p = (1.0 - k) * p
    return ll


@entry(
    "time series",
    lambda: (_vec(9, 69), np.array([0.25, 0.5, 0.25])),
    diff=(0, 1),
    note="tuple of an array and a float",
)
@njit
def convolve_and_energy(x, kernel):
    n = x.shape[0] - kernel.shape[0] + 1
    out = np.empty(n)
    for i in range(n):
        s = 0.0
        for k in range(kernel.shape[0]):
            s += kernel[k] * x[i + k]
        out[i] = s
    return out, np.sum(out * out)


# --------------------------------------------------------------------------- astrodynamics


@njit
def _kepler_newton(m, e):
    ecc_anomaly = m if e < 0.8 else math.pi
    for _ in range(50):
        f = ecc_anomaly - e * math.sin(ecc_anomaly) - m
        step = f / (1.0 - e * math.cos(ecc_anomaly))
        ecc_anomaly -= step
        if abs(step) < 1e-14:
            break
    return ecc_anomaly


@entry("astrodynamics", lambda: (1.2, 0.3), diff=(0, 1), rtol=1e-4, note="Newton iteration")
@njit
def eccentric_anomaly(m, e):
    return _kepler_newton(m, e)


@entry("astrodynamics", lambda: (0.7, 0.45), diff=(0, 1), rtol=1e-4)
@njit
def true_anomaly(m, e):
    ea = _kepler_newton(m, e)
    return 2.0 * math.atan2(
        math.sqrt(1.0 + e) * math.sin(ea / 2), math.sqrt(1.0 - e) * math.cos(ea / 2)
    )


@entry(
    "astrodynamics",
    lambda: (np.array([1.3, 0.1, 0.5, 0.2, 0.4, 1.0]),),
    note="np.array of nested lists (a rotation matrix)",
)
@njit
def coe_to_position(coe):
    p, e, inc, raan, argp, nu = coe[0], coe[1], coe[2], coe[3], coe[4], coe[5]
    r = p / (1.0 + e * math.cos(nu))
    r_pqw = np.array([r * math.cos(nu), r * math.sin(nu), 0.0])
    cr, sr = math.cos(raan), math.sin(raan)
    ca, sa = math.cos(argp), math.sin(argp)
    ci, si = math.cos(inc), math.sin(inc)
    rot = np.array(
        [
            [cr * ca - sr * sa * ci, -cr * sa - sr * ca * ci, sr * si],
            [sr * ca + cr * sa * ci, -sr * sa + cr * ca * ci, -cr * si],
            [sa * si, ca * si, ci],
        ]
    )
    out = np.zeros(3)
    for i in range(3):
        for j in range(3):
            out[i] += rot[i, j] * r_pqw[j]
    return out


@entry(
    "astrodynamics",
    lambda: (np.array([1.3, 0.1, 0.5, 0.2, 0.4, 1.0]),),
    jacobian=True,
    note="1-D list-literal arrays, the matrix by element assignments",
)
@njit
def coe_to_position_assigned(coe):
    p, e, inc, raan, argp, nu = coe[0], coe[1], coe[2], coe[3], coe[4], coe[5]
    r = p / (1.0 + e * math.cos(nu))
    r_pqw = np.array([r * math.cos(nu), r * math.sin(nu), 0.0])
    cr, sr = math.cos(raan), math.sin(raan)
    ca, sa = math.cos(argp), math.sin(argp)
    ci, si = math.cos(inc), math.sin(inc)
    rot = np.empty((3, 3))
    rot[0, 0] = cr * ca - sr * sa * ci
    rot[0, 1] = -cr * sa - sr * ca * ci
    rot[0, 2] = sr * si
    rot[1, 0] = sr * ca + cr * sa * ci
    rot[1, 1] = -sr * sa + cr * ca * ci
    rot[1, 2] = -cr * si
    rot[2, 0] = sa * si
    rot[2, 1] = ca * si
    rot[2, 2] = ci
    out = np.zeros(3)
    for i in range(3):
        for j in range(3):
            out[i] += rot[i, j] * r_pqw[j]
    return out


@entry(
    "astrodynamics",
    lambda: (np.array([1.0, 0.2, 0.1]), np.array([0.1, 0.9, 0.2])),
    diff=(0, 1),
    note="np.cross with a list literal",
)
@njit
def node_vector_norm(r, v):
    h = np.cross(r, v)
    n = np.cross(np.array([0.0, 0.0, 1.0]), h)
    return math.sqrt(n[0] ** 2 + n[1] ** 2 + n[2] ** 2)


@entry(
    "astrodynamics",
    lambda: (np.array([1.0, 0.3, -0.2]), 1.0, np.zeros(3)),
    diff=(0, 1),
    outputs=(2,),
)
@njit
def two_body_accel(r, mu, out):
    rn = math.sqrt(r[0] ** 2 + r[1] ** 2 + r[2] ** 2)
    for i in range(3):
        out[i] = -mu * r[i] / rn**3


@entry(
    "astrodynamics",
    lambda: (np.array([1.0, 0.2, 0.1]), np.array([0.1, 0.9, 0.2]), 1.0),
    diff=(0, 1, 2),
)
@njit
def orbital_energy(r, v, mu):
    return 0.5 * np.sum(v * v) - mu / math.sqrt(np.sum(r * r))


@njit
def _deriv(state, mu):
    out = np.empty(6)
    rn3 = (state[0] ** 2 + state[1] ** 2 + state[2] ** 2) ** 1.5
    for i in range(3):
        out[i] = state[i + 3]
        out[i + 3] = -mu * state[i] / rn3
    return out


@entry(
    "astrodynamics",
    lambda: (np.array([1.0, 0.1, 0.0, 0.05, 1.0, 0.1]), 0.01, 1.0),
    diff=(0, 1, 2),
    jacobian=True,
    note="RK4 step, array result",
)
@njit
def rk4_step(state, dt, mu):
    k1 = _deriv(state, mu)
    k2 = _deriv(state + 0.5 * dt * k1, mu)
    k3 = _deriv(state + 0.5 * dt * k2, mu)
    k4 = _deriv(state + dt * k3, mu)
    return state + dt / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)


@entry("astrodynamics", lambda: (np.array([1.0, 0.2, 0.1]), np.array([0.1, 0.9, 0.2])), diff=(0, 1))
@njit
def angular_momentum(r, v):
    hx = r[1] * v[2] - r[2] * v[1]
    hy = r[2] * v[0] - r[0] * v[2]
    hz = r[0] * v[1] - r[1] * v[0]
    return math.sqrt(hx * hx + hy * hy + hz * hz)


@entry("astrodynamics", lambda: (0.8,), diff=(0,))
@njit
def stumpff_c2(psi):
    if psi > 1e-6:
        return (1.0 - math.cos(math.sqrt(psi))) / psi
    if psi < -1e-6:
        return (math.cosh(math.sqrt(-psi)) - 1.0) / -psi
    return 0.5


@entry(
    "astrodynamics",
    lambda: (np.array([1.1, 0.2, 0.3]), 1.0, 1e-3, 0.9),
    diff=(0, 2),
    note="returns a tuple of three floats",
)
@njit
def j2_accel(r, mu, j2, re):
    x, y, z = r[0], r[1], r[2]
    rn = math.sqrt(x * x + y * y + z * z)
    f = 1.5 * j2 * mu * re * re / rn**5
    g = 5.0 * z * z / (rn * rn)
    return f * x * (g - 1.0), f * y * (g - 1.0), f * z * (g - 3.0)


# --------------------------------------------------------------------------- interpolation


def _hermite_args():
    xs = np.linspace(0.0, 3.0, 6)
    return xs, np.sin(xs), np.cos(xs), np.array([0.4, 1.3, 2.2, 2.9])


@entry("interpolation", _hermite_args, diff=(1, 2, 3))
@njit
def cubic_hermite(xs, ys, dys, xq):
    out = np.empty_like(xq)
    for k in range(xq.shape[0]):
        i = 0
        while i < xs.shape[0] - 2 and xq[k] > xs[i + 1]:
            i += 1
        h = xs[i + 1] - xs[i]
        t = (xq[k] - xs[i]) / h
        h00 = 2 * t**3 - 3 * t**2 + 1
        h10 = t**3 - 2 * t**2 + t
        h01 = -2 * t**3 + 3 * t**2
        h11 = t**3 - t**2
        out[k] = h00 * ys[i] + h10 * h * dys[i] + h01 * ys[i + 1] + h11 * h * dys[i + 1]
    return out


def _bary_args():
    xs = np.cos(np.pi * np.arange(6) / 5)
    return xs, np.exp(xs), 0.37


@entry("interpolation", _bary_args, diff=(1, 2))
@njit
def barycentric(xs, ys, x):
    n = xs.shape[0]
    num = 0.0
    den = 0.0
    for j in range(n):
        w = 1.0
        for k in range(n):
            if k != j:
                w /= xs[j] - xs[k]
        c = w / (x - xs[j])
        num += c * ys[j]
        den += c
    return num / den


@njit
def _thomas(a, b, c, d):
    n = d.shape[0]
    cp = np.empty(n)
    dp = np.empty(n)
    cp[0] = c[0] / b[0]
    dp[0] = d[0] / b[0]
    for i in range(1, n):
        m = b[i] - a[i] * cp[i - 1]
        cp[i] = c[i] / m
        dp[i] = (d[i] - a[i] * dp[i - 1]) / m
    x = np.empty(n)
    x[n - 1] = dp[n - 1]
    for i in range(n - 2, -1, -1):
        x[i] = dp[i] - cp[i] * x[i + 1]
    return x


@entry(
    "interpolation",
    lambda: (np.sin(np.linspace(0.0, 3.0, 7)), 1.37),
    diff=(0, 1),
    note="natural cubic spline (Thomas algorithm) on a unit grid",
)
@njit
def natural_spline(y, xq):
    n = y.shape[0]
    a = np.ones(n)
    b = np.full(n, 4.0)
    c = np.ones(n)
    d = np.zeros(n)
    a[0] = 0.0
    c[0] = 0.0
    b[0] = 1.0
    a[n - 1] = 0.0
    c[n - 1] = 0.0
    b[n - 1] = 1.0
    for i in range(1, n - 1):
        d[i] = 6.0 * (y[i + 1] - 2.0 * y[i] + y[i - 1])
    m = _thomas(a, b, c, d)
    i = min(int(xq), n - 2)
    t = xq - i
    return (
        (1 - t) * y[i]
        + t * y[i + 1]
        + ((1 - t) ** 3 - (1 - t)) * m[i] / 6.0
        + (t**3 - t) * m[i + 1] / 6.0
    )


def _bilinear_args():
    gx = np.linspace(0.0, 1.0, 4)
    gy = np.linspace(0.0, 2.0, 5)
    return gx, gy, np.add.outer(np.sin(gx), np.cos(gy)), 0.41, 1.23


@entry("interpolation", _bilinear_args, diff=(2, 3, 4))
@njit
def bilinear(gx, gy, z, x, y):
    i = min(max(np.searchsorted(gx, x) - 1, 0), gx.shape[0] - 2)
    j = min(max(np.searchsorted(gy, y) - 1, 0), gy.shape[0] - 2)
    tx = (x - gx[i]) / (gx[i + 1] - gx[i])
    ty = (y - gy[j]) / (gy[j + 1] - gy[j])
    return (
        (1 - tx) * (1 - ty) * z[i, j]
        + tx * (1 - ty) * z[i + 1, j]
        + (1 - tx) * ty * z[i, j + 1]
        + tx * ty * z[i + 1, j + 1]
    )


@entry(
    "interpolation",
    lambda: (np.asfortranarray(np.sin(np.arange(12.0)).reshape(3, 4)), 1.6),
    diff=(0, 1),
    note="Fortran-ordered input",
)
@njit
def catmull_rom_rows(p, t):
    s = 0.0
    for r in range(p.shape[0]):
        i = int(t)
        u = t - i
        p0, p1, p2, p3 = p[r, i - 1], p[r, i], p[r, i + 1], p[r, i + 2]
        s += 0.5 * (
            2 * p1
            + (-p0 + p2) * u
            + (2 * p0 - 5 * p1 + 4 * p2 - p3) * u * u
            + (-p0 + 3 * p1 - 3 * p2 + p3) * u**3
        )
    return s


# --------------------------------------------------------------------------- optimal transport


def _ot_args():
    xs = np.linspace(0.0, 1.0, 4)
    ys = np.linspace(0.2, 1.1, 5)
    cost = (xs[:, None] - ys[None, :]) ** 2
    return np.full(4, 0.25), np.full(5, 0.2), cost, 0.1


@entry("optimal transport", _ot_args, diff=(0, 2), rtol=1e-4, note="defaults n_iter omitted")
@njit
def sinkhorn_cost(a, b, cost, reg, n_iter=50):
    n, m = cost.shape
    k = np.exp(-cost / reg)
    u = np.ones(n)
    v = np.ones(m)
    for _ in range(n_iter):
        for i in range(n):
            s = 0.0
            for j in range(m):
                s += k[i, j] * v[j]
            u[i] = a[i] / s
        for j in range(m):
            s = 0.0
            for i in range(n):
                s += k[i, j] * u[i]
            v[j] = b[j] / s
    total = 0.0
    for i in range(n):
        for j in range(m):
            total += u[i] * k[i, j] * v[j] * cost[i, j]
    return total


@entry("optimal transport", _ot_args, diff=(2,), rtol=1e-4, note="transport plan as the result")
@njit
def sinkhorn_plan(a, b, cost, reg):
    n, m = cost.shape
    k = np.exp(-cost / reg)
    u = np.ones(n)
    v = np.ones(m)
    for _ in range(30):
        for i in range(n):
            u[i] = a[i] / np.sum(k[i] * v)
        for j in range(m):
            v[j] = b[j] / np.sum(k[:, j] * u)
    plan = np.empty((n, m))
    for i in range(n):
        for j in range(m):
            plan[i, j] = u[i] * k[i, j] * v[j]
    return plan


@entry(
    "optimal transport",
    lambda: (np.sort(_vec(6, 80)), np.sort(_vec(6, 81)) + 0.3),
    diff=(0, 1),
    note="1-D Wasserstein of sorted samples",
)
@njit
def wasserstein_1d_sorted(xs, ys):
    s = 0.0
    for i in range(xs.shape[0]):
        s += (xs[i] - ys[i]) ** 2
    return math.sqrt(s / xs.shape[0])


@entry(
    "optimal transport",
    lambda: (_vec(6, 82), _vec(6, 83) + 0.3),
    diff=(0, 1),
    note="np.sort of an active array",
)
@njit
def wasserstein_1d(xs, ys):
    a = np.sort(xs)
    b = np.sort(ys)
    return np.sum(np.abs(a - b)) / a.shape[0]


# --------------------------------------------------------------------------- Numba's examples


@njit
def _cnd(d):
    return 0.5 * (1.0 + math.erf(d / math.sqrt(2.0)))


@entry(
    "numba examples",
    lambda: (_pos(4, 90) * 50.0, _pos(4, 91) * 50.0, 0.5, 0.02, 0.3),
    diff=(0, 2, 4),
    note="Black-Scholes, output arrays",
)
@njit
def black_scholes_sum(stock, strike, t, r, vol):
    total = 0.0
    for i in range(stock.shape[0]):
        sqrt_t = math.sqrt(t)
        d1 = (math.log(stock[i] / strike[i]) + (r + 0.5 * vol * vol) * t) / (vol * sqrt_t)
        d2 = d1 - vol * sqrt_t
        call = stock[i] * _cnd(d1) - strike[i] * math.exp(-r * t) * _cnd(d2)
        total += call
    return total


@entry("numba examples", lambda: (_rng(92).standard_normal((4, 3)), _pos(4, 93)), diff=(0, 1))
@njit
def nbody_energy(pos, mass):
    e = 0.0
    n = pos.shape[0]
    for i in range(n):
        for j in range(i + 1, n):
            d = 0.0
            for k in range(3):
                d += (pos[i, k] - pos[j, k]) ** 2
            e -= mass[i] * mass[j] / math.sqrt(d)
    return e


@entry(
    "numba examples",
    lambda: (np.add.outer(np.arange(5.0), np.arange(5.0)) * 0.1,),
    note="Jacobi relaxation, array result",
)
@njit
def jacobi_relax(a):
    out = a.copy()
    for _ in range(3):
        new = out.copy()
        for i in range(1, a.shape[0] - 1):
            for j in range(1, a.shape[1] - 1):
                new[i, j] = 0.25 * (out[i - 1, j] + out[i + 1, j] + out[i, j - 1] + out[i, j + 1])
        out = new
    return out


@entry(
    "numba examples",
    lambda: (_vec(3, 94), _rng(95).standard_normal((6, 3)), np.sign(_vec(6, 96)), 0.1),
    diff=(0, 1),
    note="logistic regression gradient-descent step",
)
@njit
def logreg_step(w, x, y, lr):
    g = np.zeros(w.shape[0])
    for i in range(x.shape[0]):
        z = 0.0
        for j in range(w.shape[0]):
            z += x[i, j] * w[j]
        c = -y[i] / (1.0 + math.exp(y[i] * z))
        for j in range(w.shape[0]):
            g[j] += c * x[i, j]
    return w - lr * g


@entry("numba examples", lambda: (_vec(6, 97), np.linspace(-1.0, 1.0, 5), 0.4), diff=(0, 2))
@njit
def kde(samples, points, bandwidth):
    total = 0.0
    for p in range(points.shape[0]):
        s = 0.0
        for i in range(samples.shape[0]):
            z = (points[p] - samples[i]) / bandwidth
            s += math.exp(-0.5 * z * z)
        total += math.log(s / (samples.shape[0] * bandwidth * math.sqrt(2 * math.pi)))
    return total


@entry("numba examples", lambda: (_vec(8, 98),))
@njit
def rosenbrock(x):
    s = 0.0
    for i in range(x.shape[0] - 1):
        s += 100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2
    return s


@entry(
    "numba examples",
    lambda: (np.sin(np.arange(8.0)), 0.2, np.zeros(8)),
    diff=(0, 1),
    outputs=(2,),
    note="heat equation step into an output array",
)
@njit
def heat_step(u, k, out):
    n = u.shape[0]
    out[0] = u[0]
    out[n - 1] = u[n - 1]
    for i in range(1, n - 1):
        out[i] = u[i] + k * (u[i - 1] - 2.0 * u[i] + u[i + 1])


@entry("numba examples", lambda: (_vec(6, 99),), note="while loop to a tolerance")
@njit
def fixed_point_cos(x):
    s = 0.0
    for i in range(x.shape[0]):
        y = x[i]
        for _ in range(200):
            y_new = math.cos(y) * 0.5 + x[i]
            if abs(y_new - y) < 1e-15:
                break
            y = y_new
        s += y
    return s


# --------------------------------------------------------------------------- issue #16 constructs


@entry("constructs", lambda: (_vec(6, 100),), note="x.reshape")
@njit
def reshape_rows(x):
    a = x.reshape((2, 3))
    return np.sum(a[0] * a[1])


@entry("constructs", lambda: (_rng(101).standard_normal((2, 3)),), note="a.ravel() of a matrix")
@njit
def ravel_cubes(a):
    r = a.ravel()
    return np.sum(r * r * r)


@entry(
    "constructs", lambda: (_rng(102).standard_normal((2, 3)).T,), note="ravel of a transposed view"
)
@njit
def ravel_transposed(a):
    r = a.ravel()
    s = 0.0
    for i in range(r.shape[0]):
        s += (i + 1.0) * r[i]
    return s


@entry("constructs", lambda: (np.array([0.3, 1.7, -0.4, 0.9]),), note="np.max, np.min, .max()")
@njit
def range_of(x):
    return np.max(x) - np.min(x) + 0.5 * x.max()


@entry(
    "constructs", lambda: (np.array([1.3, 2.7, 0.4, 3.9]),), note="math.lgamma of an active value"
)
@njit
def log_factorial_sum(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += math.lgamma(x[i] + 1.0)
    return s


@entry(
    "constructs",
    lambda: (_vec(5, 103),),
    note="print",
)
@njit
def printed_norm(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i]
    print("squared norm:", s)
    return math.sqrt(s)


@entry("constructs", lambda: (_pos(5, 104),), note="an exception with a run-time value")
@njit
def checked_log_sum(x):
    s = 0.0
    for i in range(x.shape[0]):
        if x[i] <= 0.0:
            raise ValueError("non-positive value at index", i)
        s += math.log(x[i])
    return s


@entry("constructs", lambda: (np.array([0.2, 0.5, 0.9]),), note="np.array of a list literal")
@njit
def polynomial_features(x):
    out = np.empty((x.shape[0], 3))
    for i in range(x.shape[0]):
        row = np.array([1.0, x[i], x[i] * x[i]])
        for k in range(3):
            out[i, k] = row[k]
    return out


# --------------------------------------------------------------------------- index arrays, sorting


@entry("constructs", lambda: (_vec(7, 110),), note="np.argsort: an index array made inside")
@njit
def rank_weighted(x):
    order = np.argsort(x)
    s = 0.0
    for k in range(order.shape[0]):
        s += (k + 1.0) * x[order[k]] ** 2
    return s


@entry("constructs", lambda: (_vec(6, 111),), note="np.arange and np.empty(n, np.int64) as indices")
@njit
def reversed_pairs(x):
    n = x.shape[0]
    rev = np.empty(n, np.int64)
    for i in range(n):
        rev[i] = n - 1 - i
    idx = np.arange(n)
    s = 0.0
    for i in range(n):
        s += x[idx[i]] * x[rev[i]] * (i + 1.0)
    return s


@entry("time series", lambda: (_vec(9, 112),), note="np.median (a robust scale)")
@njit
def median_abs_deviation(x):
    m = np.median(x)
    return np.median(np.abs(x - m))


@entry("time series", lambda: (_pos(8, 113),), note="np.diff (log returns)")
@njit
def log_return_energy(p):
    r = np.diff(np.log(p))
    return np.sum(r * r) + np.sum(np.diff(p, 2) ** 2)


@entry("constructs", lambda: (_vec(5, 114),), note="np.outer (a rank-one update)")
@njit
def rank_one_quadratic(x):
    a = np.eye(x.shape[0]) + np.outer(x, x)
    return x @ (a @ x)


@entry("distance", lambda: (_vec(6, 115), _vec(6, 116)), diff=(0, 1), note="np.linalg.norm")
@njit
def cosine_distance(u, v):
    return 1.0 - np.dot(u, v) / (np.linalg.norm(u) * np.linalg.norm(v))


# --------------------------------------------------------------------------- np.linalg


def _spd(n: int, seed: int) -> np.ndarray:
    m = _rng(seed).standard_normal((n, n))
    return m @ m.T + n * np.eye(n)


@entry(
    "density",
    lambda: (_vec(4, 120), _vec(4, 121), _spd(4, 122)),
    diff=(0, 1, 2),
    note="np.linalg.cholesky, np.linalg.solve",
)
@njit
def mvn_logpdf(x, mean, cov):
    lower = np.linalg.cholesky(cov)
    z = np.linalg.solve(lower, x - mean)
    half_logdet = 0.0
    for i in range(x.shape[0]):
        half_logdet += math.log(lower[i, i])
    return -0.5 * (z @ z) - half_logdet - 0.5 * x.shape[0] * math.log(2.0 * math.pi)


@entry(
    "density",
    lambda: (np.linspace(0.0, 2.0, 5) + _vec(5, 123) * 0.1, _vec(5, 124), 0.7),
    diff=(0, 1, 2),
    note="Gaussian-process evidence: cholesky, solve with L.T",
)
@njit
def gp_log_marginal_likelihood(x, y, lengthscale, noise=0.1):
    n = x.shape[0]
    k = np.empty((n, n))
    for i in range(n):
        for j in range(n):
            k[i, j] = math.exp(-0.5 * ((x[i] - x[j]) / lengthscale) ** 2)
        k[i, i] += noise
    lower = np.linalg.cholesky(k)
    alpha = np.linalg.solve(lower.T, np.linalg.solve(lower, y))
    s = 0.0
    for i in range(n):
        s += math.log(lower[i, i])
    return -0.5 * (y @ alpha) - s - 0.5 * n * math.log(2.0 * math.pi)


@entry(
    "economics",
    lambda: (_rng(125).standard_normal((6, 3)), _vec(6, 126), 0.5),
    diff=(0, 1),
    jacobian=True,
    note="ridge regression: np.linalg.solve of the normal equations, array result",
)
@njit
def ridge_coefficients(x, y, penalty):
    gram = x.T @ x + penalty * np.eye(x.shape[1])
    return np.linalg.solve(gram, x.T @ y)


@entry(
    "time series",
    lambda: (_spd(3, 127) * 0.3, _rng(128).standard_normal((2, 3)), _spd(2, 129) * 0.2),
    diff=(0, 2),
    note="Kalman covariance update: np.linalg.inv, 2-d result",
)
@njit
def kalman_covariance_update(p, h, r):
    s = h @ p @ h.T + r
    gain = p @ h.T @ np.linalg.inv(s)
    return (np.eye(p.shape[0]) - gain @ h) @ p


@entry(
    "interpolation",
    lambda: (np.array([0.0, 0.4, 1.1, 1.5, 2.2]), _vec(5, 130), 0.9),
    diff=(0, 1, 2),
    note="Vandermonde system: np.linalg.solve",
)
@njit
def vandermonde_interpolate(xs, ys, t):
    n = xs.shape[0]
    v = np.empty((n, n))
    for i in range(n):
        for j in range(n):
            v[i, j] = xs[i] ** j
    c = np.linalg.solve(v, ys)
    s = 0.0
    for j in range(n - 1, -1, -1):
        s = s * t + c[j]
    return s


@entry(
    "constructs",
    lambda: (_rng(131).standard_normal((4, 4)) + 2.0 * np.eye(4),),
    note="np.linalg.slogdet, det, norm (Frobenius, 1, inf)",
)
@njit
def log_volume_and_norms(a):
    sign, logdet = np.linalg.slogdet(a)
    return (
        sign * logdet
        + np.linalg.det(a)
        + np.linalg.norm(a)
        + np.linalg.norm(a, 1)
        + np.linalg.norm(a, np.inf)
    )
