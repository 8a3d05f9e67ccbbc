"""``autodiff``: one derivative of one function, as a fast Python callable.

The request is checked here, completely, before the engine sees it: activity
kinds against parameter kinds and mode, then every argument of every call
(dtype, shape, order, writability of shadows) before native code runs.
"""

from __future__ import annotations

import numbers
import operator
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, NoReturn

import numpy as np

from enzyme_py import _build, _state, frontends
from enzyme_py._signature import Param
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
from enzyme_py.frontends import numba as numba_frontend

__all__ = ["Derivative", "autodiff"]

# CDIFFE_TYPE values (src/enzyme_capi.h).
_DFT_OUT_DIFF, _DFT_DUP_ARG, _DFT_CONSTANT, _DFT_DUP_NONEED = 0, 1, 2, 3
_DIFFE = {
    Const: _DFT_CONSTANT,
    Active: _DFT_OUT_DIFF,
    ActiveOnly: _DFT_OUT_DIFF,
    Duplicated: _DFT_DUP_ARG,
    Dual: _DFT_DUP_ARG,
    DuplicatedOnly: _DFT_DUP_NONEED,
    DualOnly: _DFT_DUP_NONEED,
}

# The slot code of each scalar dtype.
_SLOT_CODE: dict[np.dtype, str] = {
    np.dtype(np.float64): "d",
    np.dtype(np.float32): "f",
    np.dtype(np.int64): "q",
    np.dtype(np.int32): "i",
    np.dtype(np.int16): "h",
    np.dtype(np.int8): "b",
    np.dtype(np.bool_): "?",
}

# Slot codes of the engine's entry point -> (numpy view dtype, items per slot).
_SLOT_VIEWS: dict[str, tuple[np.dtype, int]] = {
    "d": (np.dtype(np.float64), 1),
    "f": (np.dtype(np.float32), 2),
    "q": (np.dtype(np.int64), 1),
    "i": (np.dtype(np.int32), 2),
    "h": (np.dtype(np.int16), 4),
    "b": (np.dtype(np.int8), 8),
    "?": (np.dtype(np.uint8), 8),
    "p": (np.dtype(np.uint64), 1),
}


def _resolve(f: Any) -> IRFunction:
    if isinstance(f, IRFunction):
        return f
    if isinstance(f, Derivative) or hasattr(f, "as_function"):  # higher order
        return f.as_function()
    raise TypeError(
        f"autodiff cannot differentiate {f!r}: give a Numba @njit function, a function "
        "from ez.llvm_ir(text, name), or an attribute of ez.c(source) / ez.cpp(source)"
    )


def _check_activities(
    fn: IRFunction, mode: Mode, activities: Sequence[Any]
) -> tuple[tuple[Activity, ...], Activity | None]:
    """Validate the activities against fn's parameters.

    One activity per visible parameter, then one for the return value. Returns the
    activity of every parameter (hidden ones Const) and the return's.
    """
    if mode is not Reverse and mode is not Forward:
        raise ActivityError(f"mode must be ez.Reverse or ez.Forward, not {mode!r}")
    visible = fn.visible_params
    n = len(visible)
    expected = n + (0 if fn.ret is None else 1)
    if len(activities) != expected:
        ret_text = (
            "and returns nothing"
            if fn.ret is None
            else "and a return value (its activity comes last)"
        )
        raise ActivityError(
            f"'{fn.display_name}' has {n} parameter{'s' if n != 1 else ''} {ret_text}, so "
            f"autodiff needs {expected} activit{'ies' if expected != 1 else 'y'}; "
            f"got {len(activities)}"
        )
    for i, act in enumerate(activities):
        if not isinstance(act, Activity):
            what = visible[i][1].describe(i) if i < n else "the return value"
            raise ActivityError(
                f"the activity of {what} of '{fn.display_name}' is {act!r}, not an "
                "enzyme_py activity (ez.Const, ez.Active, ez.Duplicated, ez.Dual, ...)"
            )
    full: list[Activity] = [Const] * len(fn.params)
    for position, ((index, param), act) in enumerate(zip(visible, activities, strict=False)):
        _check_param(fn, mode, position, param, act)
        full[index] = act
    ret = activities[n] if fn.ret is not None else None
    if ret is not None and fn.ret is not None:
        _check_return(fn, mode, fn.ret, ret)
    return tuple(full), ret


