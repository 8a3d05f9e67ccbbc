"""The threads a derivative's prange loops run on (``src/parfor_runner.h``), called
here directly through ctypes: chunks cover the range once, each thread sees its own
chunk index, per-thread shadow copies are each added once, and snapshots are copies.
Derivatives that use it: tests/test_prange.py."""

import ctypes
import itertools
import threading

import numpy as np
import pytest

pytestmark = pytest.mark.needs_enzyme

CHUNK = ctypes.CFUNCTYPE(
    ctypes.c_int32, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p
)
REVERSE = ctypes.CFUNCTYPE(
    None, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64), ctypes.c_int64, ctypes.c_int64
)


@pytest.fixture(scope="module")
def runner():
    from enzyme_py import _state

    symbols = _state.native.parfor_symbols()
    i64 = ctypes.c_int64
    thread = ctypes.CFUNCTYPE(i64)(symbols["__enzyme_py_parfor_thread"])
    run = ctypes.CFUNCTYPE(None, CHUNK, ctypes.c_void_p, i64, i64, i64)(
        symbols["__enzyme_py_parfor_run"]
    )
    reverse = ctypes.CFUNCTYPE(
        None,
        REVERSE,
        ctypes.c_void_p,
        ctypes.POINTER(i64),
        i64,
        ctypes.POINTER(i64),
        i64,
        i64,
        i64,
        i64,
    )(symbols["__enzyme_py_parfor_reverse"])
    snapshot = ctypes.CFUNCTYPE(
        ctypes.POINTER(i64), ctypes.POINTER(i64), i64, ctypes.POINTER(i64), i64
    )(symbols["__enzyme_py_parfor_snapshot"])
    return thread, run, reverse, snapshot


@pytest.mark.parametrize("threads", [1, 2, 3, 4])
@pytest.mark.parametrize("first,last", [(0, 99), (5, 5), (-3, 10), (0, 2)])
def test_chunks_cover_the_range_once_with_one_index_per_thread(runner, threads, first, last):
    thread, run, _, _ = runner
    seen: list[tuple[int, int, int, int]] = []
    lock = threading.Lock()

    @CHUNK
    def chunk(slots, lo, hi, raised):
        with lock:
            seen.append((lo, hi, thread(), threading.get_ident()))
        return 0

    run(chunk, None, first, last, threads)
    covered = sorted(i for lo, hi, _, _ in seen for i in range(lo, hi + 1))
    assert covered == list(range(first, last + 1))
    parts = min(threads, last - first + 1)
    assert sorted(t for _, _, t, _ in seen) == list(range(parts))
    # Chunk t starts where chunk t - 1 ended: the mapping the reverse pass relies on.
    by_index = sorted(seen, key=lambda s: s[2])
    assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(by_index))
    if parts > 1:
        assert len({ident for *_, ident in seen}) == parts  # really several threads
    assert thread() == 0  # outside a launch


def test_empty_range_runs_nothing(runner):
    _, run, _, _ = runner
    calls = []

    @CHUNK
    def chunk(slots, lo, hi, raised):
        calls.append((lo, hi))
        return 0

    run(chunk, None, 4, 3, 4)
    assert calls == []


def test_a_failing_chunk_outside_a_derivative_call_ends_nothing(runner):
    # Inside a derivative call it ends the call with the body's exception
    # (test_prange.py::test_threads_a_body_that_raises_raises_its_exception); here there
    # is no call to end: every chunk still runs, and the runner returns.
    _, run, _, _ = runner
    ran = []

    @CHUNK
    def chunk(slots, lo, hi, raised):
        ran.append(lo)
        return 7 if lo <= 60 <= hi else 0

    run(chunk, None, 0, 99, 4)
    assert sorted(ran) == [0, 25, 50, 75]


def _privates(*triples):
    flat = [v for t in triples for v in t]
    return (ctypes.c_int64 * max(1, len(flat)))(*flat)


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_reverse_adds_private_copies_into_shared_shadows(runner, threads):
    """Every index adds into the same three entries of one shadow, and into its own
    entry of another. (The GIL orders these Python callbacks, so no race shows here:
    this checks that each copy is zeroed and added exactly once; the race test on
    compiled code is in tests/test_prange.py.)"""
    _, _, reverse, _ = runner
    n = 20_000
    few = np.zeros(3)  # kind 0 (kParforSumFloat64): private copies, added after
    own = np.zeros(n)  # kind 3 (kParforShared): shared, each index its own entry
    dropped = np.zeros(4)  # kind 2 (kParforDrop): a Const array's shadow, never written
    few32 = np.zeros(2, dtype=np.float32)  # kind 1 (kParforSumFloat32): float32 copies
    shadows = (ctypes.c_int64 * 4)(
        few.ctypes.data, own.ctypes.data, dropped.ctypes.data, few32.ctypes.data
    )
    privates = _privates(
        (0, few.nbytes, 0), (1, own.nbytes, 3), (2, dropped.nbytes, 2), (3, few32.nbytes, 1)
    )

    @REVERSE
    def chunk(slots, sh, lo, hi):
        f = np.ctypeslib.as_array(ctypes.cast(sh[0], ctypes.POINTER(ctypes.c_double)), (3,))
        o = np.ctypeslib.as_array(ctypes.cast(sh[1], ctypes.POINTER(ctypes.c_double)), (n,))
        d = np.ctypeslib.as_array(ctypes.cast(sh[2], ctypes.POINTER(ctypes.c_double)), (4,))
        g = np.ctypeslib.as_array(ctypes.cast(sh[3], ctypes.POINTER(ctypes.c_float)), (2,))
        idx = np.arange(lo, hi + 1)
        for k in range(3):  # read-add-write, as an adjoint does
            f[k] = f[k] + float(np.sum(idx % 3 == k))
        o[lo : hi + 1] += 2.0
        d[:] += 1.0
        g[:] += np.float32(hi - lo + 1)

    reverse(chunk, None, shadows, 4, privates, 4, 0, n - 1, threads)
    np.testing.assert_array_equal(few, [sum(i % 3 == k for i in range(n)) for k in range(3)])
    np.testing.assert_array_equal(own, np.full(n, 2.0))
    np.testing.assert_array_equal(dropped, np.zeros(4))
    np.testing.assert_array_equal(few32, np.full(2, n, dtype=np.float32))


def test_snapshot_copies_named_memory_only(runner):
    _, _, _, snapshot = runner
    a = np.arange(10.0)
    b = np.arange(3.0)
    slots = (ctypes.c_int64 * 3)(a.ctypes.data, 42, b.ctypes.data)
    copies = (ctypes.c_int64 * 2)(0, a.nbytes)
    out = snapshot(slots, 3, copies, 1)
    assert out[1] == 42 and out[2] == b.ctypes.data  # not named: the same value
    assert out[0] != a.ctypes.data and out[0] % 64 == 0
    copy = np.ctypeslib.as_array(ctypes.cast(out[0], ctypes.POINTER(ctypes.c_double)), (10,))
    a[:] = -1.0  # later code overwriting the original
    np.testing.assert_array_equal(copy, np.arange(10.0))
    from enzyme_py import _state

    _state.native.release_arena()  # the snapshot lives with the call's temporaries
