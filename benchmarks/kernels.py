"""Numba kernels the benchmarks (and tests) differentiate, with their input makers.

- ``rosenbrock(x)``: the Rosenbrock sum, sum_i 100 (x[i+1] - x[i]^2)^2 + (1 - x[i])^2.
- ``gmm_objective(alphas, means, icf, x, gamma, m)``: the ADBench Gaussian mixture
  model objective (log-likelihood plus Wishart prior), written as loops, with the
  inverse covariance factors ``icf`` (k x d(d+1)/2: log-diagonal, then the strictly
  lower triangle column by column).
- ``heat_loss(u0, target, steps)``: explicit Euler for the 1-D heat equation (fixed
  ends, r = 0.25) from ``u0`` for ``steps`` steps, two buffers allocated inside and
  swapped; returns 0.5 * sum((u_final - target)^2).
- ``nbody_energy(pos, vel, mass, eps)``: kinetic plus softened pairwise gravitational
  potential energy of bodies in 3-D (``pos``, ``vel``: n x 3).
- ``scalar_f(x)``: x * x * sin(x), for call overhead.
- ``rosenbrock_prange``, ``gmm_objective_prange`` (over samples, each with temporaries of
  its own) and ``heat_loss_prange`` (over cells, every step): the same arithmetic
  written as users write it for speed, ``parallel=True`` with ``prange`` loops.
  enzyme_py differentiates them as their serial twins (prange as range).
"""

from __future__ import annotations

import math
from typing import Any

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


def rosenbrock_gradient(x: np.ndarray) -> np.ndarray:
    """The analytic gradient of ``rosenbrock`` (and ``rosenbrock_prange``), in NumPy."""
    g = np.zeros_like(x)
    a = x[1:] - x[:-1] ** 2
    g[:-1] += -400.0 * a * x[:-1] - 2.0 * (1.0 - x[:-1])
    g[1:] += 200.0 * a
    return g


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


# The GMM objective, once for both kernels: gmm_objective allocates the per-sample
# temporaries once, before a serial loop; gmm_objective_prange (parallel=True) gives
# each sample temporaries of its own in a prange loop. The rest is the same text.
# The exponentials of the log-diagonal (qdiag) are taken once per component before
# the loop over samples, as ADBench's reference and the JAX and PyTorch contenders
# do, not once per sample (2.5 million exp calls per objective at n = 10^4).
_GMM_SOURCE = """
def {name}(alphas, means, icf, x, gamma, m):
    n, d = x.shape
    k = alphas.shape[0]
{outside}    sum_qs = np.empty(k)
    qdiag = np.empty((k, d))
    for c in range(k):
        s = 0.0
        for j in range(d):
            s += icf[c, j]
            qdiag[c, j] = math.exp(icf[c, j])
        sum_qs[c] = s
    slse = 0.0
    for i in {loop}(n):
{inside}        for c in range(k):
            for j in range(d):
                xc[j] = x[i, j] - means[c, j]
            for j in range(d):
                qxc[j] = qdiag[c, j] * xc[j]
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
            fro += qdiag[c, j] * qdiag[c, j]
        for j in range(d, icf.shape[1]):
            fro += icf[c, j] * icf[c, j]
        prior += 0.5 * gamma * gamma * fro - m * sum_qs[c]
    return const + slse - n * _logsumexp(alphas) + prior
"""
_GMM_TEMPORARIES = ("main_term = np.empty(k)", "xc = np.empty(d)", "qxc = np.empty(d)")


def _gmm_kernel(name: str, parallel: bool) -> Any:
    """The objective of _GMM_SOURCE, compiled with @numba.njit (parallel=True with a
    prange loop over the samples)."""

    def lines(indent: str) -> str:
        return "".join(f"{indent}{line}\n" for line in _GMM_TEMPORARIES)

    source = _GMM_SOURCE.format(
        name=name,
        outside="" if parallel else lines("    "),
        inside=lines("        ") if parallel else "",
        loop="numba.prange" if parallel else "range",
    )
    namespace: dict[str, Any] = {}
    exec(compile(source, f"<benchmarks.kernels.{name}>", "exec"), globals(), namespace)
    return numba.njit(parallel=parallel, cache=False)(namespace[name])


gmm_objective = _gmm_kernel("gmm_objective", parallel=False)


HEAT_R = 0.25


@numba.njit(cache=False)
def heat_loss(u0, target, steps):
    n = u0.shape[0]
    a = np.empty_like(u0)
    b = np.empty_like(u0)
    for i in range(n):
        a[i] = u0[i]
    for _ in range(steps):
        b[0] = a[0]
        b[n - 1] = a[n - 1]
        for i in range(1, n - 1):
            b[i] = a[i] + HEAT_R * (a[i - 1] - 2.0 * a[i] + a[i + 1])
        a, b = b, a
    s = 0.0
    for i in range(n):
        d = a[i] - target[i]
        s += d * d
    return 0.5 * s


@numba.njit(cache=False)
def nbody_energy(pos, vel, mass, eps):
    n = mass.shape[0]
    kinetic = 0.0
    for i in range(n):
        kinetic += 0.5 * mass[i] * (vel[i, 0] ** 2 + vel[i, 1] ** 2 + vel[i, 2] ** 2)
    potential = 0.0
    eps2 = eps * eps
    for i in range(n):
        for j in range(i + 1, n):
            dx = pos[i, 0] - pos[j, 0]
            dy = pos[i, 1] - pos[j, 1]
            dz = pos[i, 2] - pos[j, 2]
            potential -= mass[i] * mass[j] / math.sqrt(dx * dx + dy * dy + dz * dz + eps2)
    return kinetic + potential


@numba.njit(cache=False)
def scalar_f(x):
    return x * x * math.sin(x)


@numba.njit(parallel=True, cache=False)
def rosenbrock_prange(x):
    s = 0.0
    for i in numba.prange(x.shape[0] - 1):
        a = x[i + 1] - x[i] * x[i]
        b = 1.0 - x[i]
        s += 100.0 * a * a + b * b
    return s


gmm_objective_prange = _gmm_kernel("gmm_objective_prange", parallel=True)


@numba.njit(parallel=True, cache=False)
def heat_loss_prange(u0, target, steps):
    n = u0.shape[0]
    a = np.empty_like(u0)
    b = np.empty_like(u0)
    for i in numba.prange(n):
        a[i] = u0[i]
    for _ in range(steps):
        b[0] = a[0]
        b[n - 1] = a[n - 1]
        for i in numba.prange(1, n - 1):
            b[i] = a[i] + HEAT_R * (a[i - 1] - 2.0 * a[i] + a[i + 1])
        a, b = b, a
    s = 0.0
    for i in numba.prange(n):
        d = a[i] - target[i]
        s += d * d
    return 0.5 * s


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


def heat_inputs(cells: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Initial state ``u0`` and ``target``, each of ``cells`` values in [0, 1)."""
    rng = np.random.default_rng(seed)
    return rng.uniform(size=cells), rng.uniform(size=cells)


def nbody_inputs(
    bodies: int, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, np.ndarray, np.ndarray]:
    """``pos, vel, mass, eps`` and a random direction ``(dpos, dvel)`` for a JVP."""
    rng = np.random.default_rng(seed)
    pos = rng.normal(size=(bodies, 3))
    vel = rng.normal(scale=0.1, size=(bodies, 3))
    mass = rng.uniform(0.5, 1.5, size=bodies)
    dpos = rng.normal(size=(bodies, 3))
    dvel = rng.normal(size=(bodies, 3))
    return pos, vel, mass, 0.01, dpos, dvel
