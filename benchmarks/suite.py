"""Comparison suite: enzyme_py against JAX, PyTorch and finite differences.

Usage (from the repository root)::

    python -m benchmarks [--quick] [--out DIR] [--jobs N] [--only KERNEL,...]

Kernels (``benchmarks/kernels.py``; JAX and PyTorch twins in ``benchmarks/contenders.py``):

1. ``rosenbrock``: Rosenbrock sum, n = 10^6; gradient with respect to x.
2. ``gmm``: ADBench GMM objective, d = 10, k = 25, n = 10^4; gradient with respect to
   alphas, means, icf.
3. ``heat``: explicit-Euler 1-D heat equation, 1000 cells x 1000 steps, r = 0.25, fixed
   ends, loss 0.5 * sum((u_final - target)^2); gradient with respect to u0.
4. ``nbody``: kinetic + softened pairwise potential energy of 100 bodies in 3-D; a
   forward-mode Jacobian-vector product along a random direction in positions and
   velocities.
5. ``scalar``: f(x) = x * x * sin(x): the cost of one derivative call (call overhead).
6. ``rosenbrock_prange``, ``gmm_prange``, ``heat_prange``: kernels 1-3 written with
   ``parallel=True`` and ``prange`` (over i, over samples, over cells), same sizes and
   contenders (JAX and PyTorch run their one version of the math again). The Numba primal
   runs on Numba's threads; enzyme_py differentiates its serial twin (prange as range).

``--quick`` runs tiny sizes (Rosenbrock n = 1000, GMM d = 3 k = 4 n = 50, heat 32 cells
x 20 steps, 8 bodies) with fewer repeats, and still runs every installed contender.

Contenders, each on the same inputs (built from the same seeds), all in float64:

- ``numba_primal``: the Numba ``@njit`` function itself: the reference (1.0);
- ``enzyme_py_reverse``: ``ez.grad`` (kernels 1-3) or
  ``ez.autodiff(f, ez.Reverse, ez.Active, ez.Active)`` (kernel 5);
- ``enzyme_py_forward``: ``ez.autodiff(f, ez.Forward, ...)`` with Dual arguments
  (kernels 4, 5); ``enzyme_py_jvp_helper``: ``ez.jvp(f, primals, tangents)`` called
  as is, once per JVP (kernel 4);
- ``jax``: ``jax.jit(jax.grad(f))`` / ``jax.jit(lambda ...: jax.jvp(...))`` on the CPU,
  with ``jax_enable_x64``, inputs already on the device, every call ended with
  ``block_until_ready`` (kernel 5: ``float(g(x))``);
- ``torch``: PyTorch autograd on the CPU (``torch.autograd.grad``; kernel 4
  ``torch.func.jvp``; kernel 5 a fresh scalar tensor, ``backward()``, ``.grad.item()``),
  with ``torch.set_num_threads(os.cpu_count())``;
- ``finite_differences``: central differences of the Numba primal (step
  1e-6 * max(1, |x_i|); 1e-6 along the direction for the JVP): 2 primal evaluations
  for the JVP and for kernel 5; 2 per input for a gradient, run only when that is
  estimated to take under ``FD_BUDGET_S`` (so at the --quick sizes; otherwise reported
  as not feasible with the estimate);
- the Cython row (kernels 1 and 3): the same kernels written in Cython (``ez.cython``,
  ``const double[::1]`` memoryviews) and in C (``ez.c``), those of
  ``benchmarks/cython_gradients.py``: ``cython_primal`` / ``c_primal`` (the function
  called through enzyme_py; the module's compile is in its first call) and
  ``enzyme_py_cython`` / ``enzyme_py_c`` (``ez.grad``), each gradient also given as a
  ratio to its own primal (``over_own_primal``). Skipped without Cython.

Numba and enzyme_py run on one thread (the prange kernels' Numba primal on all cores);
JAX (XLA's CPU client) and PyTorch may use every core.

Method:

- Every contender of every kernel runs in its own child process
  (``python -m benchmarks.suite --child SPEC``), one after the other (``--jobs 1``, the
  default without ``--quick``), so that no library's threads, caches or allocations
  affect another's numbers. The child imports only what its contender needs.
- Time: the first call is timed alone (first-call latency: tracing, compilation, JIT);
  after one more warm-up call, the median over at least 5 (7 without --quick) samples,
  each sample the mean of ``number`` calls in a row, with ``number`` chosen so that a
  sample lasts about 20 ms (1 ms with --quick), and more samples (up to 50) while they
  fit in about 1 s. Derivative time / primal time, and enzyme_py time /
  contender time (enzyme_py's reverse derivative; the forward one for kernel 4).
- Compile latency of enzyme_py: the first call in a child with an empty
  ``ENZYME_PY_CACHE_DIR``, then the first call in a second new child with the same
  (now filled) cache folder. ``ENZYME_PY_LOG=1`` in those children records where each
  derivative came from (Enzyme or the disk cache). enzyme_py's first call is timed after
  the Numba primal has been compiled (its Numba compile is the primal's first call).
- Peak memory: each child reads ``ru_maxrss`` (``getrusage(RUSAGE_SELF)``) just
  before the first call, once it has imported its libraries, built its inputs (as the
  arrays or tensors it uses) and, for the contenders that call the Numba primal
  (enzyme_py, finite differences), compiled the primal: the baseline, the figure a
  separate child that stopped there would report. It reads it again after the first
  call and after the timed calls; "peak" is the larger of those two minus the baseline
  (the larger, because resetting the high-water mark, below, resets ``ru_maxrss`` too
  on Linux). The peak includes the first call, so compilation (XLA, Numba, the JIT) is
  in it. enzyme_py runs Enzyme in a forked child by default, whose memory is not in
  ``RUSAGE_SELF`` (``enzyme_build_child_maxrss_mib`` in the JSON). "steady" is the
  peak of the timed calls alone: the high-water mark is reset (``/proc/self/clear_refs``)
  after the warm-up calls, and ``VmHWM`` afterwards minus ``VmRSS`` before the timed
  calls is reported (memory the allocators kept from the warm-up calls, and reuse, is
  not counted again; memory they take from the system on every call, is; in the JSON
  only). "per call", the table's memory per gradient: after the timed calls, the C
  heap's free memory is handed back to the system (glibc's ``malloc_trim(0)``: the
  free pages of every arena), the high-water mark is reset, and one more call is made:
  ``VmHWM`` after it minus ``VmRSS`` before it, the least of 3 such readings. It counts
  the pages the call touches anew (its result, its temporaries: a reverse pass's tape,
  the shadows of arrays made inside the function) and not what stays allocated
  between calls (inputs, compiled code, pools a library keeps outside malloc). For
  enzyme_py the most its tape held during the call is added (``tape_mib``, from
  ``_native.tape_bytes()``): Enzyme's tape lives on a stack of enzyme_py's own that
  stays reserved, and resident, between calls (up to 256 MiB; a larger one is given
  back after each call, faulted in anew, and already in the new pages).
- Checks: every derivative is compared with another contender's: enzyme_py with JAX,
  else PyTorch, else finite differences (full, or at 3 sampled coordinates per input
  array when a full one is not feasible); every other derivative with enzyme_py.
  The error is max_i |a_i - b_i| / max_i |b_i| (b the reference). The values computed
  by JAX, PyTorch and enzyme_py's forward mode are compared with the Numba primal's.
- ``BENCH_VERBOSE=1`` prints each child's wall time to stderr; ``--only rosenbrock,gmm``
  runs some kernels. The 1-minute load average before the run (and at its end, the
  suite's own children included) is recorded: other processes disturb the times.
- Missing libraries: a contender whose library cannot be imported is "skipped" with
  the reason, never a failure. ``BENCH_DISABLE=jax,torch`` blocks those imports
  (``sys.modules[name] = None`` in this process and every child), as if not installed.

Results: ``suite.json`` (every sample), ``suite.md`` (printed too) and ``suite.png``
(gradient time / primal time per kernel and contender, log scale; needs matplotlib) in
``--out`` (default ``benchmarks/results/``). The exit code is 1 when a contender fails
or a check exceeds its tolerance, else 0. Nothing asserts anything about the times.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import central_difference

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = Path(__file__).resolve().parent / "results"

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
        tuple(c for c in base.contenders if c not in COMPILED_CONTENDERS),
        base.enzyme_reference,
        lambda s: f"{title(s)}, parallel=True prange",
        base.fd_evaluations,
    )


# A prange row's kernel is its serial row's for inputs, JAX and PyTorch.
SERIAL_ROW = {f"{k.name}_prange": k.name for k in _GRADIENT_KERNELS}

KERNELS: dict[str, Kernel] = {
    k.name: k
    for k in (
        *(row for base in _GRADIENT_KERNELS for row in (base, _prange_twin(base))),
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


# ----------------------------------------------------------------------------------
# Shared by parent and children.


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


# ----------------------------------------------------------------------------------
# Child side: one contender of one kernel.


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


def _inputs(kernel: str, sizes: dict[str, int]) -> dict[str, Any]:
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
    "gmm_prange": "gmm_objective_prange",
    "heat_prange": "heat_loss_prange",
}


def _numba_function(kernel: str) -> Any:
    from benchmarks import kernels

    return getattr(kernels, FUNCTION_NAMES[kernel])


def _flat(parts: Sequence[Any]) -> np.ndarray:
    return np.concatenate([np.asarray(p, dtype=np.float64).reshape(-1) for p in parts])


def _second(result: Any) -> np.ndarray:
    return np.array([float(result[1])])


def _scalar(result: Any) -> np.ndarray:
    return np.array([float(result)])


def _numba_versions() -> dict[str, str]:
    import numba

    return {"numba": numba.__version__, "numpy": np.__version__}


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


def _fd_spot(
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


def _setup_numba(kernel: str, data: dict[str, Any], contender: str) -> Setup:
    f = _numba_function(kernel)
    kernel = SERIAL_ROW.get(kernel, kernel)
    args = data["args"]
    versions = _numba_versions()
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

        return Setup(make=lambda: fd_jvp, derivative=_scalar, versions=versions)
    if kernel == "scalar":
        x = args[0]
        hx = 1e-6 * max(1.0, abs(x))
        return Setup(
            make=lambda: lambda: (f(x + hx) - f(x - hx)) / (2.0 * hx),
            derivative=_scalar,
            versions=versions,
        )
    diff = data["diff"]
    return Setup(
        make=lambda: lambda: _fd_gradient(f, args, diff),
        derivative=np.asarray,
        versions=versions,
    )


def _setup_enzyme(kernel: str, data: dict[str, Any], contender: str) -> Setup:
    import enzyme_py as ez

    if not ez.has_autodiff():
        raise ImportError(f"enzyme_py has no AD here: {ez.info()['reason']}")
    info = ez.info()
    versions = _numba_versions() | {
        "enzyme_py": str(getattr(ez, "__version__", "?")),
        "enzyme": str(info.get("enzyme_version")),
        "llvm": str(info.get("llvm_version")),
    }
    if contender in COMPILED_CONTENDERS:
        return _setup_compiled(kernel, data, contender, versions)
    f = _numba_function(kernel)
    kernel = SERIAL_ROW.get(kernel, kernel)
    args = data["args"]
    f(*args)  # the Numba primal is compiled before the baseline
    if kernel in ("rosenbrock", "gmm", "heat"):

        def make_grad() -> Callable[[], Any]:
            g = ez.grad(f, argnums=tuple(data["diff"]))
            return lambda: g(*args)

        return Setup(make=make_grad, derivative=_flat, versions=versions)
    if kernel == "nbody":
        pos, vel, mass, eps = args
        dpos, dvel = data["tangents"]
        if contender == "enzyme_py_jvp_helper":
            primals, tangents = (pos, vel, mass, eps), (dpos, dvel, None, None)
            return Setup(
                make=lambda: lambda: ez.jvp(f, primals, tangents),
                derivative=_second,
                value=lambda r: float(r[0]),
                versions=versions,
            )

        def make_jvp() -> Callable[[], Any]:
            df = ez.autodiff(f, ez.Forward, ez.Dual, ez.Dual, ez.Const, ez.Const, ez.Dual)
            return lambda: df(pos, dpos, vel, dvel, mass, eps)

        return Setup(
            make=make_jvp, derivative=_second, value=lambda r: float(r[0]), versions=versions
        )
    if kernel == "scalar":
        x = args[0]

        def make_scalar() -> Callable[[], Any]:
            if contender == "enzyme_py_forward":
                df = ez.autodiff(f, ez.Forward, ez.Dual, ez.Dual)
            else:
                df = ez.autodiff(f, ez.Reverse, ez.Active, ez.Active)
            return lambda: df(x, 1.0)

        return Setup(
            make=make_scalar, derivative=_second, value=lambda r: float(r[0]), versions=versions
        )
    raise ValueError(kernel)


def _setup_compiled(
    kernel: str, data: dict[str, Any], contender: str, versions: dict[str, str]
) -> Setup:
    """The Cython row: the kernel written in Cython (ez.cython) or in C (ez.c), as in
    benchmarks/cython_gradients.py; its primal (the function itself, called through
    enzyme_py; compiling the module is in its first call) or ``ez.grad`` of it (the
    module compiled before the baseline)."""
    import enzyme_py as ez
    from benchmarks import cython_gradients

    args = list(data["args"])
    if contender in ("cython_primal", "enzyme_py_cython"):
        import Cython  # an ImportError: skipped

        versions = versions | {"cython": str(Cython.__version__)}

        def module() -> Any:
            return ez.cython(cython_gradients.CYTHON_SOURCE)
    else:
        n = args[0].shape[0]  # C takes the lengths too
        args = [args[0], n] if kernel == "rosenbrock" else [args[0], args[1], n, args[2]]

        def module() -> Any:
            return ez.c(cython_gradients.C_SOURCE)

    name = FUNCTION_NAMES[kernel]
    if contender in OWN_PRIMAL.values():

        def make_primal() -> Callable[[], Any]:
            f = module()[name]
            return lambda: f(*args)

        return Setup(make=make_primal, versions=versions)
    f = module()[name]

    def make_grad() -> Callable[[], Any]:
        g = ez.grad(f, argnums=tuple(data["diff"]))
        return lambda: g(*args)

    return Setup(make=make_grad, derivative=_flat, versions=versions)


def _setup_jax(kernel: str, data: dict[str, Any], contender: str) -> Setup:
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
            derivative=_flat,
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
            make=make_jvp, derivative=_second, value=lambda r: float(r[0]), versions=versions
        )
    if kernel == "scalar":
        x = data["args"][0]
        value = jax.jit(f)

        def make_scalar() -> Callable[[], Any]:
            g = jax.jit(jax.grad(f))
            return lambda: float(g(x))

        return Setup(
            make=make_scalar,
            derivative=_scalar,
            value=lambda _: float(value(x)),
            versions=versions,
        )
    raise ValueError(kernel)


def _setup_torch(kernel: str, data: dict[str, Any], contender: str) -> Setup:
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
            derivative=lambda r: _flat([t.numpy() for t in r]),
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
            derivative=_second,
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
            derivative=_scalar,
            value=lambda _: float(f(torch.tensor(x, dtype=torch.float64))),
            versions=versions,
            notes=notes,
        )
    raise ValueError(kernel)


def _maxrss_mib(who: int = resource.RUSAGE_SELF) -> float:
    return resource.getrusage(who).ru_maxrss / 1024.0  # KiB on Linux


def _status_kib(key: str) -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return float(line.split()[1])
    except OSError:
        return None
    return None


def _reset_high_water_mark() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _malloc_trim() -> bool:
    """Hand the C heap's free memory back to the system (glibc's ``malloc_trim(0)``:
    the free pages of every arena, not only the top), so that a later call's
    temporaries are new pages, counted in ``VmHWM``, rather than reused ones."""
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        libc.malloc_trim(ctypes.c_size_t(0))
        return True
    except (OSError, AttributeError):
        return False


def _one_call_mib(call: Callable[[], Any]) -> float | None:
    """Memory one more call takes at its peak: freed memory handed back first
    (``_malloc_trim``), the high-water mark reset to the resident size, one call,
    then ``VmHWM`` minus ``VmRSS`` before the call. What the call's result keeps and
    its temporaries (a reverse pass's tape) are counted; what stays allocated between
    calls (inputs, compiled code, a library's own pools) is not."""
    _malloc_trim()
    if not _reset_high_water_mark():
        return None
    before = _status_kib("VmRSS")
    result = call()
    hwm = _status_kib("VmHWM")
    del result
    if before is None or hwm is None:
        return None
    return max(0.0, (hwm - before) / 1024.0)


def _enzyme_tape_mib() -> tuple[float, bool] | None:
    """The most Enzyme's tape held during this thread's last derivative call, MiB, and
    whether enzyme_py kept its stack for the next call (``_native.tape_bytes``: a
    stack of its own, not malloc's, whose memory stays reserved between calls up to
    256 MiB)."""
    try:
        from enzyme_py import _state

        _, reserved, last = _state.native.tape_bytes()
    except (ImportError, AttributeError):
        return None
    return last / 2**20, reserved > 0


def _time_calls(
    call: Callable[[], Any], estimate_s: float, timing: dict[str, float]
) -> tuple[list[float], int, Any]:
    """Per-call times of samples of `number` calls each, and the last call's result."""
    estimate_s = max(estimate_s, 1e-8)
    number = max(1, round(timing["sample_s"] / estimate_s))
    sample_s = number * estimate_s
    runs = int(min(timing["max_runs"], max(timing["min_runs"], timing["budget_s"] / sample_s)))
    samples = []
    result = None
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(number):
            result = call()
        samples.append((time.perf_counter() - start) / number)
    return samples, number, result


_SETUPS: dict[str, Callable[[str, dict[str, Any], str], Setup]] = {
    "numba": _setup_numba,
    "enzyme_py": _setup_enzyme,
    "jax": _setup_jax,
    "torch": _setup_torch,
}


def child_main(spec_path: str) -> int:
    """Run one contender of one kernel as ``spec`` says; write its JSON result."""
    spec = json.loads(Path(spec_path).read_text())
    out: dict[str, Any] = {"status": "ok"}
    try:
        disabled = apply_disable()
        library = CONTENDERS[spec["contender"]].library
        try:
            data = _inputs(spec["kernel"], spec["sizes"])
            setup = _SETUPS[library](spec["kernel"], data, spec["contender"])
        except ImportError as exc:
            why = f"{library} is not importable: {exc}"
            if library in disabled:
                why += " (BENCH_DISABLE)"
            Path(spec["result"]).write_text(json.dumps({"status": "skipped", "reason": why}))
            return 0
        out["versions"] = setup.versions
        out["notes"] = setup.notes
        baseline = _maxrss_mib()
        start = time.perf_counter()
        call = setup.make()
        result = call()
        out["first_call_s"] = time.perf_counter() - start
        memory: dict[str, Any] = {
            "baseline_maxrss_mib": baseline,
            "peak_first_call_mib": _maxrss_mib() - baseline,
        }
        if not spec.get("first_call_only"):
            start = time.perf_counter()
            call()  # warm-up
            estimate = time.perf_counter() - start
            reset = _reset_high_water_mark()
            rss_before = _status_kib("VmRSS")
            samples, number, result = _time_calls(call, estimate, spec["timing"])
            hwm = _status_kib("VmHWM")
            out["samples_s"] = samples
            out["number"] = number
            out["time_s"] = statistics.median(samples)
            # The reset of the high-water mark resets ru_maxrss too: the peak of the
            # whole measurement is the larger of the two readings.
            memory["peak_mib"] = max(memory["peak_first_call_mib"], _maxrss_mib() - baseline)
            memory["steady_peak_mib"] = (
                (hwm - rss_before) / 1024.0
                if reset and hwm is not None and rss_before is not None
                else None
            )
            # The least of 3 readings (page faults of other work in the process, such
            # as a library's background threads, only add).
            readings = [_one_call_mib(call) for _ in range(3)]
            pages = None if None in readings else min(r for r in readings if r is not None)
            memory["per_call_new_pages_mib"] = pages
            tape = _enzyme_tape_mib() if library == "enzyme_py" else None
            memory["tape_mib"] = tape
            # A tape kept between calls was resident before the call: not in its new
            # pages, so added; one given back after each call (above 256 MiB) was
            # faulted in anew: in them already.
            memory["per_call_mib"] = (
                None if pages is None else pages + (tape[0] if tape and tape[1] else 0.0)
            )
        if library == "enzyme_py":
            memory["enzyme_build_child_maxrss_mib"] = _maxrss_mib(resource.RUSAGE_CHILDREN)
        out["memory"] = memory
        arrays: dict[str, np.ndarray] = {}
        if setup.derivative is not None:
            arrays["derivative"] = setup.derivative(result)
        if setup.value is not None:
            out["value"] = setup.value(result)
        if spec.get("spot") and "diff" in data:
            f = _numba_function(spec["kernel"])
            arrays["spot_index"], arrays["spot_value"] = _fd_spot(f, data["args"], data["diff"])
        if arrays:
            np.savez(spec["npz"], **arrays)
    except Exception as exc:  # reported, not raised: the parent records the failure
        out = {
            "status": "error",
            "reason": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(),
        }
    Path(spec["result"]).write_text(json.dumps(out))
    return 0


def probe_main(library: str, result: str) -> int:
    """Import one optional library; write its version or why it cannot be imported."""
    disabled = apply_disable()
    try:
        if library == "jax":
            import jax

            version = {"jax": jax.__version__, "jaxlib": importlib.metadata.version("jaxlib")}
        elif library == "torch":
            import torch

            version = {"torch": torch.__version__}
        else:
            raise ValueError(library)
        answer: dict[str, Any] = {"ok": True, "versions": version}
    except ImportError as exc:
        why = f"{library} is not importable: {exc}"
        if library in disabled:
            why += " (BENCH_DISABLE)"
        answer = {"ok": False, "reason": why}
    Path(result).write_text(json.dumps(answer))
    return 0


# ----------------------------------------------------------------------------------
# Parent side.

_CONTROLLED = ("ENZYME_PY_CACHE_DIR", "ENZYME_PY_DISK_CACHE", "ENZYME_PY_ISOLATE", "ENZYME_PY_LOG")


def _child_env(cache_dir: Path, log: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _CONTROLLED}
    env["ENZYME_PY_CACHE_DIR"] = str(cache_dir)
    if log:
        env["ENZYME_PY_LOG"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
    )
    return env


def _derivative_sources(stderr: str) -> list[str]:
    """Where enzyme_py's log says each derivative came from, in order."""
    sources = []
    for line in stderr.splitlines():
        match = re.search(r": from (.+?) in [0-9.]+ ms", line)
        if match:
            sources.append(match.group(1))
    return sources


# Child processes running at once (``--jobs``); set by main.
_SLOTS = threading.Semaphore(1)


def _spawn(
    args: list[str], env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    with _SLOTS:
        return subprocess.run(
            [sys.executable, "-m", "benchmarks.suite", *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            timeout=timeout,
            check=False,
        )


def run_child(
    spec: dict[str, Any], work: Path, cache_dir: Path, timeout: float
) -> tuple[dict[str, Any], str]:
    """One child; its result (status 'error' if it died) and its stderr."""
    stage = "first" if spec.get("first_call_only") else "run"
    tag = f"{spec['kernel']}_{spec['contender']}_{stage}"
    spec = spec | {"result": str(work / f"{tag}.json"), "npz": str(work / f"{tag}.npz")}
    spec_path = work / f"{tag}.spec.json"
    spec_path.write_text(json.dumps(spec))
    log = CONTENDERS[spec["contender"]].library == "enzyme_py"
    started = time.perf_counter()
    try:
        proc = _spawn(["--child", str(spec_path)], _child_env(cache_dir, log), timeout)
        if os.environ.get("BENCH_VERBOSE"):
            took = time.perf_counter() - started
            print(f"[suite] {tag}: {took:.1f} s (incl. wait for a slot)", file=sys.stderr)
    except subprocess.TimeoutExpired:
        return {"status": "error", "reason": f"timed out after {timeout:.0f} s"}, ""
    result_path = Path(spec["result"])
    if proc.returncode != 0 or not result_path.is_file():
        tail = (proc.stdout + proc.stderr)[-2000:]
        return {
            "status": "error",
            "reason": f"child exited with code {proc.returncode}",
            "output": tail,
        }, proc.stderr
    result: dict[str, Any] = json.loads(result_path.read_text())
    npz = Path(spec["npz"])
    if npz.is_file():
        result["_npz"] = str(npz)
    return result, proc.stderr


def probe_libraries(work: Path, parallel: bool) -> dict[str, dict[str, Any]]:
    """Whether JAX and PyTorch import, each tried in a child process (not tried when
    ``BENCH_DISABLE`` names it or it is not installed at all)."""
    disabled = apply_disable()

    def probe(library: str) -> dict[str, Any]:
        if library in disabled:
            return {"ok": False, "reason": f"{library} is disabled (BENCH_DISABLE)"}
        try:
            installed = importlib.util.find_spec(library) is not None
        except (ImportError, ValueError) as exc:
            return {"ok": False, "reason": f"{library} is not importable: {exc}"}
        if not installed:
            return {"ok": False, "reason": f"{library} is not installed"}
        result = work / f"probe_{library}.json"
        env = _child_env(work / "probe_cache", log=False)
        try:
            proc = _spawn(["--probe", library, str(result)], env, timeout=300)
        except subprocess.TimeoutExpired:
            return {"ok": False, "reason": f"importing {library} timed out"}
        if proc.returncode != 0 or not result.is_file():
            return {"ok": False, "reason": f"probing {library} failed: {proc.stderr[-500:]}"}
        answer: dict[str, Any] = json.loads(result.read_text())
        return answer

    libraries = ("jax", "torch")
    return dict(zip(libraries, _map(probe, libraries, parallel), strict=True))


def _timing(quick: bool) -> dict[str, float]:
    if quick:
        return {"sample_s": 0.001, "budget_s": 0.02, "min_runs": 5, "max_runs": 20}
    return {"sample_s": 0.02, "budget_s": 1.0, "min_runs": 7, "max_runs": 50}


def _map(fn: Callable[[Any], Any], items: Sequence[Any], parallel: bool) -> list[Any]:
    """fn over items: in threads (each child still waits for a slot) or in order."""
    if not parallel or len(items) < 2:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=len(items)) as pool:
        return list(pool.map(fn, items))


def run_contender(
    kernel: Kernel,
    name: str,
    quick: bool,
    primal_time: float | None,
    libraries: dict[str, dict[str, Any]],
    enzyme_reason: str | None,
    work: Path,
    timeout: float,
) -> dict[str, Any]:
    """One contender of one kernel: its child process(es), or why it did not run."""
    contender = CONTENDERS[name]
    sizes = kernel.quick if quick else kernel.full
    entry: dict[str, Any]
    if contender.library in libraries and not libraries[contender.library]["ok"]:
        entry = {"status": "skipped", "reason": libraries[contender.library]["reason"]}
    elif contender.library == "enzyme_py" and enzyme_reason is not None:
        entry = {"status": "skipped", "reason": enzyme_reason}
    elif name == "finite_differences" and primal_time is None:
        entry = {"status": "skipped", "reason": "no primal time to size it by"}
    elif (
        name == "finite_differences"
        and (estimate := kernel.fd_evaluations(sizes) * (primal_time or 0.0)) > FD_BUDGET_S
    ):
        entry = {
            "status": "not_feasible",
            "reason": (
                f"{kernel.fd_evaluations(sizes)} primal evaluations, about "
                f"{_fmt_time(estimate)} per gradient (limit {_fmt_time(FD_BUDGET_S)})"
            ),
            "estimate_s": estimate,
        }
    else:
        cache_dir = work / f"cache_{kernel.name}_{name}"
        spec = {
            "kernel": kernel.name,
            "sizes": sizes,
            "timing": _timing(quick),
            "contender": name,
            "spot": name == "numba_primal",
        }
        entry, stderr = run_child(spec, work, cache_dir, timeout)
        if contender.library == "enzyme_py" and entry["status"] == "ok":
            entry["first_call_sources"] = _derivative_sources(stderr)
            # A new process on the same (now filled) disk cache.
            again, stderr2 = run_child(spec | {"first_call_only": True}, work, cache_dir, timeout)
            entry["compile_new_process"] = {
                "status": again["status"],
                "first_call_s": again.get("first_call_s"),
                "sources": _derivative_sources(stderr2),
                **({"reason": again["reason"]} if "reason" in again else {}),
            }
    entry["label"] = contender.label
    entry["library"] = contender.library
    primal = name == "numba_primal" or name in OWN_PRIMAL.values()
    entry["role"] = "primal" if primal else "derivative"
    return entry


def run_kernel(
    kernel: Kernel,
    quick: bool,
    libraries: dict[str, dict[str, Any]],
    enzyme_reason: str | None,
    work: Path,
    timeout: float,
    parallel: bool,
) -> dict[str, Any]:
    """Every contender of one kernel: the primal first (it sizes finite differences),
    then the others."""
    sizes = kernel.quick if quick else kernel.full

    def one(name: str, primal_time: float | None = None) -> dict[str, Any]:
        return run_contender(
            kernel, name, quick, primal_time, libraries, enzyme_reason, work, timeout
        )

    primal = one("numba_primal")
    primal_time = primal.get("time_s") if primal["status"] == "ok" else None
    rest = [n for n in kernel.contenders if n != "numba_primal"]
    entries = _map(lambda n: one(n, primal_time), rest, parallel)
    return {
        "title": kernel.title(sizes),
        "derivative": kernel.derivative,
        "sizes": sizes,
        "enzyme_reference": kernel.enzyme_reference,
        "contenders": {"numba_primal": primal} | dict(zip(rest, entries, strict=True)),
    }


def _load(entry: dict[str, Any], key: str) -> np.ndarray | None:
    path = entry.get("_npz")
    if not path:
        return None
    with np.load(path) as data:
        return data[key] if key in data.files else None


def add_checks(kernel: Kernel, result: dict[str, Any]) -> list[str]:
    """Compare each derivative with another contender's and each value with the
    Numba primal's; returns the failures."""
    entries = result["contenders"]
    failures: list[str] = []
    derivatives = {
        name: d
        for name, e in entries.items()
        if e["status"] == "ok" and (d := _load(e, "derivative")) is not None
    }
    primal = entries.get("numba_primal", {})
    spot_index = _load(primal, "spot_index") if primal.get("status") == "ok" else None
    spot_value = _load(primal, "spot_value") if primal.get("status") == "ok" else None
    primal_value = primal.get("value")
    for name, entry in entries.items():
        if entry["role"] != "derivative" or entry["status"] != "ok":
            continue
        if name.startswith("enzyme_py"):
            order = ["jax", "torch", "finite_differences"]
        else:
            order = [kernel.enzyme_reference, "jax", "torch", "finite_differences"]
        reference = next((r for r in order if r != name and r in derivatives), None)
        fd_involved = name == "finite_differences" or reference == "finite_differences"
        check: dict[str, Any]
        if name not in derivatives:
            check = {"against": None, "max_rel_error": None, "tolerance": None}
        elif reference is not None:
            check = {
                "against": reference,
                "max_rel_error": relative_error(derivatives[name], derivatives[reference]),
                "tolerance": FD_TOLERANCE if fd_involved else AD_TOLERANCE,
            }
        elif spot_index is not None and spot_value is not None and spot_index.size:
            check = {
                "against": f"finite differences at {spot_index.size} sampled inputs",
                "max_rel_error": relative_error(derivatives[name][spot_index], spot_value),
                "tolerance": FD_TOLERANCE,
            }
        else:
            check = {"against": None, "max_rel_error": None, "tolerance": None}
        error = check["max_rel_error"]
        check["ok"] = error is not None and math.isfinite(error) and error <= check["tolerance"]
        if not check["ok"]:
            failures.append(f"{kernel.name}/{name}: derivative check {check}")
        entry["check"] = check
        if "value" in entry and primal_value is not None:
            value_error = relative_error(np.array([entry["value"]]), np.array([primal_value]))
            entry["value_check"] = {
                "against": "numba_primal",
                "rel_error": value_error,
                "tolerance": VALUE_TOLERANCE,
                "ok": value_error <= VALUE_TOLERANCE,
            }
            if value_error > VALUE_TOLERANCE:
                failures.append(f"{kernel.name}/{name}: value differs by {value_error:.2e}")
    for name, entry in entries.items():
        entry.pop("_npz", None)
        if entry["status"] == "error":
            failures.append(f"{kernel.name}/{name}: {entry.get('reason')}")
    return failures


def add_ratios(kernel: Kernel, result: dict[str, Any]) -> None:
    entries = result["contenders"]
    primal = entries.get("numba_primal", {})
    primal_time = primal.get("time_s") if primal.get("status") == "ok" else None
    enzyme = entries.get(kernel.enzyme_reference, {})
    enzyme_time = enzyme.get("time_s") if enzyme.get("status") == "ok" else None
    result["primal_s"] = primal_time
    for entry in entries.values():
        t = entry.get("time_s") if entry["status"] == "ok" else None
        if t is None:
            continue
        entry["over_primal"] = t / primal_time if primal_time else None
        entry["enzyme_py_over_this"] = enzyme_time / t if enzyme_time else None
    for name, own in OWN_PRIMAL.items():  # the Cython row: gradient / its own primal
        t, p = (entries.get(n, {}) for n in (name, own))
        if t.get("status") == "ok" and p.get("status") == "ok":
            t["over_own_primal"] = t["time_s"] / p["time_s"]


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _numba_threads() -> int | str:
    try:
        import numba

        return int(numba.config.NUMBA_NUM_THREADS)
    except ImportError:
        return "?"


def _load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def environment(
    libraries: dict[str, dict[str, Any]], quick: bool, load_at_start: float | None
) -> dict[str, Any]:
    import enzyme_py as ez

    info = ez.info()
    cores = os.cpu_count() or 1
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        usable = cores
    versions: dict[str, Any] = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": _version("numba"),
        "enzyme_py": getattr(ez, "__version__", None),
        "enzyme": info.get("enzyme_version"),
        "llvm": info.get("llvm_version"),
    }
    for library, answer in libraries.items():
        if answer["ok"]:
            versions |= answer["versions"]
        else:
            versions[library] = f"skipped ({answer['reason']})"
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "quick": quick,
        "cpu": _cpu_model(),
        "machine": platform.machine(),
        "platform": platform.platform(),
        "cpu_count": cores,
        "usable_cores": usable,
        "versions": versions,
        "threads": (
            "Numba and enzyme_py: 1 thread (the prange rows' Numba primal: Numba's "
            f"{_numba_threads()} threads); PyTorch: torch.set_num_threads("
            f"{cores}); JAX: XLA CPU client defaults (all cores)"
        ),
        "enzyme_py_ad": bool(info.get("autodiff")),
        "load_average_1min": {"start": load_at_start, "end": _load_average()},
    }


# ----------------------------------------------------------------------------------
# Reports.


def _fmt_time(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-"
    if seconds >= 1.0:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    if seconds >= 1e-6:
        return f"{seconds * 1e6:.3g} µs"
    return f"{seconds * 1e9:.3g} ns"


def _fmt_ratio(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:.3g}"


def _fmt_load(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _fmt_mib(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _sources_text(sources: list[str]) -> str:
    """'Enzyme (isolated) x3, disk cache' from the log's list of derivative sources."""
    counts: dict[str, int] = {}
    for source in sources:
        counts[source] = counts.get(source, 0) + 1
    return ", ".join(f"{s} x{n}" if n > 1 else s for s, n in counts.items()) or "-"


def markdown(results: dict[str, Any]) -> str:
    env = results["environment"]
    v = env["versions"]
    load = env["load_average_1min"]
    busy = (
        " (other processes were running: times, above all multi-threaded JAX and PyTorch "
        "ones, are disturbed)"
        if (load["start"] or 0.0) > 0.5
        else ""
    )
    version_text = ", ".join(f"{k} {val}" for k, val in v.items() if val is not None)
    lines = [
        "# enzyme_py against JAX, PyTorch and finite differences",
        "",
        f"- date: {env['date']}{' (--quick: tiny sizes)' if env['quick'] else ''}",
        f"- machine: {env['cpu']} ({env['machine']}), {env['cpu_count']} cores "
        f"({env['usable_cores']} usable), {env['platform']}",
        f"- versions: {version_text}",
        f"- threads: {env['threads']}",
        f"- load average (1 min) before the run: {_fmt_load(load['start'])}{busy}; at the "
        f"end (the suite's own children included): {_fmt_load(load['end'])}",
        "",
        "Times are medians of at least 5 samples after warm-up, per derivative (or primal) "
        "call. `/ primal`: time / Numba primal time (the Cython and C rows: `(r own)`, "
        "gradient time / the same kernel's Cython or C primal time). `enzyme_py / this`: "
        "enzyme_py's time (reverse; forward for the JVP) / this contender's (< 1: "
        "enzyme_py is faster). "
        "`first call`: the first call in a fresh process (tracing, compiling). "
        "`MiB per call`: the resident memory one more call takes at its peak, after the "
        "C heap's free memory was handed back (`malloc_trim`) and the high-water mark "
        "reset: its result and temporaries, in the contender's own process, plus for "
        "enzyme_py the most its tape stack held (kept between calls). `peak MiB`: "
        "ru_maxrss growth of that process over its baseline, first call (compiling) "
        "included. `error`: max |a - b| / max |b| against the contender named.",
        "",
        "| kernel | contender | time | / primal | enzyme_py / this | first call | "
        "MiB per call | peak MiB | checked against | error |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for k in results["kernels"].values():
        title = f"**{k['title']}**: {k['derivative']}"
        for e in k["contenders"].values():
            label = e["label"]
            if e["status"] != "ok":
                lines.append(
                    f"| {title} | {label} | {e['status'].replace('_', ' ')}: {e['reason']} "
                    "| | | | | | | |"
                )
                title = ""
                continue
            mem = e.get("memory", {})
            check = e.get("check", {})
            against = check.get("against") or ("(reference)" if e["role"] == "primal" else "-")
            error = check.get("max_rel_error")
            error_text = "-" if error is None else f"{error:.1e}"
            if check and not check.get("ok"):
                error_text += " FAILED"
            vc = e.get("value_check")
            if vc is not None:
                error_text += f" (value {vc['rel_error']:.0e})"
            cells = [
                title,
                label,
                _fmt_time(e["time_s"]),
                _fmt_ratio(e.get("over_primal"))
                + (f" ({_fmt_ratio(e['over_own_primal'])} own)" if "over_own_primal" in e else ""),
                _fmt_ratio(e.get("enzyme_py_over_this")),
                _fmt_time(e.get("first_call_s")),
                _fmt_mib(mem.get("per_call_mib")),
                _fmt_mib(mem.get("peak_mib")),
                against,
                error_text,
            ]
            lines.append("| " + " | ".join(cells) + " |")
            title = ""
    lines += [
        "",
        "## enzyme_py first-call latency",
        "",
        "First derivative call in a fresh process (the Numba primal already compiled): "
        "with an empty disk cache, and in a second new process with that cache filled. "
        "`from`: where enzyme_py's log (`ENZYME_PY_LOG=1`) says each derivative requested "
        "in that process came from (the first process also made the timed calls: a "
        "count above 1 means derivatives were built again for later calls).",
        "",
        "| kernel | contender | empty disk cache | from | filled disk cache, new process | from |",
        "|---|---|---:|---|---:|---|",
    ]
    for k in results["kernels"].values():
        for e in k["contenders"].values():
            if e["library"] != "enzyme_py" or e["status"] != "ok":
                continue
            again = e.get("compile_new_process", {})
            lines.append(
                f"| {k['title']} | {e['label']} | {_fmt_time(e.get('first_call_s'))} "
                f"| {_sources_text(e.get('first_call_sources', []))} "
                f"| {_fmt_time(again.get('first_call_s'))} "
                f"| {_sources_text(again.get('sources', [])) or again.get('reason', '-')} |"
            )
    if results["failures"]:
        lines += ["", "## Failures", ""] + [f"- {f}" for f in results["failures"]]
    lines += [
        "",
        "Method: the docstring of `benchmarks/suite.py` "
        "(each contender in its own child process; per-call memory = that child's "
        "VmHWM during one call minus its VmRSS before it, after malloc_trim; peak = "
        "ru_maxrss of that child minus its ru_maxrss once it had imported its libraries "
        "and built its inputs).",
    ]
    return "\n".join(lines) + "\n"


def chart(results: dict[str, Any], path: Path) -> str | None:
    """Bar chart of derivative time / primal time; returns why not, if not written."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        return f"matplotlib is not importable: {exc}"
    kernels = list(results["kernels"].values())
    names = [n for n in CONTENDERS if n != "numba_primal" and n not in OWN_PRIMAL.values()]
    present = [
        n
        for n in names
        if any(k["contenders"].get(n, {}).get("over_primal") is not None for k in kernels)
    ]
    fig, ax = plt.subplots(figsize=(max(8.0, 2.2 * len(kernels)), 5.0))
    width = 0.8 / max(1, len(present))
    for j, name in enumerate(present):
        xs, ys = [], []
        for i, k in enumerate(kernels):
            ratio = k["contenders"].get(name, {}).get("over_primal")
            if ratio is not None and ratio > 0:
                xs.append(i - 0.4 + width * (j + 0.5))
                ys.append(ratio)
        bars = ax.bar(xs, ys, width=width, label=CONTENDERS[name].label)
        ax.bar_label(bars, labels=[f"{y:.3g}" for y in ys], fontsize=6, padding=1)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(kernels)))
    ax.set_xticklabels([k["title"] for k in kernels], rotation=15, ha="right", fontsize=8)
    ax.set_ylabel("derivative time / Numba primal time")
    quick = " (--quick)" if results["environment"]["quick"] else ""
    ax.set_title(f"Derivative cost relative to the primal{quick}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None


# ----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="enzyme_py against JAX, PyTorch and finite differences on its kernels",
        epilog="The method is described in the docstring of benchmarks/suite.py.",
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes: runs in seconds")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="results folder")
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="child processes at the same time (default: 1; 2 with --quick)",
    )
    parser.add_argument("--only", default="", help="comma-separated kernel names")
    parser.add_argument("--timeout", type=float, default=600.0, help="per child, seconds")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--probe", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child_main(args.child)
    if args.probe:
        return probe_main(*args.probe)

    apply_disable()
    selected = [k.strip() for k in args.only.split(",") if k.strip()] or list(KERNELS)
    unknown = [k for k in selected if k not in KERNELS]
    if unknown:
        parser.error(f"unknown kernel(s) {unknown}; choose from {list(KERNELS)}")
    jobs = args.jobs or (min(2, os.cpu_count() or 1) if args.quick else 1)

    import enzyme_py as ez

    enzyme_reason = None if ez.has_autodiff() else f"enzyme_py has no AD: {ez.info()['reason']}"
    global _SLOTS
    _SLOTS = threading.Semaphore(jobs)
    parallel = jobs > 1
    started = time.perf_counter()
    load_at_start = _load_average()
    work = Path(tempfile.mkdtemp(prefix="enzyme_py_suite_"))
    try:
        libraries = probe_libraries(work, parallel)

        def one(name: str) -> dict[str, Any]:
            return run_kernel(
                KERNELS[name], args.quick, libraries, enzyme_reason, work, args.timeout, parallel
            )

        kernel_results = dict(zip(selected, _map(one, selected, parallel), strict=True))
        failures: list[str] = []
        for name, result in kernel_results.items():
            failures += add_checks(KERNELS[name], result)
            add_ratios(KERNELS[name], result)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    results: dict[str, Any] = {
        "benchmark": "suite",
        "environment": environment(libraries, args.quick, load_at_start),
        "tolerances": {"ad": AD_TOLERANCE, "fd": FD_TOLERANCE, "value": VALUE_TOLERANCE},
        "kernels": kernel_results,
        "failures": failures,
        "wall_s": time.perf_counter() - started,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    no_chart = chart(results, args.out / "suite.png")
    results["chart"] = "suite.png" if no_chart is None else f"not written: {no_chart}"
    (args.out / "suite.json").write_text(json.dumps(results, indent=2) + "\n")
    table = markdown(results)
    (args.out / "suite.md").write_text(table)
    print(table, end="")
    written = ["suite.json", "suite.md"] + (["suite.png"] if no_chart is None else [])
    print(f"\nwritten to {args.out}: {', '.join(written)} ({results['wall_s']:.0f} s)")
    if failures:
        print("FAILURES:\n" + "\n".join(failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
