"""The transforms' shared machinery, which the JAX-named helpers (``helpers``,
``_jacobians``, ``_compose``), the bridges (``_bridge``: PyTorch, JAX) and the gradient
check import: activities inferred per argument from its value, the per-function memo
of derivatives (``Derivatives``), binding of keyword and default arguments, fresh
copies and shadows, reverse calls (``reverse_call``) and the one Hessian-vector
product (``hessian_vector``: forward over reverse) behind ``ez.hessian``, ``ez.hvp``,
the compositions of ``ez.grad`` and the bridges' second derivatives; and one split
call (``SplitCall``: the augmented forward pass once, its reverse pass per cotangent)
behind ``ez.vjp``'s pullback and the bridges' backward passes.

Two rules keep the helpers from silently wrong numbers:

- every float array argument the function may write gets a shadow (zeros unless it is
  differentiated): an array Enzyme is told is Const cannot carry a derivative, so a
  scratch array the function writes and reads back (``tmp[i] = sin(x[i])``) would drop
  it. Which arrays it may write comes from LLVM's inference of ``readonly`` parameters
  (arrays it only reads stay Const, as fast as before); where that is unknown, all;
- a function may overwrite its arguments: helpers that run it more than once (batches
  of Jacobian columns, pullbacks) run each time on fresh copies of the arguments.
"""

from __future__ import annotations

import contextlib
import inspect
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from enzyme_py import _state
from enzyme_py._api import autodiff, zeroes_shadows, zeroing_reverse
from enzyme_py._arguments import real_number as _real_number
from enzyme_py._derivative import Derivative, resolve_function
from enzyme_py._numba_derivative import read_only_question_wrapper
from enzyme_py._read_only import read_only_params
from enzyme_py._reverse_plan import NativeCall, ReversePlan, plan_key
from enzyme_py._split import argument_key
from enzyme_py.core import (
    Active,
    ActiveOnly,
    Activity,
    ActivityError,
    Const,
    Dual,
    Duplicated,
    EnzymeError,
    Forward,
    Mode,
    Reverse,
    ReverseSplit,
)
from enzyme_py.frontends import IRFunction
from enzyme_py.frontends import numba as numba_frontend
from enzyme_py.frontends._numba_signatures import argument_kind, does_not_compile

Argnums = int | Sequence[int]


class NotComposable(TypeError):
    """A composition of transforms that enzyme_py does not compute; the message says
    what to write instead."""


# Columns (or rows) of a Jacobian or Hessian computed per batched call.
BATCH = 8


def positions(argnums: Argnums, n: int) -> tuple[int, ...]:
    nums = argnum_ints(argnums)
    for a in nums:
        if not -n <= a < n:
            raise ValueError(f"argnums {argnums!r} is out of range for {n} arguments")
    positions = tuple(a % n for a in nums)
    if len(set(positions)) != len(positions):
        raise ValueError(f"argnums {argnums!r} names an argument twice")
    return positions


def argnum_ints(argnums: Argnums) -> tuple[int, ...]:
    """argnums as a tuple of ints (an int or a sequence of them), else a TypeError."""
    nums: tuple[Any, ...]
    if isinstance(argnums, (int, np.integer)):
        nums = (argnums,)
    else:
        try:
            nums = tuple(argnums)
        except TypeError:  # not a sequence either
            raise TypeError(f"argnums must be argument positions (ints); got {argnums!r}") from None
    for a in nums:
        if isinstance(a, (bool, np.bool_)) or not isinstance(a, (int, np.integer)):
            raise TypeError(f"argnums must be argument positions (ints); got {argnums!r}")
    return tuple(int(a) for a in nums)


def single(argnums: Argnums) -> bool:
    """Whether argnums is one position (results unwrapped) rather than a sequence."""
    return isinstance(argnums, (int, np.integer))


def is_float_scalar(value: Any) -> bool:
    return isinstance(value, (float, np.floating)) and not isinstance(value, bool)


def is_float_array(value: Any) -> bool:
    return isinstance(value, np.ndarray) and value.dtype.kind == "f"


def check_differentiable(value: Any, i: int, who: str) -> None:
    """A TypeError from ``who`` unless argument ``i`` is a float scalar or a float array."""
    if not (is_float_array(value) or is_float_scalar(value)):
        raise TypeError(
            f"{who}: argument {i} is {type(value).__name__}"
            + (f" of {value.dtype}" if isinstance(value, np.ndarray) else "")
            + "; only float scalars and float arrays can be differentiated "
            "(pass a float, or leave it out of argnums)"
        )


