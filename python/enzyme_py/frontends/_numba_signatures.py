"""Which Numba signature a derivative is built for, and what it returns.

Numba types each call; a dispatcher compiled for explicit signatures compiles no more,
so a call's types are mapped onto a signature it has (``resolve_signature``). Unsigned
integers are refused before anything compiles (entry points pass signed integers), and
a write into a read-only array is a TypeError naming the parameter.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "argument_kind",
    "compile_if_missing",
    "refuse_unsigned",
    "resolve_signature",
    "returns_arrays",
    "returns_value",
]


def argument_kind(a: Any) -> Any:
    """What of a call argument picks a specialisation, cheaply: an array's dtype, rank,
    layout and writability; a scalar's type; a Numba function passed as an argument
    itself (Numba compiles the caller for that very function, so two functions passed
    in turn are two specialisations)."""
    if isinstance(a, np.ndarray):
        return (a.dtype.num, a.ndim, a.flags.c_contiguous, a.flags.f_contiguous, a.flags.writeable)
    kind = type(a)
    return a if kind.__module__.startswith("numba") else kind


def compile_if_missing(dispatcher: Any, signature: tuple[Any, ...]) -> None:
    """Numba's compile of ``signature``, unless the dispatcher has it: one given
    explicit signatures (``@njit("float64(float64[::1])")``) refuses to compile more,
    even one it has."""
    if tuple(signature) in dispatcher.overloads:
        return
    if not getattr(dispatcher, "_can_compile", True):
        name = dispatcher.py_func.__name__
        known = ", ".join(str(s) for s in dispatcher.signatures)
        got = ", ".join(str(t) for t in signature)
        raise TypeError(
            f"'{name}' was compiled for explicit signatures only ({known}), not for these "
            f"argument types ({got}): pass arguments of those types"
        )
    from numba.core import errors, types

    try:
        dispatcher.compile(signature)
    except errors.TypingError as exc:
        names = list(inspect.signature(dispatcher.py_func).parameters)
        read_only = [
            f"'{name}'"
            for name, numba_type in zip(names, signature, strict=False)
            if isinstance(numba_type, types.Array) and not numba_type.mutable
        ]
        if not read_only or "readonly array" not in str(exc):
            raise  # callers that ask about other arguments next catch it
        which = ", ".join(read_only)
        raise TypeError(
            f"'{dispatcher.py_func.__name__}' writes into a read-only array: parameter "
            f"{which} {'was' if len(read_only) == 1 else 'were'} given one (Numba: Cannot "
            "modify readonly array); pass a writable array (a copy, np.array(a))"
        ) from None


# The lines of Numba's typing errors that say where, not what.
_NUMBA_FRAMING = ("Failed in ", "- Resolution failure", "During:", "File ", "^")


def numba_reason(text: str) -> str:
    """The line of a Numba typing error that says what failed (``reshape() supports
    contiguous array only``), not the pass or the place it failed in."""
    lines = [line.strip() for line in text.strip().splitlines()]
    for line in lines:
        if line and not line.startswith(_NUMBA_FRAMING):
            return line
    return lines[-1] if lines else ""


def does_not_compile(dispatcher: Any, signature: Sequence[Any], exc: Exception) -> TypeError:
    """The error for a Numba function that does not compile for ``signature`` (Numba's
    TypingError): each parameter with its type, Numba's reason, and for views of
    arrays what to pass instead."""
    from numba.core import types

    names = list(inspect.signature(dispatcher.py_func).parameters)
    listed = ", ".join(f"'{n}': {t}" for n, t in zip(names, signature, strict=False))
    views = any(isinstance(t, types.Array) and t.layout != "C" for t in signature)
    hint = (
        " (code written for contiguous arrays, such as x.reshape(...), does not "
        "compile for views: np.ascontiguousarray(...) of the views)"
        if views
        else ""
    )
    return TypeError(
        f"'{dispatcher.py_func.__name__}' does not compile for the types of these "
        f"arguments (parameters {listed}): pass arguments of the types it is written "
        f"for{hint} (Numba: {numba_reason(str(exc))[:300]})"
    )


def refuse_unsigned(dispatcher: Any, signature: tuple[Any, ...]) -> None:
    """Entry points pass signed integers; an unsigned one would be passed reinterpreted
    (a negative count as a huge one): refused before anything is compiled."""
    from numba.core import types

    names = list(inspect.signature(dispatcher.py_func).parameters)
    for arg_name, numba_type in zip(names, signature, strict=False):
        if isinstance(numba_type, types.Integer) and not numba_type.signed:
            raise TypeError(
                f"parameter '{arg_name}' of '{dispatcher.py_func.__name__}' is an unsigned "
                f"integer ({numba_type}); enzyme_py passes signed integers: pass a Python "
                f"int or a signed NumPy integer (np.int64({arg_name}))"
            )


def resolve_signature(dispatcher: Any, types: tuple[Any, ...]) -> tuple[Any, ...]:
    """The argument types to differentiate for calls with arguments of ``types``: those
    types, or, for a dispatcher compiled for explicit signatures only (which compiles
    no more), the first of its signatures that takes them the way Numba's own dispatch
    would without losing precision (a C-contiguous or read-only array for a
    ``float64[:]`` parameter, an int for a float)."""
    from numba.core.typeconv import Conversion

    types = tuple(types)
    refuse_unsigned(dispatcher, types)
    if types in dispatcher.overloads or getattr(dispatcher, "_can_compile", True):
        return types
    context = dispatcher.typingctx
    for signature in dispatcher.signatures:
        formal = tuple(signature)
        if len(formal) == len(types) and all(
            actual == wanted
            or (
                (found := context.can_convert(actual, wanted)) is not None
                and found <= Conversion.safe
            )
            for actual, wanted in zip(types, formal, strict=True)
        ):
            return formal
    compile_if_missing(dispatcher, types)  # raises: no signature takes them
    return types


def return_type(dispatcher: Any, signature: tuple[Any, ...]) -> Any:
    """The Numba type ``dispatcher`` returns for ``signature`` (compiled here if it was
    not)."""
    compile_if_missing(dispatcher, signature)
    return dispatcher.overloads[tuple(signature)].signature.return_type


def returns_value(dispatcher: Any, signature: tuple[Any, ...]) -> bool:
    """Whether ``dispatcher`` compiled for ``signature`` returns a value."""
    from numba.core import types

    return not isinstance(return_type(dispatcher, signature), types.NoneType)


def returns_arrays(dispatcher: Any, signature: tuple[Any, ...]) -> bool:
    """Whether ``dispatcher`` compiled for ``signature`` returns an array or a tuple
    (a result passed back through output arrays; see _numba_results)."""
    from numba.core import types

    return isinstance(return_type(dispatcher, signature), (types.Array, types.BaseTuple))
