"""The threads a derivative's prange loops run on (``src/parfor_runner.h``), called
here directly through ctypes: chunks cover the range once, each thread sees its own
chunk index, per-thread shadow copies are each added once, and snapshots are copies.
Derivatives that use it: tests/test_prange.py."""

import ctypes
import itertools
import threading
import time

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
    run = ctypes.CFUNCTYPE(None, CHUNK, ctypes.c_void_p, i64, i64, i64, i64, i64)(
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
        i64,
        i64,
    )(symbols["__enzyme_py_parfor_reverse"])
    snapshot = ctypes.CFUNCTYPE(
        ctypes.POINTER(i64), ctypes.POINTER(i64), i64, ctypes.POINTER(i64), i64
    )(symbols["__enzyme_py_parfor_snapshot"])
    return thread, run, reverse, snapshot


@pytest.mark.parametrize("threads,parts", [(1, 1), (2, 2), (3, 3), (4, 4), (2, 4), (3, 6)])
@pytest.mark.parametrize("first,last", [(0, 99), (5, 5), (-3, 10), (0, 2)])
def test_chunks_cover_the_range_once_with_one_index_per_chunk(runner, threads, parts, first, last):
    thread, run, _, _ = runner
    seen: list[tuple[int, int, int, int]] = []
    lock = threading.Lock()

    @CHUNK
    def chunk(slots, lo, hi, raised):
        with lock:
            seen.append((lo, hi, thread(), threading.get_ident()))
        # Long enough for every worker to wake and take its task: the caller, its own
        # done, runs any task no worker has taken yet.
        time.sleep(0.02)
        return 0

    run(chunk, None, first, last, parts, threads, 1)
    covered = sorted(i for lo, hi, _, _ in seen for i in range(lo, hi + 1))
    assert covered == list(range(first, last + 1))
    parts = min(parts, last - first + 1)
    assert sorted(t for _, _, t, _ in seen) == list(range(parts))
    # Chunk c starts where chunk c - 1 ended: the mapping the reverse pass relies on.
    by_index = sorted(seen, key=lambda s: s[2])
    assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(by_index))
    # Really several threads; one where the range starts below 0 (indices wrap around).
    workers = min(threads, parts) if first >= 0 else 1
    assert len({ident for *_, ident in seen}) == workers
    assert thread() == 0  # outside a launch


@pytest.mark.parametrize(
    "grain,count,parts", [(1, 100, 4), (30, 100, 3), (100, 100, 1), (500, 7, 1)]
)
def test_chunks_are_at_least_a_grain_long(runner, grain, count, parts):
    """A light body asks for chunks of a grain of indices at least (fewer chunks, not
    shorter ones); set_parfor_grain_limit caps the grain (what tests/test_prange.py
    sets, to run its short ranges on several threads)."""
    from enzyme_py import _state

    _, run, _, _ = runner
    seen = []

    @CHUNK
    def chunk(slots, lo, hi, raised):
        seen.append((lo, hi))
        return 0

    run(chunk, None, 0, count - 1, 4, 2, grain)
    assert len(seen) == parts
    assert sorted(i for lo, hi in seen for i in range(lo, hi + 1)) == list(range(count))
    before = _state.native.set_parfor_grain_limit(1)
    try:
        seen.clear()
        run(chunk, None, 0, count - 1, 4, 2, grain)
        assert len(seen) == min(4, count)
    finally:
        _state.native.set_parfor_grain_limit(before)


def test_back_to_back_launches_of_different_sizes_run_each_chunk_once(runner):
    """Launches one after the other with 2, 4 and 3 chunks, as a derivative's passes
    come: each chunk runs once per launch (a worker that took a later launch's task
    for the one it woke for ran it twice, and its launch then waited forever)."""
    _, run, _, _ = runner
    counts = np.zeros(4, dtype=np.int64)

    @CHUNK
    def chunk(slots, lo, hi, raised):
        counts[lo] += 1
        return 0

    sizes = [2, 4, 3] * 700
    for parts in sizes:
        run(chunk, None, 0, parts - 1, parts, parts, 1)
    assert counts.tolist() == [len(sizes), len(sizes), 1400, 700]


def test_empty_range_runs_nothing(runner):
    _, run, _, _ = runner
    calls = []

    @CHUNK
    def chunk(slots, lo, hi, raised):
        calls.append((lo, hi))
        return 0

    run(chunk, None, 4, 3, 4, 4, 1)
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

    run(chunk, None, 0, 99, 4, 4, 1)
    assert sorted(ran) == [0, 25, 50, 75]


