"""Run by ``ez.cython`` in a child interpreter: Cython translates a .pyx to C, and the
module's C functions are described as JSON (what the wrapper generator needs).

    python _cython_driver.py SOURCE.pyx OUT.c OUT.json DIRECTIVES_JSON

OUT.json: ``{"functions": [...], "read": [[path, size, mtime_ns] of every file Cython
read]}``.

A child keeps Cython's global state and its diagnostics (printed to stderr) out of
the caller's process. It imports Cython only, never enzyme_py. Exit status 1: Cython
reported errors (on stderr); 2: Cython is not installed.
"""

from __future__ import annotations

import json
import os
import string
import sys
from typing import Any, cast

# This file's folder holds enzyme_py's cython.py, which would shadow Cython's own
# "cython" module (Cython imports it): off the path.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]


def _type(t: Any) -> dict[str, Any]:
    """How the parent sees a C type: a scalar, a memoryview slice or a pointer."""
    if getattr(t, "is_memoryviewslice", False):
        dtype = t.dtype
        return {
            "kind": "memoryview",
            "text": str(t),
            "dtype": str(getattr(dtype, "const_base_type", dtype)),
            "const": bool(getattr(dtype, "is_const", False)),
            "ndim": int(t.ndim),
            "axes": [list(a) for a in t.axes],
        }
    if getattr(t, "is_ptr", False):
        base = t.base_type
        found = {
            "kind": "pointer",
            "text": str(t),
            "dtype": str(getattr(base, "const_base_type", base)),
            "pointee_is_pointer": bool(getattr(base, "is_ptr", False)),
        }
        # (a const struct: its fields are the struct's own, behind cv_base_type)
        struct = getattr(base, "cv_base_type", None) or getattr(base, "const_base_type", base)
        if getattr(struct, "is_struct", False) and getattr(struct, "scope", None) is not None:
            # a cdef struct: its C name and its fields' types, in order
            found["struct"] = {
                "c": struct.empty_declaration_code(),
                "fields": [[e.name, str(e.type)] for e in struct.scope.var_entries],
            }
        return found
    if getattr(t, "is_void", False):
        return {"kind": "void", "text": "void"}
    if getattr(t, "is_float", False) or getattr(t, "is_int", False):
        return {"kind": "scalar", "text": str(t), "c": t.empty_declaration_code()}
    return {"kind": "other", "text": str(t)}


def _function(name: str, entry: Any, fused: list[str] | None) -> dict[str, Any]:
    t = entry.type
    n_required = len(t.args) - int(t.optional_arg_count or 0)
    return {
        "name": name,
        "cname": entry.cname,
        "fused": fused,
        "nogil": bool(t.nogil),
        "noexcept": t.exception_value is None and not t.exception_check,
        "cpdef": bool(t.is_overridable),
        "optional_args": bool(t.optional_arg_count),
        "ret": _type(t.return_type),
        "args": [{"name": a.name, **_type(a.type)} for a in t.args[:n_required]],
    }


# Builtin exceptions a raise statement may name to be raised again from a derivative
# (each is PyExc_<name> in Python's C API); the groups take more than a message.
_GROUPS = ("BaseExceptionGroup", "ExceptionGroup")


def _children(node: Any) -> list[Any]:
    out: list[Any] = []
    for attr in getattr(node, "child_attrs", ()):
        child = getattr(node, attr, None)
        out.extend(child if isinstance(child, list) else [child])
    return [c for c in out if c is not None]


def _c_string(text: str) -> str:
    """A C string literal of ``text`` in UTF-8 (every byte but letters, digits and a few
    punctuation marks as an octal escape)."""
    plain = string.ascii_letters + string.digits + " _.,:;-"
    escaped = [chr(b) if chr(b) in plain else f"\\{b:03o}" for b in text.encode("utf-8")]
    return '"' + "".join(escaped) + '"'


def _plain_raise(node: Any) -> tuple[str, str | None] | None:
    """``raise Name``, ``raise Name()`` or ``raise Name("constant text")`` of a builtin
    exception (or an assert statement's, with its constant message): its name and
    message; None for any other raise statement."""
    import builtins

    from Cython.Compiler import ExprNodes

    if node.exc_tb is not None or node.cause is not None:
        return None
    exc, message = node.exc_type, None
    if node.exc_value is not None:
        # an assert statement's message: ``assert c, "text"`` raises AssertionError("text")
        if not isinstance(node.exc_value, ExprNodes.UnicodeNode) or not getattr(
            exc, "is_name", False
        ):
            return None
        message = str(cast(Any, node.exc_value).value)
    if isinstance(exc, ExprNodes.SimpleCallNode):
        args = exc.args if exc.args is not None else getattr(exc.arg_tuple, "args", None)
        if args is None or len(args) > 1:
            return None
        if args:
            if not isinstance(args[0], ExprNodes.UnicodeNode):
                return None
            message = str(cast(Any, args[0]).value)
        exc = exc.function
    if not (getattr(exc, "is_name", False) and exc.entry is not None and exc.entry.is_builtin):
        return None
    found = getattr(builtins, exc.name, None)
    if not (isinstance(found, type) and issubclass(found, BaseException)):
        return None
    if exc.name in _GROUPS:
        return None
    return exc.name, message


