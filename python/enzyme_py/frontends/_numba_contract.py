"""A Numba function's array result contracted with weights: ``sum(f(*args) * weights)``.

Second derivatives of a function returning an array (``ez.hessian(f)`` for f: R^n ->
R^m, ``jacfwd(jacrev(f))``) are, output by output, second derivatives of a scalar
function: the Hessian of f's output k is the Hessian of ``<e_k, f(x)>``. This module
makes that scalar function as an ``@njit`` function of f's parameters and the weights,
calling f (its serial twin for a ``parallel=True`` f, which is what enzyme_py
differentiates of it), so the helpers' machinery for scalar functions applies. Enzyme
differentiates the call through f's body: nothing of f is approximated.
"""

from __future__ import annotations

import keyword
import weakref
from typing import Any

from enzyme_py.frontends._numba_compile import serial_options

__all__ = ["contracted"]

_made: weakref.WeakKeyDictionary[Any, dict[int, Any]] = weakref.WeakKeyDictionary()


def contracted(dispatcher: Any, arity: int) -> Any:
    """``g(a0, ..., a{arity-1}, weights) = np.sum(f(a0, ...) * weights)`` for Numba
    dispatcher f returning an array, made once per f and arity. ``g`` bears f's name,
    so that errors from differentiating it name the function the user wrote."""
    import numba
    import numpy as np

    by_arity = _made.setdefault(dispatcher, {})
    found = by_arity.get(arity)
    if found is not None:
        return found
    name = dispatcher.py_func.__name__
    if not name.isidentifier() or keyword.iskeyword(name) or name in ("f", "np"):
        name = "contracted"
    params = ", ".join(f"a{i}" for i in range(arity))
    # A loop, not np.sum(f(...) * weights): no temporary product array, whose shadow's
    # zeroing the derivative vectorises into stores Enzyme cannot type when it
    # differentiates that derivative again.
    source = (
        f"def {name}({params}{', ' if params else ''}weights):\n"
        f"    values = f({params}).ravel()\n"
        "    flat = weights.ravel()\n"
        "    total = 0.0\n"
        "    for k in range(values.shape[0]):\n"
        "        total += values[k] * flat[k]\n"
        "    return total\n"
    )
    namespace: dict[str, Any] = {"np": np, "f": _inlined_twin(dispatcher)}
    exec(compile(source, f"<enzyme_py contraction of {name}>", "exec"), namespace)
    made = numba.njit(namespace[name])
    by_arity[arity] = made
    return made


def _inlined_twin(dispatcher: Any) -> Any:
    """f's twin that Numba inlines where it is called (``inline="always"``), serial: the
    contraction's IR then holds f's body as enzyme_py's own compile makes it, not the
    fully optimised (vectorised) code of a separate compile of f, whose vector stores
    Enzyme's type analysis cannot follow when a derivative is differentiated again."""
    import numba

    return numba.njit(**{**serial_options(dispatcher), "inline": "always"})(dispatcher.py_func)
