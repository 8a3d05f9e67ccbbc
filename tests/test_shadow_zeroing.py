"""Shadows a helper's reverse derivative zeroes itself (src/shadow_zeroing.h).

ez.grad and the other helpers pass fresh shadows: for C-contiguous Numba arrays the
derivative zeroes them itself, and the pass ``enzyme-py-sink-shadow-zeroing`` moves
that zeroing to where nothing writes the shadow, folding the loads of its zeros. These
tests check gradients made so against exact references (analytic gradients, float64
central differences) where the pass applies and where it must not; on loops written in
LLVM IR, what the pass alone does, run on shadows filled with NaN (what the memset
zeroes: anything it failed to zero shows); and which shadows the caller still zeroes.
"""

from __future__ import annotations

import numba
import numpy as np
import pytest

import enzyme_py as ez
from benchmarks import kernels
from enzyme_py import _shadow_pool
from enzyme_py._api import zeroing_reverse
from enzyme_py._pipeline import SINK_SHADOW_ZEROING
from enzyme_py.frontends.ir import parse_module
from tests.reference import fd_gradient, fd_partial

pytestmark = pytest.mark.needs_enzyme


# From 2^15 doubles (LARGE_SHADOW_BYTES) ez.grad passes uninitialised shadows.
LARGE = 40_000


@pytest.mark.parametrize("n", [1, 2, 3, 9, 10, 17, 100, 1001, LARGE])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_rosenbrock_gradient_from_a_derivative_that_zeroes_its_shadow(n, dtype):
    x = np.random.default_rng(n).uniform(-1.0, 2.0, n).astype(dtype)
    got = ez.grad(kernels.rosenbrock)(x)
    assert got.dtype == dtype
    tol = 1e-12 if dtype == np.float64 else 2e-4
    ref = kernels.rosenbrock_gradient(x.astype(np.float64))
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * np.abs(ref).max())


def test_the_rosenbrock_reverse_loop_writes_the_gradient_without_reading_it():
    n = 1000
    x = np.random.default_rng(0).uniform(size=n)
    df = zeroing_reverse(kernels.rosenbrock, ez.Duplicated, ez.ActiveOnly)
    assert df.zeroed_params((x, x, 1.0)) == frozenset({0})
    ir = df.for_arguments((x, x, 1.0)).inspect_llvm(optimized=True)
    # The marked memset of the whole shadow is gone (zeroed only where no loop
    # writes), and the fused loop's vector body stores the shadow without loading it.
    assert "!enzyme_py.zeroed_shadow" not in ir
    body = ir[ir.index("\nvector.body") :]
    body = body[: body.index("\nmiddle.block")]
    # One store per vector of the shadow (two where LLVM interleaves the loop for this
    # CPU, an Intel Xeon's cost model), all into the shadow.
    stores = [line for line in body.splitlines() if line.strip().startswith("store <")]
    scopes = {line.split("!alias.scope ")[1].split(",")[0] for line in stores}
    assert 1 <= len(stores) <= 4 and len(scopes) == 1, stores
    (shadow_scope,) = scopes
    loads = [line for line in body.splitlines() if "= load <" in line]
    assert loads and all(f"!alias.scope {shadow_scope}," not in line for line in loads)


def test_a_users_derivative_still_adds_into_its_shadow():
    n = 50
    x = np.random.default_rng(1).uniform(size=n)
    df = ez.autodiff(kernels.rosenbrock, ez.Reverse, ez.Duplicated, ez.ActiveOnly)
    dx = np.full(n, 3.0)
    df(x, dx, 1.0)
    np.testing.assert_allclose(dx, 3.0 + kernels.rosenbrock_gradient(x), rtol=1e-13)
    assert df.for_arguments((x, dx, 1.0)).zeroed_params == frozenset()


@numba.njit(cache=False)
def _reads_its_gradient_early(x, w):
    # The reverse pass reads w's shadow (w is written and read back), and x is read
    # through a strided view.
    s = 0.0
    for i in range(x.shape[0]):
        w[i] = x[i] * x[i]
    for i in range(x.shape[0] - 1, -1, -1):
        s += w[i] * x[i] + np.sin(w[i])
    return s


