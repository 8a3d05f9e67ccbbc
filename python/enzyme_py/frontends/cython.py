"""Cython modules as sources of functions to differentiate (``ez.cython``).

Cython (3.x, in a child interpreter: ``_cython_driver.py``) translates the module to
C and describes its cdef/cpdef functions; clang 15 compiles that C, with a wrapper per
function appended, to LLVM IR. A cdef function takes a typed memoryview as a
``__Pyx_memviewslice`` struct by value; its wrapper takes plain terms,

    RET wrapper(T *x, int64_t x_shape0, ..., <scalars>)

and builds the slice: no memoryview object (NULL, which Cython's reference counting
skips), the data, the shape (hidden parameters enzyme_py fills from the NumPy array)
and C-contiguous strides. A function that reaches Python (raise, a bounds check's
IndexError) is refused: the module's init never runs, so its Python state is unset.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from enzyme_py._signature import Param
from enzyme_py.core import CompileError
from enzyme_py.frontends.ir import (
    IRFunction,
    SourceModule,
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
# Element types of memoryviews and pointers enzyme_py passes, as Cython spells them.
_DTYPES: dict[str, np.dtype] = {
    "double": np.dtype(np.float64),
    "float": np.dtype(np.float32),
    "int": np.dtype(np.intc),
    "long": np.dtype(np.int_),
    "long long": np.dtype(np.longlong),
    "Py_ssize_t": np.dtype(np.intp),
    "int64_t": np.dtype(np.int64),
    "int32_t": np.dtype(np.int32),
}


@dataclass(frozen=True)
class _Wrapped:
    """One Cython function and what was made of it: the wrapper's C code and
    parameters, or why enzyme_py cannot pass it."""

    name: str  # as the module lists it: "energy", "fsum[float]"
    symbol: str  # the wrapper's C name
    code: str
    params: tuple[Param, ...]
    refused: str = ""


def _dtype(spelled: str, where: str) -> np.dtype:
    dtype = _DTYPES.get(spelled)
    if dtype is None:
        known = ", ".join(_DTYPES)
        raise TypeError(f"{where} has element type {spelled}; enzyme_py passes {known}")
    return dtype


def _wrap(info: dict[str, Any], symbol: str, label: str) -> _Wrapped:
    """The wrapper of one cdef/cpdef function (see the module docstring)."""
    decls: list[str] = []
    setup: list[str] = []
    call: list[str] = []
    params: list[Param] = []
    for arg in info["args"]:
        name, kind = arg["name"], arg["kind"]
        where = f"parameter '{name}' ({arg['text']}) of '{label}'"
        if kind == "scalar":
            decls.append(f"{arg['c']} {name}")
            call.append(name)
            params.append(Param(name, "pending", None))
        elif kind == "pointer":
            if arg["pointee_is_pointer"]:
                raise TypeError(f"{where} is a pointer to pointers, which enzyme_py cannot pass")
            _dtype(arg["dtype"], where)
            decls.append(f"{'const ' if 'const' in arg['text'] else ''}{arg['dtype']} *{name}")
            call.append(name)
            params.append(Param(name, "pending", None))
        elif kind == "memoryview":
            if arg["dtype"].startswith("const "):  # Cython spells const views' dtype so
                arg = {**arg, "dtype": arg["dtype"][len("const ") :], "const": True}
            dtype = _dtype(arg["dtype"], where)
            axes, nd = arg["axes"], arg["ndim"]
            if any(access != "direct" for access, _ in axes):
                raise TypeError(f"{where} is an indirect memoryview; declare it direct")
            if any(packing == "contig" for _, packing in axes[:-1]):
                raise TypeError(
                    f"{where} is Fortran-contiguous; enzyme_py passes C-contiguous arrays: "
                    f"declare it {arg['dtype']}[{', '.join([':'] * (nd - 1) + ['::1'])}]"
                )
            const = "const " if arg["const"] else ""
            view = f"{name}_view"
            decls.append(f"{const}{arg['dtype']} *{name}")
            decls.extend(f"int64_t {name}_shape{d}" for d in range(nd))
            setup += [
                f"  __Pyx_memviewslice {view};",
                f"  memset(&{view}, 0, sizeof {view});",
                f"  {view}.data = (char *){name};",
                *(f"  {view}.shape[{d}] = {name}_shape{d};" for d in range(nd)),
                *(f"  {view}.suboffsets[{d}] = -1;" for d in range(nd)),
                f"  {view}.strides[{nd - 1}] = sizeof({arg['dtype']});",
                *(
                    f"  {view}.strides[{d}] = {view}.strides[{d + 1}] * {name}_shape{d + 1};"
                    for d in range(nd - 2, -1, -1)
                ),
            ]
            call.append(view)
            index = len(params)
            params.append(Param(name, "pointer", dtype))
            params.extend(
                Param(f"{name}.shape{d}", "int", np.dtype(np.int64), hidden=("shape", index, d))
                for d in range(nd)
            )
        else:
            raise TypeError(
                f"{where} is a Python object or a C type enzyme_py cannot pass; it passes "
                "C scalars (double, float, integers), pointers and memoryviews of "
                f"{', '.join(_DTYPES)}"
            )
    ret = info["ret"]
    if ret["kind"] not in ("scalar", "void"):
        raise TypeError(
            f"'{label}' returns {ret['text']}; enzyme_py differentiates functions returning "
            "a C scalar or nothing (write arrays into an output memoryview instead)"
        )
    if info["cpdef"]:
        call.append("1")  # skip the dispatch to a Python override
    if info["optional_args"]:
        call.append("NULL")  # parameters with defaults take their defaults
    void = ret["kind"] == "void"
    invoke = f"{info['cname']}({', '.join(call)});"
    body = [*setup, "  " + (invoke if void else f"return {invoke}")]
    rtype = "void" if void else ret["c"]
    code = "\n".join([f"{rtype} {symbol}({', '.join(decls)}) {{", *body, "}", ""])
    return _Wrapped(label, symbol, code, tuple(params))


_PRELUDE = """
/* enzyme_py: wrappers in plain terms around the module's C functions. */
#include <stdint.h>
#include <string.h>
"""


def _python_calls(ir: str, root: str) -> list[str]:
    """The Python C API functions that ``root`` reaches through direct calls.

    The module's init never runs (its state is never set up), so Cython's Python
    paths (raising, an index error's traceback, Python objects) cannot run in a
    derivative: functions that reach them are refused."""
    bodies: dict[str, str] = {}
    for m in re.finditer(r"^define [^\n]*?@([\w.$]+)\((.*?)^\}$", ir, re.MULTILINE | re.DOTALL):
        bodies[m.group(1)] = m.group(2)
    seen, todo, found = {root}, [root], set()
    while todo:
        for callee in re.findall(r"@([\w.$]+)\(", bodies.get(todo.pop(), "")):
            if re.match(r"_?Py", callee):
                found.add(callee)
            elif callee in bodies and callee not in seen:
                seen.add(callee)
                todo.append(callee)
    return sorted(found)


def _run_cython(source: str, stem: str, directives: dict[str, Any], include: str | None) -> Any:
    if importlib.util.find_spec("Cython") is None:
        raise CompileError(f"ez.cython needs Cython, which is not installed: {_INSTALL}")
    _clang()  # CompileError saying what to install, before Cython's work
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
            return c_text, json.load(f)


def _c_for_ir(c_text: str) -> str:
    """Cython's C with its module init made static: clang then drops the extension
    module's machinery (type objects, def wrappers), which the wrappers never reach."""
    text = re.sub(r"__Pyx_PyMODINIT_FUNC\s+(PyInit_\w+\(void\))", r"static PyObject *\1", c_text)
    # `with nogil:` releases the GIL; a derivative runs without it already.
    text = text.replace("_save = PyEval_SaveThread();", "_save = NULL;")
    return text.replace("PyEval_RestoreThread(_save);", "(void)_save;")


class CythonModule:
    """A Cython module compiled for differentiation: its cdef/cpdef functions are
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
        self._wrapped: dict[str, _Wrapped] = {}
        self._fused: dict[str, list[str]] = {}
        for i, info in enumerate(infos):
            label = info["name"]
            if info["fused"] is not None:
                label = f"{label}[{', '.join(info['fused'])}]"
                self._fused.setdefault(info["name"], []).append(label)
            symbol = f"__enzyme_py_cython_{i}_{info['name']}"
            try:
                self._wrapped[label] = _wrap(info, symbol, label)
            except TypeError as exc:
                self._wrapped[label] = _Wrapped(label, symbol, "", (), str(exc))
        code = [w.code for w in self._wrapped.values() if not w.refused]
        full = _c_for_ir(c_text) + _PRELUDE + "\n".join(code)
        includes = [f"-I{sysconfig.get_paths()['include']}"]
        if "numpy/arrayobject.h" in c_text:
            includes.append(f"-I{np.get_include()}")
        try:
            ir = _compile(full, "c", [*includes, "-Wno-everything", *chosen])
        except CompileError as exc:
            raise CompileError(f"clang did not compile Cython's C: {exc}") from None
        self._module: SourceModule = parse_module(ir)
        for label, wrapped in self._wrapped.items():
            python = [] if wrapped.refused else _python_calls(ir, wrapped.symbol)
            if python:
                self._wrapped[label] = replace(
                    wrapped,
                    refused=(
                        f"it reaches Python ({', '.join(python[:4])}): a raise statement, a "
                        "bounds check's IndexError or a Python object, and Python cannot run "
                        "inside a derivative yet. Compile with directives={'boundscheck': "
                        "False} (or decorate it with @cython.boundscheck(False)) and keep "
                        "raise statements and Python objects out of it"
                    ),
                )
        self._made: dict[str, IRFunction] = {}

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

        fn = replace(raw, params=params, origin=("cython", *self._origin, name))
        self._made[name] = fn
        return fn

    def _missing(self, name: str) -> str:
        if name in self._fused:
            picks = ", ".join(f"m[{s!r}]" for s in self._fused[name])
            return f"'{name}' is a fused function: pick a specialisation ({picks})"
        refused = sorted(n for n, w in self._wrapped.items() if w.refused)
        also = f"; with types enzyme_py cannot pass: {', '.join(refused)}" if refused else ""
        return (
            f"the Cython module defines no cdef/cpdef function '{name}' (it defines: "
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
    (language_level=3) and compile it with clang 15; its cdef and cpdef functions with
    C-typed parameters are attributes and items of the result.

    ``directives`` are Cython compiler directives (``{"boundscheck": False}``);
    ``flags`` clang arguments, as for ``ez.c``. Parameters: C scalars, pointers and
    C-contiguous typed memoryviews (``double[::1]``, ``double[:, ::1]``, also ``double[:]``
    declarations, passed C-contiguous arrays). Raises CompileError with Cython's or
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
