"""JAX-named helpers built on ``autodiff``: ``grad`` and ``value_and_grad``.

``jvp``, ``vjp``, ``jacobian`` and ``hessian`` keep their JAX names and signatures
and are not implemented yet; they raise NotImplementedError.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from enzyme_py._api import Derivative, _resolve, autodiff
from enzyme_py.core import Active, ActiveOnly, Activity, ActivityError, Const, Duplicated, Reverse

__all__ = ["grad", "hessian", "jacobian", "jvp", "value_and_grad", "vjp"]


def _argnums_tuple(argnums: int | tuple[int, ...], n: int, name: str) -> tuple[int, ...]:
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    for a in nums:
        if not isinstance(a, int) or not -n <= a < n:
            raise ValueError(
                f"argnums {argnums!r} is out of range for '{name}' with {n} parameters"
            )
    return tuple(a % n for a in nums)


def _reverse_of(
    f: Any, argnums: int | tuple[int, ...], ret: Activity
) -> tuple[Derivative, tuple[int, ...]]:
    fn = _resolve(f)
    nums = _argnums_tuple(argnums, len(fn.params), fn.display_name)
    acts: list[Activity] = []
    for i, p in enumerate(fn.params):
        if i not in nums:
            acts.append(Const)
        elif p.kind == "float":
            acts.append(Active)
        elif p.kind == "pointer":
            acts.append(Duplicated)
        else:
            raise ActivityError(
                f"argnums selects {p.describe(i)} of '{fn.display_name}', an integer: "
                "integer arguments cannot be differentiated"
            )
    if fn.ret is None or fn.ret.kind != "float":
        raise ActivityError(f"grad needs '{fn.display_name}' to return a float scalar")
    return autodiff(fn, Reverse, *acts, ret), nums


def _gradient_call(df: Derivative, nums: tuple[int, ...], args: tuple[Any, ...]) -> tuple[Any, Any]:
    call: list[Any] = []
    shadows: dict[int, np.ndarray] = {}
    for i, (a, act) in enumerate(zip(args, df.activities, strict=True)):
        call.append(a)
        if act is Duplicated:
            shadows[i] = np.zeros_like(a)
            call.append(shadows[i])
    primal, *adjoints = df(*call, 1.0)
    it = iter(adjoints)
    grads = {i: (shadows[i] if i in shadows else next(it)) for i in sorted(nums)}
    return primal, tuple(grads[i] for i in nums)


def grad(f: Any, argnums: int | tuple[int, ...] = 0) -> Callable[..., Any]:
    """The gradient of scalar-valued ``f`` with respect to the arguments in ``argnums``.

    Float scalars are differentiated as Active, arrays as Duplicated (a zeroed shadow
    is allocated per call), everything else is Const. Returns one gradient for an
    int ``argnums``, a tuple for a tuple.
    """
    df, nums = _reverse_of(f, argnums, ActiveOnly)

    def gradient(*args: Any) -> Any:
        _, grads = _gradient_call(df, nums, args)
        return grads[0] if isinstance(argnums, int) else grads

    return gradient


def value_and_grad(f: Any, argnums: int | tuple[int, ...] = 0) -> Callable[..., Any]:
    """Like ``grad``, returning ``(f(*args), gradient)``."""
    df, nums = _reverse_of(f, argnums, Active)

    def value_and_gradient(*args: Any) -> Any:
        value, grads = _gradient_call(df, nums, args)
        return value, (grads[0] if isinstance(argnums, int) else grads)

    return value_and_gradient


def _not_yet(name: str) -> NotImplementedError:
    return NotImplementedError(f"ez.{name} is not implemented yet; use ez.autodiff directly")


def jvp(f: Any, primals: Any, tangents: Any) -> Any:
    raise _not_yet("jvp")


def vjp(f: Any, *primals: Any) -> Any:
    raise _not_yet("vjp")


def jacobian(f: Any, argnums: int | tuple[int, ...] = 0) -> Any:
    raise _not_yet("jacobian")


def hessian(f: Any) -> Any:
    raise _not_yet("hessian")
