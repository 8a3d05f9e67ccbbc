"""Batches of columns and rows, shared by the Jacobians and the Hessians: unit seeds
for a range of elements in lanes, per-lane values as rows, and the retry one column
at a time where Enzyme refuses a batch."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from enzyme_py import _transforms as tf
from enzyme_py._activities import RecursionBatchRefused

__all__ = ["array_result", "batched", "batches", "lanes", "size_of", "unit"]


def batches(n: int, size: int) -> list[tuple[int, int]]:
    return [(start, min(start + size, n)) for start in range(0, n, size)]


def unit(a: Any, width: int, start: int, stop: int) -> Any:
    """Seeds for elements start:stop of ``a`` (an array, or a float scalar: one
    element), one per lane."""
    if not isinstance(a, np.ndarray):
        return 1.0 if width == 1 else [1.0] * width
    seeds = tf.shadow_like(a, width)
    seeds.reshape(width, -1)[np.arange(width), np.arange(start, stop)] = 1.0
    return seeds


def size_of(a: Any) -> int:
    return a.size if isinstance(a, np.ndarray) else 1


def lanes(values: Any, width: int) -> np.ndarray:
    """Per-lane values (an array's shadow, or a scalar's k adjoints) as (width, -1)."""
    return np.asarray(values, dtype=np.float64).reshape(width, -1)


def batched(run: Callable[[int], None], recursive: bool = False) -> None:
    """run(batch size); one column at a time where Enzyme refuses batches (recursion)."""
    if recursive:
        run(1)
        return
    try:
        run(tf.BATCH)
    except RecursionBatchRefused:
        run(1)


def array_result(f: Any, args: Sequence[Any], who: str) -> np.ndarray:
    """f's array result at ``args`` (on copies: no side effect), for its shape;
    TypeError for a tuple."""
    found = f(*tf.fresh(args))
    if isinstance(found, tuple):
        raise TypeError(
            f"{who}: {tf.name_of(f)} returns a tuple; the Jacobian of a tuple "
            "result is not supported: differentiate a function returning one array "
            "(or use ez.jvp / ez.vjp, which take tuples)"
        )
    return np.asarray(found)