def test_written_and_read_arrays_and_views_against_central_differences():
    rng = np.random.default_rng(2)
    base = rng.uniform(size=40)
    for x in (base[:20].copy(), base[::2]):  # C-contiguous, then a strided view
        w = np.zeros(20)
        got = ez.grad(_reads_its_gradient_early)(x, w)
        ref = fd_gradient(lambda v: _reads_its_gradient_early(v, np.zeros(20)), x)
        np.testing.assert_allclose(got, ref, rtol=1e-7, atol=1e-9)


def test_the_gmm_gradient_against_central_differences():
    args = list(kernels.gmm_inputs(3, 4, 12))
    grads = ez.grad(kernels.gmm_objective, argnums=(0, 1, 2))(*args)
    for k in range(3):
        ref = fd_partial(kernels.gmm_objective, args, k)
        np.testing.assert_allclose(grads[k], ref, rtol=1e-6, atol=1e-7)


def test_value_and_grad_and_vjp_take_the_same_path():
    x = np.random.default_rng(4).uniform(-1.0, 2.0, 33)
    value, g = ez.value_and_grad(kernels.rosenbrock)(x)
    assert value == pytest.approx(kernels.rosenbrock(x), rel=1e-14)
    np.testing.assert_allclose(g, kernels.rosenbrock_gradient(x), rtol=1e-12)
    _, pullback = ez.vjp(kernels.rosenbrock, x)
    (h,) = pullback(2.0)
    np.testing.assert_allclose(h, 2.0 * kernels.rosenbrock_gradient(x), rtol=1e-12)


# --- the pass alone, on loops written in LLVM IR -------------------------------------

# g is zeroed (a marked memset, as zero_shadows_on_entry makes it), then BEFORE runs,
# then LEFT where n is odd, then a loop over i in [0, n) adds x[i]^2 into g[i] reading
# g[READ] (where x[i] > guard, if one is given), then AFTER runs.
ZEROED_IR = r"""
declare void @llvm.memset.p0i8.i64(i8* nocapture writeonly, i8, i64, i1 immarg)

define void @touch(double* %g) noinline {
  store double 7.0, double* %g
  ret void
}

define void @accumulate(double* noalias %x, double* noalias %g, i64 %n) {
entry:
  %bytes = shl i64 %n, 3
  %raw = bitcast double* %g to i8*
  call void @llvm.memset.p0i8.i64(i8* %raw, i8 0, i64 %bytes, i1 false), !enzyme_py.zeroed_shadow !0
  BEFORE
  %odd = trunc i64 %n to i1
  br i1 %odd, label %left, label %right
left:
  LEFT
  br label %join
right:
  br label %join
join:
  %any = icmp sgt i64 %n, 0
  br i1 %any, label %loop, label %done
loop:
  %i = phi i64 [ 0, %join ], [ %next, %latch ]
  %xp = getelementptr double, double* %x, i64 %i
  %xv = load double, double* %xp
  %sq = fmul double %xv, %xv
  BRANCH
add:
  %last = add i64 %n, -1
  %mirror = sub i64 %last, %i
  %rp = getelementptr double, double* %g, i64 READ
  %old = load double, double* %rp
  %new = fadd double %old, %sq
  %wp = getelementptr double, double* %g, i64 %i
  store double %new, double* %wp
  br label %latch
latch:
  %next = add nuw nsw i64 %i, 1
  %more = icmp slt i64 %next, %n
  br i1 %more, label %loop, label %done
done:
  AFTER
  ret void
}

!0 = !{}
"""

_FIRST_PLUS_ONE = """
  %f = load double, double* %g
  %f1 = fadd double %f, 1.0
  store double %f1, double* %g"""


