"""Python functions given to the helpers: a ``lambda``, a ``def``, a bound method or a
``functools.partial`` that calls one function enzyme_py differentiates, as JAX users
write ``jax.grad(lambda x: loss(x, data))``.

Each call of the helper's result runs the Python function once (``_trace``), with the
differentiable functions it calls (Numba dispatchers, C / IR functions, helpers'
results) replaced by recorders and its differentiated arguments by markers. That shows
which function it calls and where each differentiated argument goes; the helper is
then applied to that function at those positions, on the arguments of this call.
Captured arrays, globals and defaults are read as the Python function reads them, at
every call: nothing is frozen. A call of a differentiable function that takes no
marker runs as it is (``loss(x, scale(data))``: ``scale`` runs).

Refused with a TypeError that says what to write instead: anything else done with a
differentiated argument (indexing it, arithmetic on it or on the call's result,
comparing it, testing it for truth), even where the function catches the failure and
goes on; functions that ask ``isinstance``, ``type`` and the like (a marker is not its
value there); two calls that take one; an argument passed twice or not at all;
functions that assign globals or variables of an enclosing function.

>>> import numba, numpy as np, enzyme_py as ez
>>> @numba.njit
... def loss(x, data):
...     return np.sum((x - data) ** 2)
>>> data = np.array([1.0, 2.0])
>>> g = ez.grad(lambda x: loss(x, data))
>>> g(np.zeros(2))
array([-2., -4.])
>>> data[:] = 0.0            # read again at the next call: nothing is frozen
>>> g(np.ones(2))
array([2., 2.])
"""

from __future__ import annotations

import dis
import functools
import inspect
import types
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np

from enzyme_py import _transforms as tf
from enzyme_py._derivative import Derivative
from enzyme_py._numba_derivative import NumbaDerivative
from enzyme_py.frontends import IRFunction
from enzyme_py.frontends import numba as numba_frontend


def is_python_function(f: Any) -> bool:
    """Whether a helper takes ``f`` through this module."""
    return isinstance(f, (types.FunctionType, types.MethodType, functools.partial, Lowered))


def _differentiable(value: Any) -> bool:
    """Whether ``value`` is a function ``ez.autodiff`` and the helpers take as it is."""
    return (
        numba_frontend.is_dispatcher(value)
        or isinstance(value, (IRFunction, Derivative, NumbaDerivative, Lowered))
        or hasattr(type(value), "__enzyme_autodiff__")
    )


class _Marker:
    """A differentiated argument while the Python function runs for its trace. Its
    shape, dtype and length are its value's; anything that reads its values fails,
    and is noted in ``reads`` (shared by the trace's markers), so that a function that
    catches the failure and goes on is still refused: it would have gone another way
    on the value."""

    __slots__ = ("index", "reads", "value")

    def __init__(self, index: int, value: Any, reads: list[str]):
        self.index, self.value, self.reads = index, value, reads

    # As the value has them (a Python float has none: AttributeError, as in Python).
    shape = property(lambda self: self.value.shape)
    ndim = property(lambda self: self.value.ndim)
    size = property(lambda self: self.value.size)
    dtype = property(lambda self: self.value.dtype)

    def __len__(self) -> int:
        return len(self.value)

    def _read(self, how: str) -> NoReturn:
        what = f"argument {self.index} is {how}"
        self.reads.append(what)
        raise _NotOneCall(what)

    def __getattr__(self, name: str) -> Any:
        self._read(f"read for its attribute {name!r}")

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"<differentiated argument {self.index}>"


def _reading(how: str) -> Callable[..., Any]:
    def read(self: _Marker, *args: Any, **kwargs: Any) -> Any:
        self._read(how)

    return read


