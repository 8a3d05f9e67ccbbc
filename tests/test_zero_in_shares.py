"""_native.zero_in_shares: a span zeroed by several of the prange pool's threads, each
its contiguous share (what ez.grad does for a large gradient of a derivative on
threads, enzyme_py._transforms.shadow_like). Exactly the span, whatever its alignment,
length and thread count."""

from __future__ import annotations

import numpy as np
import pytest

import enzyme_py as ez
from enzyme_py import _state
from enzyme_py._transforms import shadow_like

pytestmark = pytest.mark.needs_enzyme


@pytest.mark.parametrize("threads", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("offset,size", [(0, 0), (0, 1), (3, 61), (8, 4096), (5, 1_000_003)])
def test_exactly_the_span_is_zeroed(threads, offset, size):
    buf = np.full(offset + size + 17, 0xAB, dtype=np.uint8)
    _state.native.zero_in_shares([(buf.ctypes.data + offset, size)], threads)
    assert not buf[offset : offset + size].any()
    assert (buf[:offset] == 0xAB).all() and (buf[offset + size :] == 0xAB).all()


def test_several_spans_at_once():
    bufs = [np.full(n, 7.0) for n in (10, 300_001, 1)]
    _state.native.zero_in_shares([(b.ctypes.data, b.nbytes) for b in bufs], 2)
    assert all(not b.any() for b in bufs)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_large_shadow_for_threads_is_zeros(dtype):
    a = np.ones((700, 1000), dtype=dtype)  # above a MiB
    for threads in (1, 2, 4):
        shadow = shadow_like(a, 1, threads)
        assert shadow.shape == a.shape and shadow.dtype == a.dtype
        assert not shadow.any()
        shadow[:] = 3.0  # the next one may reuse this memory: it must be zeroed again
        del shadow
    assert ez.has_autodiff()