def _rewrite_raises(tree: Any) -> None:
    """Plain raise statements (``raise ValueError("text")``) become PyErr_SetString,
    which needs none of the module's state (builtins and constants are set up by its
    init, which never runs): the exception is raised again from a derivative."""
    from Cython.Compiler import Nodes

    class PlainRaise(Nodes.RaiseStatNode):
        exc: tuple[str, str | None] = ("", None)

        def generate_execution_code(self, code: Any) -> None:
            code.mark_pos(self.pos)
            name, message = self.exc
            if message is None:
                call = f"PyErr_SetNone(PyExc_{name});"
            else:
                call = f"PyErr_SetString(PyExc_{name}, {_c_string(message)});"
            code.putln(f"{call} {code.error_goto(self.pos)}")

    todo = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, Nodes.RaiseStatNode):
            plain = _plain_raise(node)
            if plain is not None:
                node.__class__ = PlainRaise
                cast(Any, node).exc = plain
                continue
        todo.extend(_children(node))


def _returns(body: Any) -> list[Any]:
    """The return statements of a function's body (not of functions inside it)."""
    from Cython.Compiler import ExprNodes, Nodes

    found, todo = [], [body]
    while todo:
        node = todo.pop()
        if isinstance(node, Nodes.ReturnStatNode):
            found.append(node)
        if isinstance(node, (Nodes.FuncDefNode, ExprNodes.LambdaNode)):
            continue
        todo.extend(_children(node))
    return found


def _box_returns(body: Any, where: str) -> dict[str, Any]:
    """How a function returning a Python object returns: C floating-point values
    (boxed by enzyme_py's __enzyme_py_box, which the wrapper opens), nothing (void),
    or something else (``refused``)."""
    from Cython.Compiler import ExprNodes

    class Box(ExprNodes.CoerceToPyTypeNode):
        def generate_result_code(self, code: Any) -> None:
            code.putln(f"{self.result()} = __enzyme_py_box((double){self.arg.result()});")
            self.generate_gotref(code)

    kinds: set[str] = set()
    boxes = []
    for ret in _returns(body):
        value = ret.value
        if value is None:
            continue
        arg = getattr(value, "arg", None)
        if (
            isinstance(value, ExprNodes.CoerceToPyTypeNode)
            and arg is not None
            and getattr(arg.type, "is_float", False)
            and str(arg.type) in ("double", "float")
        ):
            kinds.add(str(arg.type))
            boxes.append(value)
        else:
            what = f"{arg.type} converted to a Python object" if arg is not None else value.type
            return {
                "kind": "other",
                "text": "object",
                "refused": (
                    f"{where} returns a Python object ({what}), not a C double computed "
                    "in C: give the value a C type (cdef double s), or declare the function "
                    "with a C return type (cpdef double f(...), cdef double f(...))"
                ),
            }
    if len(kinds) > 1:
        return {
            "kind": "other",
            "text": "object",
            "refused": f"{where} returns both float and double values: return one C type",
        }
    for value in boxes:
        value.__class__ = Box
    if not kinds:
        return {"kind": "void", "text": "void", "boxed": True}
    (c,) = kinds
    # None where a return has no value or the body can end without one
    none = any(ret.value is None for ret in _returns(body)) or not body.is_terminator
    return {"kind": "scalar", "text": c, "c": c, "boxed": True, "may_return_none": none}


def _def_function(node: Any) -> dict[str, Any]:
    """A module-level def function: its C implementation (``__pyx_pf_...``, which takes
    the typed parameters as C values after an unused ``self``) described as a cdef
    function's, or why it cannot be (``refused``)."""
    where = f"the def function '{node.name}'"
    found: dict[str, Any] = {
        "name": node.name,
        "cname": node.entry.pyfunc_cname,
        "fused": None,
        "nogil": False,
        "noexcept": False,
        "cpdef": False,
        "def": True,
        "optional_args": False,
        "args": [{"name": a.name, **_type(a.type)} for a in node.args],
    }
    problem = ""
    if node.star_arg is not None or node.starstar_arg is not None:
        problem = "takes *args or **kwargs: give it named parameters with C types"
    elif node.needs_closure or node.is_generator or getattr(node, "needs_outer_scope", False):
        problem = (
            "is a generator or has functions inside it: write the computation as a "
            "cdef function (cdef double f(...))"
        )
    if problem:
        found["ret"] = {"kind": "other", "text": "object", "refused": f"{where} {problem}"}
        return found
    found["ret"] = _box_returns(node.body, where)
    return found


