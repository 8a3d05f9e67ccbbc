"""Derivatives callable from inside ``@numba.njit`` code.

``Derivative.njit()`` returns an ``@njit`` function with the derivative's Python
calling convention: it packs the entry point's slots itself and calls the compiled
derivative through a ctypes function pointer, so an optimizer loop written in Numba
never returns to Python. It checks its arrays as the Python path does: dtype, rank
and writability when Numba types the call (a TypingError naming the parameter),
C-contiguity, shadow shapes, a shadow overlapping its array, and a Const array the
function writes sharing memory with an array that has a shadow, when it runs
(ValueError). A Numba error inside the derivative is raised as RuntimeError (the
exception's type does not survive); a failed allocation inside it as MemoryError.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import numpy as np

from enzyme_py import _state
from enzyme_py._convention import SLOT_VIEWS, CallPlan, ResultShape, SlotCode, StepKind

# slot code -> (the name of the caller's view of the slots as that type, items per slot)
_VIEWS = {code: (f"view_{dtype.name}", per) for code, (dtype, per) in SLOT_VIEWS.items()}
_VIEW_DTYPES = {f"view_{dtype.name}": f"np.{dtype.name}" for dtype, _ in SLOT_VIEWS.values()}


def _invoker() -> Any:
    # uint64 enzyme_py_call(entry, slots): 0, or the bytes an allocation failed to get.
    prototype = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64)
    return prototype(_state.native.call_address())


def _array_guard(where: str, dtype: np.dtype | None, ndim: int | None) -> Any:
    """An ``@njit``-callable ``guard(a)``: a TypingError unless ``a`` is a writable
    array of ``dtype`` (any if None) and rank ``ndim`` (any if None); at run time a
    ValueError unless it is C-contiguous (checked only where its type allows others)."""
    from numba import types
    from numba.core.errors import TypingError
    from numba.extending import overload

    def guard(a: Any) -> None:  # pragma: no cover - only ever compiled
        pass

    @overload(guard)
    def _typed(a: Any) -> Any:
        want = f"a writable {'' if dtype is None else dtype.name + ' '}array"
        if ndim is not None:
            want += f" of {ndim} dimension{'s' if ndim != 1 else ''}"
        if (
            not isinstance(a, types.Array)
            or (dtype is not None and a.dtype != numba_dtype(dtype))
            or (ndim is not None and a.ndim != ndim)
            or not a.mutable
        ):
            raise TypingError(f"{where} must be {want}; got {a}")
        if a.layout == "C":

            def no_check(a: Any) -> None:  # the same parameters as guard, for Numba
                pass

            return no_check
        message = f"{where} must be C-contiguous"

        def runtime_check(a: Any) -> None:
            if not a.flags.c_contiguous:
                raise ValueError(message)

        return runtime_check

    return guard


def _lanes_guard(where: str, k: int) -> Any:
    """An ``@njit``-callable ``guard(v)`` for a tangent or seed of width k > 1: a
    TypingError unless ``v`` is a 1-D array or a tuple of k values, at run time a
    ValueError unless the array has k values (as the Python path checks)."""
    from numba import types
    from numba.core.errors import TypingError
    from numba.extending import overload

    def guard(v: Any) -> None:  # pragma: no cover - only ever compiled
        pass

    message = f"{where} needs {k} values (width={k})"

    @overload(guard)
    def _typed(v: Any) -> Any:
        if isinstance(v, types.BaseTuple) and len(v) == k:

            def no_check(v: Any) -> None:
                pass

            return no_check
        if not isinstance(v, types.Array) or v.ndim != 1:
            raise TypingError(f"{message}, a 1-D array or a tuple; got {v}")

        def runtime_check(v: Any) -> None:
            if v.shape[0] != k:
                raise ValueError(message)

        return runtime_check

    return guard


def numba_dtype(dtype: np.dtype) -> Any:
    from numba.np.numpy_support import from_dtype

    return from_dtype(dtype)


def _overlapping(a: str, b: str) -> str:
    """The condition, in the caller's source, that arrays ``a`` and ``b`` (C-contiguous:
    their byte spans are their memory) share memory."""
    return (
        f"{a}.nbytes and {b}.nbytes and "
        f"{a}.ctypes.data < {b}.ctypes.data + {b}.nbytes and "
        f"{b}.ctypes.data < {a}.ctypes.data + {a}.nbytes"
    )


def compile_njit(
    call_plan: CallPlan,
    entry: int,
    safe_entry: int | None,
    out_codes: str,
    display_name: str,
    written_consts: Sequence[tuple[int, int, str]] = (),
) -> Any:
    """An ``@njit`` function calling the entry point ``entry`` of a derivative of
    ``display_name`` as ``call_plan`` says (see the module docstring); ``safe_entry`` is the
    build without the promise that arrays do not overlap (None: no such promise; 0: that
    build is refused, and so are calls whose arrays overlap).
    ``written_consts``: pairs of argument positions that may not share memory, each with
    its refusal (``Derivative.written_consts_beside_shadows``)."""
    import numba

    k = call_plan.width
    plan = call_plan.steps
    args = [f"a{i}" for i in range(call_plan.arity)]
    lines: list[str] = []
    checks: list[str] = []
    guards: dict[str, Any] = {}
    arrays: list[tuple[str, str, int]] = []  # (argument, name, index) of array arguments
    shadows: list[tuple[str, str, int]] = []  # (argument, name, its array's index)
    slot = 0
    # The rank of each array argument: how many of its dimensions are hidden
    # parameters (none for a C pointer, whose rank is free).
    ranks: dict[int, int] = {}
    for step in plan:
        if step.kind == StepKind.SHAPE:
            ranks[step.source] = ranks.get(step.source, 0) + 1
    dtypes = {step.arg: step.dtype for step in plan if step.kind == StepKind.ARRAY}

    def guard(arg: str, where: str, source: int, lanes: int = 0) -> None:
        """Check argument ``arg`` as an array like argument ``source`` (plus a
        leading dimension of ``lanes`` for shadows of width > 1)."""
        name = f"guard_{arg}"
        char = dtypes.get(source, "")
        rank = ranks.get(source)
        guards[name] = _array_guard(
            where,
            np.dtype(char) if char else None,
            None if rank is None else rank + (lanes > 1),
        )
        checks.append(f"    {name}({arg})")

    def refuse_if(condition: str, message: str) -> None:
        checks.append(f"    if {condition}:\n        raise ValueError({message!r})")

    def put(code: str, expr: str) -> None:
        nonlocal slot
        view, per = _VIEWS[code]
        lines.append(f"    {view}[{slot * per}] = {expr}")
        slot += 1

    for step in plan:
        arg = f"a{step.arg}"
        if step.kind == StepKind.SHAPE:
            put(SlotCode.I64, f"a{step.source}.shape[{step.dim}]")
        elif step.kind == StepKind.STRIDE:
            put(SlotCode.I64, f"a{step.source}.strides[{step.dim}]")
        elif step.kind == StepKind.ERRORS:
            put(SlotCode.POINTER, "errors.ctypes.data")
        elif step.kind == StepKind.ARRAY:
            guard(arg, f"parameter '{step.name}'", step.arg)
            if step.param is not None and step.param.layout_of is not None:
                # A derivative's shadow parameter: indexed with its array's shape
                # (and strides: both C-contiguous here).
                refuse_if(
                    f"{arg}.shape != a{step.source}.shape",
                    f"parameter '{step.name}' is indexed as its array: it needs its shape",
                )
            arrays.append((arg, f"parameter '{step.name}'", step.arg))
            put(SlotCode.POINTER, f"{arg}.ctypes.data")
        elif step.kind == StepKind.SHADOW:
            array = f"a{step.source}"
            where = f"the shadow of '{step.name}'"
            guard(arg, where, step.source, k)
            shape = f"{array}.shape" if k == 1 else f"({k},) + {array}.shape"
            width = f" (width={k})" if k > 1 else ""
            refuse_if(
                f"{arg}.itemsize != {array}.itemsize or {arg}.shape != {shape}",
                f"{where} needs the shape and dtype of its array{width}",
            )
            shadows.append((arg, where, step.source))
            for lane in range(k):
                put(SlotCode.POINTER, f"{arg}.ctypes.data + {lane} * {array}.nbytes")
        elif step.kind == StepKind.SCALAR:
            put(step.code, arg)
        else:  # "l": a tangent or seed, k values
            if k > 1:  # reading past its end would give garbage
                name = f"lanes_{arg}"
                guards[name] = _lanes_guard(step.where, k)
                checks.append(f"    {name}({arg})")
            for lane in range(k):
                put(step.code, arg if k == 1 else f"{arg}[{lane}]")
    # The derivative writes into shadows: one sharing memory with an array would
    # change what the function reads (its own array may be its shadow only under
    # runtime activity). Shadows may overlap each other, as in the Python path.
    for shadow, where, own in shadows:
        for array, name, index in arrays:
            if index == own and call_plan.runtime_activity:
                continue
            what = "its array" if index == own else name
            refuse_if(
                _overlapping(shadow, array), f"{where} overlaps {what}; give it memory of its own"
            )
    # A Const array the function writes may not share memory with an array that has a
    # shadow.
    for const, shadowed, message in written_consts:
        refuse_if(_overlapping(f"a{const}", f"a{shadowed}"), message)
    # Two shadows may share memory only as their arrays do (one array passed twice),
    # else the adjoints of different arrays would mix.
    for j, (shadow, where, own) in enumerate(shadows):
        for other, other_where, other_own in shadows[:j]:
            mirrored = (
                f"{shadow}.ctypes.data - a{own}.ctypes.data == "
                f"{other}.ctypes.data - a{other_own}.ctypes.data"
            )
            if k > 1:
                mirrored += f" and a{own}.nbytes == a{other_own}.nbytes"
            refuse_if(
                f"{_overlapping(shadow, other)} and not ({mirrored})",
                f"{where} overlaps {other_where}, and their arrays do not overlap alike; "
                "give each shadow memory of its own",
            )
    n_in = slot
    if n_in != len(call_plan.in_codes):
        raise RuntimeError("the derivative's slots do not match its parameters")

    # Results, as _convention.read_results arranges them.
    cursor = n_in

    def take(count: int) -> str:
        nonlocal cursor
        code = out_codes[cursor - n_in]
        view, per = _VIEWS[code]
        if count == 1:
            expr = f"{view}[{cursor * per}]"
        else:
            expr = f"{view}[{cursor * per}:{(cursor + count) * per}:{per}].copy()"
        cursor += count
        return expr

    result_plan = call_plan.result
    fields = result_plan.primal_fields
    primal = "None"
    if fields == 1 and not result_plan.tangent_struct:
        primal = take(1)
    elif fields:
        primal = "(" + ", ".join(take(1) for _ in range(fields)) + ",)"
    if result_plan.shape == ResultShape.REVERSE:
        adjoints = [take(lanes) for lanes in result_plan.adjoints]
        result = "(" + ", ".join([primal, *adjoints]) + ",)"
    elif result_plan.shape in (ResultShape.PAIR, ResultShape.TANGENT):
        tangent = take(k * max(result_plan.tangent_fields, 1))
        result = f"({primal}, {tangent})" if result_plan.shape == ResultShape.PAIR else tangent
    else:
        result = primal

    array_args = [f"a{step.arg}" for step in plan if step.kind in (StepKind.ARRAY, StepKind.SHADOW)]
    entry_lines = ["    entry = ENTRY"]
    if safe_entry is not None and len(array_args) > 1:
        # Overlapping arrays break the noalias promise: use the safe build.
        n = len(array_args)
        entry_lines = [f"    spans = np.empty(({n}, 2), np.int64)"]
        for j, a in enumerate(array_args):
            entry_lines.append(f"    spans[{j}, 0] = {a}.ctypes.data")
            entry_lines.append(f"    spans[{j}, 1] = {a}.ctypes.data + {a}.nbytes")
        entry_lines += [
            "    entry = ENTRY",
            f"    for x in range({n}):",
            f"        for y in range(x + 1, {n}):",
            "            if spans[x, 0] < spans[y, 1] and spans[y, 0] < spans[x, 1]:",
            "                entry = SAFE_ENTRY",
        ]
        if safe_entry == 0:
            refused = (
                f"arrays given to the derivative of {display_name} overlap, and its build "
                "for overlapping arrays is refused (a Const array it writes and reads back "
                "would lose its derivative); give each array memory of its own"
            )
            entry_lines += ["    if entry == 0:", f"        raise ValueError({refused!r})"]
    out_of_memory = f"the derivative of {display_name} ran out of memory"
    failed = f"{display_name} failed inside its derivative"
    source = "\n".join(
        [
            f"def call({', '.join(args)}):",
            *checks,
            f"    slots = np.zeros({n_in + len(out_codes)}, np.uint64)",
            *(f"    {v} = slots.view({_VIEW_DTYPES[v]})" for v in _VIEW_DTYPES),
            "    errors = np.zeros(2, np.int64)",
            *lines,
            *entry_lines,
            "    failed_bytes = invoke(entry, slots.ctypes.data)",
            # All ones: a prange loop's chunk raised (src/arena.h, kLoopFailed).
            "    if failed_bytes == np.uint64(0xFFFFFFFFFFFFFFFF):",
            f"        raise RuntimeError({failed!r})",
            "    if failed_bytes != 0:",
            f"        raise MemoryError({out_of_memory!r})",
            "    if errors[0] != 0:",
            f"        raise RuntimeError({failed!r})",
            f"    return {result}",
        ]
    )
    namespace: dict[str, Any] = {
        **guards,
        "np": np,
        "invoke": _invoker(),
        "ENTRY": entry,
        "SAFE_ENTRY": entry if safe_entry is None else safe_entry,
    }
    exec(compile(source, f"<enzyme_py njit caller of {display_name}>", "exec"), namespace)
    return numba.njit(namespace["call"])
