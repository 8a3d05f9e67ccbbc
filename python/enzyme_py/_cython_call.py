"""Derivatives callable from Cython: ``Derivative.cython_declaration()``.

The twin of ``Derivative.njit()`` for Cython: the text of a ``cdef inline ... noexcept
nogil`` function (with the ``cdef extern`` block it needs) that fills the derivative's
slots (``_convention``) from memoryviews and scalars and calls its compiled entry point
through its C address, so that a loop written in Cython calls the derivative without
Python and without the GIL. Paste it into a ``.pyx`` or ``include`` it from a ``.pxi``.

Its parameters are the derivative's Python arguments in order (an array and its
shadow as typed memoryviews of the array's dtype and rank, C-contiguous unless the
function takes strided arrays; in a derivative of a derivative, the first derivative's
shadow parameters as views of their arrays' rank and layout; a raw C pointer parameter
as a pointer; scalars, tangents and the seed as C scalars), then one pointer per result
value (the primal, each Active parameter's adjoint, the tangent), any of them NULL to
skip it. It returns 0, or:

- ``1`` (``BAD_ARGUMENTS``): a shadow whose shape or strides differ from its array's,
  or that shares memory with an array argument; an array with a shadow whose elements
  share memory (a stride of 0 along an axis of more than one element, as
  ``np.broadcast_to`` makes: each element's adjoint needs a place of its own); in a
  second derivative of a function over strided views, a shadow parameter of the first
  (``dx``, indexed with its array's shape and strides) whose shape or strides differ
  from its array's (``x``);
- ``2`` (``OUT_OF_MEMORY``): an allocation inside the derivative failed;
- ``3`` (``FAILED``): the function failed inside the derivative (an exception it raised,
  a bounds check's IndexError, also on another thread's chunk of a prange loop: only
  its status survives; the exception is dropped).

The addresses are those of this process: the module must be built and run in the
process that made the declaration, while the derivative is alive.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from enzyme_py import _state
from enzyme_py._convention import ResultShape, SlotCode, StepKind
from enzyme_py.core import Active

BAD_ARGUMENTS = 1
OUT_OF_MEMORY = 2
FAILED = 3

_C_TYPES = {
    SlotCode.DOUBLE: "double",
    SlotCode.FLOAT: "float",
    SlotCode.I64: "int64_t",
    SlotCode.I32: "int32_t",
    SlotCode.I16: "int16_t",
    SlotCode.I8: "int8_t",
    SlotCode.BOOL: "uint8_t",
}
_ELEMENT_TYPES = {
    np.dtype(np.float64): "double",
    np.dtype(np.float32): "float",
    np.dtype(np.int64): "int64_t",
    np.dtype(np.int32): "int32_t",
    np.dtype(np.int16): "int16_t",
    np.dtype(np.int8): "int8_t",
}


def _identifier(name: str) -> str:
    text = re.sub(r"\W", "_", name)
    return text if text and not text[0].isdigit() else f"d_{text}"


def declaration(derivative: Any, name: str | None = None) -> str:
    """The Cython text declaring ``name`` (default: ``d<function>``), a nogil function
    calling ``derivative`` (see the module docstring)."""
    plan = derivative.plan
    fn = derivative.function
    if plan.width != 1:
        raise ValueError(
            "cython_declaration() makes width-1 derivatives callable from Cython; "
            f"this one has width={plan.width}"
        )
    if plan.runtime_activity:
        raise ValueError("cython_declaration() does not take runtime_activity derivatives")
    if plan.result.tangent_struct or (plan.result.primal_fields > 1):
        raise ValueError(
            "cython_declaration() passes scalar results; this derivative returns a struct"
        )
    # default: d<function>, spaces and all made an identifier (a derivative's function
    # is named "reverse derivative of f": "dreverse_derivative_of_f")
    label = name if name is not None else _identifier(f"d{fn.display_name}")
    if not isinstance(label, str) or not label.isidentifier():
        raise ValueError(f"name must be a Python identifier; got {label!r}")
    tag = _identifier(f"{label}_{derivative.entry:x}")
    names: list[str] = []
    for n in plan.argument_names:  # distinct: a second derivative's x's shadow and the
        text = _identifier(n)  # first derivative's shadow parameter are both "dx"
        while text in names:
            text = f"{text}_"
        names.append(text)
    ranks = dict(plan.ranks)
    strided = {
        step.source for step in plan.steps if step.kind == StepKind.STRIDE
    }  # arrays whose strides are passed: views of any layout
    # A derivative's shadow parameter (Param.layout_of, a second derivative of a
    # function over strided views) has no shapes of its own: it is indexed with the
    # shape and strides of its array (step.source), so it is a view of that array's
    # rank and layout, checked to have its shape and strides.
    like: dict[int, int] = {}  # such a parameter -> its array
    for step in plan.steps:
        if step.kind == StepKind.ARRAY and step.param is not None and step.source >= 0:
            like[step.arg] = step.source
            if step.source in ranks:
                ranks[step.arg] = ranks[step.source]
            if step.source in strided:
                strided.add(step.arg)
    params: list[str] = []
    body: list[str] = []
    arrays: list[tuple[str, int, str]] = []  # (name, rank, element) of arrays, shadows
    shadows: list[tuple[str, str, int]] = []  # (shadow, its array, rank)
    dtypes: dict[int, str] = {}
    slot = 0

    def put(code: str, expr: str) -> None:
        nonlocal slot
        if code == SlotCode.POINTER:
            body.append(f"    slots[{slot}] = <uint64_t><uintptr_t>({expr})")
        else:  # copied in (a typed store into the uint64 slots would break aliasing rules)
            body.append(f"    cdef {_C_TYPES[code]} value{slot} = {expr}")
            body.append(f"    slots[{slot}] = 0")
            body.append(f"    memcpy(&slots[{slot}], &value{slot}, sizeof(value{slot}))")
        slot += 1

    def view_type(element: str, rank: int, arg: int, const: bool) -> str:
        axes = [":"] * rank
        if arg not in strided:
            axes[-1] = "::1"
        return f"{'const ' if const else ''}{element}[{', '.join(axes)}]"

    def data(arg: str, rank: int | None) -> str:
        if rank is None:
            return arg
        return f"&{arg}[{', '.join(['0'] * rank)}]"

    for step in plan.steps:
        if step.kind == StepKind.SHAPE:
            put(SlotCode.I64, f"{names[step.source]}.shape[{step.dim}]")
        elif step.kind == StepKind.STRIDE:
            put(SlotCode.I64, f"{names[step.source]}.strides[{step.dim}]")
        elif step.kind == StepKind.ERRORS:
            put(SlotCode.POINTER, "&errors[0]")
        elif step.kind == StepKind.ARRAY:
            assert step.param is not None
            arg, rank = names[step.arg], ranks.get(step.arg)
            dtype = step.param.dtype
            element = _ELEMENT_TYPES.get(dtype) if dtype is not None else "char"
            if element is None:
                raise ValueError(f"cython_declaration() cannot pass {step.where} ({dtype})")
            dtypes[step.arg] = element
            if rank is None:  # a C pointer: no shape to check
                params.append(f"{element} *{arg}")
            else:
                const = step.param.readonly
                params.append(f"{view_type(element, rank, step.arg, const)} {arg}")
                arrays.append((arg, rank, element))
            put(SlotCode.POINTER, data(arg, rank))
        elif step.kind == StepKind.SHADOW:
            arg, own, rank = names[step.arg], names[step.source], ranks.get(step.source)
            element = dtypes[step.source]
            if rank is None:
                params.append(f"{element} *{arg}")
            else:
                params.append(f"{view_type(element, rank, step.source, False)} {arg}")
                shadows.append((arg, own, rank))
                arrays.append((arg, rank, element))
            put(SlotCode.POINTER, data(arg, rank))
        else:  # a scalar, a tangent or the seed
            arg = names[step.arg]
            params.append(f"{_C_TYPES[step.code]} {arg}")
            put(step.code, arg)
    n_in = slot
    out_codes = derivative.out_codes
    result = plan.result
    outputs: list[tuple[str, str]] = []  # (parameter, slot code)
    index = 0
    if result.primal_fields:
        outputs.append(("primal", out_codes[index]))
        index += 1
    if result.shape == ResultShape.REVERSE:
        active = [
            _identifier(p.name)
            for p, a in zip(fn.params, derivative.activities, strict=True)
            if a is Active
        ]
        for adjoint in active:
            outputs.append((f"adjoint_{adjoint}", out_codes[index]))
            index += 1
    elif result.shape in (ResultShape.PAIR, ResultShape.TANGENT):
        outputs.append(("tangent", out_codes[index]))
        index += 1
    for out, code in outputs:
        params.append(f"{_C_TYPES[code]} *{out}")
    total = n_in + len(out_codes)

    checks: list[str] = []
    for arg, source in like.items():
        rank = ranks.get(arg)
        for d in range(rank or 0):
            own, array = names[arg], names[source]
            checks.append(
                f"    if {own}.shape[{d}] != {array}.shape[{d}] or "
                f"{own}.strides[{d}] != {array}.strides[{d}]:\n"
                f"        return {BAD_ARGUMENTS}"
            )
    for shadow, own, rank in shadows:
        for d in range(rank):
            checks.append(
                f"    if {shadow}.shape[{d}] != {own}.shape[{d}] or "
                f"{shadow}.strides[{d}] != {own}.strides[{d}]:\n"
                f"        return {BAD_ARGUMENTS}"
            )
            # Elements sharing memory (a broadcast view): their adjoints would add
            # into one place (_arguments.overlaps_itself; here its stride-0 case).
            checks.append(
                f"    if {own}.strides[{d}] == 0 and {own}.shape[{d}] > 1:\n"
                f"        return {BAD_ARGUMENTS}"
            )
    spans = arrays  # their byte spans, as _convention.byte_span measures them
    overlap: list[str] = []
    if spans:
        overlap.append(f"    cdef Py_ssize_t low[{len(spans)}]")
        overlap.append(f"    cdef Py_ssize_t high[{len(spans)}]")
        for j, (arg, rank, element) in enumerate(spans):
            lo = " + ".join(
                f"min(0, ({arg}.shape[{d}] - 1) * {arg}.strides[{d}])" for d in range(rank)
            )
            hi = " + ".join(
                f"max(0, ({arg}.shape[{d}] - 1) * {arg}.strides[{d}])" for d in range(rank)
            )
            start = f"<Py_ssize_t><uintptr_t>{data(arg, rank)}"
            overlap.append(f"    low[{j}] = {start} + {lo}")
            overlap.append(f"    high[{j}] = {start} + {hi} + <Py_ssize_t>sizeof({element})")
            empty = " or ".join(f"{arg}.shape[{d}] == 0" for d in range(rank))
            overlap.append(f"    if {empty}:\n        high[{j}] = low[{j}]")

        def meet(a: int, b: int) -> str:  # spans a and b share a byte
            return f"low[{a}] < high[{b}] and low[{b}] < high[{a}]"

        shadow_names = {s for s, _, _ in shadows}
        for a in range(len(spans)):
            for b in range(a):
                pair = {spans[a][0], spans[b][0]}
                if len(pair & shadow_names) == 1:  # a shadow and an array
                    overlap.append(f"    if {meet(a, b)}:\n        return {BAD_ARGUMENTS}")
                else:
                    overlap.append(f"    if {meet(a, b)}:\n        entry = {tag}_safe")
        if derivative.alias_safe_entry() == 0:  # refused: so are overlapping arrays
            overlap.append(f"    if entry == 0:\n        return {BAD_ARGUMENTS}")
        # A Const array the function writes, sharing memory with an array that has a
        # shadow: refused (Derivative.written_consts_beside_shadows).
        span_of = {arg: j for j, (arg, _, _) in enumerate(spans)}
        for const, shadowed, _ in derivative.written_consts_beside_shadows():
            c, w = span_of.get(names[const]), span_of.get(names[shadowed])
            if c is not None and w is not None:
                overlap.append(f"    if {meet(c, w)}:\n        return {BAD_ARGUMENTS}")
    reads = [
        f"    if {out} != NULL:\n        memcpy({out}, &slots[{n_in + j}], sizeof({out}[0]))"
        for j, (out, _) in enumerate(outputs)
    ]
    release: list[str] = []
    if fn.origin is not None and fn.origin[0] == "cython":
        # A Cython function's exception: errors[1] holds the reference (see
        # frontends/_cython_c.py), dropped here as only the status is returned.
        release = [
            "        if errors[0] == 1 and errors[1] != 0:",
            "            with gil:",
            "                Py_XDECREF(<PyObject *><uintptr_t>errors[1])",
        ]
    safe = derivative.alias_safe_entry()
    safe = derivative.entry if safe is None else safe
    header = [
        f"# {label}: the {derivative.mode.name.lower()} derivative of "
        f"'{fn.display_name}' ({derivative._given()})",
        "# made by enzyme_py's Derivative.cython_declaration(): valid in the process that",
        "# made it, while the derivative is alive. Returns 0, 1 (a shadow unlike its array",
        "# or overlapping an array, or a Const array the function writes overlapping an",
        "# array with a shadow), 2 (out of memory) or 3 (the function failed inside).",
        "cimport cython",
        "from libc.string cimport memcpy",
        "from cpython.ref cimport PyObject, Py_XDECREF",
        "from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint64_t, uintptr_t",
        "",
        "cdef extern from *:",
        '    """',
        "    #include <stdint.h>",
        f"    static const uint64_t {tag}_entry = {derivative.entry}ULL;",
        f"    static const uint64_t {tag}_safe = {safe}ULL;",
        f"    static inline uint64_t {tag}_invoke(uint64_t entry, uint64_t *slots) {{",
        "        return ((uint64_t (*)(uint64_t, uint64_t))(uintptr_t)"
        f"{_state.native.call_address()}ULL)(entry, (uint64_t)(uintptr_t)slots);",
        "    }",
        '    """',
        f"    const uint64_t {tag}_entry",
        f"    const uint64_t {tag}_safe",
        f"    uint64_t {tag}_invoke(uint64_t entry, uint64_t *slots) noexcept nogil",
        "",
    ]
    lines = [
        *header,
        "@cython.boundscheck(False)",
        "@cython.wraparound(False)",
        f"cdef inline int {label}({', '.join(params)}) noexcept nogil:",
        f"    cdef uint64_t slots[{max(total, 1)}]",
        "    cdef int64_t errors[2]",
        f"    cdef uint64_t entry = {tag}_entry",
        "    cdef uint64_t failed_bytes",
        "    errors[0] = 0",
        "    errors[1] = 0",
        *checks,
        *overlap,
        *body,
        f"    failed_bytes = {tag}_invoke(entry, &slots[0])",
        # All ones: a prange loop's chunk raised (src/arena.h, kLoopFailed).
        "    if failed_bytes == 0xFFFFFFFFFFFFFFFFULL:",
        f"        return {FAILED}",
        "    if failed_bytes != 0:",
        f"        return {OUT_OF_MEMORY}",
        "    if errors[0] != 0:",
        *release,
        f"        return {FAILED}",
        *reads,
        "    return 0",
        "",
    ]
    return "\n".join(lines)
