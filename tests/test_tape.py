"""Derivatives' memory: Enzyme's tape on enzyme_py's per-thread stack, and the
arena's Numba temporaries, whose data pointers the engine computes instead of
loading (so that LLVM and Enzyme know two temporaries never alias)."""

from __future__ import annotations

import ctypes
import math
import os
import resource
import time

import numpy as np
import pytest
from numba import njit

import enzyme_py as ez

pytestmark = pytest.mark.needs_enzyme

libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]


def native():
    from enzyme_py import _state

    return _state.native


class Tape:
    """The tape's malloc/free/realloc, called from this thread (as a derivative would)."""

    def __init__(self) -> None:
        symbols = native().runtime_symbols()
        self.alloc = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t)(
            symbols["__enzyme_py_tape_alloc"]
        )
        self.free = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(symbols["__enzyme_py_tape_free"])
        self.realloc = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)(
            symbols["__enzyme_py_tape_realloc"]
        )

    @staticmethod
    def in_use() -> int:
        return int(native().tape_bytes()[0])

    @staticmethod
    def reserved() -> int:
        return int(native().tape_bytes()[1])

    @staticmethod
    def last_call() -> int:
        return int(native().tape_bytes()[2])


@pytest.fixture
def tape():
    native().release_arena()
    native().give_back_tape()  # a new thread's tape: no chunks
    yield Tape()
    native().release_arena()
    native().give_back_tape()


def fill(address: int, n: int, value: int) -> None:
    ctypes.memset(address, value, n)


def holds(address: int, n: int, value: int) -> bool:
    return ctypes.string_at(address, n) == bytes([value]) * n


def test_blocks_are_aligned_distinct_and_popped_in_reverse_order(tape):
    sizes = [1, 8, 24, 100, 4096, 3]
    blocks = [tape.alloc(n) for n in sizes]
    assert all(b % 16 == 0 for b in blocks)
    for i, (b, n) in enumerate(zip(blocks, sizes, strict=True)):
        fill(b, n, i + 1)
    for i, (b, n) in enumerate(zip(blocks, sizes, strict=True)):
        assert holds(b, n, i + 1), f"block {i} was overwritten"
    assert tape.in_use() > sum(sizes)
    for b in reversed(blocks):
        tape.free(b)
    assert tape.in_use() == 0


def natural_alignment(size: int) -> int:
    align = 16
    while align < 64 and 2 * align <= size:
        align *= 2
    return align


def test_every_tape_block_is_aligned_to_its_size(tape):
    # Enzyme stores vector values in its tape with their own alignment (a <4 x double>
    # with an aligned 32-byte move; tests/test_tape_alignment.py): blocks of every size
    # class, after blocks of every padding, each start at a multiple of its alignment.
    sizes = [1, 8, 16, 24, 32, 40, 48, 64, 72, 96, 128, 200, 256, 1000, 5000]
    misaligned = []
    for first in sizes[:8]:
        tape.alloc(first)
        for size in sizes:
            p = tape.alloc(size)
            if p % natural_alignment(size):
                misaligned.append((first, size, hex(p)))
    assert misaligned == []


def test_blocks_freed_out_of_order_are_popped_with_the_top(tape):
    a, b, c = tape.alloc(32), tape.alloc(32), tape.alloc(32)
    tape.free(b)  # not on top: marked only
    in_use = tape.in_use()
    tape.free(c)  # pops c and the freed b under it
    assert tape.in_use() < in_use
    d = tape.alloc(32)
    assert d == b, "the space of b and c is reused"
    tape.free(d)
    tape.free(a)
    assert tape.in_use() == 0


def test_realloc_grows_the_top_block_in_place_and_moves_others(tape):
    a = tape.alloc(16)
    fill(a, 16, 7)
    grown = tape.realloc(a, 4000)
    assert grown == a and holds(grown, 16, 7)
    b = tape.alloc(16)
    moved = tape.realloc(grown, 100_000)
    assert moved != grown and holds(moved, 16, 7)
    fresh = tape.realloc(None, 64)  # realloc(NULL, n) allocates
    assert fresh and fresh % 16 == 0
    for block in (fresh, moved, b):
        tape.free(block)
    assert tape.in_use() == 0


def test_pointers_from_malloc_go_back_to_libc(tape):
    outside = libc.malloc(64)
    fill(outside, 64, 3)
    outside = tape.realloc(outside, 1 << 16)  # libc's realloc: contents kept
    assert holds(outside, 64, 3)
    tape.free(outside)  # libc's free: no crash, nothing popped
    assert tape.in_use() == 0


