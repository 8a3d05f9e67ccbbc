"""Run by ``ez.cython`` in a child interpreter: Cython translates a .pyx to C, and the
module's C functions are described as JSON (what the wrapper generator needs).

    python _cython_driver.py SOURCE.pyx OUT.c OUT.json DIRECTIVES_JSON

A child keeps Cython's global state and its diagnostics (printed to stderr) out of
the caller's process. It imports Cython only, never enzyme_py. Exit status 1: Cython
reported errors (on stderr); 2: Cython is not installed.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

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


def main() -> int:
    source, c_file, json_file, directives_text = sys.argv[1:5]
    try:
        from Cython.Compiler import Main, Pipeline
        from Cython.Compiler.ParseTreeTransforms import AnalyseExpressionsTransform
    except ImportError:
        return 2
    found: list[dict[str, Any]] = []

    def collect(node: Any) -> Any:
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
        json.dump(found, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
