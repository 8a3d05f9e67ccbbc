"""Jacobians by batched derivatives: ``jacobian``, ``jacfwd``, ``jacrev`` (names and
conventions as in JAX; ``hessian`` and the Jacobians of gradients are in
``_hessians``, ``hvp`` in ``_compose``).

Each batch of columns (or rows) runs ``f`` on fresh copies of the arguments taken when
the result was called: a function that overwrites an argument would otherwise give
the second batch the argument the first one overwrote. The caller's arrays are left
as they were.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

from enzyme_py import _python_functions as pf
from enzyme_py import _transforms as tf
from enzyme_py._aux import checked_has_aux, with_aux
from enzyme_py._batching import array_result, batched, batches, lanes, size_of, unit
from enzyme_py._compose import Gradient, Pullback, as_gradient, is_result, refuse, second_of
from enzyme_py._hessians import Blocks, ValueAndBlocks
from enzyme_py._third_order import of_second
from enzyme_py._transforms import Argnums
from enzyme_py.core import (
    Active,
    ActiveOnly,
    Activity,
    Const,
    Dual,
    DualOnly,
    DuplicatedOnly,
    Forward,
    Reverse,
)

__all__ = ["jacfwd", "jacobian", "jacrev"]


class _Jacobian:
    """What ``jacobian`` / ``jacfwd`` / ``jacrev`` return (picklable when f is)."""

    helper_result = True

    def __enzyme_autodiff__(self, mode: Any, *activities: Any, **options: Any) -> Any:
        refuse("ez.autodiff", self)

    def __init__(self, f: Any, argnums: Argnums, output: int | None, how: str):
        if output is not None and (
            isinstance(output, (bool, np.bool_)) or not isinstance(output, (int, np.integer))
        ):
            raise TypeError(f"output must be an argument position (an int); got {output!r}")
        self.f, self.argnums, self.output, self.how = f, argnums, output, how
        self._derivatives = tf.Derivatives(f)
        self.__name__ = f"{how}({tf.name_of(f)})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Jacobian, (self.f, self.argnums, self.output, self.how))

    def as_gradient(self) -> Gradient | None:
        """Without output=: the gradient it is for a scalar-valued f (checked per call),
        differentiated again as ez.grad's is."""
        if self.output is not None:
            return None
        return Gradient(self.f, self.argnums, False, self.how)

    def __repr__(self) -> str:
        return f"<enzyme_py {self.__name__}, argnums={self.argnums!r}, output={self.output!r}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        args = tf.bind(self.f, args, kwargs, self.__name__)
        nums = tf.positions(self.argnums, len(args))
        for i in nums:
            tf.check_differentiable(args[i], i, self.__name__)
        if self.output is None and tf.returns_arrays(self.f, args):
            blocks = self._array_result_blocks(args, nums)
        elif self.output is None:
            if self.how == "jacfwd":
                blocks = [self._forward_gradient(args, i) for i in nums]
            else:
                grads = tf.reverse_call(self._derivatives, tf.fresh(args), nums, ActiveOnly)[1]
                blocks = list(grads)
        else:
            j = self._check_output(args, nums)
            out = args[j]
            size = sum(size_of(args[i]) for i in nums)
            forward = self.how == "jacfwd" or (self.how == "jacobian" and size <= out.size)
            blocks = (
                self._forward_outputs(args, nums, j)
                if forward
                else self._reverse_outputs(args, nums, j)
            )
        return blocks[0] if tf.single(self.argnums) else tuple(blocks)

    def _array_result_blocks(self, args: Sequence[Any], nums: tuple[int, ...]) -> list[Any]:
        """d f(args) / d x_i of a function returning an array, shaped
        ``result.shape + x_i.shape``: columns by batched forward mode, or rows by
        batched reverse mode (jacrev; jacobian when x_i has more elements)."""
        out = array_result(self.f, args, self.__name__)
        writes = self._derivatives.may_write(args)
        blocks = []
        for i in nums:
            x = args[i]
            block = np.empty((out.size, size_of(x)), dtype=np.result_type(out.dtype, np.float32))
            reverse = self.how == "jacrev" or (self.how == "jacobian" and size_of(x) > out.size)
            acts = tf.activities_for(args, (i,), Reverse if reverse else Forward, writes)

            def columns(
                batch: int, i: int = i, x: Any = x, block: Any = block, acts: Any = acts
            ) -> None:
                for start, stop in batches(size_of(x), batch):
                    width = stop - start
                    call = tf.fresh(args)
                    tangents: dict[int, Any] = tf.zero_shadows(call, acts, width)
                    tangents[i] = unit(x, width, start, stop)
                    dy = self._derivatives.get(Forward, acts, DualOnly, width)(
                        *tf.interleave(call, acts, tangents)
                    )
                    block[:, start:stop] = lanes(dy, width).T

            def rows(batch: int, i: int = i, block: Any = block, acts: Any = acts) -> None:
                for start, stop in batches(out.size, batch):
                    width = stop - start
                    call = tf.fresh(args)
                    shadows = tf.zero_shadows(call, acts, width)
                    seeds = unit(out.astype(block.dtype), width, start, stop)
                    _, *adjoints = self._derivatives.get(Reverse, acts, DuplicatedOnly, width)(
                        *tf.interleave(call, acts, shadows), seeds
                    )
                    block[start:stop] = lanes(shadows[i] if i in shadows else adjoints[0], width)

            batched(rows if reverse else columns)
            blocks.append(block.reshape(*out.shape, *np.shape(x)))
        return blocks

    def _check_output(self, args: Sequence[Any], nums: tuple[int, ...]) -> int:
        (j,) = tf.positions(self.output, len(args)) if self.output is not None else (0,)
        out = args[j]
        if not tf.is_float_array(out):
            raise TypeError(
                f"{self.__name__}: output={j} names argument {j}, a "
                f"{type(out).__name__}; the output must be the float array f writes into"
            )
        for i in nums:
            x = args[i]
            if i == j or (isinstance(x, np.ndarray) and np.shares_memory(x, out)):
                # f runs once per batch of columns: each run would start from the last
                # one's result, and the input's tangent would be taken for the output's.
                what = f"are both argument {i}" if i == j else f"(arguments {i} and {j}) overlap"
                raise ValueError(
                    f"jacobian: the input (argnums) and the output {what}; f writes its "
                    "result into the output, which would change the input it is "
                    "differentiated at: pass the output as a separate array"
                )
        return j

    def _ret(self, args: Sequence[Any]) -> Activity | None:
        return None if tf.returns_nothing(self.f, args) else Const

    def _forward_gradient(self, args: Sequence[Any], i: int) -> Any:
        """The gradient of scalar-valued f with respect to argument i, by forward mode."""
        x = args[i]
        row = np.empty(size_of(x), dtype=x.dtype if isinstance(x, np.ndarray) else np.float64)
        acts = tf.activities_for(
            args, (i,), Forward, self._derivatives.may_write(args, combined=False)
        )

        def run(batch: int) -> None:
            for start, stop in batches(row.size, batch):
                width = stop - start
                call = tf.fresh(args)
                tangents: dict[int, Any] = tf.zero_shadows(call, acts, width)
                tangents[i] = unit(x, width, start, stop)
                df = self._derivatives.get(Forward, acts, Dual, width)
                _, dy = df(*tf.interleave(call, acts, tangents))
                row[start:stop] = np.asarray(dy, dtype=np.float64).reshape(-1)

        batched(run)
        return row.reshape(x.shape) if isinstance(x, np.ndarray) else float(row[0])

    def _forward_outputs(self, args: Sequence[Any], nums: tuple[int, ...], j: int) -> list[Any]:
        """Columns of d out / d x_i by batched forward mode, one argument at a time."""
        out, ret = args[j], self._ret(args)
        blocks = []
        for i in nums:
            x = args[i]
            block = np.empty((out.size, size_of(x)), dtype=out.dtype)
            acts = tf.activities_for(
                args, (i, j), Forward, self._derivatives.may_write(args, combined=False)
            )

            def run(
                batch: int, i: int = i, x: Any = x, block: np.ndarray = block, acts: Any = acts
            ) -> None:
                for start, stop in batches(size_of(x), batch):
                    width = stop - start
                    call = tf.fresh(args)
                    tangents: dict[int, Any] = tf.zero_shadows(call, acts, width)
                    tangents[i] = unit(x, width, start, stop)
                    self._derivatives.get(Forward, acts, ret, width)(
                        *tf.interleave(call, acts, tangents)
                    )
                    block[:, start:stop] = lanes(tangents[j], width).T

            batched(run)
            blocks.append(block.reshape(*out.shape, *np.shape(x)))
        return blocks

    def _reverse_outputs(self, args: Sequence[Any], nums: tuple[int, ...], j: int) -> list[Any]:
        """Rows of d out / d x_i for every i in nums by batched reverse mode."""
        out, ret = args[j], self._ret(args)
        acts = tf.activities_for(args, (*nums, j), Reverse, self._derivatives.may_write(args))
        rows = [np.empty((out.size, size_of(args[i])), dtype=out.dtype) for i in nums]

        def run(batch: int) -> None:
            for start, stop in batches(out.size, batch):
                width = stop - start
                call = tf.fresh(args)
                shadows = tf.zero_shadows(call, acts, width)
                shadows[j] = unit(out, width, start, stop)
                df = self._derivatives.get(Reverse, acts, ret, width)
                _, *adjoints = df(*tf.interleave(call, acts, shadows))
                # Adjoints of Active scalars come in parameter order.
                active = dict(
                    zip([k for k, a in enumerate(acts) if a is Active], adjoints, strict=True)
                )
                for k, i in enumerate(nums):
                    found = shadows[i] if i in shadows else active[i]
                    rows[k][start:stop] = lanes(found, width)

        batched(run)
        return [r.reshape(*out.shape, *np.shape(args[i])) for r, i in zip(rows, nums, strict=True)]


