"""``grad(f, has_aux=True)`` and ``value_and_grad(f, has_aux=True)``, as JAX's.

``f`` returns a pair ``(value, aux)``: a float scalar to differentiate and anything
else it computed (a float or integer scalar or array: losses with their metrics or
residuals). One reverse pass of Numba's tuple result does both: the value's seed is
1, the aux's 0, so the gradient is the value's alone and aux comes back with it.

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

from collections.abc import Sequence
from typing import Any

import numpy as np

from enzyme_py import _transforms as tf
from enzyme_py._transforms import Argnums
from enzyme_py.core import Active, Duplicated, Reverse
from enzyme_py.frontends import numba as numba_frontend

__all__ = ["AuxGradient"]


class AuxGradient:
    """What ``grad`` / ``value_and_grad`` return with ``has_aux=True``: ``(gradient,
    aux)``, or ``((value, aux), gradient)``. Not differentiated again."""

    helper_result = True
    has_aux = True

    def __init__(self, f: Any, argnums: Argnums, with_value: bool):
        self.f, self.argnums, self.with_value = f, argnums, with_value
        self._derivatives = tf.Derivatives(f)
        outer = "value_and_grad" if with_value else "grad"
        self.__name__ = f"{outer}({tf.name_of(f)}, has_aux=True)"

    def __reduce__(self) -> tuple[Any, ...]:
        return (AuxGradient, (self.f, self.argnums, self.with_value))

    def __repr__(self) -> str:
        return f"<enzyme_py {self.__name__}, argnums={self.argnums!r}>"

    def __enzyme_autodiff__(self, mode: Any, *activities: Any, **options: Any) -> Any:
        from enzyme_py._compose import refuse

        refuse("ez.autodiff", self)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        args = tf.bind(self.f, args, kwargs, self.__name__)
        nums = tf.positions(self.argnums, len(args))
        for i in nums:
            tf.check_differentiable(args[i], i, self.__name__)
        aux_seed = self._aux_seed(args)
        acts = tf.activities_for(args, nums, Reverse, self._derivatives.may_write(args))
        df = self._derivatives.get(Reverse, acts, Duplicated)
        shadows = tf.zero_shadows(args, acts)
        (value, aux), *adjoints = df(*tf.interleave(args, acts, shadows), (1.0, aux_seed))
        active = iter(adjoints)
        found = {i: next(active) for i, act in enumerate(acts) if act is Active}
        grads = tuple(shadows[i] if i in shadows else found[i] for i in nums)
        gradient = grads[0] if tf.single(self.argnums) else grads
        return ((value, aux), gradient) if self.with_value else (gradient, aux)

    def _aux_seed(self, args: Sequence[Any]) -> Any:
        """The aux part's zero seed: 0.0 for a scalar; for an array, zeros shaped like
        it, from an evaluation of f on copies of the arguments (one more call)."""
        if not numba_frontend.is_dispatcher(self.f):
            raise TypeError(
                f"{self.__name__}: has_aux=True needs f to return a pair (value, aux), "
                f"which only Numba functions return; {tf.name_of(self.f)} is not one"
            )
        from numba.core import types

        signature = numba_frontend.resolve_signature(
            self.f, tuple(self.f.typeof_pyval(a) for a in args)
        )
        found = numba_frontend.return_type(self.f, signature)
        if not (
            isinstance(found, types.BaseTuple)
            and len(found) == 2
            and isinstance(found.types[0], types.Float)
        ):
            raise TypeError(
                f"{self.__name__}: with has_aux=True, {tf.name_of(self.f)} must return a "
                f"pair (value, aux) whose value is a float; it returns {found}"
            )
        aux_type = found.types[1]
        if not isinstance(aux_type, types.Array):
            return 0.0 if isinstance(aux_type, types.Float) else None
        if not isinstance(aux_type.dtype, types.Float):
            return None  # no derivative: no seed
        return np.zeros_like(self.f(*tf.fresh(args))[1])
