"""The C side of ``ez.cython``: a wrapper in plain terms per Cython function, and the
preparation of Cython's C and of clang's IR for Enzyme (see frontends/cython.py)."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from enzyme_py._signature import Param

# Element types of memoryviews and pointers enzyme_py passes, as Cython spells them.
DTYPES: dict[str, np.dtype] = {
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
class Wrapped:
    """One Cython function and what was made of it: the wrapper's C code and
    parameters, or why enzyme_py cannot pass it."""

    name: str  # as the module lists it: "energy", "fsum[float]"
    symbol: str  # the wrapper's C name
    code: str
    params: tuple[Param, ...]
    refused: str = ""
    # What a LAYOUT_ERROR status (its detail the index here) says: a view declared
    # Fortran-contiguous given an array that is not.
    layout_errors: tuple[str, ...] = ()


# The wrappers' memoryview data pointers: restrict (noalias) in the build Enzyme
# differentiates, nothing in the build for calls whose arrays overlap.
NOALIAS = "__ENZYME_PY_NOALIAS"
NOALIAS_OFF_FLAG = f"-D{NOALIAS}="
# The status a wrapper reports for an array of the wrong layout: LAYOUT_ERROR + which
# one (in the status: errors[1] holds a pointer where the function raised, and Enzyme's
# type analysis wants one type there).
LAYOUT_ERROR = 100


def _layout(packings: list[str], where: str) -> str:
    """A memoryview's layout from Cython's packing per axis: "C" (the last axis
    contiguous: ``double[:, ::1]``), "F" (the first: ``double[::1, :]``) or "strided"
    (none: ``double[:, :]``, any layout)."""
    if "contig" not in packings:
        return "strided"
    if packings[-1] == "contig":
        return "C"
    if packings[0] == "contig":
        return "F"
    raise TypeError(
        f"{where} has a contiguous middle axis, which enzyme_py cannot pass: declare it "
        "C-contiguous (double[:, ::1]), Fortran-contiguous (double[::1, :]) or strided "
        "(double[:, :])"
    )


def _dtype(spelled: str, where: str) -> np.dtype:
    dtype = DTYPES.get(spelled)
    if dtype is None:
        known = ", ".join(DTYPES)
        raise TypeError(
            f"{where} has element type {spelled}; enzyme_py passes {known}: declare it "
            "with one of those (double or float for values to differentiate)"
        )
    return dtype


def wrap(info: dict[str, Any], symbol: str, label: str) -> Wrapped:
    """The wrapper of one cdef/cpdef function (see the module docstring)."""
    decls: list[str] = []
    setup: list[str] = []
    call: list[str] = []
    params: list[Param] = []
    layout_checks: list[tuple[str, int, str, int]] = []  # (name, ndim, C type, error)
    layout_errors: list[str] = []
    size_checks: list[tuple[str, int, int]] = []  # (struct pointer, its fields, error)
    for arg in info["args"]:
        name, kind = arg["name"], arg["kind"]
        where = f"parameter '{name}' ({arg['text']}) of '{label}'"
        if kind == "scalar":
            decls.append(f"{arg['c']} {name}")
            call.append(name)
            params.append(Param(name, "pending", None))
        elif kind == "pointer":
            if arg["pointee_is_pointer"]:
                raise TypeError(
                    f"{where} is a pointer to pointers, which enzyme_py cannot pass: take "
                    "a 2-D memoryview instead (double[:, ::1], or double[:, :] strided)"
                )
            spelled = arg["dtype"].removeprefix("const ")
            struct = arg.get("struct")
            if struct is not None:
                # A struct of doubles (or of floats) by pointer: an array of its
                # fields, its size checked in the wrapper.
                types = {t.removeprefix("const ") for _, t in struct["fields"]}
                if len(types) != 1 or not types <= {"double", "float"}:
                    raise TypeError(
                        f"{where} points to a struct whose fields are not all double or all "
                        "float; enzyme_py passes structs of doubles (or of floats) by pointer"
                    )
                (element,) = types
                const = "const " if "const" in arg["text"] else ""
                decls += [f"{const}{element} *{name}", f"int64_t {name}_shape0"]
                call.append(f"({const}{struct['c']} *){name}")
                count = len(struct["fields"])
                fields = ", ".join(n for n, _ in struct["fields"])
                size_checks.append((name, count, len(layout_errors)))
                layout_errors.append(
                    f"{where} is a struct of {count} {element}s ({fields}): pass a 1-D "
                    f"{element} array of at least {count} values"
                )
                index = len(params)
                params.append(Param(name, "pointer", DTYPES[element], readonly=bool(const)))
                params.append(
                    Param(f"{name}.shape0", "int", np.dtype(np.int64), hidden=("shape", index, 0))
                )
                continue
            _dtype(spelled, where)
            decls.append(f"{'const ' if 'const' in arg['text'] else ''}{spelled} *{name}")
            call.append(name)
            params.append(Param(name, "pending", None))
        elif kind == "memoryview":
            if arg["dtype"].startswith("const "):  # Cython spells const views' dtype so
                arg = {**arg, "dtype": arg["dtype"][len("const ") :], "const": True}
            dtype = _dtype(arg["dtype"], where)
            axes, nd = arg["axes"], arg["ndim"]
            if any(access != "direct" for access, _ in axes):
                raise TypeError(
                    f"{where} is an indirect memoryview, which enzyme_py cannot pass: "
                    "declare it direct (double[:, :], or double[:, ::1] C-contiguous)"
                )
            layout = _layout([packing for _, packing in axes], where)
            const = "const " if arg["const"] else ""
            view = f"{name}_view"
            # The data pointer is noalias (NOALIAS): Cython's indexing then does not
            # make Enzyme assume that writing one view may change another. Calls whose
            # arrays overlap go to the build without it (frontends/cython.py).
            decls.append(f"{const}{arg['dtype']} *{NOALIAS} {name}")
            decls.extend(f"int64_t {name}_shape{d}" for d in range(nd))
            if layout != "C":
                decls.extend(f"int64_t {name}_stride{d}" for d in range(nd))
            setup += [
                f"  __Pyx_memviewslice {view};",
                f"  memset(&{view}, 0, sizeof {view});",
                f"  {view}.data = (char *){name};",
                *(f"  {view}.shape[{d}] = {name}_shape{d};" for d in range(nd)),
                *(f"  {view}.suboffsets[{d}] = -1;" for d in range(nd)),
            ]
            if layout == "C":
                setup += [
                    f"  {view}.strides[{nd - 1}] = sizeof({arg['dtype']});",
                    *(
                        f"  {view}.strides[{d}] = {view}.strides[{d + 1}] * {name}_shape{d + 1};"
                        for d in range(nd - 2, -1, -1)
                    ),
                ]
            else:
                setup += [f"  {view}.strides[{d}] = {name}_stride{d};" for d in range(nd)]
            if layout == "F":
                # Cython's code steps the first axis by the item size: an array that is
                # not Fortran-contiguous is refused before the function runs.
                layout_checks.append((name, nd, arg["dtype"], len(layout_errors)))
                layout_errors.append(
                    f"{where} is Fortran-contiguous: pass a Fortran-ordered array "
                    "(np.asfortranarray), or declare it strided "
                    f"({arg['dtype']}[{', '.join([':'] * nd)}]) to take any layout"
                )
            call.append(view)
            index = len(params)
            params.append(
                Param(name, "pointer", dtype, strided=layout != "C", readonly=arg["const"])
            )
            params.extend(
                Param(f"{name}.shape{d}", "int", np.dtype(np.int64), hidden=("shape", index, d))
                for d in range(nd)
            )
            if layout != "C":
                params.extend(
                    Param(
                        f"{name}.stride{d}", "int", np.dtype(np.int64), hidden=("stride", index, d)
                    )
                    for d in range(nd)
                )
        else:
            raise TypeError(
                f"{where} is a Python object or a C type enzyme_py cannot pass; it passes "
                "C scalars (double, float, integers), pointers and memoryviews of "
                f"{', '.join(DTYPES)}: declare it with one of those (double x, "
                "double[::1] x; a struct of doubles by pointer)"
            )
    ret = info["ret"]
    if "refused" in ret:
        raise TypeError(ret["refused"])
    if ret["kind"] not in ("scalar", "void"):
        raise TypeError(
            f"'{label}' returns {ret['text']}; enzyme_py differentiates functions returning "
            "a C scalar or nothing (write arrays into an output memoryview instead)"
        )
    if info.get("def"):
        call.insert(0, "NULL")  # a def function's C implementation: its unused self
    if info["cpdef"]:
        call.append("1")  # skip the dispatch to a Python override
    if info["optional_args"]:
        call.append("NULL")  # parameters with defaults take their defaults
    decls.append("int64_t *errors")
    params.append(Param("errors", "pointer", None, hidden=("errors", 0, 0)))
    void = ret["kind"] == "void"
    boxed = bool(ret.get("boxed"))
    invoke = ("" if void else "result = ") + f"{info['cname']}({', '.join(call)});"
    check = "  if (PyErr_Occurred()) __enzyme_py_cython_fetch(errors);"
    body = [*setup, *([] if void else [f"  {ret['c']} result;"])]
    if boxed:
        # A def (or cpdef) function's C code returns its C double boxed (enzyme_py's
        # __enzyme_py_box: a malloc'ed block, opened and freed here), or None.
        invoke = f"boxed = {info['cname']}({', '.join(call)});"
        body.append("  PyObject *boxed;")
        on_none = ""
        if not void:
            on_none = f" errors[0] = {LAYOUT_ERROR + len(layout_errors)};"
            layout_errors.append(
                f"'{label}' returned None (it ended without returning a value): return a "
                "C double on every path"
            )
        opened = [
            "  else if (boxed != NULL) {",
            *([] if void else [f"    result = ({ret['c']})((PyFloatObject *)boxed)->ob_fval;"]),
            "    free(boxed);",
            "  }",
        ]
        if void or ret.get("may_return_none", True):
            opened.insert(0, f"  else if (boxed == Py_None) {{ Py_DECREF(boxed);{on_none} }}")
        # else no None to tell apart: where LLVM sees the box made it drops it, and in
        # derivatives that do not return the value, the code computing it too
        check += "\n".join(["", *opened])
    for name, count, error in size_checks:
        body += [
            f"  if ({name}_shape0 < {count}) {{",
            f"    errors[0] = {LAYOUT_ERROR + error};",
            f"    return{'' if void else ' 0'};",
            "  }",
        ]
    for name, nd, ctype, error in layout_checks:
        conditions = []
        expected = f"(int64_t)sizeof({ctype})"
        for d in range(nd):
            conditions.append(f"({name}_shape{d} > 1 && {name}_stride{d} != {expected})")
            expected = f"{expected} * {name}_shape{d}"
        body += [
            f"  if ({' || '.join(conditions)}) {{",
            f"    errors[0] = {LAYOUT_ERROR + error};",
            f"    return{'' if void else ' 0'};",
            "  }",
        ]
    if info["nogil"]:
        # Derivatives run without the GIL: taken after the call, to see whether the
        # function raised (a bounds check's IndexError).
        body += ["  " + invoke, "  PyGILState_STATE gil = PyGILState_Ensure();", check]
    else:  # Cython's code expects the GIL
        body += ["  PyGILState_STATE gil = PyGILState_Ensure();", "  " + invoke, check]
    body += ["  PyGILState_Release(gil);", *([] if void else ["  return result;"])]
    rtype = "void" if void else ret["c"]
    code = "\n".join([f"{rtype} {symbol}({', '.join(decls)}) {{", *body, "}", ""])
    return Wrapped(label, symbol, code, tuple(params), layout_errors=tuple(layout_errors))


PRELUDE = """
/* enzyme_py: wrappers in plain terms around the module's C functions. */
#include <stdint.h>
#include <string.h>
#ifndef __ENZYME_PY_NOALIAS
#define __ENZYME_PY_NOALIAS restrict
#endif
static void __enzyme_py_cython_fetch(int64_t *errors) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  Py_XDECREF(type);
  Py_XDECREF(tb);
  errors[0] = 1;
  /* A reference Python takes over; stored as the pointer it is (an integer
     cast would contradict Enzyme's type analysis of the buffer). */
  ((PyObject **)errors)[1] = value;
}
"""
# What the wrappers and Cython's bounds checks call of Python's C API (with
# __Pyx_AddTraceback and __Pyx_WriteUnraisable emptied): allowed, and told to Enzyme
# to have no derivative. Reaching anything else of Python is refused.
_ERROR_PATH_API = frozenset(
    {
        "PyErr_Format",
        "PyErr_SetString",
        "PyErr_SetNone",
        "PyErr_NoMemory",
        "PyErr_Occurred",
        "PyErr_Fetch",
        "PyErr_NormalizeException",
        "PyGILState_Ensure",
        "PyGILState_Release",
        "_Py_Dealloc",
    }
)
_PYTHON_GLOBAL = re.compile(r"^(@(?:PyExc_\w+|_Py_\w*Struct) = external [^\n]*)$", re.MULTILINE)


def inactive_error_path(ir: str) -> str:
    """Enzyme told that the error path's calls and Python's exception types have no
    derivative and free nothing it tracks."""

    def declaration(m: re.Match[str]) -> str:
        if m.group(2) not in _ERROR_PATH_API:
            return m.group(0)
        return m.group(0) + ' nofree "enzyme_inactive"'

    ir = re.sub(
        r"^(declare [^\n]*@(\w+)\([^\n]*)$",
        lambda m: declaration(m),
        ir,
        flags=re.MULTILINE,
    )
    ir = re.sub(
        r"^(define [^\n]*@__enzyme_py_cython_fetch\([^\n]*?)\s*\{$",
        lambda m: m.group(1) + ' nofree "enzyme_inactive" {',
        ir,
        flags=re.MULTILINE,
    )
    ir, count = _PYTHON_GLOBAL.subn(r"\1, !enzyme_inactive !90000", ir)
    return ir + "\n!90000 = !{}\n" if count else ir


def python_calls(ir: str, root: str) -> list[str]:
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
            if re.match(r"_?Py", callee) and callee not in _ERROR_PATH_API:
                found.add(callee)
            elif callee in bodies and callee not in seen:
                seen.add(callee)
                todo.append(callee)
    return sorted(found)


def c_for_ir(c_text: str) -> str:
    """Cython's C with its module init made static: clang then drops the extension
    module's machinery (type objects, def wrappers), which the wrappers never reach."""
    text = re.sub(r"__Pyx_PyMODINIT_FUNC\s+(PyInit_\w+\(void\))", r"static PyObject *\1", c_text)
    # An exception's traceback entry needs the module's state, which is never set up;
    # a noexcept function's exception stays set for the wrapper to raise.
    text = re.sub(
        r"(static void __Pyx_(?:AddTraceback|WriteUnraisable)\([^)]*\)\s*\{)",
        r"\1 if (1) return;",
        text,
    )
    # `with nogil:` releases the GIL; a derivative runs without it already.
    text = text.replace("_save = PyEval_SaveThread();", "_save = NULL;")
    text = text.replace("PyEval_RestoreThread(_save);", "(void)_save;")
    # The init sets whether assert statements run (not under python -O): set here.
    text = text.replace(
        "static int __pyx_assertions_enabled_flag;",
        f"static int __pyx_assertions_enabled_flag = {0 if sys.flags.optimize else 1};",
    )
    # What def functions' (and object-returning cpdef functions') return statements
    # call instead of PyFloat_FromDouble (the driver's Box): no Python object.
    return text.replace('#include "Python.h"', '#include "Python.h"\n' + _BOX, 1)


_BOX = """
static PyObject *__enzyme_py_box(double value) {
  PyFloatObject *b = (PyFloatObject *)malloc(sizeof *b);
  /* No NULL return: one would keep LLVM from dropping the box before Enzyme (and
     with it, in derivatives that do not return the value, the code computing it);
     24 bytes not to be had ends the process. */
  if (b == NULL) abort();
  /* Only the wrapper takes it (the driver boxes no value other C code takes), and
     frees it; never freed by its reference count. Its type stays NULL: a pointer to
     PyFloat_Type stored in it would be mixed activity to Enzyme. */
  b->ob_base.ob_refcnt = (Py_ssize_t)1 << 40;
  b->ob_base.ob_type = NULL;
  b->ob_fval = value;
  return (PyObject *)b;
}
"""
