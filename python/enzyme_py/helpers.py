"""JAX-named helpers on top of ``autodiff``, for Numba, C and IR functions alike.

Activities are chosen from the arguments of each call, as JAX does: with respect to
the arguments in ``argnums``, a float array is Duplicated (reverse) or Dual (forward),
a float scalar Active or Dual; every other float array gets a zero shadow (it may be
scratch memory that carries a derivative), every other argument is Const. Derivatives
are built once per combination of activities and reused.

The results of ``grad``, ``value_and_grad``, ``jacobian``, ``jacfwd``, ``jacrev`` and
``hessian`` take keyword arguments and fill in omitted defaults (bound by the names of
the Numba function's Python parameters, or of a C function's declaration); ``argnums``
count positions after that binding. ``jvp``, ``vjp`` and ``hvp`` fill in omitted
defaults too (as Const).

Every helper also takes a Python function (a ``lambda``, a ``def``, a
``functools.partial``) that calls one function enzyme_py differentiates, passing the
differentiated arguments on as they are: ``ez.grad(lambda x: loss(x, data))``, as in JAX.
Each call finds that call anew (``_python_functions``): captured arrays are read as the
Python function reads them, never frozen.

Functions that return nothing and write their results into array arguments ("output
parameters", ``f(x, out)``) work in every helper: see ``jvp``, ``vjp`` and ``jacobian``
(``output=``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from enzyme_py import _python_functions as pf
from enzyme_py import _transforms as tf
from enzyme_py._arguments import real_number as _real_number
from enzyme_py._aux import AuxGradient, checked_has_aux, pair_types
from enzyme_py._compose import (
    Gradient,
    GradientOfGradient,
    Pullback,
    as_gradient,
    hvp,
    is_result,
    jvp_of,
    refuse,
    second_of,
)
from enzyme_py._hessians import hessian
from enzyme_py._jacobians import jacfwd, jacobian, jacrev
from enzyme_py._third_order import of_second, vjp_of_second
from enzyme_py._transforms import Argnums
from enzyme_py.core import (
    Active,
    ActiveOnly,
    Activity,
    ActivityError,
    Const,
    Dual,
    Duplicated,
    DuplicatedOnly,
    EnzymeError,
    Forward,
    Reverse,
)

__all__ = [
    "grad",
    "hessian",
    "hvp",
    "jacfwd",
    "jacobian",
    "jacrev",
    "jvp",
    "value_and_grad",
    "vjp",
]

# Private names other modules (torch.py, jax.py, _check.py) import from here.
_EXPORTED = (
    tf.BATCH,
    tf.activity_of,
    tf.positions,
    tf.Derivatives,
    tf.is_float_scalar,
    tf.reverse_call,
)


# What grad / value_and_grad return (kept here under its old name for old pickles).
_Gradient = Gradient


def grad(f: Any, argnums: Argnums = 0, has_aux: bool = False) -> Callable[..., Any]:
    """The gradient of scalar-valued ``f`` with respect to the arguments in ``argnums``.

    Returns a function of the same arguments (keywords and defaults as ``f`` takes
    them); it returns one gradient (an array shaped like the argument, or a float) for
    an int ``argnums``, a tuple of them for a sequence. One reverse pass; the primal
    value is not computed (``ActiveOnly``). ``f`` runs once, on the arrays given.

    >>> import numba, numpy as np, enzyme_py as ez
    >>> @numba.njit
    ... def dist(x, y, p=2.0):
    ...     return np.sum(np.abs(x - y) ** p)
    >>> x, y = np.array([1.0, 2.0]), np.array([0.0, 4.0])
    >>> ez.grad(dist)(x, y)              # p=2.0 filled in: 2 (x - y)
    array([ 2., -4.])
    >>> ez.grad(dist, argnums=(0, 1))(x, y=y, p=2.0)
    (array([ 2., -4.]), array([-2.,  4.]))
    >>> ez.grad(lambda x: dist(x, y, 3.0))(x)    # a lambda calling it: 3 |x - y|^2 sign
    array([  3., -12.])

    A gradient is differentiated again where JAX's is (forward over reverse): with
    respect to a float scalar argument ``a``, ``ez.grad(ez.grad(f, a), b)`` is the
    second derivative ``d/dx_b (df/dx_a)``, shaped like argument b; ``ez.vjp``,
    ``ez.jvp``, ``ez.jacfwd``, ``ez.jacrev`` and ``ez.autodiff`` of ``ez.grad(f)`` work
    too (for the Hessian of an array argument: ``ez.hessian``, ``ez.hvp``), and the
    second derivatives once more: ``ez.grad(ez.grad(ez.grad(f)))`` of a scalar,
    ``ez.jvp(ez.hessian(f), ...)``, ``ez.jacobian(ez.hessian(f))`` (third derivatives).

    >>> ez.grad(ez.grad(dist, 2), 0)(x, y, 2.0)   # d/dx (d/dp |x - y|^p): [1, -2 - 4 ln 2]
    array([ 1.        , -4.77258872])

    ``has_aux=True``: ``f`` returns a pair ``(value, aux)`` (aux a float or integer
    scalar or array) and the result is ``(gradient, aux)`` from the same reverse pass,
    as JAX's (an array aux costs one more evaluation of ``f``, for its shape); such a
    gradient is differentiated again by the Jacobians and ``hessian`` with
    ``has_aux=True``, as JAX's ``jacfwd(grad(f, has_aux=True), has_aux=True)``:
    ``(the Jacobian of the gradient, aux)``.
    """
    return _gradient(f, argnums, with_value=False, has_aux=has_aux)


def value_and_grad(f: Any, argnums: Argnums = 0, has_aux: bool = False) -> Callable[..., Any]:
    """Like ``grad``, returning ``(f(*args), gradient)`` from one reverse pass; with
    ``has_aux=True`` (``f`` returns ``(value, aux)``), ``((value, aux), gradient)``.

    >>> import numba, numpy as np, enzyme_py as ez
    >>> @numba.njit
    ... def energy(x, k):
    ...     return k * np.sum(x * x)
    >>> ez.value_and_grad(energy, argnums=(0, 1))(np.array([1.0, 2.0]), 3.0)
    (15.0, (array([ 6., 12.]), 5.0))
    """
    return _gradient(f, argnums, with_value=True, has_aux=has_aux)


def _gradient(f: Any, argnums: Argnums, with_value: bool, has_aux: bool = False) -> Any:
    outer = "value_and_grad" if with_value else "grad"
    lowered = pf.transform(value_and_grad if with_value else grad, f, argnums, has_aux=has_aux)
    if lowered is not None:  # a lambda, def or partial calling a function we differentiate
        return lowered
    if checked_has_aux(has_aux, outer):
        if is_result(f):
            refuse(f"{outer}(..., has_aux=True)", f)
        return AuxGradient(f, argnums, with_value)
    g = as_gradient(f)
    if g is not None:  # grad(grad(f, a), b): a second derivative
        return GradientOfGradient(g, argnums, with_value)
    second = second_of(f)
    if second is not None:  # grad(grad(grad(f))) and the like: a third derivative
        return of_second(outer, second, argnums, with_value)
    if is_result(f):
        refuse("value_and_grad" if with_value else "grad", f)
    return Gradient(f, argnums, with_value)


def jvp(
    f: Any, primals: Sequence[Any], tangents: Sequence[Any], has_aux: bool = False
) -> tuple[Any, ...]:
    """``(f(*primals), directional derivative along tangents)`` by one forward pass;
    with ``has_aux=True`` (``f`` returns ``(value, aux)``), ``(value, its tangent, aux)``
    from the same pass, as JAX's.

    ``tangents`` has one entry per primal: an array like a float array, a float for a
    float scalar, or None (no tangent: zero; integers are always Const). Omitted
    defaults of ``f`` are filled in as Const. ``f`` runs on the primals given (it writes
    its output arrays as a call of ``f`` does); the caller's tangents are not written.

    For a function that returns a value: ``(y, dy)``, ``dy`` shaped like ``y``.
    For a function that returns nothing and writes output arrays (``f(x, out)``), the
    outputs are the arrays it writes, as JAX's outputs are what a function returns:
    ``(None, tangents_out)``, where ``tangents_out`` has one entry per primal, the
    tangent of each float array after ``f`` ran (an output array's is the
    directional derivative of what ``f`` wrote into it; an input's is its tangent, or
    zeros) and None for the other arguments.

    >>> import math, numba, numpy as np, enzyme_py as ez
    >>> @numba.njit
    ... def square(x, out):
    ...     for i in range(x.shape[0]):
    ...         out[i] = x[i] * x[i]
    >>> x, out = np.array([1.0, 3.0]), np.zeros(2)
    >>> ez.jvp(square, (x, out), (np.array([1.0, 0.5]), None))
    (None, (array([1. , 0.5]), array([2., 3.])))
    >>> out                              # the primal output, written by square
    array([1., 9.])

    ``jvp(grad(f), primals, tangents)`` (JAX's Hessian-vector product) is
    ``ez.hvp(f, primals, tangents)``: ``(gradient, H v)`` with respect to argument 0.
    """
    if len(primals) != len(tangents):
        raise ValueError(f"jvp got {len(primals)} primals and {len(tangents)} tangents")
    if pf.is_python_function(f):
        return _jvp_of_python_function(f, primals, tangents, has_aux)
    if checked_has_aux(has_aux, "jvp"):
        who = f"jvp({tf.name_of(f)}, has_aux=True)"
        if is_result(f):
            refuse(who, f)
        pair_types(f, tf.with_defaults(f, primals, who), who)
        (value, aux), (tangent, _) = jvp(f, primals, tangents)
        return value, tangent, aux
    if isinstance(f, Pullback):  # a linear map: (vjp_fn(c), vjp_fn(dc))
        return f.jvp(primals, tangents)
    g = as_gradient(f)
    if g is not None:  # JAX's Hessian-vector product idiom: forward over reverse
        return g.jvp(primals, tangents)
    third = jvp_of(f, primals, tangents)  # of a second derivative: T v
    if third is not None:
        return third
    if is_result(f):
        refuse("jvp", f)
    args = tf.with_defaults(f, primals, f"jvp({tf.name_of(f)})")
    tangents = (*tangents, *([None] * (len(args) - len(tangents))))
    derivatives = tf.derivatives_of(f)
    writes = derivatives.may_write(args, combined=False)
    acts: list[Activity] = []
    given: dict[int, Any] = {}
    for i, (p, t) in enumerate(zip(args, tangents, strict=True)):
        if tf.is_float_array(p) and (t is not None or writes[i]):
            acts.append(Dual)  # a zero tangent for an output or scratch array
            given[i] = np.zeros_like(p) if t is None else tf.as_tangent(t, p, i)
        elif t is not None and (isinstance(p, np.ndarray) or tf.is_float_scalar(p)):
            acts.append(tf.activity_of(p, i, Forward))
            given[i] = tf.as_tangent(t, p, i)
        else:
            acts.append(Const)
    nothing = tf.returns_nothing(f, args)
    df = derivatives.get(Forward, acts, None if nothing else Dual)
    result = df(*tf.interleave(args, acts, given))
    if not nothing:
        y, dy = result
        return y, dy
    return None, tuple(
        (given[i] if i in given else np.zeros_like(p)) if tf.is_float_array(p) else None
        for i, p in enumerate(args[: len(primals)])
    )


def vjp(f: Any, *primals: Any, has_aux: bool = False) -> tuple[Any, ...]:
    """``(f(*primals), vjp_fn)``; ``vjp_fn(cotangent)`` returns one entry per primal:
    the pullback for float arrays and scalars, None for the others. With
    ``has_aux=True`` (``f`` returns ``(value, aux)``): ``(value, vjp_fn, aux)``, as
    JAX's, ``vjp_fn`` taking the value's cotangent.

    ``f`` runs once, on the primals given; for a function returning a float, that one
    run is Enzyme's augmented forward pass (split mode), and ``vjp_fn`` runs only the
    reverse pass from its tape (kept until ``vjp_fn`` is collected). ``vjp_fn``
    differentiates at the primals as they were when ``vjp`` was called (copies),
    however often it is called and whatever ``f`` overwrites. For a function that
    returns a float, the cotangent is a float; for one that returns an array (or a
    tuple), an array shaped like it (a tuple of them, floats for its scalars).
    For a function that returns nothing and writes output arrays, the cotangent has one
    entry per primal, as ``jvp``'s tangents do: an array like each output array (the
    cotangent of what ``f`` writes there), None for the others; an output array's
    pullback is the cotangent of the values it held before ``f`` ran (zero unless ``f``
    reads them).

    >>> import numba, numpy as np, enzyme_py as ez
    >>> @numba.njit
    ... def scale(x, a, out):
    ...     for i in range(x.shape[0]):
    ...         out[i] = a * x[i]
    >>> x, out = np.array([1.0, 2.0]), np.zeros(2)
    >>> value, vjp_fn = ez.vjp(scale, x, 3.0, out)
    >>> vjp_fn((None, None, np.array([1.0, 10.0])))
    (array([ 3., 30.]), 21.0, array([0., 0.]))
    """
    if pf.is_python_function(f):
        return _vjp_of_python_function(f, primals, has_aux)
    if checked_has_aux(has_aux, "vjp"):
        return _vjp_with_aux(f, primals)
    n = len(primals)
    if isinstance(f, Pullback):  # a linear map: its pullback is its transpose
        return f.vjp(primals)
    g = as_gradient(f)
    if g is not None:  # its pullback is H c: forward over reverse
        point = tf.fresh(tf.with_defaults(g.f, primals, f"vjp({g.__name__})"))
        pullback = g.pullback(point, n)  # checks g first
        transpose = _forward_at(g, point, n, g.__name__)
        return g(*primals), Pullback(pullback, g.__name__, transpose)
    second = second_of(f)
    if second is not None:  # of a second derivative: C -> sum C_ab T_abj, third derivatives
        point = tf.fresh(primals)
        value, pull = vjp_of_second(second, primals)
        return value, Pullback(pull, second.name, _forward_at(f, point, n, second.name))
    if is_result(f):
        refuse("vjp", f)
    args = tf.with_defaults(f, primals, f"vjp({tf.name_of(f)})")
    derivatives = tf.derivatives_of(f)
    nums = tuple(i for i in range(n) if tf.is_float_array(args[i]) or tf.is_float_scalar(args[i]))
    # The point vjp_fn differentiates at: the arrays as they are now, before f runs
    # (it may overwrite them) and whatever the caller does with them later.
    at = tuple(tf.fresh(args))
    nothing = tf.returns_nothing(f, args)
    arrays = not nothing and tf.returns_arrays(f, args)
    split = None
    if not nothing and not arrays:
        # Split mode: the augmented forward pass runs once, on the copies, and keeps its
        # tape; vjp_fn runs only the reverse pass. What f writes into the copies goes
        # back into the caller's arrays, as if f had run on them.
        try:
            split = tf.SplitCall(derivatives, at, nums)
        except (ActivityError, EnzymeError):
            split = None  # refused (e.g. a Numba function returning a tuple): recompute
    if split is not None:
        value = split.value
        for i, written in enumerate(derivatives.may_write(args, combined=False)):
            if written and isinstance(args[i], np.ndarray):
                args[i][...] = at[i]
    else:
        value = derivatives.get(Forward, [Const] * len(args), None if nothing else Const)(*args)

    def vjp_fn(cotangent: Any) -> tuple[Any, ...]:
        if split is not None:
            seed = _real_number(cotangent, "the cotangent given to vjp_fn", "a float scalar")
            pullback = dict(zip(nums, split.pull(seed), strict=True))
            return tuple(pullback.get(i) for i in range(n))
        if nothing:
            return _pullback_of_outputs(derivatives, at, nums, n, cotangent)
        if arrays:  # the cotangent is shaped like the result (a tuple for a tuple)
            _, grads = tf.reverse_call(derivatives, tf.fresh(at), nums, DuplicatedOnly, cotangent)
            pullback = dict(zip(nums, grads, strict=True))
            return tuple(pullback.get(i) for i in range(n))
        seed = _real_number(cotangent, "the cotangent given to vjp_fn", "a float scalar")
        _, grads = tf.reverse_call(derivatives, tf.fresh(at), nums, ActiveOnly, seed)
        pullback = dict(zip(nums, grads, strict=True))
        return tuple(pullback.get(i) for i in range(n))

    transpose = _forward_at(f, at, n, tf.name_of(f), outputs=nothing)
    return value, Pullback(vjp_fn, tf.name_of(f), transpose)


def _jvp_of_python_function(
    f: Any, primals: Sequence[Any], tangents: Sequence[Any], has_aux: bool
) -> tuple[Any, ...]:
    """``jvp`` of a lambda, def or partial: that of the function it calls, the tangents
    at the positions its primals take there (see _python_functions)."""
    nums = [i for i, t in enumerate(tangents) if t is not None]
    call = pf.lower(f, primals, {}, nums, f"jvp({tf.name_of(f)})")
    result = jvp(call.target, call.args, call.spread(tangents), has_aux=has_aux)
    if result[0] is None and isinstance(result[1], tuple):  # output arrays: per primal
        back = {i: result[1][p] for i, p in call.where.items()}
        for i, primal in enumerate(primals):  # an output array passed on as it is
            if i not in back and isinstance(primal, np.ndarray):
                at = next((p for p, a in enumerate(call.args) if a is primal), None)
                back[i] = None if at is None else result[1][at]
        return None, tuple(back.get(i) for i in range(len(primals)))
    return result


def _vjp_of_python_function(f: Any, primals: Sequence[Any], has_aux: bool) -> tuple[Any, ...]:
    """``vjp`` of a lambda, def or partial: that of the function it calls; the pullback
    returns one entry per primal of ``f`` (None where it is not a float)."""
    nums = [i for i, p in enumerate(primals) if tf.is_float_array(p) or tf.is_float_scalar(p)]
    call = pf.lower(f, primals, {}, nums, f"vjp({tf.name_of(f)})")
    result = vjp(call.target, *call.args, has_aux=has_aux)
    inner = result[1]

    def vjp_fn(cotangent: Any) -> tuple[Any, ...]:
        found = inner(cotangent)
        return tuple(found[call.where[i]] if i in call.where else None for i in range(len(primals)))

    return (result[0], vjp_fn, *result[2:])


def _vjp_with_aux(f: Any, primals: Sequence[Any]) -> tuple[Any, ...]:
    """``vjp(f, *primals, has_aux=True)``: the pullback of f's value alone (the aux
    part's cotangent zero; an integer or boolean aux has none)."""
    who = f"vjp({tf.name_of(f)}, has_aux=True)"
    if is_result(f):
        refuse(who, f)
    pair_types(f, tf.with_defaults(f, primals, who), who)
    (value, aux), pull = vjp(f, *primals)
    differentiable = np.asarray(aux).dtype.kind == "f"
    zero = (np.zeros_like(aux) if isinstance(aux, np.ndarray) else 0.0) if differentiable else None

    def vjp_fn(cotangent: Any) -> tuple[Any, ...]:
        return pull((cotangent, zero))

    return value, vjp_fn, aux


