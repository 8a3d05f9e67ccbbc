"""The calling convention between Python and a derivative's compiled entry point.

Every derivative is compiled behind one uniform entry point, ``void entry(uint64_t
*slots)`` (``src/entry_abi.h`` builds it): each scalar value or pointer the derivative
takes occupies one 8-byte slot, in parameter order, and each value it returns one slot
after those, aggregates flattened. A *slot code* names the type of each slot.

This module states the convention once for Python:

- ``plan_call``: from a function's parameters and the activities asked for, the
  ``CallPlan``: how each Python argument fills input slots (``InputStep``), the input
  slot codes that implies, and how the output slots become the Python result
  (``ResultPlan``). The checked path below, the C++ fast caller (``src/caller.h``) and
  the compiled ``@njit`` callers (``_njit_call``) all follow it.
- ``fill_slots`` / ``read_results``: the checked path, which names the offending
  parameter of any argument that does not fit, by the argument rules every caller
  shares (``_arguments``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import numpy as np

from enzyme_py._arguments import (
    apart,
    check_array,
    check_shadow,
    check_shadows_apart,
    laid_out_like,
    lanes,
    overlaps_itself,
    scalar,
)
from enzyme_py._signature import Param
from enzyme_py.core import Active, ActiveOnly, Activity, Const, Dual, DualOnly, Mode, Reverse
from enzyme_py.frontends import IRFunction


class SlotCode:
    """The type of one 8-byte slot (the same letters as ``src/entry_abi.h``)."""

    DOUBLE = "d"
    FLOAT = "f"
    I64 = "q"
    I32 = "i"
    I16 = "h"
    I8 = "b"
    BOOL = "?"
    POINTER = "p"


SLOT_CODE_OF_DTYPE: dict[np.dtype, str] = {
    np.dtype(np.float64): SlotCode.DOUBLE,
    np.dtype(np.float32): SlotCode.FLOAT,
    np.dtype(np.int64): SlotCode.I64,
    np.dtype(np.int32): SlotCode.I32,
    np.dtype(np.int16): SlotCode.I16,
    np.dtype(np.int8): SlotCode.I8,
    np.dtype(np.bool_): SlotCode.BOOL,
}

# Slot code -> (the NumPy dtype a slot is read as, values of that dtype per slot).
SLOT_VIEWS: dict[str, tuple[np.dtype, int]] = {
    SlotCode.DOUBLE: (np.dtype(np.float64), 1),
    SlotCode.FLOAT: (np.dtype(np.float32), 2),
    SlotCode.I64: (np.dtype(np.int64), 1),
    SlotCode.I32: (np.dtype(np.int32), 2),
    SlotCode.I16: (np.dtype(np.int16), 4),
    SlotCode.I8: (np.dtype(np.int8), 8),
    SlotCode.BOOL: (np.dtype(np.uint8), 8),
    SlotCode.POINTER: (np.dtype(np.uint64), 1),
}


class StepKind:
    """What one ``InputStep`` puts into the slots (the letters of ``src/caller.h``)."""

    SCALAR = "s"  # a scalar argument
    ARRAY = "a"  # an array argument: its data pointer
    SHADOW = "h"  # the shadow of an array argument: one pointer per lane
    LANES = "l"  # a tangent or a seed: one scalar per lane
    SHAPE = "S"  # a dimension of an earlier array argument (a hidden parameter)
    STRIDE = "T"  # a stride, in bytes, of an earlier array argument (hidden)
    ERRORS = "E"  # the callee's error buffer (a hidden parameter)
    # the byte size of an earlier array argument (hidden), after all the others: of
    # the shadow a derivative zeroes itself (src/shadow_zeroing.h)
    BYTES = "B"


class ResultShape:
    """How the output slots become the result (the letters of ``src/caller.h``)."""

    REVERSE = "r"  # (primal, *adjoints of Active parameters)
    PAIR = "p"  # (y, dy)
    TANGENT = "t"  # dy
    PRIMAL = "y"  # y
    NOTHING = "n"  # None


@dataclass(frozen=True)
class InputStep:
    """One step of filling a derivative's input slots.

    ``arg`` is the Python argument the step takes (-1: none); ``code`` the slot code of
    each slot; ``dtype`` the NumPy dtype char an array must have ("" for any); ``lanes``
    the slots a shadow or lanes step fills; ``source`` the Python argument holding the
    array a shadow or shape step refers to; ``dim`` the dimension a shape step reads.
    ``param`` describes the value (its dtype, for scalars and lanes); ``where`` names it
    in error messages.
    """

    kind: str
    code: str
    dtype: str
    lanes: int
    arg: int
    source: int = -1
    dim: int = 0
    name: str = ""  # the parameter's name
    param: Param | None = None
    where: str = ""


@dataclass(frozen=True)
class ResultPlan:
    """How a derivative's output slots become its Python result."""

    shape: str  # a ResultShape
    primal_fields: int  # 0: no primal; 1: a scalar; n: a tuple of n values
    adjoints: tuple[int, ...]  # reverse: the lanes of each Active parameter's adjoint
    tangent_fields: int  # forward: values per lane of the tangent
    tangent_lanes: int
    tangent_struct: bool  # the tangent of a struct return: a tuple / (lanes, fields) array
    out_slots: int  # how many output slots the entry point writes


