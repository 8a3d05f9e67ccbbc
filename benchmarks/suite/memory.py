"""A child's memory readings: ru_maxrss, VmRSS / VmHWM, malloc_trim, Enzyme's tape."""

from __future__ import annotations

import resource
from collections.abc import Callable
from pathlib import Path
from typing import Any


def maxrss_mib(who: int = resource.RUSAGE_SELF) -> float:
    return resource.getrusage(who).ru_maxrss / 1024.0  # KiB on Linux


def status_kib(key: str) -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return float(line.split()[1])
    except OSError:
        return None
    return None


def reset_high_water_mark() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def malloc_trim() -> bool:
    """Hand the C heap's free memory back to the system (glibc's ``malloc_trim(0)``:
    the free pages of every arena, not only the top), so that a later call's
    temporaries are new pages, counted in ``VmHWM``, rather than reused ones."""
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        libc.malloc_trim(ctypes.c_size_t(0))
        return True
    except (OSError, AttributeError):
        return False


def one_call_mib(call: Callable[[], Any]) -> float | None:
    """Memory one more call takes at its peak: freed memory handed back first
    (``malloc_trim``), the high-water mark reset to the resident size, one call,
    then ``VmHWM`` minus ``VmRSS`` before the call. What the call's result keeps and
    its temporaries (a reverse pass's tape) are counted; what stays allocated between
    calls (inputs, compiled code, a library's own pools) is not."""
    malloc_trim()
    if not reset_high_water_mark():
        return None
    before = status_kib("VmRSS")
    result = call()
    hwm = status_kib("VmHWM")
    del result
    if before is None or hwm is None:
        return None
    return max(0.0, (hwm - before) / 1024.0)


def enzyme_tape_mib() -> tuple[float, bool] | None:
    """The most Enzyme's tape held during this thread's last derivative call, MiB, and
    whether enzyme_py kept its stack for the next call (``_native.tape_bytes``: a
    stack of its own, not malloc's, whose memory stays resident between calls up to
    1 GiB or a sixteenth of the machine's memory)."""
    try:
        from enzyme_py import _state

        _, reserved, last = _state.native.tape_bytes()
    except (ImportError, AttributeError):
        return None
    return last / 2**20, reserved > 0
