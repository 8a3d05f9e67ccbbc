"""JAX and PyTorch versions of the kernels of ``benchmarks/kernels.py``.

Each is written the way a JAX or PyTorch user would write it: vectorised array
expressions, no Python loop over elements (the heat equation keeps its loop over time
steps: ``lax.fori_loop`` in JAX, a Python loop of tensor operations in PyTorch). Each
computes the same value as its Numba twin (``benchmarks/suite/`` checks it).

Nothing here imports JAX or PyTorch at import time: ``jax_kernels()`` and
``torch_kernels()`` import them when called (and raise ImportError when they cannot).
``jax_kernels()`` turns on JAX's float64 mode (``jax_enable_x64``), as the kernels are
compared in float64.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from benchmarks.kernels import HEAT_R


def gmm_tril_indices(d: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cols) of the strictly lower triangle in the order ``icf[:, d:]`` stores it:
    column by column (``kernels.gmm_objective``: for j, for r > j)."""
    rows = [r for j in range(d) for r in range(j + 1, d)]
    cols = [j for j in range(d) for _ in range(j + 1, d)]
    return np.array(rows, dtype=np.int64), np.array(cols, dtype=np.int64)


def jax_kernels() -> SimpleNamespace:
    """The kernels in JAX (float64). Raises ImportError without JAX."""
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    from jax import lax
    from jax.scipy.special import logsumexp

    def rosenbrock(x: jax.Array) -> jax.Array:
        return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)

    def gmm_objective(
        alphas: jax.Array,
        means: jax.Array,
        icf: jax.Array,
        x: jax.Array,
        gamma: float,
        m: float,
    ) -> jax.Array:
        n, d = x.shape
        k = alphas.shape[0]
        rows, cols = gmm_tril_indices(d)
        diag = np.arange(d)
        log_diag = icf[:, :d]
        sum_qs = jnp.sum(log_diag, axis=1)
        q = jnp.zeros((k, d, d), dtype=icf.dtype)
        q = q.at[:, diag, diag].set(jnp.exp(log_diag)).at[:, rows, cols].set(icf[:, d:])
        xc = x[:, None, :] - means[None, :, :]  # n, k, d
        qxc = jnp.einsum("krj,nkj->nkr", q, xc)
        main_term = alphas + sum_qs - 0.5 * jnp.sum(qxc * qxc, axis=2)
        slse = jnp.sum(logsumexp(main_term, axis=1))
        const = -n * d * 0.5 * math.log(2.0 * math.pi)
        fro = jnp.sum(jnp.exp(log_diag) ** 2, axis=1) + jnp.sum(icf[:, d:] ** 2, axis=1)
        prior = jnp.sum(0.5 * gamma * gamma * fro - m * sum_qs)
        return const + slse - n * logsumexp(alphas) + prior

    def heat_loss(u0: jax.Array, target: jax.Array, steps: int) -> jax.Array:
        def step(_: int, u: jax.Array) -> jax.Array:
            return u.at[1:-1].add(HEAT_R * (u[:-2] - 2.0 * u[1:-1] + u[2:]))

        u = lax.fori_loop(0, steps, step, u0)
        return 0.5 * jnp.sum((u - target) ** 2)

    def nbody_energy(pos: jax.Array, vel: jax.Array, mass: jax.Array, eps: float) -> jax.Array:
        n = mass.shape[0]
        kinetic = 0.5 * jnp.sum(mass * jnp.sum(vel * vel, axis=1))
        diff = pos[:, None, :] - pos[None, :, :]
        dist = jnp.sqrt(jnp.sum(diff * diff, axis=2) + eps * eps)
        upper = jnp.triu(jnp.ones((n, n), dtype=pos.dtype), k=1)
        potential = -jnp.sum(upper * mass[:, None] * mass[None, :] / dist)
        return kinetic + potential

    def scalar_f(x: jax.Array) -> jax.Array:
        return x * x * jnp.sin(x)

    return SimpleNamespace(
        jax=jax,
        jnp=jnp,
        version=jax.__version__,
        rosenbrock=rosenbrock,
        gmm_objective=gmm_objective,
        heat_loss=heat_loss,
        nbody_energy=nbody_energy,
        scalar_f=scalar_f,
    )


def torch_kernels() -> SimpleNamespace:
    """The kernels in PyTorch (float64 tensors). Raises ImportError without PyTorch."""
    import torch

    def rosenbrock(x: torch.Tensor) -> torch.Tensor:
        return torch.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)

    def gmm_objective(
        alphas: torch.Tensor,
        means: torch.Tensor,
        icf: torch.Tensor,
        x: torch.Tensor,
        gamma: float,
        m: float,
    ) -> torch.Tensor:
        n, d = x.shape
        k = alphas.shape[0]
        rows, cols = (torch.from_numpy(i) for i in gmm_tril_indices(d))
        diag = torch.arange(d)
        log_diag = icf[:, :d]
        sum_qs = torch.sum(log_diag, dim=1)
        q = torch.zeros((k, d, d), dtype=icf.dtype)
        q[:, diag, diag] = torch.exp(log_diag)
        q[:, rows, cols] = icf[:, d:]
        xc = x[:, None, :] - means[None, :, :]  # n, k, d
        qxc = torch.einsum("krj,nkj->nkr", q, xc)
        main_term = alphas + sum_qs - 0.5 * torch.sum(qxc * qxc, dim=2)
        slse = torch.sum(torch.logsumexp(main_term, dim=1))
        const = -n * d * 0.5 * math.log(2.0 * math.pi)
        fro = torch.sum(torch.exp(log_diag) ** 2, dim=1) + torch.sum(icf[:, d:] ** 2, dim=1)
        prior = torch.sum(0.5 * gamma * gamma * fro - m * sum_qs)
        return const + slse - n * torch.logsumexp(alphas, dim=0) + prior

    def heat_loss(u0: torch.Tensor, target: torch.Tensor, steps: int) -> torch.Tensor:
        u = u0
        for _ in range(steps):
            interior = u[1:-1] + HEAT_R * (u[:-2] - 2.0 * u[1:-1] + u[2:])
            u = torch.cat((u[:1], interior, u[-1:]))
        return 0.5 * torch.sum((u - target) ** 2)

    def nbody_energy(
        pos: torch.Tensor, vel: torch.Tensor, mass: torch.Tensor, eps: float
    ) -> torch.Tensor:
        n = mass.shape[0]
        kinetic = 0.5 * torch.sum(mass * torch.sum(vel * vel, dim=1))
        diff = pos[:, None, :] - pos[None, :, :]
        dist = torch.sqrt(torch.sum(diff * diff, dim=2) + eps * eps)
        upper = torch.triu(torch.ones((n, n), dtype=pos.dtype), diagonal=1)
        potential = -torch.sum(upper * mass[:, None] * mass[None, :] / dist)
        return kinetic + potential

    def scalar_f(x: torch.Tensor) -> torch.Tensor:
        return x * x * torch.sin(x)

    return SimpleNamespace(
        torch=torch,
        version=torch.__version__,
        rosenbrock=rosenbrock,
        gmm_objective=gmm_objective,
        heat_loss=heat_loss,
        nbody_energy=nbody_energy,
        scalar_f=scalar_f,
    )