@dataclass(frozen=True)
class CallPlan:
    """Everything about calling one derivative, fixed when it is made."""

    steps: tuple[InputStep, ...]
    result: ResultPlan
    arity: int  # Python arguments taken
    argument_names: tuple[str, ...]  # for messages: x, dx, ..., seed
    width: int
    runtime_activity: bool

    @property
    def ranks(self) -> dict[int, int]:
        """Per Python argument that is an array with hidden dimensions: its rank
        (frontends that pass shapes pass all of them)."""
        found: dict[int, int] = {}
        for step in self.steps:
            if step.kind == StepKind.SHAPE:
                found[step.source] = found.get(step.source, 0) + 1
        return found

    @cached_property
    def shadowed(self) -> frozenset[int]:
        """The Python arguments that are arrays with a shadow."""
        return frozenset(s.source for s in self.steps if s.kind == StepKind.SHADOW)

    @property
    def in_codes(self) -> str:
        """The slot codes of the entry point's inputs, in order."""
        return "".join(step.code * step.lanes for step in self.steps)


def _where(fn: IRFunction, visible: int, param: Param) -> str:
    if fn.describe_argument is not None:
        return fn.describe_argument(visible, param)
    return f"{param.describe(visible)} of '{fn.display_name}'"


def describe_param(fn: IRFunction, index: int) -> str:
    """How messages name parameter ``index`` of ``fn`` (hidden parameters not counted,
    as in a call's arguments)."""
    visible = sum(1 for p in fn.params[:index] if p.hidden is None)
    return _where(fn, visible, fn.params[index])


