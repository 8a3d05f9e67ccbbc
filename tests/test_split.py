"""Split reverse mode: ez.ReverseSplit's two halves, ez.vjp's pullback from the tape, and
the PyTorch bridge's backward from the tape; against the combined reverse pass and
central differences, float32 and float64; tapes freed when collected."""

from __future__ import annotations

import gc
import math

import numpy as np
import pytest
from numba import njit

import enzyme_py as ez

pytestmark = pytest.mark.needs_enzyme


@njit
def energy(x, k):
    e = 0.0
    for i in range(x.shape[0]):
        e += k * x[i] * x[i] * math.sin(x[i])
    return e


@njit
def with_temporary(x):
    t = np.sin(x) * x  # a temporary array and its shadow live on the tape's arena
    s = 0.0
    for i in range(t.shape[0]):
        s += t[i] * t[i]
    return s


@njit
def overwrites(x, out):
    for i in range(x.shape[0]):
        out[i] = x[i] * x[i]
    s = 0.0
    for i in range(x.shape[0]):
        x[i] = math.exp(x[i])  # overwritten: the tape keeps the old values
        s += x[i] * out[i]
    return s


@njit
def returns_pair(x):
    return x * 2.0, np.sum(x)


def central(f, args, i, eps=1e-6):
    x = args[i]
    g = np.zeros_like(x)
    flat = g.reshape(-1)
    for j in range(x.size):
        up = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
        down = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
        up[i].reshape(-1)[j] += eps
        down[i].reshape(-1)[j] -= eps
        flat[j] = (f(*up) - f(*down)) / (2 * eps)
    return g


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_halves_match_the_combined_reverse_pass(dtype):
    x = np.linspace(0.1, 2.0, 6).astype(dtype)
    df = ez.autodiff(energy, ez.ReverseSplit, ez.Duplicated, ez.Active, ez.Active)
    dx = np.zeros_like(x)
    y, tape = df.forward(x, dx, 3.0)
    assert y == pytest.approx(energy(x, 3.0), rel=1e-6)
    assert tape.bytes >= 0 and "tape" in repr(tape)
    (dk,) = df.reverse(tape, x, dx, 3.0, 1.0)
    combined = ez.autodiff(energy, ez.Reverse, ez.Duplicated, ez.Active, ez.Active)
    ref = np.zeros_like(x)
    _, ref_dk = combined(x, ref, 3.0, 1.0)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(dx, ref, rtol=tol)
    assert dk == pytest.approx(ref_dk, rel=tol)
    # The reverse half again, from the same tape: the adjoints are added once more.
    (dk2,) = df.reverse(tape, x, dx, 3.0, 2.0)
    np.testing.assert_allclose(dx, 3 * ref, rtol=tol)
    assert dk2 == pytest.approx(2 * ref_dk, rel=tol)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_temporaries_and_overwritten_arguments(dtype):
    x = np.linspace(0.1, 1.0, 7).astype(dtype)
    df = ez.autodiff(with_temporary, ez.ReverseSplit, ez.Duplicated, ez.Active)
    dx = np.zeros_like(x)
    _, tape = df.forward(x, dx)
    df.reverse(tape, x, dx, 1.0)
    first = dx.copy()
    dx[:] = 0
    df.reverse(tape, x, dx, 1.0)  # the temporary's shadow is back to zero
    np.testing.assert_array_equal(dx, first)
    tol = 1e-4 if dtype == np.float32 else 1e-7
    xd = x.astype(np.float64)
    np.testing.assert_allclose(first, central(with_temporary, [xd], 0), rtol=tol, atol=tol)

    x0 = np.linspace(0.1, 1.0, 5).astype(dtype)
    x, out = x0.copy(), np.zeros_like(x0)
    dx, dout = np.zeros_like(x), np.zeros_like(x)
    df = ez.autodiff(overwrites, ez.ReverseSplit, ez.Duplicated, ez.Duplicated, ez.Active)
    value, tape = df.forward(x, dx, out, dout)
    df.reverse(tape, x, dx, out, dout, 1.0)
    ref = central(overwrites, [x0.astype(np.float64), np.zeros(5)], 0)
    np.testing.assert_allclose(dx, ref, rtol=tol, atol=tol)
    assert value == pytest.approx(overwrites(x0.copy(), np.zeros_like(x0)), rel=1e-6)


def test_c_function_and_refusals():
    m = ez.c(
        """
        #include <math.h>
        double f(const double *x, int n, double a) {
            double s = 0;
            for (int i = 0; i < n; i++) s += a * exp(x[i]) * x[i];
            return s;
        }
        """
    )
    x = np.linspace(0.0, 1.0, 4)
    df = ez.autodiff(m.f, ez.ReverseSplit, ez.Duplicated, ez.Const, ez.Active, ez.Active)
    dx = np.zeros(4)
    y, tape = df.forward(x, dx, 4, 2.0)
    (da,) = df.reverse(tape, x, dx, 4, 2.0, 1.0)
    np.testing.assert_allclose(dx, 2.0 * np.exp(x) * (1 + x))
    assert da == pytest.approx(float(np.sum(np.exp(x) * x)))
    assert y == pytest.approx(2.0 * da)
    other = ez.autodiff(m.f, ez.ReverseSplit, ez.Duplicated, ez.Const, ez.Active, ez.Active)
    with pytest.raises(TypeError, match="tape from its own forward"):
        other.reverse(tape, x, dx, 4, 2.0, 1.0)
    with pytest.raises(ez.ActivityError, match="width=1"):
        ez.autodiff(m.f, ez.ReverseSplit, ez.Duplicated, ez.Const, ez.Active, ez.Active, width=2)
    split = ez.autodiff(returns_pair, ez.ReverseSplit, ez.Duplicated, ez.Active)
    with pytest.raises(ez.ActivityError, match="returns an array or a tuple"):
        split.forward(x, np.zeros(4))