def zeroed_ir(
    before: str = "",
    left: str = "",
    read: str = "%i",
    guard: str | None = None,
    after: str = "",
) -> str:
    return (
        ZEROED_IR.replace("BEFORE", before)
        .replace("LEFT", left)
        .replace("READ", read)
        .replace(
            "BRANCH",
            "br label %add"
            if guard is None
            else f"%big = fcmp ogt double %xv, {guard}\n  br i1 %big, label %add, label %latch",
        )
        .replace("AFTER", after)
    )


def sunk_by_the_pass_alone(text: str) -> str:
    module = parse_module(text)
    module.native.optimize(f"function({SINK_SHADOW_ZEROING})")
    return module.native.ir()


def run(text: str, x: np.ndarray) -> np.ndarray:
    g = np.full(x.shape[0] + 2, np.nan)  # what the memset does not zero stays NaN
    ez.llvm_ir(text, "accumulate")(x, g, x.shape[0])
    return g[: x.shape[0]]


@pytest.mark.parametrize("n", [0, 1, 2, 7])
def test_the_pass_alone_folds_a_loop_that_adds_into_each_entry_once(n):
    sunk = sunk_by_the_pass_alone(zeroed_ir(after=_FIRST_PLUS_ONE))
    assert "!enzyme_py.zeroed_shadow" not in sunk
    assert "%old = load" not in sunk  # the loop's load of g reads zeros: folded
    assert "%f = load" in sunk  # g[0] after the loop was written by it: kept
    x = np.random.default_rng(n).uniform(size=n)
    expected = x * x
    if n:
        expected[0] += 1.0
    np.testing.assert_array_equal(run(sunk, x), expected)
    np.testing.assert_array_equal(run(zeroed_ir(after=_FIRST_PLUS_ONE), x), expected)


def reference(
    x: np.ndarray,
    mirror: bool,
    guard: float,
    first: tuple[int, float] | None,
    only_odd: bool = False,
) -> np.ndarray:
    n = x.shape[0]
    g = np.zeros(n)
    if first is not None and first[0] < n and (n % 2 or not only_odd):
        g[first[0]] = first[1]
    for i in range(n):
        if x[i] > guard:
            g[i] = g[n - 1 - i if mirror else i] + x[i] * x[i]
    return g


@pytest.mark.parametrize(
    "case, mirror, guard, first",
    [
        # reads g[n - 1 - i]: half of it written by earlier iterations
        ({"read": "%mirror"}, True, -1.0, None),
        # writes only where x[i] > 0.5: the other entries must still be zeroed
        ({"guard": "0.5"}, False, 0.5, None),
        # g[1] written before the loop, which then reads it
        ({"before": "%g1 = getelementptr double, double* %g, i64 1\n"
                    "  store double 5.0, double* %g1"}, False, -1.0, (1, 5.0)),
        # an opaque call that writes g[0] before the loop
        ({"before": "call void @touch(double* %g)"}, False, -1.0, (0, 7.0)),
    ],
)  # fmt: skip
def test_loops_and_writes_the_pass_must_not_fold_keep_their_zeros(case, mirror, guard, first):
    sunk = sunk_by_the_pass_alone(zeroed_ir(**case))
    assert "%old = load" in sunk
    for n in (1, 2, 9, 10):
        x = np.random.default_rng(n).uniform(size=n)
        np.testing.assert_array_equal(run(sunk, x), reference(x, mirror, guard, first))


def test_a_loop_running_downwards_is_folded():
    text = (
        zeroed_ir()
        .replace(
            "%i = phi i64 [ 0, %join ], [ %next, %latch ]",
            "%j = phi i64 [ 0, %join ], [ %next, %latch ]\n  %down = sub i64 %n, %j\n"
            "  %i = add i64 %down, -1",
        )
        .replace("%next = add nuw nsw i64 %i, 1", "%next = add nuw nsw i64 %j, 1")
    )
    sunk = sunk_by_the_pass_alone(text)
    assert "%old = load" not in sunk
    x = np.random.default_rng(5).uniform(size=13)
    np.testing.assert_array_equal(run(sunk, x), x * x)