def _forward_at(
    f: Any, at: Sequence[Any], n: int, name: str, outputs: bool = False
) -> Callable[[Any], Any]:
    """The transpose of vjp(f, *primals)'s pullback: ``u -> J u``, f's forward
    derivative at the primals (copies ``at``, defaults filled in) along ``u``, one
    tangent per primal (None for zero), shaped like the pullback's result. For a
    function that writes output arrays (``outputs``), one tangent per primal."""

    def transpose(u: Any) -> Any:
        if not isinstance(u, (tuple, list)) or len(u) != n:
            raise TypeError(
                f"the cotangent of the pullback of vjp_fn of {name} is shaped like vjp_fn's "
                f"result: a tuple of {n} entries, one per primal (None for the non-float ones)"
            )
        tangents = (*u, *([None] * (len(at) - n)))
        found = jvp(f, tf.fresh(at), tangents)[1]
        return found[:n] if outputs else found

    return transpose


def _pullback_of_outputs(
    derivatives: tf.Derivatives,
    at: Sequence[Any],
    nums: tuple[int, ...],
    n: int,
    cotangent: Any,
) -> tuple[Any, ...]:
    """vjp_fn of a function that returns nothing: the cotangents seed the shadows of
    the output arrays; every shadow then holds its array's pullback."""
    if not isinstance(cotangent, (tuple, list)) or len(cotangent) != n:
        raise TypeError(
            "the function returns nothing, so vjp_fn takes one cotangent per primal "
            f"({n}: an array like each output array it writes, None for the others); got "
            + (
                f"{len(cotangent)} entries"
                if isinstance(cotangent, (tuple, list))
                else type(cotangent).__name__
            )
        )
    args = tf.fresh(at)
    acts = [
        (Duplicated if isinstance(a, np.ndarray) else Active) if i in nums else Const
        for i, a in enumerate(args)
    ]
    shadows = tf.zero_shadows(args, acts)
    for i, c in enumerate(cotangent):
        if c is not None:
            if i not in shadows:
                raise TypeError(
                    f"cotangent {i} given to vjp_fn: argument {i} is not a float array, "
                    "so it takes None"
                )
            seed = tf.as_tangent(c, args[i], i)
            if seed.shape != args[i].shape:
                raise ValueError(
                    f"cotangent {i} given to vjp_fn has shape {seed.shape}; its array "
                    f"has shape {args[i].shape}"
                )
            shadows[i] += seed
    df = derivatives.get(Reverse, acts, None)
    _, *adjoints = df(*tf.interleave(args, acts, shadows))
    active = iter(adjoints)
    grads = {i: shadows[i] if i in shadows else next(active) for i in nums}
    return tuple(grads.get(i) for i in range(n))
