"""What the PyTorch and JAX bridges compute on the host, in NumPy terms: the value of a
scalar function f, its gradient (reverse mode), its directional derivatives (forward
mode, batched through Enzyme's width) and Hessian-vector products (forward over
reverse). Arguments are lists of NumPy arrays and scalars, as f takes them."""

from __future__ import annotations

import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from enzyme_py._activities import RecursionBatchRefused
from enzyme_py._transforms import Derivatives, SplitCall, hessian_vector, reverse_call
from enzyme_py.core import (
    Active,
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

    def value_and_gradient(self, values: Sequence[Any], nums: tuple[int, ...]) -> tuple:
        """``(f(*values), gradient with respect to each argument in nums)`` from one
        reverse pass (its forward half computes the value)."""
        value, found = reverse_call(self.derivatives, self.arguments(values), nums, Active, 1.0)
        return value, tuple(found)

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
        _by_width(lambda width: self._batched(values, tangents, count, width, out), count)
        return out

    def _batched(
        self, values: Sequence[Any], tangents: dict[int, Any], count: int, width: int, out: Any
    ) -> None:
        for start in range(0, count, width):
            stop = min(start + width, count)
            batch = _lanes(values, tangents, tangents.keys(), start, stop, width)
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

    def hessian_vectors(
        self,
        values: Sequence[Any],
        nums: tuple[int, ...],
        tangents: dict[int, Any],
        seed: float,
        count: int,
    ) -> dict[int, np.ndarray]:
        """``hessian_vector`` for ``count`` tangents per argument of nums (float arrays
        only; each entry of ``tangents`` has a leading axis of that length, zero where
        an argument of nums has none): per argument, ``(count, *shape)``, by Enzyme's
        width in batches of WIDTH (one at a time for recursion)."""
        out = {i: np.empty((count, *np.shape(values[i])), dtype=_dtype_of(values[i])) for i in nums}
        _by_width(
            lambda width: self._hessian_batches(values, nums, tangents, seed, count, width, out),
            count,
        )
        return out

    def _hessian_batches(
        self,
        values: Sequence[Any],
        nums: tuple[int, ...],
        tangents: dict[int, Any],
        seed: float,
        count: int,
        width: int,
        out: dict[int, np.ndarray],
    ) -> None:
        for start in range(0, count, width):
            stop = min(start + width, count)
            batch = _lanes(values, tangents, nums, start, stop, width)
            args = self.arguments(values)
            _, products = hessian_vector(self.derivatives, args, nums, batch, seed, width)
            for i in nums:
                lanes = np.asarray(products[i]).reshape(width, *np.shape(values[i]))
                out[i][start:stop] = lanes[: stop - start]


def _by_width(run: Callable[[int], None], count: int) -> None:
    """``run(width)`` for batches of WIDTH directions (at most ``count``); again one
    at a time where Enzyme refuses to batch (it batches recursion wrongly)."""
    try:
        run(min(WIDTH, count))
    except RecursionBatchRefused:
        run(1)


def _lanes(
    values: Sequence[Any],
    tangents: dict[int, Any],
    positions: Iterable[int],
    start: int,
    stop: int,
    width: int,
) -> dict[int, Any]:
    """Per argument position, tangents ``start:stop`` (a leading axis) as ``width``
    lanes: zero past ``stop``, and zero where a position has no tangent; the one lane
    itself where ``width`` is 1."""
    batch: dict[int, Any] = {}
    for i in positions:
        lanes = np.zeros((width, *np.shape(values[i])), dtype=_dtype_of(values[i]))
        if i in tangents:
            lanes[: stop - start] = tangents[i][start:stop]
        batch[i] = lanes if width > 1 else lanes[0]
    return batch


def _dtype_of(value: Any) -> np.dtype:
    return value.dtype if isinstance(value, (np.ndarray, np.generic)) else np.dtype(np.float64)


def first_float_dtype(dtypes: Iterable[Any]) -> np.dtype:
    """The first floating-point dtype among dtypes, float64 if there is none: the
    dtype a bridge gives f's value and derivatives."""
    return next((np.dtype(d) for d in dtypes if np.dtype(d).kind == "f"), np.dtype(np.float64))


def _float_dtype(values: Sequence[Any]) -> np.dtype:
    return first_float_dtype(_dtype_of(v) for v in values if not isinstance(v, (int, bool)))


class SavedTape:
    """A split-mode tape kept between a bridge's forward and backward host calls:
    the SplitCall (``pull(seed)``) and the arguments its forward pass was given, so
    that a backward call can check that it has the very same ones."""

    __slots__ = ("__weakref__", "nbytes", "split", "values")

    def __init__(self, split: SplitCall, values: Sequence[Any]):
        self.split = split
        self.values = tuple(values)
        held = [*values, *getattr(split, "_call", ())]
        arrays = {id(a): a for a in held if isinstance(a, np.ndarray)}
        tape = getattr(split, "_tape", None)
        self.nbytes = sum(int(a.nbytes) for a in arrays.values()) + int(getattr(tape, "bytes", 0))

    def made_from(self, values: Sequence[Any]) -> bool:
        """Whether values are, bit for bit, the arguments this tape was made from."""
        return len(values) == len(self.values) and all(
            _same_bits(a, b) for a, b in zip(values, self.values, strict=True)
        )


def _same_bits(a: Any, b: Any) -> bool:
    x, y = np.asarray(a), np.asarray(b)
    if x.dtype != y.dtype or x.shape != y.shape:
        return False
    return bool(
        np.array_equal(
            np.ascontiguousarray(x).reshape(-1).view(np.uint8),
            np.ascontiguousarray(y).reshape(-1).view(np.uint8),
        )
    )


class TapeRegistry:
    """Split-mode tapes under integer handles, for a bridge whose forward and backward
    passes can only pass arrays between them (JAX: the handle is an int32 residual).

    ``put`` stores a tape under a fresh handle (never 0, never one in use; 0 means "not
    stored"); ``take`` removes and returns it (None if it is not there: evicted, taken
    before, or never stored): a tape serves one backward host call and is freed after
    it. Bounded: at most ``max_count`` tapes and ``max_bytes`` bytes (tape, arguments
    and shadows), the least recently stored evicted (and freed) first; ``max_count=0``
    disables it (the bridge then recomputes). Thread-safe."""

    def __init__(self, max_count: int = 64, max_bytes: int = 256 << 20):
        self._lock = threading.Lock()
        self._entries: OrderedDict[int, SavedTape] = OrderedDict()
        self._bytes = 0
        # A random start: handles of another process (or registry) are unlikely to
        # name a tape here, and a tape is only used for arguments it was made from.
        self._next = secrets.randbelow(1 << 30) + 1
        self.max_count = 0
        self.max_bytes = 0
        self.limit(max_count, max_bytes)

    def limit(self, max_count: int | None = None, max_bytes: int | None = None) -> None:
        """Set the bounds (None: keep it); tapes over them are evicted now."""
        for n in (max_count, max_bytes):
            if n is not None and (not isinstance(n, int) or n < 0):
                raise ValueError(f"tape registry bounds are ints >= 0; got {n!r}")
        with self._lock:
            if max_count is not None:
                self.max_count = max_count
            if max_bytes is not None:
                self.max_bytes = max_bytes
            evicted = self._evict()
        del evicted  # freed here, outside the lock

    @property
    def enabled(self) -> bool:
        return self.max_count > 0 and self.max_bytes > 0

    @property
    def nbytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, saved: SavedTape) -> int:
        """Store saved; its handle, or 0 if it is not stored (disabled, too big)."""
        with self._lock:
            if self.max_count <= 0 or saved.nbytes > self.max_bytes:
                return 0
            handle = self._fresh()
            self._entries[handle] = saved
            self._bytes += saved.nbytes
            evicted = self._evict()
        del evicted
        return handle

    def take(self, handle: int) -> SavedTape | None:
        with self._lock:
            saved = self._entries.pop(handle, None)
            if saved is not None:
                self._bytes -= saved.nbytes
            return saved

    def clear(self) -> None:
        with self._lock:
            entries, self._entries, self._bytes = self._entries, OrderedDict(), 0
        del entries

    def _fresh(self) -> int:
        while True:
            handle = self._next
            self._next = handle % (2**31 - 1) + 1  # 1 .. 2**31 - 1: an int32
            if handle not in self._entries:
                return handle

    def _evict(self) -> list[SavedTape]:
        evicted = []
        while self._entries and (
            len(self._entries) > self.max_count or self._bytes > self.max_bytes
        ):
            _, saved = self._entries.popitem(last=False)
            self._bytes -= saved.nbytes
            evicted.append(saved)
        return evicted

    def __repr__(self) -> str:
        return (
            f"<enzyme_py tape registry: {len(self)} tapes, {self.nbytes} bytes (at most "
            f"{self.max_count} tapes, {self.max_bytes} bytes)>"
        )


# The process's registry, used by the JAX bridge (ez.jax.tapes).
TAPES = TapeRegistry()
