"""The suite's kernels and contenders, its tolerances, and what parent and children share."""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "benchmarks" / "results"

# A full finite-difference gradient is run when estimated to take at most this long.
FD_BUDGET_S = 1.0
# Tolerances of the derivative checks (relative, see ``relative_error``).
AD_TOLERANCE = 1e-8
FD_TOLERANCE = 1e-4
VALUE_TOLERANCE = 1e-10
# Inputs sampled per differentiated array for the spot finite-difference check.
SPOT_SAMPLES = 3


@dataclass(frozen=True)
class Contender:
    name: str
    library: str  # what the child imports: numba, enzyme_py, jax, torch
    label: str


CONTENDERS: dict[str, Contender] = {
    c.name: c
    for c in (
        Contender("numba_primal", "numba", "Numba primal"),
        Contender("enzyme_py_reverse", "enzyme_py", "enzyme_py reverse"),
        # The prange rows: ez.autodiff(..., threads=os.cpu_count()), the loops on threads.
        Contender("enzyme_py_threads", "enzyme_py", "enzyme_py reverse, threads="),
        Contender("enzyme_py_forward", "enzyme_py", "enzyme_py forward"),
        Contender("enzyme_py_jvp_helper", "enzyme_py", "enzyme_py `ez.jvp` helper"),
        Contender("jax", "jax", "JAX jit"),
        Contender("torch", "torch", "PyTorch autograd"),
        Contender("finite_differences", "numba", "central differences"),
        # The Cython row (kernels 1 and 3): benchmarks/cython_gradients.py's kernels.
        Contender("cython_primal", "enzyme_py", "Cython primal (ez.cython)"),
        Contender("enzyme_py_cython", "enzyme_py", "enzyme_py on Cython (ez.cython)"),
        Contender("c_primal", "enzyme_py", "C primal (ez.c)"),
        Contender("enzyme_py_c", "enzyme_py", "enzyme_py on C (ez.c)"),
    )
}
# The Cython row's contenders; each derivative's own primal (its ratio's reference).
COMPILED_CONTENDERS = ("cython_primal", "enzyme_py_cython", "c_primal", "enzyme_py_c")
OWN_PRIMAL = {"enzyme_py_cython": "cython_primal", "enzyme_py_c": "c_primal"}


@dataclass(frozen=True)
class Kernel:
    name: str
    derivative: str
    full: dict[str, int]
    quick: dict[str, int]
    contenders: tuple[str, ...]
    enzyme_reference: str  # the enzyme_py contender the ratios are taken against
    title: Callable[[dict[str, int]], str]
    fd_evaluations: Callable[[dict[str, int]], int]  # primal calls of one FD derivative


def _gmm_params(s: dict[str, int]) -> int:
    k, d = s["k"], s["d"]
    return k + k * d + k * d * (d + 1) // 2


GRADIENT_CONTENDERS = ("numba_primal", "enzyme_py_reverse", "jax", "torch", "finite_differences")

_GRADIENT_KERNELS = (
    Kernel(
        "rosenbrock",
        "gradient w.r.t. x",
        {"n": 1_000_000},
        {"n": 1000},
        (*GRADIENT_CONTENDERS, *COMPILED_CONTENDERS),
        "enzyme_py_reverse",
        lambda s: f"Rosenbrock, n={s['n']}",
        lambda s: 2 * s["n"],
    ),
    Kernel(
        "gmm",
        "gradient w.r.t. alphas, means, icf",
        {"d": 10, "k": 25, "n": 10_000},
        {"d": 3, "k": 4, "n": 50},
        GRADIENT_CONTENDERS,
        "enzyme_py_reverse",
        lambda s: f"ADBench GMM, d={s['d']} k={s['k']} n={s['n']}",
        lambda s: 2 * _gmm_params(s),
    ),
    Kernel(
        "heat",
        "gradient of the loss w.r.t. u0",
        {"cells": 1000, "steps": 1000},
        {"cells": 32, "steps": 20},
        (*GRADIENT_CONTENDERS, *COMPILED_CONTENDERS),
        "enzyme_py_reverse",
        lambda s: f"heat equation, {s['cells']} cells x {s['steps']} steps",
        lambda s: 2 * s["cells"],
    ),
)


def _prange_twin(base: Kernel) -> Kernel:
    """The row of ``base`` written with parallel=True and prange (kernels.py)."""
    title = base.title
    return Kernel(
        f"{base.name}_prange",
        base.derivative,
        base.full,
        base.quick,
        (
            *(c for c in base.contenders if c not in COMPILED_CONTENDERS),
            "enzyme_py_threads",
        ),
        base.enzyme_reference,
        lambda s: f"{title(s)}, parallel=True prange",
        base.fd_evaluations,
    )


# Rosenbrock on 10 doubles: what a gradient costs per call where the array is small
# (an optimiser's loop over a few parameters): the helpers' own overhead, JAX's and
# PyTorch's dispatch.
_SMALL_ROSENBROCK = Kernel(
    "rosenbrock_small",
    "gradient w.r.t. x, per call",
    {"n": 10},
    {"n": 10},
    GRADIENT_CONTENDERS,
    "enzyme_py_reverse",
    lambda s: f"Rosenbrock, n={s['n']}, per call",
    lambda s: 2 * s["n"],
)

# A prange row's kernel is its serial row's for inputs, JAX and PyTorch; so is the
# small Rosenbrock's.
SERIAL_ROW = {f"{k.name}_prange": k.name for k in _GRADIENT_KERNELS} | {
    _SMALL_ROSENBROCK.name: "rosenbrock"
}

KERNELS: dict[str, Kernel] = {
    k.name: k
    for k in (
        *(row for base in _GRADIENT_KERNELS for row in (base, _prange_twin(base))),
        _SMALL_ROSENBROCK,
        Kernel(
            "nbody",
            "JVP along a random direction in (pos, vel)",
            {"bodies": 100},
            {"bodies": 8},
            (
                "numba_primal",
                "enzyme_py_forward",
                "enzyme_py_jvp_helper",
                "jax",
                "torch",
                "finite_differences",
            ),
            "enzyme_py_forward",
            lambda s: f"n-body energy, {s['bodies']} bodies (JVP)",
            lambda s: 2,
        ),
        Kernel(
            "scalar",
            "df/dx of x*x*sin(x), one call",
            {},
            {},
            (
                "numba_primal",
                "enzyme_py_reverse",
                "enzyme_py_forward",
                "jax",
                "torch",
                "finite_differences",
            ),
            "enzyme_py_reverse",
            lambda s: "x*x*sin(x), per call",
            lambda s: 2,
        ),
    )
}

SCALAR_X = 1.3


def apply_disable() -> list[str]:
    """Block the imports named in ``BENCH_DISABLE`` (comma-separated module names)."""
    names = [n.strip() for n in os.environ.get("BENCH_DISABLE", "").split(",") if n.strip()]
    for name in names:
        if name not in sys.modules or sys.modules[name] is None:
            sys.modules[name] = None  # type: ignore[assignment]  # import raises ImportError
    return names


def relative_error(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b| / max |b|: the error of a against the reference b."""
    a = np.asarray(a, dtype=np.float64).reshape(-1)
    b = np.asarray(b, dtype=np.float64).reshape(-1)
    if a.shape != b.shape:
        return math.inf
    scale = float(np.max(np.abs(b))) if b.size else 0.0
    diff = float(np.max(np.abs(a - b))) if a.size else 0.0
    if not math.isfinite(diff):
        return math.inf
    return diff / scale if scale > 0 else diff