def test_large_tapes_span_chunks_that_stay_for_the_next_call(tape):
    def one_call() -> tuple[list[int], int]:
        nonlocal faults
        blocks = [tape.alloc(3 << 20) for _ in range(5)]  # more than the first chunk
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for i, b in enumerate(blocks):
            fill(b, 3 << 20, i)
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
        for i, b in enumerate(blocks):
            assert holds(b, 3 << 20, i)
        most = tape.in_use()
        for b in reversed(blocks):
            tape.free(b)
        native().release_arena()
        return blocks, most

    faults = 0
    first, most = one_call()
    assert tape.last_call() == most
    assert most <= tape.reserved() < most + (2 << 20)
    again, _ = one_call()
    # The same chunks, whose pages are in already: made one chunk after the first
    # call, the tape was faulted in again by the second (15 MiB: 3840 pages).
    assert again == first
    assert faults < 200
    assert most <= tape.reserved() < most + (2 << 20)


def _vm_flags_at(address: int) -> list[str]:
    """The kernel's VmFlags of the mapping holding ``address`` (/proc/self/smaps)."""
    inside = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                low, high = (int(part, 16) for part in head.split("-"))
                inside = low <= address < high
            elif inside and head == "VmFlags:":
                return line.split()[1:]
    raise AssertionError(f"no mapping holds {address:#x}")


def test_large_tape_chunks_are_not_advised_for_huge_pages(tape):
    # Advised, a first call's fresh 2 MiB pages were, on a VM whose balloon reports
    # free memory to its host, faulted in by the host as well: the GMM gradient's
    # 79 MiB tape took 130-170 ms of its first call instead of 30-40 ms (arena.cpp).
    block = tape.alloc(5 << 20)
    fill(block, 5 << 20, 7)
    small = tape.alloc(1024)  # in the same chunk: the stack goes on
    fill(small, 1024, 9)
    assert holds(block, 5 << 20, 7) and holds(small, 1024, 9)
    flags = _vm_flags_at(block)
    assert "hg" not in flags
    if os.path.isdir("/sys/kernel/mm/transparent_hugepage"):
        # Advised against them: a heap region NumPy advised for huge pages (its arrays
        # of 4 MiB and more) may hold the chunk, depending on what ran before.
        assert "nh" in flags, flags
    tape.free(small)
    tape.free(block)


@pytest.mark.parametrize("align", [16, 32, 64, 128])
def test_nrt_data_lies_at_the_offset_the_engine_computes(align):
    # The engine replaces Numba's load of MemInfo.data by this offset.
    alloc = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint)(
        native().runtime_symbols()["NRT_MemInfo_alloc_aligned"]
    )
    info = alloc(100, align)
    data = ctypes.c_void_p.from_address(info + 24).value
    assert data == info + native().nrt_data_offset(align)
    assert data % align == 0
    assert holds(data, 100, 0), "temporaries start at zero"
    native().release_arena()


numba = pytest.importorskip("numba")


@numba.njit
def triangle_energy(L, x):
    # Per row: xc = x[i] - mean, q = L xc with L lower triangular (a temporary
    # written in a triangular loop that reads xc), then sum q^2.
    n, d = x.shape
    xc = np.empty(d)
    q = np.empty(d)
    total = 0.0
    for i in range(n):
        for j in range(d):
            xc[j] = x[i, j] - L[j, j]
        for j in range(d):
            q[j] = math.exp(L[j, j]) * xc[j]
        for j in range(d):
            for r in range(j + 1, d):
                q[r] += L[r, j] * xc[j]
        for j in range(d):
            total += q[j] * q[j]
    return total


def triangle_energy_gradient(L, x):
    n, d = x.shape
    g = np.zeros_like(L)
    for i in range(n):
        xc = x[i] - np.diag(L)
        M = np.tril(L, -1) + np.diag(np.exp(np.diag(L)))
        q = M @ xc
        gq = 2.0 * q
        gM = np.outer(gq, xc)
        g += np.tril(gM, -1)
        g[np.diag_indices(d)] += np.diag(gM) * np.exp(np.diag(L)) - M.T @ gq
    return g


def test_temporaries_in_triangular_loops_are_cached_once_per_loop():
    rng = np.random.default_rng(0)
    d, n = 24, 2000
    L = rng.normal(scale=0.2, size=(d, d))
    x = rng.normal(size=(n, d))
    grad = ez.grad(triangle_energy)
    g = grad(L, x)
    np.testing.assert_allclose(g, triangle_energy_gradient(L, x), rtol=1e-9, atol=1e-9)
    assert Tape.in_use() == 0, "the derivative popped its whole tape"
    # xc[j] is loop-invariant in the triangle; cached once per (i, j) that is
    # n * d values. Cached once per (i, j, r) (temporaries that may alias) it
    # would be n * d^2 / 2: about 4.4 MiB here.
    per_iteration = n * d * d // 2 * 8
    assert 0 < Tape.last_call() < per_iteration / 2, Tape.last_call()


