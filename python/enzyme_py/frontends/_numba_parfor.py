"""Numba's prange loops as calls that a derivative runs on several threads.

With ``parallel=True`` Numba outlines each prange loop into a body function that loops
over a schedule ``[first, last]`` (its gufunc body) and launches it through its own
threading layer, which Enzyme cannot see into. Here the function is compiled again
with each launch replaced by a typed call ``__enzyme_py_parfor_K(retptr, excinfo,
sched, args..., reduction arrays...)`` of the body's own signature (``typed_launches``),
and ``threaded_ir`` defines that call and Enzyme's rules for it:

- the call runs the body over one chunk of the range per thread on enzyme_py's threads
  (``src/parfor_runner.h``); the body's ``get_thread_id()`` returns the chunk's index,
  which picks its entry of Numba's per-thread reduction arrays;
- the augmented forward pass copies every array the body is given (a snapshot: what
  later code may overwrite), then runs the call;
- the reverse pass runs the body's own reverse derivative (Enzyme's, from an
  ``__enzyme_autodiff`` marker) over the same chunks on the snapshot. Threads add into
  the shadows of arrays the body only reads through zeroed copies of their own, added
  into the shadow after all chunks ran; a reduction array's shadow is shared (each
  chunk touches only its own entry). A loop whose body may write a float array other
  than its reduction arrays runs on one thread (the same rule, one chunk): whether its
  writes are its own entries is not proven here.

Refused (the compile raises ``ParforUnsupported``; the derivative is then the serial
twin's): nested prange, reductions into arrays, non-C-contiguous arrays, and body
arguments holding floats that are not arrays (their adjoints would need the rule to
return them).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Launch",
    "ParforUnsupported",
    "parfor_compile",
    "threaded_ir",
    "with_launch_rules",
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


_ARRAY_DATA = 4  # meminfo, parent, nitems, itemsize, data, shape..., strides...


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


@contextlib.contextmanager
def typed_launches() -> Iterator[list[Launch]]:
    """While active (hold Numba's compiler lock), every prange loop Numba lowers is a
    typed call of ``__enzyme_py_parfor_K`` instead of its parallel launch; the list
    collects them in order."""
    import llvmlite.ir as lir
    from numba.core import cgutils, ir
    from numba.parfors import parfor_lowering

    launches: list[Launch] = []

    def typed_launch(
        lowerer: Any,
        cres: Any,
        gu_signature: Any,
        outer_sig: Any,
        expr_args: Any,
        expr_arg_types: Any,
        loop_ranges: Any,
        redvars: Any,
        reddict: Any,
        redarrdict: Any,
        init_block: Any,
        index_var_typ: Any,
        races: Any,
        exp_name_to_tuple_var: Any,
    ) -> None:
        context, builder = lowerer.context, lowerer.builder
        if len(loop_ranges) != 1:
            raise ParforUnsupported("nested prange loops")
        fndesc = cres.fndesc
        groups = _groups(context, fndesc.argtypes, len(redvars))
        i64 = lir.IntType(64)

        def bound(v: Any) -> Any:
            value = lowerer.loadvar(v.name) if isinstance(v, ir.Var) else i64(v)
            return builder.sext(value, i64) if value.type != i64 else value

        start, stop, _ = loop_ranges[0]
        first, last = bound(start), builder.sub(bound(stop), i64(1))

        def load(name: str) -> Any:
            if name in exp_name_to_tuple_var:
                whole, offset = exp_name_to_tuple_var[name]
                return builder.extract_value(lowerer.loadvar(whole), offset)
            return lowerer.loadvar(name)

        inouts = len(expr_args) - len(redvars)
        args = [first, last]
        args += [load(x) for x in expr_args[1:inouts]]
        args += [lowerer.loadvar(redarrdict[x].name) for x in redvars]
        name = f"{LAUNCH_PREFIX}{len(launches)}"
        # The schedule is the launch's [first, last], not memory: an array the caller
        # fills would be memory Enzyme asks the activity of. Nor does the launch take
        # Numba's return and exception slots, or return a status (Enzyme v0.0.289
        # cannot type an integer a rule returns): a body that raises ends the
        # derivative call, whose caller raises the body's exception.
        flat = list(context.get_arg_packer(fndesc.argtypes[1:]).as_arguments(builder, args[2:]))
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
        # The body's module is linked in; a global naming it keeps it there.
        lowerer.library.add_linking_library(cres.library)
        body_type = context.call_conv.get_function_type(fndesc.restype, fndesc.argtypes)
        body = cgutils.get_or_insert_function(builder.module, body_type, fndesc.llvm_func_name)
        keep = cgutils.add_global_variable(
            builder.module, lir.IntType(8).as_pointer(), name + ".keep"
        )
        keep.initializer = body.bitcast(lir.IntType(8).as_pointer())
        launches.append(Launch(name, fndesc.llvm_func_name, groups))

    original = parfor_lowering.call_parallel_gufunc
    parfor_lowering.call_parallel_gufunc = typed_launch
    try:
        yield launches
    finally:
        parfor_lowering.call_parallel_gufunc = original


def parfor_compile(dispatcher: Any, signature: tuple[Any, ...]) -> tuple[Any, tuple[Launch, ...]]:
    """A ``parallel=True`` compile of ``dispatcher``'s function (LLVM IR, Numba's first
    module stage) with its prange loops as typed launches: the IRCompile and the
    launches. Raises ParforUnsupported (or Numba's error) where it cannot."""
    import numba
    from numba.core.compiler_lock import global_compiler_lock

    from enzyme_py.frontends import _numba_compile

    options = dict(_numba_compile.serial_options(dispatcher), parallel=True)
    clone = numba.njit(**options)(dispatcher.py_func)
    with global_compiler_lock, _numba_compile.first_stage_only(), typed_launches() as found:
        compiled = _numba_compile.ad_compile_ir(clone, signature)
    if not found:
        raise ParforUnsupported("no prange loop was found")
    return compiled, tuple(found)


_DECLARE = re.compile(r"^declare void @(__enzyme_py_parfor_\d+)\((.*)\)[^\n]*$", re.M)

_SUPPORT = f"""
declare i64 @{THREAD_INDEX}() inaccessiblememonly nounwind willreturn "enzyme_inactive" "enzyme_no_escaping_allocation"
declare void @__enzyme_py_parfor_run(i32 (i64*, i64, i64, i8**)*, i64*, i64, i64, i64)
declare void @__enzyme_py_parfor_reverse(void (i64*, i64*, i64, i64)*, i64*, i64*, i64, i64*, i64, i64, i64, i64)
declare i64* @__enzyme_py_parfor_snapshot(i64*, i64, i64*, i64)
declare void @__enzyme_autodiff(i8*, ...)
declare void @llvm.assume(i1)
"""  # noqa: E501


def _split_types(text: str) -> list[str]:
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


def _to_slot(b: list[str], ty: str, value: str, slot: str) -> None:
    """Store ``value`` of type ``ty`` into the i64 ``slot``."""
    if ty.endswith("*"):
        b.append(f"  {value}.i = ptrtoint {ty} {value} to i64")
    elif ty == "i64":
        b.append(f"  {value}.i = add i64 {value}, 0")
    else:
        b.append(f"  {value}.i = zext {ty} {value} to i64")
    b.append(f"  store i64 {value}.i, i64* {slot}")


def _from_slot(b: list[str], ty: str, slots: str, j: int, name: str) -> str:
    b.append(f"  {name}.p = getelementptr i64, i64* {slots}, i64 {j}")
    b.append(f"  {name}.i = load i64, i64* {name}.p")
    if ty.endswith("*"):
        b.append(f"  {name} = inttoptr i64 {name}.i to {ty}")
    elif ty == "i64":
        return f"{name}.i"
    else:
        b.append(f"  {name} = trunc i64 {name}.i to {ty}")
    return name


def _slots(b: list[str], name: str, count: int) -> str:
    b.append(f"  {name}.a = alloca [{count} x i64]")
    b.append(f"  {name} = getelementptr [{count} x i64], [{count} x i64]* {name}.a, i64 0, i64 0")
    return name


def _slot(b: list[str], slots: str, j: int, name: str) -> str:
    b.append(f"  {name} = getelementptr i64, i64* {slots}, i64 {j}")
    return name


# The body's schedule, a C array of two int64: meminfo, parent, nitems, itemsize, data,
# shape, stride.
_SCHED_TYPES = ("i8*", "i8*", "i64", "i64", "i64*", "i64", "i64")
# Numba's return and exception slots of the body (each chunk has its own).
_RET = "i8**"
_EXCINFO = "{ i8*, i32, i8*, i8*, i32 }**"


def _launch_ir(launch: Launch, types: list[str], writes: list[bool], threads: int) -> str:
    n = len(types)
    k = launch.name
    reductions = [g for g in launch.groups if g.reduction]
    float_arrays = [g for g in launch.groups if g.array in ("float64", "float32")]
    arrays = [g for g in launch.groups if g.array is not None]
    parallel = all(g.reduction or not writes[g.start + _ARRAY_DATA] for g in float_arrays)
    body_ty = f"i32 ({', '.join([_RET, _EXCINFO, *_SCHED_TYPES, *types[2:]])})*"
    out: list[str] = []

    def thread_count(b: list[str], slots: str) -> str:
        """``threads``, at most each reduction array's length (Numba's thread count)."""
        cur = f"{threads if parallel else 1}"
        for r, g in enumerate(reductions):
            length = _from_slot(b, "i64", slots, g.start + _ARRAY_DATA + 1, f"%len{r}")
            b.append(f"  %lt{r} = icmp slt i64 {length}, {cur}")
            b.append(f"  %tc{r} = select i1 %lt{r}, i64 {length}, i64 {cur}")
            cur = f"%tc{r}"
        return cur

    def range_of(b: list[str], slots: str) -> tuple[str, str]:
        return _from_slot(b, "i64", slots, 0, "%first"), _from_slot(b, "i64", slots, 1, "%last")

    def body_args(b: list[str], slots: str, shadows: str | None) -> list[str]:
        """The body's arguments from ``slots``: its own retptr and schedule [first, last]."""
        b.append("  %ret = alloca i8*")
        b.append(f"  %exc = alloca {_EXCINFO[:-1]}")
        b.append("  %sched = alloca [2 x i64]")
        b.append("  %s0 = getelementptr [2 x i64], [2 x i64]* %sched, i64 0, i64 0")
        b.append("  store i64 %first, i64* %s0")
        b.append("  %s1 = getelementptr [2 x i64], [2 x i64]* %sched, i64 0, i64 1")
        b.append("  store i64 %last, i64* %s1")
        mark = (lambda a: f'metadata !"enzyme_const", {a}') if shadows else (lambda a: a)
        args = [mark(f"{_RET} %ret"), mark(f"{_EXCINFO} %exc")]
        sched_values = ["null", "null", "2", "8", "%s0", "2", "8"]
        for t, v in zip(_SCHED_TYPES, sched_values, strict=True):
            args.append(mark(f"{t} {v}"))
        for g in launch.groups:
            for j in range(g.start, g.start + g.count):
                v = _from_slot(b, types[j], slots, j, f"%v{j}")
                dup = shadows and g.array in ("float64", "float32") and j == g.start + _ARRAY_DATA
                if dup:
                    assert shadows is not None
                    s = _from_slot(b, types[j], shadows, j, f"%d{j}")
                    # A reduction array's value is not needed in the reverse pass.
                    kind = "enzyme_dupnoneed" if g.reduction else "enzyme_dup"
                    args.append(f'metadata !"{kind}", {types[j]} {v}, {types[j]} {s}')
                else:
                    args.append(mark(f"{types[j]} {v}"))
        return args

    # The body where its schedule starts at 0 or later: Numba's wraparound of negative
    # indices then folds away, and loops over the index vectorise. Inlined.
    body_params = [_RET, _EXCINFO, *_SCHED_TYPES, *types[2:]]
    # Its pointers are noalias, as Numba declares the body's: without that Enzyme would
    # keep copies of what it reads, in case the shadows' stores overwrote it.
    b = [
        f"define internal i32 @{k}.body("
        + ", ".join(
            f"{t} noalias %b{j}" if t.endswith("*") else f"{t} %b{j}"
            for j, t in enumerate(body_params)
        )
        + ") alwaysinline {"
    ]
    b.append("  %start = load i64, i64* %b6")
    b.append("  %nonneg = icmp sge i64 %start, 0")
    b.append("  call void @llvm.assume(i1 %nonneg)")
    b.append("  %end.p = getelementptr i64, i64* %b6, i64 1")
    b.append("  %end = load i64, i64* %end.p")
    b.append("  %end.nonneg = icmp sge i64 %end, 0")
    b.append("  call void @llvm.assume(i1 %end.nonneg)")
    call_args = ", ".join(f"{t} %b{j}" for j, t in enumerate(body_params))
    b.append(f"  %r = call i32 @{launch.body}({call_args}) alwaysinline")
    b += ["  ret i32 %r", "}"]
    out += b

    # The primal: the body over the chunks.
    b = [f"define internal i32 @{k}.chunk(i64* %slots, i64 %first, i64 %last, i8** %raised) {{"]
    args = body_args(b, "%slots", None)
    b.append("  %nonneg = icmp sge i64 %first, 0")
    b.append(f"  %body = select i1 %nonneg, {body_ty} @{k}.body, {body_ty} @{launch.body}")
    b.append(f"  %status = call i32 %body({', '.join(args)})")
    b.append(f"  %e = load {_EXCINFO[:-1]}, {_EXCINFO} %exc")
    b.append(f"  %e.i8 = bitcast {_EXCINFO[:-1]} %e to i8*")
    b.append("  store i8* %e.i8, i8** %raised")
    b += ["  ret i32 %status", "}"]
    out += b

    # The body only reads these arrays: what lets LLVM infer that the function's own
    # arrays passed here are only read (threaded_module then copies none of them).
    read_only = {g.start + _ARRAY_DATA for g in arrays if not writes[g.start + _ARRAY_DATA]}
    launch_sig = ", ".join(
        f"{t} readonly nocapture %p{j}" if j in read_only else f"{t} %p{j}"
        for j, t in enumerate(types)
    )
    b = [f"define void @{k}({launch_sig}) noinline {{"]
    slots = _slots(b, "%slots", n)
    for j, t in enumerate(types):
        _to_slot(b, t, f"%p{j}", _slot(b, slots, j, f"%at{j}"))
    first, last = range_of(b, slots)
    count = thread_count(b, slots)
    b.append(
        f"  call void @__enzyme_py_parfor_run(i32 (i64*, i64, i64, i8**)* @{k}.chunk, "
        f"i64* {slots}, i64 {first}, i64 {last}, i64 {count})"
    )
    b += ["  ret void", "}"]
    out += b

    # The reverse of the body over one chunk (Enzyme's, made by its marker pass).
    b = [f"define internal void @{k}.reverse(i64* %slots, i64* %shadows, i64 %first, i64 %last) {{"]
    marked = ", ".join(body_args(b, "%slots", "%shadows"))
    b.append("  %nonneg = icmp sge i64 %first, 0")
    b.append("  br i1 %nonneg, label %from_zero, label %anywhere")
    b.append("from_zero:")
    b.append("  call void @llvm.assume(i1 %nonneg)")
    b.append(
        f"  call void (i8*, ...) @__enzyme_autodiff(i8* bitcast ({body_ty} @{k}.body to i8*), "
        f"{marked})"
    )
    b.append("  ret void")
    b.append("anywhere:")
    b.append(
        f"  call void (i8*, ...) @__enzyme_autodiff(i8* bitcast ({body_ty} @{launch.body} to i8*), "
        f"{marked})"
    )
    b += ["  ret void", "}"]
    out += b

    pairs = ", ".join(f"{t} %p{j}, {t} %d{j}" for j, t in enumerate(types))
    # Augmented forward pass: the snapshot, then the launch.
    b = [f"define i8* @{k}.augment({pairs}) {{"]
    slots = _slots(b, "%slots", n)
    for j, t in enumerate(types):
        _to_slot(b, t, f"%p{j}", _slot(b, slots, j, f"%at{j}"))
    copies = _slots(b, "%copies", 2 * len(arrays))
    for c, g in enumerate(arrays):
        j = g.start + _ARRAY_DATA
        nitems = f"%p{g.start + 2}"
        itemsize = f"%p{g.start + 3}"
        b.append(f"  %bytes{c} = mul i64 {nitems}, {itemsize}")
        # -1: memory nothing writes before the reverse pass (threaded_module decides)
        b.append(f"  %copy{c} = load i1, i1* @{k}.copy.{j}")
        b.append(f"  %cslot{c} = select i1 %copy{c}, i64 {j}, i64 -1")
        b.append(f"  store i64 %cslot{c}, i64* {_slot(b, copies, 2 * c, f'%cs{c}')}")
        b.append(f"  store i64 %bytes{c}, i64* {_slot(b, copies, 2 * c + 1, f'%cb{c}')}")
        # Not internal (nor constant) yet, so that nothing folds it before
        # threaded_module decides (_settled_snapshots).
        out.append(f"@{k}.copy.{j} = global i1 true")
    b.append(
        f"  %snapshot = call i64* @__enzyme_py_parfor_snapshot(i64* {slots}, i64 {n}, "
        f"i64* {copies}, i64 {len(arrays)})"
    )
    b.append(f"  call void @{k}({', '.join(f'{t} %p{j}' for j, t in enumerate(types))})")
    b.append("  %tape = bitcast i64* %snapshot to i8*")
    b += ["  ret i8* %tape", "}"]
    out += b

    # Reverse pass: the chunks' reverse derivatives on the snapshot.
    b = [f"define void @{k}.gradient({pairs}, i8* %tape) {{"]
    b.append("  %snap = bitcast i8* %tape to i64*")
    shadows = _slots(b, "%shadows", n)
    for j, t in enumerate(types):
        _to_slot(b, t, f"%d{j}", _slot(b, shadows, j, f"%st{j}"))
    privates = _slots(b, "%privates", 3 * max(1, len(float_arrays)))
    for c, g in enumerate(float_arrays):
        j = g.start + _ARRAY_DATA
        kind = 0 if g.array == "float64" else 1
        shared = g.reduction or writes[j]
        b.append(f"  %same{c} = icmp eq {types[j]} %p{j}, %d{j}")
        b.append(f"  %kind{c} = select i1 %same{c}, i64 2, i64 {3 if shared else kind}")
        b.append(f"  %pb{c} = mul i64 %p{g.start + 2}, %p{g.start + 3}")
        b.append(f"  store i64 {j}, i64* {_slot(b, privates, 3 * c, f'%ps{c}')}")
        b.append(f"  store i64 %pb{c}, i64* {_slot(b, privates, 3 * c + 1, f'%pz{c}')}")
        b.append(f"  store i64 %kind{c}, i64* {_slot(b, privates, 3 * c + 2, f'%pk{c}')}")
    first, last = range_of(b, "%snap")
    count = thread_count(b, "%snap")
    b.append(
        f"  call void @__enzyme_py_parfor_reverse(void (i64*, i64*, i64, i64)* @{k}.reverse, "
        f"i64* %snap, i64* {shadows}, i64 {n}, i64* {privates}, i64 {len(float_arrays)}, "
        f"i64 {first}, i64 {last}, i64 {count})"
    )
    b += ["  ret void", "}"]
    out += b
    return "\n".join(out) + "\n"


def threaded_ir(ir_text: str, launches: tuple[Launch, ...], threads: int) -> tuple[str, list[str]]:
    """``ir_text`` (the module of ``parfor_compile``) with each launch defined, its
    rules' functions added and the bodies' thread id the runner's; Enzyme's marker pass
    still has to make the reverse derivatives of the bodies. Returns the text and the
    launch names (each to get its rules: ``<name>.augment``, ``<name>.gradient``)."""
    from enzyme_py import _state

    declared = {m.group(1): _split_types(m.group(2)) for m in _DECLARE.finditer(ir_text)}
    for launch in launches:
        if launch.name not in declared:
            raise ParforUnsupported(f"the launch {launch.name} is missing from the IR")
        # Numba links the body in as linkonce_odr, a definition LLVM infers no
        # parameter attributes of (another may replace it): ours only.
        ir_text = re.sub(
            r"^define linkonce_odr (i32 @" + re.escape(launch.body) + r"\()",
            r"define internal \1",
            ir_text,
            flags=re.M,
        )
    parts = []
    for launch in launches:
        # The body's parameters: its return and exception slots and its schedule,
        # then the launch's after first and last.
        body_writes = [not r for r in _state.native.read_only_params(ir_text, launch.body)]
        writes = [False, False, *body_writes[2 + len(_SCHED_TYPES) :]]
        if len(writes) != len(declared[launch.name]):
            raise ParforUnsupported(f"the body of {launch.name} has an unexpected signature")
        parts.append(_launch_ir(launch, declared[launch.name], writes, threads))
    text = _DECLARE.sub("", ir_text)
    text = re.sub(r"^declare i64 @get_thread_id\(\)\s*$", "", text, flags=re.M)
    text = text.replace("@get_thread_id()", f"@{THREAD_INDEX}()")
    text = re.sub(r"^@__enzyme_py_parfor_\d+\.keep = .*$", "", text, flags=re.M)
    # Numba sizes its per-thread reduction arrays by its thread count: ours here.
    text = re.sub(r"^declare i64 @get_num_threads\(\)\s*$", "", text, flags=re.M)
    text = text.replace("@get_num_threads()", "@__enzyme_py_parfor_count()")
    count = f"define internal i64 @__enzyme_py_parfor_count() {{\n  ret i64 {threads}\n}}\n"
    parts = [text, _SUPPORT, count, *parts]
    return "\n".join(parts), [launch.name for launch in launches]


def threaded_module(
    text: str, function: str, wrapper: str, names: list[str], identity: str, noalias: bool
) -> Any:
    """The SourceModule Enzyme differentiates, from ``text`` (``threaded_ir``'s and the
    wrapper): the Numba function inlined into the wrapper (``inlined_into_wrapper``),
    the module prepared for Enzyme as serial code is (``simplify_for_enzyme``), no
    snapshot of arrays the wrapper takes and never writes (``noalias``: the arrays are
    distinct), the bodies' reverse derivatives made by Enzyme's marker pass, the
    launches' rules attached."""
    from enzyme_py import _state
    from enzyme_py.frontends.ir import parse_module

    first = parse_module(inlined_into_wrapper(text, function))
    first.native.optimize("always-inline")
    # The bodies' schedules start at 0 or later (their `.body` assumes it): what lets
    # LLVM drop Numba's wraparound of negative indices before Enzyme sees them.
    first.native.optimize(_FOLD_WRAPAROUND)
    first.native.simplify_for_enzyme()
    ir = _settled_snapshots(first.native.ir(), wrapper if noalias else None)
    lowered = _state.native.run_enzyme_pass(ir, "enzyme")
    return with_launch_rules(parse_module(lowered, identity), names)


_FOLD_WRAPAROUND = (
    "function(sroa,early-cse<memssa>,instcombine,simplifycfg,loop-simplify,lcssa,"
    "loop(indvars),instcombine,correlated-propagation,simplifycfg)"
)
_CALL = re.compile(r"call void @(__enzyme_py_parfor_\d+)\((.*)\)")
_COPY_FLAG = re.compile(
    r"^(@__enzyme_py_parfor_\d+\.copy\.\d+) = [^\n]*global i1 true[^\n]*$", re.M
)


def _settled_snapshots(ir: str, wrapper: str | None) -> str:
    """``ir`` with each launch's snapshot flags made constants: false where the launch
    is called from ``wrapper`` with one of the wrapper's own arrays that the wrapper
    only reads (LLVM's inference, the launches' read-only parameters included):
    nothing can change it during the derivative call. None: every array copied."""
    from enzyme_py import _state

    needless: set[str] = set()
    define = None
    if wrapper is not None:
        define = re.search(r"^define [^\n]*@" + re.escape(wrapper) + r"\((.*)\)[^\n]*\{$", ir, re.M)
    if wrapper is not None and define is not None:
        params = [p.split()[-1] for p in _split_types(define.group(1))]
        read_only = _state.native.read_only_params(ir, wrapper)
        only_read = {name for name, flag in zip(params, read_only, strict=True) if flag}
        end = ir.find("\n}\n", define.end())
        for call in _CALL.finditer(ir, define.end(), end if end >= 0 else len(ir)):
            for j, arg in enumerate(_split_types(call.group(2))):
                if arg.split()[-1] in only_read:
                    needless.add(f"@{call.group(1)}.copy.{j}")

    def settle(m: re.Match[str]) -> str:
        value = "false" if m.group(1) in needless else "true"
        return f"{m.group(1)} = internal constant i1 {value}"

    return _COPY_FLAG.sub(settle, ir)


def with_launch_rules(module: Any, names: list[str]) -> Any:
    """``module`` (a SourceModule) with each launch's rules attached for Enzyme."""
    from enzyme_py.frontends.ir import SourceModule

    native = module.native
    rules = []
    for name in names:
        rules.append((name, "enzyme_augment", f"{name}.augment", native))
        rules.append((name, "enzyme_gradient", f"{name}.gradient", native))
    return SourceModule(native.with_rules(rules), module.digest + "|parfor rules")


def inlined_into_wrapper(text: str, function: str) -> str:
    """``text`` with the Numba function marked to be inlined into enzyme_py's wrapper.
    Called, Enzyme would differentiate it in split mode (it needs a tape: the
    launches'), where Enzyme v0.0.289 finds the launches' arguments of another
    activity in its two halves and aborts."""
    pattern = re.compile(
        r"^(define [^\n]*@" + re.escape(function) + r"\([^\n]*\))([^\n]*)\{$", re.M
    )
    return pattern.sub(lambda m: f"{m.group(1)}{m.group(2)}alwaysinline {{", text, count=1)
