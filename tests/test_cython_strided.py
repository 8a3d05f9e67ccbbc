"""Cython memoryviews of any layout (ez.cython): strided (``double[:]``,
``double[:, :]``, fused ``floating[:, :]`` as float32), reversed and Fortran-ordered
views as inputs and outputs, their shadows, the argument errors, and the noalias promise on the data
pointers (kept per call: overlapping arrays take the build without it). Checked against
float64 central finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import enzyme_py as ez

import _cython_kernels as kernels
from _cython_kernels import fortran_np, quad_np, wsum_np
from reference import fd_gradient

pytestmark = pytest.mark.needs_enzyme


@pytest.fixture(scope="module")
def m():
    return kernels.module()


def _views_1d(n):
    base = np.linspace(-1.0, 2.0, 3 * n)
    return {
        "contiguous": base[:n].copy(),
        "step 2": base[: 2 * n : 2],
        "reversed": base[::-1][:n],
        "step -3": base[::-3],
    }


@pytest.mark.parametrize("layout", ["contiguous", "step 2", "reversed", "step -3"])
def test_strided_1d_inputs_against_fd(m, layout):
    n = 5
    x = _views_1d(n)[layout][:n]
    w = np.linspace(0.5, 1.5, 2 * n)[::2]  # strided too
    x0, w0 = x.copy(), w.copy()
    dx = np.zeros(n)  # C-contiguous shadows of strided arrays
    dw = np.zeros(3 * n)[::-3]  # a shadow of yet another layout
    (value,) = ez.autodiff(m.wsum, ez.Reverse, ez.Duplicated, ez.Duplicated, ez.Active)(
        x, dx, w, dw, 1.0
    )
    assert value == pytest.approx(wsum_np(x0, w0), rel=1e-13)
    np.testing.assert_allclose(dx, fd_gradient(lambda z: wsum_np(z, w0), x0), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(dw, fd_gradient(lambda z: wsum_np(x0, z), w0), rtol=1e-6, atol=1e-9)
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_allclose(ez.grad(m.wsum)(x, w), dx, rtol=1e-13)


@pytest.mark.parametrize("layout", ["C", "F", "transposed", "reversed rows, every other column"])
def test_strided_2d_inputs_against_fd(m, layout):
    base = np.linspace(-1.0, 1.0, 48).reshape(6, 8)
    a = {
        "C": base[:3, :4].copy(),
        "F": np.asfortranarray(base[:3, :4]),
        "transposed": base[:4, :3].T,
        "reversed rows, every other column": base[::-2, ::2][:3, :4],
    }[layout]
    assert a.shape == (3, 4)
    b = np.asfortranarray(np.linspace(0.5, 2.0, 12).reshape(3, 4))
    a0 = a.copy()
    g = ez.grad(m.quad)(a, b)
    assert g.shape == (3, 4)
    np.testing.assert_allclose(g, fd_gradient(lambda z: quad_np(z, b), a0), rtol=1e-6, atol=1e-9)
    np.testing.assert_array_equal(a, a0)
    # A shadow laid out otherwise than its array.
    da = np.zeros((4, 3)).T
    ez.autodiff(m.quad, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)(a, da, b, 1.0)
    np.testing.assert_allclose(da, g, rtol=1e-13)


def test_float32_strided_2d(m):
    a = np.linspace(-1.0, 1.0, 24, dtype=np.float32).reshape(4, 6)[::-1, 1::2]
    g = ez.grad(m["fcube[float]"])(a)
    assert g.dtype == np.float32
    reference = fd_gradient(kernels.fcube_np, a.astype(np.float64))
    np.testing.assert_allclose(g, reference, rtol=1e-5, atol=1e-6)


def test_strided_output_reverse_and_forward(m):
    a = np.linspace(-1.0, 1.0, 12).reshape(4, 3, order="F")
    x = np.linspace(0.2, 1.4, 6)[::-2]
    out = np.zeros(8)[::2]  # a strided output view
    dout = np.array([1.0, -2.0, 0.5, 3.0])  # the seed, C-contiguous
    seed = dout.copy()
    dx = np.zeros(6)[::2]
    ez.autodiff(m.apply, ez.Reverse, ez.Duplicated, ez.Const, ez.Duplicated)(out, dout, a, x, dx)
    np.testing.assert_allclose(out, a @ np.sin(x), rtol=1e-13)
    np.testing.assert_allclose(dx, (a.T @ seed) * np.cos(x), rtol=1e-12)
    np.testing.assert_array_equal(dout, 0.0)  # the seed is consumed
    # Forward: the tangent of the output lands in its strided shadow.
    t = np.array([1.0, 0.0, -1.0])
    dy = np.zeros(12)[::-3]
    ez.autodiff(m.apply, ez.Forward, ez.Dual, ez.Const, ez.Dual)(out, dy, a, x, t)
    np.testing.assert_allclose(dy, a @ (np.cos(x) * t), rtol=1e-12)
    # The Jacobian helper on strided arguments.
    j = ez.jacobian(m.apply, argnums=2, output=0)(out, a, x)
    np.testing.assert_allclose(j, a * np.cos(x)[None, :], rtol=1e-12)


def test_fortran_contiguous_view(m):
    a = np.asfortranarray(np.linspace(-1.0, 1.0, 12).reshape(3, 4))
    g = ez.grad(m.fortran)(a)
    np.testing.assert_allclose(g, fd_gradient(fortran_np, a.copy(order="C")), rtol=1e-6, atol=1e-9)
    column = np.asfortranarray(np.linspace(0.0, 1.0, 5).reshape(5, 1))  # both orders
    np.testing.assert_allclose(
        ez.grad(m.fortran)(column), fd_gradient(fortran_np, column.copy()), rtol=1e-6, atol=1e-9
    )
    for wrong in (np.ascontiguousarray(a), a[:, ::2], a[::2, :]):
        with pytest.raises(ValueError, match=r"'a'.*Fortran-contiguous.*np.asfortranarray"):
            ez.grad(m.fortran)(wrong)


def test_boundscheck_and_wraparound_on_strided_view(m):
    x = np.linspace(0.5, 2.0, 8)[::-2]

    def f(z):
        return float(z[-1] ** 2 * z[0] + z[1])

    np.testing.assert_allclose(ez.grad(m.ends)(x), fd_gradient(f, x.copy()), rtol=1e-6, atol=1e-9)
    with pytest.raises(IndexError):
        ez.grad(m.ends)(np.ones(4)[::4])  # one element: x[1] is out of bounds


def test_argument_errors_name_the_parameter(m):
    g = ez.grad(m.wsum)
    w = np.ones(3)
    with pytest.raises(ValueError, match=r"'x'.*dtype float64"):
        g(np.ones(3, dtype=np.float32), w)
    with pytest.raises(ValueError, match=r"'x'.*1 dimension"):
        g(np.ones((3, 1)), w)
    with pytest.raises(TypeError, match=r"'w'.*array"):
        g(np.ones(3), [1.0, 2.0, 3.0])
    ro = np.ones(6)[::2]
    ro.flags.writeable = False
    with pytest.raises(ValueError, match=r"'w'.*read-only"):
        g(np.ones(3), ro)  # w is writable (double[:])
    # x is const double[:]: a read-only array is fine.
    reference = fd_gradient(lambda z: wsum_np(z, w), ro.copy())
    np.testing.assert_allclose(g(ro, w), reference, rtol=1e-6, atol=1e-9)
    with pytest.raises(ValueError, match=r"'a'.*2 dimensions"):
        ez.grad(m.quad)(np.ones(3), np.ones((1, 3)))
    with pytest.raises(ValueError, match=r"'a'.*dtype float32"):
        ez.grad(m["fcube[float]"])(np.ones((2, 2)))
    with pytest.raises(ValueError, match=r"shadow.*shape"):
        ez.autodiff(m.quad, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)(
            np.ones((2, 2)), np.zeros((2, 3)), np.ones((2, 2)), 1.0
        )


def test_memoryviews_are_noalias_and_overlap_takes_the_safe_build(m):
    fn = m.wsum

    def define(ir):
        return next(s for s in ir.splitlines() if s.startswith("define") and f"@{fn.name}(" in s)

    assert define(m.ir()).count("noalias") == 2  # both data pointers
    assert fn.alias_safe is not None
    assert "noalias" not in define(fn.alias_safe().module.ir())
    # One array as both parameters (and one shadow for both): correct through the
    # build without the promise.
    z = np.linspace(-1.0, 1.0, 7)
    dz = np.zeros_like(z)
    (value,) = ez.autodiff(m.wsum, ez.Reverse, ez.Duplicated, ez.Duplicated, ez.Active)(
        z, dz, z, dz, 1.0
    )
    assert value == pytest.approx(wsum_np(z, z), rel=1e-13)
    np.testing.assert_allclose(dz, fd_gradient(lambda v: wsum_np(v, v), z), rtol=1e-6, atol=1e-9)
    # Interleaved views of one buffer: their byte spans meet.
    buf = np.linspace(0.1, 1.0, 10)
    x, w = buf[::2], buf[1::2]
    g = ez.grad(m.wsum, argnums=(0, 1))(x, w)
    ref = fd_gradient(lambda v: wsum_np(v, w.copy()), x.copy())
    np.testing.assert_allclose(g[0], ref, rtol=1e-6)
    coupling = np.append(x[:-1] * x[1:], 0.0)  # d/dw_i of w_i x_i x_{i+1}
    np.testing.assert_allclose(g[1], np.sin(x) * x + coupling, rtol=1e-13)


def _counting_fast(df):
    """Count the calls the native caller takes (not rejected to the checked path)."""
    taken = [0]
    fast = df._fast
    assert fast is not None

    def counting(*args):
        result = fast(*args)  # ArgumentsRejected: the checked path takes the call
        taken[0] += 1
        return result

    df._fast = counting
    return taken


def test_strided_and_read_only_arrays_take_the_native_caller(m):
    df = ez.autodiff(m.wsum, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)
    taken = _counting_fast(df)
    w = np.linspace(1.0, 2.0, 6)
    for x, dx in [
        (np.linspace(-1.0, 2.0, 12)[::2], np.zeros(12)[::2]),  # the same strides
        (np.linspace(-1.0, 2.0, 6)[::-1], np.zeros(6)[::-1]),  # negative strides
        (np.linspace(-1.0, 2.0, 18)[::-3], np.zeros(18)[::-3]),
    ]:
        ref = fd_gradient(lambda v: wsum_np(v, w), x.copy())
        before = taken[0]
        df(x, dx, w, 1.0)
        assert taken[0] == before + 1
        np.testing.assert_allclose(dx, ref, rtol=1e-6, atol=1e-9)
    # a read-only array for the const view
    x = np.linspace(-1.0, 2.0, 6)
    x.setflags(write=False)
    dx = np.zeros(6)
    before = taken[0]
    df(x, dx, w, 1.0)
    assert taken[0] == before + 1
    np.testing.assert_allclose(dx, fd_gradient(lambda v: wsum_np(v, w), x.copy()), rtol=1e-6)
    # A shadow laid out unlike its array, and overlapping arrays: the checked path
    # (a stand-in shadow; the build without noalias), still right.
    x = np.linspace(-1.0, 2.0, 12)[::2]
    for dx, weights in [(np.zeros(6), w), (np.zeros(12)[::2], x)]:
        before = taken[0]
        df(x, dx, weights, 1.0)
        assert taken[0] == before
        fixed = weights.copy()
        ref = fd_gradient(lambda v, fixed=fixed: wsum_np(v, fixed), x.copy())
        np.testing.assert_allclose(dx, ref, rtol=1e-6, atol=1e-9)
    # a read-only array for a writable view: the ValueError naming it
    a = np.ones((2, 2))
    a.setflags(write=False)
    with pytest.raises(ValueError, match=r"'a'.*read-only"):
        ez.autodiff(m.quad, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)(
            a, np.zeros((2, 2)), np.ones((2, 2)), 1.0
        )
