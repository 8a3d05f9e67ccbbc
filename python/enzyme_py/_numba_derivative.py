"""Derivatives of Numba dispatchers: one engine derivative per Numba signature.

The user calls with Python-level arguments (``x, dx, n, seed``); each array is
passed to the engine's wrapper as its data pointer followed by its shape, and a
small ``errors`` array receives Numba's status, raised again here as the
exception Numba reported.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np

from enzyme_py import _api
from enzyme_py.core import Active, ActiveOnly, Activity, ActivityError, Const, Mode, Reverse
from enzyme_py.frontends import numba as numba_frontend
from enzyme_py.frontends.ir import IRFunction


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
        self.name = dispatcher.py_func.__name__
        self._by_types: dict[tuple[Any, ...], tuple[numba_frontend.NumbaSignature, Any]] = {}
        self._n_params = len(inspect.signature(dispatcher.py_func).parameters)
        signature = _signature_of(dispatcher, sig)
        if signature is not None:
            self._specialize(signature)
        else:
            # Activities can be checked against the parameter count already.
            n = self._n_params
            if len(activities) not in (n, n + 1):
                raise ActivityError(
                    f"'{self.name}' has {n} parameters, so autodiff needs {n} activities "
                    f"(one more if it returns a value); got {len(activities)}"
                )

    def _specialize(self, signature: tuple[Any, ...]) -> tuple[Any, Any]:
        found = self._by_types.get(signature)
        if found is not None:
            return found
        spec = numba_frontend.specialize(self.dispatcher, signature)
        user_fn = IRFunction(
            spec.wrapper.module,
            spec.wrapper.name,
            tuple(p.param for p in spec.params),
            spec.ret,
            self.name,
        )
        params, ret = _api._check_activities(user_fn, self.mode, self.activities)
        wrapper_acts: list[Activity] = []
        for p, act in zip(spec.params, params, strict=True):
            wrapper_acts.append(act)
            wrapper_acts.extend([Const] * p.ndim)
        wrapper_acts.append(Const)  # errors
        inner = _api.Derivative(spec.wrapper, self.mode, tuple(wrapper_acts), ret, self.options)
        self._by_types[signature] = (spec, inner)
        return spec, inner

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
        if len(self._by_types) == 1:
            spec, inner = next(iter(self._by_types.values()))
        else:
            spec, inner = self._specialize(self._types_of(args))
        expected = _arity(spec, self.activities, self.mode)
        if len(args) != expected:
            raise TypeError(
                f"the {self.mode.name.lower()} derivative of '{self.name}' takes {expected} "
                f"arguments; got {len(args)}"
            )
        call: list[Any] = []
        pos = 0
        for p, act in zip(spec.params, self.activities, strict=False):
            value = args[pos]
            call.append(value)
            pos += 1
            if act.shadow:
                call.append(args[pos])
                pos += 1
            if p.is_array:
                call.extend(_shape_of(value, p, self.name))
        errors = np.zeros(2, dtype=np.int64)
        call.append(errors)
        call.extend(args[pos:])  # the seed of an Active return
        result = inner(*call)
        numba_frontend.raise_numba_error(errors, self.name)
        return result

    def inspect_llvm(self, optimized: bool = False) -> str:
        """The IR of the derivative of the only (or first) specialisation."""
        if not self._by_types:
            raise RuntimeError(f"'{self.name}' has not been specialised yet: call it first")
        _, inner = next(iter(self._by_types.values()))
        return str(inner.inspect_llvm(optimized))

    def __repr__(self) -> str:
        acts = ", ".join(a.name for a in self.activities)
        return f"<enzyme_py derivative of Numba function '{self.name}' {self.mode.name}({acts})>"


def _shape_of(value: Any, p: numba_frontend.NumbaParam, name: str) -> tuple[int, ...]:
    where = f"parameter '{p.param.name}' of '{name}'"
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{where} is an array; got {type(value).__name__}")
    if value.ndim != p.ndim:
        raise ValueError(f"{where} needs a {p.ndim}-D array; got {value.ndim}-D")
    return tuple(int(s) for s in value.shape)


def _arity(spec: numba_frontend.NumbaSignature, activities: tuple[Any, ...], mode: Mode) -> int:
    n = len(spec.params)
    count = sum(2 if a.shadow else 1 for a in activities[:n])
    seeded = len(activities) > n and activities[n] in (Active, ActiveOnly)
    if mode is Reverse and spec.ret is not None and seeded:
        count += 1
    return count
