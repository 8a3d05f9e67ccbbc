"""The argument rules every caller of a derivative shares.

The checked path (``_convention.fill_slots``), the offload kernels (``offload/``), the
split calls (``_split``), the helpers and the Numba results all check and convert their
arguments here, so that each rule is stated once:

- scalars and lanes: ``real_number``, ``scalar``, ``lanes``;
- arrays and shadows: ``check_array``, ``check_shadow``, ``check_shadows_apart``,
  ``check_written_consts_apart``;
- memory: ``byte_span``, ``overlapping``, ``laid_out_like``.
"""

from __future__ import annotations

import numbers
import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from enzyme_py._signature import Param


def byte_span(a: np.ndarray) -> tuple[int, int]:
    """The bytes ``[low, high)`` an array's elements lie in: below its data pointer too
    along negative strides, and its gaps included (a view such as ``x[::2]``)."""
    start = a.ctypes.data
    low = sum(min(0, (n - 1) * s) for n, s in zip(a.shape, a.strides, strict=True))
    high = sum(max(0, (n - 1) * s) for n, s in zip(a.shape, a.strides, strict=True))
    return start + low, start + high + a.itemsize


def overlaps_itself(a: np.ndarray) -> bool:
    """Whether two elements of ``a`` may share memory: a stride of 0 along an axis of
    more than one element (``np.broadcast_to``), or strides too small for the axes
    inside them (``as_strided`` views). Conservative: with the axes taken from the
    smallest stride up, each stride must step over everything the smaller ones span."""
    if a.flags.c_contiguous or a.flags.f_contiguous:
        return False
    span = a.itemsize
    for stride, n in sorted((abs(s), n) for n, s in zip(a.shape, a.strides, strict=True)):
        if n <= 1:
            continue
        if stride < span:
            return True
        span += stride * (n - 1)
    return False


def overlapping(arrays: Sequence[np.ndarray]) -> bool:
    """Whether the byte spans of any two of the arrays passed meet (the same array twice
    does; views interleaved in one buffer do too, conservatively)."""
    spans = sorted(byte_span(a) for a in arrays if a.size)
    return any(spans[i][1] > spans[i + 1][0] for i in range(len(spans) - 1))


def _share_memory(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(a.nbytes and b.nbytes and np.shares_memory(a, b))


def check_shadows_apart(
    shadows: Sequence[tuple[str, np.ndarray, np.ndarray | None]],
    arrays: Sequence[tuple[str, np.ndarray]],
    width: int,
) -> None:
    """No shadow (given as ``(where, shadow, its array)``) may share memory with an array
    argument: the derivative writes into its shadows, which would change that array as
    the function reads it (its own array is checked with the shadow). Two shadows may
    share memory only as their arrays do (one array passed twice, its shadow twice):
    Enzyme reads back the shadow of an array the function writes, so shadows shared
    otherwise would mix the adjoints of different arrays. (A shadow's array given as
    None, one that is not a host array, shares memory with nothing.)"""
    for n, (shadow_where, shadow, primal) in enumerate(shadows):
        for where, array in arrays:
            if _share_memory(shadow, array):
                raise ValueError(
                    f"{shadow_where} overlaps {where}: the derivative writes into the "
                    "shadow, which would change that array; give the shadow memory of its own"
                )
        for other_where, other, other_primal in shadows[:n]:
            if not _share_memory(shadow, other):
                continue
            alike = (
                primal is not None
                and other_primal is not None
                and shadow.ctypes.data - primal.ctypes.data
                == other.ctypes.data - other_primal.ctypes.data
                and (width == 1 or primal.nbytes == other_primal.nbytes)
            )
            if not alike:
                raise ValueError(
                    f"{shadow_where} overlaps {other_where}, and their arrays do not overlap "
                    "alike: the adjoints of the two would mix; give each shadow memory of its "
                    "own (an array passed twice may take the same shadow twice)"
                )


def check_written_consts_apart(
    consts: Sequence[tuple[str, str, np.ndarray, int]],
    shadowed: Sequence[tuple[str, np.ndarray]],
    written: Callable[[int], bool],
    function: str,
) -> None:
    """No Const array (``(where, name, array, parameter index)``) that the function
    writes may share memory with an array that has a shadow (``(name, array)``): the
    derivative takes a Const argument's memory for constant, so what flows through the
    memory they share would be lost, a zero gradient and no error. ``written(index)`` is
    asked only where memory is shared: one array passed twice, one of them Const, that
    the function only reads is a partial derivative, and stays allowed."""
    for where, name, array, index in consts:
        for other, other_array in shadowed:
            if _share_memory(array, other_array) and written(index):
                raise ValueError(written_const_message(where, name, other, function))


def written_const_message(where: str, name: str, other: str, function: str) -> str:
    """The refusal of ``check_written_consts_apart`` (also raised by ``njit()`` callers)."""
    return (
        f"{where} is Const and shares memory with '{other}', which has a "
        f"shadow, and '{function}' writes '{name}': the derivative takes a Const "
        "argument's memory for constant, so what flows through the memory they "
        f"share would be lost; pass '{name}' as Duplicated (with a shadow of its "
        "own), or give it memory of its own (a copy)"
    )


def real_number(value: Any, where: str, what: str) -> float:
    """``value`` as a float, if it is one real number: a Python or NumPy int, float or
    bool, or a 0-d array of one. Strings, None and complex numbers are refused rather
    than converted (``float("1")`` works, and NumPy drops an imaginary part)."""
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "biuf":
        value = value[()]
    if not isinstance(value, (numbers.Real, np.bool_)):
        raise TypeError(
            f"{where} is {what}: pass a real number (an int, a float or a NumPy real "
            f"scalar); got {type(value).__name__}"
        )
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"{where} is {what}; {value} does not fit in a float64") from None


