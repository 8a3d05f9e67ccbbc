"""Higher order through Cython memoryviews of any layout (ez.cython): ez.hessian,
ez.jacobian / jacfwd / jacrev of ez.grad, ez.hvp, forward over reverse by hand (width 1
and width k) on
``double[:]``, ``double[:, :]``, fused ``floating[:, :]`` and Fortran-contiguous
``double[::1, :]`` parameters given strided, reversed, transposed and Fortran-ordered
arrays. A strided array's shadow is indexed with the array's strides, so a reverse
derivative taken as a function takes its shadow parameter in any layout of the array's
shape (a stand-in laid out like the array is passed and copied back). Checked against
float64 central second differences of NumPy twins."""

from __future__ import annotations

import numpy as np
import pytest

import enzyme_py as ez
from enzyme_py._derivative import Derivative

import _cython_kernels as kernels
from _cython_kernels import fcube_np, fd_hessian, fortran_np, quad_np, wsum_np

pytestmark = pytest.mark.needs_enzyme


@pytest.fixture(scope="module")
def m():
    return kernels.module()


def _vectors():
    base = np.linspace(-1.0, 2.0, 12)
    return {
        "step 2": base[::2],
        "reversed": base[::-2],
        "step 3": base[1::3][:4],
    }


@pytest.mark.parametrize("layout", ["step 2", "reversed", "step 3"])
def test_hessian_of_a_strided_1d_view(m, layout):
    x = _vectors()[layout]
    w = np.linspace(0.5, 1.5, 2 * x.size)[::-2]  # strided too
    x0, w0 = x.copy(), w.copy()
    h = ez.hessian(m.wsum)(x, w)
    np.testing.assert_allclose(h, fd_hessian(lambda z: wsum_np(z, w0), x0), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(x, x0)  # the helpers run on copies
    # Both blocks and the mixed ones: the full Hessian of (x, w).
    blocks = ez.hessian(m.wsum, argnums=(0, 1))(x, w)
    n = x.size
    full = fd_hessian(lambda v: wsum_np(v[:n], v[n:]), np.concatenate([x0, w0]))
    both = np.block([[blocks[0][0], blocks[0][1]], [blocks[1][0], blocks[1][1]]])
    np.testing.assert_allclose(both, full, rtol=1e-5, atol=1e-6)
    # jacfwd / jacrev of the gradient are the Hessian; hvp is one product with it.
    for jac in (ez.jacobian, ez.jacfwd, ez.jacrev):
        np.testing.assert_allclose(jac(ez.grad(m.wsum))(x, w), h, rtol=1e-13, atol=1e-13)
    v = np.linspace(1.0, -1.0, n)
    g, hv = ez.hvp(m.wsum, (x, w), (v, None))
    np.testing.assert_allclose(g, ez.grad(m.wsum)(x0, w0), rtol=1e-13)
    np.testing.assert_allclose(hv, h @ v, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("layout", ["transposed", "reversed rows, every other column", "F"])
def test_hessian_of_a_strided_2d_view(m, layout):
    base = np.linspace(-1.0, 1.0, 48).reshape(6, 8)
    a = {
        "transposed": base[:4, :3].T,
        "reversed rows, every other column": base[::-2, ::2][:3, :4],
        "F": np.asfortranarray(base[:3, :4]),
    }[layout]
    b = np.linspace(0.5, 2.0, 24).reshape(4, 6).T[::2, :4]  # strided b too
    assert a.shape == b.shape == (3, 4)
    a0, b0 = a.copy(), b.copy()
    h = ez.hessian(m.quad)(a, b)
    assert h.shape == (3, 4, 3, 4)
    np.testing.assert_allclose(h, fd_hessian(lambda z: quad_np(z, b0), a0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ez.jacfwd(ez.grad(m.quad))(a, b), h, rtol=1e-13, atol=1e-13)
    v = np.linspace(-1.0, 1.0, 12).reshape(4, 3).T
    _, hv = ez.hvp(m.quad, (a, b), (v, None))
    np.testing.assert_allclose(hv, np.tensordot(h, v, axes=2), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    ("name", "dtype", "rtol", "atol"),
    [("fcube[float]", np.float32, 1e-4, 1e-4), ("fcube[double]", np.float64, 1e-6, 1e-6)],
)
def test_hessian_of_fused_strided_views(m, name, dtype, rtol, atol):
    a = np.linspace(-1.0, 1.0, 24).astype(dtype).reshape(4, 6)[::-1, 1::2][:3]
    h = ez.hessian(m[name])(a)
    assert h.dtype == dtype and h.shape == (3, 3, 3, 3)
    np.testing.assert_allclose(h, fd_hessian(fcube_np, a.astype(np.float64)), rtol=rtol, atol=atol)
    v = np.ones((3, 3), dtype=dtype)[:, ::-1]
    _, hv = ez.hvp(m[name], (a,), (v,))
    assert hv.dtype == dtype
    np.testing.assert_allclose(hv, np.tensordot(h, v, axes=2), rtol=rtol, atol=atol)


def test_hessian_of_a_fortran_contiguous_view(m):
    a = np.asfortranarray(np.linspace(-1.0, 1.0, 12).reshape(3, 4))
    h = ez.hessian(m.fortran)(a)
    np.testing.assert_allclose(h, fd_hessian(fortran_np, a.copy()), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ez.jacrev(ez.grad(m.fortran))(a), h, rtol=1e-13, atol=1e-13)


def test_forward_over_reverse_by_hand_on_strided_views(m):
    """The reverse derivative as a function: its shadow parameter dx is indexed with
    x's strides; given in another layout (or x's), the result is the same."""
    x = np.linspace(-1.0, 2.0, 12)[::-2]
    w = np.linspace(0.5, 1.5, 12)[::2]
    x0, w0 = x.copy(), w.copy()
    n = x.size
    h = fd_hessian(lambda z: wsum_np(z, w0), x0)
    g = ez.grad(m.wsum)(x0, w0)
    d = ez.autodiff(m.wsum, ez.Reverse, ez.Duplicated, ez.Const, ez.ActiveOnly)
    fwd = ez.autodiff(d, ez.Forward, ez.Dual, ez.Dual, ez.Const, ez.Const)
    t = np.linspace(1.0, -1.0, 2 * n)[::2]
    for dx, tdx in [
        (np.zeros(n), np.zeros(n)),  # C-contiguous: stand-ins laid out like x
        (np.zeros(2 * n)[::-2], np.zeros(3 * n)[::3]),  # x's layout, and another
    ]:
        fwd(x, t, dx, tdx, w, 1.0)
        np.testing.assert_allclose(dx, g, rtol=1e-13)
        np.testing.assert_allclose(tdx, h @ t, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(x, x0)
    # width=k: k directions in one call.
    fwd3 = ez.autodiff(d, ez.Forward, ez.Dual, ez.Dual, ez.Const, ez.Const, width=3)
    ts = np.stack([t, -2.0 * t, np.arange(n, dtype=np.float64)])
    dx, tdx = np.zeros(2 * n)[1::2], np.zeros((3, n))
    fwd3(x, ts, dx, tdx, w, 1.0)
    np.testing.assert_allclose(dx, g, rtol=1e-13)
    np.testing.assert_allclose(tdx, ts @ h.T, rtol=1e-6, atol=1e-7)
    # A 2-D view: transposed, its shadows C-contiguous.
    a = np.linspace(-1.0, 1.0, 12).reshape(4, 3).T
    b = np.ones((3, 4))
    dq = ez.autodiff(m.quad, ez.Reverse, ez.Duplicated, ez.Const, ez.ActiveOnly)
    fq = ez.autodiff(dq, ez.Forward, ez.Dual, ez.Dual, ez.Const, ez.Const)
    ta, da, tda = np.ones((3, 4)), np.zeros((3, 4)), np.zeros((3, 4))
    fq(a, ta, da, tda, b, 1.0)
    hq = fd_hessian(lambda z: quad_np(z, b), a.copy())
    np.testing.assert_allclose(da, ez.grad(m.quad)(a, b), rtol=1e-13)
    np.testing.assert_allclose(tda, np.tensordot(hq, ta, axes=2), rtol=1e-6, atol=1e-7)


def test_shadow_parameter_of_another_shape_is_refused(m):
    d = ez.autodiff(m.wsum, ez.Reverse, ez.Duplicated, ez.Const, ez.ActiveOnly)
    fwd = ez.autodiff(d, ez.Forward, ez.Dual, ez.Dual, ez.Const, ez.Const)
    x, w = np.linspace(0.0, 1.0, 10)[::2], np.ones(5)
    with pytest.raises(ValueError, match=r"'dx'.*shadow of parameter 0 \('x'\).*shape \(5,\)"):
        fwd(x, np.ones(5), np.zeros(4), np.zeros(5), w, 1.0)
    with pytest.raises(ValueError, match=r"shape"):
        d(x, np.zeros(6), w, 1.0)


def test_shadow_parameter_of_a_contiguous_view_is_checked(m):
    """double[::1]: the shadow parameter of a second derivative has x's shape checked
    (it was a raw pointer: a shorter one was written past its end), and it is a
    C-contiguous view in cython_declaration()."""
    d = ez.autodiff(m.scaled, ez.Reverse, ez.Duplicated, ez.Const, ez.ActiveOnly)
    fwd = ez.autodiff(d, ez.Forward, ez.Dual, ez.Dual, ez.Const, ez.Const)
    n = 1000
    x, t = np.linspace(0.0, 1.0, n), np.linspace(1.0, -1.0, n)
    for wrong in (np.zeros(3), np.zeros(n + 1)):
        with pytest.raises(ValueError, match=r"'dx'.*shadow of parameter 0 \('x'\).*\(1000,\)"):
            fwd(x, t, wrong, np.zeros(wrong.size), 2.0, 1.0)
    with pytest.raises(ValueError, match=r"'dx'.*C-contiguous"):
        fwd(x, t, np.zeros(2 * n)[::2], np.zeros(n), 2.0, 1.0)
    dx, tdx = np.zeros(n), np.zeros(n)
    fwd(x, t, dx, tdx, 2.0, 1.0)  # k^2 sum x^2: gradient 2 k^2 x, H t = 2 k^2 t
    np.testing.assert_allclose(dx, 8.0 * x, rtol=1e-14)
    np.testing.assert_allclose(tdx, 8.0 * t, rtol=1e-14)
    text = fwd.cython_declaration("f")
    assert "const double[::1] x, double[::1] tx, double[::1] dx, double[::1] tdx" in text


def test_overlapping_arrays_in_a_second_derivative(m):
    """x and w one array: the second derivative takes the twin without noalias."""
    z = np.linspace(0.1, 1.2, 6)
    d = ez.autodiff(m.wsum, ez.Reverse, ez.Duplicated, ez.Const, ez.ActiveOnly)
    fwd = ez.autodiff(d, ez.Forward, ez.Dual, ez.Dual, ez.Const, ez.Const)
    t = np.linspace(1.0, -1.0, 6)
    dx, tdx = np.zeros(6), np.zeros(6)
    assert fwd.may_overlap
    fwd(z, t, dx, tdx, z, 1.0)  # x Dual, w Const: the same memory
    w0 = z.copy()
    h = fd_hessian(lambda v: wsum_np(v, w0), z.copy())
    np.testing.assert_allclose(tdx, h @ t, rtol=1e-6, atol=1e-7)


def test_second_derivatives_called_from_numba_and_cython(m):
    numba = pytest.importorskip("numba")
    d = ez.autodiff(m.wsum, ez.Reverse, ez.Duplicated, ez.Const, ez.ActiveOnly)
    fwd = ez.autodiff(d, ez.Forward, ez.Dual, ez.Dual, ez.Const, ez.Const)
    # dx and tdx are views laid out as x (tests/test_cython_declaration.py calls it)
    text = fwd.cython_declaration()
    assert "const double[:] x, double[:] tx, double[:] dx, double[:] tdx, double[:] w" in text
    call = fwd.njit()  # C-contiguous arrays there: dx needs x's shape only

    @numba.njit
    def run(x, t, dx, tdx, w):
        call(x, t, dx, tdx, w, 1.0)

    x, w, t = np.linspace(0.1, 1.0, 5), np.linspace(1.0, 2.0, 5), np.ones(5)
    dx, tdx = np.zeros(5), np.zeros(5)
    run(x, t, dx, tdx, w)
    ex, etdx = np.zeros(5), np.zeros(5)
    fwd(x, t, ex, etdx, w, 1.0)
    np.testing.assert_allclose(dx, ex, rtol=1e-15)
    np.testing.assert_allclose(tdx, etdx, rtol=1e-15)
    with pytest.raises(ValueError, match=r"'dx' is indexed as its array: it needs its shape"):
        run(x, t, np.zeros(4), tdx, w)


@pytest.mark.parametrize("order", ["forward over reverse", "reverse over reverse"])
def test_second_derivatives_take_the_fast_caller(m, order, monkeypatch):
    """C-contiguous arrays: the native caller, as for first derivatives (it checks a
    shadow parameter has its array's shape); other layouts, another shape: the checked
    path (stand-ins, the ValueError naming the parameter)."""
    d = ez.autodiff(m.wsum, ez.Reverse, ez.Duplicated, ez.Const, ez.ActiveOnly)
    if order == "forward over reverse":
        dd = ez.autodiff(d, ez.Forward, ez.Dual, ez.Dual, ez.Const, ez.Const)
    else:  # the cotangent of the gradient in ddx; H ddx is added into dx2
        dd = ez.autodiff(d, ez.Reverse, ez.Duplicated, ez.Duplicated, ez.Const, ez.Const)
    assert isinstance(dd, Derivative) and dd._fast is not None
    n = 6
    x, w = np.linspace(-1.0, 2.0, n), np.linspace(0.5, 1.5, n)
    v = np.linspace(1.0, -1.0, n)
    h = fd_hessian(lambda z: wsum_np(z, w), x.copy())
    g = ez.grad(m.wsum)(x, w)

    def call(x, first, second):
        """(the gradient, H v) by one call of dd on these arrays."""
        if order == "forward over reverse":
            tdx = second
            dd(x, v.copy(), first, tdx, w, 1.0)
            return first, tdx
        dx2 = second
        dd(x, dx2, first, v.copy(), w, 1.0)
        return None, dx2

    checked = []
    original = dd._call_checked
    monkeypatch.setattr(dd, "_call_checked", lambda args: checked.append(1) or original(args))
    grad, hv = call(x, np.zeros(n), np.zeros(n))
    assert not checked  # C-contiguous: the fast caller
    np.testing.assert_allclose(hv, h @ v, rtol=1e-6, atol=1e-7)
    if grad is not None:
        np.testing.assert_allclose(grad, g, rtol=1e-13)
    # Strided arrays: the checked path, the same numbers.
    xs = np.zeros(2 * n)[::-2]
    xs[...] = x
    grad2, hv2 = call(xs, np.zeros(3 * n)[::3], np.zeros(n))
    assert checked
    np.testing.assert_allclose(hv2, hv, rtol=1e-13)
    if grad2 is not None:
        np.testing.assert_allclose(grad2, g, rtol=1e-13)
    # A shadow parameter of another shape: refused by the fast caller, named by the
    # checked path.
    with pytest.raises(ValueError, match=r"'dx'.*shadow of parameter 0 \('x'\)"):
        call(x, np.zeros(n - 1), np.zeros(n))