def _module_defs(tree: Any) -> list[Any]:
    """The def functions at the module's top level (not cpdef functions' wrappers)."""
    from Cython.Compiler import Nodes

    found, todo = [], [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, Nodes.DefNode):
            found.append(node)
        elif not isinstance(node, (Nodes.FuncDefNode, Nodes.CClassDefNode, Nodes.PyClassDefNode)):
            todo.extend(_children(node))
    return found


def _cfunc_nodes(tree: Any) -> dict[str, Any]:
    """The module's cdef/cpdef function nodes by C name."""
    from Cython.Compiler import Nodes

    found, todo = {}, [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, Nodes.CFuncDefNode) and node.entry is not None:
            found[node.entry.cname] = node
        if not isinstance(node, Nodes.DefNode):
            todo.extend(_children(node))
    return found


def _direct_calls(tree: Any) -> set[str]:
    """C names of the functions the module's code calls directly (a cpdef function's
    own Python wrapper left out)."""
    from Cython.Compiler import ExprNodes, Nodes

    found, todo = set(), [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ExprNodes.SimpleCallNode):
            entry = getattr(node.function, "entry", None)
            if entry is not None and entry.cname:
                found.add(entry.cname)
        if isinstance(node, Nodes.CFuncDefNode):
            todo.append(node.body)
        else:
            todo.extend(_children(node))
    return found


def _record_reads() -> dict[str, tuple[int, int]]:
    """Every file opened for reading from now on, by absolute path, with its size and
    modification time (ns) when opened: what Cython read (the .pyx, its .pxi and .pxd
    files, its own utility code). The parent keeps the translation on disk and serves
    it again only while each of these is unchanged. Installed before Cython is
    imported: its compiled modules keep ``open`` as found then."""
    import builtins
    import io

    read: dict[str, tuple[int, int]] = {}
    real_open = builtins.open

    def recording_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        opened = real_open(file, mode, *args, **kwargs)
        if isinstance(file, (str, bytes, os.PathLike)) and not set(str(mode)) & set("wax+"):
            status = os.fstat(opened.fileno())
            read[os.path.abspath(os.fsdecode(file))] = (status.st_size, status.st_mtime_ns)
        return opened

    builtins.open = io.open = recording_open  # type: ignore[assignment]
    return read


def main() -> int:
    source, c_file, json_file, directives_text = sys.argv[1:5]
    read = _record_reads()
    try:
        from Cython.Compiler import Main, Pipeline
        from Cython.Compiler.ParseTreeTransforms import AnalyseExpressionsTransform
    except ImportError:
        return 2
    found: list[dict[str, Any]] = []

    def collect(node: Any) -> Any:
        _rewrite_raises(node)
        cfuncs = _cfunc_nodes(node)
        for name, entry in node.scope.entries.items():
            t = entry.type
            if not getattr(t, "is_cfunction", False) or entry.visibility == "extern":
                continue
            fused_node = getattr(entry, "fused_cfunction", None)
            if not t.is_fused:
                found.append(_function(name, entry, None))
            elif fused_node is not None:
                order = t.get_fused_types()
                for spec in fused_node.nodes:
                    # Cython emits only the specialisations a module uses: all of them.
                    spec.entry.used = True
                    f2s = spec.local_scope.fused_to_specific
                    found.append(_function(name, spec.entry, [str(f2s[f]) for f in order]))
        called = _direct_calls(node)
        for info in found:
            # cpdef functions returning a Python object: boxed as def functions' are,
            # unless other C code of the module takes that object
            cfunc = cfuncs.get(info["cname"])
            if info["ret"]["kind"] != "other" or not info["cpdef"] or cfunc is None:
                continue
            where = f"the cpdef function '{info['name']}'"
            if info["cname"] in called:
                info["ret"]["refused"] = (
                    f"{where} returns a Python object, which other functions of the module "
                    f"call it for: declare its C return type (cpdef double {info['name']}(...))"
                )
            else:
                info["ret"] = _box_returns(cfunc.body, where)
        names = {info["name"] for info in found}
        for def_node in _module_defs(node):
            if def_node.name not in names:
                found.append(_def_function(def_node))
        return node

    original = Pipeline.create_pyx_pipeline

    def pipeline(*args: Any, **kwargs: Any) -> Any:
        stages = original(*args, **kwargs)
        return Pipeline.insert_into_pipeline(stages, collect, after=AnalyseExpressionsTransform)

    Pipeline.create_pyx_pipeline = pipeline
    directives = json.loads(directives_text)
    include = directives.pop("__include__", None)  # the .pyx file's own folder
    from Cython.Compiler import Options

    for name in directives:
        if name not in Options.directive_types:
            sys.stderr.write(f"unknown Cython compiler directive {name!r} in directives=\n")
            return 1
    options = Main.CompilationOptions(
        Main.default_options,
        language_level=3,
        output_file=c_file,
        compiler_directives=directives,
        include_path=[include] if include else [],
    )
    result = Main.compile_single(source, options, full_module_name=None)
    if result.num_errors:
        return 1
    with open(json_file, "w") as f:
        json.dump({"functions": found, "read": sorted([p, *st] for p, st in read.items())}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