@pytest.fixture(scope="module")
def cython_kernels():
    from benchmarks.cython_gradients import CYTHON_SOURCE

    return ez.cython(CYTHON_SOURCE)


@pytest.mark.parametrize("n", [1, 2, 9, 1001, LARGE])
def test_a_cython_memoryviews_shadow_is_zeroed_by_its_derivative(cython_kernels, n):
    # A C-contiguous memoryview comes with its shape: the derivative zeroes its shadow.
    # A strided one (const double[:]) is zeroed by the caller, as before.
    x = np.random.default_rng(n).uniform(-1.0, 2.0, n)
    for f, zeroed in (
        (cython_kernels.rosenbrock, {0}),
        (cython_kernels.rosenbrock_strided, set()),
    ):
        assert zeroing_reverse(f, ez.Duplicated, ez.ActiveOnly).zeroed_params == zeroed
        for view in (x, np.repeat(x, 2)[::2]) if not zeroed else (x,):
            got = ez.grad(f)(view)
            ref = kernels.rosenbrock_gradient(x)
            np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


def test_a_branch_that_writes_nothing_of_the_shadow_is_walked_through():
    # The walk reaches the join from both sides with the same pieces: it goes on, and
    # the loop after it is folded.
    sunk = sunk_by_the_pass_alone(zeroed_ir())
    assert "%old = load" not in sunk
    for n in range(6):
        x = np.random.default_rng(n).uniform(size=n)
        np.testing.assert_array_equal(run(sunk, x), x * x)


def test_a_branch_that_writes_the_shadow_zeroes_the_rest_on_each_edge():
    left = "%g1 = getelementptr double, double* %g, i64 1\n  store double 5.0, double* %g1"
    sunk = sunk_by_the_pass_alone(zeroed_ir(left=left))
    assert "%old = load" in sunk
    for n in range(6):
        x = np.random.default_rng(n).uniform(size=n)
        expected = reference(x, False, -np.inf, (1, 5.0), only_odd=True)
        np.testing.assert_array_equal(run(sunk, x), expected)


@pytest.fixture(scope="module")
def c_kernels():
    from benchmarks.cython_gradients import C_SOURCE

    return ez.c(C_SOURCE)


