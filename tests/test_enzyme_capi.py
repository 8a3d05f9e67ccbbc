"""Each declaration of src/enzyme_capi.h, proven against the loaded plugin.

A plugin of another Enzyme version, whose signatures differ, fails here.
"""

import math
import re

import pytest

import enzyme_py as ez

from conftest import run_python

pytestmark = pytest.mark.needs_enzyme

SIN_IR = """
declare double @sin(double)
define double @f(double %x) {
  %a = fmul double %x, %x
  %s = call double @sin(double %x)
  %r = fmul double %a, %s
  ret double %r
}
"""


def df_analytic(x):
    return 2 * x * math.sin(x) + x * x * math.cos(x)


def native():
    from enzyme_py import _native

    return _native


# CConcreteType values: DT_Integer=1, DT_Pointer=2, DT_Float=4, DT_Double=5.
@pytest.mark.parametrize(
    ("kind", "pointee", "expected"),
    [
        (5, -1, "{[-1]:Float@double}"),
        (4, -1, "{[-1]:Float@float}"),
        (1, -1, "{[-1]:Integer}"),
        (2, 5, "{[-1]:Pointer, [-1,-1]:Float@double}"),
        (2, 4, "{[-1]:Pointer, [-1,-1]:Float@float}"),
    ],
)
def test_type_tree_entry_points(kind, pointee, expected):
    # EnzymeNewTypeTreeCT, EnzymeTypeTreeOnlyEq, EnzymeMergeTypeTree,
    # EnzymeTypeTreeToString, EnzymeStringFree, EnzymeFreeTypeTree.
    assert native().type_tree_string(kind, pointee) == expected


def test_create_primal_and_gradient():
    # EnzymeCreatePrimalAndGradient (23 parameters), CreateEnzymeLogic,
    # CreateTypeAnalysis, FreeTypeAnalysis, FreeEnzymeLogic.
    f = ez.llvm_ir(SIN_IR, "f")
    df = ez.autodiff(f, ez.Reverse, ez.Active, ez.ActiveOnly)
    assert re.search(
        r"\{ double \} @__enzyme_py_entry_\w+_derivative\(double %x, double", df.inspect_llvm()
    )
    assert df(2.0, 1.0) == (None, pytest.approx(df_analytic(2.0), rel=1e-15))


def test_create_forward_diff():
    # EnzymeCreateForwardDiff (20 parameters).
    f = ez.llvm_ir(SIN_IR, "f")
    df = ez.autodiff(f, ez.Forward, ez.Dual, ez.Dual)
    assert re.search(r"\{ double, double \} @__enzyme_py_entry_\w+_derivative", df.inspect_llvm())
    y, dy = df(0.7, 1.0)
    assert y == pytest.approx(0.49 * math.sin(0.7), rel=1e-15)
    assert dy == pytest.approx(df_analytic(0.7), rel=1e-15)


def test_create_augmented_primal_and_its_reverse_pass():
    # EnzymeCreateAugmentedPrimal (21 parameters), EnzymeExtractReturnInfo,
    # EnzymeExtractFunctionFromAugmentation, EnzymeExtractTapeTypeFromAugmentation,
    # and EnzymeCreatePrimalAndGradient in DEM_ReverseModeGradient given them.
    f = ez.llvm_ir(SIN_IR, "f")
    df = ez.autodiff(f, ez.ReverseSplit, ez.Active, ez.Active)
    y, tape = df.forward(0.7)
    assert y == pytest.approx(0.49 * math.sin(0.7), rel=1e-15)
    assert df.reverse(tape, 0.7, 2.0) == (pytest.approx(2 * df_analytic(0.7), rel=1e-15),)


def test_set_cl_bool_reaches_enzyme_option():
    # EnzymeSetCLBool on the exported EnzymeMinCutCache option (set off at load);
    # EnzymeGetCLBool reads it back.
    code = """
import ctypes, enzyme_py as ez
from enzyme_py import _native
lib = ctypes.CDLL(_native.plugin_path())
get = lib.EnzymeGetCLBool
get.restype = ctypes.c_uint8
get.argtypes = [ctypes.c_void_p]
opt = ctypes.cast(lib.EnzymeMinCutCache, ctypes.c_void_p)
print(get(opt))
"""
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "0"


def test_custom_error_handler_turns_failure_into_exception():
    # CustomErrorHandler: a call Enzyme has no derivative for becomes EnzymeError;
    # run in a fresh interpreter so a regression cannot take pytest down.
    code = r"""
import enzyme_py as ez
ir = '''
declare double @mystery(double)
define double @g(double %x) {
  %y = call double @mystery(double %x)
  ret double %y
}
'''
g = ez.llvm_ir(ir, "g")
try:
    ez.autodiff(g, ez.Reverse, ez.Active, ez.Active)
except ez.EnzymeError as exc:
    print("EnzymeError:", exc)
else:
    raise SystemExit("no EnzymeError")
# The process lives on and can still differentiate.
h = ez.llvm_ir('define double @h(double %x) {\n %y = fmul double %x, %x\n ret double %y\n}', "h")
print(ez.autodiff(h, ez.Reverse, ez.Active, ez.Active)(3.0, 1.0))
"""
    proc = run_python(code)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "EnzymeError:" in proc.stdout
    assert "mystery" in proc.stdout
    assert "'g'" in proc.stdout
    assert proc.stdout.strip().endswith("(9.0, 6.0)")
