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
from enzyme_py.core import Active, Const, Dual, DualOnly, Reverse

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
    plan = df.input_plan()
    args = [f"a{i}" for i in range(1 + max((step.arg for step in plan), default=-1))]
    lines: list[str] = []
    checks: list[str] = []
    slot = 0

    def put(code: str, expr: str) -> None:
        nonlocal slot
        view, per = _VIEWS[code]
        lines.append(f"    {view}[{slot * per}] = {expr}")
        slot += 1

    for step in plan:
        arg = f"a{step.arg}"
        if step.kind == "S":
            put("q", f"a{step.source}.shape[{step.dim}]")
        elif step.kind == "E":
            put("p", "errors.ctypes.data")
        elif step.kind == "a":
            put("p", f"{arg}.ctypes.data")
        elif step.kind == "h":
            array = f"a{step.source}"
            shape = f"{array}.shape" if k == 1 else f"({k},) + {array}.shape"
            checks.append(
                f"    if {arg}.shape != {shape}:\n"
                f"        raise ValueError('the shadow of {step.name} has the wrong shape')"
            )
            for lane in range(k):
                put("p", f"{arg}.ctypes.data + {lane} * {array}.nbytes")
        elif step.kind == "s":
            put(step.code, arg)
        else:  # "l": a tangent or seed, k values
            for lane in range(k):
                put(step.code, arg if k == 1 else f"{arg}[{lane}]")
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

    array_args = [f"a{step.arg}" for step in plan if step.kind in ("a", "h")]
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