@pytest.mark.parametrize("n", [1, 2, 3, 9, 1001])
def test_each_frontends_derivative_overwrites_a_shadow_full_of_nan(c_kernels, cython_kernels, n):
    # Called directly with a shadow of NaN (what np.empty may hold), a derivative that
    # zeroes its shadow gives the exact gradient: every entry was zeroed or written.
    # Numba and Cython size the shadow by its shapes, C by a hidden byte-size slot; the
    # fast caller and the checked path fill that slot alike.
    x = np.random.default_rng(n).uniform(-1.0, 2.0, n)
    ref = kernels.rosenbrock_gradient(x)
    cases = [
        (kernels.rosenbrock, (ez.Duplicated, ez.ActiveOnly), ()),
        (cython_kernels.rosenbrock, (ez.Duplicated, ez.ActiveOnly), ()),
        (c_kernels.rosenbrock, (ez.Duplicated, ez.Const, ez.ActiveOnly), (n,)),
    ]
    for f, acts, rest in cases:
        df = zeroing_reverse(f, *acts)
        if not hasattr(df, "plan"):  # a dispatcher's: its specialisation for x
            df = df.for_arguments((x, x, *rest, 1.0))
        assert df.zeroed_params == frozenset({0})
        sized = [s for s in df.plan.steps if s.kind == "B"]
        assert len(sized) == (1 if f is c_kernels.rosenbrock else 0)
        for call in (df, lambda *a, df=df: df._call_checked(a)):
            g = np.full(n, np.nan)
            call(x, g, *rest, 1.0)
            np.testing.assert_allclose(g, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n, m", [(50, 20), (LARGE, LARGE // 2)])
def test_a_c_shadow_longer_than_the_loop_is_zeroed_past_it(c_kernels, n, m):
    # The C function reads the first m of x's n entries: the rest of its gradient is 0.
    x = np.random.default_rng(6).uniform(-1.0, 2.0, n)
    got = ez.grad(c_kernels.rosenbrock)(x, m)
    expected = np.zeros(n)
    expected[:m] = kernels.rosenbrock_gradient(x[:m])
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_a_zeroing_derivative_is_not_handed_to_other_callers():
    df = zeroing_reverse(kernels.rosenbrock, ez.Duplicated, ez.ActiveOnly)
    x = np.ones(4)
    spec = df.for_arguments((x, x, 1.0))
    with pytest.raises(ez.EnzymeError, match="zeroes its shadows itself"):
        spec.njit()


def test_the_pool_hands_out_a_buffer_again_only_once_no_array_uses_it():
    _shadow_pool.clear()
    shape = (LARGE,)
    first = _shadow_pool.uninitialised(shape, np.dtype(np.float64))
    second = _shadow_pool.uninitialised(shape, np.dtype(np.float64))
    assert first.base is not second.base  # both in use
    first[:] = 1.0
    reused = id(first.base)
    del first
    third = _shadow_pool.uninitialised(shape, np.dtype(np.float64))
    assert id(third.base) == reused and third.flags.c_contiguous and third.flags.writeable
    assert np.all(third == 1.0)  # uninitialised: what the memory held
    assert _shadow_pool.uninitialised((10,), np.dtype(np.float64)).base is None  # small
    _shadow_pool.clear()


def test_gradients_on_several_threads_at_once_each_get_their_own_memory():
    import concurrent.futures

    g = ez.grad(kernels.rosenbrock)
    inputs = [np.random.default_rng(k).uniform(-1.0, 2.0, LARGE) for k in range(8)]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        got = list(pool.map(g, inputs * 3))
    for x, gradient in zip(inputs * 3, got, strict=True):
        np.testing.assert_allclose(gradient, kernels.rosenbrock_gradient(x), rtol=1e-12, atol=1e-10)


@pytest.fixture
def poisoned_shadows(monkeypatch):
    """Helpers whose shadows the derivative zeroes get them full of NaN, whatever their
    size: any byte the derivative neither zeroes nor writes shows in the gradient."""
    from enzyme_py import _reverse_plan

    monkeypatch.setattr(_reverse_plan, "LARGE_SHADOW_BYTES", 0)
    monkeypatch.setattr(
        _reverse_plan, "uninitialised", lambda shape, dtype: np.full(shape, np.nan, dtype=dtype)
    )


def _corpus_entries() -> list:
    from corpus.functions import ENTRIES

    return [e for e in ENTRIES if e.expect is None]


@pytest.mark.parametrize("entry", _corpus_entries(), ids=lambda e: e.name)
def test_the_corpus_through_the_helpers_with_shadows_full_of_nan(poisoned_shadows, entry):
    # tests/test_corpus.py's functions (loops, branches, views, reductions, ...), their
    # reverse helpers given NaN where the derivative zeroes the shadow itself.
    from corpus.harness import CORRECT, run

    result = run(entry)
    bad = [(o.mode, o.status, o.detail) for o in result.outcomes if o.status != CORRECT]
    assert not bad, bad


def test_overlapping_arguments_take_a_twin_that_zeroes_the_same_shadows(
    poisoned_shadows, cython_kernels
):
    # One array passed as two arguments: the call goes to the derivative built without
    # the promise that arrays do not overlap, which zeroes the same shadows itself.
    u = np.random.default_rng(7).uniform(size=33)
    for f in (kernels.heat_loss, cython_kernels.heat_loss):
        got = ez.grad(f, argnums=(0, 1))(u, u, 3)
        df = ez.autodiff(f, ez.Reverse, ez.Duplicated, ez.Duplicated, ez.Const, ez.ActiveOnly)
        du, dt = np.zeros_like(u), np.zeros_like(u)
        df(u, du, u, dt, 3, 1.0)
        np.testing.assert_allclose(got[0], du, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(got[1], dt, rtol=1e-12, atol=1e-14)
        assert np.isfinite(got[0]).all() and np.isfinite(got[1]).all()
