"""Scalar or single-result functions made of a Numba function's result: its array
result contracted with weights (``sum(f(*args) * weights)``), or the first part of a
pair it returns (``f(*args)[0]``, for ``has_aux``).

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

__all__ = ["contracted", "first_part"]

_made: weakref.WeakKeyDictionary[Any, dict[tuple[str, int], Any]] = weakref.WeakKeyDictionary()


def contracted(dispatcher: Any, arity: int) -> Any:
    """``g(a0, ..., a{arity-1}, weights) = np.sum(f(a0, ...) * weights)`` for Numba
    dispatcher f returning an array, made once per f and arity."""
    params = ", ".join(f"a{i}" for i in range(arity))
    # A loop, not np.sum(f(...) * weights): no temporary product array, whose shadow's
    # zeroing the derivative vectorises into stores Enzyme cannot type when it
    # differentiates that derivative again.
    body = (
        f"    values = _target({params}).ravel()\n"
        "    flat = weights.ravel()\n"
        "    total = 0.0\n"
        "    for k in range(values.shape[0]):\n"
        "        total += values[k] * flat[k]\n"
        "    return total\n"
    )
    return _made_of(dispatcher, "contracted", arity, [*_params(arity), "weights"], body)


def first_part(dispatcher: Any, arity: int) -> Any:
    """``g(a0, ..., a{arity-1}) = f(a0, ...)[0]`` for Numba dispatcher f returning a
    tuple, made once per f and arity (f inlined, as for ``contracted``)."""
    params = ", ".join(_params(arity))
    return _made_of(
        dispatcher, "first", arity, _params(arity), f"    return _target({params})[0]\n"
    )


# Names the generated bodies use.
_TAKEN = frozenset({"_target", "np", "values", "flat", "total", "k", "weights"})


def _params(arity: int) -> list[str]:
    return [f"a{i}" for i in range(arity)]


def _made_of(dispatcher: Any, kind: str, arity: int, params: list[str], body: str) -> Any:
    """An @njit function of ``params`` with ``body``, in which ``_target`` is the dispatcher
    (inlined) and ``np`` NumPy; named as f is, so that errors from differentiating it
    name the function the user wrote. Made once per dispatcher, kind and arity."""
    import numba
    import numpy as np

    made = _made.setdefault(dispatcher, {})
    found = made.get((kind, arity))
    if found is not None:
        return found
    name = dispatcher.py_func.__name__
    if not name.isidentifier() or keyword.iskeyword(name) or name in _TAKEN or name in params:
        name = kind
    source = f"def {name}({', '.join(params)}):\n{body}"
    namespace: dict[str, Any] = {"np": np, "_target": _inlined_twin(dispatcher)}
    exec(compile(source, f"<enzyme_py {kind} of {name}>", "exec"), namespace)
    made[(kind, arity)] = function = numba.njit(namespace[name])
    return function


def _inlined_twin(dispatcher: Any) -> Any:
    """f's twin that Numba inlines where it is called (``inline="always"``), serial: the
    contraction's IR then holds f's body as enzyme_py's own compile makes it, not the
    fully optimised (vectorised) code of a separate compile of f, whose vector stores
    Enzyme's type analysis cannot follow when a derivative is differentiated again."""
    import numba

    return numba.njit(**{**serial_options(dispatcher), "inline": "always"})(dispatcher.py_func)
