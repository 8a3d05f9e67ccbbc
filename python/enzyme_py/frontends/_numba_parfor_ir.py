"""The functions generated for each of ``_numba_parfor``'s typed launches
(``threaded_ir``; what a launch is: ``_numba_parfor_launch``).

For a launch ``__enzyme_py_parfor_K(first, last, args...)``:

- ``K`` itself packs its arguments into int64 slots and runs ``K.chunk`` over the
  chunks of ``[first, last]`` on enzyme_py's threads (``src/parfor_runner.h``). The
  chunk count: one per thread, two per thread where an array read around the index
  (a stencil) can then have its shadow used in place (``_numba_parfor_indices``), one
  where the body writes a float array at entries its index does not provably own; a
  light body (no loop of its own) asks for chunks of ``_LIGHT_GRAIN`` indices at least;
- ``K.body`` is Numba's outlined body where the schedule starts at 0 or later (Numba's
  wraparound of negative indices then folds away), inlined; ``K.chunk`` calls it
  (``noinline``: what is added to ``K.body`` later, the signs of ``assume_body_signs``
  and the reordered sums of ``reorder_loop_sums``, reaches the primal launches too);
- ``K.reverse`` is the body's reverse derivative over one chunk (an
  ``__enzyme_autodiff`` marker, lowered by Enzyme's pass), called once per block of
  ``_REVERSE_BLOCK`` indices where the body has a loop of its own and its indices are
  independent (a tape of one block's values, not the chunk's);
- ``K.augment`` and ``K.gradient`` are Enzyme's rules for ``K``: the snapshot and the
  launch; the chunks' reverse derivatives with the shadow policy of the module
  docstring of ``_numba_parfor``.
"""

from __future__ import annotations

import re
from typing import Any

from enzyme_py.frontends._numba_parfor_indices import MINIMUMS, Indices, Reaches, body_indices
from enzyme_py.frontends._numba_parfor_launch import (
    ARRAY_DATA,
    EXCINFO,
    RET,
    SCHED_TYPES,
    SUPPORT,
    THREAD_INDEX,
    Launch,
    ParforUnsupported,
    schedule_args,
    split_types,
)

__all__ = [
    "DECLARE",
    "assume_body_signs",
    "body_ir",
    "first_never_negative",
    "numba_threads_from",
    "threaded_ir",
]


# How the threads of a reverse pass use a shadow: src/parfor_runner.h, ParforShadow.
# _SUM kinds with a reach (the entries an index owns) are used in place where chunks
# are long enough: the runner decides per call.
_SUM_FLOAT64, _SUM_FLOAT32, _DROP, _SHARED = 0, 1, 2, 3


DECLARE = re.compile(r"^declare void @(__enzyme_py_parfor_\d+)\((.*)\)[^\n]*$", re.M)


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


def body_ir(launch: Launch, types: list[str], noalias: bool = True) -> str:
    """``K.body``: the body where its schedule starts at 0 or later (Numba's wraparound
    of negative indices then folds away, and loops over the index vectorise), inlined.
    ``noalias``: its pointers promised apart, as Numba declares the body's."""
    k = launch.name
    body_params = [RET, EXCINFO, *SCHED_TYPES, *types[2:]]
    # On threads its pointers are noalias, as Numba declares the body's: without that
    # Enzyme would keep copies of what it reads, in case the shadows' stores overwrote
    # it.
    b = [
        f"define internal i32 @{k}.body("
        + ", ".join(
            f"{t} noalias %b{j}" if noalias and t.endswith("*") else f"{t} %b{j}"
            for j, t in enumerate(body_params)
        )
        + ") alwaysinline {"
    ]
    # The range of the schedule's bounds, on loads the body's own merge into: with it
    # SCEV knows the loop index is never negative (2**62: far above any array).
    bounds = "!range !{i64 0, i64 4611686018427387904}"
    b.append(f"  %start = load i64, i64* %b6, {bounds}")
    b.append("  %nonneg = icmp sge i64 %start, 0")
    b.append("  call void @llvm.assume(i1 %nonneg)")
    b.append("  %end.p = getelementptr i64, i64* %b6, i64 1")
    b.append(f"  %end = load i64, i64* %end.p, {bounds}")
    # The body reads its schedule from a copy of its own, which SROA turns into these
    # two values (and their range).
    b.append("  %sched = alloca [2 x i64]")
    b.append("  %sched0 = getelementptr [2 x i64], [2 x i64]* %sched, i64 0, i64 0")
    b.append("  store i64 %start, i64* %sched0")
    b.append("  %sched1 = getelementptr [2 x i64], [2 x i64]* %sched, i64 0, i64 1")
    b.append("  store i64 %end, i64* %sched1")
    call_args = ", ".join(
        f"{t} %sched0" if j == 6 else f"{t} %b{j}" for j, t in enumerate(body_params)
    )
    b.append(f"  %r = call i32 @{launch.body}({call_args}) alwaysinline")
    b += ["  ret i32 %r", "}"]
    return "\n".join(b) + "\n"