def jacobian(
    f: Any, argnums: Argnums = 0, output: int | None = None, has_aux: bool = False
) -> Callable[..., Any]:
    """The Jacobian of ``f`` with respect to the arguments in ``argnums``.

    With ``output=None``, ``f`` returns a float scalar and the Jacobian is its gradient
    (shaped like the argument, a float for a float scalar), by reverse mode. With
    ``output=j``, ``f`` writes its result into the float array argument j (f: R^n ->
    R^m written as ``f(x, out)``): the Jacobian with respect to an array ``x`` has shape
    ``out.shape + x.shape``, with respect to a float scalar ``out.shape``; computed by
    batched forward mode (columns) when the inputs have no more elements than the
    output, by batched reverse mode (rows) otherwise. A tuple ``argnums`` gives a
    tuple of Jacobians. ``f`` runs on copies: the caller's arrays are left as given.
    ``has_aux=True`` (as JAX's, for ``jacfwd`` and ``jacrev`` too): ``f`` returns
    ``(value, aux)``; the result is ``(Jacobian of the value, aux)``.

    >>> import numba, numpy as np, enzyme_py as ez
    >>> @numba.njit
    ... def two(r, theta, out):
    ...     out[0] = r * theta
    ...     out[1] = r + theta * theta
    >>> ez.jacobian(two, argnums=(0, 1), output=2)(2.0, 3.0, np.zeros(2))
    (array([3., 1.]), array([2., 6.]))
    """
    lowered = pf.transform(jacobian, f, argnums, output=output, has_aux=has_aux)
    if lowered is not None:  # a lambda, def or partial calling a function we differentiate
        return lowered
    if checked_has_aux(has_aux, "jacobian"):
        return with_aux(f, partial(jacobian, argnums=argnums), "jacobian", output)
    return _of_gradient(f, argnums, output, "jacobian") or _Jacobian(f, argnums, output, "jacobian")


