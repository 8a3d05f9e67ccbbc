"""Frontends: from user code to an LLVM 15 module and parameter descriptions.

- ``ir``: LLVM IR text (``ez.llvm_ir``) and C/C++ through clang 15 (``ez.c``, ``ez.cpp``).
- ``cython``: Cython modules (``ez.cython``), through a wrapper per cdef function.
- ``numba``: ``@numba.njit`` dispatchers, through a generated wrapper around Numba's ABI.
"""

from __future__ import annotations

from typing import Any

from enzyme_py.frontends import cython as cython_frontend
from enzyme_py.frontends.ir import (
    CModule,
    IRFunction,
    SourceModule,
    c,
    cpp,
    function_of,
    llvm_ir,
    parse_module,
    rebuild_ir_function,
)
from enzyme_py.frontends.numba import specialize

__all__ = [
    "CModule",
    "IRFunction",
    "SourceModule",
    "c",
    "cpp",
    "function_of",
    "llvm_ir",
    "parse_module",
    "rebuild_function",
]


def rebuild_function(origin: tuple[Any, ...]) -> IRFunction:
    """The function an ``IRFunction.origin`` describes, made again."""
    kind = origin[0]
    if kind in ("llvm_ir", "c"):
        return rebuild_ir_function(origin)
    if kind == "cython":
        return cython_frontend.rebuild(origin)
    if kind == "derivative":  # a derivative, differentiated again
        return origin[1].as_function()
    if kind == "numba":
        _, dispatcher, signature, numba_optimized, strided, *threads = origin
        return specialize(dispatcher, signature, numba_optimized, strided, *threads).wrapper
    raise ValueError(f"cannot rebuild a function of origin {kind!r}")