def assume_body_signs(native: Any, name: str) -> int:
    """``K.body``'s entry (``native``: the module's SourceModule) assumes each of its
    integer parameters >= 0 where every call of launch ``name`` passes one proven
    non-negative (``assume_signs_of_calls``, src/index_signs.h): sizes, counts and
    offsets its caller knows, such as GMM's ``d`` from ``x.shape``. The body receives
    them through the launch's slots, and without it Numba's wraparound of each index
    built on them stays in the body and in Enzyme's reverse of it (GMM prange's
    reverse body took a third longer than the serial derivative's per sample). Returns
    how many it assumes."""
    params = next((len(f["params"]) for f in native.functions() if f["name"] == name), 0)
    # Launch argument j >= 2 (after first and last) is the body's parameter
    # 2 + len(SCHED_TYPES) + j - 2 (body_ir).
    pairs = [(j, len(SCHED_TYPES) + j) for j in range(2, params)]
    # K.augment, Enzyme's rule for K, calls K with the arguments of the call it
    # stands for.
    return int(native.assume_signs_of_calls(name, f"{name}.body", pairs, [f"{name}.augment"]))


def _return_status(b: list[str]) -> None:
    """The end of a chunk function: the body's exception info (its ``%exc`` slot) into
    ``%raised``, and its ``%status`` returned."""
    b.append(f"  %e = load {EXCINFO[:-1]}, {EXCINFO} %exc")
    b.append(f"  %e.i8 = bitcast {EXCINFO[:-1]} %e to i8*")
    b.append("  store i8* %e.i8, i8** %raised")
    b += ["  ret i32 %status", "}"]


# Indices per call of a body's reverse derivative where it runs block by block (a body
# with a loop of its own: _launch_ir): its tape a block's, GMM prange's 128 samples
# about 640 KB; a call per index cost a body with an inner loop of two trips 4-6x
# (5.5 -> 20-32 ms for 10^6 indices on two threads).
_REVERSE_BLOCK = 128

# Indices per chunk at least, for a light body (no loop of its own): a chunk shorter
# than that costs more to hand to a thread than to run (waking one, about 2-5 us).
_LIGHT_GRAIN = 16384


def first_never_negative(text: str, name: str) -> bool:
    """Whether every call of launch ``name`` in ``text`` starts its range at a constant
    of 0 or more (``prange(n)``, ``prange(1, n - 1)``): its chunks then all start there
    or later, and need no copy of the body that wraps negative indices around."""
    firsts = re.findall(r"call void @" + re.escape(name) + r"\(i64 ([^,]+),", text)
    return bool(firsts) and all(re.fullmatch(r"\d+", first) for first in firsts)


