"""vjp's pullbacks as the linear maps they are, differentiated again.

A pullback ``vjp_fn = ez.vjp(f, *primals)[1]`` is linear in its cotangent: ``c -> J^T c``,
J being the Jacobian of f at the primals (for ``vjp(grad(f))``, the Hessian). So its
derivatives need no new derivative of f, and they are exact:

- ``jvp(vjp_fn, (c,), (dc,))`` is ``(vjp_fn(c), vjp_fn(dc))``;
- ``vjp(vjp_fn, c)`` is ``(vjp_fn(c), pullback)`` where ``pullback(u)`` is ``(J u,)``:
  ``ez.jvp(f, primals, u)``'s tangent at the primals of the first vjp, in a 1-tuple as
  every pullback's result is one entry per primal (here one: the cotangent). That
  pullback is linear too, and differentiable again the same way (its transpose is
  ``vjp_fn``);
- ``jacobian(vjp_fn)(c)`` (``jacfwd``, ``jacrev``) is ``J^T``: per entry of vjp_fn's
  result, an array shaped ``entry.shape + c.shape``, from ``vjp_fn`` of each unit
  cotangent (None stays None).

``grad``, ``value_and_grad``, ``hessian``, ``hvp`` and ``ez.autodiff`` of a pullback are
refused (``NotComposable``): it returns a tuple, and ez.grad (like ``jax.grad``) needs a
scalar-valued function; its second derivatives are zero.

>>> import numba, numpy as np, enzyme_py as ez
>>> @numba.njit
... def f(x, k):
...     return k * np.sum(x ** 2)
>>> x = np.array([1.0, 2.0])
>>> value, vjp_fn = ez.vjp(f, x, 3.0)
>>> ez.jvp(vjp_fn, (1.0,), (2.0,))          # (J^T c, J^T dc); J = (2 k x, sum x^2)
((array([ 6., 12.]), 5.0), (array([12., 24.]), 10.0))
>>> ez.jacobian(vjp_fn)(1.0)                # J^T, entry by entry
(array([ 6., 12.]), 5.0)
>>> _, pull = ez.vjp(vjp_fn, 1.0)
>>> pull((np.array([1.0, 0.0]), 1.0))       # (J u,) = (2 k x . u_x + sum x^2 u_k,)
(11.0,)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import numpy as np

from enzyme_py._transforms import Argnums, NotComposable

__all__ = ["Pullback", "refuse_pullback"]


def _structure(value: Any) -> str:
    if isinstance(value, tuple):
        return "a tuple"
    if isinstance(value, np.ndarray):
        return f"an array {value.shape}"
    return type(value).__name__


class Pullback:
    """vjp's ``vjp_fn``: a linear function of the cotangent, with its transpose (the
    function it is the pullback of, differentiated forward at the same point) when
    that is known. Differentiated again by ``jvp``, ``vjp`` and the Jacobians."""

    def __init__(
        self,
        fn: Callable[[Any], tuple[Any, ...]],
        of: str,
        transpose: Callable[[Any], Any] | None = None,
    ):
        self._fn, self._transpose, self.__name__ = fn, transpose, f"vjp_fn of {of}"

    def __call__(self, cotangent: Any) -> tuple[Any, ...]:
        return self._fn(cotangent)

    def __repr__(self) -> str:
        return f"<enzyme_py {self.__name__}>"

    def __enzyme_autodiff__(self, mode: Any, *activities: Any, **options: Any) -> Any:
        refuse_pullback("ez.autodiff", self)

    # --- its derivatives: it is linear ------------------------------------------
    def _one_argument(self, values: Sequence[Any], what: str, who: str) -> Any:
        if len(values) != 1:
            raise TypeError(
                f"{who}: {self.__name__} takes one argument (the cotangent), so {what} "
                f"has one entry; got {len(values)}"
            )
        return values[0]

    def jvp(self, primals: Sequence[Any], tangents: Sequence[Any]) -> tuple[Any, Any]:
        """``(vjp_fn(c), vjp_fn(dc))``: it is linear in c."""
        who = f"jvp({self.__name__})"
        c = self._one_argument(primals, "primals", who)
        dc = self._one_argument(tangents, "tangents", who)
        value = self(c)
        return value, self(_zeros_like(c) if dc is None else dc)

    def vjp(self, primals: Sequence[Any]) -> tuple[Any, Pullback]:
        """``(vjp_fn(c), u -> (J u,))``: the pullback of a linear map is its transpose."""
        who = f"vjp({self.__name__})"
        c = self._one_argument(primals, "the primals", who)
        transpose = self._transpose
        if transpose is None:
            raise NotComposable(
                f"{who}: its transpose (the forward derivative of the function it is the "
                "pullback of) is not known here; differentiate that function with ez.jvp "
                "at the same primals instead"
            )
        value = self(c)

        def pullback(u: Any) -> tuple[Any, ...]:
            return (transpose(u),)

        def back(v: Any) -> Any:  # the new pullback's transpose: this one again
            if not isinstance(v, (tuple, list)) or len(v) != 1:
                raise TypeError(
                    f"the tangent of {who}'s pullback is a 1-tuple (the tangent of the "
                    f"cotangent); got {_structure(v)}"
                )
            return self(v[0])

        return value, Pullback(pullback, who, back)

    def jacobian(self, argnums: Argnums, output: int | None, how: str) -> Callable[[Any], Any]:
        """``J^T`` from ``vjp_fn`` of each unit cotangent."""
        who = f"{how}({self.__name__})"
        if output is not None:
            raise NotComposable(
                f"{who}: output= is for functions that write their result into an argument; "
                f"{self.__name__} returns its result (leave output= out)"
            )
        nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
        if nums != (0,):
            raise NotComposable(
                f"{who}: {self.__name__} takes one argument, the cotangent, so argnums is 0; "
                f"got {argnums!r}"
            )
        single = isinstance(argnums, int)

        def jacobian(c: Any) -> Any:
            if isinstance(c, (tuple, list)):
                raise NotComposable(
                    f"{who}: the cotangent is a tuple; the Jacobian is taken with respect to "
                    "a float or a float array. Use ez.jvp or ez.vjp of the pullback for "
                    "tuples of cotangents"
                )
            shape = np.shape(c)
            if isinstance(c, np.ndarray):
                if c.dtype.kind != "f":
                    raise TypeError(f"{who}: the cotangent must be a float array; got {c.dtype}")
                units = []
                for k in range(c.size):
                    e = np.zeros(c.size, dtype=c.dtype)
                    e[k] = 1.0
                    units.append(self(e.reshape(shape)))
                blocks = _stacked(units, shape)
            else:
                blocks = self(1.0)
            return blocks if single else (blocks,)

        jacobian.__name__ = who
        return jacobian


def _zeros_like(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, (tuple, list)):
        return tuple(_zeros_like(v) for v in value)
    if isinstance(value, np.ndarray):
        return np.zeros_like(value)
    return 0.0


def _stacked(columns: list[Any], shape: tuple[int, ...]) -> Any:
    """The results for each unit cotangent stacked into ``entry.shape + shape``,
    leaf by leaf (None stays None)."""
    first = columns[0]
    if first is None:
        return None
    if isinstance(first, tuple):
        return tuple(_stacked([col[i] for col in columns], shape) for i in range(len(first)))
    leaves = [np.asarray(col) for col in columns]
    stacked = np.stack(leaves, axis=-1)
    return stacked.reshape(leaves[0].shape + shape)


def refuse_pullback(outer: str, pullback: Pullback) -> NoReturn:
    raise NotComposable(
        f"{outer} of {pullback.__name__}: it returns a tuple (one entry per primal), and "
        f"{outer} needs a scalar-valued function; it is linear in its cotangent, so its "
        "second derivatives are zero. Its derivatives are ez.jvp(vjp_fn, (c,), (dc,)), "
        "ez.vjp(vjp_fn, c) and ez.jacobian(vjp_fn)"
    )
