"""Split mode in the JAX bridge (``ez.jax.primitive``, custom_vjp form): the forward host
call keeps Enzyme's tape in ``ez.jax.tapes`` under a handle, the backward host call runs
only the reverse pass from it, and falls back to recomputing (a combined reverse pass)
wherever there is no tape made from the very same inputs. Each result is checked against
the recompute path, JAX's own autodiff of the same function and finite differences; spies
on ``SplitCall`` and ``HostKernel.gradient`` tell which path ran."""

import gc
import threading
import weakref

import numpy as np
import pytest

import enzyme_py as ez

numba = pytest.importorskip("numba")
jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

from enzyme_py import _bridge, _transforms  # noqa: E402

from _helpers import close  # noqa: E402
from numba_functions import loss  # noqa: E402

pytestmark = pytest.mark.needs_enzyme


def reference(x, k):
    return k * jnp.sum(jnp.sin(x) * x * x)


def finite_differences(x, k, n, h=1e-6):
    """Central differences of loss (float64) with respect to x and k."""
    x = np.asarray(x, dtype=np.float64)
    gx = np.empty_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = h
        gx[i] = (loss(x + e, k, n) - loss(x - e, k, n)) / (2 * h)
    gk = (loss(x, k + h, n) - loss(x, k - h, n)) / (2 * h)
    return gx, gk


X = np.linspace(-1.0, 1.5, 6)
K = 1.7
G = ez.jax.primitive(loss)


@pytest.fixture(autouse=True)
def fresh_registry():
    jax.config.update("jax_enable_x64", True)
    ez.jax.tapes.clear()
    ez.jax.tapes.limit(64, 256 << 20)
    yield
    ez.jax.tapes.clear()
    ez.jax.tapes.limit(64, 256 << 20)
    jax.config.update("jax_enable_x64", True)


class Spy:
    """How often each path ran: augmented forward passes, reverse passes from a tape,
    and recomputed gradients (combined reverse passes)."""

    def __init__(self, monkeypatch):
        self.forward = self.pull = self.recompute = 0
        self.splits = []
        spy = self
        init, pull, gradient = (
            _transforms.SplitCall.__init__,
            _transforms.SplitCall.pull,
            _bridge.HostKernel.gradient,
        )

        def counted_init(self, *args, **kwargs):
            spy.forward += 1
            init(self, *args, **kwargs)
            spy.splits.append(weakref.ref(self))

        def counted_pull(self, seed):
            spy.pull += 1
            return pull(self, seed)

        def counted_gradient(self, *args, **kwargs):
            spy.recompute += 1
            return gradient(self, *args, **kwargs)

        monkeypatch.setattr(_transforms.SplitCall, "__init__", counted_init)
        monkeypatch.setattr(_transforms.SplitCall, "pull", counted_pull)
        monkeypatch.setattr(_bridge.HostKernel, "gradient", counted_gradient)

    def counts(self):
        return self.forward, self.pull, self.recompute


@pytest.fixture
def spy(monkeypatch):
    return Spy(monkeypatch)


