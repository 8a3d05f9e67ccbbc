"""``has_aux=True``, as JAX's: ``f`` returns a pair ``(value, aux)``, a value to
differentiate and anything else it computed (a float, integer or boolean scalar or
array: losses with their metrics or residuals).

``grad`` / ``value_and_grad`` (``AuxGradient``): one reverse pass of Numba's tuple
result does both, the value's seed 1 and the aux's 0, so the gradient is the value's
alone and aux comes back with it. The Jacobians and ``hessian`` (``WithAux``)
differentiate ``f(...)[0]`` as a function of its own and take aux from one more
evaluation of ``f``; so do they for ``grad(f, has_aux=True)`` (JAX's
``jacfwd(grad(f, has_aux=True), has_aux=True)``: the gradient of the value
differentiated again, and aux). ``jvp`` and ``vjp`` (in ``helpers``) use the tuple
result.

>>> import numba, numpy as np, enzyme_py as ez
>>> @numba.njit
... def loss(w, x):
...     r = x * w - 1.0
...     return np.sum(r * r), r
>>> g, residuals = ez.grad(loss, has_aux=True)(2.0, np.array([1.0, 2.0]))
>>> g, residuals
(14.0, array([1., 3.]))
>>> (value, residuals), g = ez.value_and_grad(loss, has_aux=True)(2.0, np.array([1.0, 2.0]))
>>> value
10.0
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

from enzyme_py import _transforms as tf
from enzyme_py._compose import Gradient, is_result, refuse
from enzyme_py._transforms import Argnums
from enzyme_py.core import Active, Duplicated, Reverse
from enzyme_py.frontends import numba as numba_frontend
from enzyme_py.frontends._numba_contract import first_part

__all__ = ["AuxGradient", "WithAux", "checked_has_aux", "pair_types", "with_aux"]


class _AuxResult:
    """A helper's result for ``has_aux=True``: not differentiated again."""

    helper_result = True
    has_aux = True
    __name__: str

    def __repr__(self) -> str:
        return f"<enzyme_py {self.__name__}>"

    def __enzyme_autodiff__(self, mode: Any, *activities: Any, **options: Any) -> Any:
        refuse("ez.autodiff", self)


class AuxGradient(_AuxResult):
    """What ``grad`` / ``value_and_grad`` return with ``has_aux=True``: ``(gradient,
    aux)``, or ``((value, aux), gradient)``."""

    def __init__(self, f: Any, argnums: Argnums, with_value: bool):
        self.f, self.argnums, self.with_value = f, argnums, with_value
        self._derivatives = tf.Derivatives(f)
        outer = "value_and_grad" if with_value else "grad"
        self.__name__ = f"{outer}({tf.name_of(f)}, has_aux=True)"

    def __reduce__(self) -> tuple[Any, ...]:
        return (AuxGradient, (self.f, self.argnums, self.with_value))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        args = tf.bind(self.f, args, kwargs, self.__name__)
        nums = tf.positions(self.argnums, len(args))
        for i in nums:
            tf.check_differentiable(args[i], i, self.__name__)
        aux_seed = self._aux_seed(args)
        acts = tf.activities_for(args, nums, Reverse, self._derivatives.may_write(args))
        df = self._derivatives.get(Reverse, acts, Duplicated)
        shadows = tf.zero_shadows(args, acts, threads=getattr(df, "threads", 1))
        (value, aux), *adjoints = df(*tf.interleave(args, acts, shadows), (1.0, aux_seed))
        active = iter(adjoints)
        found = {i: next(active) for i, act in enumerate(acts) if act is Active}
        grads = tuple(shadows[i] if i in shadows else found[i] for i in nums)
        gradient = grads[0] if tf.single(self.argnums) else grads
        return ((value, aux), gradient) if self.with_value else (gradient, aux)

    def _aux_seed(self, args: Sequence[Any]) -> Any:
        """The aux part's zero seed: 0.0 for a scalar; for an array, zeros shaped like
        it, from an evaluation of f on copies of the arguments (one more call)."""
        from numba.core import types

        value_type, aux_type = pair_types(self.f, args, self.__name__)
        if not isinstance(value_type, types.Float):
            raise TypeError(
                f"{self.__name__}: with has_aux=True, {tf.name_of(self.f)} must return a "
                f"pair (value, aux) whose value is a float; its value is {value_type}"
            )
        if not isinstance(aux_type, types.Array):
            return 0.0 if isinstance(aux_type, types.Float) else None
        if not isinstance(aux_type.dtype, types.Float):
            return None  # no derivative: no seed
        return np.zeros_like(self.f(*tf.fresh(args))[1])