def activity_of(value: Any, i: int, mode: Mode) -> Activity:
    """The activity that differentiates argument i, from its value."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind != "f":
            raise TypeError(
                f"argument {i} is an array of {value.dtype}; only float arrays can be "
                "differentiated (leave it out of argnums)"
            )
        return Duplicated if mode is Reverse else Dual
    if is_float_scalar(value):
        return Active if mode is Reverse else Dual
    raise TypeError(
        f"argument {i} is {type(value).__name__}; only float scalars and float arrays can "
        "be differentiated (pass a float, or leave it out of argnums)"
    )


def activities_for(
    args: Sequence[Any], nums: Sequence[int], mode: Mode, writes: Sequence[bool]
) -> list[Activity]:
    """Activities for a call: argnums differentiated, every other float array that f
    may write (``writes[i]``) with a (zero) shadow of its own, the rest Const."""
    shadowed = Duplicated if mode is Reverse else Dual
    return [
        activity_of(a, i, mode)
        if i in nums
        else (shadowed if is_float_array(a) and writes[i] else Const)
        for i, a in enumerate(args)
    ]


def may_write(f: Any, args: Sequence[Any], combined: bool = True) -> tuple[bool, ...]:
    """Per argument, whether f may write its memory: False only where LLVM infers the
    parameter readonly; True wherever that cannot be told. Asked of the module the
    derivative to come is built from (``combined``: a combined reverse derivative's,
    ``IRFunction.combined_form``), so that the first call makes one module, not two."""
    unknown = (True,) * len(args)
    try:
        if numba_frontend.is_dispatcher(f):
            signature = tuple(f.typeof_pyval(a) for a in args)
            fn = read_only_question_wrapper(f, signature)
            if combined and fn.combined_form is not None:
                fn = fn.combined_form()
        else:
            fn = f if isinstance(f, IRFunction) else resolve_function(f)
        visible = fn.visible_params
        if len(visible) != len(args):
            return unknown
        flags = read_only_params(fn)
    except Exception:  # any failure here is reported by autodiff itself
        return unknown
    return tuple(not flags[i] for i, _ in visible)


class Derivatives:
    """``autodiff(f, mode, *activities, ret, width=...)``, made once per combination."""

    def __init__(self, f: Any):
        self.f = f
        self._made: dict[tuple[Any, ...], Any] = {}
        self._writes: dict[tuple[Any, ...], tuple[bool, ...]] = {}
        # reverse_call's plans, by argnums, return activity and kinds of the arguments.
        self.plans: dict[tuple[Any, ...], ReversePlan] = {}

    def may_write(self, args: Sequence[Any], combined: bool = True) -> tuple[bool, ...]:
        """Per argument, whether f may write it (see may_write), once per kinds
        (``combined``: False before a forward or split derivative)."""
        key = tuple(map(argument_kind, args))
        found = self._writes.get(key)
        if found is None:
            found = self._writes[key] = may_write(self.f, args, combined)
        return found

    def get(
        self,
        mode: Mode,
        acts: Sequence[Activity],
        ret: Activity | None,
        width: int = 1,
        zeroing: bool = False,
    ) -> Any:
        """The derivative; ``zeroing``: for calls with fresh shadows, one that zeroes
        those it can itself (``_reverse_plan``), where f is a Numba dispatcher or a
        function (not a derivative, a helper's result or a kernel)."""
        zeroing = zeroing and mode is Reverse and width == 1 and zeroes_shadows(self.f)
        key = (mode, tuple(acts), ret, width, zeroing)
        df = self._made.get(key)
        if df is None:
            returned = [] if ret is None else [ret]
            if zeroing:
                df = zeroing_reverse(self.f, *acts, *returned)
            else:
                df = autodiff(self.f, mode, *acts, *returned, width=width)
            self._made[key] = df
        return df


_shared: weakref.WeakKeyDictionary[Any, Derivatives] = weakref.WeakKeyDictionary()


def derivatives_of(f: Any) -> Derivatives:
    """The derivatives of ``f`` made so far by the one-shot helpers (jvp, vjp): kept
    with ``f`` so that a loop calling ``ez.jvp(f, ...)`` builds and plans them once."""
    try:
        found = _shared.get(f)
        if found is None:
            found = _shared[f] = Derivatives(f)
        return found
    except TypeError:  # not weak-referenceable
        return Derivatives(f)


def fresh(args: Sequence[Any]) -> list[Any]:
    """Copies of the array arguments (f may overwrite them), the rest as given; a
    Fortran-ordered array's copy is Fortran-ordered (a parameter may require it: a
    Cython ``double[::1, :]``), any other's C-contiguous."""
    return [a.copy(order="A") if isinstance(a, np.ndarray) else a for a in args]


# A shadow at least this large that a derivative updates on threads is zeroed on them.
_ZEROED_ON_THREADS_BYTES = 1 << 20


def shadow_like(a: np.ndarray, width: int = 1, threads: int = 1) -> np.ndarray:
    """Zeros for ``a``'s derivative. For a derivative whose prange loops run on
    ``threads`` threads, a large one is zeroed on those threads, each its share
    (``zero_in_shares``): the share its reverse chunks then update, in its cache."""
    if width == 1 and threads > 1 and a.nbytes >= _ZEROED_ON_THREADS_BYTES:
        out = np.empty(a.shape, dtype=a.dtype)
        _state.native.zero_in_shares([(out.ctypes.data, out.nbytes)], threads)
        return out
    return np.zeros(a.shape if width == 1 else (width, *a.shape), dtype=a.dtype)


def name_of(f: Any) -> str:
    return str(getattr(f, "__name__", None) or getattr(f, "display_name", None) or "f")


def _signature(f: Any) -> inspect.Signature | None:
    """The Python-level signature of f (Numba: its Python function; C / IR: the
    parameter names of its declaration), or None when it has none."""
    if numba_frontend.is_dispatcher(f):
        return inspect.signature(f.py_func)
    if isinstance(f, IRFunction):
        names = [p.name for _, p in f.visible_params]
        if not all(n.isidentifier() for n in names) or len(set(names)) != len(names):
            return None
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        return inspect.Signature([inspect.Parameter(n, kind) for n in names])
    return None


_signatures: weakref.WeakKeyDictionary[Any, tuple[inspect.Signature | None, int]] = (
    weakref.WeakKeyDictionary()
)


def _signature_of(f: Any) -> tuple[inspect.Signature | None, int]:
    """f's signature (see _signature) and its number of parameters if all are plain
    positional ones (-1 otherwise), kept with f: helpers' results are called in loops."""
    try:
        found = _signatures.get(f)
    except TypeError:  # not hashable
        found = None
    if found is None:
        sig = _signature(f)
        plain = -1
        if sig is not None and all(
            p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in sig.parameters.values()
        ):
            plain = len(sig.parameters)
        found = (sig, plain)
        with contextlib.suppress(TypeError):  # not weak-referenceable or hashable
            _signatures[f] = found
    return found


def bind(f: Any, args: Sequence[Any], kwargs: dict[str, Any], who: str) -> tuple[Any, ...]:
    """The arguments of a call of ``who`` (a helper's result for f) by position:
    keywords bound to their parameters and omitted defaults filled in, so that the
    derivative sees positional arguments only."""
    sig, plain = _signature_of(f)
    if plain == len(args) and not kwargs:  # every parameter given by position: as is
        return tuple(args)
    if sig is None:
        if kwargs:
            raise TypeError(
                f"{who} got keyword arguments ({', '.join(kwargs)}) but {name_of(f)} has no "
                "parameter names to bind them to: pass them by position"
            )
        return tuple(args)
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError as exc:
        raise TypeError(f"{who}: {exc}; {name_of(f)} takes {sig}") from None
    bound.apply_defaults()
    if bound.kwargs:
        raise TypeError(
            f"{who}: {name_of(f)} has keyword-only parameters or **kwargs "
            f"({', '.join(bound.kwargs)}), which enzyme_py cannot pass: make them positional"
        )
    return tuple(bound.args)


def with_defaults(f: Any, args: Sequence[Any], who: str) -> tuple[Any, ...]:
    """args, followed by the defaults of the parameters they omit."""
    return bind(f, args, {}, who)


def returns_nothing(f: Any, args: Sequence[Any]) -> bool:
    """Whether f returns no value (from its compiled signature)."""
    if not numba_frontend.is_dispatcher(f):
        return resolve_function(f).ret is None

    from numba.core.errors import TypingError

    def compute() -> bool:
        types = tuple(f.typeof_pyval(a) for a in args)
        try:
            signature = numba_frontend.resolve_signature(f, types)
            return not numba_frontend.returns_value(f, signature)
        except TypingError as exc:  # the helpers' first question (jvp, vjp)
            raise does_not_compile(f, types, exc) from None

    return _by_kinds(_returns_nothing, f, args, compute)


def returns_arrays(f: Any, args: Sequence[Any]) -> bool:
    """Whether f returns an array or a tuple (a Numba function; see _numba_results).
    False where Numba cannot compile f for these arguments: the derivative's own call
    then says what is wrong with them."""
    if not numba_frontend.is_dispatcher(f):
        return False
    from numba.core.errors import TypingError

    def compute() -> bool:
        # The helpers call derivatives with fresh copies (C-contiguous: ``fresh``) where
        # f may write its arguments: a function Numba compiles only for those (x.reshape
        # of a strided x) is asked about them too.
        for given in (args, fresh(args)):
            types = tuple(f.typeof_pyval(a) for a in given)
            try:
                return numba_frontend.returns_arrays(f, numba_frontend.resolve_signature(f, types))
            except TypingError:
                continue
        return False

    return _by_kinds(_returns_arrays, f, args, compute)


def _by_kinds(
    memo: weakref.WeakKeyDictionary[Any, dict[Any, bool]],
    f: Any,
    args: Sequence[Any],
    compute: Callable[[], bool],
) -> bool:
    """``compute()``, memoised per Numba dispatcher ``f`` where the arguments' kinds
    determine their Numba types (Numba's typeof is a good part of a small Hessian's or
    JVP's call otherwise)."""
    plain = all(isinstance(a, (np.ndarray, float, int, np.generic)) for a in args)
    kinds = tuple(argument_kind(a) for a in args) if plain else None
    known = memo.setdefault(f, {})
    if kinds is not None and kinds in known:
        return known[kinds]
    found = compute()
    if kinds is not None:
        known[kinds] = found
    return found


# Per Numba dispatcher, by the kinds of the arguments: whether it returns nothing, and
# whether it returns arrays.
_returns_nothing: weakref.WeakKeyDictionary[Any, dict[Any, bool]] = weakref.WeakKeyDictionary()
_returns_arrays: weakref.WeakKeyDictionary[Any, dict[Any, bool]] = weakref.WeakKeyDictionary()


def zero_shadows(
    args: Sequence[Any], acts: Sequence[Activity], width: int = 1, threads: int = 1
) -> dict[int, np.ndarray]:
    """Zero shadows for the array arguments that take one (separate ones for one array
    passed twice: each argument's own derivative, as JAX's argnums mean), for a
    derivative on ``threads`` threads (``shadow_like``)."""
    return {
        i: shadow_like(a, width, threads)
        for i, (a, act) in enumerate(zip(args, acts, strict=True))
        if act.shadow and isinstance(a, np.ndarray)
    }


def interleave(args: Sequence[Any], acts: Sequence[Activity], extra: dict[int, Any]) -> list[Any]:
    """The derivative's arguments: each value, followed by extra[i] if it has one."""
    call: list[Any] = []
    for i, a in enumerate(args):
        call.append(a)
        if acts[i].shadow:
            call.append(extra[i])
    return call


def reverse_call(
    derivatives: Derivatives,
    args: Sequence[Any],
    nums: tuple[int, ...],
    ret: Activity,
    seed: float = 1.0,
) -> tuple[Any, tuple[Any, ...]]:
    """The primal (or None) and the gradient (times ``seed``) with respect to each of nums."""
    key = plan_key(args, seed)
    if key is not None:
        plan = derivatives.plans.get((nums, ret, key))
        if plan is not None:
            return plan(args, nums, seed)
    acts = activities_for(args, nums, Reverse, derivatives.may_write(args))
    plan = _plan(derivatives.get(Reverse, acts, ret, zeroing=True), args, acts, seed)
    if key is not None:
        derivatives.plans[(nums, ret, key)] = plan
    return plan(args, nums, seed)


def _plan(df: Any, args: Sequence[Any], acts: Sequence[Activity], seed: Any) -> ReversePlan:
    """``reverse_call``'s plan for arguments of the kinds of ``args`` (and of ``seed``),
    worked out on zeros of its shadows' shapes and types (what it will pass: the same
    kinds, so the same Numba specialisation)."""
    threads = getattr(df, "threads", 1)
    standing_in = zero_shadows(args, acts, threads=threads)
    flat = (*interleave(args, acts, standing_in), seed)
    call_for = getattr(df, "call_for", None)
    zeroed = getattr(df, "zeroed_params", None)
    if callable(zeroed):  # a NumbaDerivative: per the call's argument types
        zeroed = zeroed(flat)
    run = call_for(flat) if call_for is not None else None
    direct = getattr(run, "direct", None) if run is not None else df
    return ReversePlan(
        run=run if run is not None else lambda given: df(*given),
        shadowed=tuple(standing_in),
        zeroed=frozenset(zeroed or ()),
        zeros=lambda a: shadow_like(a, 1, threads),
        actives=tuple(i for i, act in enumerate(acts) if act is Active),
        views=frozenset(i for i in standing_in if not args[i].flags.c_contiguous),
        direct=direct if callable(getattr(direct, "fast_caller", None)) else None,
    )


def native_reverse_call(
    derivatives: Derivatives,
    args: Sequence[Any],
    nums: tuple[int, ...],
    ret: Activity,
    single: bool,
) -> NativeCall | None:
    """The C++ call (``ReversePlan.native_call``) of the plan ``reverse_call`` made or
    found for ``args`` (seed 1.0), or None."""
    key = plan_key(args, 1.0)
    plan = None if key is None else derivatives.plans.get((nums, ret, key))
    if plan is None or key is None:
        return None
    return plan.native_call(key, nums, single, with_value=ret is Active)


def passes_as_given(f: Any, count: int) -> bool:
    """Whether ``bind`` passes ``count`` positional arguments (no keywords) on as they
    are: f takes exactly that many plain positional parameters."""
    return _signature_of(f)[1] == count


def as_tangent(t: Any, p: Any, i: int) -> Any:
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


def given_tangents(args: Sequence[Any], tangents: Sequence[Any], who: str) -> dict[int, Any]:
    """The tangents given (None: none), one per primal, in their primals' dtypes."""
    if len(tangents) > len(args):
        raise ValueError(f"{who} got {len(tangents)} tangents for {len(args)} arguments")
    given = {}
    for i, t in enumerate(tangents):
        if t is None:
            continue
        if not (is_float_array(args[i]) or is_float_scalar(args[i])):
            raise TypeError(
                f"{who}: argument {i} is not a float array or scalar: its tangent is None"
            )
        given[i] = as_tangent(t, args[i], i)
    return given


def reverse_derivative(derivatives: Derivatives, args: Sequence[Any], acts: Any) -> Derivative:
    """The reverse derivative of f (ActiveOnly) for these activities, specialised for
    these arguments (a Numba derivative's specialisation for their types)."""
    reverse = derivatives.get(Reverse, acts, ActiveOnly)
    if not isinstance(reverse, Derivative) and not hasattr(reverse, "for_arguments"):
        raise NotComposable(
            f"{derivatives.f!r} is a reverse derivative that returns adjoints: its own "
            "reverse derivative is computed by forward over reverse, and is not "
            "differentiated again. Apply the helpers to the function itself "
            "(ez.grad(ez.grad(ez.grad(f))), ez.jvp(ez.hessian(f), ...)), or to a forward "
            "derivative of it"
        )
    if not isinstance(reverse, Derivative):
        reverse = reverse.for_arguments((*interleave(args, acts, zero_shadows(args, acts)), 1.0))
    return reverse


def forward_of(
    derivatives: Derivatives, inner: Any, acts: Sequence[Activity], ret: Activity | None, width: int
) -> Any:
    """``autodiff(inner, Forward, *acts, Const, ret, width=width)`` (the last parameter,
    a seed, Const) of a derivative ``inner`` of f, made once per activities: kept with
    ``derivatives``, and only for the very ``inner`` it was made of."""
    key = (id(inner), tuple(acts), ret, width)
    found = _forward.setdefault(derivatives, {}).get(key)
    if found is not None and found[0] is inner:
        return found[1]
    returned = [] if ret is None else [ret]
    try:
        made = autodiff(inner, Forward, *acts, Const, *returned, width=width)
    except EnzymeError as exc:
        if "mixed activity" not in str(exc):
            raise
        # Enzyme's reverse derivatives select between a constant zero and an adjoint
        # (a branch that adds nothing): differentiated again, such a select mixes a
        # constant with an active value, which Enzyme refuses unless activity is
        # decided when the derivative runs (exact: runtime_activity).
        made = autodiff(inner, Forward, *acts, Const, *returned, width=width, runtime_activity=True)
    _forward[derivatives][key] = (inner, made)
    return made


# Per Derivatives: forward derivatives of its reverse derivatives (see forward_of).
_forward: weakref.WeakKeyDictionary[Any, dict[Any, Any]] = weakref.WeakKeyDictionary()


def hessian_vector(
    derivatives: Derivatives,
    args: Sequence[Any],
    nums: tuple[int, ...],
    tangents: dict[int, Any],
    seed: float = 1.0,
    width: int = 1,
) -> tuple[dict[int, Any], dict[int, Any]]:
    """``(gradient, products)`` by one forward-over-reverse call: per argument i of
    ``nums``, ``seed`` times the gradient of scalar-valued f with respect to it, and
    ``seed`` times its directional derivative along ``tangents`` (position -> tangent,
    in the argument's dtype; with ``width`` k, k lanes each: ``(k, *shape)``):
    ``(H v)_i``, with the mixed derivatives of every argument given a tangent, as
    ``jax.jvp(jax.grad(f, nums), ...)``. Float arrays and float scalars (width 1 for
    scalars); f runs on ``args`` as given (pass copies if it may overwrite them)."""
    active = tuple(i for i in range(len(args)) if i in nums or i in tangents)
    acts = activities_for(args, active, Reverse, derivatives.may_write(args))
    if width != 1 and any(a is Active for a in acts):
        raise ValueError("hessian_vector: float scalars take width 1")
    reverse = reverse_derivative(derivatives, args, acts)
    fwd_acts: list[Activity] = []
    call: list[Any] = []
    gradient: dict[int, Any] = {}
    products: dict[int, Any] = {}
    for i, (a, act) in enumerate(zip(args, acts, strict=True)):
        call.append(a)
        t = tangents.get(i)
        if act is Active:  # its adjoint is in the reverse derivative's return value
            fwd_acts.append(Dual)
            call.append(0.0 if t is None else float(t))
        elif act.shadow:  # the shadow's tangent is where H v lands
            fwd_acts += [Dual, Dual]
            gradient[i], products[i] = np.zeros_like(a), shadow_like(a, width)
            call += [shadow_like(a, width) if t is None else t, gradient[i], products[i]]
        else:
            fwd_acts.append(Const)
    scalars = [i for i, act in enumerate(acts) if act is Active]
    fwd = forward_of(derivatives, reverse, fwd_acts, Dual if scalars else None, width)
    result = fwd(*call, seed)
    if scalars:
        values, dvalues = result
        for i, g, hv in zip(scalars, np.atleast_1d(values), np.atleast_1d(dvalues), strict=True):
            gradient[i], products[i] = float(g), float(hv)
    return (
        {i: gradient[i] for i in nums},
        {i: products[i] for i in nums},
    )


class SplitCall:
    """One augmented forward pass of scalar-valued ``f`` at ``args`` (its value), and
    its reverse pass as often as wanted: ``pull(seed)`` gives ``seed`` times the
    gradient with respect to each argument in ``nums``, from the tape alone (what
    ``ez.vjp``'s pullback and the bridges' backward passes run).

    ``args`` are used as they are, and must stay unchanged while this lives (pass
    copies). Raises ActivityError or EnzymeError where split mode does not apply (the
    callers then recompute with the combined reverse pass)."""

    def __init__(self, derivatives: Any, args: Any, nums: tuple[int, ...]):
        key = tuple(argument_key(a) for a in args), nums
        refused = _refused.get(derivatives)
        if refused is not None and key in refused:
            raise ActivityError("split mode was refused for these arguments before")
        acts = activities_for(args, nums, Reverse, derivatives.may_write(args, combined=False))
        try:
            split = derivatives.get(ReverseSplit, acts, Active)
            self._shadows = zero_shadows(args, acts)
            self._call = interleave(args, acts, self._shadows)
            self.value, self._tape = split.forward(*self._call)
        except (ActivityError, EnzymeError):
            _refused.setdefault(derivatives, set()).add(key)
            raise
        self._split, self._acts, self._nums = split, acts, nums

    def pull(self, seed: float) -> tuple[Any, ...]:
        for shadow in self._shadows.values():
            shadow.fill(0)
        adjoints = iter(self._split.reverse(self._tape, *self._call, seed))
        grads = {i: next(adjoints) for i, act in enumerate(self._acts) if act.name == "Active"}
        return tuple(
            self._shadows[i].copy() if i in self._shadows else grads[i] for i in self._nums
        )


# Per Derivatives: the (argument kinds, nums) split mode was refused for (built once).
_refused: weakref.WeakKeyDictionary[Any, set[Any]] = weakref.WeakKeyDictionary()
