"""Cython modules as sources of functions to differentiate (``ez.cython``).

Cython (3.x, in a child interpreter: ``_cython_driver.py``) translates the module to
C and describes its cdef/cpdef functions and its def functions with C-typed parameters
(their C implementation, ``__pyx_pf_...``, whose returned double the driver hands over
in a block of enzyme_py's instead of a Python float); clang 15 compiles that C, with a
wrapper per function appended, to LLVM IR. A cdef function takes a typed memoryview as a
``__Pyx_memviewslice`` struct by value; its wrapper takes plain terms,

    RET wrapper(T *restrict x, int64_t x_shape0, ... [, int64_t x_stride0, ...],
                <scalars>, int64_t *errors)

and builds the slice: no memoryview object (NULL, which Cython's reference counting
skips), the data, the shape and, for views not declared C-contiguous (``double[:]``,
``double[::1, :]``), the strides in bytes (hidden parameters enzyme_py fills from the
NumPy array); a C-contiguous view's strides are computed. A Fortran-contiguous view
given another layout makes the wrapper return a layout status before the function
runs (a ValueError). The data pointers are ``restrict`` (noalias), as Numba arrays'
are: calls whose arrays overlap take the build without it (``alias_safe``). The
module's init never runs, so its Python state is unset:
a bounds check's IndexError and a plain raise statement (``raise ValueError("text")``,
which the driver turns into PyErr_SetString) use Python's C API only: the exception is
handed back through ``errors`` and raised again in Python. A function that reaches
more of Python (other raise statements, Python objects) is refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from enzyme_py.core import CompileError
from enzyme_py.frontends._cython_c import (
    LAYOUT_ERROR,
    NOALIAS_OFF_FLAG,
    PRELUDE,
    Wrapped,
    c_for_ir,
    inactive_error_path,
    python_calls,
    wrap,
)
from enzyme_py.frontends.ir import (
    IRFunction,
    SourceModule,
    TranslationCache,
    _clang,
    _compile,
    _user_flags,
    function_of,
    parse_module,
)

__all__ = ["CythonModule", "cython"]

_DRIVER = os.path.join(os.path.dirname(__file__), "_cython_driver.py")
_INSTALL = (
    "install Cython 3 (pip install 'enzyme_py[cython]') and clang 15 "
    "(Debian: apt-get install clang-15)"
)


def raise_cython_error(status: int, address: int, name: str) -> None:
    """Raise again the exception a Cython function raised inside a derivative."""
    import ctypes

    if status == 1 and address:
        exc = ctypes.cast(address, ctypes.py_object).value
        ctypes.pythonapi.Py_DecRef(ctypes.py_object(exc))  # the wrapper's reference
        if isinstance(exc, BaseException):
            raise exc
    raise RuntimeError(f"the Cython function '{name}' failed with status {status}")


# The disk cache of Cython's translations (set by enzyme_py._translations; see
# frontends/ir.py's TranslationCache).
translations: TranslationCache | None = None


def _translation_parts(
    source: str, stem: str, directives: dict[str, Any], include: str | None
) -> list[Any]:
    """What Cython's translation of ``source`` depends on, beyond the files it reads
    (checked when a kept translation is loaded): the text, the directives, the module
    name, the Cython and Python that run it, the driver, and the names of the .pxd and
    .pxi files beside a .pyx file (a new one there may be cimported instead)."""
    try:
        version = importlib.metadata.version("Cython")
    except importlib.metadata.PackageNotFoundError:
        version = "?"
    with open(_DRIVER, "rb") as f:
        driver = hashlib.sha256(f.read()).hexdigest()
    beside = []
    if include is not None:
        with contextlib.suppress(OSError):
            beside = sorted(n for n in os.listdir(include) if n.endswith((".pxd", ".pxi")))
    return [
        "cython translation",
        source,
        stem,
        json.dumps(directives, sort_keys=True, default=repr),
        include,
        version,
        sys.executable,
        sys.version,
        driver,
        beside,
    ]


def _run_cython(source: str, stem: str, directives: dict[str, Any], include: str | None) -> Any:
    if importlib.util.find_spec("Cython") is None:
        raise CompileError(f"ez.cython needs Cython, which is not installed: {_INSTALL}")
    _clang()  # CompileError saying what to install, before Cython's work
    parts = _translation_parts(source, stem, directives, include)
    kept = translations.load(parts) if translations is not None else None
    made = kept or {}
    if isinstance(made.get("c"), str) and isinstance(made.get("functions"), list):
        return made["c"], made["functions"]
    with tempfile.TemporaryDirectory(prefix="enzyme_py_cython_") as tmp:
        with open(os.path.join(tmp, f"{stem}.pyx"), "w") as f:
            f.write(source)
        config = dict(directives)
        if include is not None:
            config["__include__"] = include
        cmd = [sys.executable, _DRIVER, f"{stem}.pyx", "out.c", "out.json", json.dumps(config)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=tmp)
        if proc.returncode == 2:
            raise CompileError(f"ez.cython needs Cython, which is not installed: {_INSTALL}")
        if proc.returncode != 0:
            raise CompileError(f"Cython did not compile the module:\n{proc.stderr.strip()}")
        with open(os.path.join(tmp, "out.c")) as f:
            c_text = f.read()
        with open(os.path.join(tmp, "out.json")) as f:
            out = json.load(f)
        infos, read = out["functions"], out["read"]
        if translations is not None:
            # The .pyx and what Cython wrote in the temporary folder are left out.
            inside = os.path.realpath(tmp) + os.sep
            kept_reads = [r for r in read if not os.path.realpath(r[0]).startswith(inside)]
            translations.keep(parts, {"c": c_text, "functions": infos}, kept_reads)
        return c_text, infos


class CythonModule:
    """A Cython module compiled for differentiation: its cdef/cpdef/def functions are
    attributes (``m.energy``) and items (``m["energy"]``); each specialisation of a
    fused function is an item named as Cython indexes it (``m["fsum[double]"]``)."""

    def __init__(
        self,
        source: str,
        directives: Mapping[str, Any] | None,
        flags: Sequence[str] | None,
        stem: str,
        include: str | None = None,
    ):
        chosen = _user_flags(flags)
        config = dict(directives or {})
        self._origin = (source, tuple(sorted(config.items())), tuple(chosen), stem, include)
        c_text, infos = _run_cython(source, stem, config, include)
        self._wrapped: dict[str, Wrapped] = {}
        self._fused: dict[str, list[str]] = {}
        defs = {info["name"] for info in infos if info.get("def")}
        for i, info in enumerate(infos):
            label = info["name"]
            if info["fused"] is not None:
                label = f"{label}[{', '.join(info['fused'])}]"
                self._fused.setdefault(info["name"], []).append(label)
            symbol = f"__enzyme_py_cython_{i}_{info['name']}"
            try:
                self._wrapped[label] = wrap(info, symbol, label)
            except TypeError as exc:
                self._wrapped[label] = Wrapped(label, symbol, "", (), str(exc))
        code = [w.code for w in self._wrapped.values() if not w.refused]
        full = c_for_ir(c_text) + PRELUDE + "\n".join(code)
        includes = [f"-I{sysconfig.get_paths()['include']}"]
        if "numpy/arrayobject.h" in c_text:
            includes.append(f"-I{np.get_include()}")
        self._c_build = (full, [*includes, "-Wno-everything"], chosen)
        ir = self._clang_ir(noalias=True)
        self._module: SourceModule = parse_module(ir)
        self._safe_module: SourceModule | None = None
        for label, wrapped in self._wrapped.items():
            python = [] if wrapped.refused else python_calls(ir, wrapped.symbol)
            if python:
                reached = ", ".join(python[:4])
                refused = (
                    f"it reaches Python ({reached}): a raise statement or a Python "
                    "object, and enzyme_py cannot run Python inside a derivative (a bounds "
                    "check's IndexError and raise ValueError('constant text') of a builtin "
                    "exception are raised again; other raise statements are not): keep "
                    "Python objects and other raise statements out of the functions you "
                    "differentiate"
                )
                if label in defs:
                    refused = (
                        f"it is a def function whose body reaches Python ({reached}): "
                        "declare its variables with C types (cdef double s) and keep "
                        "Python objects and calls out of it, or write it as a cdef/cpdef "
                        "function with a C return type (cpdef double f(double[:] x))"
                    )
                self._wrapped[label] = replace(wrapped, refused=refused)
        self._made: dict[str, IRFunction] = {}

    def _clang_ir(self, noalias: bool) -> str:
        """The module's IR; without ``noalias``, the memoryviews' data pointers lose
        the promise that they do not overlap (for calls whose arrays do)."""
        full, flags, chosen = self._c_build
        off = [] if noalias else [NOALIAS_OFF_FLAG]
        try:
            ir = _compile(full, "c", [*flags, *off, *chosen])
        except CompileError as exc:
            raise CompileError(f"clang did not compile Cython's C: {exc}") from None
        return inactive_error_path(ir)

    def _alias_safe(self, made: IRFunction) -> IRFunction:
        """``made`` from the build without noalias (compiled the first time a call's
        arrays overlap)."""
        if self._safe_module is None:
            self._safe_module = parse_module(self._clang_ir(noalias=False))
        raw = function_of(self._safe_module, made.name, made.source_name)
        return replace(made, module=raw.module, alias_safe=None)

    def _function(self, name: str) -> IRFunction | None:
        made = self._made.get(name)
        if made is not None:
            return made
        wrapped = self._wrapped.get(name)
        if wrapped is None:
            return None
        if wrapped.refused:
            raise TypeError(f"enzyme_py cannot call '{name}': {wrapped.refused}")
        raw = function_of(self._module, wrapped.symbol, name)
        # Scalars as the IR has them (i32 for int); arrays and shapes as described.
        params = tuple(
            ir_param if mine.kind == "pending" else mine
            for mine, ir_param in zip(wrapped.params, raw.params, strict=True)
        )

        layout_errors = wrapped.layout_errors

        def on_error(status: int, detail: int) -> None:
            if 0 <= status - LAYOUT_ERROR < len(layout_errors):
                raise ValueError(layout_errors[status - LAYOUT_ERROR])
            raise_cython_error(status, detail, name)

        fn = replace(raw, params=params, on_error=on_error, origin=("cython", *self._origin, name))
        views = sum(p.kind == "pointer" and p.hidden is None for p in params)
        if views > 1 and any(p.hidden is not None and p.hidden[0] == "shape" for p in params):
            # Memoryview data pointers are noalias: calls whose arrays overlap take
            # the build without that promise.
            fn = replace(fn, alias_safe=lambda: self._alias_safe(fn))
        self._made[name] = fn
        return fn

    def _missing(self, name: str) -> str:
        if name in self._fused:
            picks = ", ".join(f"m[{s!r}]" for s in self._fused[name])
            return f"'{name}' is a fused function: pick a specialisation ({picks})"
        refused = sorted(n for n, w in self._wrapped.items() if w.refused)
        also = f"; with types enzyme_py cannot pass: {', '.join(refused)}" if refused else ""
        return (
            f"the Cython module defines no cdef/cpdef/def function '{name}' (it defines: "
            f"{', '.join(self.functions()) or 'none'}{also})"
        )

    def functions(self) -> list[str]:
        """Names of the functions that can be differentiated (fused ones once per
        specialisation; those with types enzyme_py cannot pass are left out)."""
        return sorted(n for n, w in self._wrapped.items() if not w.refused)

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
        return isinstance(name, str) and name in self._wrapped

    def __getattr__(self, name: str) -> IRFunction:
        if name.startswith("_"):
            raise AttributeError(name)
        fn = self._function(name)
        if fn is None:
            raise AttributeError(self._missing(name))
        return fn

    def __reduce__(self) -> tuple[Any, ...]:
        # Compiled again from its source in the new process.
        return (_rebuild_module, self._origin)

    def __dir__(self) -> list[str]:
        return [*super().__dir__(), *(n for n in self.functions() if n.isidentifier())]


def _rebuild_module(
    source: str,
    directives: tuple[tuple[str, Any], ...],
    flags: tuple[str, ...],
    stem: str,
    include: str | None,
) -> CythonModule:
    key = (source, directives, flags, stem, include)
    module = _modules.get(key)
    if module is None:
        module = _modules[key] = CythonModule(source, dict(directives), flags, stem, include)
    return module


# Modules compiled in this process, by what made them: unpickling many functions of
# one module compiles it once.
_modules: dict[tuple[Any, ...], CythonModule] = {}


def rebuild(origin: tuple[Any, ...]) -> IRFunction:
    """The function an IRFunction.origin of kind "cython" describes, made again."""
    _, source, directives, flags, stem, include, name = origin
    return _rebuild_module(source, directives, flags, stem, include)[name]


def cython(
    source: str | None = None,
    directives: Mapping[str, Any] | None = None,
    flags: Sequence[str] | None = None,
    *,
    path: str | os.PathLike[str] | None = None,
) -> CythonModule:
    """Translate a Cython module (``source``, or the file at ``path``) with Cython 3
    (language_level=3) and compile it with clang 15; its cdef, cpdef and def functions
    with C-typed parameters are attributes and items of the result.

    ``directives`` are Cython compiler directives (``{"boundscheck": False}``);
    ``flags`` clang arguments, as for ``ez.c``. Parameters: C scalars, pointers and
    typed memoryviews: C-contiguous ones (``double[::1]``, ``double[:, ::1]``) take
    C-contiguous arrays, strided ones (``double[:]``, ``float[:, :]``) arrays of any
    layout (negative strides too), Fortran-contiguous ones (``double[::1, :]``)
    Fortran-ordered arrays; a shadow of any layout is given to the derivative laid
    out as its array. ``const`` views take read-only arrays. Raises CompileError with Cython's or
    clang's diagnostics, or saying what to install.
    """
    if (source is None) == (path is None):
        raise TypeError(
            "ez.cython takes the module's source or path=, one of them: "
            "ez.cython(text) or ez.cython(path='kernels.pyx')"
        )
    include = None
    if path is not None:
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path is a file name (str); got {type(path).__name__}")
        file = os.fspath(path)
        try:
            with open(file) as f:
                source = f.read()
        except OSError as exc:
            raise FileNotFoundError(f"ez.cython(path={file!r}): {exc.strerror}") from None
        stem = os.path.splitext(os.path.basename(file))[0]
        if not stem.isidentifier():
            raise ValueError(
                f"path names {os.path.basename(file)!r}; a Cython module's file name must "
                "be a Python identifier (kernels.pyx)"
            )
        include = os.path.dirname(os.path.abspath(file))
    elif not isinstance(source, str):
        raise TypeError(
            f"source is the module's Cython text (str); got {type(source).__name__} "
            "(for a file: ez.cython(path='kernels.pyx'))"
        )
    else:
        stem = "enzyme_py_cython"
    if directives is not None and not isinstance(directives, Mapping):
        raise TypeError(
            f"directives is a dict of Cython compiler directives, not "
            f"{type(directives).__name__}: directives={{'boundscheck': False}}"
        )
    for key in directives or {}:
        if not isinstance(key, str):
            raise TypeError(f"directives are named by str; got {key!r}")
    assert source is not None
    return _rebuild_module(
        source,
        tuple(sorted(dict(directives or {}).items())),
        tuple(_user_flags(flags)),
        stem,
        include,
    )
