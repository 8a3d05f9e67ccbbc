"""Derivatives of Numba dispatchers: one engine derivative per Numba signature.

Each specialisation is an ordinary ``Derivative`` of the frontend's wrapper, whose
hidden parameters (array shapes and strides, the errors buffer) enzyme_py fills in;
this class picks the specialisation from the ``sig=`` given, else from the types of
the arguments of each call (the dispatcher's only signature, if it has one, is built
at once, and serves the calls whose arguments have its types).

Parameters with defaults may be left out, as in a call of the function: activities
for the first parameters, then the return's; the parameters left out are Const and
take their default values. An ``@njit`` function passed as an argument (an objective
given to a solver) is Const: part of the specialisation, not passed to the wrapper.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from enzyme_py._activities import check_activities
from enzyme_py._derivative import Derivative, Options
from enzyme_py._log import log
from enzyme_py._numba_results import ArrayResultCall, part_activity
from enzyme_py._warnings import warn_at_user
from enzyme_py.core import (
    Active,
    ActiveOnly,
    Activity,
    ActivityError,
    Const,
    EnzymeError,
    Mode,
    PerformanceWarning,
    Reverse,
)
from enzyme_py.frontends import numba as numba_frontend
from enzyme_py.frontends._numba_parfor import (
    has_prange_with_inner_loop,
    prange_loops_once_per_call,
)
from enzyme_py.frontends._numba_signatures import argument_kind, does_not_compile


def _signature_of(dispatcher: Any, sig: Any) -> tuple[Any, ...] | None:
    """The Numba argument types asked for by ``sig``, or the dispatcher's only one."""
    if sig is None:
        return tuple(dispatcher.signatures[0]) if len(dispatcher.signatures) == 1 else None
    from numba.core import sigutils

    args, _ = sigutils.normalize_signature(sig)
    return tuple(args)


@dataclass(frozen=True)
class _Bound:
    """A specialisation, with the default values of the parameters a call leaves out
    inserted after the given parameters' arguments (before the seed)."""

    derivative: Derivative
    given: int  # parameters the activities (and so the calls) cover
    defaults: tuple[Any, ...]
    insert_at: int  # where the defaults go among the call's arguments
    results: ArrayResultCall | None = None  # calls of a function returning arrays
    # Positions, defaults inserted, of the functions passed as arguments (not passed on).
    functions: tuple[int, ...] = ()

    @property
    def direct(self) -> Derivative | None:
        """The derivative where a call passes it its arguments unchanged, else None."""
        return self.derivative if _inserts_nothing(self) else None

    def __call__(self, args: tuple[Any, ...]) -> Any:
        if self.defaults:
            args = (*args[: self.insert_at], *self.defaults, *args[self.insert_at :])
        if self.functions:
            args = tuple(a for i, a in enumerate(args) if i not in self.functions)
        if self.results is not None:
            return self.results(args)
        return self.derivative(*args)


def default_threads(dispatcher: Any, primal_wanted: bool = True) -> int:
    """The threads of a derivative whose ``threads=`` is left out: as many as Numba
    runs this thread's prange loops on (``numba.get_num_threads()``: all cores unless
    the user set fewer) for a ``parallel=True`` function with a prange loop whose body
    has a loop of its own (``has_prange_with_inner_loop``), or whose prange loops each
    run once per call (``prange_loops_once_per_call``) where the primal is wanted
    (``primal_wanted``: not ActiveOnly); else 1 (a prange loop inside a time loop is
    launched at every step). A light body's loop on the threads shares out the primal
    launch, the serial derivative's work too: Rosenbrock prange's
    ``ez.value_and_grad`` 1.13-1.68 ms on two threads against 1.88-2.12 ms on one, on
    the 2-core Xeon. Without the primal, the serial derivative's fused reverse loop
    runs on every core already (src/fused_threads.h) and writes the fresh gradient
    itself, where the threaded one has it zeroed first: its ``ez.grad`` 325-392 us
    against 523-669 us on two threads (docs/design.md §8)."""
    if not numba_frontend.is_parallel(dispatcher):
        return 1
    py_func = dispatcher.py_func
    light = not has_prange_with_inner_loop(py_func)
    if light and not (primal_wanted and prange_loops_once_per_call(py_func)):
        return 1
    import numba

    return max(1, int(numba.get_num_threads()))


