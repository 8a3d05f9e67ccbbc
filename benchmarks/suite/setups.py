"""What a child measures (``Setup``), the kernels' inputs and functions, shared by the
contender families' setups."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from benchmarks.suite.table import SCALAR_X, SERIAL_ROW


@dataclass
class Setup:
    """What a child measures.

    ``make()`` returns the function of one timed call; it is timed together with the
    first call (so a derivative built eagerly, like ``ez.autodiff``'s, counts as first-
    call latency as a lazily built one does). ``derivative(result)`` flattens a call's
    result; ``value(result)`` is the kernel's value computed by this library (None: it
    does not compute one).
    """

    make: Callable[[], Callable[[], Any]]
    derivative: Callable[[Any], np.ndarray] | None = None
    value: Callable[[Any], float] | None = None
    versions: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def kernel_inputs(kernel: str, sizes: dict[str, int]) -> dict[str, Any]:
    from benchmarks import kernels

    kernel = SERIAL_ROW.get(kernel, kernel)
    if kernel == "rosenbrock":
        (x,) = kernels.rosenbrock_inputs(sizes["n"])
        return {"args": [x], "diff": [0]}
    if kernel == "gmm":
        args = list(kernels.gmm_inputs(sizes["d"], sizes["k"], sizes["n"]))
        return {"args": args, "diff": [0, 1, 2]}
    if kernel == "heat":
        u0, target = kernels.heat_inputs(sizes["cells"])
        return {"args": [u0, target, sizes["steps"]], "diff": [0]}
    if kernel == "nbody":
        pos, vel, mass, eps, dpos, dvel = kernels.nbody_inputs(sizes["bodies"])
        return {"args": [pos, vel, mass, eps], "tangents": [dpos, dvel]}
    if kernel == "scalar":
        return {"args": [SCALAR_X]}
    raise ValueError(f"unknown kernel {kernel!r}")


# The function of each kernel, by the same name in kernels.py and in contenders.py's
# jax_kernels() / torch_kernels().
FUNCTION_NAMES = {
    "rosenbrock": "rosenbrock",
    "gmm": "gmm_objective",
    "heat": "heat_loss",
    "nbody": "nbody_energy",
    "scalar": "scalar_f",
    "rosenbrock_prange": "rosenbrock_prange",
    "rosenbrock_small": "rosenbrock",
    "gmm_prange": "gmm_objective_prange",
    "heat_prange": "heat_loss_prange",
}


def numba_function(kernel: str) -> Any:
    from benchmarks import kernels

    return getattr(kernels, FUNCTION_NAMES[kernel])


def flatten(parts: Sequence[Any]) -> np.ndarray:
    return np.concatenate([np.asarray(p, dtype=np.float64).reshape(-1) for p in parts])


def second_value(result: Any) -> np.ndarray:
    return np.array([float(result[1])])


def scalar_value(result: Any) -> np.ndarray:
    return np.array([float(result)])


def numba_versions() -> dict[str, str]:
    import numba

    return {"numba": numba.__version__, "numpy": np.__version__}
