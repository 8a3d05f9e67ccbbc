"""The JAX and PyTorch contenders (their kernels: ``benchmarks/contenders.py``)."""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks.suite.setups import FUNCTION_NAMES, Setup, flatten, scalar_value, second_value
from benchmarks.suite.table import SERIAL_ROW


def setup_jax(kernel: str, data: dict[str, Any], contender: str) -> Setup:
    from benchmarks.contenders import jax_kernels

    jk = jax_kernels()
    kernel = SERIAL_ROW.get(kernel, kernel)
    jax = jk.jax
    versions = {"jax": jk.version, "jaxlib": importlib.metadata.version("jaxlib")}
    f = getattr(jk, FUNCTION_NAMES[kernel])
    put = [jax.device_put(a) if isinstance(a, np.ndarray) else a for a in data["args"]]
    if kernel in ("rosenbrock", "gmm", "heat"):
        static = (2,) if kernel == "heat" else ()
        value = jax.jit(f, static_argnums=static)

        def make_grad() -> Callable[[], Any]:
            g = jax.jit(jax.grad(f, argnums=tuple(data["diff"])), static_argnums=static)
            return lambda: jax.block_until_ready(g(*put))

        return Setup(
            make=make_grad,
            derivative=flatten,
            value=lambda _: float(value(*put)),
            versions=versions,
        )
    if kernel == "nbody":
        pos, vel, mass, eps = put
        dpos, dvel = (jax.device_put(t) for t in data["tangents"])

        def make_jvp() -> Callable[[], Any]:
            @jax.jit
            def energy_jvp(p: Any, v: Any, tp: Any, tv: Any) -> Any:
                return jax.jvp(lambda p, v: f(p, v, mass, eps), (p, v), (tp, tv))

            return lambda: jax.block_until_ready(energy_jvp(pos, vel, dpos, dvel))

        return Setup(
            make=make_jvp, derivative=second_value, value=lambda r: float(r[0]), versions=versions
        )
    if kernel == "scalar":
        x = data["args"][0]
        value = jax.jit(f)

        def make_scalar() -> Callable[[], Any]:
            g = jax.jit(jax.grad(f))
            return lambda: float(g(x))

        return Setup(
            make=make_scalar,
            derivative=scalar_value,
            value=lambda _: float(value(x)),
            versions=versions,
        )
    raise ValueError(kernel)


def setup_torch(kernel: str, data: dict[str, Any], contender: str) -> Setup:
    from benchmarks.contenders import torch_kernels

    tk = torch_kernels()
    kernel = SERIAL_ROW.get(kernel, kernel)
    torch = tk.torch
    threads = os.cpu_count() or 1
    torch.set_num_threads(threads)
    versions = {"torch": tk.version}
    notes = [f"torch.set_num_threads({threads})"]
    f = getattr(tk, FUNCTION_NAMES[kernel])
    if kernel in ("rosenbrock", "gmm", "heat"):
        diff = data["diff"]
        args = [
            torch.from_numpy(a).requires_grad_(i in diff) if isinstance(a, np.ndarray) else a
            for i, a in enumerate(data["args"])
        ]
        params = [args[i] for i in diff]

        def gradient() -> tuple[Any, ...]:
            return torch.autograd.grad(f(*args), params)

        def value(_: Any) -> float:
            with torch.no_grad():
                return float(f(*args))

        return Setup(
            make=lambda: gradient,
            derivative=lambda r: flatten([t.numpy() for t in r]),
            value=value,
            versions=versions,
            notes=notes,
        )
    if kernel == "nbody":
        pos, vel, mass = (torch.from_numpy(a) for a in data["args"][:3])
        eps = data["args"][3]
        dpos, dvel = (torch.from_numpy(t) for t in data["tangents"])

        def energy_jvp() -> Any:
            return torch.func.jvp(lambda p, v: f(p, v, mass, eps), (pos, vel), (dpos, dvel))

        return Setup(
            make=lambda: energy_jvp,
            derivative=second_value,
            value=lambda r: float(r[0]),
            versions=versions,
            notes=notes,
        )
    if kernel == "scalar":
        x = data["args"][0]

        def derivative_call() -> float:
            xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
            f(xt).backward()
            return xt.grad.item()

        return Setup(
            make=lambda: derivative_call,
            derivative=scalar_value,
            value=lambda _: float(f(torch.tensor(x, dtype=torch.float64))),
            versions=versions,
            notes=notes,
        )
    raise ValueError(kernel)