def _privates(*entries):
    """(slot, bytes, kind) or (slot, bytes, kind, reach) entries; reach -1: unknown."""
    flat = [v for e in entries for v in (*e, -1)[:4]]
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

    reverse(chunk, None, shadows, 4, privates, 4, 0, n - 1, threads, threads, 1)
    np.testing.assert_array_equal(few, [sum(i % 3 == k for i in range(n)) for k in range(3)])
    np.testing.assert_array_equal(own, np.full(n, 2.0))
    np.testing.assert_array_equal(dropped, np.zeros(4))
    np.testing.assert_array_equal(few32, np.full(2, n, dtype=np.float32))


def _doubles(address, n):
    return np.ctypeslib.as_array(ctypes.cast(address, ctypes.POINTER(ctypes.c_double)), (n,))


@pytest.mark.parametrize("threads", [2, 3])
def test_owned_shadows_are_used_in_place_in_two_waves(runner, threads):
    """A shadow whose entries the loop's indices own within a reach r (a stencil
    x[i], x[i + 1]: r = 1) has no copies: every chunk adds into it, the even chunks
    first, then the odd ones, so that no two chunks running together touch an entry."""
    thread, _, reverse, _ = runner
    n = 1000
    x = np.zeros(n + 1)
    shadows = (ctypes.c_int64 * 1)(x.ctypes.data)
    events: list[tuple[str, int]] = []
    lock = threading.Lock()

    @REVERSE
    def chunk(slots, sh, lo, hi):
        with lock:
            events.append(("start", thread()))
        assert sh[0] == x.ctypes.data  # the shadow itself, in every chunk
        d = _doubles(sh[0], n + 1)
        d[lo : hi + 1] += 1.0
        d[lo + 1 : hi + 2] += 1.0
        with lock:
            events.append(("end", thread()))

    privates = _privates((0, x.nbytes, 0, 1))
    reverse(chunk, None, shadows, 1, privates, 1, 0, n - 1, 2 * threads, threads, 1)
    np.testing.assert_array_equal(x, np.r_[1.0, np.full(n - 1, 2.0), 1.0])
    assert sorted(c for e, c in events if e == "start") == list(range(2 * threads))
    last_even_end = max(k for k, (e, c) in enumerate(events) if e == "end" and c % 2 == 0)
    first_odd_start = min(k for k, (e, c) in enumerate(events) if e == "start" and c % 2)
    assert last_even_end < first_odd_start


@pytest.mark.parametrize(
    "reach,n,in_place", [(1, 1000, True), (-1, 1000, False), (300, 1000, False), (0, 2, True)]
)
def test_shadows_are_copied_where_ownership_is_unknown_or_chunks_are_short(
    runner, reach, n, in_place
):
    """In place where the reach is known and every chunk (here 4 on 2 threads) is at
    least as long; else each thread but the first adds into a copy of its own."""
    _, _, reverse, _ = runner
    x = np.zeros(n)
    shadows = (ctypes.c_int64 * 1)(x.ctypes.data)
    seen = []

    @REVERSE
    def chunk(slots, sh, lo, hi):
        seen.append(sh[0] == x.ctypes.data)
        _doubles(sh[0], n)[lo : hi + 1] += 1.0 + lo

    reverse(chunk, None, shadows, 1, _privates((0, x.nbytes, 0, reach)), 1, 0, n - 1, 4, 2, 1)
    assert all(seen) == in_place and any(seen)  # the first thread: always the shadow
    parts = min(4, n)
    starts = [n // parts * c for c in range(parts)]
    expected = np.concatenate([np.full(n // parts, 1.0 + lo) for lo in starts])
    np.testing.assert_array_equal(x, expected)


def test_overlapping_shadows_run_on_one_thread_in_place(runner):
    """One array passed twice (two shadow slots, one memory): a copy per slot would be
    right too, but a shadow used in place (owned, or written) must not share memory
    with another thread's copy: the pass runs on the caller's thread."""
    _, _, reverse, _ = runner
    n = 100
    x = np.zeros(n)
    shadows = (ctypes.c_int64 * 2)(x.ctypes.data, x.ctypes.data + 8 * 10)
    idents = set()

    @REVERSE
    def chunk(slots, sh, lo, hi):
        idents.add(threading.get_ident())
        _doubles(sh[0], n)[lo : hi + 1] += 1.0
        _doubles(sh[1], n - 10)[max(lo - 10, 0) : max(hi - 9, 0)] += 1.0

    privates = _privates((0, x.nbytes, 0, 0), (1, x.nbytes - 80, 3))
    reverse(chunk, None, shadows, 2, privates, 2, 0, n - 1, 4, 4, 1)
    assert idents == {threading.get_ident()}
    np.testing.assert_array_equal(x, np.r_[np.ones(10), np.full(n - 10, 2.0)])


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
