"""Helpers' results differentiated again, as JAX composes its transforms.

``grad(f, a)`` (and ``value_and_grad``) is what the other transforms take: each
composition is one forward-over-reverse call of ``f`` (``hessian_vector``), because
the Hessian is symmetric: ``grad(grad(f, a), b)`` is column ``a`` of the Hessian read
at ``b``, ``vjp(grad(f, a))``'s pullback of ``c`` is ``H c`` (tangent ``c`` at ``a``),
``jvp(grad(f, a))`` is ``H v``. The results are those of reverse over reverse (JAX's
``grad(grad(f))``) wherever ``f`` is twice differentiable.

Second derivatives differentiated again (third derivatives: ``grad``, ``jvp``, ``vjp``
and the Jacobians of a second derivative, ``hessian`` and ``hvp`` of ``grad(f, a)``) are
``_third_order``'s. A Jacobian of a scalar-valued function (no ``output=``) composes
as the gradient it is. What does not compose raises a ``TypeError``
(``NotComposable``) that says what to write instead: fourth derivatives, ``grad`` of a
function whose value is an array or a pair, ``hessian`` or ``ez.autodiff`` of a
second derivative, a Jacobian with ``output=`` differentiated again. vjp's pullbacks
are linear maps, differentiated again as such (``_linear``); a Jacobian of
``value_and_grad`` is the pair (gradient, Hessian blocks).

>>> import math, numba, numpy as np, enzyme_py as ez
>>> @numba.njit
... def f(x, k):
...     return k * k * np.sum(x ** 3)
>>> x = np.array([1.0, 2.0])
>>> ez.grad(ez.grad(f, 1), 0)(x, 1.5)          # d/dx (df/dk) = 6 k x^2
array([ 9., 36.])
>>> g, vjp_fn = ez.vjp(ez.grad(f), x, 1.5)      # g = 3 k^2 x^2
>>> vjp_fn(np.array([1.0, 0.0]))                # (6 k^2 x c, 6 k x^2 . c)
(array([13.5,  0. ]), 9.0)
>>> @numba.njit
... def cube(x):
...     return x ** 3
>>> ez.grad(ez.grad(cube))(2.0)                 # 6 x
12.0
>>> ez.autodiff(ez.grad(cube), ez.Forward, ez.Dual, ez.Dual)(2.0, 1.0)
(12.0, 12.0)
>>> ez.grad(ez.grad(f))(x, 1.5)
Traceback (most recent call last):
    ...
enzyme_py._transforms.NotComposable: grad(grad(f)): argument 0 is an array (2,), ...
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import numpy as np

from enzyme_py import _python_functions as pf
from enzyme_py import _transforms as tf
from enzyme_py._arguments import real_number
from enzyme_py._linear import Pullback, refuse_pullback
from enzyme_py._reverse_plan import NativeCall
from enzyme_py._third_order import FOURTH, Second, ThirdDerivative, jvp_of_second, of_second
from enzyme_py._transforms import Argnums, NotComposable
from enzyme_py.core import (
    Active,
    ActiveOnly,
    Const,
    Dual,
    DualOnly,
    Duplicated,
    DuplicatedOnly,
    Forward,
    Reverse,
)

__all__ = [
    "Gradient",
    "GradientOfGradient",
    "NotComposable",
    "Pullback",
    "hvp",
    "is_result",
    "refuse",
]

_DUP = (Duplicated, DuplicatedOnly)


SECOND = (
    "the second derivatives are ez.hessian(f, argnums) (the blocks), ez.hvp(f, primals, "
    "tangents) (H v) and ez.grad(ez.grad(f, a), b) for a float scalar argument a"
)


def refuse(outer: str, inner: Any) -> NoReturn:
    """Raise NotComposable for ``outer`` applied to helper result ``inner``."""
    if isinstance(inner, Pullback):
        refuse_pullback(outer, inner)
    name = getattr(inner, "__name__", type(inner).__name__)
    if getattr(inner, "has_aux", False):
        raise NotComposable(
            f"{outer} of {name}: a gradient with has_aux=True is not differentiated again "
            "but by ez.jacobian, ez.jacfwd, ez.jacrev and ez.hessian with has_aux=True "
            "(JAX's jacfwd(grad(f, has_aux=True), has_aux=True)); or differentiate a "
            "function that returns the value alone"
        )
    order = getattr(inner, "order", 0)
    if order == 3 or (order == 2 and outer in ("hessian", "hvp")):
        raise NotComposable(FOURTH.format(outer=outer, name=name))
    if order == 2 and getattr(inner, "second_order", None) is None:  # from ez.autodiff
        raise NotComposable(
            f"{outer} of {name}: a second derivative made by ez.autodiff is not "
            "differentiated again; third derivatives come from the helpers "
            "(ez.grad(ez.grad(ez.grad(f))), ez.jvp(ez.hessian(f), primals, tangents), "
            "ez.jacobian(ez.hessian(f))) or from nesting ez.autodiff(..., ez.Forward, ...) "
            "over a reverse derivative by hand"
        )
    if order == 2:
        raise NotComposable(
            f"{outer} of {name}: a second derivative is differentiated again by ez.grad, "
            "ez.value_and_grad, ez.jacobian / ez.jacfwd / ez.jacrev, ez.jvp and ez.vjp "
            f"(third derivatives), not by {outer}: write ez.jvp(second, primals, tangents) "
            "for T v, or ez.jacobian(second) for the blocks (ez.autodiff nests by hand over "
            "ez.autodiff derivatives)"
        )
    raise NotComposable(
        f"{outer} of {name}: the helpers differentiate again the derivatives of "
        f"scalar-valued functions, without output=; {SECOND}"
    )


def as_gradient(f: Any) -> Gradient | None:
    """f as a Gradient: itself, or jacobian / jacfwd / jacrev of a function without
    output= (its gradient, when that function is scalar-valued: checked per call)."""
    if isinstance(f, Gradient):
        return f
    convert = getattr(f, "as_gradient", None)
    return convert() if convert is not None else None


def second_of(f: Any) -> Second | None:
    """What a helper's second derivative f is (see _third_order.Second), or None."""
    describe = getattr(f, "second_order", None)
    return describe() if describe is not None and getattr(f, "order", 0) == 2 else None


