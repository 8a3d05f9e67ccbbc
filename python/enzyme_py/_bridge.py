"""What the PyTorch and JAX bridges compute on the host, in NumPy terms: the value of a
scalar function f, its gradient (reverse mode), its directional derivatives (forward
mode, batched through Enzyme's width) and Hessian-vector products (forward over
reverse). Arguments are lists of NumPy arrays and scalars, as f takes them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from enzyme_py._activities import RecursionBatchRefused
from enzyme_py._transforms import Derivatives, SplitCall, hessian_vector, reverse_call
from enzyme_py.core import (
    ActiveOnly,
    Activity,
    ActivityError,
    Const,
    Dual,
    DualOnly,
    EnzymeError,
    Forward,
)
from enzyme_py.frontends import numba as numba_frontend

# Tangents per batched forward-mode call (Enzyme's width); a last, shorter batch is
# padded with zero tangents so that one derivative serves every batch.
WIDTH = 8


def _writes_its_arrays(f: Any, values: Sequence[Any]) -> bool:
    """Whether f may write into its array arguments. A Numba function is typed once
    with its arrays read-only: Numba refuses any write to them, in f or its callees.
    Other functions (C, IR) are assumed to write."""
    if not numba_frontend.is_dispatcher(f):
        return True
    import numba
    from numba.core import compiler, errors, typed_passes, types

    try:
        typed = tuple(numba.typeof(v) for v in values)
        read_only = tuple(t.copy(readonly=True) if isinstance(t, types.Array) else t for t in typed)
        f.typingctx.refresh()
        func_ir = compiler.run_frontend(f.py_func)
        typed_passes.type_inference_stage(f.typingctx, f.targetctx, func_ir, read_only, None)
    except (errors.NumbaError, TypeError, ValueError):
        return True  # a write, or not typed this way: copy to be safe
    return False


def _key(values: Sequence[Any]) -> tuple[Any, ...]:
    return tuple((v.dtype.str, v.ndim) if isinstance(v, np.ndarray) else type(v) for v in values)


class HostKernel:
    """The derivatives of f a bridge needs, made once per combination of activities."""

    def __init__(self, f: Any):
        self.f = f
        self.derivatives = Derivatives(f)
        self._writes: dict[tuple[Any, ...], bool] = {}

    def arguments(self, values: Sequence[Any]) -> list[Any]:
        """values as f gets them: the caller's memory where f provably does not write
        it, copies otherwise (the memory is a tensor's, or JAX's)."""
        key = _key(values)
        writes = self._writes.get(key)
        if writes is None:
            writes = self._writes[key] = _writes_its_arrays(self.f, values)
        if not writes:
            return list(values)
        return [v.copy() if isinstance(v, np.ndarray) else v for v in values]

    def value(self, values: Sequence[Any]) -> Any:
        primal = self.derivatives.get(Forward, [Const] * len(values), Const)
        return primal(*self.arguments(values))

    def split_value(self, values: Sequence[Any], nums: tuple[int, ...]) -> tuple[Any, Any]:
        """``(f(*values), split)``: the value by Enzyme's augmented forward pass, and
        the SplitCall whose ``pull(seed)`` gives ``gradient(values, nums, seed)`` from
        its tape alone; ``(value, None)`` where split mode does not apply. The values'
        memory must stay unchanged while the SplitCall lives (f's own copies where it
        may write)."""
        args = self.arguments(values)
        try:
            split = SplitCall(self.derivatives, args, nums)
        except (ActivityError, EnzymeError):
            return self.value(values), None
        return split.value, split

    def gradient(self, values: Sequence[Any], nums: tuple[int, ...], seed: float) -> tuple:
        """seed times the gradient of f with respect to each argument in nums."""
        _, found = reverse_call(self.derivatives, self.arguments(values), nums, ActiveOnly, seed)
        return tuple(found)

    def tangent(self, values: Sequence[Any], tangents: dict[int, Any]) -> Any:
        """The derivative of f along tangents (argument position -> tangent)."""
        return self._forward(values, tangents, 1)

    def tangents(self, values: Sequence[Any], tangents: dict[int, Any], count: int) -> np.ndarray:
        """The derivatives of f along ``count`` tangents per argument (each entry of
        ``tangents`` has a leading axis of that length), in batches of WIDTH."""
        dtype = _float_dtype(values)
        out = np.empty(count, dtype=dtype)
        try:
            self._batched(values, tangents, count, min(WIDTH, count), out)
        except RecursionBatchRefused:  # Enzyme batches recursion wrongly: one at a time
            self._batched(values, tangents, count, 1, out)
        return out

    def _batched(
        self, values: Sequence[Any], tangents: dict[int, Any], count: int, width: int, out: Any
    ) -> None:
        for start in range(0, count, width):
            stop = min(start + width, count)
            batch: dict[int, Any] = {}
            for i, t in tangents.items():
                lanes = np.zeros((width, *np.shape(values[i])), dtype=_dtype_of(values[i]))
                lanes[: stop - start] = t[start:stop]
                batch[i] = lanes if width > 1 else lanes[0]
            found = np.asarray(self._forward(values, batch, width)).reshape(-1)
            out[start:stop] = found[: stop - start]

    def _forward(self, values: Sequence[Any], tangents: dict[int, Any], width: int) -> Any:
        acts: list[Activity] = []
        call: list[Any] = []
        for i, v in enumerate(self.arguments(values)):
            call.append(v)
            if i in tangents:
                acts.append(Dual)
                t = tangents[i]
                if isinstance(v, np.ndarray):
                    call.append(np.array(t, dtype=v.dtype, order="C"))
                else:
                    call.append(float(t) if width == 1 else [float(u) for u in t])
            else:
                acts.append(Const)
        return self.derivatives.get(Forward, acts, DualOnly, width)(*call)

    def hessian_vector(
        self, values: Sequence[Any], nums: tuple[int, ...], tangents: dict[int, Any], seed: float
    ) -> dict[int, Any]:
        """seed * H v for each argument in nums: H is f's Hessian over them, v the
        tangents (zero for an argument of nums that has none)."""
        given = {
            i: np.array(t, dtype=values[i].dtype) if isinstance(values[i], np.ndarray) else float(t)
            for i, t in tangents.items()
            if t is not None
        }
        _, products = hessian_vector(self.derivatives, self.arguments(values), nums, given, seed)
        return products


def _dtype_of(value: Any) -> np.dtype:
    return value.dtype if isinstance(value, (np.ndarray, np.generic)) else np.dtype(np.float64)


def first_float_dtype(dtypes: Iterable[Any]) -> np.dtype:
    """The first floating-point dtype among dtypes, float64 if there is none: the
    dtype a bridge gives f's value and derivatives."""
    return next((np.dtype(d) for d in dtypes if np.dtype(d).kind == "f"), np.dtype(np.float64))


def _float_dtype(values: Sequence[Any]) -> np.dtype:
    return first_float_dtype(_dtype_of(v) for v in values if not isinstance(v, (int, bool)))
