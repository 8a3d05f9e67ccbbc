"""Array and tuple results of Numba functions, as output parameters of the wrapper.

Numba returns an array as its array struct (meminfo, parent, nitems, itemsize, data,
shape, strides) written through its result pointer, a tuple as a struct (or LLVM
array) of its members. The wrapper enzyme_py differentiates takes one output array
per part of the result instead (a scalar member of a tuple: a 0-d array) and copies
the result into them, element by element in C order, after checking that each has the
result's shape: Enzyme then differentiates through the copy, and the result's own
memory (a temporary in enzyme_py's arena) gets its adjoint from the output's shadow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

#: The status the wrapper reports when an output array has another shape than the
#: part of the result it receives: SHAPE_MISMATCH + that part's position. (Not in the
#: errors buffer's second slot, where Numba writes its exception info pointer: an
#: integer stored there too made Enzyme's type analysis refuse every function whose
#: result is a tuple with an array after its first part.)
SHAPE_MISMATCH = 7001
MAX_PARTS = 1000


def mismatched_part(status: int) -> int | None:
    """The part whose output array had another shape, for a wrapper's status."""
    part = status - SHAPE_MISMATCH
    return part if 0 <= part < MAX_PARTS else None


@dataclass(frozen=True)
class ResultPart:
    """One part of a function's result: an array (``ndim`` dimensions, 0 included) or a
    scalar member of a tuple (``scalar``), of ``dtype``; ``member`` its position in a
    tuple (None: the result is this array itself); ``llvm_type`` how Numba's result
    holds it, ``element`` the LLVM type of its elements."""

    dtype: np.dtype
    ndim: int
    scalar: bool
    member: int | None
    llvm_type: str
    element: str

    @property
    def differentiable(self) -> bool:
        """Whether it carries a derivative (floats); integer and boolean parts do not."""
        return self.dtype.kind == "f"


def _part(numba_type: Any, member: int | None, ctx: Any, name: str) -> ResultPart:
    from numba.core import types

    if isinstance(numba_type, types.Array) and isinstance(
        numba_type.dtype, (types.Float, types.Integer, types.Boolean)
    ):
        return ResultPart(
            np.dtype(str(numba_type.dtype)),
            numba_type.ndim,
            False,
            member,
            str(ctx.get_value_type(numba_type)),
            str(ctx.get_data_type(numba_type.dtype)),
        )
    if member is not None and isinstance(numba_type, (types.Float, types.Integer, types.Boolean)):
        # As the tuple holds it: a boolean is a byte there (its value type is i1).
        llvm_type = str(ctx.get_data_type(numba_type))
        return ResultPart(np.dtype(str(numba_type)), 0, True, member, llvm_type, llvm_type)
    raise TypeError(
        f"'{name}' returns {numba_type}{'' if member is None else ' in a tuple'}; enzyme_py "
        "differentiates results that are float, integer or boolean scalars, arrays of "
        "them, or tuples of those"
    )


def result_parts(restype: Any, ctx: Any, name: str) -> tuple[ResultPart, ...] | None:
    """The parts of a result of Numba type ``restype`` passed through output arrays, or
    None for a scalar or no result (returned by value, or nothing)."""
    from numba.core import types

    if isinstance(restype, (types.NoneType, types.Float, types.Integer, types.Boolean)):
        return None
    if isinstance(restype, types.BaseTuple):
        return tuple(_part(t, k, ctx, name) for k, t in enumerate(restype.types))
    return (_part(restype, None, ctx, name),)


def output_signature(parts: tuple[ResultPart, ...], noalias: str) -> list[str]:
    """The wrapper's output parameters: each part's data pointer, then its shape."""
    text = []
    for k, part in enumerate(parts):
        text.append(f"{part.element}* {noalias} %r{k}")
        text.extend(f"i64 %r{k}.shape{d}" for d in range(part.ndim))
    return text


def _array_struct(part: ResultPart) -> str:
    """Numba's array struct (meminfo, parent, nitems, itemsize, data, shape, strides)."""
    nd = part.ndim
    return f"{{ i8*, i8*, i64, i64, {part.element}*, [{nd} x i64], [{nd} x i64] }}"


def type_mark_declaration(mark: str) -> str:
    """The declaration of Enzyme's type mark ``mark`` (``__enzyme_integer``,
    ``__enzyme_double``, ...): a call (pointer, constant bytes) tells its type analysis
    what that memory holds, and it then drops the call; enzyme_py's engine erases any
    call left (src/rewrites.h). It reads and writes nothing."""
    return f"declare void @{mark}(i8* nocapture readnone, i64) readnone nounwind"


# That memory holds integers (copy_out's array structures).
INTEGER_MARK = "__enzyme_integer"
INTEGER_MARK_DECLARATION = type_mark_declaration(INTEGER_MARK)


