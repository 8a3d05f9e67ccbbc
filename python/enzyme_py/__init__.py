"""enzyme_py: exact, fast derivatives of numerical code with Enzyme, in-process.

    import enzyme_py as ez
    df = ez.autodiff(f, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)

Without AD (built with ENZYME_PY_AD=OFF, ENZYME_PY_DISABLE=1, or the Enzyme plugin
missing) the same names exist and every AD call raises EnzymeUnavailableError.
"""

from __future__ import annotations

from enzyme_py import _state, offload
from enzyme_py._info import has_autodiff, info
from enzyme_py._version import __version__
from enzyme_py.core import (
    MAX_WIDTH,
    Active,
    ActiveOnly,
    Activity,
    ActivityError,
    CompileError,
    CompilerWarning,
    Const,
    Dual,
    DualOnly,
    Duplicated,
    DuplicatedOnly,
    EnzymeError,
    EnzymeUnavailableError,
    Forward,
    GradientCheckWarning,
    Mode,
    PerformanceWarning,
    Reverse,
    ReverseSplit,
)

if _state.native is not None:
    from enzyme_py import _translations  # noqa: F401  (the frontends' disk cache)
    from enzyme_py._api import autodiff
    from enzyme_py._gradcheck import check_grad
    from enzyme_py.frontends import _numba_cpu, c, cpp, llvm_ir
    from enzyme_py.frontends.cython import cython
    from enzyme_py.helpers import (
        grad,
        hessian,
        hvp,
        jacfwd,
        jacobian,
        jacrev,
        jvp,
        value_and_grad,
        vjp,
    )
    from enzyme_py.rules import clear_rules, register_derivative, register_gradient

    # Before the user's Numba code compiles, where possible (frontends/_numba_cpu.py).
    _numba_cpu.plan_for_named_cpu(*_state.native.host()[:3])
else:
    from enzyme_py._stub import (  # type: ignore[assignment]
        autodiff,
        c,
        check_grad,
        clear_rules,
        cpp,
        cython,
        grad,
        hessian,
        hvp,
        jacfwd,
        jacobian,
        jacrev,
        jvp,
        llvm_ir,
        register_derivative,
        register_gradient,
        value_and_grad,
        vjp,
    )


def __getattr__(name: str) -> object:
    # The bridges import torch / jax: only when asked for.
    if name in ("torch", "jax"):
        import importlib

        return importlib.import_module(f"enzyme_py.{name}")
    raise AttributeError(f"module 'enzyme_py' has no attribute {name!r}")


__all__ = [
    "MAX_WIDTH",
    "Active",
    "ActiveOnly",
    "Activity",
    "ActivityError",
    "CompileError",
    "CompilerWarning",
    "Const",
    "Dual",
    "DualOnly",
    "Duplicated",
    "DuplicatedOnly",
    "EnzymeError",
    "EnzymeUnavailableError",
    "Forward",
    "GradientCheckWarning",
    "Mode",
    "PerformanceWarning",
    "Reverse",
    "ReverseSplit",
    "__version__",
    "autodiff",
    "c",
    "check_grad",
    "clear_rules",
    "cpp",
    "cython",
    "grad",
    "has_autodiff",
    "hessian",
    "hvp",
    "info",
    "jacfwd",
    "jacobian",
    "jacrev",
    "jvp",
    "llvm_ir",
    "offload",
    "register_derivative",
    "register_gradient",
    "value_and_grad",
    "vjp",
]
