"""Numba kernels the benchmarks (and tests) differentiate, with their input makers.

- ``rosenbrock(x)``: the Rosenbrock sum, sum_i 100 (x[i+1] - x[i]^2)^2 + (1 - x[i])^2.
- ``gmm_objective(alphas, means, icf, x, gamma, m)``: the ADBench Gaussian mixture
  model objective (log-likelihood plus Wishart prior), written as loops, with the
  inverse covariance factors ``icf`` (k x d(d+1)/2: log-diagonal, then the strictly
  lower triangle column by column).
"""

from __future__ import annotations

import math

import numba
import numpy as np


@numba.njit(cache=False)
def rosenbrock(x):
    s = 0.0
    for i in range(x.shape[0] - 1):
        a = x[i + 1] - x[i] * x[i]
        b = 1.0 - x[i]
        s += 100.0 * a * a + b * b
    return s


@numba.njit(cache=False)
def _logsumexp(v):
    mx = v[0]
    for i in range(1, v.shape[0]):
        if v[i] > mx:
            mx = v[i]
    s = 0.0
    for i in range(v.shape[0]):
        s += math.exp(v[i] - mx)
    return math.log(s) + mx


@numba.njit(cache=False)
def gmm_objective(alphas, means, icf, x, gamma, m):
    n, d = x.shape
    k = alphas.shape[0]
    main_term = np.empty(k)
    xc = np.empty(d)
    qxc = np.empty(d)
    sum_qs = np.empty(k)
    for c in range(k):
        s = 0.0
        for j in range(d):
            s += icf[c, j]
        sum_qs[c] = s
    slse = 0.0
    for i in range(n):
        for c in range(k):
            for j in range(d):
                xc[j] = x[i, j] - means[c, j]
            for j in range(d):
                qxc[j] = math.exp(icf[c, j]) * xc[j]
            idx = d
            for j in range(d):
                for r in range(j + 1, d):
                    qxc[r] += icf[c, idx] * xc[j]
                    idx += 1
            sq = 0.0
            for j in range(d):
                sq += qxc[j] * qxc[j]
            main_term[c] = alphas[c] + sum_qs[c] - 0.5 * sq
        slse += _logsumexp(main_term)
    const = -n * d * 0.5 * math.log(2.0 * math.pi)
    # Wishart prior (the parts that depend on the parameters).
    prior = 0.0
    for c in range(k):
        fro = 0.0
        for j in range(d):
            e = math.exp(icf[c, j])
            fro += e * e
        for j in range(d, icf.shape[1]):
            fro += icf[c, j] * icf[c, j]
        prior += 0.5 * gamma * gamma * fro - m * sum_qs[c]
    return const + slse - n * _logsumexp(alphas) + prior


def rosenbrock_inputs(n: int, seed: int = 0) -> tuple[np.ndarray]:
    return (np.random.default_rng(seed).uniform(-1.0, 2.0, n),)


def gmm_inputs(
    d: int, k: int, n: int, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float, float]:
    rng = np.random.default_rng(seed)
    alphas = rng.normal(size=k)
    means = rng.uniform(size=(k, d))
    icf = rng.normal(scale=0.3, size=(k, d * (d + 1) // 2))
    x = rng.normal(size=(n, d))
    return alphas, means, icf, x, 1.0, 0.0