# Every operation that reads a value: a marker fails it (and notes it), rather than
# letting Python fall back to something else (== to identity, truth to True).
for _name, _how in [
    ("__array__", "read as an array"),
    ("__array_ufunc__", "read as an array"),
    ("__array_function__", "read as an array"),
    ("__bool__", "tested for truth"),
    ("__eq__", "compared"), ("__ne__", "compared"), ("__lt__", "compared"),
    ("__le__", "compared"), ("__gt__", "compared"), ("__ge__", "compared"),
    ("__getitem__", "indexed"), ("__setitem__", "written"), ("__iter__", "iterated"),
    ("__contains__", "searched"), ("__call__", "called"),
    ("__float__", "converted"), ("__int__", "converted"), ("__index__", "converted"),
    ("__complex__", "converted"), ("__round__", "converted"),
    ("__neg__", "used in arithmetic"), ("__pos__", "used in arithmetic"),
    ("__abs__", "used in arithmetic"), ("__invert__", "used in arithmetic"),
]:  # fmt: skip
    setattr(_Marker, _name, _reading(_how))
for _op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "divmod",
            "and", "or", "xor", "lshift", "rshift"):  # fmt: skip
    for _name in (f"__{_op}__", f"__r{_op}__", f"__i{_op}__"):
        setattr(_Marker, _name, _reading("used in arithmetic"))


class _NotOneCall(TypeError):
    """The Python function does more with a differentiated argument than pass it."""


@dataclass
class _Recorded:
    target: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


class _Recorder:
    """Stands for a differentiable function while the Python function runs: a call
    with a marker among its arguments is recorded (its result is a token), any other
    call runs the function."""

    def __init__(self, target: Any, calls: list[_Recorded], token: object):
        self.target, self.calls, self.token = target, calls, token

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not any(isinstance(a, _Marker) for a in (*args, *kwargs.values())):
            return self.target(*args, **kwargs)
        self.calls.append(_Recorded(self.target, args, kwargs))
        return self.token


# Builtins that tell a marker from its value: a branch on them would follow the marker.
_INSPECTING = frozenset({"isinstance", "issubclass", "type", "id", "hasattr", "getattr", "vars"})


@functools.lru_cache(maxsize=256)
def _names_of(code: types.CodeType) -> tuple[frozenset[str], bool]:
    """The global names ``code`` (and the code nested in it) reads, and whether it
    assigns or deletes a global or a variable of an enclosing function (the trace
    runs it on copies of those)."""
    names: set[str] = set()
    assigns = False
    for c in _codes(code):
        names.update(c.co_names)
        assigns = assigns or any(
            i.opname in ("STORE_GLOBAL", "DELETE_GLOBAL")
            or (i.opname in ("STORE_DEREF", "DELETE_DEREF") and i.argval in code.co_freevars)
            for i in dis.get_instructions(c)
        )
    return frozenset(names), assigns


# Kept weakly: a function's closure may hold large arrays.
_signatures: weakref.WeakKeyDictionary[Any, inspect.Signature] = weakref.WeakKeyDictionary()


def _signature(f: types.FunctionType) -> inspect.Signature:
    found = _signatures.get(f)
    if found is None:
        found = _signatures[f] = inspect.signature(f)
    return found


def _codes(code: types.CodeType) -> list[types.CodeType]:
    found = [code]
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found.extend(_codes(const))
    return found


@dataclass(frozen=True)
class Call:
    """What a call of the Python function is: ``target(*args)``, its differentiated
    argument ``i`` at position ``where[i]`` of ``args``."""

    target: Any
    args: tuple[Any, ...]
    where: dict[int, int]

    def spread(self, values: Sequence[Any]) -> list[Any]:
        """Per argument of ``target``: ``values[i]`` where the Python function's
        argument ``i`` went, None elsewhere (tangents for the target's jvp)."""
        placed: list[Any] = [None] * len(self.args)
        for i, p in self.where.items():
            placed[p] = values[i]
        return placed