def _launch_ir(
    launch: Launch,
    types: list[str],
    writes: list[bool],
    indices: Indices,
    threads: int,
    never_negative: bool,
    sums_only: bool,
) -> tuple[str, int]:
    """The functions of a launch but its body, and its chunk count (its thread count
    in Numba's eyes). ``never_negative``: the launch's range never starts below 0, so
    its chunks run ``K.body`` alone (Numba's own body, which wraps negative indices
    around, is neither called nor differentiated). ``sums_only``: every reduction of
    the body is a sum that nothing else reads (``reductions_only_accumulated``)."""
    reach = indices.reach
    n = len(types)
    k = launch.name
    reductions = [g for g in launch.groups if g.reduction]
    float_arrays = [g for g in launch.groups if g.array in ("float64", "float32")]
    arrays = [g for g in launch.groups if g.array is not None]
    unknown: Reaches = (None,) * len(MINIMUMS)
    # Chunks run together when every float array the body writes is written only at
    # the entries its index owns (reach 0); else as one chunk.
    parallel = all(
        g.reduction
        or not writes[g.start + ARRAY_DATA]
        or reach.get(g.start + ARRAY_DATA, unknown)[0] == 0
        for g in float_arrays
    )
    # Two chunks per thread where an array read at nearby indices (a stencil) could
    # then have its shadow used in place, in two waves of chunks (parfor_runner.h).
    waves = any(
        not g.reduction
        and not writes[g.start + ARRAY_DATA]
        and any(r is not None and r > 0 for r in reach.get(g.start + ARRAY_DATA, unknown))
        for g in float_arrays
    )
    parts = (2 * threads if waves and threads > 1 else threads) if parallel else 1
    grain = _LIGHT_GRAIN if indices.light else 1
    body_ty = f"i32 ({', '.join([RET, EXCINFO, *SCHED_TYPES, *types[2:]])})*"
    out: list[str] = []

    def chunk_count(b: list[str], slots: str) -> str:
        """``parts``, at most each reduction array's length (Numba's thread count)."""
        cur = f"{parts}"
        for r, g in enumerate(reductions):
            length = _from_slot(b, "i64", slots, g.start + ARRAY_DATA + 1, f"%len{r}")
            b.append(f"  %lt{r} = icmp slt i64 {length}, {cur}")
            b.append(f"  %tc{r} = select i1 %lt{r}, i64 {length}, i64 {cur}")
            cur = f"%tc{r}"
        return cur

    def range_of(b: list[str], slots: str) -> tuple[str, str]:
        return _from_slot(b, "i64", slots, 0, "%first"), _from_slot(b, "i64", slots, 1, "%last")

    def body_args(b: list[str], slots: str, shadows: str | None) -> list[str]:
        """The body's arguments from ``slots``: its own retptr and schedule [first, last]."""
        mark = (lambda a: f'metadata !"enzyme_const", {a}') if shadows else (lambda a: a)
        args = [mark(a) for a in schedule_args(b, "%first", "%last")]
        for g in launch.groups:
            for j in range(g.start, g.start + g.count):
                v = _from_slot(b, types[j], slots, j, f"%v{j}")
                dup = shadows and g.array in ("float64", "float32") and j == g.start + ARRAY_DATA
                if dup:
                    assert shadows is not None
                    s = _from_slot(b, types[j], shadows, j, f"%d{j}")
                    # Values the reverse pass never needs: a reduction array's, and what the
                    # body writes (into a snapshot).
                    kind = "enzyme_dupnoneed" if g.reduction or writes[j] else "enzyme_dup"
                    args.append(f'metadata !"{kind}", {types[j]} {v}, {types[j]} {s}')
                else:
                    args.append(mark(f"{types[j]} {v}"))
        return args

    # The primal: the body over the chunks.
    b = [f"define internal i32 @{k}.chunk(i64* %slots, i64 %first, i64 %last, i8** %raised) {{"]
    args = body_args(b, "%slots", None)
    if never_negative:
        # Not inlined here: K.body gets its signs' assumes and its reorderable sums
        # after the module's first inlining.
        b.append(f"  %status = call i32 @{k}.body({', '.join(args)}) noinline")
    else:
        b.append("  %nonneg = icmp sge i64 %first, 0")
        b.append(f"  %body = select i1 %nonneg, {body_ty} @{k}.body, {body_ty} @{launch.body}")
        b.append(f"  %status = call i32 %body({', '.join(args)})")
    _return_status(b)
    out += b

    # The body only reads these arrays: what lets LLVM infer that the function's own
    # arrays passed here are only read (threaded_module then copies none of them).
    read_only = {g.start + ARRAY_DATA for g in arrays if not writes[g.start + ARRAY_DATA]}
    launch_sig = ", ".join(
        f"{t} readonly nocapture %p{j}" if j in read_only else f"{t} %p{j}"
        for j, t in enumerate(types)
    )
    b = [f"define void @{k}({launch_sig}) noinline {{"]
    slots = _slots(b, "%slots", n)
    for j, t in enumerate(types):
        _to_slot(b, t, f"%p{j}", _slot(b, slots, j, f"%at{j}"))
    first, last = range_of(b, slots)
    count = chunk_count(b, slots)
    b.append(
        f"  call void @__enzyme_py_parfor_run(i32 (i64*, i64, i64, i8**)* @{k}.chunk, "
        f"i64* {slots}, i64 {first}, i64 {last}, i64 {count}, i64 {threads}, i64 {grain})"
    )
    b += ["  ret void", "}"]
    out += b

    # The reverse of the body over one chunk (Enzyme's, made by its marker pass), with
    # the body's status and exception as the primal chunk's: a launch whose work
    # nothing reads is dropped (src/unread_launches.h), and its reverse then raises
    # what it would have raised.
    b = [
        f"define internal i32 @{k}.reverse(i64* %slots, i64* %shadows, i64 %first, "
        "i64 %last, i8** %raised) {"
    ]
    marked = ", ".join(['metadata !"enzyme_primal_return"', *body_args(b, "%slots", "%shadows")])
    # K.body where the chunk starts at 0 or later; else Numba's own body, which wraps
    # negative indices around (left out where the range never starts below 0).
    bodies = [("from_zero", f"@{k}.body")]
    if not never_negative:
        bodies.append(("anywhere", f"@{launch.body}"))
    # A body with a loop of its own differentiated a block of _REVERSE_BLOCK indices at
    # a time: its tape is a block's (GMM prange's was 25 MB a thread for chunks of
    # 5,000 samples: 12,900 fresh pages at a new process's first call). Where indices
    # are independent: the chunks run together, it writes no array but floats, and its
    # reductions are sums nothing else reads (each block's pass starts from the
    # thread's entry of the reduction array, not from the partial sum before it).
    in_blocks = (
        not indices.light
        and parallel
        and sums_only
        and not any(
            writes[g.start + ARRAY_DATA] for g in arrays if g.array == "const" and not g.reduction
        )
    )
    if in_blocks:
        b.insert(1, "entry:")
        b.append("  %any = icmp sle i64 %first, %last")
        b.append("  br i1 %any, label %block, label %end")
        b.append("block:")
        b.append("  %i = phi i64 [ %first, %entry ], [ %i.next, %next ]")
        b.append(f"  %i.end = add i64 %i, {_REVERSE_BLOCK - 1}")
        b.append("  %i.past = icmp sgt i64 %i.end, %last")
        b.append("  %i.last = select i1 %i.past, i64 %last, i64 %i.end")
        b.append("  store i64 %i, i64* %s0")
        b.append("  store i64 %i.last, i64* %s1")
        at = "%i"
    else:
        at = "%first"
    labels = ", ".join(f"label %{block}" for block, _ in bodies)
    b.append(f"  %nonneg = icmp sge i64 {at}, 0")
    b.append(f"  br i1 %nonneg, {labels}" if len(bodies) == 2 else f"  br {labels}")
    for block, body in bodies:
        b.append(f"{block}:")
        if block == "from_zero":
            b.append("  call void @llvm.assume(i1 %nonneg)")
        b.append(
            f"  %status.{block} = call i32 (i8*, ...) @__enzyme_autodiff(i8* bitcast "
            f"({body_ty} {body} to i8*), {marked})"
        )
        b.append("  br label %done")
    b.append("done:")
    statuses = ", ".join(f"[ %status.{block}, %{block} ]" for block, _ in bodies)
    if in_blocks:
        b.append(f"  %status.i = phi i32 {statuses}")
        b.append("  %failed = icmp ne i32 %status.i, 0")
        b.append("  br i1 %failed, label %end, label %next")
        b.append("next:")
        b.append(f"  %i.next = add i64 %i, {_REVERSE_BLOCK}")
        b.append("  %more = icmp sle i64 %i.next, %last")
        b.append("  br i1 %more, label %block, label %end")
        b.append("end:")
        b.append("  %status = phi i32 [ %status.i, %done ], [ 0, %next ], [ 0, %entry ]")
    else:
        b.append(f"  %status = phi i32 {statuses}")
    _return_status(b)
    out += b

    pairs = ", ".join(f"{t} %p{j}, {t} %d{j}" for j, t in enumerate(types))
    # Augmented forward pass: the snapshot, then the launch.
    b = [f"define i8* @{k}.augment({pairs}) {{"]
    slots = _slots(b, "%slots", n)
    for j, t in enumerate(types):
        _to_slot(b, t, f"%p{j}", _slot(b, slots, j, f"%at{j}"))
    copies = _slots(b, "%copies", 2 * len(arrays))
    for c, g in enumerate(arrays):
        j = g.start + ARRAY_DATA
        nitems = f"%p{g.start + 2}"
        itemsize = f"%p{g.start + 3}"
        b.append(f"  %bytes{c} = mul i64 {nitems}, {itemsize}")
        # -1: memory nothing writes before the reverse pass (threaded_module decides)
        b.append(f"  %copy{c} = load i1, i1* @{k}.copy.{j}")
        b.append(f"  %cslot{c} = select i1 %copy{c}, i64 {j}, i64 -1")
        b.append(f"  store i64 %cslot{c}, i64* {_slot(b, copies, 2 * c, f'%cs{c}')}")
        b.append(f"  store i64 %bytes{c}, i64* {_slot(b, copies, 2 * c + 1, f'%cb{c}')}")
        # Not internal (nor constant) yet, so that nothing folds it before
        # threaded_module decides (_settle_snapshots).
        out.append(f"@{k}.copy.{j} = global i1 true")
    # An array the body writes sharing memory with another: the call ends (the
    # snapshot would copy them apart).
    checks = _slots(b, "%checks", 3 * max(1, len(arrays)))
    for c, g in enumerate(arrays):
        j = g.start + ARRAY_DATA
        values = [str(j), f"%bytes{c}", "1" if writes[j] else "0"]
        for e, value in enumerate(values):
            b.append(f"  store i64 {value}, i64* {_slot(b, checks, 3 * c + e, f'%ck{c}.{e}')}")
    b.append(
        f"  call void @__enzyme_py_parfor_check(i64* {slots}, i64* {checks}, i64 {len(arrays)})"
    )
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
    first, last = range_of(b, "%snap")
    privates = _slots(b, "%privates", 4 * max(1, len(float_arrays)))
    for c, g in enumerate(float_arrays):
        j = g.start + ARRAY_DATA
        kind = _SUM_FLOAT64 if g.array == "float64" else _SUM_FLOAT32
        if g.reduction or writes[j]:
            kind = _SHARED
        # A Const array's shadow is the array itself (rules.py): a dropped copy.
        b.append(f"  %same{c} = icmp eq {types[j]} %p{j}, %d{j}")
        b.append(f"  %kind{c} = select i1 %same{c}, i64 {_DROP}, i64 {kind}")
        b.append(f"  %pb{c} = mul i64 %p{g.start + 2}, %p{g.start + 3}")
        # The reach for this launch's first index (-1: unknown).
        found = reach.get(j, unknown) if kind != _SHARED else unknown
        current = str(-1 if found[0] is None else found[0])
        for m, r in zip(MINIMUMS[1:], found[1:], strict=True):
            b.append(f"  %ge{c}.{m} = icmp sge i64 {first}, {m}")
            b.append(
                f"  %reach{c}.{m} = select i1 %ge{c}.{m}, i64 {-1 if r is None else r}, "
                f"i64 {current}"
            )
            current = f"%reach{c}.{m}"
        entry = [str(j), f"%pb{c}", f"%kind{c}", current]
        for e, value in enumerate(entry):
            b.append(f"  store i64 {value}, i64* {_slot(b, privates, 4 * c + e, f'%pe{c}.{e}')}")
    count = chunk_count(b, "%snap")
    b.append(
        f"  call void @__enzyme_py_parfor_reverse(i32 (i64*, i64*, i64, i64, i8**)* @{k}.reverse, "
        f"i64* %snap, i64* {shadows}, i64 {n}, i64* {privates}, i64 {len(float_arrays)}, "
        f"i64 {first}, i64 {last}, i64 {count}, i64 {threads}, i64 {grain})"
    )
    b += ["  ret void", "}"]
    out += b
    return "\n".join(out) + "\n", parts