def recomputed(fn, *args):
    """fn(*args) with split mode off (the registry disabled): the recompute path."""
    ez.jax.tapes.limit(0)
    try:
        return fn(*args)
    finally:
        ez.jax.tapes.limit(64)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_grad_and_jit_grad_run_only_the_reverse_pass(dtype, spy):
    jax.config.update("jax_enable_x64", dtype == "float64")
    rtol = 1e-12 if dtype == "float64" else 2e-5
    x = jnp.asarray(X, dtype=dtype)
    fd = finite_differences(X, K, 6)
    want = jax.grad(reference, argnums=(0, 1))(x, K)
    for how, fn in {
        "grad": jax.grad(G, argnums=(0, 1)),
        "jit(grad)": jax.jit(jax.grad(G, argnums=(0, 1)), static_argnums=2),
        "jit(value_and_grad)": lambda *a: jax.jit(jax.value_and_grad(G, (0, 1)))(*a)[1],
    }.items():
        before = spy.counts()
        found = fn(x, K, 6)
        # One augmented forward pass, one reverse pass from its tape, no recompute.
        assert np.subtract(spy.counts(), before).tolist() == [1, 1, 0], how
        assert len(ez.jax.tapes) == 0 and ez.jax.tapes.nbytes == 0  # taken and freed
        again = recomputed(fn, x, K, 6)
        for got, ref, alt, f in zip(found, want, again, fd, strict=True):
            assert got.dtype == np.dtype(dtype)
            close(got, alt, rtol=rtol, how=how)  # the recompute path's numbers
            close(got, ref, rtol=rtol, how=how)  # JAX's autodiff
            close(got, f, rtol=1e-6 if dtype == "float64" else 2e-4, how=how)
    assert spy.recompute == 3  # only the three recomputed() calls
    # The value is the augmented forward pass's.
    value, _ = jax.jit(jax.value_and_grad(G), static_argnums=2)(x, K, 6)
    close(value, reference(x, K), rtol=rtol)
    close(value, loss(np.asarray(x), np.asarray(x).dtype.type(K), 6), rtol=rtol)


def test_registry_off_is_the_recompute_path(spy):
    ez.jax.tapes.limit(max_count=0)
    assert not ez.jax.tapes.enabled
    x = jnp.asarray(X)
    found = jax.jit(jax.grad(G))(x, K, 6)
    assert spy.counts() == (0, 0, 1)  # no augmented forward pass at all
    close(found, jax.grad(reference)(x, K))
    close(found, finite_differences(X, K, 6)[0], rtol=1e-6)


def test_vjp_pullback_twice(spy):
    x = jnp.asarray(X)
    y, pull = jax.vjp(lambda a, b: G(a, b, 6), x, K)
    assert len(ez.jax.tapes) == 1
    gx, gk = jax.grad(reference, argnums=(0, 1))(x, K)
    close(y, reference(x, K))
    first = pull(1.0)
    assert spy.counts() == (1, 1, 0) and len(ez.jax.tapes) == 0
    # The tape served the first call and was freed: the second recomputes, same numbers.
    second = pull(jnp.asarray(2.5))
    assert spy.counts() == (1, 1, 1)
    close(first[0], gx)
    close(first[1], gk)
    close(second[0], 2.5 * gx)
    close(second[1], 2.5 * gk)


def test_jacrev_uses_one_tape_for_every_cotangent(spy):
    x = jnp.asarray(X)
    gx = jax.grad(reference)(x, K)
    close(jax.jacrev(G)(x, K, 6), gx)
    assert spy.counts() == (1, 1, 0)

    def two(a):  # two outputs from one call: jacrev's vmap gives the backward 2 cotangents
        v = G(a, K, 6)
        return jnp.stack([v, -3.0 * v])

    for how, fn in {"jacrev": jax.jacrev(two), "jit(jacrev)": jax.jit(jax.jacrev(two))}.items():
        before = spy.counts()
        close(fn(x), jnp.stack([gx, -3.0 * gx]), how=how)
        assert np.subtract(spy.counts(), before).tolist() == [1, 2, 0], how
    assert len(ez.jax.tapes) == 0


def test_vmap_keeps_one_tape_per_batch_element(spy):
    xs = jnp.stack([jnp.asarray(X), 2 * jnp.asarray(X), jnp.asarray(X) - 0.5])
    want = jax.vmap(jax.grad(reference), (0, None))(xs, K)
    for how, fn in {
        "vmap(grad)": jax.vmap(jax.grad(G), (0, None, None)),
        "jit(vmap(grad))": jax.jit(jax.vmap(jax.grad(G), (0, None, None)), static_argnums=2),
        "grad(sum(vmap))": jax.grad(lambda a, k, n: jax.vmap(G, (0, None, None))(a, k, n).sum()),
    }.items():
        before = spy.counts()
        found = fn(xs, K, 6)
        assert np.subtract(spy.counts(), before).tolist() == [3, 3, 0], how
        close(found, want, how=how)
        close(found, recomputed(fn, xs, K, 6), how=how)
    for row, x in zip(found, xs, strict=True):
        close(row, finite_differences(np.asarray(x), K, 6)[0], rtol=1e-6)
    # A batch of scale factors too (k batched, x not): a tape per lane as well.
    ks = jnp.asarray([0.5, 1.7, -2.0])
    found = jax.vmap(jax.grad(G, argnums=(0, 1)), (None, 0, None))(jnp.asarray(X), ks, 6)
    for lane, k in enumerate(np.asarray(ks)):
        close(found[0][lane], jax.grad(reference)(jnp.asarray(X), k))
        close(found[1][lane], jax.grad(reference, argnums=1)(jnp.asarray(X), k))
    assert len(ez.jax.tapes) == 0


