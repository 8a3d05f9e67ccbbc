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
DT_POINTER = 2
DT_FLOAT = 4
DT_DOUBLE = 5
DT_UNKNOWN = 6
# Enzyme's CDIFFE_TYPE values, an activity as the engine asks it (src/enzyme_capi.h).
DFT_OUT_DIFF = 0
DFT_DUP_ARG = 1
DFT_CONSTANT = 2
DFT_DUP_NONEED = 3

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
    scalar's dtype, or the pointee's for a pointer (None when unknown). A pointer to
    pointers (``double**``) takes an array of addresses: dtype uintp, pointee_is_pointer.
    """

    name: str
    kind: str
    dtype: np.dtype | None
    fields: int = 1  # number of values of a "struct" (a derivative's result)
    # Filled by enzyme_py, not passed by the caller: ("shape", i, d) is dimension d
    # of the array that is parameter i, ("stride", i, d) its stride in bytes;
    # ("errors", 0, 0) a buffer for the callee's status (a frontend's error protocol).
    hidden: tuple[str, int, int] | None = None
    pointee_is_pointer: bool = False
    # An array parameter whose strides are passed (hidden "stride" parameters): it
    # takes arrays of any layout. Otherwise arrays must be C-contiguous.
    strided: bool = False
    # An array parameter the function cannot write (a Numba readonly array): it
    # takes read-only arrays.
    readonly: bool = False
    # A derivative's shadow of a strided array (parameter ``layout_of``), indexed with
    # that array's shape and strides: it takes an array of that shape, of any layout
    # (given another, a stand-in laid out like the array is passed and copied back).
    layout_of: int | None = None

    @property
    def enzyme_pointee(self) -> int:
        """The CConcreteType of what a pointer points at, for Enzyme's type trees."""
        if self.kind != "pointer" or self.dtype is None:
            return DT_UNKNOWN
        if self.pointee_is_pointer:
            return DT_POINTER
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

# In typed-pointer IR, clang lowers void*, char*, int8_t* and bool* alike to i8*, and
# i8* is LLVM's generic pointer: its pointee is unknown (any array is accepted, and
# Enzyme deduces the type from how the function uses it).
_GENERIC_POINTEES = frozenset({"i8"})

# What LLVM types enzyme_py cannot pass are in C, for error messages.
_C_NAMES = {
    "x86_fp80": "long double",
    "fp128": "__float128",
    "ppc_fp128": "long double",
    "half": "_Float16",
    "bfloat": "__bf16",
    "i128": "__int128",
}

SUPPORTED_TYPES = (
    "double, float, integers of up to 64 bits and bool by value, pointers (arrays) and "
    "returns of a struct of two doubles (a struct of more doubles is returned through "
    "a pointer, its first parameter)"
)


def _unsupported(text: str, name: str) -> TypeError:
    what = "the return value" if name == "return" else f"parameter '{name}'"
    c_name = _C_NAMES.get(text)
    if c_name is None and text.startswith("<"):
        c_name = "a vector type, or a struct of floats, which clang returns as one"
    elif c_name is None and text.startswith("{"):
        c_name = (
            "a struct returned by value that is not two doubles (a struct of floats or of "
            "mixed members, which clang returns in pieces)"
        )
    hint = f" (C: {c_name})" if c_name else ""
    return TypeError(
        f"{what} has LLVM type {text}{hint}, which enzyme_py cannot pass; it passes "
        f"{SUPPORTED_TYPES}: change its type to one of those"
    )


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
        if pointee.endswith("*"):
            # An array of addresses: any other dtype would be read as pointers
            # and dereferenced (a float64 array crashes the process).
            return Param(name, "pointer", np.dtype(np.uintp), pointee_is_pointer=True)
        if pointee in _GENERIC_POINTEES:
            return Param(name, "pointer", None)
        return Param(name, "pointer", _SCALARS.get(pointee))
    raise _unsupported(text, name)
