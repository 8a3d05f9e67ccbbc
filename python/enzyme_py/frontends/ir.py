"""LLVM IR and C/C++ (through clang 15) as sources of functions to differentiate.

- ``llvm_ir(text, name)``: LLVM IR text, one function of it.
- ``c(source)`` / ``cpp(source)``: C or C++ compiled by clang 15 to LLVM IR; the
  non-static functions are attributes of the result.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from enzyme_py import _state
from enzyme_py._signature import Param, param_from_llvm_type
from enzyme_py.core import CompileError, EnzymeUnavailableError

__all__ = [
    "CModule",
    "IRFunction",
    "SourceModule",
    "c",
    "cpp",
    "llvm_ir",
    "rebuild_function",
]

# Typed pointers let the parameter descriptions carry the pointee type
# (double* is a float64 array); Enzyme works on either form.
DEFAULT_C_FLAGS: tuple[str, ...] = (
    "-O2",
    "-fno-vectorize",
    "-fno-slp-vectorize",
    "-fno-unroll-loops",
    "-Xclang",
    "-no-opaque-pointers",
)

_EXTERNAL_LINKAGE = 0  # LLVMExternalLinkage


def _native() -> Any:
    if _state.native is None:
        raise EnzymeUnavailableError(_state.unavailable_message("compiling a function"))
    return _state.native


class SourceModule:
    """An LLVM module a frontend produced; derivatives are built from clones of it."""

    def __init__(self, native_module: Any, identity: str | None = None):
        self.native = native_module
        self._digest = None if identity is None else hashlib.sha256(identity.encode()).hexdigest()

    @property
    def digest(self) -> str:
        """What the derivative caches key on: SHA-256 of the module's IR text, or of the
        identity text a frontend gave (the IR without names that vary per compile)."""
        if self._digest is None:
            self._digest = hashlib.sha256(self.ir().encode()).hexdigest()
        return self._digest

    def ir(self) -> str:
        return str(self.native.ir())

    def functions(self) -> list[dict[str, Any]]:
        return list(self.native.functions())


def parse_module(text: str, identity: str | None = None) -> SourceModule:
    """The module in ``text``; ``identity`` (default: the text) is what caches key on."""
    try:
        return SourceModule(_native().Module(text), identity)
    except ValueError as exc:  # not parseable or not valid LLVM 15 IR
        raise CompileError(str(exc)) from None


@dataclass(frozen=True, eq=False)
class IRFunction:
    """One function of an LLVM module, ready to be given to ``autodiff``."""

    module: SourceModule = field(repr=False)
    name: str
    params: tuple[Param, ...]
    ret: Param | None  # None: returns nothing
    source_name: str = ""  # the name the user knows it by (C name, Python name)
    # Raises the frontend's exception for what the callee wrote into its hidden
    # ("errors") parameter: called with (status, detail) when status is not 0.
    on_error: Callable[[int, int], None] | None = None
    # Set when the function promises that its array arguments do not overlap
    # (noalias): makes the same function without that promise, for calls whose
    # arrays do overlap.
    alias_safe: Callable[[], IRFunction] | None = None
    # How to make this function again in another process (pickling derivatives):
    # ("llvm_ir", text, name), ("c", source, flags, language, attribute), or a
    # frontend's own tuple understood by rebuild_function.
    origin: tuple[Any, ...] | None = None
    # How argument errors name the visible parameter at a position, where callers
    # count arguments otherwise (a kernel's launch: "x (argument 1 after n) of ...").
    describe_argument: Callable[[int, Param], str] | None = None

    @property
    def visible_params(self) -> list[tuple[int, Param]]:
        """(index, param) of the parameters a caller passes (hidden ones left out)."""
        return [(i, p) for i, p in enumerate(self.params) if p.hidden is None]

    @property
    def display_name(self) -> str:
        return self.source_name or self.name

    def ir(self) -> str:
        """The module's LLVM IR, as the frontend produced it."""
        return self.module.ir()


def _describe(module: SourceModule, info: dict[str, Any], source_name: str = "") -> IRFunction:
    names = info["param_names"]
    params = tuple(
        param_from_llvm_type(t, n or f"arg{i}")
        for i, (t, n) in enumerate(zip(info["params"], names, strict=True))
    )
    ret = None if info["ret"] == "void" else param_from_llvm_type(info["ret"], "return")
    return IRFunction(module, info["name"], params, ret, source_name)


def function_of(module: SourceModule, name: str, source_name: str = "") -> IRFunction:
    """Function ``name`` of ``module``; KeyError naming what the module defines."""
    for info in module.functions():
        if info["name"] == name:
            return _describe(module, info, source_name)
    defined = ", ".join(sorted(i["name"] for i in module.functions())) or "none"
    raise KeyError(f"the IR defines no function named '{name}' (it defines: {defined})")


def llvm_ir(text: str, name: str) -> IRFunction:
    """Parse LLVM 15 IR ``text`` and take its function ``name``.

    Raises CompileError if the IR does not parse or verify, and KeyError if it
    defines no function of that name.
    """
    return replace(function_of(parse_module(text), name), origin=("llvm_ir", text, name))


