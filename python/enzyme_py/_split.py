"""Split reverse mode (``ez.ReverseSplit``): Enzyme's augmented forward pass, which
runs the function and keeps what its reverse pass needs (the tape), and the reverse
pass, run later from the tape, as often as wanted while the tape lives.

Both halves are ordinary ``Derivative`` builds (``Options.split`` 1 and 2) of the same
augmentation. The tape's memory (Enzyme's tape, and the temporaries and shadows of
temporaries the forward pass allocated) is a native ``SplitTape`` owned by the
``Tape`` object: freed when that is collected. The reverse pass reads it without
freeing any of it, so it can run again.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from enzyme_py import _arguments, _state
from enzyme_py._activities import check_activities
from enzyme_py._derivative import Derivative, Options, resolve_function
from enzyme_py._numba_derivative import NumbaDerivative
from enzyme_py.core import Activity, ActivityError, Reverse
from enzyme_py.frontends import numba as numba_frontend

__all__ = ["SplitDerivative", "Tape", "argument_key"]


class Tape:
    """What the forward half of a split derivative keeps for its reverse half.

    Holds the tape's memory and the arrays the forward pass was given (its tape may
    point into them); both live until this object is collected. ``bytes``: the size
    of Enzyme's tape."""

    __slots__ = ("_address", "_arrays", "_memory", "_owner", "_reverse")

    def __init__(
        self, owner: SplitDerivative, memory: Any, address: int, arrays: list[Any], rev: Any
    ):
        self._owner = owner
        self._memory = memory
        self._address = address
        self._arrays = arrays
        self._reverse = rev  # the reverse half built with the same types as the forward

    @property
    def bytes(self) -> int:
        return int(self._memory.bytes)

    def __repr__(self) -> str:
        return f"<enzyme_py tape of '{self._owner.name}', {self.bytes} bytes>"