def test_evicted_or_oversized_tapes_fall_back(spy):
    x = jnp.asarray(X)
    gx = jax.grad(reference)(x, K)
    ez.jax.tapes.limit(max_count=1)
    _, pull_a = jax.vjp(lambda a: G(a, K, 6), x)
    _, pull_b = jax.vjp(lambda a: G(a, K, 6), 2 * x)
    assert len(ez.jax.tapes) == 1  # the first tape was evicted
    close(pull_a(1.0)[0], gx)  # recomputed
    close(pull_b(1.0)[0], jax.grad(reference)(2 * x, K))  # from its tape
    assert spy.counts() == (2, 1, 1)
    ez.jax.tapes.limit(max_count=8, max_bytes=8)  # smaller than any tape: none is kept
    close(jax.grad(G)(x, K, 6), gx)
    assert spy.counts() == (3, 1, 2) and len(ez.jax.tapes) == 0


def test_a_tape_is_never_used_for_other_inputs(spy):
    x, y = jnp.asarray(X), jnp.asarray(X[::-1] * 0.7)
    _, pull = jax.vjp(lambda a: G(a, K, 6), x)
    # The same handle residual with other inputs (swapped in the pullback's residuals):
    # the tape was made from x, so the backward recomputes at y.
    leaves, tree = jax.tree_util.tree_flatten(pull)
    assert [np.asarray(leaf).dtype for leaf in leaves].count(np.int32) == 1
    swapped = [y if getattr(leaf, "shape", None) == x.shape else leaf for leaf in leaves]
    found = jax.tree_util.tree_unflatten(tree, swapped)(1.0)[0]
    close(found, jax.grad(reference)(y, K))
    assert spy.counts() == (1, 0, 1)
    # A handle no tape has (another process's, say) recomputes too.
    other = [np.int32(123) if np.asarray(leaf).dtype == np.int32 else leaf for leaf in leaves]
    close(jax.tree_util.tree_unflatten(tree, other)(1.0)[0], jax.grad(reference)(x, K))
    saved = _bridge.SavedTape(object(), [np.float64(-0.0), np.arange(3.0)])  # type: ignore
    assert saved.made_from([np.float64(-0.0), np.arange(3.0)])
    assert not saved.made_from([np.float64(0.0), np.arange(3.0)])  # bits, not ==
    assert not saved.made_from([np.float64(-0.0), np.arange(3.0, dtype=np.float32)])


def test_registry_stays_bounded_and_frees_tapes(spy):
    step = jax.jit(jax.value_and_grad(G), static_argnums=2)
    x = jnp.asarray(X)
    for i in range(200):
        step(x + 0.001 * i, K, 6)
        assert len(ez.jax.tapes) == 0
    assert spy.counts() == (200, 200, 0)
    gc.collect()
    assert all(ref() is None for ref in spy.splits)  # each tape freed after its backward
    # Forward passes whose backward never runs (a vjp never pulled): at most the bound.
    ez.jax.tapes.limit(max_count=5)
    pulls = [jax.vjp(lambda a: G(a, K, 6), x + i)[1] for i in range(40)]
    assert len(ez.jax.tapes) == 5
    per_tape = ez.jax.tapes.nbytes // 5
    gc.collect()
    assert sum(ref() is not None for ref in spy.splits) == 5  # the evicted ones are freed
    ez.jax.tapes.limit(max_bytes=3 * per_tape)
    assert len(ez.jax.tapes) == 3 and ez.jax.tapes.nbytes <= 3 * per_tape
    close(pulls[-1](1.0)[0], jax.grad(reference)(x + 39, K))
    ez.jax.tapes.clear()
    gc.collect()
    assert all(ref() is None for ref in spy.splits)
    with pytest.raises(ValueError, match="bounds"):
        ez.jax.tapes.limit(max_count=-1)


