"""JAX-named helpers on top of ``autodiff``, for Numba, C and IR functions alike.

Activities are chosen from the arguments of each call, as JAX does: with respect to
the arguments in ``argnums``, a float array is Duplicated (reverse) or Dual (forward),
a float scalar Active or Dual; every other argument is Const. Derivatives are built
once per combination of activities and reused.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from enzyme_py._activities import RecursionBatchRefused
from enzyme_py._api import autodiff
from enzyme_py._convention import real_number as _real_number
from enzyme_py._derivative import Derivative, resolve_function
from enzyme_py.core import (
    Active,
    ActiveOnly,
    Activity,
    Const,
    Dual,
    Duplicated,
    Forward,
    Mode,
    Reverse,
)
from enzyme_py.frontends import numba as numba_frontend

__all__ = ["grad", "hessian", "jacobian", "jvp", "value_and_grad", "vjp"]

Argnums = int | Sequence[int]

# Columns of a Jacobian or Hessian computed per batched call.
_BATCH = 8


def _argnums(argnums: Argnums, n: int) -> tuple[int, ...]:
    nums = (argnums,) if isinstance(argnums, (int, np.integer)) else tuple(argnums)
    for a in nums:
        if isinstance(a, (bool, np.bool_)) or not isinstance(a, (int, np.integer)):
            raise TypeError(f"argnums must be argument positions (ints); got {argnums!r}")
        if not -n <= a < n:
            raise ValueError(f"argnums {argnums!r} is out of range for {n} arguments")
    positions = tuple(int(a) % n for a in nums)
    if len(set(positions)) != len(positions):
        raise ValueError(f"argnums {argnums!r} names an argument twice")
    return positions


def _is_float_scalar(value: Any) -> bool:
    return isinstance(value, (float, np.floating)) and not isinstance(value, bool)


def _activity(value: Any, i: int, mode: Mode) -> Activity:
    """The activity that differentiates argument i, from its value."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind != "f":
            raise TypeError(
                f"argument {i} is an array of {value.dtype}; only float arrays can be "
                "differentiated (leave it out of argnums)"
            )
        return Duplicated if mode is Reverse else Dual
    if _is_float_scalar(value):
        return Active if mode is Reverse else Dual
    raise TypeError(
        f"argument {i} is {type(value).__name__}; only float scalars and float arrays can "
        "be differentiated (pass a float, or leave it out of argnums)"
    )


class _Derivatives:
    """``autodiff(f, mode, *activities, ret, width=...)``, made once per combination."""

    def __init__(self, f: Any):
        self.f = f
        self._made: dict[tuple[Any, ...], Any] = {}

    def get(
        self, mode: Mode, acts: Sequence[Activity], ret: Activity | None, width: int = 1
    ) -> Any:
        key = (mode, tuple(acts), ret, width)
        df = self._made.get(key)
        if df is None:
            df = autodiff(self.f, mode, *acts, *([] if ret is None else [ret]), width=width)
            self._made[key] = df
        return df


_shared: weakref.WeakKeyDictionary[Any, _Derivatives] = weakref.WeakKeyDictionary()


def _derivatives_of(f: Any) -> _Derivatives:
    """The derivatives of ``f`` made so far by the one-shot helpers (jvp, vjp): kept
    with ``f`` so that a loop calling ``ez.jvp(f, ...)`` builds and plans them once."""
    try:
        found = _shared.get(f)
        if found is None:
            found = _shared[f] = _Derivatives(f)
        return found
    except TypeError:  # not weak-referenceable
        return _Derivatives(f)


def _reverse_call(
    derivatives: _Derivatives,
    args: Sequence[Any],
    nums: tuple[int, ...],
    ret: Activity,
    seed: float = 1.0,
) -> tuple[Any, tuple[Any, ...]]:
    """The primal (or None) and the gradient (times ``seed``) with respect to each of nums."""
    acts = [_activity(a, i, Reverse) if i in nums else Const for i, a in enumerate(args)]
    df = derivatives.get(Reverse, acts, ret)
    call: list[Any] = []
    shadows: dict[int, np.ndarray] = {}
    for i, (a, act) in enumerate(zip(args, acts, strict=True)):
        call.append(a)
        if act is Duplicated:
            shadows[i] = np.zeros_like(a)
            call.append(shadows[i])
    primal, *adjoints = df(*call, seed)
    active = iter(adjoints)
    grads = {i: shadows[i] if i in shadows else next(active) for i in sorted(nums)}
    return primal, tuple(grads[i] for i in nums)


