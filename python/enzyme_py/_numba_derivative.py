"""Derivatives of Numba dispatchers: one engine derivative per Numba signature.

Each specialisation is an ordinary ``Derivative`` of the frontend's wrapper, whose
hidden parameters (array shapes, the errors buffer) enzyme_py fills in; this class
picks the specialisation from the ``sig=`` given, else from the types of the
arguments of each call (the dispatcher's only signature, if it has one, is
built at once, and serves the calls whose arguments have its types).
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np

from enzyme_py._activities import check_activities
from enzyme_py._derivative import Derivative, Options
from enzyme_py.core import ActivityError, EnzymeError, Mode
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
        options: Options,
        sig: Any = None,
    ):
        self.dispatcher = dispatcher
        self.mode = mode
        self.activities = activities
        self.options = options
        self._sig = sig
        self.name = dispatcher.py_func.__name__
        self._n_params = len(inspect.signature(dispatcher.py_func).parameters)
        self._by_types: dict[tuple[Any, ...], Derivative] = {}
        # Calls pick their specialisation by a cheap key of the arguments' kinds.
        self._by_kinds: dict[tuple[Any, ...], Derivative] = {}
        self._single: Derivative | None = None
        signature = _signature_of(dispatcher, sig)
        if signature is not None and sig is not None:
            self._single = self.specialize(signature)  # every call uses it
        elif signature is not None:
            # The dispatcher's only signature so far: ready before the first call
            # (higher order, njit), but calls of other types get their own.
            self.specialize(signature)
        elif len(activities) not in (self._n_params, self._n_params + 1):
            n = self._n_params
            raise ActivityError(
                f"'{self.name}' has {n} parameters, so autodiff needs {n} activities "
                f"(one more if it returns a value); got {len(activities)}"
            )

    def specialize(self, signature: tuple[Any, ...]) -> Derivative:
        """The derivative for Numba argument types ``signature`` (compiled once)."""
        found = self._by_types.get(signature)
        if found is None:
            wrapper = numba_frontend.specialize(self.dispatcher, signature).wrapper
            params, ret = check_activities(wrapper, self.mode, self.activities)
            try:
                found = Derivative(wrapper, self.mode, params, ret, self.options)
            except EnzymeError:
                # Numba's fully optimised code can be easier to analyse (types that
                # only show after its optimisation); slower derivatives, but some.
                spec = numba_frontend.specialize(self.dispatcher, signature, numba_optimized=True)
                found = Derivative(spec.wrapper, self.mode, params, ret, self.options)
            self._by_types[signature] = found
        return found

    def for_arguments(self, args: tuple[Any, ...]) -> Derivative:
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
            found = self._by_kinds[kinds] = self.specialize(self._types_of(args))
        return found

    def _types_of(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """Numba types of the primal arguments (shadows and seed skipped)."""
        types = []
        pos = 0
        for act in self.activities[: self._n_params]:
            if pos >= len(args):
                raise TypeError(
                    f"the {self.mode.name.lower()} derivative of '{self.name}' got only "
                    f"{len(args)} arguments"
                )
            types.append(self.dispatcher.typeof_pyval(args[pos]))
            pos += 2 if act.shadow else 1
        return tuple(types)

    def __call__(self, *args: Any) -> Any:
        single = self._single
        if single is not None:
            return single(*args)
        return self.for_arguments(args)(*args)

    def only(self) -> Derivative:
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