@njit
def sines_of_a_scaled_table(w, x):
    m = w.shape[0]
    table = np.empty(m)
    for j in range(m):
        table[j] = math.exp(w[j])
    s = 0.0
    for i in range(x.shape[0]):
        for j in range(m):
            s += math.sin(table[j] * x[i])
    return s


def test_a_table_made_before_a_loop_is_read_again_not_cached_per_iteration():
    # Numba releases the table (NRT_decref) after the loop; Enzyme took that call as
    # a write of it and cached table[j] once per (i, j): n * m * 8 bytes (800 KB
    # here). The release of a temporary is erased in derivatives (its memory lives
    # in the arena until the call ends), so the reverse pass reads the table again.
    rng = np.random.default_rng(3)
    w, x = rng.normal(scale=0.3, size=50), rng.normal(size=2000)
    g = ez.grad(sines_of_a_scaled_table)(w, x)
    table = np.exp(w)
    expected = (np.cos(np.outer(x, table)) * x[:, None]).sum(axis=0) * table
    np.testing.assert_allclose(g, expected, rtol=1e-10, atol=1e-10)
    per_iteration = x.size * w.size * 8
    assert Tape.last_call() < per_iteration / 4, Tape.last_call()
    assert Tape.in_use() == 0


def test_a_failed_allocation_outside_a_derivative_call_returns_null(tape):
    # Only a derivative call has somewhere to return to; other callers check null.
    assert tape.alloc(1 << 62) is None
    assert tape.alloc(64) is not None
    symbols = native().runtime_symbols()
    nrt_alloc = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint)(
        symbols["NRT_MemInfo_alloc_aligned"]
    )
    assert nrt_alloc(1 << 62, 32) is None


@njit
def scratch_product(x, n):
    t = np.empty(n)
    t[0] = x[0]
    return t[0] * x[0]


@njit
def sum_of_sines_of_a_ramp(x, n):
    ramp = np.empty(n)
    for i in range(n):
        ramp[i] = x[0] * i
    s = 0.0
    for i in range(n):
        s += math.sin(ramp[i])
    return s


TOO_MANY = 10**13  # 80 TB of float64: no machine gives that


def test_a_temporary_too_large_to_allocate_raises_memory_error_and_the_call_ends():
    # Enzyme drops Numba's null check of the allocation: without the arena ending
    # the call, the derivative wrote through a null pointer (a segfault).
    x, dx = np.array([3.0, 1.0]), np.zeros(2)
    rev = ez.autodiff(scratch_product, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)
    with pytest.raises(MemoryError, match=r"reverse derivative of 'scratch_product' ran out"):
        rev(x, dx, TOO_MANY, 1.0)
    assert dx.tolist() == [0.0, 0.0]
    fwd = ez.autodiff(scratch_product, ez.Forward, ez.Dual, ez.Const, ez.Dual)
    with pytest.raises(MemoryError, match=r"could not allocate 80000000000000 bytes"):
        fwd(x, np.ones(2), TOO_MANY)
    # The same derivatives still work, their arena released.
    assert rev(x, dx, 4, 1.0) == (9.0,)
    assert dx.tolist() == [6.0, 0.0]
    assert fwd(x, np.array([1.0, 0.0]), 4) == (9.0, 6.0)
    assert Tape.in_use() == 0


def test_a_tape_too_large_to_allocate_raises_memory_error():
    x = np.array([0.5])
    df = ez.autodiff(sum_of_sines_of_a_ramp, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)
    with pytest.raises(MemoryError, match="sum_of_sines_of_a_ramp"):
        df(x, np.zeros(1), TOO_MANY, 1.0)
    dx = np.zeros(1)
    (value,) = df(x, dx, 5, 1.0)
    assert value == pytest.approx(sum(math.sin(0.5 * i) for i in range(5)))
    assert dx[0] == pytest.approx(sum(i * math.cos(0.5 * i) for i in range(5)))


def test_a_failed_allocation_in_a_derivative_called_from_njit_code_raises_memory_error():
    df = ez.autodiff(scratch_product, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)
    inner = df.njit()

    @njit
    def step(x, n):
        dx = np.zeros_like(x)
        inner(x, dx, n, 1.0)
        return dx

    with pytest.raises(MemoryError, match="scratch_product ran out of memory"):
        step(np.array([3.0, 1.0]), TOO_MANY)
    assert step(np.array([3.0, 1.0]), 4).tolist() == [6.0, 0.0]