class _Halves:
    """The two halves for one set of argument types, with defaults to insert."""

    def __init__(
        self, forward: Derivative, reverse: Derivative, defaults: tuple[Any, ...], at: int
    ):
        self.forward, self.reverse, self.defaults, self.at = forward, reverse, defaults, at

    def args(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        if not self.defaults:
            return args
        return (*args[: self.at], *self.defaults, *args[self.at :])


class SplitDerivative:
    """``autodiff(f, ReverseSplit, *activities)``: reverse mode in two halves.

    ``forward(*args)`` takes the arguments of the Reverse derivative without the seed
    (``x`` for Const/Active, ``x, dx`` for Duplicated) and returns ``(primal, tape)``
    (primal ``None`` for an ActiveOnly return or a function returning nothing).
    ``reverse(tape, *args, seed)`` takes the same arguments again, the very same arrays
    and shadows, unchanged since ``forward`` (the tape may point into them), then the
    seed if the return is Active/ActiveOnly; it adds the adjoints into the shadows and
    returns the adjoints of the Active parameters (a tuple, possibly empty). It may be
    called several times per tape (each call adds into the shadows again: zero them
    between calls for the same cotangents). The tape is freed when it is collected.

    Refused (ActivityError): width > 1, and Numba functions that return arrays or
    tuples (use ``ez.Reverse``).

    >>> import math, numba, enzyme_py as ez
    >>> @numba.njit
    ... def f(x, y):
    ...     return x * math.sin(y)
    >>> split = ez.autodiff(f, ez.ReverseSplit, ez.Active, ez.Active, ez.Active)
    >>> value, tape = split.forward(2.0, 0.0)        # (f(x, y), the tape)
    >>> value
    0.0
    >>> split.reverse(tape, 2.0, 0.0, 1.0)           # (df/dx, df/dy) = (sin y, x cos y)
    (0.0, 2.0)
    >>> split.reverse(tape, 2.0, 0.0, 3.0)           # the same tape, seed 3
    (0.0, 6.0)
    """

    def __init__(self, f: Any, activities: tuple[Any, ...], options: Options, sig: Any = None):
        if options.width != 1:
            raise ActivityError("split mode (ez.ReverseSplit) takes width=1 only")
        if options.first_call is not None:
            raise ActivityError("split mode (ez.ReverseSplit) does not take check=True")
        self.activities = activities
        self._fwd_options = replace(options, split=1)
        self._rev_options = replace(options, split=2)
        self._numba: tuple[Any, Any] | None = None
        self._halves: _Halves | None = None
        self._by_kinds: dict[tuple[Any, ...], _Halves] = {}
        if numba_frontend.is_dispatcher(f):
            self.name = f.py_func.__name__
            self._numba = (
                NumbaDerivative(f, Reverse, activities, self._fwd_options, sig),
                NumbaDerivative(f, Reverse, activities, self._rev_options, sig),
            )
        else:
            if sig is not None:
                raise TypeError("sig= applies to Numba dispatchers only")
            fn = resolve_function(f)
            self.name = fn.display_name
            params, ret = check_activities(fn, Reverse, activities)
            self._halves = _Halves(
                Derivative(fn, Reverse, params, ret, self._fwd_options),
                Derivative(fn, Reverse, params, ret, self._rev_options),
                (),
                0,
            )

    def _halves_for(self, args: tuple[Any, ...]) -> _Halves:
        if self._halves is not None:
            return self._halves
        key = tuple(argument_key(a) for a in args)
        found = self._by_kinds.get(key)
        if found is None:
            found = self._by_kinds[key] = self._numba_halves(args)
        return found

    def _numba_halves(self, args: tuple[Any, ...]) -> _Halves:
        assert self._numba is not None
        fwd, rev = self._numba
        bound = fwd._bound_for(args)
        if bound.results is not None:
            raise ActivityError(
                f"'{self.name}' returns an array or a tuple: split mode (ez.ReverseSplit) "
                "does not take it yet; use ez.Reverse, or write the result into an output "
                "parameter"
            )
        rev_bound = rev._bound_for(args)
        return _Halves(bound.derivative, rev_bound.derivative, bound.defaults, bound.insert_at)

    def forward(self, *args: Any) -> tuple[Any, Tape]:
        """``(primal, tape)``: the augmented forward pass on ``args``."""
        halves = self._halves_for(args)
        full = halves.args(args)
        fwd, rev = halves.forward, halves.reverse
        if fwd.may_overlap and _arguments.overlapping(
            [a for a in full if isinstance(a, np.ndarray)]
        ):
            fwd, rev = fwd.alias_safe_twin(), rev.alias_safe_twin()
        memory = _state.native.SplitTape()
        address, primal, arrays = fwd.call_split(full, memory)
        return primal, Tape(self, memory, address, list(arrays), _HalfPair(halves, rev))

    def reverse(self, tape: Tape, *args: Any) -> tuple[Any, ...]:
        """The adjoints of the Active parameters; the shadows' adjoints added in."""
        if not isinstance(tape, Tape) or tape._owner is not self:
            raise TypeError(
                f"the reverse half of the split derivative of '{self.name}' takes a tape "
                f"from its own forward(...) first; got {type(tape).__name__}"
            )
        pair: _HalfPair = tape._reverse
        full = pair.halves.args(args)
        result: tuple[Any, ...] = pair.reverse.call_split(full, tape._memory, tape._address)
        return result

    def __repr__(self) -> str:
        acts = ", ".join(a.name if isinstance(a, Activity) else repr(a) for a in self.activities)
        return f"<enzyme_py split derivative of '{self.name}' ReverseSplit({acts})>"


class _HalfPair:
    __slots__ = ("halves", "reverse")

    def __init__(self, halves: _Halves, reverse: Derivative):
        self.halves, self.reverse = halves, reverse


def argument_key(a: Any) -> Any:
    """What an argument's split derivative (and its refusal) is specialised by."""
    if isinstance(a, np.ndarray):
        return (a.dtype.str, a.ndim, a.flags.c_contiguous, a.flags.f_contiguous, a.flags.writeable)
    return type(a)
