"""Uninitialised arrays for shadows a derivative zeroes itself, from memory kept for reuse.

A helper's gradient of 10^6 doubles is 8 MB: NumPy takes a buffer that size from the
system (``mmap``) and hands it back when the array dies, so each call's derivative
first faults in 2048 fresh pages (``ez.grad`` of serial Rosenbrock, 10^6, each result
kept until the next call returns, as an optimisation loop does: 246 us median with
fresh arrays, 227 us from kept buffers; JAX's allocator reuses its buffers likewise).
Where the derivative zeroes the shadow itself (``Derivative.zeroed_params``), what the
memory held before does not matter, so a large one is a view of a kept buffer that no
array uses any more (only this pool refers to it); smaller ones, and any beyond what
the pool keeps, are plain ``np.empty``. (The large shadows a prange derivative's
threads zero, each its share, are not taken from here: 192-196 against 198 us median,
Rosenbrock prange, within noise.)
"""

from __future__ import annotations

import math
import sys
import threading
from collections import OrderedDict

import numpy as np

# Smaller arrays are plain np.empty (the system's allocator reuses them); the helpers
# zero small shadows themselves (_reverse_plan.ReversePlan.shadows).
LARGE_SHADOW_BYTES = 1 << 18
# Buffers kept per size, and sizes kept (the least recently used dropped first).
BUFFERS_PER_SIZE = 4
SIZES = 8

_lock = threading.Lock()
_buffers: OrderedDict[int, list[np.ndarray]] = OrderedDict()


def uninitialised(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A C-contiguous array of ``shape`` and ``dtype`` whose values are whatever its
    memory held."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes < LARGE_SHADOW_BYTES:
        return np.empty(shape, dtype=dtype)
    with _lock:  # a buffer is taken by one caller: its view makes it used at once
        kept = _buffers.get(nbytes)
        if kept is None:
            kept = _buffers[nbytes] = []
            while len(_buffers) > SIZES:
                _buffers.popitem(last=False)
        _buffers.move_to_end(nbytes)
        # Free: referred to by this list only (and getrefcount's own argument; no
        # loop variable may hold it while counting). Every array made from it has it
        # as its base, so none of them is alive.
        free = None
        for i in range(len(kept)):
            if sys.getrefcount(kept[i]) == 2:
                free = kept[i]
                break
        if free is None:
            if len(kept) >= BUFFERS_PER_SIZE:
                return np.empty(shape, dtype=dtype)
            free = np.empty(nbytes, dtype=np.uint8)
            kept.append(free)
        return free.view(dtype).reshape(shape)


def clear() -> None:
    """Drop the kept buffers (arrays still using one keep it alive)."""
    with _lock:
        _buffers.clear()
