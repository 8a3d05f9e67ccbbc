"""Second derivatives as blocks: ``hessian`` (names and conventions as in JAX), and
what a Jacobian of a gradient is (``jacfwd(grad(g, A), B)``: blocks of the Hessian;
``jacobian(value_and_grad(g))``: the gradient and those blocks), for scalar-valued
functions and for Numba functions returning an array (one Hessian per element of the
result). Each column is one forward-over-reverse call, columns in batches; f runs on
fresh copies of the arguments taken when the result was called.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

from enzyme_py import _python_functions as pf
from enzyme_py import _transforms as tf
from enzyme_py._aux import checked_has_aux, with_aux
from enzyme_py._batching import batched, batches, lanes, per_output, size_of, unit
from enzyme_py._compose import Gradient, as_gradient, hessian_of_gradient, is_result, refuse
from enzyme_py._third_order import Second
from enzyme_py._transforms import Argnums, NotComposable
from enzyme_py.core import Reverse

__all__ = ["Blocks", "ValueAndBlocks", "hessian"]


class ValueAndBlocks:
    """What ``jacobian(value_and_grad(g, A), B)`` returns, as JAX's: the pair
    ``(grad(g, B), jacobian(grad(g, A), B))`` (a tuple of gradients and a tuple of
    blocks where A or B is a tuple)."""

    helper_result = True
    order = 2

    def __init__(self, inner: Gradient, argnums: Argnums, how: str):
        self.inner, self.argnums, self.how = inner, argnums, how
        self.__name__ = f"{how}({inner.__name__})"
        self._value = Gradient(inner.f, argnums, False)
        self._gradient = Blocks(Gradient(inner.f, inner.argnums, False), argnums, how)

    def __reduce__(self) -> tuple[Any, ...]:
        return (ValueAndBlocks, (self.inner, self.argnums, self.how))

    def second_order(self) -> Second:
        raise NotComposable(
            f"{self.__name__} returns a pair (the gradient, the Hessian's blocks); "
            "differentiate ez.jacobian(ez.grad(f)) or ez.hessian(f) instead"
        )

    def __repr__(self) -> str:
        return f"<enzyme_py {self.__name__}, argnums={self.argnums!r}>"

    def __enzyme_autodiff__(self, mode: Any, *activities: Any, **options: Any) -> Any:
        self.second_order()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.inner.scalar_valued(tf.bind(self.inner.f, args, kwargs, self.__name__))
        return self._value(*args, **kwargs), self._gradient(*args, **kwargs)


class Blocks:
    """What ``jacfwd(grad(g, A), B)`` returns: blocks of ``hessian(g, A + B)``."""

    helper_result = True
    order = 2

    def __init__(self, inner: Gradient, argnums: Argnums, how: str):
        self.inner, self.argnums = inner, argnums
        self.__name__ = f"{how}({inner.__name__})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Blocks, (self.inner, self.argnums, self.__name__.split("(")[0]))

    def second_order(self) -> Second:
        g = self.inner
        return Second(g.f, g._derivatives, g.argnums, self.argnums, (), self.__name__)

    def __repr__(self) -> str:
        return f"<enzyme_py {self.__name__}, argnums={self.argnums!r}>"

    def __enzyme_autodiff__(self, mode: Any, *activities: Any, **options: Any) -> Any:
        refuse("ez.autodiff", self)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        g = self.inner.f
        args = tf.bind(g, args, kwargs, self.__name__)
        rows = tf.positions(self.inner.argnums, len(args))
        cols = tf.positions(self.argnums, len(args))
        union = tuple(sorted({*rows, *cols}))
        if self.inner.how is not None and tf.returns_arrays(g, args):
            # jacfwd(jacrev(f)) of f returning an array: d J / dx, as JAX's.
            h = _output_blocks(g, args, union, self.__name__)
        else:
            self.inner.scalar_valued(args)
            h = self._blocks(g, args, union)
        at = {i: k for k, i in enumerate(union)}
        pick = [[h[at[i]][at[m]] for m in cols] for i in rows]
        inner = [r[0] if tf.single(self.argnums) else tuple(r) for r in pick]
        return inner[0] if tf.single(self.inner.argnums) else tuple(inner)

    def _blocks(self, g: Any, args: Sequence[Any], union: tuple[int, ...]) -> Any:
        """The Hessian of scalar-valued g over ``union``, nested (union by union)."""
        if all(tf.is_float_array(args[i]) for i in union):
            return _Hessian(g, union)(*args)
        return self._columns(args, union)  # float scalars among them: column by column

    def _columns(self, args: Sequence[Any], union: tuple[int, ...]) -> list[list[Any]]:
        """The blocks of the Hessian over ``union`` (float arrays and scalars), one
        Hessian-vector product per column."""
        for i in union:
            if not (tf.is_float_array(args[i]) or tf.is_float_scalar(args[i])):
                raise TypeError(
                    f"{self.__name__}: argument {i} is {type(args[i]).__name__}; only float "
                    "scalars and float arrays can be differentiated"
                )
        derivatives = self.inner._derivatives
        cols: dict[int, list[dict[int, Any]]] = {}
        for m in union:
            cols[m] = []
            for e in range(size_of(args[m])):
                t = unit(args[m], 1, e, e + 1)
                _, hv = tf.hessian_vector(derivatives, tf.fresh(args), union, {m: t})
                cols[m].append(hv)
        blocks: list[list[Any]] = []
        for i in union:
            row = []
            for m in union:
                column = [np.asarray(hv[i], dtype=np.float64).reshape(-1) for hv in cols[m]]
                block = np.stack(column, axis=-1).reshape(np.shape(args[i]) + np.shape(args[m]))
                row.append(block if block.ndim else float(block))
            blocks.append(row)
        return blocks


def _output_blocks(f: Any, args: Sequence[Any], union: tuple[int, ...], who: str) -> Any:
    """Second derivatives of a Numba function returning a float array, over the
    arguments ``union``: nested blocks ``h[a][b]`` of shape ``out.shape + x_a.shape +
    x_b.shape`` (JAX's ``hessian`` of such f). Output k's Hessian is that of the scalar
    ``sum(f(x) * e_k)`` (``_numba_contract``), by forward over reverse mode."""

    def of_output(g: Any) -> Callable[..., Any]:
        # Made once: their derivatives are kept with them, for every output.
        hessian = _Hessian(g, union)
        columns = Blocks(Gradient(g, union, False), union, "jacfwd")
        if all(tf.is_float_array(args[i]) for i in union):
            return hessian
        return lambda *call: columns._columns(call, union)

    return per_output(f, args, who, of_output)


class _Hessian:
    """What ``hessian`` returns (picklable when f is)."""

    helper_result = True

    def __enzyme_autodiff__(self, mode: Any, *activities: Any, **options: Any) -> Any:
        refuse("ez.autodiff", self)

    order = 2

    def __init__(self, f: Any, argnums: Argnums):
        self.f, self.argnums = f, argnums
        self._derivatives = tf.Derivatives(f)
        self.__name__ = f"hessian({tf.name_of(f)})"
        self._by_columns: Blocks | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Hessian, (self.f, self.argnums))

    def second_order(self) -> Second:
        return Second(self.f, self._derivatives, self.argnums, self.argnums, (), self.__name__)

    def __repr__(self) -> str:
        return f"<enzyme_py {self.__name__}, argnums={self.argnums!r}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        args = tf.bind(self.f, args, kwargs, self.__name__)
        nums = tf.positions(self.argnums, len(args))
        if tf.returns_arrays(self.f, args):  # f: R^n -> R^m, as jax.hessian's
            h = _output_blocks(self.f, args, nums, self.__name__)
            return h[0][0] if tf.single(self.argnums) else tuple(tuple(r) for r in h)
        if not all(tf.is_float_array(args[i]) for i in nums):
            # Float scalars among them (as JAX takes them): one column at a time.
            if self._by_columns is None:
                self._by_columns = Blocks(Gradient(self.f, self.argnums, False), (), "hessian")
                self._by_columns.__name__ = self.__name__
            h = self._by_columns._columns(args, nums)
            return h[0][0] if tf.single(self.argnums) else tuple(tuple(r) for r in h)
        fn = tf.reverse_derivative(
            self._derivatives,
            args,
            tf.activities_for(args, nums, Reverse, self._derivatives.may_write(args)),
        ).function
        # Enzyme batches derivatives of recursion wrongly: one column at a time then.
        recursive = bool(fn.module.native.reaches_recursion(fn.name))
        blocks = {
            (i, m): np.empty((args[i].size, args[m].size), args[i].dtype)
            for i in nums
            for m in nums
        }

        for m in nums:  # the columns d/dx_m of every block (i, m)

            def run(batch: int, m: int = m) -> None:
                for start, stop in batches(args[m].size, batch):
                    width = stop - start
                    seeds = {m: unit(args[m], width, start, stop)}
                    _, hv = tf.hessian_vector(
                        self._derivatives, tf.fresh(args), nums, seeds, 1.0, width
                    )
                    for i in nums:
                        blocks[i, m][:, start:stop] = lanes(hv[i], width).T

            batched(run, recursive)
        shaped = {(i, m): b.reshape(*args[i].shape, *args[m].shape) for (i, m), b in blocks.items()}
        if tf.single(self.argnums):
            return shaped[nums[0], nums[0]]
        return tuple(tuple(shaped[i, m] for m in nums) for i in nums)


def hessian(f: Any, argnums: Argnums = 0, has_aux: bool = False) -> Callable[..., Any]:
    """The Hessian of scalar-valued ``f`` with respect to the float array (and float
    scalar) arguments in ``argnums``, by forward mode over reverse mode, columns in
    batches (one at a time where a float scalar is among them).

    An int ``argnums`` gives one block of shape ``x.shape + x.shape`` (a float for a
    float scalar); a tuple gives the nested blocks as JAX does: ``h[a][b]`` of shape
    ``x_a.shape + x_b.shape`` for the arguments ``argnums[a]`` and ``argnums[b]``.
    ``f`` runs on copies: the caller's arrays are left as given.

    A Numba ``f`` that returns a float array has, as in JAX, one Hessian per element of
    its result: shaped ``result.shape + x.shape + x.shape`` (blocks ``result.shape +
    x_a.shape + x_b.shape``; float scalar arguments allowed), each the Hessian of
    ``sum(f(x) * e_k)``. ``jacfwd(jacrev(f))`` and the other Jacobians of a Jacobian
    of such f give the same array. ``has_aux=True``: ``f`` returns ``(value, aux)``;
    the result is ``(Hessian of the value, aux)``, as JAX's.

    >>> import numba, numpy as np, enzyme_py as ez
    >>> @numba.njit
    ... def f(x, y):
    ...     return x[0] * x[0] * y[0] + x[1] * y[0] * y[0]
    >>> h = ez.hessian(f, argnums=(0, 1))(np.array([1.0, 2.0]), np.array([3.0]))
    >>> h[0][0], h[0][1], h[1][1]
    (array([[6., 0.],
           [0., 0.]]), array([[2.],
           [6.]]), array([[4.]]))
    >>> @numba.njit
    ... def g(t, a):
    ...     return a * t ** 4
    >>> ez.hessian(g, argnums=(0, 1))(2.0, 3.0)     # float scalars: floats, as JAX's
    ((144.0, 32.0), (32.0, 0.0))
    """
    lowered = pf.transform(hessian, f, argnums, has_aux=has_aux)
    if lowered is not None:  # a lambda, def or partial calling a function we differentiate
        return lowered
    if checked_has_aux(has_aux, "hessian"):
        return with_aux(f, partial(hessian, argnums=argnums), "hessian", None)
    g = as_gradient(f)
    if g is not None:  # hessian(grad(f, a)) for a float scalar a: third derivatives
        return hessian_of_gradient(g, argnums)
    if is_result(f):
        refuse("hessian", f)
    return _Hessian(f, argnums)