class Gradient:
    """What ``grad`` / ``value_and_grad`` return: picklable (as f and argnums, its
    derivatives made again in the new process) when f is. Differentiable again by
    ``grad``, ``value_and_grad``, ``jvp``, ``vjp``, ``jacfwd``, ``jacrev`` and
    ``ez.autodiff`` (see this module's docstring)."""

    order = 1

    def __init__(self, f: Any, argnums: Argnums, with_value: bool, how: str | None = None):
        self.f, self.argnums, self.with_value, self.how = f, argnums, with_value, how
        self._derivatives = tf.Derivatives(f)
        self._positions: dict[int, tuple[int, ...]] = {}  # argnums by argument count
        # By argument count: the C++ call of the last plan (_reverse_plan.NativeCall).
        self._native: dict[int, NativeCall] = {}
        outer = how or ("value_and_grad" if with_value else "grad")
        self.__name__ = f"{outer}({tf.name_of(f)})"

    def scalar_valued(self, args: Sequence[Any]) -> None:
        """Refuse a Jacobian of a function returning an array differentiated again as
        the gradient it is for scalar-valued functions."""
        if self.how is not None and tf.returns_arrays(self.f, args):
            raise NotComposable(
                f"{self.__name__}: {tf.name_of(self.f)} returns an array (or a tuple), so "
                "this is a Jacobian, not a gradient; the helpers differentiate again the "
                "derivatives of scalar-valued functions only"
            )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        native = None if kwargs else self._native.get(len(args))
        if native is not None:
            try:
                return native.call(*args)
            except Exception as exc:  # miss() raises the function's own errors
                native.miss(exc)
        given = len(args)
        args = tf.bind(self.f, args, kwargs, self.__name__)
        nums = self._positions.get(len(args))
        if nums is None:
            nums = self._positions[len(args)] = tf.positions(self.argnums, len(args))
        ret = Active if self.with_value else ActiveOnly
        value, grads = tf.reverse_call(self._derivatives, args, nums, ret)
        single = tf.single(self.argnums)
        if not kwargs and tf.passes_as_given(self.f, given):
            # Later calls with arguments of these kinds: in C++ (the last kinds seen).
            made = tf.native_reverse_call(self._derivatives, args, nums, ret, single)
            if made is not None:
                self._native[given] = made
        found = grads[0] if single else grads
        return (value, found) if self.with_value else found

    def __reduce__(self) -> tuple[Any, ...]:
        return (Gradient, (self.f, self.argnums, self.with_value, self.how))

    def __repr__(self) -> str:
        return f"<enzyme_py {self.__name__}, argnums={self.argnums!r}>"

    def __enzyme_autodiff__(self, mode: Any, *activities: Any, **options: Any) -> Any:
        return AutodiffOfGradient(self, mode, activities, options)

    # --- the compositions, each one forward-over-reverse call ------------------
    def _floats(self, args: Sequence[Any], nums: Sequence[int], who: str) -> None:
        for i in nums:
            if not (tf.is_float_array(args[i]) or tf.is_float_scalar(args[i])):
                raise TypeError(
                    f"{who}: argument {i} is {type(args[i]).__name__}; only float scalars "
                    "and float arrays can be differentiated (leave it out of argnums)"
                )

    def jvp(self, primals: Sequence[Any], tangents: Sequence[Any]) -> tuple[Any, Any]:
        """``jvp(grad(f, A), primals, tangents)``: (the gradient, H v), as JAX's; for
        value_and_grad ``((value, gradient), (its tangent, H v))``."""
        who = f"jvp({self.__name__})"
        args = tf.fresh(tf.with_defaults(self.f, primals, who))
        nums = tf.positions(self.argnums, len(args))
        self._floats(args, nums, who)
        self.scalar_valued(args)
        given = tf.given_tangents(args, tangents, who)
        everything = tuple(sorted(set(nums) | set(given)))
        grads, products = tf.hessian_vector(self._derivatives, args, everything, given)
        g, hv = _pick(grads, nums, self.argnums), _pick(products, nums, self.argnums)
        if not self.with_value:
            return g, hv
        value = self._derivatives.get(Forward, [Const] * len(args), Const)(*tf.fresh(args))
        dvalue = sum(float(np.sum(np.asarray(grads[i]) * given[i])) for i in given)
        return (value, g), (dvalue, hv)

    def pullback(self, at: Sequence[Any], n: int) -> Callable[[Any], tuple[Any, ...]]:
        """vjp_fn of ``vjp(grad(f, A), *primals)``: the cotangent c (shaped like the
        gradient; for value_and_grad a pair ``(c_value, c_gradient)``) gives, per
        primal, ``c_value * grad f + H c`` (None for the non-float primals)."""
        nums = tf.positions(self.argnums, len(at))
        self.scalar_valued(at)
        floats = tuple(i for i in range(n) if tf.is_float_array(at[i]) or tf.is_float_scalar(at[i]))

        def vjp_fn(cotangent: Any) -> tuple[Any, ...]:
            c_value = 0.0
            if self.with_value:
                if not isinstance(cotangent, (tuple, list)) or len(cotangent) != 2:
                    raise TypeError(
                        f"the pullback of {self.__name__} takes a pair (cotangent of the "
                        "value, cotangent of the gradient)"
                    )
                c_value = real_number(cotangent[0], "the value's cotangent", "a float")
                cotangent = cotangent[1]
            if tf.single(self.argnums):
                cotangent = (cotangent,)
            if not isinstance(cotangent, (tuple, list)) or len(cotangent) != len(nums):
                raise TypeError(
                    f"the pullback of {self.__name__} takes one cotangent per argnum "
                    f"({len(nums)}), shaped like its gradient"
                )
            given = {}
            for i, c in zip(nums, cotangent, strict=True):
                given[i] = tf.as_tangent(c, at[i], i)
                if np.shape(given[i]) != np.shape(at[i]):
                    raise ValueError(
                        f"the cotangent of the gradient of argument {i} has shape "
                        f"{np.shape(given[i])}; the gradient has shape {np.shape(at[i])}"
                    )
            grads, products = tf.hessian_vector(self._derivatives, tf.fresh(at), floats, given)
            found = {
                i: (products[i] + c_value * grads[i]) if c_value else products[i] for i in floats
            }
            return tuple(found.get(i) for i in range(n))

        return vjp_fn


