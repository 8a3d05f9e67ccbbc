"""Batches of columns and rows, shared by the Jacobians and the Hessians: unit seeds
for a range of elements in lanes, per-lane values as rows, the retry one column at a
time where Enzyme refuses a batch, and derivatives of a function returning an array
taken element by element of its result (``per_output``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from enzyme_py import _transforms as tf
from enzyme_py._activities import RecursionBatchRefused
from enzyme_py.frontends._numba_contract import contracted

__all__ = ["array_result", "batched", "batches", "lanes", "per_output", "size_of", "unit"]


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


def per_output(
    f: Any, args: Sequence[Any], who: str, of_output: Callable[[Any], Callable[..., Any]]
) -> Any:
    """A derivative of Numba f returning a float array, element by element of its
    result: ``of_output(g)`` for the contraction ``g(*args, weights) = sum(f(*args) *
    weights)`` (``_numba_contract``), called with each unit ``weights``; the results
    stacked leaf by leaf, the result's shape in front (JAX's layout)."""
    out = array_result(f, args, who)
    if out.dtype.kind != "f":
        raise TypeError(
            f"{who}: {tf.name_of(f)} returns an array of {out.dtype}, which has no "
            "derivative; return float values"
        )
    compute = of_output(contracted(f, len(args)))
    found = []
    for k in range(out.size):
        weights = np.zeros(out.size, dtype=out.dtype)
        weights[k] = 1
        found.append(compute(*args, weights.reshape(out.shape)))
    return _stacked(found, out.shape)


def _stacked(items: list[Any], shape: tuple[int, ...]) -> Any:
    """Items nested alike (tuples of arrays or floats), stacked leaf by leaf."""
    if isinstance(items[0], (tuple, list)):
        return tuple(_stacked([item[j] for item in items], shape) for j in range(len(items[0])))
    return np.stack([np.asarray(item) for item in items]).reshape(*shape, *np.shape(items[0]))
