"""Third derivatives of scalar-valued functions, by forward over forward over reverse.

``third_vector`` is the one primitive: the reverse derivative of ``f`` gives the
gradient, a forward derivative of it with tangents ``t1`` gives ``H t1`` (as
``_transforms.hessian_vector``), and a forward derivative of that one with tangents
``t2`` gives ``T[t1, t2]``: per argument i, ``sum_jk d^3 f / dx_i dx_j dx_k t1_j
t2_k``. Each layer is a derivative Enzyme builds of the layer below it; the middle one
returns only its tangent (DualOnly), because enzyme_py calls a function returning a
struct of adjoints and their tangents only as a derivative, never as a primal.

``ThirdDerivative`` is what the helpers return for a third derivative
(``grad(grad(grad(f)))``, ``jacobian(hessian(f))``, ``jacfwd(jacrev(grad(f, a)))``,
...): the blocks ``d/dx_c d/dx_b df/dx_a`` for a in A, b in B, c in C, shaped
``x_a.shape + x_b.shape + x_c.shape`` and nested as JAX nests them ([a][b][c]).
``jvp_of_second`` is ``jvp`` of a second derivative: ``(H, T v)``.

>>> import numba, numpy as np, enzyme_py as ez
>>> @numba.njit
... def f(x):
...     return x[0] ** 3 * x[1] + x[1] ** 4
>>> x = np.array([1.0, 2.0])
>>> ez.jacobian(ez.hessian(f))(x)[:, :, 1]          # d/dx_1 of the Hessian
array([[ 6.,  0.],
       [ 0., 48.]])
>>> ez.jvp(ez.hessian(f), (x,), (np.array([1.0, 0.0]),))   # (H, T v)
(array([[12.,  3.],
       [ 3., 48.]]), array([[12.,  6.],
       [ 6.,  0.]]))
>>> @numba.njit
... def cube(t):
...     return t ** 3
>>> ez.grad(ez.grad(ez.grad(cube)))(2.0)
6.0
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, NoReturn

import numpy as np

from enzyme_py import _transforms as tf
from enzyme_py._activities import RecursionBatchRefused
from enzyme_py._batching import per_output, size_of
from enzyme_py._transforms import Argnums, NotComposable
from enzyme_py.core import Active, Activity, Const, Dual, DualOnly, Reverse

__all__ = [
    "Second",
    "ThirdDerivative",
    "jvp_of_second",
    "of_second",
    "third_vector",
    "vjp_of_second",
]


class Second(NamedTuple):
    """What a helper's second derivative is: the blocks ``d/dx_b df/dx_a`` (a in
    argnums ``a``, b in ``b``) of scalar-valued ``f``, nested as JAX nests them; the
    argnums in ``scalars`` must hold float scalars (a gradient that ez.grad took
    again)."""

    f: Any
    derivatives: tf.Derivatives
    a: Argnums
    b: Argnums
    scalars: tuple[Argnums, ...]
    name: str


def third_vector(
    derivatives: tf.Derivatives,
    args: Sequence[Any],
    nums: tuple[int, ...],
    t1: dict[int, Any],
    t2: dict[int, Any],
    width: int = 1,
) -> tuple[dict[int, Any], dict[int, Any], dict[int, Any]]:
    """``(H t1, H t2, T[t1, t2])`` per argument i of ``nums`` (shaped like it) for
    scalar-valued f, by one forward-over-forward-over-reverse call: the mixed
    derivatives of every argument with a tangent included, as JAX's nested jvps of its
    grad. ``H t2`` only for float arrays (a float scalar's is not returned). The
    tangents are keyed by position, in their arguments' dtypes; with ``width`` k, the
    tangents ``t2`` have k lanes each (``(k, *shape)``) and so have ``H t2`` and ``T[t1,
    t2]`` (float arrays only; float scalars take width 1). f runs on ``args`` as given
    (pass copies if it may overwrite them)."""
    active = tuple(i for i in range(len(args)) if i in nums or i in t1 or i in t2)
    acts = tf.activities_for(args, active, Reverse, derivatives.may_write(args))
    scalars = [i for i, act in enumerate(acts) if act is Active]
    if width != 1 and scalars:
        raise ValueError("third_vector: float scalars take width 1")
    reverse = tf.reverse_derivative(derivatives, args, acts)
    acts1: list[Activity] = []
    acts2: list[Activity] = []
    call: list[Any] = []
    first: dict[int, Any] = {}
    second: dict[int, Any] = {}
    third: dict[int, Any] = {}
    for i, (a, act) in enumerate(zip(args, acts, strict=True)):
        u, w = t1.get(i), t2.get(i)
        if act is Active:  # x, its t2 tangent, its t1 tangent, the t2 tangent of that
            acts1.append(Dual)
            acts2 += [Dual, Dual]
            call += [a, 0.0 if w is None else float(w), 0.0 if u is None else float(u), 0.0]
        elif act.shadow:  # x and its shadow (the gradient), each with a t1 tangent
            acts1 += [Dual, Dual]
            acts2 += [Dual] * 4
            first[i], second[i], third[i] = (
                tf.shadow_like(a, width),
                np.zeros_like(a),
                tf.shadow_like(a, width),
            )
            call += [
                a,
                tf.shadow_like(a, width) if w is None else w,
                np.zeros_like(a) if u is None else u,
                tf.shadow_like(a, width),
                np.zeros_like(a),  # the gradient
                first[i],  # its t2 tangent: H t2
                second[i],  # its t1 tangent: H t1
                third[i],  # the t2 tangent of that: T[t1, t2]
            ]
        else:
            acts1.append(Const)
            acts2.append(Const)
            call.append(a)
    middle = tf.forward_of(derivatives, reverse, acts1, DualOnly if scalars else None, 1)
    outer = tf.forward_of(derivatives, middle, acts2, Dual if scalars else None, width)
    result = outer(*call, 1.0)
    if scalars:
        values, dvalues = result
        for i, hv, tv in zip(scalars, np.atleast_1d(values), np.atleast_1d(dvalues), strict=True):
            second[i], third[i] = float(hv), float(tv)
    return (
        {i: second[i] for i in nums},
        {i: first[i] for i in nums if i in first},
        {i: third[i] for i in nums},
    )


def _lanes(
    derivatives: tf.Derivatives,
    args: Sequence[Any],
    nums: tuple[int, ...],
    t1: dict[int, Any],
    k: int,
    start: int,
    stop: int,
) -> tuple[dict[int, Any], dict[int, np.ndarray], dict[int, np.ndarray]]:
    """third_vector on copies of args with ``t2`` the unit tangents of elements
    start:stop of argument k, one per lane: ``(H t1, H t2, T[t1, t2])``, the last two as
    ``(lanes, -1)`` per argument (H t2 for float arrays only). One call with Enzyme's
    width, or one per lane where Enzyme refuses to batch (recursion)."""
    width = stop - start
    if width > 1:
        try:
            t2 = {k: _units(args[k], start, stop)}
            hv, h2, tv = third_vector(derivatives, tf.fresh(args), nums, t1, t2, width)
            return (
                hv,
                {i: np.asarray(v).reshape(width, -1) for i, v in h2.items()},
                {i: np.asarray(v, dtype=np.float64).reshape(width, -1) for i, v in tv.items()},
            )
        except RecursionBatchRefused:
            pass
    found = [
        third_vector(derivatives, tf.fresh(args), nums, t1, {k: _units(args[k], e, e + 1)})
        for e in range(start, stop)
    ]
    return (
        found[0][0],
        {i: np.stack([np.asarray(f[1][i]).reshape(-1) for f in found]) for i in found[0][1]},
        {
            i: np.stack([np.asarray(f[2][i], dtype=np.float64).reshape(-1) for f in found])
            for i in nums
        },
    )


def _copies(tangents: dict[int, Any]) -> dict[int, Any]:
    """Copies of the tangent arrays: f may overwrite an argument, and forward mode its
    tangent with it, and the same tangents serve several calls."""
    return {i: t.copy() if isinstance(t, np.ndarray) else t for i, t in tangents.items()}


def _units(a: Any, start: int, stop: int) -> Any:
    """Unit tangents for elements start:stop of ``a``: one per lane, ``(k, *shape)``
    (shaped like ``a`` for one); 1.0 for a float scalar."""
    if not isinstance(a, np.ndarray):
        return 1.0
    width = stop - start
    t = np.zeros((width, a.size), dtype=a.dtype)
    t[np.arange(width), np.arange(start, stop)] = 1.0
    return t.reshape(a.shape if width == 1 else (width, *a.shape))


def _absolute(nums: Argnums, n: int) -> Argnums:
    """Argnums counted from the front (``-1`` is ``n - 1``), as an int or a tuple as
    given: they keep their meaning for a function with more parameters after them."""
    if isinstance(nums, (int, np.integer)):
        return int(nums) % n
    return tuple(int(j) % n for j in nums)


def _nest(n: int, groups: Sequence[Argnums], block: Any) -> Any:
    """``block(*positions)`` nested over the argnums groups as JAX nests its results:
    an int unwraps its level, a sequence gives a tuple."""

    def level(depth: int, picked: tuple[int, ...]) -> Any:
        if depth == len(groups):
            return block(*picked)
        nums = groups[depth]
        if isinstance(nums, (int, np.integer)):
            return level(depth + 1, (*picked, int(nums) % n))
        return tuple(level(depth + 1, (*picked, int(j) % n)) for j in nums)

    return level(0, ())


def _block(values: dict[tuple[int, int], Any], args: Sequence[Any], idx: Sequence[int]) -> Any:
    """One block from its columns ``values[(m, e)]`` (m: the last position in idx, e: its
    element), shaped ``x_i.shape + ... + x_m.shape`` (a float for all scalars)."""
    m = idx[-1]
    columns = [
        np.asarray(values[m, e], dtype=np.float64).reshape(-1) for e in range(size_of(args[m]))
    ]
    shape = sum((np.shape(args[j]) for j in idx), ())
    block = np.stack(columns, axis=-1).reshape(shape)
    if not block.ndim:
        return float(block)
    dtype = np.result_type(*(np.asarray(args[j]).dtype for j in idx))
    return block.astype(dtype)


def _checked(
    f: Any,
    args: Sequence[Any],
    groups: Sequence[tuple[int, ...]],
    scalars: Sequence[tuple[int, ...]],
    who: str,
) -> None:
    """Refuse arguments that cannot be differentiated, array arguments where a gradient
    of them is differentiated by ez.grad, and f that returns an array."""
    for i in sorted({i for g in groups for i in g}):
        tf.check_differentiable(args[i], i, who)
    for i in sorted({i for g in scalars for i in g}):
        if not tf.is_float_scalar(args[i]):
            raise NotComposable(
                f"{who}: argument {i} is an array {np.shape(args[i])}, so the derivative "
                "with respect to it is an array; ez.grad needs a scalar-valued function. "
                "Write ez.jacobian(ez.hessian(f)) (or ez.jacfwd of a second derivative) "
                "for the third-derivative blocks, or ez.jvp(ez.hessian(f), primals, "
                "tangents) for T v"
            )
    if tf.returns_arrays(f, args):
        raise NotComposable(
            f"{who}: {tf.name_of(f)} returns an array (or a tuple); the pullback of its "
            "second derivatives is not composed: ez.jacobian of them gives the tensor "
            "(result.shape + three argument shapes), ez.jvp of them T v"
        )


class ThirdDerivative:
    """The blocks ``d/dx_c d/dx_b df/dx_a`` (see the module's docstring) of scalar-
    valued ``f``, for a in argnums ``a``, b in ``b`` and c in ``c``, by forward over
    forward over reverse mode. The positions in ``scalars`` must hold float scalars
    (a gradient differentiated by ez.grad); ``with_value`` gives ``(d^2 f / dx_a dx_b,
    blocks)`` as value_and_grad does. Picklable when f is."""

    helper_result = True
    order = 3

    def __init__(
        self,
        f: Any,
        a: Argnums,
        b: Argnums,
        c: Argnums,
        name: str,
        scalars: tuple[Argnums, ...] = (),
        with_value: bool = False,
    ):
        self.f, self.a, self.b, self.c, self.__name__ = f, a, b, c, name
        self.scalars, self.with_value = scalars, with_value
        self._derivatives = tf.Derivatives(f)

    def __reduce__(self) -> tuple[Any, ...]:
        fields = (self.f, self.a, self.b, self.c, self.__name__, self.scalars, self.with_value)
        return (ThirdDerivative, fields)

    def __repr__(self) -> str:
        return f"<enzyme_py {self.__name__}, argnums={self.c!r}>"

    def __enzyme_autodiff__(self, mode: Any, *activities: Any, **options: Any) -> NoReturn:
        raise NotComposable(FOURTH.format(outer="ez.autodiff", name=self.__name__))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        args = tf.bind(self.f, args, kwargs, self.__name__)
        if tf.returns_arrays(self.f, args):  # one tensor per element of the result

            def of_output(g: Any) -> Callable[..., Any]:
                n = len(args)
                a, b, c = (_absolute(nums, n) for nums in (self.a, self.b, self.c))
                scalars = tuple(_absolute(nums, n) for nums in self.scalars)
                return ThirdDerivative(g, a, b, c, self.__name__, scalars, self.with_value)

            return per_output(self.f, args, self.__name__, of_output)
        groups = [tf.positions(g, len(args)) for g in (self.a, self.b, self.c)]
        rows, mids, cols = groups
        scalars = [tf.positions(g, len(args)) for g in self.scalars]
        _checked(self.f, args, groups, scalars, self.__name__)
        arrays = all(tf.is_float_array(args[i]) for g in groups for i in g)
        batch = tf.BATCH if arrays else 1
        second: dict[tuple[int, int], Any] = {}  # (m, e) -> {i: (H e_me)_i}
        third: dict[tuple[int, int, int, int], dict[int, Any]] = {}  # (m, e, k, c) -> {i: T_i}
        for m in mids:
            for e in range(size_of(args[m])):
                for k in cols:
                    for start in range(0, size_of(args[k]), batch):
                        stop = min(start + batch, size_of(args[k]))
                        hv, _, tv = _lanes(
                            self._derivatives,
                            args,
                            rows,
                            {m: _units(args[m], e, e + 1)},
                            k,
                            start,
                            stop,
                        )
                        second[m, e] = hv
                        for lane in range(stop - start):
                            third[m, e, k, start + lane] = {i: tv[i][lane] for i in rows}

        def block(i: int, m: int, k: int) -> Any:
            flat = {
                (k, c): np.stack(
                    [np.asarray(third[m, e, k, c][i]).reshape(-1) for e in range(size_of(args[m]))],
                    axis=-1,
                )
                for c in range(size_of(args[k]))
            }
            return _block(flat, args, (i, m, k))

        found = _nest(len(args), (self.a, self.b, self.c), block)
        if not self.with_value:
            return found
        (a,), (b,) = rows, mids
        return float(second[b, 0][a]), found


FOURTH = (
    "{outer} of {name}: fourth derivatives do not compose through the helpers (they stop "
    "at third derivatives); apply the third-derivative helpers to a forward derivative "
    "instead: ez.grad(ez.grad(ez.grad(df))) of df = ez.autodiff(f, ez.Forward, ez.Dual, "
    "ez.DualOnly) is the fourth derivative of a scalar f along df's tangent"
)


def jvp_of_second(
    f: Any,
    derivatives: tf.Derivatives,
    a: Argnums,
    b: Argnums,
    scalars: tuple[Argnums, ...],
    primals: Sequence[Any],
    tangents: Sequence[Any],
    name: str,
) -> tuple[Any, Any]:
    """``jvp`` of a second derivative whose value is the blocks ``H[a][b]`` of scalar-
    valued f (``d/dx_b df/dx_a``): ``(H[a][b], T[a][b] v)``, where ``(T v)_ab = sum_k
    d^3 f / dx_a dx_b dx_k v_k`` over every argument k given a tangent; nested and
    shaped as the blocks are. Unit columns batched where all arguments are arrays."""
    who = f"jvp({name})"
    if len(primals) != len(tangents):
        raise ValueError(f"jvp got {len(primals)} primals and {len(tangents)} tangents")
    args = tf.fresh(tf.with_defaults(f, primals, who))
    if tf.returns_arrays(f, args):  # (H, T v) per element of the result

        def of_output(g: Any) -> Callable[..., Any]:
            n, rest = len(args), (None,) * (len(args) + 1 - len(tangents))
            a_, b_ = _absolute(a, n), _absolute(b, n)
            scal = tuple(_absolute(nums, n) for nums in scalars)
            derivatives_g = tf.Derivatives(g)
            return lambda *call: jvp_of_second(
                g, derivatives_g, a_, b_, scal, call, (*tangents, *rest), name
            )

        return per_output(f, args, who, of_output)  # type: ignore[no-any-return]
    rows, mids = tf.positions(a, len(args)), tf.positions(b, len(args))
    given = tf.given_tangents(args, tangents, who)
    scal = [tf.positions(g, len(args)) for g in scalars]
    _checked(f, args, (rows, mids, tuple(given)), scal, who)
    second: dict[tuple[int, int], Any] = {}  # (m, e) -> {i: H_i,me}
    third: dict[tuple[int, int], Any] = {}  # (m, e) -> {i: (T v)_i,me}
    arrays = all(tf.is_float_array(args[i]) for i in (*rows, *mids, *given))
    for m in mids:
        if arrays:  # t1 = v, t2 = the unit columns in lanes: H t2 and T[v, e] per lane
            for start in range(0, args[m].size, tf.BATCH):
                stop = min(start + tf.BATCH, args[m].size)
                _, hv, tv = _lanes(derivatives, args, rows, _copies(given), m, start, stop)
                for lane in range(stop - start):
                    second[m, start + lane] = {i: hv[i][lane] for i in rows}
                    third[m, start + lane] = {i: tv[i][lane] for i in rows}
        else:
            for e in range(size_of(args[m])):
                unit = {m: _units(args[m], e, e + 1)}
                hv, _, tv = third_vector(derivatives, tf.fresh(args), rows, unit, _copies(given))
                second[m, e], third[m, e] = hv, tv

    def pick(found: dict[tuple[int, int], Any]) -> Any:
        def block(i: int, m: int) -> Any:
            columns = {(m, e): found[m, e][i] for e in range(size_of(args[m]))}
            return _block(columns, args, (i, m))

        return _nest(len(args), (a, b), block)

    return pick(second), pick(third)


def of_second(
    outer: str, second: Second, c: Argnums, with_value: bool = False, bare: bool = False
) -> ThirdDerivative:
    """``grad`` / ``value_and_grad`` (``outer``) or a Jacobian of a second derivative
    with respect to argnums ``c``: a ThirdDerivative (named ``outer`` itself if
    ``bare``)."""
    name = outer if bare else f"{outer}({second.name})"
    if outer not in ("grad", "value_and_grad"):
        return ThirdDerivative(second.f, second.a, second.b, c, name, second.scalars)
    if not (tf.single(second.a) and tf.single(second.b)):
        raise NotComposable(
            f"{name}: {second.name} returns a tuple of derivatives; ez.grad needs a scalar-"
            f"valued function. Write {outer} of a second derivative with one argnum each, "
            "or ez.jacobian of it for the blocks"
        )
    scalars = (*second.scalars, second.a, second.b)
    return ThirdDerivative(second.f, second.a, second.b, c, name, scalars, with_value)


def vjp_of_second(
    second: Second, primals: Sequence[Any]
) -> tuple[Any, Callable[[Any], tuple[Any, ...]]]:
    """``vjp`` of a second derivative: ``(H[a][b], vjp_fn)``; ``vjp_fn(C)``, C nested and
    shaped as the blocks are, gives per primal j ``sum_ab C_ab d^3 f / dx_a dx_b dx_j``
    (None for the primals that are not floats), one forward-over-forward-over-reverse
    call per element of the b arguments (T is symmetric: ``sum_a T[e_b, C_b]``)."""
    f, derivatives, a, b = second.f, second.derivatives, second.a, second.b
    who = f"vjp({second.name})"
    n = len(primals)
    at = tuple(tf.fresh(tf.with_defaults(f, primals, who)))
    rows, mids = tf.positions(a, len(at)), tf.positions(b, len(at))
    scal = [tf.positions(g, len(at)) for g in second.scalars]
    _checked(f, at, (rows, mids), scal, who)
    floats = tuple(i for i in range(n) if tf.is_float_array(at[i]) or tf.is_float_scalar(at[i]))
    columns: dict[tuple[int, int], Any] = {}
    for m in mids:
        for e in range(size_of(at[m])):
            _, hv = tf.hessian_vector(derivatives, tf.fresh(at), rows, {m: _units(at[m], e, e + 1)})
            columns[m, e] = hv

    def block(i: int, m: int) -> Any:
        return _block({(m, e): columns[m, e][i] for e in range(size_of(at[m]))}, at, (i, m))

    value = _nest(len(at), (a, b), block)

    def cotangent_block(c: Any, ai: int, bi: int) -> np.ndarray:
        for k, (nums, pos) in enumerate(((a, ai), (b, bi))):
            if not tf.single(nums):
                if not isinstance(c, (tuple, list)) or len(c) != len(nums):  # type: ignore[arg-type]
                    raise TypeError(
                        f"the pullback of {second.name} takes a cotangent nested as its value "
                        f"is: a tuple of {len(nums)} at level {k}"  # type: ignore[arg-type]
                    )
                c = c[pos]
        i, m = rows[ai], mids[bi]
        shape = np.shape(at[i]) + np.shape(at[m])
        dtype = np.result_type(*(np.asarray(at[j]).dtype for j in (i, m)))
        values = np.asarray(c)
        if values.dtype.kind not in "biuf" or values.shape != shape:
            raise ValueError(
                f"the cotangent of block ({i}, {m}) of {second.name} must be real numbers "
                f"of shape {shape}; got {values.dtype} of shape {values.shape}"
            )
        return values.astype(dtype).reshape(size_of(at[i]), size_of(at[m]))

    def vjp_fn(cotangent: Any) -> tuple[Any, ...]:
        cts = {
            (i, m): cotangent_block(cotangent, ai, bi)
            for ai, i in enumerate(rows)
            for bi, m in enumerate(mids)
        }
        total: dict[int, Any] = {j: np.zeros(np.shape(at[j])) for j in floats}
        for m in mids:
            for e in range(size_of(at[m])):
                t2 = {}
                for i in rows:
                    col = cts[i, m][:, e]
                    x = at[i]
                    t2[i] = (
                        col.reshape(x.shape).astype(x.dtype)
                        if isinstance(x, np.ndarray)
                        else float(col[0])
                    )
                if all(not np.any(t) for t in t2.values()):
                    continue
                _, _, tv = third_vector(
                    derivatives, tf.fresh(at), floats, {m: _units(at[m], e, e + 1)}, t2
                )
                for j in floats:
                    total[j] = total[j] + np.asarray(tv[j], dtype=np.float64)
        found = {
            j: (total[j].astype(at[j].dtype) if isinstance(at[j], np.ndarray) else float(total[j]))
            for j in floats
        }
        return tuple(found.get(j) for j in range(n))

    return value, vjp_fn