def _mode_hint(mode: Mode) -> str:
    if mode is Reverse:
        return "in Reverse mode use Const, Active (float scalars) or Duplicated (arrays)"
    return "in Forward mode use Const, Dual or DualOnly"


def _check_param(fn: IRFunction, mode: Mode, i: int, param: Param, act: Activity) -> None:
    where = f"{param.describe(i)} of '{fn.display_name}'"
    if not act.allowed_in(mode):
        raise ActivityError(
            f"{act.name} is not allowed in {mode.name} mode ({where}); {_mode_hint(mode)}"
        )
    if act is ActiveOnly:
        raise ActivityError(
            f"ActiveOnly describes a return value, not {where}; use Active for a parameter"
        )
    if act is Const:
        return
    if param.kind == "int":
        raise ActivityError(
            f"{where} is an integer ({param.dtype}); integers can only be Const, not {act.name}"
        )
    if param.kind == "float" and act in (Duplicated, DuplicatedOnly):
        raise ActivityError(
            f"{where} is a {param.dtype} scalar passed by value; it has no shadow to "
            f"accumulate into, so it cannot be {act.name}: use Active"
        )
    if param.kind == "pointer":
        if act is Active:
            raise ActivityError(
                f"{where} is an array (a pointer); Active is for float scalars: use "
                "Duplicated and pass a shadow array after it"
            )
        # An array of addresses (T**) takes a shadow of the shadows' addresses.
        if param.dtype is not None and param.dtype.kind != "f" and not param.pointee_is_pointer:
            raise ActivityError(
                f"{where} points to {param.dtype} values, which have no derivative: "
                "it can only be Const"
            )


def _check_return(fn: IRFunction, mode: Mode, ret: Param, act: Activity) -> None:
    what = f"{ret.fields} x {ret.dtype}" if ret.kind == "struct" else str(ret.dtype)
    where = f"the return value ({what}) of '{fn.display_name}'"
    if not act.allowed_in(mode):
        raise ActivityError(
            f"{act.name} is not allowed in {mode.name} mode ({where}); {_mode_hint(mode)}"
        )
    if act is Const and ret.kind == "struct":
        # Enzyme v0.0.289 aborts (setDiffe of a constant) on a constant struct return.
        raise ActivityError(
            f"{where} is a struct of {ret.fields} values, which Enzyme v0.0.289 cannot "
            "leave Const: in Forward mode make it Dual or DualOnly (the primal values come "
            "with Dual); for a Reverse derivative, differentiate a function returning one "
            "of its values"
        )
    if act is Const:
        return
    if ret.kind == "struct" and mode is Forward:
        return
    if ret.kind != "float":
        raise ActivityError(f"{where} is not a float scalar; it can only be Const")
    if act in (Duplicated, DuplicatedOnly):
        raise ActivityError(
            f"{where} is a scalar returned by value; use Active (or ActiveOnly) in Reverse mode"
        )


class RecursionBatchRefused(ActivityError):
    """width > 1 asked of a recursive function (Enzyme v0.0.289 batches it wrongly);
    the helpers catch it to go one column at a time."""


@dataclass(frozen=True)
class InputStep:
    """One step of filling a derivative's input slots.

    kind: "s" a scalar argument, "a" an array argument (its data pointer), "h" the
    shadow of the array argument ``source`` (``lanes`` pointers), "l" ``lanes``
    scalars (a tangent or seed), "S" dimension ``dim`` of the array argument
    ``source`` (a hidden parameter), "E" the errors buffer (hidden). ``arg`` is the
    Python argument the step takes (-1: none); ``code`` the slot code of each slot;
    ``dtype`` the NumPy dtype char an array must have ("" for any).
    """

    kind: str
    code: str
    dtype: str
    lanes: int
    arg: int
    source: int = -1
    dim: int = 0
    name: str = ""  # the parameter's name, for messages


