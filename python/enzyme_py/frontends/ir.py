"""LLVM IR and C/C++ (through clang 15) as sources of functions to differentiate.

- ``llvm_ir(text, name)``: LLVM IR text, one function of it.
- ``c(source)`` / ``cpp(source)``: C or C++ compiled by clang 15 to LLVM IR; the
  non-static functions are attributes (and items) of the result.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from enzyme_py import _state
from enzyme_py._signature import Param, param_from_llvm_type
from enzyme_py._warnings import warn_at_user
from enzyme_py.core import CompileError, CompilerWarning, EnzymeUnavailableError
from enzyme_py.frontends._gamma_rules import with_gamma_rules
from enzyme_py.frontends.enzyme_markers import honour_or_refuse

if TYPE_CHECKING:
    from enzyme_py._native import FunctionInfo
    from enzyme_py._native import Module as NativeModule

__all__ = [
    "CModule",
    "IRFunction",
    "SourceModule",
    "c",
    "cpp",
    "llvm_ir",
]

# Optimisation flags for ez.c/ez.cpp; a user's flags come after them, so they win
# (-O0, -fvectorize, -Wno-uninitialized). -Wuninitialized because a variable read
# before it is written compiles to whatever the optimizer picks (0.0, silently).
DEFAULT_C_FLAGS: tuple[str, ...] = (
    "-O2",
    "-fno-vectorize",
    "-fno-slp-vectorize",
    "-fno-unroll-loops",
    "-Wuninitialized",
)
# Always given, after the user's flags. Typed pointers let the parameter descriptions
# carry the pointee type (double* is a float64 array), and the engine's LLVM context
# reads typed-pointer IR only. Value names keep C parameter names in the IR, for
# error messages. No load PRE: GVN's partial redundancy elimination of loads turns
# `u[i+1]` read in one iteration and `u[i]` in the next into a loop-carried phi
# started by a load before the inner loop, and Enzyme v0.0.289 then computes wrong
# gradients (no error) for loop nests whose outer loop overwrites that array
# (Gauss-Seidel sweeps; Enzyme's own pass too). The derivative is optimized again
# after Enzyme with it on.
_REQUIRED_C_FLAGS: tuple[str, ...] = (
    "-mllvm",
    "-enable-load-pre=0",
    "-Xclang",
    "-no-opaque-pointers",
    "-fno-discard-value-names",
    "-S",
    "-emit-llvm",
    "-fPIC",
)

# The type "ptr" (opaque pointers, LLVM 15's option and later versions' only form).
_OPAQUE_POINTER = re.compile(r"(?:^|[\s(,<\[{])ptr(?:$|[\s,)>\]}])", re.MULTILINE)


def _require_core() -> None:
    if _state.native is None:
        raise EnzymeUnavailableError(_state.unavailable_message("compiling a function"))


_making = threading.RLock()


class SourceModule:
    """An LLVM module a frontend produced; derivatives are built from clones of it."""

    def __init__(self, native_module: NativeModule | None, identity: str | None = None):
        self._native = native_module
        self._ruled: NativeModule | None = None
        self._make: Callable[[], SourceModule] | None = None
        self._digest = None if identity is None else hashlib.sha256(identity.encode()).hexdigest()

    @classmethod
    def lazy(cls, make: Callable[[], SourceModule], identity: str) -> SourceModule:
        """A module made by ``make`` only when its IR is first needed; ``identity``
        names everything that shapes it (a frontend's key of the source code, so a
        derivative found in the disk cache needs no compile of the IR at all)."""
        module = cls(None, identity)
        module._make = make
        return module

    @property
    def native(self) -> NativeModule:
        """The native LLVM module (made now, if this module was lazy)."""
        if self._native is None and self._make is not None:
            with _making:  # two threads needing it make it once
                if self._make is not None:
                    made = self._make()
                    self._native, self._make = made.native, None
        assert self._native is not None  # made by __init__ or by `make`
        return self._native

    @property
    def materialized(self) -> bool:
        """Whether the IR exists (always, unless the module is lazy and unused)."""
        return self._native is not None

    @property
    def digest(self) -> str:
        """What the derivative caches key on: SHA-256 of the module's IR text, or of the
        identity text a frontend gave (the IR without names that vary per compile)."""
        if self._digest is None:
            self._digest = hashlib.sha256(self.ir().encode()).hexdigest()
        return self._digest

    def ir(self) -> str:
        return str(self.native.ir())

    def functions(self) -> list[FunctionInfo]:
        return list(self.native.functions())

    def for_derivatives(self) -> NativeModule:
        """The native module derivatives are built from: this one with its calls of
        libm's lgamma and tgamma (and their float32 forms) through rules Enzyme
        differentiates (``_gamma_rules``), made once; this one where it calls neither.
        For C, C++, Cython and IR modules (Numba's IR takes the rules itself): a build
        of the primal alone takes ``native``, whose calls keep libm's cost."""
        if self._ruled is None:
            text = self.ir()
            ruled = with_gamma_rules(text)
            self._ruled = self.native if ruled == text else parse_module(ruled).native
        return self._ruled


def parse_module(text: str, identity: str | None = None) -> SourceModule:
    """The module in ``text``; ``identity`` (default: the text) is what caches key on."""
    try:
        _require_core()
        return SourceModule(_state.native.Module(text), identity)
    except ValueError as exc:  # not parseable or not valid LLVM 15 IR
        if _OPAQUE_POINTER.search(text):
            raise CompileError(
                "the IR uses opaque pointers ('ptr'); enzyme_py reads LLVM 15 IR with typed "
                "pointers (double*, i8*): compile C/C++ with clang 15 and "
                "-Xclang -no-opaque-pointers (ez.c does). LLVM's error: " + str(exc)
            ) from None
        raise CompileError(str(exc)) from None


# Makes what runs a function itself (no Enzyme) for ``IRFunction.__call__``; set by
# enzyme_py._derivative, a layer above the frontends, which frontends do not import.
primal_caller: Callable[[IRFunction], Callable[..., Any]] | None = None


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
    # frontend's own tuple understood by frontends.rebuild_function.
    origin: tuple[Any, ...] | None = None
    # How argument errors name the visible parameter at a position, where callers
    # count arguments otherwise (a kernel's launch: "x (argument 1 after n) of ...").
    describe_argument: Callable[[int, Param], str] | None = None
    # The same function with the frontend's code inlined into its wrapper, for combined
    # reverse derivatives (set by the Numba frontend; Derivative takes this function
    # where Enzyme refuses that form). Enzyme v0.0.289 differentiates a called function
    # in split mode, which takes longer to build and keeps a loop's last value on the
    # tape at every iteration (allocated anew per run of a loop whose count varies).
    # Split and forward derivatives take this function: inlined, split mode lost a
    # temporary's shadow between its halves, and forward mode refused np.linalg.inv.
    combined_form: Callable[[], IRFunction] | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        # Made again from what made it (the source, the IR text) in the new process.
        if self.origin is None or self.origin[0] not in ("llvm_ir", "c", "cython"):
            raise TypeError(
                f"'{self.display_name}' cannot be pickled: it was not made by ez.llvm_ir, "
                "ez.c, ez.cpp or ez.cython"
            )
        if self.origin[0] == "cython":
            # The Cython frontend (built on this module) made it: its own rebuild.
            cython = importlib.import_module("enzyme_py.frontends.cython")
            return (cython.rebuild, (self.origin,))
        return (rebuild_ir_function, (self.origin,))

    def __call__(self, *args: Any) -> Any:
        """Run the function itself (no Enzyme): ``m.f(x, n)`` returns its value (a
        pair for a struct of two doubles; None for a void function). Arguments are
        checked as a derivative's Const arguments are: a dtype that does not fit,
        a non-contiguous or read-only array the function may write raise naming the
        parameter."""
        primal = self.__dict__.get("_primal")
        if primal is None:
            primal = self._make_primal()
        return primal(*args)

    def _make_primal(self) -> Any:
        # The engine's primal-only request (what kernel launchers use), built once.
        if primal_caller is None:
            raise EnzymeUnavailableError(_state.unavailable_message(f"calling {self.display_name}"))
        primal = primal_caller(self)
        object.__setattr__(self, "_primal", primal)  # a cache, not a field
        return primal

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


def _describe(module: SourceModule, info: FunctionInfo, source_name: str = "") -> IRFunction:
    names = info["param_names"]
    try:
        params = tuple(
            param_from_llvm_type(t, n or f"arg{i}")
            for i, (t, n) in enumerate(zip(info["params"], names, strict=True))
        )
        ret = None if info["ret"] == "void" else param_from_llvm_type(info["ret"], "return")
    except TypeError as exc:
        raise TypeError(f"enzyme_py cannot call '{source_name or info['name']}': {exc}") from None
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


def rebuild_ir_function(origin: tuple[Any, ...]) -> IRFunction:
    """The function of ``ez.llvm_ir`` or ``ez.c``/``ez.cpp`` that ``origin`` describes."""
    if origin[0] == "llvm_ir":
        return llvm_ir(origin[1], origin[2])
    _, source, flags, language, attribute = origin
    unit = c(source, flags) if language == "c" else cpp(source, flags)
    return unit[attribute]


class TranslationCache(Protocol):
    """Where the frontends' translations (clang's IR, Cython's C) are kept between
    processes: the disk cache, above the frontends (``enzyme_py._translations`` sets
    ``translations`` here and in ``frontends.cython``). ``parts``: everything the
    translation depends on besides the files it read, which ``read`` lists
    (``[path, size, mtime_ns]`` each): a kept one is served only while every such file
    is unchanged."""

    def load(self, parts: list[Any]) -> dict[str, Any] | None: ...

    def keep(self, parts: list[Any], made: dict[str, Any], read: list[list[Any]]) -> None: ...


translations: TranslationCache | None = None


def files_as_read(paths: Sequence[str], before_ns: int) -> list[list[Any]] | None:
    """``[path, size, mtime_ns]`` of each file, or None where one is gone or was
    modified at or after ``before_ns`` (perhaps while it was being read)."""
    found = []
    for path in paths:
        try:
            status = os.stat(path)
        except OSError:
            return None
        if status.st_mtime_ns >= before_ns:
            return None
        found.append([path, status.st_size, status.st_mtime_ns])
    return found


def _headers_read(dependency_file: str, inside: str) -> list[str]:
    """The files a clang ``-MD`` dependency file names, those in ``inside`` (the
    source itself) left out; none where clang wrote none (IR input)."""
    try:
        with open(dependency_file) as f:
            text = f.read()
    except OSError:
        return []
    text = text.split(":", 1)[1] if ":" in text else ""
    words = re.split(r"(?<!\\)\s+", text.replace("\\\n", " "))
    paths = [w.replace("\\ ", " ") for w in words if w and w != "\\"]
    found = [os.path.normpath(os.path.join(inside, p)) for p in paths]
    return [p for p in found if not p.startswith(os.path.normpath(inside) + os.sep)]


_INCLUDE_FLAGS = ("-I", "-isystem", "-iquote", "-idirafter")
_HEADER_ENDINGS = (".h", ".hh", ".hpp", ".hxx", ".inc", ".def")


def _include_context(flags: Sequence[str]) -> list[Any]:
    """What decides which header an ``#include`` finds, beyond the headers read: the
    environment's include paths, and the headers in each folder the flags name (one
    added there may be found instead of another)."""
    folders = []
    for i, flag in enumerate(flags):
        for option in _INCLUDE_FLAGS:
            if flag == option and i + 1 < len(flags):
                folders.append(flags[i + 1])
            elif flag.startswith(option) and len(flag) > len(option):
                folders.append(flag[len(option) :])
    listed = []
    for folder in folders:
        try:
            names = sorted(n for n in os.listdir(folder) if n.endswith(_HEADER_ENDINGS))
        except OSError:
            names = []
        listed.append([folder, names])
    paths = ("CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH")
    return [[name, os.environ.get(name)] for name in paths] + listed


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


def _user_flags(flags: Sequence[str] | None) -> list[str]:
    if flags is None:
        return []
    if isinstance(flags, (str, bytes)):
        raise TypeError(
            f"flags is a list of clang arguments, not a string: pass flags=[{flags!r}] "
            f"(or {flags!r}.split() for several)"
        )
    chosen = list(flags)
    for flag in chosen:
        if not isinstance(flag, str):
            raise TypeError(
                f"flags holds clang arguments (str); got {type(flag).__name__} {flag!r}"
            )
    return chosen


def _compile(source: str, language: str, flags: Sequence[str] | None) -> str:
    text, diagnostics = _run_clang(source, language, flags)
    return honour_or_refuse(
        text,
        diagnostics,
        source,
        language,
        _run_enzyme_pass,
        lambda: _run_clang(source, language, flags, optimise=False)[0],
        lambda ir: _optimise_ir(ir, language, flags),
    )


def _run_enzyme_pass(ir: str, passes: str = "enzyme") -> str:
    _require_core()
    return _state.native.run_enzyme_pass(ir, passes)


def _run_clang(
    source: str, language: str, flags: Sequence[str] | None, optimise: bool = True
) -> tuple[str, str]:
    """The IR clang makes of ``source``, and its warnings; with ``optimise=False``,
    the IR before clang's optimisation pipeline (the same flags otherwise)."""
    std = ["-std=c11"] if language == "c" else ["-std=c++17"]
    name = "source.c" if language == "c" else "source.cpp"
    extra = [] if optimise else ["-Xclang", "-disable-llvm-passes", "-w"]
    text, diagnostics = _clang_to_ir(source, name, [*std, *extra], flags, language)
    if optimise:
        _warn(diagnostics, language)
    return text, diagnostics


def _optimise_ir(ir: str, language: str, flags: Sequence[str] | None) -> str:
    """``ir`` (from ``_run_clang(optimise=False)``) through clang's optimisation
    pipeline with the flags of ``_run_clang``."""
    return _clang_to_ir(ir, "source.raw.ll", ["-x", "ir", "-w"], flags, language)[0]


def _clang_to_ir(
    text: str, name: str, first: list[str], flags: Sequence[str] | None, language: str
) -> tuple[str, str]:
    chosen = _user_flags(flags)
    clang = _clang()
    # Relative names, run inside tmp: the IR text (and so the derivative cache key) is
    # the same for the same source in every process. Later flags win.
    args = [*first, *DEFAULT_C_FLAGS, *chosen, *_REQUIRED_C_FLAGS, name, "-o", "source.ll"]
    status = os.stat(clang)
    parts = [
        "clang",
        text,
        args,
        _include_context(args),
        clang,
        status.st_size,
        status.st_mtime_ns,
    ]
    kept = translations.load(parts) if translations is not None else None
    made = kept or {}
    if isinstance(made.get("ir"), str) and isinstance(made.get("diagnostics"), str):
        return made["ir"], made["diagnostics"]
    with tempfile.TemporaryDirectory(prefix="enzyme_py_") as tmp:
        with open(os.path.join(tmp, name), "w") as f:
            f.write(text)
        started = time.time_ns()
        cmd = [clang, *args, "-MD", "-MF", "source.d"]  # the headers it reads, listed
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=tmp)
        if proc.returncode != 0:
            raise CompileError(f"{language.upper()} source did not compile:\n{proc.stderr.strip()}")
        with open(os.path.join(tmp, "source.ll")) as f:
            ir = f.read()
        read = files_as_read(_headers_read(os.path.join(tmp, "source.d"), tmp), started)
        if translations is not None and read is not None:
            translations.keep(parts, {"ir": ir, "diagnostics": proc.stderr}, read)
        return ir, proc.stderr


