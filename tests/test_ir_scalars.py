"""Scalar functions given as LLVM IR: every mode, return activity and width."""

import math

import numpy as np
import pytest

import enzyme_py as ez

from reference import fd_scalar

pytestmark = pytest.mark.needs_enzyme

IR = """
declare double @sin(double)
declare double @exp(double)
define double @f(double %x) {
  %a = fmul double %x, %x
  %s = call double @sin(double %x)
  %r = fmul double %a, %s
  ret double %r
}
define double @g(double %x, double %y, i32 %n) {
  %e = call double @exp(double %y)
  %p = fmul double %x, %e
  %nf = sitofp i32 %n to double
  %r = fmul double %p, %nf
  ret double %r
}
define float @h(float %x) {
  %a = fmul float %x, %x
  %b = fmul float %a, %x
  ret float %b
}
"""


def f_py(x):
    return x * x * math.sin(x)


def df_py(x):
    return 2 * x * math.sin(x) + x * x * math.cos(x)


@pytest.fixture(scope="module")
def fns():
    return {name: ez.llvm_ir(IR, name) for name in ("f", "g", "h")}


@pytest.mark.parametrize("x", [-1.3, 0.0, 0.5, 2.0])
def test_reverse_active_matches_analytic_and_fd(fns, x):
    y, dx = ez.autodiff(fns["f"], ez.Reverse, ez.Active, ez.Active)(x, 1.0)
    assert y == pytest.approx(f_py(x), rel=1e-15, abs=1e-300)
    assert dx == pytest.approx(df_py(x), rel=1e-14, abs=1e-300)
    assert dx == pytest.approx(fd_scalar(f_py, x), rel=1e-7, abs=1e-9)


def test_reverse_seed_scales_adjoint(fns):
    _, dx = ez.autodiff(fns["f"], ez.Reverse, ez.Active, ez.Active)(1.1, -2.5)
    assert dx == pytest.approx(-2.5 * df_py(1.1), rel=1e-14)


def test_reverse_active_only_omits_primal(fns):
    df = ez.autodiff(fns["f"], ez.Reverse, ez.Active, ez.ActiveOnly)
    primal, dx = df(0.8, 1.0)
    assert primal is None
    assert dx == pytest.approx(df_py(0.8), rel=1e-14)


def test_reverse_const_return_gives_primal_only(fns):
    assert ez.autodiff(fns["f"], ez.Reverse, ez.Active, ez.Const)(0.8) == (
        pytest.approx(f_py(0.8), rel=1e-15),
        0.0,
    )


def test_reverse_mixed_const_and_int(fns):
    df = ez.autodiff(fns["g"], ez.Reverse, ez.Active, ez.Const, ez.Const, ez.Active)
    value, dx = df(1.5, 0.3, 4, 1.0)
    assert value == pytest.approx(1.5 * math.exp(0.3) * 4, rel=1e-15)
    assert dx == pytest.approx(math.exp(0.3) * 4, rel=1e-15)
    df2 = ez.autodiff(fns["g"], ez.Reverse, ez.Active, ez.Active, ez.Const, ez.ActiveOnly)
    none, dx, dy = df2(1.5, 0.3, 4, 1.0)
    assert none is None
    assert dx == pytest.approx(math.exp(0.3) * 4, rel=1e-15)
    assert dy == pytest.approx(1.5 * math.exp(0.3) * 4, rel=1e-15)


@pytest.mark.parametrize(("ret", "expect_pair"), [(ez.Dual, True), (ez.DualOnly, False)])
def test_forward(fns, ret, expect_pair):
    out = ez.autodiff(fns["f"], ez.Forward, ez.Dual, ret)(0.9, 2.0)
    if expect_pair:
        y, dy = out
        assert y == pytest.approx(f_py(0.9), rel=1e-15)
    else:
        dy = out
    assert dy == pytest.approx(2.0 * df_py(0.9), rel=1e-14)


def test_forward_const_input_gives_zero_tangent_from_it(fns):
    df = ez.autodiff(fns["g"], ez.Forward, ez.Const, ez.Dual, ez.Const, ez.DualOnly)
    dy = df(1.5, 0.3, 1.0, 4)
    assert dy == pytest.approx(1.5 * math.exp(0.3) * 4, rel=1e-15)


def test_forward_const_return(fns):
    y = ez.autodiff(fns["f"], ez.Forward, ez.Dual, ez.Const)(0.9, 1.0)
    assert y == pytest.approx(f_py(0.9), rel=1e-15)


def test_forward_batched(fns):
    df = ez.autodiff(fns["f"], ez.Forward, ez.Dual, ez.Dual, width=3)
    y, dy = df(1.2, [1.0, 0.5, -2.0])
    assert y == pytest.approx(f_py(1.2), rel=1e-15)
    assert isinstance(dy, np.ndarray) and dy.shape == (3,)
    np.testing.assert_allclose(dy, df_py(1.2) * np.array([1.0, 0.5, -2.0]), rtol=1e-14)


def test_reverse_batched_seed(fns):
    df = ez.autodiff(fns["f"], ez.Reverse, ez.Active, ez.Active, width=2)
    y, dx = df(1.2, [1.0, 3.0])
    assert isinstance(y, float)
    np.testing.assert_allclose(dx, df_py(1.2) * np.array([1.0, 3.0]), rtol=1e-14)


def test_float32(fns):
    y, dx = ez.autodiff(fns["h"], ez.Reverse, ez.Active, ez.Active)(1.5, 1.0)
    assert y == pytest.approx(1.5**3, rel=1e-6)
    assert dx == pytest.approx(3 * 1.5**2, rel=1e-6)
    dy = ez.autodiff(fns["h"], ez.Forward, ez.Dual, ez.DualOnly)(2.0, 1.0)
    assert dy == pytest.approx(12.0, rel=1e-6)


def test_grad_and_value_and_grad(fns):
    assert ez.grad(fns["f"])(0.4) == pytest.approx(df_py(0.4), rel=1e-14)
    value, g = ez.value_and_grad(fns["f"])(0.4)
    assert value == pytest.approx(f_py(0.4), rel=1e-15)
    assert g == pytest.approx(df_py(0.4), rel=1e-14)
    gx, gy = ez.grad(fns["g"], argnums=(0, 1))(1.5, 0.3, 4)
    assert gx == pytest.approx(math.exp(0.3) * 4, rel=1e-15)
    assert gy == pytest.approx(1.5 * math.exp(0.3) * 4, rel=1e-15)


def test_inspect_llvm(fns):
    df = ez.autodiff(fns["f"], ez.Reverse, ez.Active, ez.Active)
    assert "define" in df.inspect_llvm()
    optimized = df.inspect_llvm(optimized=True)
    assert "__enzyme_py_entry_" in optimized
    assert "Reverse(Active -> Active)" in repr(df)


def test_llvm_ir_errors():
    with pytest.raises(ez.CompileError, match="invalid LLVM IR"):
        ez.llvm_ir("define double @f(double %x) { ret i32 0 }", "f")
    with pytest.raises(KeyError, match="no function named 'nope'.*defines: f"):
        ez.llvm_ir("define double @f(double %x) {\n ret double %x\n}", "nope")