def numba_threads_from(text: str, thread: str, count: str) -> str:
    """``text`` with Numba's thread id (``get_thread_id()``, which picks a body's entry of
    the per-thread reduction arrays) and thread count (``get_num_threads()``, which
    sizes them) taken from functions ``thread`` and ``count``, and the globals keeping
    the bodies (``K.keep``) gone."""
    # Each pattern only where its name occurs: one anchored at line starts scans the
    # whole module (~3 ms for GMM prange's).
    if "@get_thread_id()" in text:
        text = re.sub(r"^declare i64 @get_thread_id\(\)\s*$", "", text, flags=re.M)
        # A chunk's index is never negative: Numba's wraparound of the reduction
        # arrays' index folds.
        text = re.sub(
            r"^(\s*%\S+ = (?:tail )?call i64 @get_thread_id\(\)[^\n]*)$",
            r"\1, !range !{i64 0, i64 4611686018427387904}",
            text,
            flags=re.M,
        )
        text = text.replace("@get_thread_id()", f"@{thread}()")
    if "@get_num_threads()" in text:
        text = re.sub(r"^declare i64 @get_num_threads\(\)\s*$", "", text, flags=re.M)
        text = text.replace("@get_num_threads()", f"@{count}()")
    if ".keep = " not in text:
        return text
    return re.sub(r"^@__enzyme_py_parfor_\d+\.keep = .*$", "", text, flags=re.M)


