"""ez.torch.function under torch.func (grad, jacrev, jacfwd, hessian, vmap, jvp),
against PyTorch's own autodiff of the same function written in torch."""

import numpy as np
import pytest

import enzyme_py as ez

numba = pytest.importorskip("numba")
torch = pytest.importorskip("torch")

from numba_functions import loss  # noqa: E402

pytestmark = pytest.mark.needs_enzyme


def reference(x, k):
    return k * (torch.sin(x) * x * x).sum()


@numba.njit
def writes_input(x):
    x[0] = 5.0
    return x.sum()


@pytest.fixture(params=[torch.float64, torch.float32], ids=["float64", "float32"])
def dtype(request):
    return request.param


def tolerance(dtype):
    return (
        {"rtol": 1e-12, "atol": 1e-12} if dtype == torch.float64 else {"rtol": 2e-5, "atol": 1e-5}
    )


def inputs(dtype):
    return torch.linspace(-1.0, 1.5, 6, dtype=dtype), torch.tensor(1.7, dtype=dtype)


def test_first_derivatives_under_torch_func(dtype):
    fn = ez.torch.function(loss)
    x, k = inputs(dtype)
    ours = {
        "grad": torch.func.grad(fn, argnums=(0, 1))(x, k, 6),
        "jacrev": torch.func.jacrev(fn, argnums=(0, 1))(x, k, 6),
        "jacfwd": torch.func.jacfwd(fn, argnums=(0, 1))(x, k, 6),
    }
    theirs = torch.func.grad(reference, argnums=(0, 1))(x, k)
    for how, found in ours.items():
        for got, want in zip(found, theirs, strict=True):
            assert got.dtype == dtype, how
            torch.testing.assert_close(got, want, **tolerance(dtype), msg=how)
    # jvp: forward mode along a tangent of x and of k together.
    tx, tk = torch.cos(3 * x), torch.tensor(0.3, dtype=dtype)
    y, dy = torch.func.jvp(lambda a, b: fn(a, b, 6), (x, k), (tx, tk))
    ry, rdy = torch.func.jvp(reference, (x, k), (tx, tk))
    torch.testing.assert_close(y, ry, **tolerance(dtype))
    torch.testing.assert_close(dy, rdy, **tolerance(dtype))
    # torch.autograd.forward_ad uses the same jvp rule.
    import torch.autograd.forward_ad as fwad

    with fwad.dual_level():
        out = fn(fwad.make_dual(x, tx), k, 6)
        torch.testing.assert_close(
            fwad.unpack_dual(out).tangent, torch.dot(theirs[0], tx), **tolerance(dtype)
        )


def test_vmap_and_vmap_of_grad(dtype):
    fn = ez.torch.function(loss)
    x, k = inputs(dtype)
    xs = torch.stack([x, 2 * x, x - 0.5])
    ks = torch.tensor([1.0, -2.0, 0.5], dtype=dtype)
    values = torch.vmap(fn, in_dims=(0, 0, None))(xs, ks, 6)
    torch.testing.assert_close(values, torch.vmap(reference)(xs, ks), **tolerance(dtype))
    grads = torch.vmap(torch.func.grad(fn), in_dims=(0, None, None))(xs, k, 6)
    want = torch.vmap(torch.func.grad(reference), in_dims=(0, None))(xs, k)
    torch.testing.assert_close(grads, want, **tolerance(dtype))
    # Batched along the second axis (in_dims=1).
    cols = torch.vmap(fn, in_dims=(1, None, None))(xs.T.contiguous(), k, 6)
    torch.testing.assert_close(
        cols, torch.vmap(reference, in_dims=(0, None))(xs, k), **tolerance(dtype)
    )


def test_second_derivatives_in_every_order(dtype):
    fn = ez.torch.function(loss)
    x, k = inputs(dtype)
    want = torch.func.hessian(reference)(x, k)
    f = lambda a: fn(a, k, 6)  # noqa: E731
    found = {
        "hessian": torch.func.hessian(fn)(x, k, 6),
        "jacfwd(jacrev)": torch.func.jacfwd(torch.func.jacrev(f))(x),
        "jacrev(jacrev)": torch.func.jacrev(torch.func.jacrev(f))(x),
        "jacrev(jacfwd)": torch.func.jacrev(torch.func.jacfwd(f))(x),
        "jacfwd(jacfwd)": torch.func.jacfwd(torch.func.jacfwd(f))(x),
    }
    for how, h in found.items():
        torch.testing.assert_close(h, want, **tolerance(dtype), msg=how)
    # Mixed blocks: with respect to x and the 0-d tensor k.
    blocks = torch.func.hessian(fn, argnums=(0, 1))(x, k, 6)
    ref_blocks = torch.func.hessian(reference, argnums=(0, 1))(x, k)
    for row, ref_row in zip(blocks, ref_blocks, strict=True):
        for got, ref in zip(row, ref_row, strict=True):
            torch.testing.assert_close(got, ref, **tolerance(dtype))