class GradientOfGradient:
    """``grad(grad(f, a), b)`` / ``value_and_grad(grad(f, a), b)`` for a float scalar
    argument a: ``d/dx_b (df/dx_a)``, shaped like x_b, by one forward-over-reverse
    call with tangent 1 at a (picklable when f is)."""

    order = 2

    def __init__(self, inner: Gradient, argnums: Argnums, with_value: bool):
        self.inner, self.argnums, self.with_value = inner, argnums, with_value
        outer = "value_and_grad" if with_value else "grad"
        self.__name__ = f"{outer}({inner.__name__})"
        if inner.with_value or not tf.single(inner.argnums):
            raise NotComposable(
                f"{self.__name__}: {inner.__name__} returns "
                + ("a pair (value, gradient)" if inner.with_value else "a tuple of gradients")
                + f"; ez.grad needs a scalar-valued function. Write {outer}(ez.grad(f, a), "
                f"b) for one float scalar argument a; {SECOND}"
            )

    def __reduce__(self) -> tuple[Any, ...]:
        return (GradientOfGradient, (self.inner, self.argnums, self.with_value))

    def second_order(self) -> Second:
        if self.with_value:
            raise NotComposable(
                f"{self.__name__} returns a pair (the first derivative, the second); "
                "ez.grad needs a scalar-valued function: differentiate "
                f"ez.grad({self.inner.__name__}, b) instead"
            )
        inner = self.inner
        return Second(
            inner.f, inner._derivatives, inner.argnums, self.argnums, (inner.argnums,),
            self.__name__,
        )  # fmt: skip

    def __repr__(self) -> str:
        return f"<enzyme_py {self.__name__}, argnums={self.argnums!r}>"

    def __enzyme_autodiff__(self, mode: Any, *activities: Any, **options: Any) -> Any:
        refuse("ez.autodiff", self)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        f = self.inner.f
        values = tf.fresh(tf.bind(f, args, kwargs, self.__name__))
        (a,) = tf.positions(self.inner.argnums, len(values))
        if not tf.is_float_scalar(values[a]):
            raise NotComposable(
                f"{self.__name__}: argument {a} is "
                + (
                    f"an array {np.shape(values[a])}"
                    if isinstance(values[a], np.ndarray)
                    else type(values[a]).__name__
                )
                + f", so {self.inner.__name__} returns an array (or is not defined); ez.grad "
                f"needs a scalar-valued function. {SECOND[0].upper()}{SECOND[1:]} (also "
                "ez.jacfwd(ez.grad(f)))"
            )
        nums = tf.positions(self.argnums, len(values))
        self.inner._floats(values, nums, self.__name__)
        self.inner.scalar_valued(values)
        grads, products = tf.hessian_vector(
            self.inner._derivatives, values, tuple(sorted({a, *nums})), {a: 1.0}
        )
        found = _pick(products, nums, self.argnums)
        return (grads[a], found) if self.with_value else found


