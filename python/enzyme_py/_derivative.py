"""``Derivative``: one compiled derivative of one function, as a fast Python callable.

A derivative is built here, once, for every kind of caller (``autodiff``, Numba
dispatchers, kernels, higher order): the registered custom rules are applied to the
function, the request goes to ``_build`` (memory cache, disk cache, Enzyme), and the
calling plan (``_convention``) drives the C++ fast caller, the checked Python path and
the ``@njit`` callers alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, NoReturn

import numpy as np

from enzyme_py import _arguments, _build, _cache, _convention, _njit_call, _state, frontends, rules
from enzyme_py._activities import RecursionBatchRefused, check_activities
from enzyme_py._read_only import read_only_params
from enzyme_py._signature import DFT_CONSTANT, DFT_DUP_ARG, DFT_DUP_NONEED, DFT_OUT_DIFF, Param
from enzyme_py.core import (
    Active,
    ActiveOnly,
    Activity,
    ActivityError,
    Const,
    Dual,
    DualOnly,
    Duplicated,
    DuplicatedOnly,
    EnzymeError,
    Forward,
    Mode,
    Reverse,
)
from enzyme_py.frontends import IRFunction

__all__ = ["Derivative", "Options", "resolve_function"]

# Per parameter. Enzyme's "primal not needed" drops writes a function reads back
# (out[i] /= s): DuplicatedOnly / DualOnly parameters are built as Duplicated / Dual,
# the caller passes the primal anyway.
_PARAMETER_DIFFE = {
    Const: DFT_CONSTANT,
    Active: DFT_OUT_DIFF,
    ActiveOnly: DFT_OUT_DIFF,
    Duplicated: DFT_DUP_ARG,
    Dual: DFT_DUP_ARG,
    DuplicatedOnly: DFT_DUP_ARG,
    DualOnly: DFT_DUP_ARG,
}
# Per return value: a DualOnly return keeps DUP_NONEED (the tangent only).
_RETURN_DIFFE = {**_PARAMETER_DIFFE, DualOnly: DFT_DUP_NONEED}

# Called instead of the derivative at its first call (``autodiff(..., check=True)``):
# hook(derivative, args) makes the call, checks it and returns its result.
FirstCallHook = Callable[["Derivative", tuple[Any, ...]], Any]


@dataclass(frozen=True)
class Options:
    """How a derivative is built and called, beyond its mode and activities."""

    width: int
    runtime_activity: bool
    strong_zero: bool
    first_call: FirstCallHook | None = None
    atomic_add: bool = False  # reverse: shadows updated atomically (kernels)
    primal_only: bool = False  # no differentiation: the function itself
    # Reverse mode in halves (_split.py): 1 the augmented forward pass, 2 its reverse.
    split: int = 0
    # Combined reverse mode, width 1: the derivative zeroes the shadows of C-contiguous
    # float arrays itself (``zeroed_params``; each sized by its array's shapes, or by a
    # hidden byte-size slot), and writes them where it can rather than adding into
    # them (src/shadow_zeroing.h); the helpers pass those shadows uninitialised.
    zeroes_shadows: bool = False
    # Reverse mode: the most threads a fused reverse stencil loop runs on (the pass
    # src/fused_threads.h; the same numbers on any number); 0: one per core.
    fused_workers: int = 0


def resolve_function(f: Any) -> IRFunction:
    """The function to differentiate that ``f`` is: itself, or a derivative's
    function (higher order)."""
    if isinstance(f, IRFunction):
        return f
    if isinstance(f, Derivative) or hasattr(f, "as_function"):  # higher order
        return f.as_function()  # type: ignore[no-any-return]
    raise TypeError(
        f"autodiff cannot differentiate {f!r}: give a Numba @njit function, a function "
        "from ez.llvm_ir(text, name), or an attribute of ez.c(source) / ez.cpp(source) / "
        "ez.cython(source)"
    )


def _split_plan(plan: _convention.CallPlan, split: int) -> _convention.CallPlan:
    """The plan of a half of split reverse mode, from the combined reverse plan.

    1, the augmented forward pass: the same arguments without the seed; it writes the
    tape's address, then the primal (read as ``(primal,)``). 2, the reverse pass: the
    same arguments (the tape's address goes into one more slot after them, filled by
    ``call_split``); it writes the adjoints only (read as ``(None, *adjoints)``)."""
    result = plan.result
    if split == 1:
        steps, names = plan.steps, plan.argument_names
        if names and names[-1] == "seed":
            steps, names = steps[:-1], names[:-1]
        out = _convention.ResultPlan(
            _convention.ResultShape.REVERSE, result.primal_fields, (), 0,
            result.tangent_lanes, result.tangent_struct, 1 + result.primal_fields,
        )  # fmt: skip
        return replace(plan, steps=steps, result=out, arity=len(names), argument_names=names)
    out = _convention.ResultPlan(
        _convention.ResultShape.REVERSE, 0, result.adjoints, 0, result.tangent_lanes,
        result.tangent_struct, sum(result.adjoints),
    )  # fmt: skip
    return replace(plan, result=out)


def _zeroed_shadows(
    fn: IRFunction, mode: Mode, params: tuple[Activity, ...], options: Options
) -> tuple[tuple[int, tuple[int, ...], int], ...]:
    """The shadows a derivative with ``options.zeroes_shadows`` zeroes itself (the
    Request's ``zeroed_shadows``): those of Duplicated C-contiguous float arrays, each
    with the hidden parameters giving its shape, or none (a C pointer: its byte size
    is then passed in a slot of its own, ``_convention.with_byte_sizes``)."""
    if not options.zeroes_shadows or mode is not Reverse or options.width != 1:
        return ()
    if options.split or options.atomic_add or options.primal_only:
        return ()
    dims: dict[int, list[int]] = {}
    for i, p in enumerate(fn.params):
        if p.hidden is not None and p.hidden[0] == "shape":
            dims.setdefault(p.hidden[1], []).append(i)
    zeroed = tuple(
        (i, tuple(dims.get(i, ())), p.dtype.itemsize)
        for i, (p, act) in enumerate(zip(fn.params, params, strict=True))
        if act in (Duplicated, DuplicatedOnly)
        and p.kind == "pointer"
        and p.hidden is None
        and not p.strided
        and p.layout_of is None
        and p.dtype is not None
        and p.dtype.kind == "f"
    )
    if any(not shape for _, shape, _ in zeroed) and fn.module.native.reaches_recursion(fn.name):
        # A C pointer's byte size would be a parameter added to the derivative, which
        # a recursive derivative also calls: the caller zeroes the shadows instead.
        return ()
    return zeroed


class Derivative:
    """A compiled derivative; call it with the arguments of ``autodiff``'s convention."""

    def __init__(
        self,
        fn: IRFunction,
        mode: Mode,
        params: tuple[Activity, ...],
        ret: Activity | None,
        options: Options,
    ):
        self.function = fn
        self.mode = mode
        self.activities = params
        self.return_activity = ret
        self.width = options.width
        self._options = options
        self._as_function: IRFunction | None = None
        self._alias_safe: Derivative | None = None
        self._alias_safe_refused: str | None = None  # why alias_safe_twin is refused
        self._njit: Any = None
        self._read_only: list[bool] | None = None  # per parameter, once asked (_written)
        # Where this derivative runs loops on threads (a Numba prange's): the serial
        # derivative it stands for when differentiated again or called from @njit code.
        self.serial_twin: Callable[[], Derivative] | None = None
        self._first_call = options.first_call
        if ret is None:
            ret_code, return_primal = DFT_CONSTANT, False
        else:
            ret_code, return_primal = _RETURN_DIFFE[ret], ret.primal_needed
        if options.width > 1 and fn.module.native.reaches_recursion(fn.name):
            raise RecursionBatchRefused(
                f"'{fn.display_name}' is recursive (it, or a function it calls, calls "
                f"itself): Enzyme v0.0.289 batches derivatives of recursion wrongly, so "
                f"width={options.width} is refused; call the width=1 derivative once per "
                "direction instead"
            )
        zeroed = _zeroed_shadows(fn, mode, params, options)
        # Positions among the visible parameters (the call's arguments, shadows left
        # out) of the arrays whose shadows this derivative zeroes itself.
        visible = {i: v for v, (i, _) in enumerate(fn.visible_params)}
        self.zeroed_params = frozenset(visible[p] for p, _, _ in zeroed)
        self._request = _build.Request(
            forward=mode is Forward,
            args=tuple(_PARAMETER_DIFFE[a] for a in params),
            ret=ret_code,
            return_primal=return_primal,
            width=options.width,
            runtime_activity=options.runtime_activity,
            strong_zero=options.strong_zero,
            atomic_add=options.atomic_add,
            primal_only=options.primal_only,
            split=options.split,
            zeroed_shadows=zeroed,
            fused_workers=options.fused_workers,
        )
        self._description = (
            f"'{fn.display_name}' in {mode.name} mode with activities {self._given()}"
        )
        self._built_function, self._compiled = self._compile(fn, mode, options)
        self.plan = _convention.plan_call(
            fn, mode, params, ret, options.width, return_primal, options.runtime_activity
        )
        if options.split:
            self.plan = _split_plan(self.plan, options.split)
        sized = [fn.params[p] for p, dims, _ in zeroed if not dims]
        if sized:
            self.plan = _convention.with_byte_sizes(self.plan, sized)
        self.entry = self._compiled.entry
        if (len(self.plan.in_codes) + (options.split == 2), self.plan.result.out_slots) != (
            len(self._compiled.in_slots),
            len(self._compiled.out_slots),
        ):
            raise EnzymeError(
                f"the derivative of '{fn.display_name}' has an unexpected signature "
                f"({self._compiled.in_slots} -> {self._compiled.out_slots}); this is a bug "
                "in enzyme_py"
            )
        # The halves of split mode are called through call_split only.
        self._fast = None if options.split else self._fast_caller()

    def _compile(
        self, fn: IRFunction, mode: Mode, options: Options
    ) -> tuple[IRFunction, _build.Compiled]:
        """The function built (custom rules applied to any derivative; a function itself
        needs none) and its compiled derivative: a combined reverse derivative from
        ``fn.combined_form`` where the frontend gives one, from ``fn`` where Enzyme
        refuses that form (a Numba function calling LAPACK: mixed activity)."""
        if mode is Reverse and not options.split and fn.combined_form is not None:
            combined = rules.with_rules(fn.combined_form())
            try:
                return combined, _build.derivative(combined, self._request, self._description)
            except EnzymeError:
                pass  # the function as called, below
        built = fn if options.primal_only else rules.with_rules(fn)
        return built, _build.derivative(built, self._request, self._description)

    def _given(self) -> str:
        """The activities as the user gave them: hidden parameters left out."""
        fn, ret = self.function, self.return_activity
        given = [a for p, a in zip(fn.params, self.activities, strict=True) if p.hidden is None]
        return ", ".join(a.name for a in (*given, *([ret] if ret else [])))

    @property
    def out_codes(self) -> str:
        """The slot codes of what the entry point writes after its inputs."""
        return self._compiled.out_slots

    @property
    def may_overlap(self) -> bool:
        """Whether calls whose arrays overlap must go to ``alias_safe_twin``."""
        return self.function.alias_safe is not None

    def _fast_caller(self) -> Any:
        """The native caller of this plan, or None where the entry point's slot codes
        differ from the plan's (a Numba boolean is passed as an ``i8``)."""
        native = _state.native
        plan = self.plan
        if plan.in_codes != self._compiled.in_slots:
            return None
        result = plan.result
        steps = [
            native.ArgStep(
                step.kind,
                step.code,
                step.dtype,
                step.dim
                if step.kind in (_convention.StepKind.SHAPE, _convention.StepKind.STRIDE)
                else step.lanes,
                step.kind == _convention.StepKind.SHADOW and plan.runtime_activity,
                # an array step's source: the array a shadow parameter is indexed as
                # (Param.layout_of; the caller takes C-contiguous arrays of its shape)
                step.source,
                # arrays of any strides and read-only ones, where the parameter takes them
                strided=step.param is not None and step.param.strided,
                readonly=step.param is not None and step.param.readonly,
            )
            for step in plan.steps
        ]
        return native.Caller(
            self.entry,
            plan.in_codes,
            self.out_codes,
            steps,
            result.shape,
            result.primal_fields,
            list(result.adjoints),
            result.tangent_fields,
            result.tangent_lanes,
            result.tangent_struct,
            # Calls whose arrays overlap take the checked path: to the build without
            # noalias, and to the check that no shadow overlaps an array.
            self.may_overlap
            or any(step.kind == _convention.StepKind.SHADOW for step in plan.steps),
        )

    # --- calling ------------------------------------------------------------
    def __call__(self, *args: Any) -> Any:
        hook = self._first_call
        if hook is not None:
            self._first_call = None
            return hook(self, args)
        # call(args), inlined: a Python frame less per call (~0.1 us of a scalar
        # derivative's ~1 us).
        try:
            if self._fast is not None:
                return self._fast(*args)
        except _state.native.ArgumentsRejected:
            pass  # the checked path below says what is wrong
        except _state.native.CalleeFailed as exc:
            self._callee_failed(exc)
        except _state.native.OutOfMemory as exc:
            self._raise_out_of_memory(exc)
        return self._call_checked(args)

    def call(self, args: tuple[Any, ...]) -> Any:
        """A call with ``args`` (a tuple), without the first-call hook."""
        try:
            if self._fast is not None:
                return self._fast(*args)
        except _state.native.ArgumentsRejected:
            pass  # the checked path below says what is wrong
        except _state.native.CalleeFailed as exc:
            self._callee_failed(exc)
        except _state.native.OutOfMemory as exc:
            self._raise_out_of_memory(exc)
        return self._call_checked(args)

    def fast_caller(self) -> Any:
        """The native caller of the fast path (``native.Caller``) once the first call
        has run (its hook, ``Options.first_call``, is then spent), else None."""
        return self._fast if self._first_call is None else None

    def raise_failure(self, exc: Exception) -> None:
        """Raises what the fast caller's CalleeFailed or OutOfMemory ``exc`` means (the
        function's own error, a MemoryError); returns for anything else."""
        if isinstance(exc, _state.native.CalleeFailed):
            self._callee_failed(exc)
        if isinstance(exc, _state.native.OutOfMemory):
            self._raise_out_of_memory(exc)

    def _callee_failed(self, exc: Exception) -> None:
        """Raises the function's own error, from the fast caller's CalleeFailed."""
        status, detail = (int(v) for v in str(exc).split())
        self._raise_callee_error(status, detail)

    def alias_safe_twin(self) -> Derivative:
        """The same derivative without the promise that arrays do not overlap. Raises
        ActivityError where that one is refused: without the promise enzyme_py cannot
        forward a Const scratch array's stores to its loads, and Enzyme would drop the
        derivative carried through it (_const_memory.py)."""
        if self._alias_safe_refused is not None:
            raise ActivityError(self._alias_safe_refused)
        if self._alias_safe is None:
            assert self.function.alias_safe is not None
            try:
                self._alias_safe = Derivative(
                    self.function.alias_safe(),
                    self.mode,
                    self.activities,
                    self.return_activity,
                    replace(self._options, first_call=None),
                )
            except ActivityError as exc:
                self._alias_safe_refused = (
                    f"arrays given to the derivative of '{self.function.display_name}' "
                    f"overlap, which takes its build for overlapping arrays, and {exc}"
                )
                raise ActivityError(self._alias_safe_refused) from None
        return self._alias_safe

    def alias_safe_entry(self) -> int | None:
        """The entry point for calls whose arrays overlap: None where this derivative
        takes them itself, 0 where they are refused (``alias_safe_twin`` is)."""
        if not self.may_overlap:
            return None
        try:
            return self.alias_safe_twin().entry
        except ActivityError:
            return 0

    def _raise_out_of_memory(self, exc: Exception) -> NoReturn:
        raise MemoryError(
            f"the {self.mode.name.lower()} derivative of '{self.function.display_name}' "
            f"ran out of memory: {exc}"
        ) from None

    def _raise_callee_error(self, status: int, detail: int) -> None:
        if self.function.on_error is not None:
            self.function.on_error(status, detail)
        raise RuntimeError(f"'{self.function.display_name}' failed with status {status}")

    def _call_checked(self, args: tuple[Any, ...]) -> Any:
        if len(args) != self.plan.arity:
            what = f"the {self.mode.name.lower()} derivative of '{self.function.display_name}'"
            if self._options.primal_only:  # m.f(...): the function itself
                what = f"'{self.function.display_name}'"
            raise TypeError(
                f"{what} takes {self.plan.arity} arguments "
                f"({', '.join(self.plan.argument_names)}); got {len(args)}"
            )
        filled = _convention.fill_slots(self.plan, args, self._compiled.in_slots)
        if _arguments.overlapping(filled.arrays):
            self._refuse_written_consts_sharing_memory(args)
            if self.may_overlap:
                return self.alias_safe_twin()._call_checked(args)
        reader = self._run(
            filled, len(self.plan.in_codes), lambda: _state.native.invoke(self.entry, filled.slots)
        )
        return _convention.read_results(self.plan.result, reader)

    def _refuse_written_consts_sharing_memory(self, args: tuple[Any, ...]) -> None:
        """A Const array the function writes, sharing memory with an array that has a
        shadow, is refused (``_arguments.check_written_consts_apart``)."""
        consts_steps, shadowed_steps = self._const_and_shadowed_arrays()
        consts = [
            (step.where, step.name, args[step.arg], index)
            for step, index in consts_steps
            if isinstance(args[step.arg], np.ndarray)
        ]
        shadowed = [
            (step.name, args[step.arg])
            for step in shadowed_steps
            if isinstance(args[step.arg], np.ndarray)
        ]
        _arguments.check_written_consts_apart(
            consts, shadowed, self._written, self.function.display_name
        )

    def _const_and_shadowed_arrays(
        self,
    ) -> tuple[list[tuple[_convention.InputStep, int]], list[_convention.InputStep]]:
        """The array steps of the plan whose parameters are Const (with the parameter's
        index) and those whose parameters have a shadow."""
        activity_of = {  # activities are per LLVM parameter, hidden ones included
            id(param): (index, self.activities[index])
            for index, param in self.function.visible_params
        }
        consts: list[tuple[_convention.InputStep, int]] = []
        shadowed: list[_convention.InputStep] = []
        for step in self.plan.steps:
            found = activity_of.get(id(step.param))
            if step.kind != _convention.StepKind.ARRAY or found is None:
                continue
            index, act = found
            if act is Const:
                consts.append((step, index))
            elif act.shadow:
                shadowed.append(step)
        return consts, shadowed

    def _written(self, index: int) -> bool:
        """Whether the function may write parameter ``index`` (LLVM's inference, asked
        once; where it cannot be had, every parameter is taken as written: a refusal
        rather than a silent zero)."""
        if self._read_only is None:
            try:
                self._read_only = list(read_only_params(self.function))
            except Exception:
                self._read_only = [False] * len(self.function.params)
        return not self._read_only[index]

    def written_consts_beside_shadows(self) -> list[tuple[int, int, str]]:
        """For callers that check arrays themselves (``njit()``, ``cython_declaration()``):
        each Const array the function writes and each array with a shadow, as their
        argument positions, with the message refusing them where they share memory
        (``_arguments.check_written_consts_apart``)."""
        consts, shadowed = self._const_and_shadowed_arrays()
        return [
            (
                const.arg,
                other.arg,
                _arguments.written_const_message(
                    const.where, const.name, other.name, self.function.display_name
                ),
            )
            for const, index in consts
            if shadowed and self._written(index)
            for other in shadowed
        ]

    def _run(
        self, filled: _convention.FilledSlots, inputs: int, invoke: Callable[[], None]
    ) -> _convention.SlotReader:
        """``invoke`` the entry point on ``filled``'s slots; the function's own error, or
        a MemoryError for the tape, raised; the shadows given as stand-ins copied back;
        a reader of the output slots (after the ``inputs`` input slots)."""
        try:
            invoke()
        except _state.native.OutOfMemory as exc:
            self._raise_out_of_memory(exc)
        except _state.native.CalleeFailed as exc:  # raised on another thread's chunk
            self._callee_failed(exc)
        errors = filled.errors
        if errors[0] != 0:
            self._raise_callee_error(int(errors[0]), int(errors[1]))
        filled.copy_back()
        return _convention.SlotReader(filled.slots, self.out_codes, inputs)

    def call_split(self, args: tuple[Any, ...], tape: Any, address: int = 0) -> Any:
        """A call of a half of split mode (``options.split``): the augmented forward
        pass, allocating into ``tape`` (a native SplitTape), returns ``(tape address,
        primal, arrays passed)``; the reverse pass, given the forward's ``address``,
        returns the adjoints of the Active parameters (a tuple)."""
        split = self._options.split
        if len(args) != self.plan.arity:
            raise TypeError(
                f"the {'forward' if split == 1 else 'reverse'} half of the split derivative "
                f"of '{self.function.display_name}' takes {self.plan.arity} arguments "
                f"({', '.join(self.plan.argument_names)}); got {len(args)}"
            )
        codes = self._compiled.in_slots
        filled = _convention.fill_slots(self.plan, args, codes)
        if split == 2:
            filled.slots[len(codes) - 1] = address
        reader = self._run(
            filled,
            len(codes),
            lambda: _state.native.invoke_split(self.entry, filled.slots, tape, split == 1),
        )
        if split == 1:
            address = int(reader.take())
            (primal,) = _convention.read_results(self.plan.result, reader)
            return address, primal, filled.arrays
        _, *adjoints = _convention.read_results(self.plan.result, reader)
        return tuple(adjoints)

    # --- higher order, pickling, inspection ----------------------------------
    def as_function(self) -> IRFunction:
        """This derivative as a function to differentiate again (higher order).

        Its parameters are the derivative's, in calling order (shadows after their
        values, then the seed); a reverse derivative returns its adjoints by value.
        """
        if self.serial_twin is not None:
            return self.serial_twin().as_function()
        if self._as_function is None:
            if self.width != 1:
                raise ActivityError("only derivatives of width 1 can be differentiated again")
            module = frontends.parse_module(self.ir_texts().derivative_module)
            # Enzyme differentiates its own raw output poorly (dead primal code,
            # placeholder phis trip its assertions); it handles the optimized form.
            module.native.optimize(_build.PASSES_TO_DIFFERENTIATE_AGAIN)
            name = f"{self._compiled.artifact.entry_name}_derivative"
            llvm_fn = frontends.function_of(module, name)
            self._as_function = IRFunction(
                module,
                name,
                self._derivative_params(),
                llvm_fn.ret,
                f"{self.mode.name.lower()} derivative of {self.function.display_name}",
                self.function.on_error,
                origin=("derivative", self),
                # The derivative keeps the function's noalias promise: calls whose
                # arrays overlap differentiate the twin without it.
                alias_safe=(lambda: self.alias_safe_twin().as_function())
                if self.may_overlap
                else None,
            )
            if len(self._as_function.params) != len(llvm_fn.params):
                raise EnzymeError(
                    f"the derivative of '{self.function.display_name}' has "
                    f"{len(llvm_fn.params)} parameters, {len(self._as_function.params)} "
                    "were expected; this is a bug in enzyme_py"
                )
        return self._as_function

    def _derivative_params(self) -> tuple[Param, ...]:
        """The derivative's parameters: each value, its shadow, then the seed."""
        fn = self.function
        index: dict[int, int] = {}
        params: list[Param] = []
        # arrays whose shapes are passed (memoryviews, Numba arrays; not raw pointers)
        shaped = {p.hidden[1] for p in fn.params if p.hidden and p.hidden[0] == "shape"}
        for i, (p, act) in enumerate(zip(fn.params, self.activities, strict=True)):
            index[i] = len(params)
            params.append(p)
            if act.shadow:
                prefix = "d" if self.mode is Reverse else "t"
                # An array's shadow is indexed with the array's shape (and strides):
                # calls check its shape and lay it out so (Param.layout_of).
                array = p.kind == "pointer" and (p.strided or i in shaped)
                like = i if array else None
                params.append(
                    Param(prefix + p.name, p.kind, p.dtype, strided=p.strided, layout_of=like)
                )
        if self.mode is Reverse and self.return_activity in (Active, ActiveOnly):
            assert fn.ret is not None
            params.append(Param("seed", "float", fn.ret.dtype))
        # Hidden shapes and strides, and shadows' layouts, follow their array to its
        # new position.
        moved: list[Param] = []
        for p in params:
            if p.hidden is not None and p.hidden[0] in ("shape", "stride"):
                p = replace(p, hidden=(p.hidden[0], index[p.hidden[1]], p.hidden[2]))
            if p.layout_of is not None:
                p = replace(p, layout_of=index[p.layout_of])
            moved.append(p)
        return tuple(moved)

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled as what is needed to build it again; in the new process the
        # disk cache usually serves the compiled code.
        built = self._built_function.origin
        if built is not None and built[0] == "custom rules":
            raise TypeError(
                f"the derivative of '{self.function.display_name}' cannot be pickled: it "
                f"uses custom rules (for {', '.join(built[1])}), which are registered in "
                "this process only"
            )
        if self.function.origin is None:
            raise TypeError(
                f"the derivative of '{self.function.display_name}' cannot be pickled: its "
                "function was not made by ez.llvm_ir, ez.c, ez.cpp, ez.cython or a Numba "
                "dispatcher"
            )
        return (
            _rebuild_derivative,
            (self.function.origin, self.mode, self.activities, self.return_activity, self._options),
        )

    def njit(self) -> Any:
        """This derivative as an ``@numba.njit`` function (same arguments and results),
        to call from inside other Numba code. Made once and kept."""
        if self.serial_twin is not None:
            return self.serial_twin().njit()
        self._refuse_if_zeroing("njit()")
        if self._njit is None:
            self._pin_code()
            safe = self.alias_safe_entry()
            self._njit = _njit_call.compile_njit(
                self.plan,
                self.entry,
                safe,
                self.out_codes,
                self.function.display_name,
                self.written_consts_beside_shadows(),
            )
        return self._njit

    def cython_declaration(self, name: str | None = None) -> str:
        """Cython text declaring ``name`` (default ``d<function>``), a ``cdef inline
        ... noexcept nogil`` function that calls this derivative through its C address
        from Cython code without the GIL (the twin of ``njit()``; see
        ``enzyme_py._cython_call`` for its parameters and return codes)."""
        from enzyme_py import _cython_call

        self._refuse_if_zeroing("cython_declaration()")
        self._pin_code()
        return _cython_call.declaration(self, name)

    def _pin_code(self) -> None:
        """Compiled code (Numba's, Cython's) keeps the entry addresses, not this
        derivative: they stay in the JIT for the process."""
        _build.pin(self._compiled)
        if self.alias_safe_entry():
            _build.pin(self.alias_safe_twin()._compiled)

    def _refuse_if_zeroing(self, what: str) -> None:
        # Called by other code with its own shadows, it would overwrite them.
        if self.zeroed_params:
            raise EnzymeError(
                f"this derivative zeroes its shadows itself (a helper's); this is a bug in "
                f"enzyme_py: {what} is for derivatives made by ez.autodiff"
            )

    def ir_texts(self) -> _cache.IRTexts:
        """The derivative's IR as text (read from the disk cache when first asked for)."""
        return _build.ir_texts(
            self._compiled, self._built_function, self._request, self._description
        )

    def inspect_llvm(self, optimized: bool = False) -> str:
        """The derivative's LLVM IR: as Enzyme made it, or the final optimized module."""
        texts = self.ir_texts()
        return texts.optimized_ir if optimized else texts.enzyme_ir

    def __repr__(self) -> str:
        acts = ", ".join(a.name for a in self.activities)
        if self.return_activity is not None:
            acts += f" -> {self.return_activity.name}"
        return (
            f"<enzyme_py.Derivative of '{self.function.display_name}' "
            f"{self.mode.name}({acts}) width={self.width}>"
        )


def primal_caller(fn: IRFunction) -> Derivative:
    """What runs ``fn`` itself, no Enzyme (``m.f(x, n)``): the engine's primal-only
    request, its arguments checked as a derivative's Const arguments."""
    # A struct return cannot be Const to Enzyme's checks; without Enzyme it can (Dual
    # only passes the check; the request returns the primal alone).
    returns = [] if fn.ret is None else [Dual if fn.ret.fields > 1 else Const]
    params, ret = check_activities(fn, Forward, [Const] * len(fn.visible_params) + returns)
    options = Options(1, False, False, primal_only=True)
    return Derivative(fn, Forward, params, None if ret is None else Const, options)


frontends.ir.primal_caller = primal_caller


def _rebuild_derivative(
    origin: tuple[Any, ...],
    mode: Mode,
    activities: tuple[Activity, ...],
    ret: Activity | None,
    options: Options,
) -> Derivative:
    return Derivative(frontends.rebuild_function(origin), mode, activities, ret, options)