def _rss_kib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4


def test_many_tapes_do_not_grow_memory():
    x = np.linspace(0.1, 1.0, 2000)
    df = ez.autodiff(with_temporary, ez.ReverseSplit, ez.Duplicated, ez.Active)
    dx = np.zeros_like(x)

    def rounds(n):
        for _ in range(n):
            _, tape = df.forward(x, dx)
            df.reverse(tape, x, dx, 1.0)
            _, pull = ez.vjp(with_temporary, x)
            pull(1.0)
        gc.collect()

    rounds(300)
    before = _rss_kib()
    rounds(3000)  # each round's temporaries alone are 32 KiB: 3000 would leak ~190 MiB
    assert _rss_kib() - before < 40_000


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_vjp_pullback_runs_the_reverse_pass_only(dtype, monkeypatch):
    x = np.linspace(0.1, 2.0, 5).astype(dtype)
    value, pull = ez.vjp(energy, x, 3.0)
    assert value == pytest.approx(energy(x, 3.0), rel=1e-6)
    # The pullback builds and calls nothing but the reverse half from here on.
    from enzyme_py import _derivative

    monkeypatch.setattr(
        _derivative.Derivative, "call", lambda *a: pytest.fail("a combined pass ran")
    )
    g1 = pull(1.0)
    g2 = pull(1.0)
    np.testing.assert_array_equal(g1[0], g2[0])
    assert g1[1] == g2[1]
    monkeypatch.undo()
    ref = ez.grad(energy, argnums=(0, 1))(x, 3.0)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(g1[0], ref[0], rtol=tol)
    assert g1[1] == pytest.approx(ref[1], rel=tol)
    assert pull(2.0)[1] == pytest.approx(2 * ref[1], rel=tol)
    # The caller's arrays may change: the tape holds copies.
    x[:] = 0.0
    np.testing.assert_array_equal(pull(1.0)[0], g1[0])


def test_vjp_writes_output_arrays_and_falls_back_for_tuples():
    x0 = np.linspace(0.1, 1.0, 5)
    x, out = x0.copy(), np.zeros(5)
    _, pull = ez.vjp(overwrites, x, out)
    np.testing.assert_allclose(out, x0 * x0)  # written, as a call of f writes it
    np.testing.assert_allclose(x, np.exp(x0))
    gx, _ = pull(1.0)
    np.testing.assert_allclose(gx, central(overwrites, [x0.copy(), np.zeros(5)], 0), rtol=1e-6)
    _, pull = ez.vjp(returns_pair, x0)
    (g,) = pull((np.ones(5), 1.0))
    np.testing.assert_allclose(g, 3.0 * np.ones(5))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_torch_backward_from_the_tape(dtype, monkeypatch):
    torch = pytest.importorskip("torch")
    from enzyme_py import _bridge

    g = ez.torch.function(energy)
    x = torch.linspace(0.1, 2.0, 6, dtype=getattr(torch, dtype), requires_grad=True)
    k = torch.tensor(3.0, dtype=getattr(torch, dtype), requires_grad=True)
    loss = g(x, k)
    monkeypatch.setattr(
        _bridge.HostKernel, "gradient", lambda *a: pytest.fail("backward recomputed")
    )
    loss.backward(retain_graph=True)
    gx, gk = x.grad.clone(), k.grad.clone()
    x.grad = k.grad = None
    loss.backward()  # twice from one tape
    assert torch.equal(x.grad, gx) and torch.equal(k.grad, gk)
    monkeypatch.undo()
    ref = ez.grad(energy, argnums=(0, 1))(x.detach().numpy().copy(), float(k.detach()))
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(gx.numpy(), ref[0], rtol=tol)
    assert float(gk) == pytest.approx(ref[1], rel=tol)
    # Double backward still goes through the differentiable gradient op.
    (gx2,) = torch.autograd.grad(g(x, k), x, create_graph=True)
    assert gx2.requires_grad
    np.testing.assert_allclose(gx2.detach().numpy(), ref[0], rtol=tol)
    # No tape under no_grad (nothing would take it).
    monkeypatch.setattr(
        _bridge.HostKernel, "split_value", lambda *a: pytest.fail("a tape under no_grad")
    )
    with torch.no_grad():
        g(x, k)
    monkeypatch.undo()
    # torch.func still works (recompute there).
    np.testing.assert_allclose(torch.func.grad(g)(x.detach(), k.detach()).numpy(), ref[0], rtol=tol)


def test_the_switch_refuses_with_advice(monkeypatch):
    # enzyme_py._api.SPLIT_MODE off: refused, with what to use instead.
    from enzyme_py import _api

    monkeypatch.setattr(_api, "SPLIT_MODE", False)
    with pytest.raises(ez.EnzymeError, match=r"switched off.*Use ez.Reverse"):
        ez.autodiff(energy, ez.ReverseSplit, ez.Duplicated, ez.Const, ez.Active)


def test_exported_in_both_builds():
    from enzyme_py import core

    assert ez.ReverseSplit is core.ReverseSplit
    assert "ReverseSplit" in ez.__all__