_GENERATED = re.compile(r"^\d+ warnings? generated\.$", re.MULTILINE)


def _warn(diagnostics: str, language: str) -> None:
    """clang's warnings, as one CompilerWarning raised at the caller of ez.c / ez.cpp."""
    text = _GENERATED.sub("", diagnostics).strip()
    if text:
        header = f"clang's warnings for the {language.upper()} source:"
        warn_at_user(CompilerWarning(f"{header}\n{text}"))


# LLVMLinkage values of the functions a module exports, listed by functions() and
# reachable as attributes: external, weak (__attribute__((weak))) and weak_odr
# (explicit template instantiations, "template double sq<double>(double);").
_EXPORTED_LINKAGES = frozenset({0, 5, 6})
# linkonce / linkonce_odr: inline functions and implicit template instances that
# clang kept. Only m["symbol"] reaches them: a header's internals would crowd the list.
_ITEM_ONLY_LINKAGES = frozenset({2, 3})
# CModule's own attributes: never C functions, even before __init__ has set them
# (copy and pickle look attributes up on an instance __init__ did not run on).
_OWN_ATTRIBUTES = frozenset(
    {"language", "_module", "_origin", "_symbols", "_aliases", "_listed", "_unusable", "_made"}
)


def _plain_name(demangled: str) -> str | None:
    """The unqualified name in a demangled C++ signature (``double sq<double>(double)``
    -> ``sq``), or None where it is not a Python identifier (operators, ABI tags)."""
    head = demangled.split("(", 1)[0]
    if "operator" in head or "[" in head:
        return None
    while True:  # template arguments, innermost first
        stripped = re.sub(r"<[^<>]*>", "", head)
        if stripped == head:
            break
        head = stripped
    words = head.rsplit("::", 1)[-1].split()  # a template instance's return type leads
    name = words[-1] if words else ""
    return name if name.isidentifier() else None