def plan_call(
    fn: IRFunction,
    mode: Mode,
    activities: Sequence[Activity],
    return_activity: Activity | None,
    width: int,
    return_primal: bool,
    runtime_activity: bool,
) -> CallPlan:
    """The calling plan of the derivative of ``fn`` with one activity per parameter
    (hidden ones Const) and ``return_activity`` (None: it returns nothing).

    Python arguments: each visible parameter's value, followed by its shadow (an array)
    or tangent (a scalar) when its activity has one; then, in reverse mode with an
    Active return, the seed. Hidden parameters take no argument."""
    k = width
    steps: list[InputStep] = []
    names: list[str] = []
    arg_of_param: dict[int, int] = {}  # parameter index -> Python argument index
    next_arg = 0
    visible = 0
    shadow_prefix = "d" if mode is Reverse else "t"
    for i, (param, act) in enumerate(zip(fn.params, activities, strict=True)):
        if param.hidden is not None:
            what, source, dim = param.hidden
            if what in ("shape", "stride"):
                kind = StepKind.SHAPE if what == "shape" else StepKind.STRIDE
                steps.append(InputStep(kind, SlotCode.I64, "", 1, -1, arg_of_param[source], dim))
            else:
                steps.append(InputStep(StepKind.ERRORS, SlotCode.POINTER, "", 1, -1))
            continue
        where = _where(fn, visible, param)
        visible += 1
        arg = arg_of_param[i] = next_arg
        next_arg += 2 if act.shadow else 1
        names.append(param.name)
        if act.shadow:
            names.append(shadow_prefix + param.name)
        if param.kind == "pointer":
            dtype = param.dtype.char if param.dtype is not None else ""
            like = -1 if param.layout_of is None else arg_of_param[param.layout_of]
            steps.append(
                InputStep(
                    StepKind.ARRAY, SlotCode.POINTER, dtype, 1, arg, like, name=param.name,
                    param=param, where=where,
                )
            )  # fmt: skip
            if act.shadow:
                steps.append(
                    InputStep(
                        StepKind.SHADOW, SlotCode.POINTER, "", k, arg + 1, arg, name=param.name,
                        param=param, where=f"the shadow of {where}",
                    )
                )  # fmt: skip
            continue
        assert param.dtype is not None  # scalars always have one
        code = SLOT_CODE_OF_DTYPE[param.dtype]
        steps.append(InputStep(StepKind.SCALAR, code, "", 1, arg, param=param, where=where))
        if act.shadow:
            steps.append(
                InputStep(
                    StepKind.LANES, code, "", k, arg + 1, param=param,
                    where=f"the tangent of {where}",
                )
            )  # fmt: skip
    ret = fn.ret
    if mode is Reverse and return_activity in (Active, ActiveOnly):
        assert ret is not None and ret.dtype is not None
        steps.append(
            InputStep(
                StepKind.LANES, SLOT_CODE_OF_DTYPE[ret.dtype], "", k, next_arg, param=ret,
                where=f"the seed of '{fn.display_name}'",
            )
        )  # fmt: skip
        names.append("seed")
        next_arg += 1
    return CallPlan(
        tuple(steps),
        _result_plan(fn, mode, activities, return_activity, width, return_primal),
        next_arg,
        tuple(names),
        width,
        runtime_activity,
    )


def _result_plan(
    fn: IRFunction,
    mode: Mode,
    activities: Sequence[Activity],
    return_activity: Activity | None,
    width: int,
    return_primal: bool,
) -> ResultPlan:
    ret = fn.ret
    fields = ret.fields if ret is not None else 0
    primal_fields = fields if return_primal else 0
    adjoints: tuple[int, ...] = ()
    tangent_fields = 0
    if mode is Reverse:
        shape = ResultShape.REVERSE
        adjoints = tuple(width for a in activities if a is Active)
    else:
        shape = {
            Dual: ResultShape.PAIR,
            DualOnly: ResultShape.TANGENT,
            Const: ResultShape.PRIMAL,
            None: ResultShape.NOTHING,
        }[return_activity]
        if return_activity in (Dual, DualOnly):
            tangent_fields = fields
    return ResultPlan(
        shape,
        primal_fields,
        adjoints,
        tangent_fields,
        width,
        ret is not None and ret.kind == "struct",
        primal_fields + sum(adjoints) + width * tangent_fields,
    )


class SlotWriter:
    """Writes values into consecutive input slots, each in its slot's type."""

    def __init__(self, slots: np.ndarray, codes: str):
        self.slots = slots
        self.codes = codes
        self.index = 0

    def put(self, value: Any) -> None:
        dtype, per_slot = SLOT_VIEWS[self.codes[self.index]]
        self.slots.view(dtype)[self.index * per_slot] = value
        self.index += 1


