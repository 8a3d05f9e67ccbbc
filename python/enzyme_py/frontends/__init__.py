"""Frontends: from user code to an LLVM 15 module and parameter descriptions.

- ``ir``: LLVM IR text (``ez.llvm_ir``) and C/C++ through clang 15 (``ez.c``, ``ez.cpp``).
- ``cython``: Cython modules (``ez.cython``), through a wrapper per cdef function.
- ``numba``: ``@numba.njit`` dispatchers, through a generated wrapper around Numba's ABI.
"""

from enzyme_py.frontends.ir import (
    CModule,
    IRFunction,
    SourceModule,
    c,
    cpp,
    function_of,
    llvm_ir,
    parse_module,
    rebuild_function,
)

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