def threaded_ir(ir_text: str, launches: tuple[Launch, ...], threads: int) -> tuple[str, list[str]]:
    """``ir_text`` (the module of ``parfor_compile``) with each launch defined, its
    rules' functions added and the bodies' thread id the runner's; Enzyme's marker pass
    still has to make the reverse derivatives of the bodies. Returns the text and the
    launch names (each to get its rules: ``<name>.augment``, ``<name>.gradient``)."""
    from enzyme_py import _state

    declared = {m.group(1): split_types(m.group(2)) for m in DECLARE.finditer(ir_text)}
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
    writes: dict[str, list[bool]] = {}
    sums_only: dict[str, bool] = {}
    for launch in launches:
        # The body's parameters: its return and exception slots and its schedule,
        # then the launch's after first and last.
        body_writes = [not r for r in _state.native.read_only_params(ir_text, launch.body)]
        writes[launch.name] = [False, False, *body_writes[2 + len(SCHED_TYPES) :]]
        if len(writes[launch.name]) != len(declared[launch.name]):
            raise ParforUnsupported(f"the body of {launch.name} has an unexpected signature")
        # The body's parameter of each reduction array's data (after its schedule).
        sums = [len(SCHED_TYPES) + g.start + ARRAY_DATA for g in launch.groups if g.reduction]
        sums_only[launch.name] = not sums or _state.native.reductions_only_accumulated(
            ir_text, launch.body, sums
        )
    text = numba_threads_from(ir_text, THREAD_INDEX, "__enzyme_py_parfor_count")
    bodies = [body_ir(launch, declared[launch.name]) for launch in launches]
    analysed = body_indices(text, bodies, launches, declared)
    defined, counts = [], [threads]
    for launch in launches:
        part, chunks = _launch_ir(
            launch,
            declared[launch.name],
            writes[launch.name],
            analysed[launch.name],
            threads,
            first_never_negative(text, launch.name),
            sums_only[launch.name],
        )
        defined.append(part)
        counts.append(chunks)
    # Numba's thread count: the most chunks a launch has (its reduction arrays' length).
    count = f"define internal i64 @__enzyme_py_parfor_count() {{\n  ret i64 {max(counts)}\n}}\n"
    text = "\n".join([DECLARE.sub("", text), SUPPORT, count, *bodies, *defined])
    return text, [launch.name for launch in launches]