class SlotReader:
    """Reads consecutive output slots (starting at slot ``start``) as Python values."""

    def __init__(self, slots: np.ndarray, codes: str, start: int):
        self.slots = slots
        self.codes = codes
        self.start = start
        self.index = 0

    def take(self) -> Any:
        code = self.codes[self.index]
        dtype, per_slot = SLOT_VIEWS[code]
        value = self.slots.view(dtype)[(self.start + self.index) * per_slot]
        self.index += 1
        if code == SlotCode.BOOL:
            return bool(value)
        return value if code == SlotCode.POINTER else value.item()

    def take_lanes(self, k: int) -> Any:
        if k == 1:
            return self.take()
        dtype, _ = SLOT_VIEWS[self.codes[self.index]]
        return np.array([self.take() for _ in range(k)], dtype=dtype)


def read_results(plan: ResultPlan, reader: SlotReader) -> Any:
    """The Python result of a call, from its output slots (as ``src/caller.cpp`` does)."""
    primal = None
    if plan.primal_fields == 1 and not plan.tangent_struct:
        primal = reader.take()
    elif plan.primal_fields:
        primal = tuple(reader.take() for _ in range(plan.primal_fields))
    if plan.shape == ResultShape.REVERSE:
        return (primal, *(reader.take_lanes(lanes) for lanes in plan.adjoints))
    if plan.shape in (ResultShape.PAIR, ResultShape.TANGENT):
        k, fields = plan.tangent_lanes, plan.tangent_fields
        if plan.tangent_struct:  # lane-major: each lane holds every field
            values = [reader.take() for _ in range(k * fields)]
            tangent: Any = tuple(values) if k == 1 else np.array(values).reshape(k, fields)
        else:
            tangent = reader.take_lanes(k)
        return (primal, tangent) if plan.shape == ResultShape.PAIR else tangent
    return primal


@dataclass
class FilledSlots:
    """The slots of one checked call, and what must outlive the call."""

    slots: np.ndarray
    errors: np.ndarray  # the callee's status and detail
    arrays: list[np.ndarray]  # arrays and shadows passed (kept alive; overlap checks)
    # (the caller's shadow, the stand-in the derivative used): shadows laid out
    # otherwise than their array, copied in before the call and back after it.
    stand_ins: list[tuple[np.ndarray, np.ndarray]]

    def copy_back(self) -> None:
        """What the derivative wrote into stand-ins, into the caller's shadows."""
        for shadow, stand_in in self.stand_ins:
            shadow[...] = stand_in


def with_byte_sizes(plan: CallPlan, params: Sequence[Param]) -> CallPlan:
    """``plan`` with the byte size of each of ``params``' arrays in a hidden slot after
    all others (``StepKind.BYTES``): the derivative zeroes their shadows itself."""
    sizes = []
    for param in params:
        (step,) = (s for s in plan.steps if s.kind == StepKind.ARRAY and s.param is param)
        sizes.append(InputStep(StepKind.BYTES, SlotCode.I64, "", 1, -1, step.arg))
    return replace(plan, steps=(*plan.steps, *sizes))


