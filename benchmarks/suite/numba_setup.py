"""The Numba primal and central finite differences of it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks.common import central_difference
from benchmarks.suite.setups import Setup, numba_function, numba_versions, scalar_value
from benchmarks.suite.table import SERIAL_ROW, SPOT_SAMPLES


def _fd_gradient(f: Callable[..., float], args: list[Any], diff: list[int]) -> np.ndarray:
    """The full central-difference gradient (2 evaluations per input)."""
    out = []
    for i in diff:
        flat = args[i].reshape(-1)
        g = np.empty(flat.size)
        for j in range(flat.size):
            g[j] = central_difference(f, args, flat, j)
        out.append(g)
    return np.concatenate(out)


def fd_spot(
    f: Callable[..., float], args: list[Any], diff: list[int]
) -> tuple[np.ndarray, np.ndarray]:
    """Central differences at SPOT_SAMPLES inputs of each differentiated array:
    (indices into the flattened, concatenated gradient, values)."""
    rng = np.random.default_rng(1)
    indices, values = [], []
    offset = 0
    for i in diff:
        flat = args[i].reshape(-1)
        for j in sorted(rng.choice(flat.size, size=min(SPOT_SAMPLES, flat.size), replace=False)):
            indices.append(offset + int(j))
            values.append(central_difference(f, args, flat, j))
        offset += flat.size
    return np.array(indices, dtype=np.int64), np.array(values)


def setup_numba(kernel: str, data: dict[str, Any], contender: str) -> Setup:
    f = numba_function(kernel)
    kernel = SERIAL_ROW.get(kernel, kernel)
    args = data["args"]
    versions = numba_versions()
    if contender == "numba_primal":
        return Setup(make=lambda: lambda: f(*args), value=float, versions=versions)
    # Finite differences: the primal is compiled before the baseline.
    f(*args)
    if kernel == "nbody":
        pos, vel, mass, eps = args
        dpos, dvel = data["tangents"]
        h = 1e-6

        def fd_jvp() -> float:
            up = f(pos + h * dpos, vel + h * dvel, mass, eps)
            down = f(pos - h * dpos, vel - h * dvel, mass, eps)
            return (up - down) / (2.0 * h)

        return Setup(make=lambda: fd_jvp, derivative=scalar_value, versions=versions)
    if kernel == "scalar":
        x = args[0]
        hx = 1e-6 * max(1.0, abs(x))
        return Setup(
            make=lambda: lambda: (f(x + hx) - f(x - hx)) / (2.0 * hx),
            derivative=scalar_value,
            versions=versions,
        )
    diff = data["diff"]
    return Setup(
        make=lambda: lambda: _fd_gradient(f, args, diff),
        derivative=np.asarray,
        versions=versions,
    )