def integer_fields(array: str, struct: str, nd: int, tag: str) -> list[str]:
    """IR lines telling Enzyme that the array structure ``array`` holds integers in its
    item count, item size, shape and strides. Enzyme infers them from the code that
    writes them, except where they are computed in ways its type analysis does not
    follow: a reversed view's negative stride (``x[::-1]`` returned) left the strides
    untyped, and Enzyme refused the forward derivative ("mixed activity")."""
    lines = [
        f"  %counts{tag}.at = getelementptr inbounds {struct}, {struct}* {array}, i32 0, i32 2",
        f"  %counts{tag} = bitcast i64* %counts{tag}.at to i8*",
        f"  call void @{INTEGER_MARK}(i8* %counts{tag}, i64 16)",
    ]
    if nd:
        lines += [
            f"  %dims{tag}.at = getelementptr inbounds {struct}, {struct}* {array}, i32 0, i32 5",
            f"  %dims{tag} = bitcast [{nd} x i64]* %dims{tag}.at to i8*",
            f"  call void @{INTEGER_MARK}(i8* %dims{tag}, i64 {16 * nd})",
        ]
    return lines


def copy_out(parts: tuple[ResultPart, ...], slot_type: str, errors: str) -> list[str]:
    """IR lines, entered after Numba's call with ``%status64`` stored, that copy each part
    of ``%result`` (of type ``slot_type``) into its output array, unless the call failed
    or an output has another shape (status SHAPE_MISMATCH); ending in ``ret void``."""
    lines = [
        "  %failed = icmp ne i64 %status64, 0",
        "  br i1 %failed, label %done, label %part0",
    ]
    for k, part in enumerate(parts):
        following = f"part{k + 1}" if k + 1 < len(parts) else "done"
        element = part.element
        lines.append(f"part{k}:")
        if part.member is None:
            held = f"%result{k}"
            lines.append(f"  {held} = bitcast {slot_type}* %result to {part.llvm_type}*")
        else:
            held = f"%member{k}"
            lines.append(
                f"  {held} = getelementptr inbounds {slot_type}, {slot_type}* %result, "
                f"i32 0, i32 {part.member}"
            )
        if part.scalar:
            lines += [
                f"  %v{k} = load {element}, {element}* {held}",
                f"  store {element} %v{k}, {element}* %r{k}",
                f"  br label %{following}",
            ]
            continue
        struct, nd = _array_struct(part), part.ndim
        lines += [
            f"  %array{k} = bitcast {part.llvm_type}* {held} to {struct}*",
            *integer_fields(f"%array{k}", struct, nd, str(k)),
            f"  %data{k}.at = getelementptr inbounds {struct}, {struct}* %array{k}, i32 0, i32 4",
            f"  %data{k} = load {element}*, {element}** %data{k}.at",
            f"  %bytes{k} = bitcast {element}* %data{k} to i8*",
        ]
        same, count = "true", "1"
        for d in range(nd):
            lines += [
                f"  %shape{k}.{d}.at = getelementptr inbounds {struct}, {struct}* %array{k}, "
                f"i32 0, i32 5, i32 {d}",
                f"  %shape{k}.{d} = load i64, i64* %shape{k}.{d}.at",
                f"  %stride{k}.{d}.at = getelementptr inbounds {struct}, {struct}* %array{k}, "
                f"i32 0, i32 6, i32 {d}",
                f"  %stride{k}.{d} = load i64, i64* %stride{k}.{d}.at",
                f"  %same{k}.{d} = icmp eq i64 %shape{k}.{d}, %r{k}.shape{d}",
                f"  %all{k}.{d} = and i1 {same}, %same{k}.{d}",
                f"  %count{k}.{d} = mul i64 {count}, %shape{k}.{d}",
            ]
            same, count = f"%all{k}.{d}", f"%count{k}.{d}"
        lines += [
            f"  br i1 {same}, label %copy{k}, label %mismatch{k}",
            f"mismatch{k}:",
            f"  store i64 {SHAPE_MISMATCH + k}, i64* {errors}",
            "  br label %done",
            f"copy{k}:",
            f"  %empty{k} = icmp eq i64 {count}, 0",
            f"  br i1 %empty{k}, label %{following}, label %loop{k}",
            f"loop{k}:",
            f"  %i{k} = phi i64 [ 0, %copy{k} ], [ %next{k}, %loop{k} ]",
        ]
        # The multi-index of flat index i (C order), and its byte offset by strides.
        rest, offset = f"%i{k}", "0"
        for d in range(nd - 1, -1, -1):
            lines += [
                f"  %idx{k}.{d} = urem i64 {rest}, %shape{k}.{d}",
                f"  %rest{k}.{d} = udiv i64 {rest}, %shape{k}.{d}",
                f"  %step{k}.{d} = mul i64 %idx{k}.{d}, %stride{k}.{d}",
                f"  %offset{k}.{d} = add i64 {offset}, %step{k}.{d}",
            ]
            rest, offset = f"%rest{k}.{d}", f"%offset{k}.{d}"
        lines += [
            f"  %src8.{k} = getelementptr i8, i8* %bytes{k}, i64 {offset}",
            f"  %src{k} = bitcast i8* %src8.{k} to {element}*",
            f"  %value{k} = load {element}, {element}* %src{k}",
            f"  %dst{k} = getelementptr inbounds {element}, {element}* %r{k}, i64 %i{k}",
            f"  store {element} %value{k}, {element}* %dst{k}",
            f"  %next{k} = add i64 %i{k}, 1",
            f"  %more{k} = icmp slt i64 %next{k}, {count}",
            f"  br i1 %more{k}, label %loop{k}, label %{following}",
        ]
    lines += ["done:", "  ret void"]
    return lines