def is_result(f: Any) -> bool:
    """Whether f is a helper's result (grad, vjp_fn, jacobian, hessian, ...)."""
    return isinstance(f, (Gradient, GradientOfGradient, Pullback)) or bool(
        getattr(type(f), "helper_result", False)
    )


def _pick(found: dict[int, Any], nums: tuple[int, ...], argnums: Argnums) -> Any:
    return found[nums[0]] if tf.single(argnums) else tuple(found[i] for i in nums)


class AutodiffOfGradient:
    """``ez.autodiff(grad(f, a), mode, *activities)``: the derivative of the function
    ``x -> grad(f, a)(x)`` with autodiff's calling conventions, made at the first call
    (from the arguments' types) by forward over reverse.

    Forward: ``x`` for Const, ``x, dx`` for Dual(Only); the return Dual gives
    ``(gradient, its tangent H v)``, DualOnly the tangent, Const the gradient.
    Reverse: ``x`` for Const/Active, ``x, dx`` for Duplicated(Only) (the adjoint is added
    into ``dx``), then the seed: a float for a float scalar a (return Active or
    ActiveOnly), an array like x_a for an array (return Duplicated or DuplicatedOnly);
    returns ``(gradient or None, *adjoints of Active parameters)``.
    """

    helper_result = True
    order = 2

    def __enzyme_autodiff__(self, mode: Any, *activities: Any, **options: Any) -> Any:
        refuse("ez.autodiff", self)

    def __init__(self, g: Gradient, mode: Any, activities: Sequence[Any], options: dict):
        used = [
            k
            for k, v in options.items()
            if not (v is None or v is False or (k == "width" and v == 1))
        ]
        if used:
            raise NotComposable(
                f"ez.autodiff of {g.__name__} takes only the mode and activities; got "
                + "=, ".join(used)
                + "="
            )
        if g.with_value or not tf.single(g.argnums):
            raise NotComposable(
                f"ez.autodiff of {g.__name__}: it returns a pair or a tuple; differentiate "
                "ez.grad(f, a) for one argument a, or use ez.jvp / ez.vjp of it"
            )
        if (mode is not Forward and mode is not Reverse) or not activities:
            raise NotComposable(
                f"ez.autodiff of {g.__name__} takes ez.Forward or ez.Reverse and one activity "
                "per parameter of f, then one for the gradient it returns"
            )
        self.g, self.mode = g, mode
        self.params, self.ret = tuple(activities[:-1]), activities[-1]
        allowed = (Const, Dual, DualOnly) if mode is Forward else (Const, Active, *_DUP)
        returns = allowed if mode is Forward else (*allowed, ActiveOnly)
        for k, act in enumerate(activities):
            fits = returns if k == len(activities) - 1 else allowed
            if act not in fits:
                what = "the return" if k == len(activities) - 1 else f"parameter {k}"
                raise NotComposable(
                    f"ez.autodiff of {g.__name__} in {mode.name} mode: {what} takes "
                    f"{', '.join(a.name for a in fits)}; got {act!r}"
                )

    def __repr__(self) -> str:
        acts = ", ".join(a.name for a in (*self.params, self.ret))
        return f"<enzyme_py {self.mode.name}({acts}) derivative of {self.g.__name__}>"

    def __call__(self, *call: Any) -> Any:
        values: list[Any] = []
        extra: dict[int, Any] = {}
        pos = 0
        for i, act in enumerate(self.params):
            if pos >= len(call):
                raise TypeError(f"{self!r} got too few arguments")
            values.append(call[pos])
            if act.shadow:
                if pos + 1 >= len(call):
                    raise TypeError(f"{self!r}: argument {i} needs its shadow after it")
                extra[i] = call[pos + 1]
            pos += 2 if act.shadow else 1
        rest = call[pos:]
        (a,) = tf.positions(self.g.argnums, len(values))
        if self.mode is Forward:
            if rest:
                raise TypeError(f"{self!r} got {len(rest)} arguments too many")
            tangents = [extra.get(i) for i in range(len(values))]
            g, hv = self.g.jvp(values, tangents)
            return {Dual: (g, hv), DualOnly: hv, Const: g}[self.ret]
        seeded = self.ret is not Const
        if len(rest) != (1 if seeded else 0):
            raise TypeError(f"{self!r} takes the seed after the arguments (and nothing else)")
        scalar = tf.is_float_scalar(values[a])
        wanted = (Active, ActiveOnly) if scalar else _DUP
        if self.ret not in (*wanted, Const):
            raise NotComposable(
                f"{self!r}: argument {a} is {'a float scalar' if scalar else 'an array'}, "
                f"so the gradient's return activity is {' or '.join(w.name for w in wanted)}"
            )
        args = tf.fresh(tf.with_defaults(self.g.f, values, repr(self)))
        for i, act in enumerate(self.params):
            kind = "a float scalar" if act is Active else "a float array" if act.shadow else ""
            if kind and not (tf.is_float_scalar if act is Active else tf.is_float_array)(args[i]):
                raise TypeError(f"{self!r}: argument {i} is {act.name}, so it must be {kind}")
        active = tuple(i for i, act in enumerate(self.params) if act is not Const)
        seed = {a: tf.as_tangent(rest[0], args[a], a)} if seeded else {}
        grads, products = tf.hessian_vector(
            self.g._derivatives, args, tuple(sorted({a, *active})), seed
        )
        adjoints = []
        for i, act in enumerate(self.params):
            if act is Active:
                adjoints.append(products[i])
            elif act.shadow:
                extra[i] += products[i]
        primal = grads[a] if self.ret in (Active, Duplicated) else None
        return (primal, *adjoints)


