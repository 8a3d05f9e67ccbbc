"""Const float arrays whose memory would carry a derivative that Enzyme drops.

Enzyme takes a Const pointer argument's memory for constant: a value computed from
a differentiated argument, stored in a Const array and read back later, loses its
derivative (a zero gradient or tangent, no error). Such a request is refused before
Enzyme builds it, naming the array; what is asked of the IR is said in
src/const_memory.h. The helpers (``ez.grad``, ``ez.jacobian``, ...) give every float
array a shadow and never meet this; ``ez.autodiff`` with a user's ``Const`` does.
"""

from __future__ import annotations

from enzyme_py._convention import describe_param
from enzyme_py._signature import DFT_CONSTANT, DT_DOUBLE, DT_FLOAT
from enzyme_py.core import ActivityError
from enzyme_py.frontends import IRFunction


def check_const_memory(fn: IRFunction, args: tuple[int, ...], forward: bool) -> None:
    """Raise ActivityError where a Const float array of ``fn`` (activities ``args``,
    Enzyme's CDIFFE_TYPE per parameter) would carry a derivative Enzyme drops."""
    float_pointee = [
        p.kind == "pointer" and p.enzyme_pointee in (DT_DOUBLE, DT_FLOAT) for p in fn.params
    ]
    if not any(f and a == DFT_CONSTANT for f, a in zip(float_pointee, args, strict=True)):
        return
    found = fn.module.native.const_params_carrying_derivatives(fn.name, list(args), float_pointee)
    if not found:
        return
    index = found[0]
    name = fn.params[index].name
    array, like = (f"'{name}'", f"np.zeros_like({name})") if name else ("it", "zeros")
    instead = (
        f"pass {array} as Dual with a zero tangent ({like})"
        if forward
        else f"pass {array} as Duplicated with a zero shadow ({like})"
    )
    raise ActivityError(
        f"{describe_param(fn, index)} is Const, but the function stores values computed "
        f"from its differentiated arguments in {array} and reads them back: Enzyme takes "
        "a Const array's memory for constant, so their derivative would be lost (a wrong "
        f"result, without an error). {instead[0].upper()}{instead[1:]}, or, where the "
        "caller does not need what the function writes there, make that array inside "
        "the function."
    )
