"""Reverse mode over a reverse derivative that returns adjoints by value.

``ez.autodiff(df, ez.Reverse, ...)`` of ``df = ez.autodiff(f, ez.Reverse, ...)`` where
``df`` returns the adjoints of Active scalars (a struct: Enzyme v0.0.289 cannot take
an Active struct return) is computed by forward over reverse instead, with the same
result: for scalar-valued f with gradient g and Hessian H, the reverse derivative of
``df`` seeded with cotangents c (one per adjoint it returns, and the shadows' seeds for
the gradients it adds into arrays) is ``seed * H c``, and H is symmetric, so one
forward-mode call of ``df`` with tangents c gives it.

Activities of ``df``'s parameters: a parameter that was Const in ``df`` stays Const;
one that was Active is Const or Active; an array that was Duplicated is Const or
Duplicated, and so is its shadow (the shadow's shadow carries the cotangent of the
gradient added into it, and is left as it is: the shadow's own adjoint); the seed is
Const or Active. The return (the adjoints, with the primal first if ``df``'s return is
Active) is Const, Active or ActiveOnly; its seed is a float for one value, a sequence
of floats otherwise. The call returns ``(df's result or None, *adjoints of the Active
parameters)``, as every reverse derivative.

>>> import enzyme_py as ez
>>> m = ez.c("double cube(double x) { return x * x * x; }")
>>> df = ez.autodiff(m.cube, ez.Reverse, ez.Active, ez.ActiveOnly)   # 3 x^2
>>> df(2.0, 1.0)
(None, 12.0)
>>> ddf = ez.autodiff(df, ez.Reverse, ez.Active, ez.Const, ez.ActiveOnly)
>>> ddf(2.0, 1.0, 1.0)                                                # 6 x
(None, 12.0)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from enzyme_py._derivative import Derivative, Options
from enzyme_py.core import (
    Active,
    ActiveOnly,
    Activity,
    ActivityError,
    Const,
    Dual,
    Duplicated,
    DuplicatedOnly,
    Forward,
)

__all__ = ["ReverseOverReverse", "returns_adjoints"]

_DUP = (Duplicated, DuplicatedOnly)


def _inner_activities(inner: Any) -> tuple[list[Activity], Activity | None] | None:
    """The activities of the visible parameters of inner's function and its return's;
    None where that cannot be told before a call (a Numba derivative whose
    activities leave out parameters with defaults, or may: one per parameter)."""
    if isinstance(inner, Derivative):
        acts = [
            a
            for p, a in zip(inner.function.params, inner.activities, strict=True)
            if p.hidden is None
        ]
        return acts, inner.return_activity
    n = inner._n_params  # a NumbaDerivative: its activities as given
    if len(inner.activities) != n + 1:
        return None
    return list(inner.activities[:n]), inner.activities[n]


def returns_adjoints(inner: Any) -> bool:
    """Whether reverse derivative ``inner`` returns adjoints (or its primal) by value:
    the derivatives this module differentiates (the others go to Enzyme)."""
    found = _inner_activities(inner)
    if found is None:
        return False
    acts, ret = found
    return ret is Active or any(a is Active for a in acts)


class ReverseOverReverse:
    """See the module's docstring."""

    helper_result = True
    order = 2  # not differentiated again: third derivatives

    def __enzyme_autodiff__(self, mode: Any, *activities: Any, **options: Any) -> Any:
        raise ActivityError(
            f"{self!r} is a second derivative computed by forward over reverse, not "
            "differentiated again: for a third derivative, differentiate "
            "ez.autodiff(df, ez.Forward, ...) (forward over reverse) instead"
        )

    def __init__(
        self, inner: Any, activities: Sequence[Any], options: Options, autodiff: Callable[..., Any]
    ):
        if options.width != 1 or options.runtime_activity or options.strong_zero:
            raise ActivityError(
                "reverse over a reverse derivative that returns adjoints takes no width=, "
                "runtime_activity= or strong_zero="
            )
        fn = getattr(inner, "function", None)
        if fn is not None and fn.origin is not None and fn.origin[0] == "derivative":
            raise ActivityError(
                f"{inner!r} is already a second derivative: third derivatives in reverse "
                "mode are not supported; differentiate it in ez.Forward mode"
            )
        self.inner, self._autodiff = inner, autodiff
        found = _inner_activities(inner)
        assert found is not None  # autodiff checked returns_adjoints(inner)
        acts, ret = found
        if ret not in (Active, ActiveOnly):
            raise ActivityError(
                f"reverse over reverse of {inner!r}: its function must be scalar-valued "
                "with an Active or ActiveOnly return (the second derivative is seed * H c)"
            )
        self.inner_acts, self.inner_ret = acts, ret
        # df's visible parameters: ("value", i), ("shadow", i), then ("seed", -1).
        self.slots: list[tuple[str, int]] = []
        for i, a in enumerate(acts):
            self.slots.append(("value", i))
            if a.shadow:
                self.slots.append(("shadow", i))
        self.slots.append(("seed", -1))
        self.fields: list[Any] = (["primal"] if ret is Active else []) + [
            i for i, a in enumerate(acts) if a is Active
        ]
        expected = len(self.slots) + (1 if self.fields else 0)
        if len(activities) != expected:
            raise ActivityError(
                f"{inner!r} has {len(self.slots)} parameters"
                + (" and returns its adjoints" if self.fields else " and returns nothing")
                + f", so autodiff needs {expected} activities; got {len(activities)}"
            )
        self.acts = list(activities[: len(self.slots)])
        self.ret = activities[len(self.slots)] if self.fields else None
        for (kind, i), act in zip(self.slots, self.acts, strict=True):
            allowed: tuple[Activity, ...] = (Const,)
            if (kind == "value" and acts[i] is Active) or kind == "seed":
                allowed = (Const, Active)
            elif kind in ("value", "shadow") and acts[i].shadow:
                allowed = (Const, *_DUP)
            if act not in allowed:
                what = "the seed" if kind == "seed" else f"{kind} of parameter {i}"
                raise ActivityError(
                    f"{what} of {inner!r} is {act!r} in reverse over reverse; it takes "
                    + " or ".join(a.name for a in allowed)
                    + (
                        " (it was Const in the first derivative: make it Active or Duplicated "
                        "there to differentiate it)"
                        if kind == "value" and acts[i] is Const
                        else ""
                    )
                )
        if self.ret not in (None, Const, Active, ActiveOnly):
            raise ActivityError(
                f"the adjoints {inner!r} returns take Const, Active or ActiveOnly; got {self.ret!r}"
            )

    def __repr__(self) -> str:
        acts = ", ".join(a.name for a in (*self.acts, *([self.ret] if self.ret else [])))
        return f"<enzyme_py Reverse({acts}) derivative of {self.inner!r} (forward over reverse)>"

    def __call__(self, *call: Any) -> Any:
        values: list[Any] = []
        outer: dict[int, Any] = {}  # slot -> the outer shadow
        pos = 0
        for k, act in enumerate(self.acts):
            if pos + (2 if act.shadow else 1) > len(call):
                raise TypeError(f"{self!r} got too few arguments")
            values.append(call[pos])
            if act.shadow:
                outer[k] = call[pos + 1]
            pos += 2 if act.shadow else 1
        seeded = self.ret in (Active, ActiveOnly)
        if len(call) - pos != (1 if seeded else 0):
            raise TypeError(f"{self!r}: wrong number of arguments (the seed comes last)")
        cts = [0.0] * len(self.fields)
        if seeded:
            seed = call[pos]
            cts = [
                float(c) for c in (seed if isinstance(seed, (tuple, list, np.ndarray)) else [seed])
            ]
            if len(cts) != len(self.fields):
                raise TypeError(
                    f"{self!r}: the seed has one value per adjoint ({len(self.fields)})"
                )
        c_primal = cts[0] if self.inner_ret is Active else 0.0
        ct_of: dict[int, Any] = {
            i: c for i, c in zip(self.fields, cts, strict=True) if isinstance(i, int)
        }
        for k, (kind, i) in enumerate(self.slots):
            if kind == "shadow":
                ct_of[i] = outer[k] if k in outer else np.zeros_like(values[k])
        inner = self.inner
        if not isinstance(inner, Derivative):
            inner = inner.for_arguments(tuple(values))
        fwd_acts: list[Activity] = []
        fwd_call: list[Any] = []
        collected: dict[int, Any] = {}
        for k, (kind, i) in enumerate(self.slots):
            v = values[k]
            fwd_call.append(v)
            if kind == "value" and self.inner_acts[i] is Active:
                fwd_acts.append(Dual)
                fwd_call.append(float(ct_of[i]))
            elif kind == "value" and self.inner_acts[i].shadow:
                fwd_acts.append(Dual)
                fwd_call.append(np.array(ct_of[i], dtype=v.dtype))
            elif kind == "shadow":
                fwd_acts.append(Dual)
                collected[i] = np.zeros_like(v)
                fwd_call.append(collected[i])
            else:
                fwd_acts.append(Const)
        fwd = self._autodiff(inner, Forward, *fwd_acts, *([Dual] if self.fields else []))
        result = fwd(*fwd_call)
        primal: Any = None
        tangent_of: dict[Any, float] = {}
        if self.fields:
            prim, tan = (np.atleast_1d(np.asarray(r, dtype=np.float64)) for r in result)
            tangent_of = dict(zip(self.fields, tan.tolist(), strict=True))
            got = prim.tolist()
            primal = tuple(got) if self.inner_ret is Active else (None, *got)
        g = None
        if c_primal or any(
            a is Active
            for (kind, _), a in zip(self.slots, self.acts, strict=True)
            if kind == "seed"
        ):
            g = self._gradient(inner, values)
        adjoints: list[Any] = []
        for k, ((kind, i), act) in enumerate(zip(self.slots, self.acts, strict=True)):
            if kind == "value" and act is Active:
                adjoints.append(tangent_of[i] + (c_primal * g[i] if g is not None else 0.0))
            elif kind == "value" and act.shadow:
                outer[k] += collected[i] + (c_primal * g[i] if g is not None else 0)
            elif kind == "seed" and act is Active:
                assert g is not None
                adjoints.append(sum(float(np.sum(np.asarray(ct_of[i]) * g[i])) for i in ct_of))
        return (primal if self.ret is Active else None, *adjoints)

    def _gradient(self, inner: Derivative, values: Sequence[Any]) -> dict[int, Any]:
        """The gradient of f (seed 1) with respect to its Active and Duplicated
        parameters, by one call of the reverse derivative on copies."""
        call: list[Any] = []
        shadows: dict[int, Any] = {}
        for k, (kind, i) in enumerate(self.slots):
            v = values[k]
            if kind == "shadow":
                shadows[i] = np.zeros_like(v)
                call.append(shadows[i])
            elif kind == "seed":
                call.append(1.0)
            else:
                call.append(v.copy() if isinstance(v, np.ndarray) else v)
        _, *adjoints = inner(*call)
        found = dict(shadows)
        active = iter(adjoints)
        for i, a in enumerate(self.inner_acts):
            if a is Active:
                found[i] = float(next(active))
        return found