def jacfwd(
    f: Any, argnums: Argnums = 0, output: int | None = None, has_aux: bool = False
) -> Callable[..., Any]:
    """``jacobian`` by forward mode always (columns in batches), as JAX's ``jacfwd``:
    for a scalar-valued ``f`` its gradient, for ``output=j`` shape ``out.shape +
    x.shape``.

    >>> import numba, numpy as np, enzyme_py as ez
    >>> @numba.njit
    ... def cube(x, out):
    ...     for i in range(x.shape[0]):
    ...         out[i] = x[i] ** 3
    >>> ez.jacfwd(cube, output=1)(np.array([1.0, 2.0]), np.zeros(2))
    array([[ 3.,  0.],
           [ 0., 12.]])
    """
    lowered = pf.transform(jacfwd, f, argnums, output=output, has_aux=has_aux)
    if lowered is not None:  # a lambda, def or partial calling a function we differentiate
        return lowered
    if checked_has_aux(has_aux, "jacfwd"):
        return with_aux(f, partial(jacfwd, argnums=argnums), "jacfwd", output)
    return _of_gradient(f, argnums, output, "jacfwd") or _Jacobian(f, argnums, output, "jacfwd")


def jacrev(
    f: Any, argnums: Argnums = 0, output: int | None = None, has_aux: bool = False
) -> Callable[..., Any]:
    """``jacobian`` by reverse mode always (rows in batches), as JAX's ``jacrev``.

    >>> import numba, numpy as np, enzyme_py as ez
    >>> @numba.njit
    ... def weighted(x, w):
    ...     s = 0.0
    ...     for i in range(x.shape[0]):
    ...         s += w[i] * x[i] * x[i]
    ...     return s
    >>> ez.jacrev(weighted)(np.array([1.0, 2.0]), w=np.array([3.0, 0.5]))
    array([6., 2.])
    """
    lowered = pf.transform(jacrev, f, argnums, output=output, has_aux=has_aux)
    if lowered is not None:  # a lambda, def or partial calling a function we differentiate
        return lowered
    if checked_has_aux(has_aux, "jacrev"):
        return with_aux(f, partial(jacrev, argnums=argnums), "jacrev", output)
    return _of_gradient(f, argnums, output, "jacrev") or _Jacobian(f, argnums, output, "jacrev")


def _of_gradient(f: Any, argnums: Argnums, output: int | None, how: str) -> Any:
    """``jacfwd`` / ``jacrev`` of ``grad(g, A)`` with respect to ``B`` (JAX's idioms
    for the Hessian): the blocks ``H[a][b]`` of ``hessian(g, A and B)``, shaped
    ``x_a.shape + x_b.shape``, nested as JAX nests them (outputs, then inputs), by
    forward over reverse mode. None when ``f`` is not a helper's result."""
    if not is_result(f):
        return None
    if isinstance(f, Pullback):  # a linear map: its Jacobian is J^T
        return f.jacobian(argnums, output, how)
    g, second = as_gradient(f), second_of(f)
    if output is not None or (g is None and second is None):
        refuse(how + (f" (output={output})" if output is not None else ""), f)
    if second is not None:  # third derivatives: jacobian(hessian(f)) and the like
        return of_second(how, second, argnums)
    assert g is not None
    if g.with_value:  # (d value, d gradient): the gradient and the Hessian's blocks
        return ValueAndBlocks(g, argnums, how)
    return Blocks(g, argnums, how)
