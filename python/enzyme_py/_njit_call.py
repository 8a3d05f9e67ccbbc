"""Derivatives callable from inside ``@numba.njit`` code.

``Derivative.njit()`` returns an ``@njit`` function with the derivative's Python
calling convention: it packs the entry point's slots itself and calls the compiled
derivative through a ctypes function pointer, so an optimizer loop written in Numba
never returns to Python. It checks shadow shapes; a Numba error inside the
derivative is raised as RuntimeError (the exception's type does not survive).
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from enzyme_py import _state
from enzyme_py.core import Active, ActiveOnly, Const, Dual, DualOnly, Reverse

# slot code -> (view name, items per slot)
_VIEWS = {
    "d": ("f64", 1),
    "f": ("f32", 2),
    "q": ("i64", 1),
    "i": ("i32", 2),
    "h": ("i16", 4),
    "b": ("i8", 8),
    "?": ("u8", 8),
    "p": ("u64", 1),
}
_VIEW_DTYPES = {
    "f64": "np.float64",
    "f32": "np.float32",
    "i64": "np.int64",
    "i32": "np.int32",
    "i16": "np.int16",
    "i8": "np.int8",
    "u8": "np.uint8",
    "u64": "np.uint64",
}


def _invoker() -> Any:
    prototype = ctypes.CFUNCTYPE(None, ctypes.c_uint64, ctypes.c_uint64)
    return prototype(_state.native.call_address())


def compile_njit(df: Any) -> Any:
    """An ``@njit`` function calling derivative ``df`` (see the module docstring)."""
    import numba

    fn = df.function
    k = df.width
    lines: list[str] = []
    args: list[str] = []
    arrays: dict[int, str] = {}  # parameter index -> argument name
    checks: list[str] = []
    slot = 0

    def put(code: str, expr: str) -> None:
        nonlocal slot
        view, per = _VIEWS[code]
        lines.append(f"    {view}[{slot * per}] = {expr}")
        slot += 1

    for i, (param, act) in enumerate(zip(fn.params, df.activities, strict=True)):
        if param.hidden is not None:
            what, source, dim = param.hidden
            put(
                "q" if what == "shape" else "p",
                f"{arrays[source]}.shape[{dim}]" if what == "shape" else "errors.ctypes.data",
            )
            continue
        name = f"a{len(args)}"
        args.append(name)
        if param.kind == "pointer":
            arrays[i] = name
            put("p", f"{name}.ctypes.data")
            if act.shadow:
                shadow = f"a{len(args)}"
                args.append(shadow)
                shape = f"{name}.shape" if k == 1 else f"({k},) + {name}.shape"
                checks.append(
                    f"    if {shadow}.shape != {shape}:\n"
                    f"        raise ValueError('the shadow of {param.name} has the wrong shape')"
                )
                for lane in range(k):
                    put("p", f"{shadow}.ctypes.data + {lane} * {name}.nbytes")
            continue
        code = _code(param.dtype)
        put(code, name)
        if act.shadow:
            tangent = f"a{len(args)}"
            args.append(tangent)
            for lane in range(k):
                put(code, tangent if k == 1 else f"{tangent}[{lane}]")
    if df.mode is Reverse and df.return_activity in (Active, ActiveOnly):
        seed = f"a{len(args)}"
        args.append(seed)
        for lane in range(k):
            put(_code(fn.ret.dtype), seed if k == 1 else f"{seed}[{lane}]")
    n_in = slot
    if n_in != len(df._in_codes):
        raise RuntimeError("the derivative's slots do not match its parameters")

    # Results, as Derivative._results arranges them.
    out_codes = df._out_codes
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

    ret = fn.ret
    fields = ret.fields if ret is not None and ret.kind == "struct" else 0
    primal = "None"
    if df._return_primal:
        primal = "(" + ", ".join(take(1) for _ in range(fields)) + ",)" if fields else take(1)
    if df.mode is Reverse:
        adjoints = [take(k) for a in df.activities if a is Active]
        result = "(" + ", ".join([primal, *adjoints]) + ",)"
    elif df.return_activity in (Dual, DualOnly):
        tangent = take(k * max(fields, 1))
        result = f"({primal}, {tangent})" if df.return_activity is Dual else tangent
    else:
        result = primal if df.return_activity is Const else "None"

    array_args = [args[pos] for pos in _array_positions(df)]
    entry_lines = ["    entry = ENTRY"]
    safe_entry = df._entry
    if fn.alias_safe is not None and len(array_args) > 1:
        # Overlapping arrays break the noalias promise: use the safe build.
        safe_entry = df._alias_safe_derivative()._entry
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
    source = "\n".join(
        [
            f"def call({', '.join(args)}):",
            *checks,
            f"    slots = np.zeros({n_in + len(out_codes)}, np.uint64)",
            *(f"    {v} = slots.view({_VIEW_DTYPES[v]})" for v in _VIEW_DTYPES),
            "    errors = np.zeros(2, np.int64)",
            *lines,
            *entry_lines,
            "    invoke(entry, slots.ctypes.data)",
            "    if errors[0] != 0:",
            f"        raise RuntimeError('{fn.display_name} failed inside its derivative')",
            f"    return {result}",
        ]
    )
    namespace: dict[str, Any] = {
        "np": np,
        "invoke": _invoker(),
        "ENTRY": df._entry,
        "SAFE_ENTRY": safe_entry,
    }
    exec(compile(source, f"<enzyme_py njit caller of {fn.display_name}>", "exec"), namespace)
    return numba.njit(namespace["call"])


def _array_positions(df: Any) -> list[int]:
    """Argument positions of the arrays passed (values and shadows)."""
    positions: list[int] = []
    pos = 0
    for param, act in zip(df.function.params, df.activities, strict=True):
        if param.hidden is not None:
            continue
        if param.kind == "pointer":
            positions.append(pos)
            if act.shadow:
                positions.append(pos + 1)
        pos += 2 if act.shadow else 1
    return positions


def _code(dtype: Any) -> str:
    from enzyme_py._api import _SLOT_CODE

    return _SLOT_CODE[np.dtype(dtype)]