@dataclass(frozen=True)
class _Options:
    width: int
    runtime_activity: bool
    strong_zero: bool
    check: bool = False
    atomic_add: bool = False  # reverse: shadows updated atomically (kernels)
    primal_only: bool = False  # no differentiation: the function itself


class Derivative:
    """A compiled derivative; call it with the arguments of ``autodiff``'s convention."""

    def __init__(
        self,
        fn: IRFunction,
        mode: Mode,
        params: tuple[Activity, ...],
        ret: Activity | None,
        options: _Options,
    ):
        self.function = fn
        self._as_function: IRFunction | None = None
        self.mode = mode
        self.activities = params
        self.return_activity = ret
        self.width = options.width
        self._options = options
        self._runtime_activity = options.runtime_activity
        self._alias_safe: Derivative | None = None
        self._njit: Any = None
        self._check_pending = options.check
        forward = mode is Forward
        if ret is None:
            ret_code, self._return_primal = _DFT_CONSTANT, False
        else:
            ret_code, self._return_primal = _DIFFE[ret], ret.primal_needed
        # As the user gave them: hidden parameters (shapes, errors) left out.
        given = [a for p, a in zip(fn.params, params, strict=True) if p.hidden is None]
        acts = ", ".join(a.name for a in (*given, *([ret] if ret else [])))
        if options.width > 1 and fn.module.native.reaches_recursion(fn.name):
            raise RecursionBatchRefused(
                f"'{fn.display_name}' is recursive (it, or a function it calls, calls "
                f"itself): Enzyme v0.0.289 batches derivatives of recursion wrongly, so "
                f"width={options.width} is refused; call the width=1 derivative once per "
                "direction instead"
            )
        self._compiled = _build.derivative(
            fn,
            _build.Request(
                forward=forward,
                args=tuple(_DIFFE[a] for a in params),
                ret=ret_code,
                return_primal=self._return_primal,
                width=options.width,
                runtime_activity=options.runtime_activity,
                strong_zero=options.strong_zero,
                atomic_add=options.atomic_add,
                primal_only=options.primal_only,
            ),
            f"'{fn.display_name}' in {mode.name} mode with activities {acts}",
        )
        self._entry = self._compiled.entry
        self._in_codes = self._compiled.in_slots
        self._out_codes = self._compiled.out_slots
        self._n_slots = len(self._in_codes) + len(self._out_codes)
        self._arity = sum(
            2 if a.shadow else 1 for p, a in zip(fn.params, params, strict=True) if p.hidden is None
        ) + (1 if (not forward and ret in (Active, ActiveOnly)) else 0)
        self._check_layout()
        self._fast = self._fast_caller()

    # --- layout -------------------------------------------------------------
    def _expected_layout(self) -> tuple[int, int]:
        k = self.width
        n_in = 0
        for act in self.activities:
            n_in += 1
            if act.shadow:
                n_in += k
        n_out = 0
        ret = self.return_activity
        fields = self.function.ret.fields if self.function.ret is not None else 0
        if self._return_primal:
            n_out += fields
        if self.mode is Reverse:
            if ret in (Active, ActiveOnly):
                n_in += k
            n_out += sum(k for a in self.activities if a is Active)
        elif ret in (Dual, DualOnly):
            n_out += k * fields
        return n_in, n_out

    def _check_layout(self) -> None:
        n_in, n_out = self._expected_layout()
        if (n_in, n_out) != (len(self._in_codes), len(self._out_codes)):
            raise EnzymeError(
                f"the derivative of '{self.function.display_name}' has an unexpected "
                f"signature ({self._in_codes} -> {self._out_codes}); this is a bug in enzyme_py"
            )

    # --- calling ------------------------------------------------------------
    def input_plan(self) -> list[InputStep]:
        """How the entry point's input slots are filled, in order (see InputStep).
        The fast path and the compiled (njit) callers both follow it."""
        k = self.width
        plan: list[InputStep] = []
        fn = self.function
        arg_of_param: dict[int, int] = {}  # parameter index -> Python argument index
        next_arg = 0
        for i, (param, act) in enumerate(zip(fn.params, self.activities, strict=True)):
            if param.hidden is not None:
                what, source, dim = param.hidden
                if what == "shape":
                    plan.append(InputStep("S", "q", "", 1, -1, arg_of_param[source], dim))
                else:
                    plan.append(InputStep("E", "p", "", 1, -1))
                continue
            arg = arg_of_param[i] = next_arg
            next_arg += 2 if act.shadow else 1
            if param.kind == "pointer":
                dtype = param.dtype.char if param.dtype is not None else ""
                plan.append(InputStep("a", "p", dtype, 1, arg, name=param.name))
                if act.shadow:
                    plan.append(InputStep("h", "p", "", k, arg + 1, arg, name=param.name))
                continue
            assert param.dtype is not None  # scalars always have one
            code = _SLOT_CODE[param.dtype]
            plan.append(InputStep("s", code, "", 1, arg))
            if act.shadow:
                plan.append(InputStep("l", code, "", k, arg + 1))
        ret = fn.ret
        if self.mode is Reverse and self.return_activity in (Active, ActiveOnly):
            assert ret is not None and ret.dtype is not None
            plan.append(InputStep("l", _SLOT_CODE[ret.dtype], "", k, next_arg))
        return plan

    def _fast_caller(self) -> Any:
        """The native caller for this layout, or None if the plan does not match."""
        native = _state.native
        k = self.width
        fn = self.function
        plan = self.input_plan()
        codes = "".join(step.code * step.lanes for step in plan)
        steps = [
            native.ArgStep(
                step.kind,
                step.code,
                step.dtype,
                step.dim if step.kind == "S" else step.lanes,
                step.kind == "h" and self._runtime_activity,
                step.source,
            )
            for step in plan
        ]
        ret = fn.ret
        if codes != self._in_codes:
            return None
        fields = ret.fields if ret is not None else 0
        if self.mode is Reverse:
            shape = "r"
        else:
            shape = {Dual: "p", DualOnly: "t", Const: "y", None: "n"}[self.return_activity]
        return native.Caller(
            self._entry,
            self._in_codes,
            self._out_codes,
            steps,
            shape,
            fields if self._return_primal else 0,
            [k for a in self.activities if a is Active],
            fields,
            k,
            ret is not None and ret.kind == "struct",
            # Calls whose arrays overlap take the checked path: to the build without
            # noalias, and to the check that no shadow overlaps an array.
            fn.alias_safe is not None or any(step.kind == "h" for step in plan),
        )

    def __call__(self, *args: Any) -> Any:
        if self._check_pending:
            self._check_pending = False
            from enzyme_py._check import check_first_call

            return check_first_call(self, args)
        return self._call(args)

    def _call(self, args: tuple[Any, ...]) -> Any:
        if self._fast is not None:
            try:
                return self._fast(*args)
            except _state.native.ArgumentsRejected:
                pass  # the checked path below says what is wrong
            except _state.native.CalleeFailed as exc:
                status, detail = (int(v) for v in str(exc).split())
                self._raise_callee_error(status, detail)
            except _state.native.OutOfMemory as exc:
                self._raise_out_of_memory(exc)
        return self._call_checked(args)

    def _alias_safe_derivative(self) -> Derivative:
        """The same derivative without the promise that arrays do not overlap."""
        if self._alias_safe is None:
            assert self.function.alias_safe is not None
            self._alias_safe = Derivative(
                self.function.alias_safe(),
                self.mode,
                self.activities,
                self.return_activity,
                self._options,
            )
        return self._alias_safe

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
        if len(args) != self._arity:
            raise TypeError(self._arity_message(len(args)))
        slots = np.zeros(self._n_slots, dtype=np.uint64)
        writer = _SlotWriter(slots, self._in_codes)
        keep_alive: list[np.ndarray] = []
        arrays: dict[int, np.ndarray] = {}
        named_arrays: list[tuple[str, np.ndarray]] = []  # (where, array) for messages
        named_shadows: list[tuple[str, np.ndarray, np.ndarray]] = []  # + the shadow's array
        errors = np.zeros(2, dtype=np.int64)
        k = self.width
        pos = 0
        visible = 0
        fn = self.function
        for i, (param, act) in enumerate(zip(fn.params, self.activities, strict=True)):
            if param.hidden is not None:
                what, source, dim = param.hidden
                writer.put(arrays[source].shape[dim] if what == "shape" else errors.ctypes.data)
                continue
            where = (
                fn.describe_argument(visible, param)
                if fn.describe_argument is not None
                else f"{param.describe(visible)} of '{fn.display_name}'"
            )
            visible += 1
            value = args[pos]
            pos += 1
            if param.kind == "pointer":
                array = _check_array(value, param, where)
                rank = sum(p.hidden is not None and p.hidden[:2] == ("shape", i) for p in fn.params)
                if rank and array.ndim != rank:
                    raise ValueError(
                        f"{where} needs an array of {rank} dimension(s); got {array.ndim}"
                    )
                arrays[i] = array
                named_arrays.append((where, array))
                keep_alive.append(array)
                writer.put(array.ctypes.data)
                if act.shadow:
                    if self._runtime_activity and args[pos] is value:
                        # Enzyme's runtime activity: a shadow that is its own primal
                        # marks the array inactive for this call.
                        for _ in range(k):
                            writer.put(array.ctypes.data)
                        pos += 1
                        continue
                    shadow = _check_shadow(args[pos], array, k, f"the shadow of {where}")
                    pos += 1
                    named_shadows.append((f"the shadow of {where}", shadow, array))
                    keep_alive.append(shadow)
                    base = shadow.ctypes.data
                    for lane in range(k):
                        writer.put(base + lane * array.nbytes)
            else:
                writer.put(_scalar(value, param, where))
                if act.shadow:  # a scalar tangent (forward mode)
                    for t in _lanes(args[pos], k, param, f"the tangent of {where}"):
                        writer.put(t)
                    pos += 1
        if self.mode is Reverse and self.return_activity in (Active, ActiveOnly):
            assert fn.ret is not None
            for s in _lanes(args[pos], k, fn.ret, f"the seed of '{fn.display_name}'"):
                writer.put(s)
        _check_shadows_apart(named_shadows, named_arrays, k)
        if fn.alias_safe is not None and _overlapping(keep_alive):
            return self._alias_safe_derivative()._call_checked(args)
        try:
            _state.native.invoke(self._entry, slots)
        except _state.native.OutOfMemory as exc:
            self._raise_out_of_memory(exc)
        del keep_alive
        if errors[0] != 0:
            self._raise_callee_error(int(errors[0]), int(errors[1]))
        return self._results(_SlotReader(slots, self._out_codes, len(self._in_codes)))

    def _results(self, reader: _SlotReader) -> Any:
        k = self.width
        ret = self.function.ret
        fields = ret.fields if ret is not None and ret.kind == "struct" else 0
        primal = None
        if self._return_primal:
            primal = tuple(reader.take() for _ in range(fields)) if fields else reader.take()
        if self.mode is Reverse:
            adjoints = [reader.take_lanes(k) for a in self.activities if a is Active]
            return (primal, *adjoints)
        if self.return_activity in (Dual, DualOnly):
            if fields:  # lane-major: each lane holds every field
                values = [reader.take() for _ in range(k * fields)]
                tangent: Any = tuple(values) if k == 1 else np.array(values).reshape(k, fields)
            else:
                tangent = reader.take_lanes(k)
            return (primal, tangent) if self.return_activity is Dual else tangent
        return primal

    def _arity_message(self, got: int) -> str:
        fn = self.function
        names: list[str] = []
        for param, act in zip(fn.params, self.activities, strict=True):
            if param.hidden is not None:
                continue
            names.append(param.name)
            if act.shadow:
                names.append(("d" if self.mode is Reverse else "t") + param.name)
        if self.mode is Reverse and self.return_activity in (Active, ActiveOnly):
            names.append("seed")
        return (
            f"the {self.mode.name.lower()} derivative of '{fn.display_name}' takes "
            f"{self._arity} arguments ({', '.join(names)}); got {got}"
        )

    def as_function(self) -> IRFunction:
        """This derivative as a function to differentiate again (higher order).

        Its parameters are the derivative's, in calling order (shadows after their
        values, then the seed); a reverse derivative returns its adjoints by value.
        """
        if self._as_function is None:
            if self.width != 1:
                raise ActivityError("only derivatives of width 1 can be differentiated again")
            module = frontends.parse_module(self._compiled.artifact.derivative_module)
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
        for i, (p, act) in enumerate(zip(fn.params, self.activities, strict=True)):
            index[i] = len(params)
            params.append(p)
            if act.shadow:
                prefix = "d" if self.mode is Reverse else "t"
                params.append(Param(prefix + p.name, p.kind, p.dtype))
        if self.mode is Reverse and self.return_activity in (Active, ActiveOnly):
            assert fn.ret is not None
            params.append(Param("seed", "float", fn.ret.dtype))
        # Hidden shapes follow their array to its new position.
        return tuple(
            replace(p, hidden=(p.hidden[0], index[p.hidden[1]], p.hidden[2]))
            if p.hidden is not None and p.hidden[0] == "shape"
            else p
            for p in params
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled as what is needed to build it again; in the new process the
        # disk cache usually serves the compiled code.
        origin = self.function.origin
        if origin is not None and origin[0] == "custom rules":
            raise TypeError(
                f"the derivative of '{self.function.display_name}' cannot be pickled: it "
                f"uses custom rules (for {', '.join(origin[1])}), which are registered in "
                "this process only"
            )
        if origin is None:
            raise TypeError(
                f"the derivative of '{self.function.display_name}' cannot be pickled: its "
                "function was not made by ez.llvm_ir, ez.c, ez.cpp or a Numba dispatcher"
            )
        return (
            _rebuild_derivative,
            (self.function.origin, self.mode, self.activities, self.return_activity, self._options),
        )

    def njit(self) -> Any:
        """This derivative as an ``@numba.njit`` function (same arguments and results),
        to call from inside other Numba code. Made once and kept."""
        if self._njit is None:
            from enzyme_py._njit_call import compile_njit

            self._njit = compile_njit(self)
        return self._njit

    def inspect_llvm(self, optimized: bool = False) -> str:
        """The derivative's LLVM IR: as Enzyme made it, or the final optimized module."""
        art = self._compiled.artifact
        return art.optimized_ir if optimized else art.enzyme_ir

    def __repr__(self) -> str:
        acts = ", ".join(a.name for a in self.activities)
        if self.return_activity is not None:
            acts += f" -> {self.return_activity.name}"
        return (
            f"<enzyme_py.Derivative of '{self.function.display_name}' "
            f"{self.mode.name}({acts}) width={self.width}>"
        )


class _SlotWriter:
    def __init__(self, slots: np.ndarray, codes: str):
        self.slots = slots
        self.codes = codes
        self.index = 0

    def put(self, value: Any) -> None:
        code = self.codes[self.index]
        dtype, per_slot = _SLOT_VIEWS[code]
        self.slots.view(dtype)[self.index * per_slot] = value
        self.index += 1


class _SlotReader:
    def __init__(self, slots: np.ndarray, codes: str, start: int):
        self.slots = slots
        self.codes = codes
        self.start = start
        self.index = 0

    def take(self) -> Any:
        code = self.codes[self.index]
        dtype, per_slot = _SLOT_VIEWS[code]
        value = self.slots.view(dtype)[(self.start + self.index) * per_slot]
        self.index += 1
        return value.item() if code in "dfqihb" else bool(value) if code == "?" else value

    def take_lanes(self, k: int) -> Any:
        if k == 1:
            return self.take()
        code = self.codes[self.index]
        dtype, _ = _SLOT_VIEWS[code]
        return np.array([self.take() for _ in range(k)], dtype=dtype)


def _rebuild_derivative(
    origin: tuple[Any, ...],
    mode: Mode,
    activities: tuple[Activity, ...],
    ret: Activity | None,
    options: _Options,
) -> Derivative:
    return Derivative(frontends.rebuild_function(origin), mode, activities, ret, options)


def _overlapping(arrays: list[np.ndarray]) -> bool:
    """Whether any two of the arrays passed share bytes (the same array twice does)."""
    spans = sorted((a.ctypes.data, a.ctypes.data + a.nbytes) for a in arrays if a.nbytes)
    return any(spans[i][1] > spans[i + 1][0] for i in range(len(spans) - 1))


def _share_memory(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(a.nbytes and b.nbytes and np.shares_memory(a, b))


def _check_shadows_apart(
    shadows: Sequence[tuple[str, np.ndarray, np.ndarray | None]],
    arrays: Sequence[tuple[str, np.ndarray]],
    width: int,
) -> None:
    """No shadow (given as ``(where, shadow, its array)``) may share memory with an array
    argument: the derivative writes into its shadows, which would change that array as
    the function reads it (its own array is checked with the shadow). Two shadows may
    share memory only as their arrays do (one array passed twice, its shadow twice):
    Enzyme reads back the shadow of an array the function writes, so shadows shared
    otherwise would mix the adjoints of different arrays. (A shadow's array given as
    None, one that is not a host array, shares memory with nothing.)"""
    for n, (shadow_where, shadow, primal) in enumerate(shadows):
        for where, array in arrays:
            if _share_memory(shadow, array):
                raise ValueError(
                    f"{shadow_where} overlaps {where}: the derivative writes into the "
                    "shadow, which would change that array; give the shadow memory of its own"
                )
        for other_where, other, other_primal in shadows[:n]:
            if not _share_memory(shadow, other):
                continue
            alike = (
                primal is not None
                and other_primal is not None
                and shadow.ctypes.data - primal.ctypes.data
                == other.ctypes.data - other_primal.ctypes.data
                and (width == 1 or primal.nbytes == other_primal.nbytes)
            )
            if not alike:
                raise ValueError(
                    f"{shadow_where} overlaps {other_where}, and their arrays do not overlap "
                    "alike: the adjoints of the two would mix; give each shadow memory of its "
                    "own (an array passed twice may take the same shadow twice)"
                )


def _real_number(value: Any, where: str, what: str) -> float:
    """``value`` as a float, if it is one real number: a Python or NumPy int, float or
    bool, or a 0-d array of one. Strings, None and complex numbers are refused rather
    than converted (``float("1")`` works, and NumPy drops an imaginary part)."""
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "biuf":
        value = value[()]
    if not isinstance(value, (numbers.Real, np.bool_)):
        raise TypeError(
            f"{where} is {what}: pass a real number (an int, a float or a NumPy real "
            f"scalar); got {type(value).__name__}"
        )
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"{where} is {what}; {value} does not fit in a float64") from None


def _scalar(value: Any, param: Param, where: str) -> Any:
    assert param.dtype is not None
    if param.kind == "float":
        return param.dtype.type(_real_number(value, where, f"a {param.dtype} scalar"))
    try:
        integer = operator.index(value)
    except TypeError:
        raise TypeError(
            f"{where} is an integer ({param.dtype}); got {type(value).__name__}"
        ) from None
    if param.dtype == np.bool_:
        return np.uint8(bool(integer))
    info = np.iinfo(param.dtype)
    if not info.min <= integer <= info.max:
        raise ValueError(f"{where} is {param.dtype}; {integer} does not fit")
    return integer


def _lanes(value: Any, k: int, param: Param, where: str) -> list[Any]:
    """k scalar values for a tangent or seed: a scalar when k == 1, else length-k."""
    assert param.dtype is not None
    if k == 1:
        return [_scalar(value, param, where)]
    if isinstance(value, np.ndarray):
        shape = value.shape
    elif isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray)):
        shape = (len(value),)
    elif isinstance(value, (numbers.Real, np.bool_)):
        shape = ()
    else:
        raise TypeError(
            f"{where} needs {k} real numbers (width={k}), a sequence or an array; "
            f"got {type(value).__name__}"
        )
    if shape != (k,):
        raise ValueError(f"{where} needs {k} values (width={k}); got shape {shape}")
    what = f"a {param.dtype} scalar"
    return [
        param.dtype.type(_real_number(v, f"{where} (value {lane})", what))
        for lane, v in enumerate(value)
    ]