def rebuild_function(origin: tuple[Any, ...]) -> IRFunction:
    """The function an ``IRFunction.origin`` describes, made again."""
    kind = origin[0]
    if kind == "llvm_ir":
        return llvm_ir(origin[1], origin[2])
    if kind == "c":
        _, source, flags, language, attribute = origin
        unit = c(source, flags) if language == "c" else cpp(source, flags)
        return getattr(unit, attribute)
    if kind == "derivative":  # a derivative, differentiated again
        return origin[1].as_function()
    if kind == "numba":
        from enzyme_py.frontends.numba import specialize

        _, dispatcher, signature, numba_optimized = origin
        return specialize(dispatcher, signature, numba_optimized).wrapper
    raise ValueError(f"cannot rebuild a function of origin {kind!r}")


def _clang() -> str:
    explicit = os.environ.get("ENZYME_PY_CLANG")
    candidates = [explicit] if explicit else ["clang-15", "/usr/lib/llvm-15/bin/clang"]
    for candidate in candidates:
        found = shutil.which(candidate)
        if found:
            return found
    raise CompileError(
        "clang 15 is needed to compile C/C++ for enzyme_py and was not found "
        "(Debian: apt-get install clang-15; or set ENZYME_PY_CLANG to its path)"
    )


def _compile(source: str, language: str, flags: Sequence[str] | None) -> str:
    clang = _clang()
    chosen = list(DEFAULT_C_FLAGS if flags is None else flags)
    std = ["-std=c11"] if language == "c" else ["-std=c++17"]
    name = "source.c" if language == "c" else "source.cpp"
    with tempfile.TemporaryDirectory(prefix="enzyme_py_") as tmp:
        with open(os.path.join(tmp, name), "w") as f:
            f.write(source)
        # Relative names, run inside tmp: the IR text (and so the derivative cache
        # key) is the same for the same source in every process.
        # Value names keep C parameter names in the IR, for error messages.
        cmd = [
            clang,
            *std,
            *chosen,
            "-fno-discard-value-names",
            "-S",
            "-emit-llvm",
            "-fPIC",
            name,
            "-o",
            "source.ll",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=tmp)
        if proc.returncode != 0:
            raise CompileError(f"{language.upper()} source did not compile:\n{proc.stderr.strip()}")
        with open(os.path.join(tmp, "source.ll")) as f:
            return f.read()


class CModule:
    """A compiled C/C++ translation unit; its non-static functions are attributes."""

    def __init__(
        self,
        ir_text: str,
        language: str,
        source: str = "",
        flags: Sequence[str] | None = None,
    ):
        self._module = parse_module(ir_text)
        self.language = language
        self._origin = (source, None if flags is None else tuple(flags), language)
        self._functions: dict[str, IRFunction] = {}
        for info in self._module.functions():
            if info["linkage"] != _EXTERNAL_LINKAGE:
                continue
            symbol = info["name"]
            self._functions[symbol] = _describe(self._module, info, symbol)
        if language == "c++":
            self._add_demangled_names()
        self._functions = {
            attribute: replace(fn, origin=("c", *self._origin, attribute))
            for attribute, fn in self._functions.items()
        }

    def _add_demangled_names(self) -> None:
        mangled = [s for s in self._functions if s.startswith("_Z")]
        if not mangled:
            return
        filt = shutil.which("c++filt") or shutil.which("llvm-cxxfilt-15")
        if not filt:
            return
        proc = subprocess.run([filt, *mangled], capture_output=True, text=True, check=False)
        by_base: dict[str, list[str]] = {}
        for symbol, plain in zip(mangled, proc.stdout.splitlines(), strict=False):
            base = plain.split("(", 1)[0].rsplit("::", 1)[-1]
            by_base.setdefault(base, []).append(symbol)
        for base, symbols in by_base.items():
            # Overloads stay reachable by their mangled names only.
            if len(symbols) == 1 and base not in self._functions:
                fn = self._functions[symbols[0]]
                self._functions[base] = IRFunction(fn.module, fn.name, fn.params, fn.ret, base)

    def functions(self) -> list[str]:
        """Names of the functions that can be differentiated."""
        return sorted(self._functions)

    def ir(self) -> str:
        return self._module.ir()

    def __getattr__(self, name: str) -> IRFunction:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._functions[name]
        except KeyError:
            known = ", ".join(self.functions()) or "none"
            raise AttributeError(
                f"the {self.language.upper()} source defines no non-static function "
                f"'{name}' (it defines: {known})"
            ) from None

    def __dir__(self) -> list[str]:
        return [*super().__dir__(), *self._functions]


def c(source: str, flags: Sequence[str] | None = None) -> CModule:
    """Compile C ``source`` with clang 15; functions are attributes of the result.

    ``flags`` replaces the default optimisation flags (DEFAULT_C_FLAGS); include
    paths and defines go there too. Raises CompileError with clang's diagnostics.
    """
    return CModule(_compile(source, "c", flags), "c", source, flags)


def cpp(source: str, flags: Sequence[str] | None = None) -> CModule:
    """Compile C++ ``source`` with clang 15 (as ``c``). ``extern "C"`` names and
    non-overloaded functions are reachable by their plain names."""
    return CModule(_compile(source, "c++", flags), "c++", source, flags)
