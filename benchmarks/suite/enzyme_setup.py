"""enzyme_py's contenders: on the Numba kernels, and the Cython row (ez.cython, ez.c)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks.suite.setups import (
    FUNCTION_NAMES,
    Setup,
    flatten,
    numba_function,
    numba_versions,
    second_value,
)
from benchmarks.suite.table import COMPILED_CONTENDERS, OWN_PRIMAL, SERIAL_ROW


def setup_enzyme(kernel: str, data: dict[str, Any], contender: str) -> Setup:
    import enzyme_py as ez

    if not ez.has_autodiff():
        raise ImportError(f"enzyme_py has no AD here: {ez.info()['reason']}")
    info = ez.info()
    versions = numba_versions() | {
        "enzyme_py": str(getattr(ez, "__version__", "?")),
        "enzyme": str(info.get("enzyme_version")),
        "llvm": str(info.get("llvm_version")),
    }
    if contender in COMPILED_CONTENDERS:
        return _setup_compiled(kernel, data, contender, versions)
    f = numba_function(kernel)
    kernel = SERIAL_ROW.get(kernel, kernel)
    args = data["args"]
    f(*args)  # the Numba primal is compiled before the baseline
    if contender == "enzyme_py_threads":
        return _setup_threads(f, args, tuple(data["diff"]), versions)
    if kernel in ("rosenbrock", "gmm", "heat"):

        def make_grad() -> Callable[[], Any]:
            g = ez.grad(f, argnums=tuple(data["diff"]))
            return lambda: g(*args)

        return Setup(make=make_grad, derivative=flatten, versions=versions)
    if kernel == "nbody":
        pos, vel, mass, eps = args
        dpos, dvel = data["tangents"]
        if contender == "enzyme_py_jvp_helper":
            primals, tangents = (pos, vel, mass, eps), (dpos, dvel, None, None)
            return Setup(
                make=lambda: lambda: ez.jvp(f, primals, tangents),
                derivative=second_value,
                value=lambda r: float(r[0]),
                versions=versions,
            )

        def make_jvp() -> Callable[[], Any]:
            df = ez.autodiff(f, ez.Forward, ez.Dual, ez.Dual, ez.Const, ez.Const, ez.Dual)
            return lambda: df(pos, dpos, vel, dvel, mass, eps)

        return Setup(
            make=make_jvp, derivative=second_value, value=lambda r: float(r[0]), versions=versions
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
            make=make_scalar,
            derivative=second_value,
            value=lambda r: float(r[0]),
            versions=versions,
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

    return Setup(make=make_grad, derivative=flatten, versions=versions)


def _setup_threads(
    f: Any, args: list[Any], diff: tuple[int, ...], versions: dict[str, str]
) -> Setup:
    """The prange rows' reverse derivative with its loops on every core: what ez.grad
    computes, from ``ez.autodiff(..., threads=os.cpu_count())`` with fresh zeroed
    shadows each call (as ez.grad returns fresh gradients)."""
    import os

    import numpy as np

    import enzyme_py as ez

    activities = [ez.Duplicated if i in diff else ez.Const for i in range(len(args))]
    threads = os.cpu_count() or 1

    def make() -> Callable[[], Any]:
        df = ez.autodiff(f, ez.Reverse, *activities, ez.ActiveOnly, threads=threads)

        def call() -> tuple[Any, ...]:
            shadows = {i: np.zeros_like(args[i]) for i in diff}
            flat: list[Any] = []
            for i, a in enumerate(args):
                flat.append(a)
                if i in shadows:
                    flat.append(shadows[i])
            df(*flat, 1.0)
            return tuple(shadows[i] for i in diff)

        return call

    return Setup(make=make, derivative=flatten, versions=versions | {"threads": str(threads)})