def read_only_question_wrapper(dispatcher: Any, signature: tuple[Any, ...]) -> Any:
    """The wrapper whose parameters LLVM's inference tells which arrays ``dispatcher``
    writes (``ez.grad``'s question): for a ``parallel=True`` function whose derivative
    runs on threads whatever the helper (``default_threads``), its threaded module,
    which that derivative then reuses, rather than the serial twin compiled for this
    question alone (GMM prange: 0.5 s of its first ``ez.grad`` call); else, or where
    that module cannot be made, the serial one, in the strided form the derivative
    takes, whose module (made lazily) the derivative then reuses too (the plain form's
    was made and simplified a second time: 20-25 ms of the GMM kernel's first
    ``ez.grad`` call)."""
    threads = default_threads(dispatcher, primal_wanted=False)
    if threads > 1:
        with contextlib.suppress(Exception):  # refused: the serial twin answers
            return numba_frontend.specialize(
                dispatcher, signature, strided=True, threads=threads
            ).wrapper
    return numba_frontend.specialize(dispatcher, signature, strided=True).wrapper


def _inserts_nothing(bound: _Bound) -> bool:
    """Whether ``bound`` passes a call's arguments on unchanged to its derivative."""
    return not bound.defaults and not bound.functions and bound.results is None


__all__ = ["NumbaDerivative"]