def scalar(value: Any, param: Param, where: str) -> Any:
    """``value`` checked and converted for scalar parameter ``param``."""
    assert param.dtype is not None
    if param.kind == "float":
        return param.dtype.type(real_number(value, where, f"a {param.dtype} scalar"))
    try:
        integer = operator.index(value)
    except TypeError:
        raise TypeError(
            f"{where} is an integer ({param.dtype}); got {type(value).__name__}"
        ) from None
    if param.dtype == np.bool_:
        return np.uint8(bool(integer))
    info = np.iinfo(param.dtype)
    if not info.min <= integer <= info.max:
        raise ValueError(f"{where} is {param.dtype}; {integer} does not fit")
    return integer


def lanes(value: Any, k: int, param: Param, where: str) -> list[Any]:
    """k scalar values for a tangent or seed: a scalar when k == 1, else length-k."""
    assert param.dtype is not None
    if k == 1:
        return [scalar(value, param, where)]
    if isinstance(value, np.ndarray):
        shape = value.shape
    elif isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray)):
        shape = (len(value),)
    elif isinstance(value, (numbers.Real, np.bool_)):
        shape = ()
    else:
        raise TypeError(
            f"{where} needs {k} real numbers (width={k}), a sequence or an array; "
            f"got {type(value).__name__}"
        )
    if shape != (k,):
        raise ValueError(f"{where} needs {k} values (width={k}); got shape {shape}")
    what = f"a {param.dtype} scalar"
    return [
        param.dtype.type(real_number(v, f"{where} (value {lane})", what))
        for lane, v in enumerate(value)
    ]


def check_array(value: Any, param: Param, where: str) -> np.ndarray:
    """``value`` if it can be passed as array parameter ``param``."""
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{where} is an array; got {type(value).__name__} (pass a NumPy array)")
    if param.dtype is not None and value.dtype != param.dtype:
        raise ValueError(f"{where} needs dtype {param.dtype}; got {value.dtype}")
    if not param.strided and not value.flags.c_contiguous:
        raise ValueError(f"{where} must be C-contiguous; pass np.ascontiguousarray(...) of it")
    if not param.readonly and not value.flags.writeable:
        raise ValueError(f"{where} is read-only; the function may write it: pass a copy")
    return value


def check_shadow(value: Any, primal: np.ndarray, k: int, where: str) -> np.ndarray:
    """``value`` if it can be the shadow (k lanes) of array ``primal``: of any layout
    (the call gives the derivative a stand-in laid out like ``primal`` where it is not)."""
    shape = primal.shape if k == 1 else (k, *primal.shape)
    if not isinstance(value, np.ndarray):
        raise TypeError(
            f"{where} must be a NumPy array of shape {shape}; got {type(value).__name__}"
        )
    if value.dtype != primal.dtype:
        raise ValueError(f"{where} needs dtype {primal.dtype} (as its array); got {value.dtype}")
    if value.shape != shape:
        lane = f" (width={k})" if k > 1 else ""
        raise ValueError(f"{where} needs shape {shape}{lane}; got {value.shape}")
    if not value.flags.writeable:
        raise ValueError(f"{where} must be writable: derivatives are accumulated into it")
    if np.shares_memory(value, primal):
        raise ValueError(f"{where} overlaps its array; give it memory of its own")
    if overlaps_itself(value):
        raise ValueError(
            f"{where} has elements that share memory (a stride of 0, as np.broadcast_to "
            "makes, or strides that overlap): each element's derivative needs memory of "
            "its own; pass np.zeros(...) of its shape"
        )
    return value


def apart(array: np.ndarray, param: Param, where: str) -> np.ndarray:
    """An array with a shadow whose elements share memory (``overlaps_itself``): the
    derivative would add the adjoints of all the elements sharing a place into one
    place of the shadow laid out like it, so it gets a C-contiguous copy of the
    values, with a shadow of its own, where the function cannot write it (a read-only
    parameter); otherwise a ValueError, as the function's writes through shared
    memory could not be kept."""
    if param.readonly or not array.flags.writeable:
        return np.ascontiguousarray(array)
    raise ValueError(
        f"{where} has elements that share memory (a stride of 0, as np.broadcast_to makes, "
        "or strides that overlap): their derivatives cannot be told apart, and the "
        "function may write it; pass np.ascontiguousarray(...) of it"
    )


def laid_out_like(array: np.ndarray) -> np.ndarray:
    """Zeros with ``array``'s shape, dtype and strides: each element at the same byte
    offset from the data pointer (a view's gaps and negative strides included)."""
    if array.size == 0:
        return np.zeros(array.shape, array.dtype)
    low, high = byte_span(array)
    buffer = np.zeros(high - low, dtype=np.uint8)
    offset = array.ctypes.data - low
    return np.ndarray(array.shape, array.dtype, buffer, offset=offset, strides=array.strides)
