"""What a typed launch of ``_numba_parfor`` is, and the ABI its generated functions
share (``_numba_parfor_ir``, ``_numba_parfor_indices``): a prange loop lowered as
``__enzyme_py_parfor_K(first, last, args...)``, its arguments grouped by Numba
argument, and the outlined body's parameters (its return and exception slots, its
schedule, then the launch's arguments after first and last)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "ARRAY_DATA",
    "EXCINFO",
    "LAUNCH_PREFIX",
    "PARFOR_OVERLAP",
    "RET",
    "SCHED_TYPES",
    "SCHED_VALUES",
    "SUPPORT",
    "THREAD_INDEX",
    "Group",
    "Launch",
    "ParforUnsupported",
    "emit_launch",
    "launch_groups",
    "schedule_args",
    "split_types",
]

LAUNCH_PREFIX = "__enzyme_py_parfor_"
THREAD_INDEX = "__enzyme_py_parfor_thread"


class ParforUnsupported(Exception):
    """A prange loop this module cannot run on several threads."""


@dataclass(frozen=True)
class Group:
    """One Numba argument of a launch: its LLVM parameters ``[start, start + count)``."""

    start: int
    count: int
    array: str | None  # "float64" / "float32" (differentiable), "const" (other arrays)
    reduction: bool


@dataclass(frozen=True)
class Launch:
    name: str  # __enzyme_py_parfor_K
    body: str  # the outlined body's LLVM name
    groups: tuple[Group, ...]  # the body's arguments after its schedule


def _groups(context: Any, argtypes: Any, reductions: int) -> tuple[Group, ...]:
    from numba.core import types

    groups, at = [], 2  # after first and last
    for index, ty in enumerate(argtypes):
        if index == 0:  # the schedule: the launch's first and last instead
            continue
        count = len(context.get_arg_packer([ty])._be_args)
        reduction = index >= len(argtypes) - reductions
        array: str | None = None
        if isinstance(ty, types.Array):
            if ty.layout != "C":
                raise ParforUnsupported(f"a prange loop reads a {ty.layout}-layout array")
            if reduction and ty.ndim != 1:
                raise ParforUnsupported("a prange loop reduces into an array")
            if isinstance(ty.dtype, types.Float):
                array = str(ty.dtype)
            elif isinstance(ty.dtype, (types.Integer, types.Boolean)):
                array = "const"
            else:
                raise ParforUnsupported(f"a prange loop reads an array of {ty.dtype}")
        elif not isinstance(ty, (types.Integer, types.Boolean, types.NoneType)):
            raise ParforUnsupported(f"a prange loop takes a {ty} that is not an array")
        groups.append(Group(at, count, array, reduction))
        at += count
    return tuple(groups)


def launch_groups(lowerer: Any, cres: Any, loop_ranges: Any, redvars: Any) -> tuple[Group, ...]:
    """The argument groups of the launch of body ``cres`` that ``lowerer`` is about to
    lower (Numba's ``call_parallel_gufunc`` arguments); emits nothing. Raises
    ParforUnsupported where a typed launch cannot express it."""
    if len(loop_ranges) != 1:
        raise ParforUnsupported("nested prange loops")
    return _groups(lowerer.context, cres.fndesc.argtypes, len(redvars))


def emit_launch(
    lowerer: Any,
    cres: Any,
    name: str,
    groups: tuple[Group, ...],
    expr_args: Any,
    loop_ranges: Any,
    redvars: Any,
    redarrdict: Any,
    exp_name_to_tuple_var: Any,
) -> Any:
    """Emits, at ``lowerer``'s builder, the typed launch ``name(first, last, args...)`` of
    body ``cres`` (Numba's ``call_parallel_gufunc`` arguments, before that function
    changes them) and declares the body in the module; returns the launch's LLVM
    function (declared where the module has none)."""
    import llvmlite.ir as lir
    from numba.core import cgutils, ir

    context, builder = lowerer.context, lowerer.builder
    fndesc = cres.fndesc
    i64 = lir.IntType(64)

    def bound(v: Any) -> Any:
        value = lowerer.loadvar(v.name) if isinstance(v, ir.Var) else i64(v)
        return builder.sext(value, i64) if value.type != i64 else value

    start, stop, _ = loop_ranges[0]
    first, last = bound(start), builder.sub(bound(stop), i64(1))

    def load(var: str) -> Any:
        if var in exp_name_to_tuple_var:
            whole, offset = exp_name_to_tuple_var[var]
            return builder.extract_value(lowerer.loadvar(whole), offset)
        return lowerer.loadvar(var)

    inouts = len(expr_args) - len(redvars)
    args = [load(x) for x in expr_args[1:inouts]]
    args += [lowerer.loadvar(redarrdict[x].name) for x in redvars]
    # The schedule is the launch's [first, last], not memory: an array the caller
    # fills would be memory Enzyme asks the activity of. Nor does the launch take
    # Numba's return and exception slots, or return a status (Enzyme v0.0.289
    # cannot type an integer a rule returns): a body that raises ends the
    # derivative call, whose caller raises the body's exception.
    flat = list(context.get_arg_packer(fndesc.argtypes[1:]).as_arguments(builder, args))
    # An array's owner and parent objects are not the body's business in a
    # derivative (reference counting is off there): null, so that no pointer
    # Enzyme would give a shadow of is passed but the data.
    for g in groups:
        if g.array is not None:
            for j in (g.start - 2, g.start - 1):
                flat[j] = lir.Constant(flat[j].type, None)
    fnty = lir.FunctionType(lir.VoidType(), [i64, i64, *[a.type for a in flat]])
    launch = cgutils.get_or_insert_function(builder.module, fnty, name)
    builder.call(launch, [first, last, *flat])
    body_type = context.call_conv.get_function_type(fndesc.restype, fndesc.argtypes)
    cgutils.get_or_insert_function(builder.module, body_type, fndesc.llvm_func_name)
    return launch


# The status of a derivative call whose prange loop writes an array sharing memory
# with another of its arrays (src/parfor_runner.h: kParforOverlap).
PARFOR_OVERLAP = 8001

ARRAY_DATA = 4  # meminfo, parent, nitems, itemsize, data, shape..., strides...

# The body's schedule, a C array of two int64: meminfo, parent, nitems, itemsize, data,
# shape, stride.
SCHED_TYPES = ("i8*", "i8*", "i64", "i64", "i64*", "i64", "i64")
SCHED_VALUES = ("null", "null", "2", "8", "%s0", "2", "8")  # the schedule at %s0
# Numba's return and exception slots of the body (each chunk has its own).
RET = "i8**"
EXCINFO = "{ i8*, i32, i8*, i8*, i32 }**"

# What the generated functions call (src/parfor_runner.h) and the body's thread index.
SUPPORT = f"""
declare i64 @{THREAD_INDEX}() inaccessiblememonly nounwind willreturn "enzyme_inactive" "enzyme_no_escaping_allocation"
declare void @__enzyme_py_parfor_run(i32 (i64*, i64, i64, i8**)*, i64*, i64, i64, i64, i64, i64)
declare void @__enzyme_py_parfor_reverse(i32 (i64*, i64*, i64, i64, i8**)*, i64*, i64*, i64, i64*, i64, i64, i64, i64, i64, i64)
declare i64* @__enzyme_py_parfor_snapshot(i64*, i64, i64*, i64)
declare void @__enzyme_py_parfor_check(i64*, i64*, i64)
declare i32 @__enzyme_autodiff(i8*, ...)
declare void @llvm.assume(i1)
"""  # noqa: E501


def split_types(text: str) -> list[str]:
    """The parameter types of a declaration's list (commas inside braces kept)."""
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch in "{[(":
            depth += 1
        elif ch in "}])":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current.strip())
    return parts


def schedule_args(b: list[str], first: str, last: str) -> list[str]:
    """The body's own return and exception slots and its schedule ``[first, last]``,
    allocated in ``b``: the body's first arguments (typed, not marked for Enzyme)."""
    b.append("  %ret = alloca i8*")
    b.append(f"  %exc = alloca {EXCINFO[:-1]}")
    b.append("  %sched = alloca [2 x i64]")
    b.append("  %s0 = getelementptr [2 x i64], [2 x i64]* %sched, i64 0, i64 0")
    b.append(f"  store i64 {first}, i64* %s0")
    b.append("  %s1 = getelementptr [2 x i64], [2 x i64]* %sched, i64 0, i64 1")
    b.append(f"  store i64 {last}, i64* %s1")
    sched = [f"{t} {v}" for t, v in zip(SCHED_TYPES, SCHED_VALUES, strict=True)]
    return [f"{RET} %ret", f"{EXCINFO} %exc", *sched]