class _Gradient:
    """What ``grad`` / ``value_and_grad`` return: picklable (as f and argnums, its
    derivatives made again in the new process) when f is."""

    def __init__(self, f: Any, argnums: Argnums, with_value: bool):
        self.f, self.argnums, self.with_value = f, argnums, with_value
        self._derivatives = _Derivatives(f)
        self.__name__ = ("value_and_grad" if with_value else "grad") + (
            f"({getattr(f, '__name__', None) or getattr(f, 'display_name', 'f')})"
        )

    def __call__(self, *args: Any) -> Any:
        nums = _argnums(self.argnums, len(args))
        ret = Active if self.with_value else ActiveOnly
        value, grads = _reverse_call(self._derivatives, args, nums, ret)
        found = grads[0] if isinstance(self.argnums, (int, np.integer)) else grads
        return (value, found) if self.with_value else found

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Gradient, (self.f, self.argnums, self.with_value))

    def __repr__(self) -> str:
        return f"<enzyme_py {self.__name__}, argnums={self.argnums!r}>"


def grad(f: Any, argnums: Argnums = 0) -> Callable[..., Any]:
    """The gradient of scalar-valued ``f`` with respect to the arguments in ``argnums``.

    Returns a function of the same arguments; it returns one gradient (an array like
    the argument, or a float) for an int ``argnums``, a tuple for a sequence.
    The primal value is not computed (``ActiveOnly``).
    """
    return _Gradient(f, argnums, with_value=False)


def value_and_grad(f: Any, argnums: Argnums = 0) -> Callable[..., Any]:
    """Like ``grad``, returning ``(f(*args), gradient)`` from one reverse pass."""
    return _Gradient(f, argnums, with_value=True)


def jvp(f: Any, primals: Sequence[Any], tangents: Sequence[Any]) -> tuple[Any, Any]:
    """``(f(*primals), directional derivative along tangents)`` by forward mode.

    ``tangents`` has one entry per primal: an array like a float array, a float for a
    float scalar, or None (the argument is Const; integers always are).
    """
    if len(primals) != len(tangents):
        raise ValueError(f"jvp got {len(primals)} primals and {len(tangents)} tangents")
    acts: list[Activity] = []
    call: list[Any] = []
    for i, (p, t) in enumerate(zip(primals, tangents, strict=True)):
        differentiate = t is not None and (isinstance(p, np.ndarray) or _is_float_scalar(p))
        act = _activity(p, i, Forward) if differentiate else Const
        acts.append(act)
        call.append(p)
        if act is Dual:
            call.append(_tangent(t, p, i))
    y, dy = _derivatives_of(f).get(Forward, acts, Dual)(*call)
    return y, dy


def _tangent(t: Any, p: Any, i: int) -> Any:
    """The tangent ``t`` of primal ``p`` (argument i) in p's dtype, if it holds real numbers
    (no silent conversion of strings, None or complex numbers)."""
    where = f"the tangent of argument {i}"
    if not isinstance(p, np.ndarray):
        return _real_number(t, where, "a float scalar like its argument")
    values = np.asarray(t)
    if values.dtype.kind not in "biuf":
        raise TypeError(
            f"{where} must hold real numbers, like its {p.dtype} array; got "
            + (f"dtype {values.dtype}" if isinstance(t, np.ndarray) else type(t).__name__)
        )
    return values.astype(p.dtype, copy=True)  # f may write its input, and so the tangent


def vjp(f: Any, *primals: Any) -> tuple[Any, Callable[[Any], tuple[Any, ...]]]:
    """``(f(*primals), vjp_fn)``; ``vjp_fn(cotangent)`` returns one entry per primal:
    the pullback for float arrays and scalars, None for the others."""
    derivatives = _derivatives_of(f)
    nums = tuple(
        i
        for i, p in enumerate(primals)
        if (isinstance(p, np.ndarray) and p.dtype.kind == "f") or _is_float_scalar(p)
    )
    value = derivatives.get(Forward, [Const] * len(primals), Const)(*primals)
    # The point vjp_fn differentiates at: the arrays as they are now, not as the
    # caller may change them later.
    at = tuple(p.copy() if isinstance(p, np.ndarray) else p for p in primals)

    def vjp_fn(cotangent: Any) -> tuple[Any, ...]:
        seed = _real_number(cotangent, "the cotangent given to vjp_fn", "a float scalar")
        _, grads = _reverse_call(derivatives, at, nums, ActiveOnly, seed)
        pullback = dict(zip(nums, grads, strict=True))
        return tuple(pullback.get(i) for i in range(len(primals)))

    return value, vjp_fn


def _batches(n: int, size: int = _BATCH) -> list[tuple[int, int]]:
    return [(start, min(start + size, n)) for start in range(0, n, size)]