def fill_slots(plan: CallPlan, args: Sequence[Any], codes: str) -> FilledSlots:
    """The input slots (of slot codes ``codes``) of a call with ``args``, every argument
    checked first: a TypeError or ValueError naming the parameter for any that does not
    fit. ``codes`` are the entry point's own, which may name a narrower integer than the
    plan (a Numba boolean is an ``i8``)."""
    assert len(args) == plan.arity  # the caller says what is missing
    slots = np.zeros(len(codes) + plan.result.out_slots, dtype=np.uint64)
    writer = SlotWriter(slots, codes)
    errors = np.zeros(2, dtype=np.int64)
    arrays: dict[int, np.ndarray] = {}  # Python argument -> the checked array
    wheres: dict[int, str] = {}  # Python argument -> how errors name an array
    named_arrays: list[tuple[str, np.ndarray]] = []
    named_shadows: list[tuple[str, np.ndarray, np.ndarray]] = []
    passed: list[np.ndarray] = []
    stand_ins: list[tuple[np.ndarray, np.ndarray]] = []
    k = plan.width
    for step in plan.steps:
        if step.kind == StepKind.SHAPE:
            writer.put(arrays[step.source].shape[step.dim])
        elif step.kind == StepKind.STRIDE:
            writer.put(arrays[step.source].strides[step.dim])
        elif step.kind == StepKind.ERRORS:
            writer.put(errors.ctypes.data)
        elif step.kind == StepKind.BYTES:  # its shadow has its shape and dtype
            writer.put(arrays[step.source].nbytes)
        elif step.kind == StepKind.ARRAY:
            assert step.param is not None
            array = check_array(args[step.arg], step.param, step.where)
            rank = plan.ranks.get(step.arg)
            if rank is not None and array.ndim != rank:
                raise ValueError(
                    f"{step.where} needs an array of {rank} dimension"
                    f"{'s' if rank != 1 else ''}; got {array.ndim}"
                )
            if step.param.layout_of is not None:
                like = arrays[step.source]
                array = _laid_out_as(array, like, step, wheres[step.source], stand_ins)
            elif step.arg in plan.shadowed and overlaps_itself(array):
                array = apart(array, step.param, step.where)
            wheres[step.arg] = step.where
            arrays[step.arg] = array
            named_arrays.append((step.where, array))
            passed.append(array)
            writer.put(array.ctypes.data)
        elif step.kind == StepKind.SHADOW:
            array = arrays[step.source]
            value = args[step.arg]
            if plan.runtime_activity and value is args[step.source]:
                # Enzyme's runtime activity: a shadow that is its own primal marks the
                # array inactive for this call.
                for _ in range(k):
                    writer.put(array.ctypes.data)
                continue
            shadow = check_shadow(value, array, k, step.where)
            named_shadows.append((step.where, shadow, array))
            if array.flags.c_contiguous and shadow.flags.c_contiguous:
                passed.append(shadow)
                for lane in range(k):
                    writer.put(shadow.ctypes.data + lane * array.nbytes)
                continue
            # The derivative indexes a shadow as its array: each lane is given memory
            # laid out like the array, unless it is already.
            lane_shadows: list[np.ndarray] = [shadow[j] for j in range(k)] if k > 1 else [shadow]
            for given in lane_shadows:
                used = given
                if used.strides != array.strides:
                    used = laid_out_like(array)
                    used[...] = given
                    stand_ins.append((given, used))
                passed.append(used)
                writer.put(used.ctypes.data)
        elif step.kind == StepKind.SCALAR:
            assert step.param is not None
            writer.put(scalar(args[step.arg], step.param, step.where))
        else:  # LANES: a tangent or a seed
            assert step.param is not None
            for value in lanes(args[step.arg], k, step.param, step.where):
                writer.put(value)
    check_shadows_apart(named_shadows, named_arrays, k)
    return FilledSlots(slots, errors, passed, stand_ins)


def _laid_out_as(
    array: np.ndarray,
    like: np.ndarray,
    step: InputStep,
    like_where: str,
    stand_ins: list[tuple[np.ndarray, np.ndarray]],
) -> np.ndarray:
    """``array`` (a derivative's shadow parameter, indexed with the shape and strides of
    the array ``like``), or a stand-in laid out like ``like`` holding its values (copied
    back after the call) where its strides differ."""
    if array.shape != like.shape:
        raise ValueError(
            f"{step.where} is the shadow of {like_where} and is indexed with its shape and "
            f"strides: pass an array of its shape {like.shape}; got {array.shape}"
        )
    if array.strides == like.strides or array.size == 0:
        return array
    used = laid_out_like(like)
    used[...] = array
    stand_ins.append((array, used))
    return used