def test_a_tape_is_kept_between_calls_up_to_1_gib_or_a_sixteenth_of_memory(tape):
    # Kept, the next call of the same size neither maps nor faults its tape in again
    # (the GMM benchmark with prange: a 271 MiB tape, 175 -> 106 ms a call); beyond
    # the limit its last chunks go back to the system. The blocks are never written:
    # their pages are address space only, counted as the tape reached them.
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    keep = min(1 << 30, memory // 16)
    size = 300 << 20  # above the 256 MiB that was kept before
    blocks = [tape.alloc(size // 3) for _ in range(3)]
    for b in reversed(blocks):
        tape.free(b)
    native().release_arena()
    assert tape.reserved() <= keep
    if size + (1 << 20) <= keep:
        assert size <= tape.reserved() <= size + (2 << 20)
    beyond = [tape.alloc(keep // 2 + (8 << 20)) for _ in range(2)]
    assert tape.reserved() > keep
    for b in reversed(beyond):
        tape.free(b)
    native().release_arena()
    assert 0 < tape.reserved() <= keep


@njit
def _running_sine(x):
    # Each step's input is needed by the reverse pass: one double of tape per element.
    y = 0.5
    for i in range(x.shape[0]):
        y = math.sin(y + x[i])
    return y


@njit
def _running_sine_gradient(x):
    # By hand: y_i = sin(y_{i-1} + x_i); dy_n/dx_i = cos(a_i) * prod_{j > i} cos(a_j).
    n = x.shape[0]
    arguments = np.empty(n)
    y = 0.5
    for i in range(n):
        arguments[i] = y + x[i]
        y = math.sin(arguments[i])
    grad = np.empty(n)
    carried = 1.0
    for i in range(n - 1, -1, -1):
        carried *= math.cos(arguments[i])
        grad[i] = carried
    return grad


def _prefault_counts() -> tuple[int, int, bool]:
    asked, done, refused = native().tape_prefault_counts()
    return int(asked), int(done), bool(refused)


def test_fresh_tape_pages_are_faulted_in_by_a_helper_thread(tape):
    # A first call's tape is fresh memory: a helper faults it in on another core while
    # the call fills it (src/tape_prefault.h). The gradient is the same; later calls of
    # the same size, their pages already there, ask for nothing.
    n = 400_000  # a 3 MiB cache
    x = np.random.default_rng(5).uniform(-1.0, 1.0, n)
    expected = _running_sine_gradient(x)
    grad = ez.grad(_running_sine)
    asked_before, done_before, _ = _prefault_counts()
    for _ in range(4):
        native().give_back_tape()  # fresh chunks, and a helper perhaps still at work
        np.testing.assert_allclose(grad(x), expected, rtol=1e-12, atol=1e-300)
    asked, done, refused = _prefault_counts()
    assert not refused, "this kernel has no MADV_POPULATE_WRITE (Linux < 5.14)"
    assert asked - asked_before >= 4 * (n * 8 - (64 << 10)), (asked, asked_before)
    # What the last call asked for is faulted in, sooner or later (the helper goes on
    # after the call; what earlier calls' chunks still waited for went with them).
    deadline = time.monotonic() + 10.0
    while done - done_before < n * 8 - (64 << 10) and time.monotonic() < deadline:
        time.sleep(0.01)
        asked, done, _ = _prefault_counts()
    assert done - done_before >= n * 8 - (64 << 10), (done, done_before)
    np.testing.assert_allclose(grad(x), expected, rtol=1e-12, atol=1e-300)
    assert _prefault_counts()[0] == asked  # the same size again: nothing fresh


def _fresh_tape_gradient_in_child(x):
    native().give_back_tape()
    asked_before, done_before, _ = _prefault_counts()
    grad = ez.grad(_running_sine)(x)
    deadline = time.monotonic() + 10.0
    asked, done, refused = _prefault_counts()
    while done - done_before < asked - asked_before and time.monotonic() < deadline:
        time.sleep(0.01)
        asked, done, refused = _prefault_counts()
    return grad, (asked - asked_before, done - done_before, refused)


def test_a_forked_child_faults_its_fresh_tape_in_with_a_helper_of_its_own(tape):
    # The parent's helper thread is not in a child made by fork: the child starts its
    # own, and does not wait for the parent's.
    import multiprocessing

    x = np.random.default_rng(6).uniform(-1.0, 1.0, 300_000)
    native().give_back_tape()
    expected = ez.grad(_running_sine)(x)  # the parent's helper started here
    with multiprocessing.get_context("fork").Pool(1) as children:
        got, (asked, done, refused) = children.apply_async(_fresh_tape_gradient_in_child, (x,)).get(
            timeout=120
        )
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_allclose(got, _running_sine_gradient(x), rtol=1e-12, atol=1e-300)
    assert not refused and asked >= x.size * 8 - (64 << 10)
    assert done == asked  # by the child's helper
