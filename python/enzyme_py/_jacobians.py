"""Jacobians and Hessians by batched derivatives: ``jacobian``, ``jacfwd``, ``jacrev``,
``hessian`` (names and conventions as in JAX; ``hvp`` is in ``_compose``).

Each batch of columns (or rows) runs ``f`` on fresh copies of the arguments taken when
the result was called: a function that overwrites an argument would otherwise give
the second batch the argument the first one overwrote. The caller's arrays are left
as they were.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from enzyme_py import _transforms as tf
from enzyme_py._activities import RecursionBatchRefused
from enzyme_py._compose import (
    Gradient,
    Pullback,
    as_gradient,
    hessian_of_gradient,
    is_result,
    refuse,
    second_of,
)
from enzyme_py._third_order import Second, of_second
from enzyme_py._transforms import Argnums, NotComposable
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
from enzyme_py.frontends._numba_contract import contracted

__all__ = ["hessian", "jacfwd", "jacobian", "jacrev"]


def _batches(n: int, size: int) -> list[tuple[int, int]]:
    return [(start, min(start + size, n)) for start in range(0, n, size)]


def _unit(a: Any, width: int, start: int, stop: int) -> Any:
    """Seeds for elements start:stop of ``a`` (an array, or a float scalar: one
    element), one per lane."""
    if not isinstance(a, np.ndarray):
        return 1.0 if width == 1 else [1.0] * width
    seeds = tf.shadow_like(a, width)
    seeds.reshape(width, -1)[np.arange(width), np.arange(start, stop)] = 1.0
    return seeds


def _size(a: Any) -> int:
    return a.size if isinstance(a, np.ndarray) else 1


def _lanes(values: Any, width: int) -> np.ndarray:
    """Per-lane values (an array's shadow, or a scalar's k adjoints) as (width, -1)."""
    return np.asarray(values, dtype=np.float64).reshape(width, -1)


def _batched(run: Callable[[int], None], recursive: bool = False) -> None:
    """run(batch size); one column at a time where Enzyme refuses batches (recursion)."""
    if recursive:
        run(1)
        return
    try:
        run(tf.BATCH)
    except RecursionBatchRefused:
        run(1)


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
            size = sum(_size(args[i]) for i in nums)
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
        out = _array_result(self.f, args, self.__name__)
        writes = self._derivatives.may_write(args)
        blocks = []
        for i in nums:
            x = args[i]
            block = np.empty((out.size, _size(x)), dtype=np.result_type(out.dtype, np.float32))
            reverse = self.how == "jacrev" or (self.how == "jacobian" and _size(x) > out.size)
            acts = tf.activities_for(args, (i,), Reverse if reverse else Forward, writes)

            def columns(
                batch: int, i: int = i, x: Any = x, block: Any = block, acts: Any = acts
            ) -> None:
                for start, stop in _batches(_size(x), batch):
                    width = stop - start
                    call = tf.fresh(args)
                    tangents: dict[int, Any] = tf.zero_shadows(call, acts, width)
                    tangents[i] = _unit(x, width, start, stop)
                    dy = self._derivatives.get(Forward, acts, DualOnly, width)(
                        *tf.interleave(call, acts, tangents)
                    )
                    block[:, start:stop] = _lanes(dy, width).T

            def rows(batch: int, i: int = i, block: Any = block, acts: Any = acts) -> None:
                for start, stop in _batches(out.size, batch):
                    width = stop - start
                    call = tf.fresh(args)
                    shadows = tf.zero_shadows(call, acts, width)
                    seeds = _unit(out.astype(block.dtype), width, start, stop)
                    _, *adjoints = self._derivatives.get(Reverse, acts, DuplicatedOnly, width)(
                        *tf.interleave(call, acts, shadows), seeds
                    )
                    block[start:stop] = _lanes(shadows[i] if i in shadows else adjoints[0], width)

            _batched(rows if reverse else columns)
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
        row = np.empty(_size(x), dtype=x.dtype if isinstance(x, np.ndarray) else np.float64)
        acts = tf.activities_for(args, (i,), Forward, self._derivatives.may_write(args))

        def run(batch: int) -> None:
            for start, stop in _batches(row.size, batch):
                width = stop - start
                call = tf.fresh(args)
                tangents: dict[int, Any] = tf.zero_shadows(call, acts, width)
                tangents[i] = _unit(x, width, start, stop)
                df = self._derivatives.get(Forward, acts, Dual, width)
                _, dy = df(*tf.interleave(call, acts, tangents))
                row[start:stop] = np.asarray(dy, dtype=np.float64).reshape(-1)

        _batched(run)
        return row.reshape(x.shape) if isinstance(x, np.ndarray) else float(row[0])

    def _forward_outputs(self, args: Sequence[Any], nums: tuple[int, ...], j: int) -> list[Any]:
        """Columns of d out / d x_i by batched forward mode, one argument at a time."""
        out, ret = args[j], self._ret(args)
        blocks = []
        for i in nums:
            x = args[i]
            block = np.empty((out.size, _size(x)), dtype=out.dtype)
            acts = tf.activities_for(args, (i, j), Forward, self._derivatives.may_write(args))

            def run(
                batch: int, i: int = i, x: Any = x, block: np.ndarray = block, acts: Any = acts
            ) -> None:
                for start, stop in _batches(_size(x), batch):
                    width = stop - start
                    call = tf.fresh(args)
                    tangents: dict[int, Any] = tf.zero_shadows(call, acts, width)
                    tangents[i] = _unit(x, width, start, stop)
                    self._derivatives.get(Forward, acts, ret, width)(
                        *tf.interleave(call, acts, tangents)
                    )
                    block[:, start:stop] = _lanes(tangents[j], width).T

            _batched(run)
            blocks.append(block.reshape(*out.shape, *np.shape(x)))
        return blocks

    def _reverse_outputs(self, args: Sequence[Any], nums: tuple[int, ...], j: int) -> list[Any]:
        """Rows of d out / d x_i for every i in nums by batched reverse mode."""
        out, ret = args[j], self._ret(args)
        acts = tf.activities_for(args, (*nums, j), Reverse, self._derivatives.may_write(args))
        rows = [np.empty((out.size, _size(args[i])), dtype=out.dtype) for i in nums]

        def run(batch: int) -> None:
            for start, stop in _batches(out.size, batch):
                width = stop - start
                call = tf.fresh(args)
                shadows = tf.zero_shadows(call, acts, width)
                shadows[j] = _unit(out, width, start, stop)
                df = self._derivatives.get(Reverse, acts, ret, width)
                _, *adjoints = df(*tf.interleave(call, acts, shadows))
                # Adjoints of Active scalars come in parameter order.
                active = dict(
                    zip([k for k, a in enumerate(acts) if a is Active], adjoints, strict=True)
                )
                for k, i in enumerate(nums):
                    lanes = shadows[i] if i in shadows else active[i]
                    rows[k][start:stop] = _lanes(lanes, width)

        _batched(run)
        return [r.reshape(*out.shape, *np.shape(args[i])) for r, i in zip(rows, nums, strict=True)]


def jacobian(f: Any, argnums: Argnums = 0, output: int | None = None) -> Callable[..., Any]:
    """The Jacobian of ``f`` with respect to the arguments in ``argnums``.

    With ``output=None``, ``f`` returns a float scalar and the Jacobian is its gradient
    (shaped like the argument, a float for a float scalar), by reverse mode. With
    ``output=j``, ``f`` writes its result into the float array argument j (f: R^n ->
    R^m written as ``f(x, out)``): the Jacobian with respect to an array ``x`` has shape
    ``out.shape + x.shape``, with respect to a float scalar ``out.shape``; computed by
    batched forward mode (columns) when the inputs have no more elements than the
    output, by batched reverse mode (rows) otherwise. A tuple ``argnums`` gives a
    tuple of Jacobians. ``f`` runs on copies: the caller's arrays are left as given.

    >>> import numba, numpy as np, enzyme_py as ez
    >>> @numba.njit
    ... def two(r, theta, out):
    ...     out[0] = r * theta
    ...     out[1] = r + theta * theta
    >>> ez.jacobian(two, argnums=(0, 1), output=2)(2.0, 3.0, np.zeros(2))
    (array([3., 1.]), array([2., 6.]))
    """
    return _of_gradient(f, argnums, output, "jacobian") or _Jacobian(f, argnums, output, "jacobian")


def jacfwd(f: Any, argnums: Argnums = 0, output: int | None = None) -> Callable[..., Any]:
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
    return _of_gradient(f, argnums, output, "jacfwd") or _Jacobian(f, argnums, output, "jacfwd")


def jacrev(f: Any, argnums: Argnums = 0, output: int | None = None) -> Callable[..., Any]:
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
        return _ValueAndBlocks(g, argnums, how)
    return _Blocks(g, argnums, how)


class _ValueAndBlocks:
    """What ``jacobian(value_and_grad(g, A), B)`` returns, as JAX's: the pair
    ``(grad(g, B), jacobian(grad(g, A), B))`` (a tuple of gradients and a tuple of
    blocks where A or B is a tuple)."""

    helper_result = True
    order = 2

    def __init__(self, inner: Gradient, argnums: Argnums, how: str):
        self.inner, self.argnums, self.how = inner, argnums, how
        self.__name__ = f"{how}({inner.__name__})"
        self._value = Gradient(inner.f, argnums, False)
        self._gradient = _Blocks(Gradient(inner.f, inner.argnums, False), argnums, how)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_ValueAndBlocks, (self.inner, self.argnums, self.how))

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


class _Blocks:
    """What ``jacfwd(grad(g, A), B)`` returns: blocks of ``hessian(g, A + B)``."""

    helper_result = True
    order = 2

    def __init__(self, inner: Gradient, argnums: Argnums, how: str):
        self.inner, self.argnums = inner, argnums
        self.__name__ = f"{how}({inner.__name__})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Blocks, (self.inner, self.argnums, self.__name__.split("(")[0]))

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
            for e in range(_size(args[m])):
                t = _unit(args[m], 1, e, e + 1)
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
    out = _array_result(f, args, who)
    if out.dtype.kind != "f":
        raise TypeError(
            f"{who}: {tf.name_of(f)} returns an array of {out.dtype}, which has no "
            "derivative; return float values"
        )
    g = contracted(f, len(args))
    # Made once: their derivatives are kept with them, for every output.
    hessian = _Hessian(g, union)
    columns = _Blocks(Gradient(g, union, False), union, "jacfwd")
    arrays = all(tf.is_float_array(args[i]) for i in union)
    weights = np.zeros(out.size, dtype=out.dtype)
    per_output = []
    for k in range(out.size):
        weights[:] = 0
        weights[k] = 1
        call = (*args, weights.reshape(out.shape))
        per_output.append(hessian(*call) if arrays else columns._columns(call, union))
    return [
        [
            np.stack([np.asarray(h[a][b]) for h in per_output]).reshape(
                *out.shape, *np.shape(args[i]), *np.shape(args[m])
            )
            for b, m in enumerate(union)
        ]
        for a, i in enumerate(union)
    ]


def _array_result(f: Any, args: Sequence[Any], who: str) -> np.ndarray:
    """f's array result at ``args`` (on copies: no side effect), for its shape;
    TypeError for a tuple."""
    found = f(*tf.fresh(args))
    if isinstance(found, tuple):
        raise TypeError(
            f"{who}: {tf.name_of(f)} returns a tuple; the Jacobian of a tuple "
            "result is not supported: differentiate a function returning one array "
            "(or use ez.jvp / ez.vjp, which take tuples)"
        )
    return np.asarray(found)


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
        for i in nums:
            if not tf.is_float_array(args[i]):
                raise TypeError(
                    f"{self.__name__} needs argument {i} to be a float array; got "
                    f"{type(args[i]).__name__} (a float scalar: pass it as a 1-element array)"
                )
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
                for start, stop in _batches(args[m].size, batch):
                    width = stop - start
                    seeds = {m: _unit(args[m], width, start, stop)}
                    _, hv = tf.hessian_vector(
                        self._derivatives, tf.fresh(args), nums, seeds, 1.0, width
                    )
                    for i in nums:
                        blocks[i, m][:, start:stop] = _lanes(hv[i], width).T

            _batched(run, recursive)
        shaped = {(i, m): b.reshape(*args[i].shape, *args[m].shape) for (i, m), b in blocks.items()}
        if tf.single(self.argnums):
            return shaped[nums[0], nums[0]]
        return tuple(tuple(shaped[i, m] for m in nums) for i in nums)


def hessian(f: Any, argnums: Argnums = 0) -> Callable[..., Any]:
    """The Hessian of scalar-valued ``f`` with respect to the float array arguments in
    ``argnums``, by forward mode over reverse mode, columns in batches.

    An int ``argnums`` gives one block of shape ``x.shape + x.shape``; a tuple gives the
    nested blocks as JAX does: ``h[a][b]`` of shape ``x_a.shape + x_b.shape`` for the
    arguments ``argnums[a]`` and ``argnums[b]``. ``f`` runs on copies: the caller's
    arrays are left as given.

    A Numba ``f`` that returns a float array has, as in JAX, one Hessian per element of
    its result: shaped ``result.shape + x.shape + x.shape`` (blocks ``result.shape +
    x_a.shape + x_b.shape``; float scalar arguments allowed), each the Hessian of
    ``sum(f(x) * e_k)``. ``jacfwd(jacrev(f))`` and the other Jacobians of a Jacobian
    of such f give the same array.

    >>> import numba, numpy as np, enzyme_py as ez
    >>> @numba.njit
    ... def f(x, y):
    ...     return x[0] * x[0] * y[0] + x[1] * y[0] * y[0]
    >>> h = ez.hessian(f, argnums=(0, 1))(np.array([1.0, 2.0]), np.array([3.0]))
    >>> h[0][0], h[0][1], h[1][1]
    (array([[6., 0.],
           [0., 0.]]), array([[2.],
           [6.]]), array([[4.]]))
    """
    g = as_gradient(f)
    if g is not None:  # hessian(grad(f, a)) for a float scalar a: third derivatives
        return hessian_of_gradient(g, argnums)
    if is_result(f):
        refuse("hessian", f)
    return _Hessian(f, argnums)