def test_threads_pair_each_tape_with_its_own_inputs(spy):
    step = jax.jit(jax.grad(G, argnums=(0, 1)), static_argnums=2)
    results: dict[int, list] = {}

    def work(t):
        out = []
        for i in range(10):
            x = jnp.asarray(X * (1 + 0.1 * t) + 0.01 * i)
            out.append((x, step(x, K, 6)))
        results[t] = out

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for out in results.values():
        for x, (gx, gk) in out:
            want = jax.grad(reference, argnums=(0, 1))(x, K)
            close(gx, want[0])
            close(gk, want[1])
    assert len(results) == 4 and spy.forward == 40 and spy.recompute == 0


def test_remat_duplicates_and_refused_split_mode(spy, monkeypatch):
    x = jnp.asarray(X)
    gx = jax.grad(reference)(x, K)
    close(jax.jit(jax.grad(jax.checkpoint(lambda a: G(a, K, 6))))(x), gx)
    close(jax.jit(jax.grad(lambda a: G(a, K, 6) + G(a, K, 6)))(x), 2 * gx)  # alike calls
    assert spy.recompute == 0

    def refuse(self, *args, **kwargs):  # split mode refused: handle 0, recompute
        raise ez.ActivityError("no split mode here")

    monkeypatch.setattr(_transforms.SplitCall, "__init__", refuse)
    before = spy.recompute
    close(jax.jit(jax.grad(G))(x, K, 6), gx)
    assert spy.recompute == before + 1 and len(ez.jax.tapes) == 0


def test_integer_arguments_and_c_functions_in_split_mode(spy):
    @numba.njit
    def picked(x, idx):
        s = 0.0
        for j in range(idx.shape[0]):
            s += x[idx[j]] ** 3
        return s

    x, idx = jnp.asarray(X), jnp.array([0, 2, 2, 5])
    want = np.zeros(6)
    np.add.at(want, [0, 2, 2, 5], 3 * X[[0, 2, 2, 5]] ** 2)
    close(jax.jit(jax.grad(ez.jax.primitive(picked)))(x, idx), want)
    m = ez.c(
        "double wsq(const double *x, double w, int n) { double s = 0; "
        "for (int i = 0; i < n; ++i) s += w * x[i] * x[i] * x[i]; return s; }"
    )
    gx, gw = jax.jit(jax.grad(ez.jax.primitive(m.wsq), argnums=(0, 1)))(x, 0.5, 6)
    close(gx, 1.5 * X**2)
    close(gw, np.sum(X**3))
    assert spy.recompute == 0 and spy.pull == 2
    # A float for the int parameter: refused before tracing, with the fix.
    for call in (
        lambda: jax.jit(jax.grad(ez.jax.primitive(m.wsq)))(x, 0.5, 6.0),
        lambda: jax.grad(ez.jax.primitive(m.wsq))(x, 0.5, jnp.asarray(6.0)),
    ):
        with pytest.raises(TypeError, match=r"parameter 2 \('n'\).*is an integer.*Python int"):
            call()


def test_second_derivatives_stay_refused():
    x = jnp.asarray(X)
    with pytest.raises(NotImplementedError, match="differentiable once"):
        jax.hessian(G)(x, K, 6)
    with pytest.raises(NotImplementedError, match="differentiable once"):
        jax.jit(jax.grad(lambda a: jax.grad(G)(a, K, 6).sum()))(x)
    with pytest.raises(TypeError, match="custom_vjp"):
        jax.jvp(lambda a: G(a, K, 6), (x,), (x,))
