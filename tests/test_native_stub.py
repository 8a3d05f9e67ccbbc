"""python/enzyme_py/_native.pyi states the C++ core's Python interface for mypy; this
checks it against the built module: the same names, the same parameter names in order."""

import ast
import re
from pathlib import Path

import pytest

import enzyme_py
from enzyme_py import _state

pytestmark = pytest.mark.needs_enzyme

STUB = Path(enzyme_py.__file__).with_name("_native.pyi")
# Types the stub declares for its signatures; the module has no such objects.
STUB_ONLY = {"Buffer", "FunctionInfo", "BuiltDerivative", "OffloadDevice"}


def _stub() -> tuple[dict[str, list[str] | None], dict[str, dict[str, list[str]]]]:
    """Top-level names (functions with their parameter names, else None) and each
    class's methods with their parameter names (self left out)."""
    tree = ast.parse(STUB.read_text())
    names: dict[str, list[str] | None] = {}
    classes: dict[str, dict[str, list[str]]] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            names[node.name] = [a.arg for a in node.args.args]
        elif isinstance(node, ast.ClassDef):
            names[node.name] = None
            classes[node.name] = {
                m.name: [a.arg for a in m.args.args][1:]
                for m in node.body
                if isinstance(m, ast.FunctionDef) and not m.decorator_list  # not properties
            }
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = None
        elif isinstance(node, ast.Assign):
            names.update({t.id: None for t in node.targets if isinstance(t, ast.Name)})
    return names, classes


def _pybind_params(obj: object) -> list[str]:
    """Parameter names from the signature line pybind11 writes first in a docstring."""
    first = (obj.__doc__ or "").strip().splitlines()[0]
    inside = first[first.index("(") + 1 : first.rindex(")")]
    return [p.split(":")[0].strip() for p in re.split(r",\s*(?![^\[]*\])", inside) if p]


def test_the_stub_names_what_the_module_has():
    names, _ = _stub()
    native = _state.native
    assert native is not None
    built = {n for n in dir(native) if not n.startswith("__")}
    declared = set(names) - STUB_ONLY
    assert built - declared == set(), "in the module, not in _native.pyi"
    assert declared - built == set(), "in _native.pyi, not in the module"


def test_the_stub_gives_each_function_its_parameters_in_order():
    names, classes = _stub()
    native = _state.native
    for name, params in names.items():
        if params is not None:
            assert _pybind_params(getattr(native, name)) == params, name
    for cls, methods in classes.items():
        if cls in STUB_ONLY:
            continue
        for method, params in methods.items():
            if method.startswith("__") and method != "__init__":
                continue
            got = _pybind_params(getattr(getattr(native, cls), method))
            assert got[1:] == params, f"{cls}.{method}"  # pybind names self first