def test_third_derivative_is_refused():
    fn = ez.torch.function(loss)
    x, k = inputs(torch.float64)
    f = lambda a: fn(a, k, 6)  # noqa: E731
    with pytest.raises(RuntimeError, match=r"'loss'\): third derivatives are not supported"):
        torch.func.jacrev(torch.func.jacrev(torch.func.jacrev(f)))(x)
    with pytest.raises(RuntimeError, match="third derivatives are not supported"):
        torch.func.jacfwd(torch.func.hessian(f))(x)


def test_arrays_are_passed_without_copies_where_f_cannot_write_them():
    from enzyme_py._bridge import HostKernel

    x = np.linspace(0.0, 1.0, 6)
    assert HostKernel(loss).arguments([x, 1.0, 6])[0] is x
    copied = HostKernel(writes_input).arguments([x])[0]
    assert copied is not x and np.array_equal(copied, x)
    # A function that writes its input leaves the tensor as it was; the value and
    # gradient are those of the function at the tensor's values.
    t = torch.ones(4, dtype=torch.float64, requires_grad=True)
    fn = ez.torch.function(writes_input)
    y = fn(t)
    y.backward()
    assert float(y.detach()) == pytest.approx(8.0)
    torch.testing.assert_close(t.detach(), torch.ones(4, dtype=torch.float64))
    torch.testing.assert_close(t.grad, torch.tensor([0.0, 1.0, 1.0, 1.0], dtype=torch.float64))


def test_non_contiguous_tensor_is_copied():
    fn = ez.torch.function(loss)
    base = torch.linspace(-1.0, 1.5, 12, dtype=torch.float64)
    x = base[::2].clone().requires_grad_()
    strided = base.clone().requires_grad_()
    y = fn(strided[::2], 1.7, 6)
    y.backward()
    want = torch.func.grad(reference)(x.detach(), torch.tensor(1.7, dtype=torch.float64))
    expected = torch.zeros(12, dtype=torch.float64)
    expected[::2] = want
    torch.testing.assert_close(strided.grad, expected, rtol=1e-12, atol=1e-12)


def test_hessian_columns_go_through_enzymes_width(dtype, monkeypatch):
    # torch.func.hessian (jacfwd over jacrev) vmaps the Hessian-vector products over
    # the unit tangents: they are taken 8 at a time by Enzyme's width, not one per
    # column, with the same numbers.
    from enzyme_py import _bridge

    widths = []
    original = _bridge.hessian_vector

    def spy(derivatives, args, nums, tangents, seed=1.0, width=1):
        widths.append(width)
        return original(derivatives, args, nums, tangents, seed, width)

    monkeypatch.setattr(_bridge, "hessian_vector", spy)
    fn = ez.torch.function(loss)
    x = torch.linspace(-1.0, 1.5, 11, dtype=dtype)
    k = torch.tensor(1.7, dtype=dtype)
    want = torch.func.hessian(reference)(x, k)
    h = torch.func.hessian(fn)(x, k, 11)
    torch.testing.assert_close(h, want, **tolerance(dtype))
    assert widths == [8, 8]  # 11 columns: two batches (the second padded with zeros)
    widths.clear()
    f = lambda a: fn(a, k, 11)  # noqa: E731
    torch.testing.assert_close(torch.func.jacfwd(torch.func.jacrev(f))(x), want, **tolerance(dtype))
    assert widths == [8, 8]
    # With respect to the 0-d tensor k too: one column at a time, as before.
    widths.clear()
    blocks = torch.func.hessian(fn, argnums=(0, 1))(x, k, 11)
    ref_blocks = torch.func.hessian(reference, argnums=(0, 1))(x, k)
    for row, ref_row in zip(blocks, ref_blocks, strict=True):
        for got, ref in zip(row, ref_row, strict=True):
            torch.testing.assert_close(got, ref, **tolerance(dtype))
    assert widths and set(widths) == {1}