def checked_has_aux(value: Any, who: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{who}: has_aux is True or False; got {value!r}")
    return bool(value)


def pair_types(f: Any, args: Sequence[Any], who: str) -> tuple[Any, Any]:
    """The Numba types of the pair ``(value, aux)`` that f returns for these arguments;
    TypeError where f is not a Numba function returning a pair."""
    if not numba_frontend.is_dispatcher(f):
        raise TypeError(
            f"{who}: has_aux=True needs f to return a pair (value, aux), which only Numba "
            f"functions return; {tf.name_of(f)} is not one"
        )
    from numba.core import types

    signature = numba_frontend.resolve_signature(f, tuple(f.typeof_pyval(a) for a in args))
    found = numba_frontend.return_type(f, signature)
    if not (isinstance(found, types.BaseTuple) and len(found) == 2):
        raise TypeError(
            f"{who}: with has_aux=True, {tf.name_of(f)} must return a pair (value, aux); "
            f"it returns {found}"
        )
    return found.types[0], found.types[1]


class WithAux(_AuxResult):
    """What ``jacobian`` / ``jacfwd`` / ``jacrev`` / ``hessian`` return with
    ``has_aux=True``: ``(the derivative of f's value, aux)``, as JAX's. The value is
    ``f(...)[0]`` as a function of its own (``first_part``: f inlined), differentiated
    by ``helper``; aux comes from one more evaluation of f, on copies of the
    arguments."""

    def __init__(self, f: Any, helper: Callable[[Any], Any], how: str):
        self.f, self.helper, self.how = f, helper, how
        self.__name__ = how if "(" in how else f"{how}({tf.name_of(f)}, has_aux=True)"
        self._inner: Any = None

    def __reduce__(self) -> tuple[Any, ...]:
        return (WithAux, (self.f, self.helper, self.how))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        args = tf.bind(self.f, args, kwargs, self.__name__)
        pair_types(self.f, args, self.__name__)
        if self._inner is None:
            self._inner = self.helper(first_part(self.f, len(args)))
        derivative = self._inner(*args)
        return derivative, self.f(*tf.fresh(args))[1]


def with_aux(f: Any, helper: Callable[[Any], Any], how: str, output: int | None) -> WithAux:
    """``how(f, has_aux=True)``: f returns ``(value, aux)``; the derivative of its value
    (by ``helper``) and aux, as JAX's."""
    if output is not None:
        raise TypeError(
            f"{how}: has_aux=True is for f returning (value, aux), output= for f writing "
            "its result into an argument; give one of them"
        )
    if isinstance(f, AuxGradient) and not f.with_value:
        # JAX's jacfwd(grad(f, has_aux=True), has_aux=True): the derivative of the
        # value's gradient (second derivatives; hessian: third), and aux.
        of_gradient = partial(_of_gradient, helper, f.argnums)
        return WithAux(f.f, of_gradient, f"{how}({f.__name__}, has_aux=True)")
    if is_result(f):
        refuse(f"{how}(..., has_aux=True)", f)
    return WithAux(f, helper, how)


def _of_gradient(helper: Callable[[Any], Any], argnums: Argnums, value: Any) -> Any:
    """``helper(grad(value, argnums))``, for ``value`` the value part of f."""
    return helper(Gradient(value, argnums, False))