def _check_array(value: Any, param: Param, where: str) -> np.ndarray:
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{where} is an array; got {type(value).__name__} (pass a NumPy array)")
    if param.dtype is not None and value.dtype != param.dtype:
        raise ValueError(f"{where} needs dtype {param.dtype}; got {value.dtype}")
    if not value.flags.c_contiguous:
        raise ValueError(f"{where} must be C-contiguous; pass np.ascontiguousarray(...) of it")
    if not value.flags.writeable:
        raise ValueError(f"{where} is read-only; the function may write it: pass a copy")
    return value


def _check_shadow(value: Any, primal: np.ndarray, k: int, where: str) -> np.ndarray:
    shape = primal.shape if k == 1 else (k, *primal.shape)
    if not isinstance(value, np.ndarray):
        raise TypeError(
            f"{where} must be a NumPy array of shape {shape}; got {type(value).__name__}"
        )
    if value.dtype != primal.dtype:
        raise ValueError(f"{where} needs dtype {primal.dtype} (as its array); got {value.dtype}")
    if value.shape != shape:
        lane = f" (width={k})" if k > 1 else ""
        raise ValueError(f"{where} needs shape {shape}{lane}; got {value.shape}")
    if not value.flags.c_contiguous:
        raise ValueError(f"{where} must be C-contiguous")
    if not value.flags.writeable:
        raise ValueError(f"{where} must be writable: derivatives are accumulated into it")
    if np.shares_memory(value, primal):
        raise ValueError(f"{where} overlaps its array; give it memory of its own")
    return value


