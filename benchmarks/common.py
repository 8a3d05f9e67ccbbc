"""Measurement helpers shared by the benchmark scripts."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np


def median_time(fn: Callable[[], Any], repeats: int) -> float:
    """Median wall time of ``fn()`` over ``repeats`` runs, after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def central_difference(f: Callable[..., float], args: list[Any], flat: np.ndarray, j: int) -> float:
    """d f(*args) / d flat[j] by central differences (``flat``: a flat view of one of
    ``args``, restored afterwards), step 1e-6 relative to the entry."""
    old = flat[j]
    h = 1e-6 * max(1.0, abs(old))
    flat[j] = old + h
    up = f(*args)
    flat[j] = old - h
    down = f(*args)
    flat[j] = old
    return float((up - down) / (2.0 * h))