def lower(f: Any, args: Sequence[Any], kwargs: dict[str, Any], nums: Sequence[int],
          who: str) -> Call:  # fmt: skip
    """The call of a differentiable function that ``f(*args, **kwargs)`` is, with
    respect to its positional arguments ``nums``."""
    if isinstance(f, functools.partial):
        inner = lower(f.func, (*f.args, *args), {**f.keywords, **kwargs},
                      [len(f.args) + i for i in nums], who)  # fmt: skip
        return Call(inner.target, inner.args, {i: inner.where[len(f.args) + i] for i in nums})
    if isinstance(f, types.MethodType):  # a bound method: its function, self first
        inner = lower(f.__func__, (f.__self__, *args), kwargs, [i + 1 for i in nums], who)
        return Call(inner.target, inner.args, {i: inner.where[i + 1] for i in nums})
    if isinstance(f, Lowered):
        inner = lower(f.f, args, kwargs, sorted({*nums, *f.traced}), who)
        return Call(f.made_for(inner), inner.args, {i: inner.where[i] for i in nums})
    if _differentiable(f):
        bound = tf.bind(f, args, kwargs, who)
        return Call(f, bound, {i: i for i in nums})
    return _trace(f, args, kwargs, nums, who)


def _trace(f: types.FunctionType, args: Sequence[Any], kwargs: dict[str, Any],
           nums: Sequence[int], who: str) -> Call:  # fmt: skip
    name = getattr(f, "__qualname__", "f")
    names, assigns = _names_of(f.__code__)
    if assigns:
        raise TypeError(f"{who}: {name} assigns a global or nonlocal variable; enzyme_py "
                        "runs it with its own view of them: return what it computes "
                        "instead")  # fmt: skip
    inspecting = sorted(names & _INSPECTING)
    if inspecting:
        raise TypeError(f"{who}: {name} calls {', '.join(inspecting)}, which enzyme_py "
                        "cannot answer for a differentiated argument when it looks for "
                        "the call inside: decide that outside it, or inside the "
                        "function it calls")  # fmt: skip
    try:
        bound = _signature(f).bind(*args, **kwargs)
    except TypeError as exc:
        raise TypeError(f"{who}: {exc}") from None
    bound.apply_defaults()
    positional = list(bound.args)
    reads: list[str] = []
    for i in nums:
        if i >= len(positional):
            raise ValueError(f"{who}: argnums {i} is out of range for {len(positional)} "
                             f"positional arguments of {name}")  # fmt: skip
        positional[i] = _Marker(i, positional[i], reads)
    calls: list[_Recorded] = []
    token = object()

    def stand_in(value: Any) -> Any:
        return _Recorder(value, calls, token) if _differentiable(value) else value

    scope = {k: stand_in(f.__globals__[k]) for k in names if k in f.__globals__}
    scope["__builtins__"] = f.__globals__.get("__builtins__", __builtins__)
    cells = tuple(
        c if (value := _cell_value(c)) is _EMPTY else types.CellType(stand_in(value))
        for c in f.__closure__ or ()
    )
    run = types.FunctionType(f.__code__, scope, f.__name__, f.__defaults__, cells or None)
    run.__kwdefaults__ = f.__kwdefaults__
    try:
        result = run(*positional, **bound.kwargs)
    except Exception as exc:
        raise TypeError(f"{who}: {_ADVICE.format(name=name)} (running it with the "
                        f"differentiated arguments marked: {exc})") from exc  # fmt: skip
    if reads:  # a read it caught, then went on: another way than on the values
        raise TypeError(f"{who}: {_ADVICE.format(name=name)} ({reads[0]})")
    if len(calls) != 1 or result is not token:
        if not calls:
            found = f"it passes none of arguments {list(nums)} to such a function"
        elif len(calls) > 1:
            found = f"it makes {len(calls)} such calls"
        else:
            found = "it returns something else than that call's result"
        raise TypeError(f"{who}: {_ADVICE.format(name=name)} ({found})")
    call = calls[0]
    target_name = tf.name_of(call.target)
    given = tf.bind(call.target, call.args, call.kwargs, who)
    where: dict[int, int] = {}
    plain: list[Any] = []
    for position, value in enumerate(given):
        if isinstance(value, _Marker):
            if value.index in where:
                raise TypeError(f"{who}: {name} passes argument {value.index} to "
                                f"{target_name} twice; differentiate {target_name} with "
                                "both positions in argnums and add the results")  # fmt: skip
            where[value.index] = position
            plain.append(value.value)
        else:
            _check_plain(value, position, target_name, who)
            plain.append(value)
    for i in nums:
        if i not in where:
            raise TypeError(f"{who}: {name} does not pass argument {i} to {target_name} "
                            "as it is: its derivative is zero or not this call's; "
                            "leave it out of argnums")  # fmt: skip
    return Call(call.target, tuple(plain), where)