def hvp(f: Any, primals: Sequence[Any], tangents: Sequence[Any]) -> tuple[Any, Any]:
    """JAX's ``jax.jvp(jax.grad(f), primals, tangents)``: ``(gradient, H v)`` of scalar-
    valued ``f`` with respect to argument 0 (a float array), and its directional
    derivative along ``tangents`` (one per primal: an array like a float array, a float
    for a float scalar, or None for zero), by one forward-over-reverse call. Tangents
    of other arguments add their mixed second derivatives, as in JAX. Omitted defaults
    are filled in; ``f`` runs on copies of the primals.

    >>> import numba, numpy as np, enzyme_py as ez
    >>> @numba.njit
    ... def f(x):
    ...     return x[0] ** 3 + x[0] * x[1]
    >>> ez.hvp(f, (np.array([1.0, 2.0]),), (np.array([1.0, 0.0]),))
    (array([5., 1.]), array([6., 1.]))
    """
    g = as_gradient(f)
    if g is not None:  # jvp(grad(grad(g, a), 0)): third derivatives
        second = _second_of_gradient("hvp", g, 0)
        return jvp_of_second(*second[:5], primals, tangents, f"hvp({g.__name__})")
    if pf.is_python_function(f):  # a lambda, def or partial: the function it calls
        return _hvp_of_python_function(f, primals, tangents)
    if is_result(f):
        refuse("hvp", f)
    if len(primals) != len(tangents):
        raise ValueError(f"hvp got {len(primals)} primals and {len(tangents)} tangents")
    args = tf.fresh(tf.with_defaults(f, primals, f"hvp({tf.name_of(f)})"))
    tangents = (*tangents, *([None] * (len(args) - len(tangents))))
    if tf.returns_arrays(f, args):
        raise TypeError(
            f"hvp({tf.name_of(f)}): {tf.name_of(f)} returns an array (or a tuple), and H v "
            "is for scalar-valued functions; its second derivatives are "
            f"ez.hessian({tf.name_of(f)}) (shaped result.shape + x.shape + x.shape)"
        )
    if not args or not tf.is_float_array(args[0]):
        got = type(args[0]).__name__ if args else "no arguments"
        raise TypeError(
            f"hvp differentiates argument 0 of {tf.name_of(f)}, which must be a float "
            f"array; got {got}"
        )
    given = {i: tf.as_tangent(t, args[i], i) for i, t in enumerate(tangents) if t is not None}
    for i in given:
        if not (tf.is_float_array(args[i]) or tf.is_float_scalar(args[i])):
            raise TypeError(
                f"hvp: argument {i} of {tf.name_of(f)} is not a float array or scalar; "
                "its tangent must be None"
            )
    gradient, hv = tf.hessian_vector(tf.derivatives_of(f), args, (0,), given)
    return gradient[0], hv[0]


