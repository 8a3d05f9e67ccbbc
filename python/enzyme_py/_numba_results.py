"""The calling convention of derivatives of Numba functions that return arrays or tuples.

The frontend turns such a result into output arrays of the wrapper (one per part:
each array of the result, each scalar of a tuple as a 0-d array). The user's return
activity applies to every part, and calls look like those of a scalar function:

- Reverse, ``Duplicated`` (or ``DuplicatedOnly``): after the parameters' arguments
  comes the cotangent of the result, shaped like it (a tuple of them for a tuple
  result; floats for its scalars; a leading axis of ``width`` lanes when width > 1),
  which is left unchanged. Integer and boolean parts have no derivative: their
  entries of the cotangent are ignored (None will do), and an integer or boolean
  array part costs one evaluation of the function more (for its shape). Returns
  ``(result, *adjoints of Active parameters)`` (``result`` None under DuplicatedOnly);
  shadows of Duplicated parameters are added into, as always.
- Forward, ``Dual``: returns ``(result, tangent of the result)``; ``DualOnly`` the
  tangent (None for an integer or boolean part); ``Const`` the result. The result's
  shape is found by running the function on copies of the arguments first (one
  evaluation more).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from enzyme_py._arguments import real_number
from enzyme_py._derivative import Derivative
from enzyme_py.core import (
    Active,
    ActiveOnly,
    Activity,
    ActivityError,
    Const,
    Dual,
    DualOnly,
    Duplicated,
    DuplicatedOnly,
    Mode,
    Reverse,
)
from enzyme_py.frontends._numba_results import ResultPart

__all__ = ["ArrayResultCall", "part_activity"]


def part_activity(name: str, mode: Mode, activity: Activity) -> Activity:
    """The activity of each output array, for the return activity the user gave."""
    if mode is Reverse and activity in (Duplicated, DuplicatedOnly):
        return activity
    if mode is not Reverse and activity in (Dual, DualOnly, Const):
        return activity
    if mode is Reverse:
        hint = (
            "in Reverse mode its activity is Duplicated (the call takes the result's "
            "cotangent, shaped like it, after the other arguments) or DuplicatedOnly"
        )
        if activity in (Active, ActiveOnly):
            hint += f"; {activity.name} is for functions returning a float scalar"
    else:
        hint = "in Forward mode its activity is Dual, DualOnly or Const"
    raise ActivityError(f"'{name}' returns an array or a tuple, so {hint}; got {activity.name}")


@dataclass(frozen=True)
class ArrayResultCall:
    """Calls of the derivative of a function returning arrays, in the user's terms."""

    derivative: Derivative
    name: str
    mode: Mode
    activity: Activity  # the return activity the user gave
    parts: tuple[ResultPart, ...]
    width: int
    primal: Any  # the Numba dispatcher, for the result's shape in forward mode
    primal_positions: tuple[int, ...]  # where the parameters' values are among the args

    @property
    def _tuple(self) -> bool:
        return self.parts[0].member is not None

    def __call__(self, args: tuple[Any, ...]) -> Any:
        if self.mode is Reverse:
            return self._reverse(args)
        return self._forward(args)

    def _value(self, outs: Sequence[np.ndarray]) -> Any:
        values = [o[()].item() if p.scalar else o for p, o in zip(self.parts, outs, strict=True)]
        return tuple(values) if self._tuple else values[0]

    def _reverse(self, args: tuple[Any, ...]) -> Any:
        if not args:
            raise TypeError(f"the reverse derivative of '{self.name}' takes the cotangent last")
        *inner, cotangent = args
        given = cotangent if self._tuple else (cotangent,)
        if self._tuple and (
            not isinstance(cotangent, (tuple, list)) or len(cotangent) != len(self.parts)
        ):
            raise TypeError(
                f"'{self.name}' returns a tuple of {len(self.parts)}: its cotangent is a "
                f"tuple of {len(self.parts)} (arrays shaped like the arrays, floats for the "
                f"scalars); got {type(cotangent).__name__}"
            )
        call: list[Any] = list(inner)
        outs = []
        shapes: list[tuple[int, ...]] = []
        for k, (part, value) in enumerate(zip(self.parts, given, strict=True)):
            where = f"the cotangent of {'the result' if not self._tuple else f'result[{k}]'}"
            if not part.differentiable:  # no derivative: its cotangent is not used
                shape: tuple[int, ...] = ()
                if not part.scalar:
                    shapes = shapes or self._shapes(inner)
                    shape = shapes[k]
                out = np.empty(shape, part.dtype)
                outs.append(out)
                call.append(out)
                continue
            seed = self._array_of(value, part, where)
            out = np.empty(seed.shape[1:] if self.width > 1 else seed.shape, part.dtype)
            outs.append(out)
            call += [out, seed]  # the seed is a copy: the derivative consumes it
        _, *adjoints = self.derivative(*call)
        value = None if self.activity is DuplicatedOnly else self._value(outs)
        return (value, *adjoints)

    def _array_of(self, value: Any, part: ResultPart, where: str) -> np.ndarray:
        lanes = self.width > 1
        if part.scalar:
            if lanes:
                seed = np.array(value, dtype=part.dtype)
                if seed.shape != (self.width,):
                    raise ValueError(f"{where} needs {self.width} values (width={self.width})")
                return seed
            return np.array(real_number(value, where, "a float"), dtype=part.dtype)
        if not isinstance(value, np.ndarray) or value.dtype.kind not in "biuf":
            raise TypeError(
                f"{where} must be an array of real numbers shaped like the result; got "
                f"{type(value).__name__}"
            )
        if value.ndim != part.ndim + lanes:
            lane = f" (and a leading axis of {self.width} lanes)" if lanes else ""
            raise ValueError(
                f"{where} must have {part.ndim} dimensions like the result{lane}; got "
                f"shape {value.shape}"
            )
        return np.array(value, dtype=part.dtype, order="C", copy=True)

    def _shapes(self, args: Sequence[Any]) -> list[tuple[int, ...]]:
        """The shape of each part of the result at these arguments (the derivative's),
        found by running the function on copies of them (no side effect)."""
        copies = [
            args[i].copy() if isinstance(args[i], np.ndarray) else args[i]
            for i in self.primal_positions
        ]
        found = self.primal(*copies)
        values = found if self._tuple else (found,)
        return [
            () if part.scalar else np.shape(value)
            for part, value in zip(self.parts, values, strict=True)
        ]

    def _forward(self, args: tuple[Any, ...]) -> Any:
        call: list[Any] = list(args)
        outs, tangents = [], []
        for part, shape in zip(self.parts, self._shapes(args), strict=True):
            out = np.empty(shape, part.dtype)
            outs.append(out)
            call.append(out)
            if self.activity is not Const and part.differentiable:
                lanes = (self.width,) if self.width > 1 else ()
                tangent = np.zeros(lanes + shape, part.dtype)
                tangents.append(tangent)
                call.append(tangent)
        self.derivative(*call)
        if self.activity is Const:
            return self._value(outs)
        # Scalars of a tuple come back as floats (width 1) or arrays of their lanes;
        # integer and boolean parts, which have no tangent, as None.
        found = iter(tangents)
        per_part: list[Any] = []
        for p in self.parts:
            if not p.differentiable:
                per_part.append(None)
                continue
            t = next(found)
            per_part.append(t[()].item() if p.scalar and self.width == 1 else t)
        result_tangent = tuple(per_part) if self._tuple else per_part[0]
        return (self._value(outs), result_tangent) if self.activity is Dual else result_tangent