_ADVICE = (
    "{name} must call one function enzyme_py differentiates (an @njit function, a C or "
    "IR function, a helper's result), by a name it reads, passing each differentiated "
    "argument to it as it is, and return that call's result; write anything else "
    "inside that function"
)
_EMPTY = object()
# Helper options whose value is a position among f's arguments.
_POSITION_OPTIONS = ("output",)


def _cell_value(cell: types.CellType) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # not assigned yet
        return _EMPTY


def _check_plain(value: Any, position: int, target: str, who: str) -> None:
    """A TypeError unless ``value`` cannot have come from a marker: numbers, strings,
    None, arrays of numbers, tuples of those."""
    if isinstance(value, tuple):
        for v in value:
            _check_plain(v, position, target, who)
        return
    if value is None or isinstance(value, (int, float, complex, str, bytes, np.generic)):
        return
    if isinstance(value, np.ndarray) and value.dtype != object:
        return
    if callable(value):  # a function passed on (first-class functions)
        return
    raise TypeError(f"{who}: argument {position} of {target} is a "
                    f"{type(value).__name__} computed from a differentiated argument "
                    "(or of a kind enzyme_py does not pass); pass arrays and numbers")  # fmt: skip


class Lowered:
    """``helper(f, argnums, **options)`` for a Python function ``f``: at each call, the
    helper of the function ``f`` calls (made once per function and positions)."""

    helper_result = True

    def __init__(self, helper: Callable[..., Any], f: Any, argnums: Any, options: dict[str, Any]):
        self.helper, self.f, self.argnums, self.options = helper, f, argnums, options
        self.nums = _checked_nums(argnums)
        # Options that name a position of f (jacobian's output=): mapped like argnums.
        self.placed = {k: v for k, v in options.items() if k in _POSITION_OPTIONS and v is not None}
        self.traced = tuple(sorted({*self.nums, *_checked_nums(tuple(self.placed.values()))}))
        self.__name__ = f"{helper.__name__}({getattr(f, '__qualname__', 'f')})"
        self._made: dict[tuple[Any, ...], tuple[Any, Any]] = {}

    def made_for(self, call: Call) -> Any:
        """The helper of ``call.target`` at the positions of this helper's arguments."""
        mapped = call.where[self.nums[0]] if tf.single(self.argnums) else tuple(
            call.where[i] for i in self.nums
        )  # fmt: skip
        options = {**self.options, **{k: call.where[v] for k, v in self.placed.items()}}
        key = (id(call.target), mapped, tuple(sorted(options.items())))
        found = self._made.get(key)
        if found is None:  # the target is kept with its helper, so its id stays its own
            found = self._made[key] = (call.target, self.helper(call.target, mapped, **options))
        return found[1]

    def __reduce__(self) -> tuple[Any, ...]:  # the helpers made are made again
        return (Lowered, (self.helper, self.f, self.argnums, self.options))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        call = lower(self.f, args, kwargs, self.traced, self.__name__)
        return self.made_for(call)(*call.args)

    def __repr__(self) -> str:
        return f"<enzyme_py {self.__name__}>"


def _checked_nums(argnums: Any) -> tuple[int, ...]:
    """argnums as positions; a Python function's are counted from its first parameter
    (its number of parameters is known only when it is called)."""
    nums = tf.argnum_ints(argnums)
    if any(a < 0 for a in nums):
        raise ValueError(f"argnums {argnums!r}: count a Python function's arguments "
                         "from 0 (negative positions are not taken)")  # fmt: skip
    if len(set(nums)) != len(nums):
        raise ValueError(f"argnums {argnums!r} names an argument twice")
    return nums


def transform(helper: Callable[..., Any], f: Any, argnums: Any, **options: Any) -> Lowered | None:
    """``helper(f, argnums, **options)`` for a Python function ``f``; None for others."""
    if not is_python_function(f):
        return None
    return Lowered(helper, f, argnums, options)
