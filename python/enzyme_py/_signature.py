"""Parameter descriptions: what each parameter of a function to differentiate is.

Frontends describe their functions with these; the API checks activities and
arguments against them, and the engine gets Enzyme's type information from them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

# Enzyme's CConcreteType values (src/enzyme_capi.h).
DT_INTEGER = 1
DT_FLOAT = 4
DT_DOUBLE = 5
DT_UNKNOWN = 6

_SCALARS: dict[str, np.dtype] = {
    "double": np.dtype(np.float64),
    "float": np.dtype(np.float32),
    "i64": np.dtype(np.int64),
    "i32": np.dtype(np.int32),
    "i16": np.dtype(np.int16),
    "i8": np.dtype(np.int8),
    "i1": np.dtype(np.bool_),
}


@dataclass(frozen=True)
class Param:
    """One parameter (or the return value) of a function.

    kind is "float" (a by-value float32/float64), "int" (a by-value integer or
    bool), "pointer" (an array passed by its data pointer), or "struct" (a
    return value of several floats of one dtype, as derivatives return them). dtype is the
    scalar's dtype, or the pointee's for a pointer (None when unknown).
    """

    name: str
    kind: str
    dtype: np.dtype | None
    fields: int = 1  # number of values of a "struct" (a derivative's result)
    # Filled by enzyme_py, not passed by the caller: ("shape", i, d) is dimension d
    # of the array that is parameter i; ("errors", 0, 0) a buffer for the callee's
    # status (a frontend's error protocol).
    hidden: tuple[str, int, int] | None = None

    @property
    def enzyme_pointee(self) -> int:
        """The CConcreteType of what a pointer points at, for Enzyme's type trees."""
        if self.kind != "pointer" or self.dtype is None:
            return DT_UNKNOWN
        if self.dtype == np.float64:
            return DT_DOUBLE
        if self.dtype == np.float32:
            return DT_FLOAT
        if self.dtype.kind in "iub":
            return DT_INTEGER
        return DT_UNKNOWN

    def describe(self, position: int) -> str:
        """How error messages name this parameter."""
        return f"parameter {position} ('{self.name}')" if self.name else f"parameter {position}"


_POINTER = re.compile(r"^(.*?)\*$")
_STRUCT = re.compile(r"^\{\s*(.*?)\s*\}$")


def param_from_llvm_type(type_text: str, name: str) -> Param:
    """A Param for an LLVM IR type as LLVM prints it (``double``, ``float*``, ``ptr``)."""
    text = type_text.strip()
    if text in _SCALARS:
        dtype = _SCALARS[text]
        return Param(name, "float" if dtype.kind == "f" else "int", dtype)
    if text == "ptr" or text.startswith("ptr addrspace"):
        return Param(name, "pointer", None)
    struct = _STRUCT.match(text)
    if struct:
        members = [m.strip() for m in struct.group(1).split(",") if m.strip()]
        kinds = {_SCALARS.get(m) for m in members}
        if len(kinds) == 1 and members and next(iter(kinds)) in (np.float64, np.float32):
            return Param(name, "struct", _SCALARS[members[0]], len(members))
    pointer = _POINTER.match(text)
    if pointer:
        pointee = pointer.group(1).strip()
        return Param(name, "pointer", _SCALARS.get(pointee))
    raise TypeError(f"parameter '{name}' has LLVM type {text}, which enzyme_py cannot pass")
