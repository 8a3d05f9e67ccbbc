"""Where a function's prange loops are, from its bytecode (no compile): what the
choice of a derivative's threads and of its serial form rests on."""

from __future__ import annotations

import dis
import functools
from typing import Any

__all__ = ["has_prange_with_inner_loop", "prange_loops_once_per_call"]


def _prange_loops(py_func: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The ``FOR_ITER`` instructions of ``py_func``'s prange loops (``for i in
    prange(...)`` / ``numba.prange(...)``: the name is loaded on the line of the loop's
    ``FOR_ITER``, whose argument is where the loop ends), and all of its instructions."""
    return _prange_loops_of(py_func.__code__)


@functools.lru_cache(maxsize=256)
def _prange_loops_of(code: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """``_prange_loops`` of a code object, once: each derivative asks twice or more
    (its threads, its serial form), about a millisecond each on a GMM-sized function,
    which counted against a derivative loaded from the disk cache."""
    instructions = list(dis.get_instructions(code))
    line_start, starts = 0, []
    for k, ins in enumerate(instructions):
        if ins.starts_line is not None:
            line_start = k
        starts.append(line_start)
    loops = [
        ins
        for k, ins in enumerate(instructions)
        if ins.opname == "FOR_ITER"
        and any(before.argval == "prange" for before in instructions[starts[k] : k])
    ]
    return tuple(loops), tuple(instructions)


def has_prange_with_inner_loop(py_func: Any) -> bool:
    """Whether a ``prange`` loop of ``py_func`` has a loop of its own in its body (a
    ``for`` or ``while`` between its ``FOR_ITER`` and that loop's end, in the bytecode,
    which functions made by ``exec`` have too). Such loops pay for running on threads
    in a derivative: a body of a few operations per index (a map, a reduction, a
    stencil step) is a vectorised loop in the serial derivative, which the threaded one
    (a snapshot, two waves of reverse chunks, a launch per call, a primal launch where
    its work is read) did not beat in ``ez.grad`` on the benchmark kernels
    (docs/design.md §8)."""
    loops, instructions = _prange_loops(py_func)
    for loop in loops:
        for inner in instructions:
            if loop.offset < inner.offset < loop.argval and (
                inner.opname == "FOR_ITER"
                or ("BACKWARD" in inner.opname and inner.argval > loop.offset)
            ):
                return True
    return False


def prange_loops_once_per_call(py_func: Any) -> bool:
    """Whether ``py_func`` has prange loops and none is inside another loop (no jump
    back from after it to before it in the bytecode): each is launched once per call,
    not once per step of a time loop."""
    loops, instructions = _prange_loops(py_func)
    return bool(loops) and not any(
        "BACKWARD" in jump.opname and jump.argval < loop.offset and jump.offset >= loop.argval
        for loop in loops
        for jump in instructions
    )
