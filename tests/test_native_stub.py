"""python/enzyme_py/_native.pyi states the C++ core's Python interface for mypy; this
checks it against the built module: the same names, the same parameter names in order."""

import ast
from pathlib import Path

import numpy as np
import pytest

import enzyme_py
from enzyme_py import _state

pytestmark = pytest.mark.needs_enzyme

STUB = Path(enzyme_py.__file__).with_name("_native.pyi")
# Types the stub declares for its signatures; the module has no such objects.
STUB_ONLY = {"Buffer", "FunctionInfo", "OffloadDevice"}


def _params(node: ast.FunctionDef) -> list[str]:
    """Parameter names in order, "*" before keyword-only ones (as pybind11 writes them)."""
    names = [a.arg for a in node.args.args]
    if node.args.kwonlyargs:
        names += ["*", *(a.arg for a in node.args.kwonlyargs)]
    return names


def _stub() -> tuple[dict[str, list[str] | None], dict[str, dict[str, list[str]]]]:
    """Top-level names (functions with their parameter names, else None) and each
    class's methods with their parameter names (self left out)."""
    tree = ast.parse(STUB.read_text())
    names: dict[str, list[str] | None] = {}
    classes: dict[str, dict[str, list[str]]] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            names[node.name] = _params(node)
        elif isinstance(node, ast.ClassDef):
            names[node.name] = None
            classes[node.name] = {
                m.name: _params(m)[1:]
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
    # Split at the commas outside brackets (types nest: list[tuple[int, list[int]]]).
    parts, depth, current = [], 0, ""
    for char in inside:
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p.split(":")[0].strip() for p in parts if p.strip()]


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


def _stub_members(cls: str) -> set[str]:
    """The public names a class of the stub declares: methods, properties, fields."""
    tree = ast.parse(STUB.read_text())
    (node,) = (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    out: set[str] = set()
    for m in node.body:
        if isinstance(m, ast.FunctionDef):
            out.add(m.name)
        elif isinstance(m, ast.AnnAssign) and isinstance(m.target, ast.Name):
            out.add(m.target.id)
    return {n for n in out if not n.startswith("_")}


@pytest.mark.parametrize("cls", ["BuildRequest", "BuildArtifact", "Module", "SplitTape"])
def test_the_stub_gives_each_class_its_fields(cls):
    built = {n for n in dir(getattr(_state.native, cls)) if not n.startswith("_")}
    assert built == _stub_members(cls), cls


def test_a_build_request_has_named_typed_fields():
    native = _state.native
    request = native.BuildRequest(function="f", entry_name="e", args=[1, 2], pointee=[0, 3])
    assert (request.function, request.entry_name, request.args, request.pointee) == (
        "f",
        "e",
        [1, 2],
        [0, 3],
    )
    # The engine's defaults (src/engine.h): reverse, Const return, width 1, O2.
    assert (request.forward, request.ret, request.return_primal, request.width) == (
        False,
        2,
        True,
        1,
    )
    assert (request.passes, request.split, request.mincut) == ("default<O2>", 0, False)
    request.split = 2
    request.args = [0]
    assert (request.split, request.args) == (2, [0])
    assert "function='f'" in repr(request)
    with pytest.raises(TypeError):
        native.BuildRequest("f", "e")  # keywords only
    with pytest.raises(TypeError):
        native.BuildRequest(function="f", entry_name="e", width=-1)


_SQUARE = """
define double @square(double %x) {
  %y = fmul double %x, %x
  ret double %y
}
"""
_DFT_OUT_DIFF, _DT_UNKNOWN = 0, 6


@pytest.mark.parametrize("isolate", [False, True])
def test_build_takes_a_request_and_gives_an_artifact(isolate):
    """The seam end to end: a request, its artifact, the entry point it names, called on
    its slots: d(x*x)/dx at 3 is 6 (and the primal 9)."""
    native = _state.native
    request = native.BuildRequest(
        function="square",
        entry_name=f"__enzyme_py_test_native_square_{int(isolate)}",
        args=[_DFT_OUT_DIFF],
        ret=_DFT_OUT_DIFF,
        pointee=[_DT_UNKNOWN],
    )
    artifact = native.build(native.Module(_SQUARE), request, isolate=isolate)
    assert isinstance(artifact, native.BuildArtifact)
    assert artifact.entry_name == request.entry_name
    assert (artifact.in_slots, artifact.out_slots) == ("dd", "dd")  # x, seed -> y, dx
    assert isinstance(artifact.object, bytes) and artifact.object
    assert "square" in artifact.enzyme_ir and artifact.derivative_module
    assert request.entry_name in artifact.optimized_ir
    assert artifact.interrupt is None
    entry = native.load_object(artifact.object, artifact.entry_name)
    slots = np.array([3.0, 1.0, 0.0, 0.0])
    native.invoke(entry, slots)
    assert slots[2:].tolist() == [9.0, 6.0]