def _hvp_of_python_function(
    f: Any, primals: Sequence[Any], tangents: Sequence[Any]
) -> tuple[Any, Any]:
    if len(primals) != len(tangents):
        raise ValueError(f"hvp got {len(primals)} primals and {len(tangents)} tangents")
    nums = sorted({0, *(i for i, t in enumerate(tangents) if t is not None)})
    call = pf.lower(f, primals, {}, nums, f"hvp({tf.name_of(f)})")
    return _gradient_of(call.target, call.where[0]).jvp(call.args, call.spread(tangents))


# The gradients hvp of a Python function used, kept with the function it calls: a loop
# calling ez.hvp(lambda x: f(x, data), ...) plans f's derivatives once.
_gradients: weakref.WeakKeyDictionary[Any, dict[int, Gradient]] = weakref.WeakKeyDictionary()


def _gradient_of(f: Any, argnum: int) -> Gradient:
    try:
        made = _gradients.setdefault(f, {})
    except TypeError:  # not weak-referenceable
        return Gradient(f, argnum, False)
    found = made.get(argnum)
    if found is None:
        found = made[argnum] = Gradient(f, argnum, False)
    return found


def _second_of_gradient(outer: str, g: Gradient, argnums: Argnums) -> Second:
    """``grad(g, argnums)`` of a Gradient g as the second derivative it is, for ``outer``
    (hessian, hvp) applied to g: g must be scalar-valued (one float scalar argnum)."""
    if g.with_value or not tf.single(g.argnums):
        raise NotComposable(
            f"{outer} of {g.__name__}: it returns "
            + ("a pair (value, gradient)" if g.with_value else "a tuple of gradients")
            + f"; {outer} needs a scalar-valued function: write {outer}(ez.grad(f, a)) for "
            "one float scalar argument a"
        )
    return Second(g.f, g._derivatives, g.argnums, argnums, (g.argnums,), g.__name__)


def hessian_of_gradient(g: Gradient, argnums: Argnums) -> ThirdDerivative:
    """``hessian(grad(f, a), argnums)`` for a float scalar argument a: the blocks
    ``d/dx_c d/dx_b df/dx_a`` (b, c in argnums), shaped ``x_b.shape + x_c.shape``."""
    second = _second_of_gradient("hessian", g, argnums)
    return of_second(f"hessian({g.__name__})", second, argnums, bare=True)


def jvp_of(f: Any, primals: Sequence[Any], tangents: Sequence[Any]) -> tuple[Any, Any] | None:
    """``jvp`` of a helper's second derivative f (third derivatives: ``(its value, T
    v)``), None when f is not one."""
    second = second_of(f)
    if second is None:
        return None
    return jvp_of_second(*second[:5], primals, tangents, second.name)