class CModule:
    """A compiled C/C++ translation unit.

    Its exported functions are attributes (``m.energy``) and items (``m["energy"]``).
    Items reach every one by its exact symbol, including names an attribute cannot:
    C++ mangled names (``m["_Z4overd"]``), functions named like CModule's own methods
    (``m["functions"]``, ``m["ir"]``, ``m["language"]``) and inline functions or
    implicit template instances clang kept (linkonce_odr).
    """

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
        self._symbols: dict[str, FunctionInfo] = {}  # every reachable function, by symbol
        self._listed: list[str] = []  # names functions() lists and attributes reach
        self._aliases: dict[str, str] = {}  # C++ plain name -> its symbol
        self._made: dict[str, IRFunction] = {}
        for info in self._module.functions():
            linkage = info["linkage"]
            if linkage in _EXPORTED_LINKAGES or linkage in _ITEM_ONLY_LINKAGES:
                self._symbols[info["name"]] = info
            if linkage in _EXPORTED_LINKAGES:
                self._listed.append(info["name"])
        if language == "c++":
            self._add_demangled_names()
        # A function with a type enzyme_py cannot pass (long double, a mixed struct
        # returned by value) must not make the others unusable: it is left out of
        # functions(), and raises the TypeError when it is asked for.
        self._unusable: dict[str, str] = {}
        for name in self._listed:
            try:
                self._function(name)
            except TypeError as exc:
                self._unusable[name] = str(exc)

    def _add_demangled_names(self) -> None:
        mangled = [s for s in self._listed if s.startswith("_Z")]
        if not mangled:
            return
        filt = shutil.which("c++filt") or shutil.which("llvm-cxxfilt-15")
        if not filt:
            return
        proc = subprocess.run([filt, *mangled], capture_output=True, text=True, check=False)
        by_base: dict[str, list[str]] = {}
        for symbol, plain in zip(mangled, proc.stdout.splitlines(), strict=False):
            base = _plain_name(plain)
            if base is not None:
                by_base.setdefault(base, []).append(symbol)
        for base, symbols in by_base.items():
            # Overloads (and several instances of one template) stay reachable by
            # their mangled names only.
            if len(symbols) == 1 and base not in self._symbols:
                self._aliases[base] = symbols[0]
                self._listed.append(base)

    def _function(self, name: str) -> IRFunction | None:
        """The function ``name`` (a symbol or a C++ plain name) reaches; None if none.
        TypeError if its types are ones enzyme_py cannot pass."""
        made = self._made.get(name)
        if made is not None:
            return made
        info = self._symbols.get(self._aliases.get(name, name))
        if info is None:
            return None
        fn = replace(_describe(self._module, info, name), origin=("c", *self._origin, name))
        self._made[name] = fn
        return fn

    def _missing(self, name: str) -> str:
        known = ", ".join(self.functions()) or "none"
        unusable = ", ".join(sorted(self._unusable))
        also = f"; with types enzyme_py cannot pass: {unusable}" if unusable else ""
        return (
            f"the {self.language.upper()} source defines no non-static function "
            f"'{name}' (it defines: {known}{also})"
        )

    def functions(self) -> list[str]:
        """Names of the functions that can be differentiated (those with types
        enzyme_py cannot pass are left out; asking for one says why)."""
        return sorted(n for n in self._listed if n not in self._unusable)

    def ir(self) -> str:
        return self._module.ir()

    def __getitem__(self, name: str) -> IRFunction:
        if not isinstance(name, str):
            raise TypeError(f"functions are looked up by name (a str), not {type(name).__name__}")
        fn = self._function(name)
        if fn is None:
            raise KeyError(self._missing(name))
        return fn

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._aliases.get(name, name) in self._symbols

    def __getattr__(self, name: str) -> IRFunction:
        # Only called where normal lookup failed: methods and instance attributes
        # shadow C functions of their names (m["functions"] reaches those).
        if (name.startswith("__") and name.endswith("__")) or name in _OWN_ATTRIBUTES:
            raise AttributeError(name)
        fn = self._function(name)
        if fn is None:
            raise AttributeError(self._missing(name))
        return fn

    def __reduce__(self) -> tuple[Any, ...]:
        # Compiled again from its source in the new process.
        source, flags, language = self._origin
        return (c if language == "c" else cpp, (source, None if flags is None else list(flags)))

    def __dir__(self) -> list[str]:
        return [*super().__dir__(), *(n for n in self.functions() if n.isidentifier())]


def c(source: str, flags: Sequence[str] | None = None) -> CModule:
    """Compile C ``source`` (C11) with clang 15; functions are attributes (and items,
    ``m["name"]``) of the result.

    ``flags`` are clang arguments added after DEFAULT_C_FLAGS, so they override
    them (``["-O0"]``, ``["-fvectorize"]``, ``["-std=c99"]``); include paths and
    defines go there too. The flags enzyme_py needs (typed pointers, LLVM IR output)
    are always added last. Raises CompileError with clang's diagnostics; clang's
    warnings (``-Wuninitialized`` by default, ``-Wall`` and the like when given in
    ``flags``; ``-w`` silences them) are a ``CompilerWarning``.
    """
    return CModule(_compile(source, "c", flags), "c", source, flags)


def cpp(source: str, flags: Sequence[str] | None = None) -> CModule:
    """Compile C++ ``source`` (C++17) with clang 15, as ``c``. ``extern "C"`` names,
    functions that are not overloaded and single explicit template instances are
    attributes by their plain names; overloads are reachable by their mangled names
    (``m["_Z4overd"]``, listed by ``m.functions()``)."""
    return CModule(_compile(source, "c++", flags), "c++", source, flags)