def autodiff(
    f: Any,
    mode: Mode,
    *activities: Activity,
    width: int = 1,
    runtime_activity: bool = False,
    strong_zero: bool = False,
    sig: Any = None,
    check: bool = False,
) -> Any:
    """The derivative of ``f`` in ``mode`` with one activity per parameter, then one for
    the return value (none if it returns nothing).

    Reverse mode: call with ``x`` for Const/Active, ``x, dx`` for Duplicated(Only), then
    the seed if the return is Active/ActiveOnly; returns ``(primal, *adjoints of Active
    parameters)`` (primal ``None`` under ActiveOnly or for a function returning nothing).
    Forward mode: ``x`` for Const, ``x, dx`` for Dual(Only); returns ``(y, dy)`` for a
    Dual return, ``dy`` for DualOnly, ``y`` for Const, ``None`` with no return value.

    Args:
        width: batch size: each shadow, tangent and seed carries ``width`` values.
        runtime_activity: let Enzyme decide at run time whether memory is active.
            Needed when activity is only known per call or per pointer (e.g. a pointer
            that sometimes aliases a Const array). With it, passing an array as its
            own shadow (``df(x, x, ...)``) marks that array inactive for the call;
            without it that is refused. Costs a check per access.
        strong_zero: a zero derivative times inf/nan stays zero instead of nan.
        check: at the first call, compare the result with central finite differences
            of the function along a random direction and warn (GradientCheckWarning)
            if they disagree. Costs a few evaluations of the function, once.
        sig: for a Numba dispatcher, the signature to differentiate (a Numba signature
            or its string). Without it, the dispatcher's only compiled signature, or one
            derivative per argument types, made at the first call with those types.

    Raises:
        ActivityError: activities that do not fit the parameters or the mode.
        EnzymeError: Enzyme could not differentiate ``f`` (message from Enzyme).
    """
    if isinstance(width, bool) or not isinstance(width, (int, np.integer)) or width < 1:
        raise ValueError(f"width must be a positive integer; got {width!r}")
    width = int(width)
    options = _Options(width, runtime_activity, strong_zero, check)
    from enzyme_py.offload import Kernel

    if isinstance(f, Kernel):
        if width != 1 or runtime_activity or strong_zero or check or sig is not None:
            raise ValueError("the derivative of a kernel takes only the mode and activities")
        return f.derivative(mode, *activities)
    if numba_frontend.is_dispatcher(f):
        from enzyme_py._numba_derivative import NumbaDerivative

        if mode is not Reverse and mode is not Forward:
            raise ActivityError(f"mode must be ez.Reverse or ez.Forward, not {mode!r}")
        return NumbaDerivative(f, mode, tuple(activities), options, sig)
    if sig is not None:
        raise TypeError("sig= applies to Numba dispatchers only")
    from enzyme_py.rules import with_rules

    fn = with_rules(_resolve(f))
    params, ret = _check_activities(fn, mode, activities)
    return Derivative(fn, mode, params, ret, options)