def jacobian(f: Any, argnums: int = 0, output: int | None = None) -> Callable[..., Any]:
    """The Jacobian of ``f`` with respect to argument ``argnums``.

    With ``output=None``, ``f`` returns a float scalar and the Jacobian is its gradient
    (shaped like the argument). With ``output=j``, ``f`` writes its result into the
    array argument j (f: R^n -> R^m written as ``f(x, out)``): the Jacobian has shape
    ``out.shape + x.shape``, computed by batched forward mode (columns in batches).
    """
    if output is None:
        return grad(f, argnums)
    derivatives = _Derivatives(f)

    if not isinstance(argnums, (int, np.integer)) or isinstance(argnums, (bool, np.bool_)):
        raise TypeError(f"jacobian takes one argument position as argnums; got {argnums!r}")

    def jacobian_of(*args: Any) -> np.ndarray:
        i, j = _argnums(argnums, len(args))[0], _argnums(output, len(args))[0]
        x, out = args[i], args[j]
        if not isinstance(x, np.ndarray) or not isinstance(out, np.ndarray):
            raise TypeError("jacobian with output= needs array arguments at argnums and output")
        if i == j or np.shares_memory(x, out):
            # f runs once per batch of columns: each run would start from the last
            # one's result, and the input's tangent would be taken for the output's.
            what = f"are both argument {i}" if i == j else f"(arguments {i} and {j}) overlap"
            raise ValueError(
                f"jacobian: the input (argnums) and the output {what}; f writes its result "
                "into the output, which would change the input it is differentiated at: "
                "pass the output as a separate array"
            )
        n = x.size
        columns = np.empty((out.size, n), dtype=out.dtype)
        try:
            _jacobian_columns(columns, args, i, j, _BATCH)
        except RecursionBatchRefused:
            _jacobian_columns(columns, args, i, j, 1)  # one column at a time
        return columns.reshape(*out.shape, *x.shape)

    def _jacobian_columns(
        columns: np.ndarray, args: tuple[Any, ...], i: int, j: int, batch: int
    ) -> None:
        x, out = args[i], args[j]
        n = x.size
        for start, stop in _batches(n, batch):
            width = stop - start
            acts = [Dual if k in (i, j) else Const for k in range(len(args))]
            df = derivatives.get(Forward, acts, None if _returns_nothing(f, args) else Const, width)
            seeds = np.zeros((width, n), dtype=x.dtype)
            seeds[np.arange(width), np.arange(start, stop)] = 1.0
            tangent_out = np.zeros((width, *out.shape), dtype=out.dtype)
            call: list[Any] = []
            for k, a in enumerate(args):
                call.append(a)
                if k == i:
                    call.append(
                        seeds.reshape(width, *x.shape) if width > 1 else seeds[0].reshape(x.shape)
                    )
                elif k == j:
                    call.append(tangent_out if width > 1 else tangent_out[0])
            df(*call)
            columns[:, start:stop] = tangent_out.reshape(width, -1).T

    return jacobian_of


def _returns_nothing(f: Any, args: Sequence[Any]) -> bool:
    """Whether f returns no value (from its compiled signature)."""
    if numba_frontend.is_dispatcher(f):
        types = tuple(f.typeof_pyval(a) for a in args)
        f.compile(types)
        from numba.core import types as nbtypes

        return isinstance(f.overloads[types].signature.return_type, nbtypes.NoneType)
    return resolve_function(f).ret is None


def hessian(f: Any, argnums: int = 0) -> Callable[..., np.ndarray]:
    """The Hessian of scalar-valued ``f`` with respect to the 1-D float array argument
    ``argnums``: shape (n, n), by forward mode over reverse mode, columns in batches."""
    derivatives = _Derivatives(f)

    def hessian_of(*args: Any) -> np.ndarray:
        i = _argnums(argnums, len(args))[0]
        x = args[i]
        if not isinstance(x, np.ndarray) or x.ndim != 1 or x.dtype.kind != "f":
            raise TypeError(f"hessian needs argument {i} to be a 1-D float array")
        acts = [Duplicated if k == i else Const for k in range(len(args))]
        reverse = derivatives.get(Reverse, acts, ActiveOnly)
        reverse_args: list[Any] = []
        for k, a in enumerate(args):
            reverse_args.append(a)
            if k == i:
                reverse_args.append(np.zeros_like(x))
        if not isinstance(reverse, Derivative):  # a Numba derivative: its specialisation
            reverse = reverse.for_arguments((*reverse_args, 1.0))
        n = x.size
        h = np.empty((n, n), dtype=x.dtype)
        # Enzyme batches derivatives of recursion wrongly: one column at a time then.
        fn = reverse.function
        batch = 1 if fn.module.native.reaches_recursion(fn.name) else _BATCH
        for start, stop in _batches(n, batch):
            width = stop - start
            # Parameters of the reverse derivative: each argument, x's shadow, the seed.
            fwd_acts: list[Activity] = []
            for k in range(len(args)):
                fwd_acts.append(Dual if k == i else Const)
                if k == i:
                    fwd_acts.append(Dual)
            fwd_acts.append(Const)  # the seed
            fwd = autodiff(reverse, Forward, *fwd_acts, width=width)  # cached by the engine
            seeds = np.zeros((width, n), dtype=x.dtype)
            seeds[np.arange(width), np.arange(start, stop)] = 1.0
            hv = np.zeros((width, n), dtype=x.dtype)
            call: list[Any] = []
            for k, a in enumerate(args):
                call.append(a)
                if k == i:
                    call += [
                        seeds if width > 1 else seeds[0],
                        np.zeros_like(x),
                        hv if width > 1 else hv[0],
                    ]
            call.append(1.0)
            fwd(*call)
            h[:, start:stop] = hv.T
        return h

    return hessian_of
