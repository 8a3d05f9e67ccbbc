"""A Numba function's exception, raised again in Python from the status and exception
info its compiled code reported inside a derivative."""

from __future__ import annotations

import ctypes
import pickle

_RETCODE_USEREXC = 1


class _ExcInfo(ctypes.Structure):
    _fields_ = [
        ("pickled", ctypes.c_void_p),
        ("size", ctypes.c_int32),
        ("hash", ctypes.c_void_p),
        ("fn", ctypes.c_void_p),
        ("alloc", ctypes.c_int32),
    ]


def raise_numba_error(status: int, address: int, name: str) -> None:
    """Raise the Python exception a Numba function reported (its status and the
    address of its exception info)."""
    if status == _RETCODE_USEREXC and address:
        info = _ExcInfo.from_address(address)
        if info.pickled and info.size > 0:
            try:
                exc_class, exc_args, *_ = pickle.loads(ctypes.string_at(info.pickled, info.size))
            except Exception:  # not unpicklable here: the generic error below
                exc_class = None
            if isinstance(exc_class, type) and issubclass(exc_class, BaseException):
                args = exc_args if isinstance(exc_args, tuple) else (exc_args,)
                # Arguments known only at run time (raise E("at", i)) are placeholders
                # (llvmlite constants) in the pickled part; their values are not kept.
                args = tuple(
                    "<a value known only at run time>"
                    if type(a).__module__.startswith("llvmlite")
                    else a
                    for a in args
                )
                raise exc_class(*args)
    raise RuntimeError(
        f"the Numba function '{name}' failed with status {status} inside its derivative"
    )
