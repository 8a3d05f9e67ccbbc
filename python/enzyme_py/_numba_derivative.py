"""Derivatives of Numba dispatchers: one engine derivative per Numba signature.

Each specialisation is an ordinary ``Derivative`` of the frontend's wrapper, whose
hidden parameters (array shapes, the errors buffer) enzyme_py fills in; this class
picks the specialisation from the ``sig=`` given, else from the types of the
arguments of each call (the dispatcher's only signature, if it has one, is
built at once, and serves the calls whose arguments have its types).
"""

from __future__ import annotations

import contextlib
import inspect
from typing import Any

import numpy as np

from enzyme_py import _api
from enzyme_py.core import Active, Activity, ActivityError, EnzymeError, Mode
from enzyme_py.frontends import numba as numba_frontend


def _signature_of(dispatcher: Any, sig: Any) -> tuple[Any, ...] | None:
    """The Numba argument types asked for by ``sig``, or the dispatcher's only one."""
    if sig is None:
        return tuple(dispatcher.signatures[0]) if len(dispatcher.signatures) == 1 else None
    from numba.core import sigutils

    args, _ = sigutils.normalize_signature(sig)
    return tuple(args)


class NumbaDerivative:
    """The derivative of a Numba dispatcher, specialised per argument types."""

    def __init__(
        self,
        dispatcher: Any,
        mode: Mode,
        activities: tuple[Any, ...],
        options: _api._Options,
        sig: Any = None,
    ):
        self.dispatcher = dispatcher
        self.mode = mode
        self.activities = activities
        self.options = options
        self._sig = sig
        self.name = dispatcher.py_func.__name__
        names = self._names = list(inspect.signature(dispatcher.py_func).parameters)
        self._n_params = len(names)
        for i, act in enumerate(activities):
            if not isinstance(act, Activity):
                what = f"parameter {i} ('{names[i]}')" if i < len(names) else "the return value"
                raise ActivityError(
                    f"the activity of {what} of '{self.name}' is {act!r}, not an enzyme_py "
                    "activity (ez.Const, ez.Active, ez.Duplicated, ez.Dual, ...)"
                )
        self._by_types: dict[tuple[Any, ...], _api.Derivative] = {}
        # Calls pick their specialisation by a cheap key of the arguments' kinds.
        self._by_kinds: dict[tuple[Any, ...], _api.Derivative] = {}
        self._single: _api.Derivative | None = None
        signature = _signature_of(dispatcher, sig)
        if signature is not None and sig is not None:
            self._single = self.specialize(signature)  # every call uses it
            return
        if len(activities) not in (self._n_params, self._n_params + 1):
            n = self._n_params
            raise ActivityError(
                f"'{self.name}' has {n} parameters, so autodiff needs {n} activities "
                f"(one more if it returns a value); got {len(activities)}"
            )
        if signature is not None:
            # The dispatcher's only signature so far (from its history: g(1, 2), one
            # Fortran-order call, a failed derivative call): made ready before the
            # first call (higher order, njit) if it can be, but no reason to refuse
            # the derivative, since calls specialise from their own types.
            # A call with these types raises the error again.
            with contextlib.suppress(ActivityError, EnzymeError, TypeError, ValueError):
                self.specialize(signature)

    def specialize(self, signature: tuple[Any, ...]) -> _api.Derivative:
        """The derivative for Numba argument types ``signature`` (compiled once)."""
        found = self._by_types.get(signature)
        if found is None:
            from enzyme_py.rules import with_rules

            spec = numba_frontend.specialize(self.dispatcher, signature)
            wrapper = with_rules(spec.wrapper)
            params, ret = _api._check_activities(wrapper, self.mode, self.activities)
            try:
                found = _api.Derivative(wrapper, self.mode, params, ret, self.options)
            except EnzymeError:
                # Numba's fully optimised code can be easier to analyse (types that
                # only show after its optimisation); slower derivatives, but some.
                spec = numba_frontend.specialize(self.dispatcher, signature, numba_optimized=True)
                wrapper = with_rules(spec.wrapper)
                found = _api.Derivative(wrapper, self.mode, params, ret, self.options)
            self._by_types[signature] = found
        return found

    def for_arguments(self, args: tuple[Any, ...]) -> _api.Derivative:
        """The derivative for the types of these call arguments."""
        if self._single is not None:
            return self._single
        kinds = tuple(
            (a.dtype.num, a.ndim, a.flags.c_contiguous, a.flags.f_contiguous, a.flags.writeable)
            if isinstance(a, np.ndarray)
            else type(a)
            for a in args
        )
        found = self._by_kinds.get(kinds)
        if found is None:
            from numba.core.errors import TypingError

            types = self._types_of(args)
            try:
                found = self._by_kinds[kinds] = self.specialize(types)
            except TypingError as exc:
                listed = ", ".join(f"'{n}': {t}" for n, t in zip(self._names, types, strict=False))
                first = str(exc).strip().splitlines()[-1] if str(exc).strip() else ""
                raise TypeError(
                    f"'{self.name}' does not compile for the types of these arguments "
                    f"(parameters {listed}): pass arguments of the types it is written "
                    f"for (Numba: {first[:300]})"
                ) from None
        return found

    def _types_of(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """Numba types of the primal arguments (shadows and seed skipped)."""
        types = []
        pos = 0
        for i, act in enumerate(self.activities[: self._n_params]):
            if pos >= len(args):
                raise TypeError(
                    f"the {self.mode.name.lower()} derivative of '{self.name}' got only "
                    f"{len(args)} arguments"
                )
            types.append(self._type_of(i, act, args[pos]))
            pos += 2 if act.shadow else 1
        return tuple(types)

    def _type_of(self, i: int, act: Activity, value: Any) -> Any:
        """The Numba type of argument ``value`` of parameter i, or a TypeError /
        ValueError naming the parameter (not Numba's TypingError without it)."""
        where = f"parameter {i} ('{self._names[i]}') of '{self.name}'"
        if value is None or isinstance(value, (str, bytes, complex)):
            raise TypeError(
                f"{where} got {type(value).__name__}; pass a real number or a NumPy array"
            )
        if act is Active and isinstance(value, np.ndarray) and value.ndim > 0:
            raise TypeError(
                f"{where} is Active, a float scalar; got an array of shape {value.shape} "
                "(an array parameter is Duplicated in Reverse mode)"
            )
        if isinstance(value, np.ndarray) and not value.dtype.isnative:
            raise ValueError(
                f"{where} has byte order {value.dtype.str}, which Numba cannot compile "
                "for; pass it in native byte order (x.astype(x.dtype.newbyteorder('=')))"
            )
        if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**64:
            digits = len(str(abs(value)))
            raise ValueError(
                f"{where} got an integer of {digits} digits, which no 64-bit number holds"
            )
        try:
            return self.dispatcher.typeof_pyval(value)
        except Exception as exc:  # Numba's typing error, without the parameter's name
            raise TypeError(f"{where}: Numba cannot type {type(value).__name__} ({exc})") from None

    def __call__(self, *args: Any) -> Any:
        single = self._single
        if single is not None:
            return single(*args)
        return self.for_arguments(args)(*args)

    def only(self) -> _api.Derivative:
        """The single specialisation (for higher order and inspection)."""
        if len(self._by_types) != 1:
            raise ActivityError(
                f"the derivative of '{self.name}' has {len(self._by_types)} specialisations; "
                "give autodiff a sig= (or call it once) to pick one"
            )
        return next(iter(self._by_types.values()))

    def as_function(self) -> Any:
        return self.only().as_function()

    def __reduce__(self) -> tuple[Any, ...]:
        # Numba dispatchers pickle themselves; the derivative is rebuilt from them.
        return (
            NumbaDerivative,
            (self.dispatcher, self.mode, self.activities, self.options, self._sig),
        )

    def njit(self) -> Any:
        """The single specialisation as an ``@numba.njit`` function (see Derivative.njit)."""
        return self.only().njit()

    def inspect_llvm(self, optimized: bool = False) -> str:
        """The IR of the derivative of the single specialisation."""
        return self.only().inspect_llvm(optimized)

    def __repr__(self) -> str:
        acts = ", ".join(a.name for a in self.activities)
        return f"<enzyme_py derivative of Numba function '{self.name}' {self.mode.name}({acts})>"
