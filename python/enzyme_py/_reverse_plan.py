"""A helper's reverse call, worked out once per kind of arguments (``ReversePlan``).

``_transforms.reverse_call`` finds, for each call, the activities of the arguments, the
derivative, which shadows it zeroes itself and the specialisation a Numba derivative
runs: about 6 us of Python per call of ``ez.grad`` on small arrays, against 2 us for
the derivative itself. All of that depends only on what ``argument_kind`` sees of each
argument (an array's dtype, rank, layout and writability; a scalar's type), which picks
the specialisation anyway. So the first call with arguments of some kinds records it
here, and later calls with arguments of the same kinds only make the shadows and call.
``ez.grad`` and ``ez.value_and_grad`` go one step further (``ReversePlan.native_call``):
where the plan only passes its flat arguments on to a derivative's fast caller, their
later calls with arguments of those kinds are made in C++ (``src/reverse_call.h``).

Only arrays (``np.ndarray`` itself) and plain scalars get a plan: for anything else (a
tuple, a Numba function passed as an argument, an array subclass) what picks the
specialisation is more than its type, and every call takes the full path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from enzyme_py._arguments import laid_out_like, overlaps_itself
from enzyme_py._shadow_pool import LARGE_SHADOW_BYTES, uninitialised

__all__ = ["NativeCall", "ReversePlan", "plan_key"]

# Scalars whose type is all that picks a specialisation (argument_kind: the type).
_PLAIN_SCALARS = frozenset({float, int, bool, np.float64, np.float32, np.int64, np.int32, np.bool_})


def plan_key(args: Sequence[Any], seed: Any) -> tuple[Any, ...] | None:
    """``argument_kind`` of each argument and of the seed, or None where some argument
    is neither an ``np.ndarray`` nor a plain scalar."""
    kinds: list[Any] = []
    for a in (*args, seed):
        kind = type(a)
        if kind is np.ndarray:
            flags = a.flags
            layout = (flags.c_contiguous, flags.f_contiguous, flags.writeable)
            kinds.append((a.dtype.num, a.ndim, *layout))
        elif kind in _PLAIN_SCALARS:
            kinds.append(kind)
        else:
            return None
    return tuple(kinds)


@dataclass(frozen=True)
class ReversePlan:
    """What ``reverse_call`` found for arguments of one kind: the derivative's call
    (``run``: the flat arguments, shadows after their arrays, then the seed), the
    arguments that take a shadow (``shadowed``), which of those the derivative zeroes
    itself (``zeroed``: they may be uninitialised), how a shadow it does not zero is
    made (``zeros``) and the arguments whose adjoints it returns (``actives``)."""

    run: Callable[[tuple[Any, ...]], Any]
    shadowed: tuple[int, ...]
    zeroed: frozenset[int]
    zeros: Callable[[np.ndarray], np.ndarray]
    actives: tuple[int, ...]
    # The shadowed arguments that are not C-contiguous (the same at every call of a
    # plan: plan_key has each array's layout flags).
    views: frozenset[int] = frozenset()
    # The derivative ``run`` calls with the flat arguments unchanged (a Derivative),
    # or None: what ``native_call`` calls.
    direct: Any = None

    def shadows(self, args: Sequence[Any]) -> dict[int, np.ndarray]:
        """Fresh shadows: a large one the derivative zeroes from kept memory
        (``_shadow_pool``); for an array that is not C-contiguous, zeros laid out as
        it is (a derivative indexes a shadow as its array: zeros of another layout were
        copied into such a stand-in and back; strided Rosenbrock 10^6's gradient 3.3 ->
        2.3 ms), unless its elements share memory (the call then passes a contiguous
        copy of it, ``_arguments.apart``); any other zeros."""
        out = {}
        for i in self.shadowed:
            a = args[i]
            if i in self.zeroed and a.nbytes >= LARGE_SHADOW_BYTES:
                out[i] = uninitialised(a.shape, a.dtype)
            elif i in self.views and not overlaps_itself(a):
                out[i] = laid_out_like(a)
            else:
                out[i] = self.zeros(a)
        return out

    def __call__(
        self, args: Sequence[Any], nums: tuple[int, ...], seed: Any
    ) -> tuple[Any, tuple[Any, ...]]:
        """As ``reverse_call``: the primal (or None) and the gradient with respect to
        each of ``nums``."""
        shadows = self.shadows(args)
        flat: list[Any] = []
        for i, a in enumerate(args):
            flat.append(a)
            if i in shadows:
                flat.append(shadows[i])
        flat.append(seed)
        primal, *adjoints = self.run(tuple(flat))
        grads = dict(zip(self.actives, adjoints, strict=True))
        views = self.views
        return primal, tuple(
            (_compact(shadows[i]) if i in views else shadows[i]) if i in shadows else grads[i]
            for i in nums
        )

    def native_call(
        self, key: tuple[Any, ...], nums: tuple[int, ...], single: bool, with_value: bool
    ) -> NativeCall | None:
        """This plan's call in C++ (``native.ReverseCall``) for arguments of the kinds
        ``key`` (``plan_key``'s, the seed a float), the gradients with respect to
        ``nums`` returned as ``ez.grad`` does (``single``: the one alone; ``with_value``:
        after the value), or None where it has none: shadows laid out as views, a call
        that does more than pass the flat arguments on, no fast caller. It takes small
        shadows only (below LARGE_SHADOW_BYTES: a larger one comes from the pool or is
        zeroed on threads, here) and raises ArgumentsRejected for any call it does not
        cover."""
        from enzyme_py import _state

        fast = None if self.direct is None else self.direct.fast_caller()
        if fast is None or self.views or key[-1] is not float:
            return None
        picks = []
        for i in nums:
            if i in self.shadowed:
                picks.append((True, i))
            elif i in self.actives:
                picks.append((False, self.actives.index(i)))
            else:
                return None
        native = _state.native.ReverseCall(
            caller=fast,
            kinds=list(key[:-1]),
            shadowed=[i in self.shadowed for i in range(len(key) - 1)],
            picks=picks,
            single=single,
            with_value=with_value,
            seed=1.0,
            shadow_bytes_below=LARGE_SHADOW_BYTES,
        )
        return NativeCall(native, self.direct)


@dataclass(frozen=True)
class NativeCall:
    """A plan's call in C++ (``ReversePlan.native_call``) and the derivative whose
    errors it raises."""

    call: Callable[..., Any]
    derivative: Any

    def miss(self, exc: Exception) -> None:
        """After ``call`` raised ``exc``: raises the function's own error or a
        MemoryError where the derivative ran and failed; returns for anything else (a
        call for the Python path: ArgumentsRejected for other kinds of arguments, a
        large shadow, arrays that overlap), which that path then makes or names."""
        self.derivative.raise_failure(exc)


def _compact(gradient: np.ndarray) -> np.ndarray:
    """The gradient in memory of its own size: a shadow laid out as a view with gaps
    (``ReversePlan.shadows``) is copied C-contiguous, as ``np.zeros_like`` would be."""
    flags = gradient.flags
    if flags.c_contiguous or flags.f_contiguous:
        return gradient
    return np.ascontiguousarray(gradient)