class NumbaDerivative:
    """The derivative of a Numba dispatcher, specialised per argument types."""

    def __init__(
        self,
        dispatcher: Any,
        mode: Mode,
        activities: tuple[Any, ...],
        options: Options,
        sig: Any = None,
        threads: int | None = None,
    ):
        self.dispatcher = dispatcher
        # Above 1: a parallel=True function's prange loops run on that many threads in
        # its reverse derivative too (frontends/_numba_parfor.py); else serially. None
        # (left out): default_threads decides, and a threaded derivative that cannot
        # be built falls back to the serial one without a warning.
        self._threads_asked = threads
        if threads is None:
            threads = default_threads(
                dispatcher, primal_wanted=not activities or activities[-1] is not ActiveOnly
            )
        else:  # also the most threads of its fused stencil loops
            options = replace(options, fused_workers=threads)
        self.threads = threads
        self.mode = mode
        self.activities = activities
        self.options = options
        self._sig = sig
        self.name = dispatcher.py_func.__name__
        parameters = list(inspect.signature(dispatcher.py_func).parameters.values())
        self._names = [p.name for p in parameters]
        self._n_params = len(parameters)
        for i, act in enumerate(activities):
            if not isinstance(act, Activity):
                what = f"parameter {i} ('{self._names[i]}')" if i < len(parameters) else (
                    "the return value"
                )  # fmt: skip
                raise ActivityError(
                    f"the activity of {what} of '{self.name}' is {act!r}, not an enzyme_py "
                    "activity (ez.Const, ez.Active, ez.Duplicated, ez.Dual, ...)"
                )
        self._defaults = [p.default for p in parameters]
        # The fewest parameters a call may give (the rest have defaults).
        self._required = next(
            (i for i in range(self._n_params) if all(
                p.default is not inspect.Parameter.empty for p in parameters[i:]
            )),
            self._n_params,
        )  # fmt: skip
        self._by_types: dict[tuple[Any, ...], _Bound] = {}
        # Calls pick their specialisation by a cheap key of the arguments' kinds.
        self._by_kinds: dict[tuple[Any, ...], _Bound] = {}
        # Cheaper still, for calls whose arguments' kinds are their types (no array,
        # no Numba object among them: scalars): the argument types -> the derivative
        # of a specialisation that inserts nothing (no defaults, functions or results).
        self._by_scalar_types: dict[tuple[type, ...], Derivative] = {}
        self._single: _Bound | None = None
        n, given = self._n_params, len(activities)
        if not (self._required <= given <= n + 1):
            least = f"{self._required} (the parameters without defaults)"
            raise ActivityError(
                f"'{self.name}' has {n} parameters, so autodiff needs {n} activities "
                f"(one more if it returns a value; at least {least}, then the return's, "
                f"leaving out parameters with defaults); got {given}"
            )
        signature = _signature_of(dispatcher, sig)
        if signature is not None and sig is not None:
            self._single = self._specialize(signature, self._given_for(signature))
        elif signature is not None:
            # The dispatcher's only signature so far: ready before the first call
            # (higher order, njit), but calls of other types get their own. Its types
            # may not suit these activities (an earlier call with ints): the calls'
            # own types then decide.
            with contextlib.suppress(ActivityError, TypeError, EnzymeError):
                self._specialize(signature, self._given_for(signature))

    def _given_for(self, signature: tuple[Any, ...]) -> int:
        """How many parameters the activities cover, for Numba argument types
        ``signature`` of all of them: all but the last activity, the return's, when the
        function returns a value."""
        return len(self.activities) - (1 if numba_frontend.returns_value(
            self.dispatcher, signature
        ) else 0)  # fmt: skip

    def _specialize(self, signature: tuple[Any, ...], given: int) -> _Bound:
        """The derivative for Numba argument types ``signature`` of all parameters, the
        activities covering the first ``given`` (compiled once)."""
        key = (signature, given)
        found = self._by_types.get(key)
        if found is not None:
            return found
        if given < self._required:
            raise ActivityError(
                f"'{self.name}' returns a value and its parameters without defaults are "
                f"{self._required}: give autodiff one activity for each, then the return's"
            )
        parameters: tuple[Activity, ...] = (
            *self.activities[:given],
            *([Const] * (self._n_params - given)),
        )
        spec = numba_frontend.specialize(self.dispatcher, signature, strided=True)
        returned: tuple[Activity, ...] = tuple(self.activities[given:])
        if spec.results is not None and returned:
            # Arrays and tuples come back through output arrays, one per part.
            act = part_activity(self.name, self.mode, returned[0])
            # Integer and boolean parts have no derivative: Const (no seed, no tangent).
            returned = tuple(act if part.differentiable else Const for part in spec.results)
        for i in spec.functions:
            if parameters[i] is not Const:
                raise ActivityError(
                    f"parameter {i} ('{self._names[i]}') of '{self.name}' is an @njit "
                    "function, which can only be Const (its calls are differentiated with "
                    f"the function that makes them); got {parameters[i].name}"
                )
        # Where each parameter's arguments start in a call (defaults inserted).
        starts, at = [], 0
        for act in parameters:
            starts.append(at)
            at += 2 if act.shadow else 1
        passed = tuple(a for i, a in enumerate(parameters) if i not in spec.functions)
        params, ret = check_activities(spec.wrapper, self.mode, (*passed, *returned))
        wrapper, mode, options = spec.wrapper, self.mode, self.options
        if spec.results is not None or spec.functions:
            # Output arrays' shadows are seeds, and functions shift the positions that
            # zeroed_params reports: the caller zeroes the shadows.
            options = replace(options, zeroes_shadows=False)
        serial = functools.cache(lambda: Derivative(wrapper, mode, params, ret, options))
        try:
            derivative = None
            if self.threads > 1 and numba_frontend.is_parallel(self.dispatcher):
                derivative = self._threaded(signature, params, ret)
            if derivative is None:
                derivative = serial()
            else:
                # Differentiated again or called from @njit code: the serial derivative
                # (Enzyme cannot differentiate the launches; the same numbers).
                derivative.serial_twin = serial
        except EnzymeError:
            # Numba's fully optimised code can be easier to analyse (types that only
            # show after its optimisation); slower derivatives, but some.
            spec = numba_frontend.specialize(
                self.dispatcher, signature, numba_optimized=True, strided=True
            )
            derivative = Derivative(spec.wrapper, self.mode, params, ret, options)
        results = None
        if spec.results is not None:
            positions, at = [], 0
            for act in passed:
                positions.append(at)
                at += 2 if act.shadow else 1
            results = ArrayResultCall(
                derivative,
                self.name,
                self.mode,
                self.activities[given],
                spec.results,
                self.options.width,
                self.dispatcher,
                tuple(positions),
            )
        found = _Bound(
            derivative,
            given,
            tuple(self._defaults[given:]),
            sum(2 if act.shadow else 1 for act in self.activities[:given]),
            results,
            tuple(starts[i] for i in spec.functions),
        )
        self._by_types[key] = found
        return found

    def _threaded(self, signature: tuple[Any, ...], params: Any, ret: Any) -> Derivative | None:
        """The reverse derivative with the prange loops on ``threads`` threads, or None,
        with a PerformanceWarning saying why, where that cannot be built (the caller
        then builds the serial one: the same numbers, on one thread)."""
        if self.mode is not Reverse:
            reason = "in forward mode the prange loops run on one thread"
        elif self.options.width != 1:
            # The launches' rules take one shadow per array, not a batch of them.
            reason = f"with width={self.options.width} the prange loops run on one thread"
        else:
            try:
                parallel = numba_frontend.specialize(
                    self.dispatcher, signature, strided=True, threads=self.threads
                )
                # Its shadows are zeroed by the caller, each thread's share on its thread
                # (_transforms.shadow_like).
                caller_zeroes = replace(self.options, zeroes_shadows=False)
                return Derivative(parallel.wrapper, self.mode, params, ret, caller_zeroes)
            except Exception as exc:  # any refusal falls back, and says so
                text = str(exc).strip()
                reason = text.splitlines()[0] if text else type(exc).__name__
        if self._threads_asked is None:  # the default: serial where threads are not
            log(f"'{self.name}': its derivative runs on one thread ({reason})")
            return None
        warn_at_user(
            PerformanceWarning(
                f"autodiff({self.name}, ..., threads={self.threads}): the prange loops of "
                f"this parallel=True function cannot run on threads in its derivative "
                f"({reason}); its derivative runs on one thread instead (the same numbers). "
                "threads=1 builds the serial one directly."
            )
        )
        return None

    def specialize(self, signature: tuple[Any, ...]) -> Derivative:
        """The derivative for Numba argument types ``signature`` of every parameter."""
        return self._specialize(signature, self._given_for(signature)).derivative

    def for_arguments(self, args: tuple[Any, ...]) -> Derivative:
        """The derivative for the types of these call arguments."""
        return self._bound_for(args).derivative

    def call_for(self, args: tuple[Any, ...]) -> Callable[[tuple[Any, ...]], Any]:
        """What a call with these arguments runs, taking them as one tuple: the same
        for any arguments of the same kinds (``argument_kind``)."""
        return self._bound_for(args)

    def zeroed_params(self, args: tuple[Any, ...]) -> frozenset[int]:
        """The parameters whose shadows the derivative a call with these arguments
        runs zeroes itself (``Options.zeroes_shadows``)."""
        return self._bound_for(args).derivative.zeroed_params

    def _bound_for(self, args: tuple[Any, ...]) -> _Bound:
        if self._single is not None:
            return self._single
        kinds = tuple(map(argument_kind, args))
        found = self._by_kinds.get(kinds)
        if found is None:
            from numba.core.errors import TypingError

            try:
                signature, given = self._types_of(args)
                found = self._by_kinds[kinds] = self._specialize(signature, given)
                if _inserts_nothing(found) and all(
                    k is type(a) for k, a in zip(kinds, args, strict=True)
                ):
                    # argument_kind of each argument is its type, as it is for any
                    # later call with arguments of these types: the same specialisation.
                    self._by_scalar_types[kinds] = found.derivative
            except TypingError as exc:
                types = [self.dispatcher.typeof_pyval(a) for a in args]
                raise does_not_compile(self.dispatcher, types, exc) from None
        return found

    def _types_of(self, args: tuple[Any, ...]) -> tuple[tuple[Any, ...], int]:
        """Numba types of every parameter for a call with ``args`` (shadows and seed
        skipped; defaults for the parameters the activities leave out), and how many
        parameters the activities cover: all but the return's activity, which only a
        compile tells apart from a parameter's when parameters have defaults."""
        chosen: tuple[tuple[Any, ...], int] | None = None
        given = len(self.activities)
        for count in (given - 1, given):
            if not self._required <= count <= self._n_params:
                continue
            types = []
            pos = 0
            for i, act in enumerate(self.activities[:count]):
                if pos >= len(args):
                    raise TypeError(
                        f"the {self.mode.name.lower()} derivative of '{self.name}' got only "
                        f"{len(args)} arguments"
                    )
                types.append(self._type_of(i, act, args[pos]))
                pos += 2 if act.shadow else 1
            types += [self.dispatcher.typeof_pyval(d) for d in self._defaults[count:]]
            signature = numba_frontend.resolve_signature(self.dispatcher, tuple(types))
            if self._given_for(signature) == count:
                return signature, count
            chosen = chosen or (signature, count)
        assert chosen is not None  # __init__ checked the number of activities
        return chosen  # the activities do not fit: check_activities says how

    def _type_of(self, i: int, act: Activity, value: Any) -> Any:
        """The Numba type of argument ``value`` of parameter i, or a TypeError /
        ValueError naming the parameter (not Numba's TypingError without it)."""
        where = f"parameter {i} ('{self._names[i]}') of '{self.name}'"
        if value is None or isinstance(value, (str, bytes, complex)):
            raise TypeError(
                f"{where} got {type(value).__name__}; pass a real number or a NumPy array"
            )
        if act is Active and isinstance(value, np.ndarray) and value.ndim > 0:
            raise TypeError(
                f"{where} is Active, a float scalar; got an array of shape {value.shape} "
                "(an array parameter is Duplicated in Reverse mode)"
            )
        if isinstance(value, np.ndarray) and not value.dtype.isnative:
            raise ValueError(
                f"{where} has byte order {value.dtype.str}, which Numba cannot compile "
                "for; pass it in native byte order (x.astype(x.dtype.newbyteorder('=')))"
            )
        if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**64:
            digits = len(str(abs(value)))
            raise ValueError(
                f"{where} got an integer of {digits} digits, which no 64-bit number holds"
            )
        try:
            return self.dispatcher.typeof_pyval(value)
        except Exception as exc:  # Numba's typing error, without the parameter's name
            raise TypeError(f"{where}: Numba cannot type {type(value).__name__} ({exc})") from None

    def __call__(self, *args: Any) -> Any:
        single = self._single
        if single is not None:
            return single(args)
        n = len(args)  # the key built directly for the common arities: ~0.1 us less
        key = (
            (type(args[0]), type(args[1]))
            if n == 2
            else (type(args[0]),)
            if n == 1
            else tuple(map(type, args))
        )
        direct = self._by_scalar_types.get(key)
        if direct is not None:
            return direct(*args)
        return self._bound_for(args)(args)

    def only(self) -> Derivative:
        """The single specialisation (for higher order and inspection)."""
        if len(self._by_types) != 1:
            raise ActivityError(
                f"the derivative of '{self.name}' has {len(self._by_types)} specialisations; "
                "give autodiff a sig= (or call it once) to pick one"
            )
        bound = next(iter(self._by_types.values()))
        if bound.results is not None:
            raise ActivityError(
                f"'{self.name}' returns an array or a tuple: its derivative cannot be "
                "differentiated again or called from @njit code yet; write the result into "
                "an output parameter for that"
            )
        if bound.functions:
            raise ActivityError(
                f"the derivative of '{self.name}' takes @njit functions as arguments; to "
                "differentiate it again or call it from @njit code, close over the "
                "function instead of passing it"
            )
        if bound.defaults:
            raise ActivityError(
                f"the derivative of '{self.name}' leaves out parameters with defaults; to "
                "differentiate it again or call it from @njit code, give an activity for "
                "every parameter"
            )
        return bound.derivative

    def as_function(self) -> Any:
        return self.only().as_function()

    def __reduce__(self) -> tuple[Any, ...]:
        # Numba dispatchers pickle themselves; the derivative is rebuilt from them.
        return (
            NumbaDerivative,
            (
                self.dispatcher,
                self.mode,
                self.activities,
                self.options,
                self._sig,
                self._threads_asked,
            ),
        )

    def njit(self) -> Any:
        """The single specialisation as an ``@numba.njit`` function (see Derivative.njit)."""
        return self.only().njit()

    def inspect_llvm(self, optimized: bool = False) -> str:
        """The IR of the derivative of the single specialisation."""
        return self.only().inspect_llvm(optimized)

    def __repr__(self) -> str:
        acts = ", ".join(a.name for a in self.activities)
        return f"<enzyme_py derivative of Numba function '{self.name}' {self.mode.name}({acts})>"
