"""What identifies the code Numba compiles for a dispatcher, without compiling it.

The derivative caches key a Numba function's derivative on this identity instead of on
its IR, so a derivative found in the disk cache needs no second Numba compile (the one
that makes the IR Enzyme differentiates). As Numba's own cache does (``_CacheImpl``,
``index_name``), the key holds the bytecode and the values of the closure cells; and
also, since Numba freezes them into the code as constants, the values of every global
the function (or a function nested in it) reads, and the identity of every ``@njit``
function it calls, recursively, with its compile options. Versions of Python, Numba,
llvmlite, NumPy, Numba's configuration and enzyme_py's own frontend code are part of it.

A wrong derivative is the worst outcome, so anything not understood makes the
identity ``None`` (``Unsure``): the caller then keys on the IR as before (one more
compile, always right). Not understood: plain Python functions that are not NumPy's
or the standard library's (a ``register_jitable`` or ``@overload`` target, whose
implementation is elsewhere), ``cfunc``/ctypes/cffi functions, jitclasses, objects of
user classes, and anything else that is not a number, string, array, tuple, module,
dtype, Numba type or ``@njit`` dispatcher.

What is not tracked, as in Numba's own cache: Numba extensions (``@overload``,
``@intrinsic``, ``@lower_builtin``) registered for functions of *stable* modules
(NumPy's, ``math``'s), whose code may change between processes while those modules
do not.

``code_key``: that identity with a specialisation's types and form, the key of its
derivatives in the caches.
"""

from __future__ import annotations

import hashlib
import sys
import types
from pathlib import Path
from typing import Any

from enzyme_py._log import log
from enzyme_py.frontends import _numba_runtime

__all__ = ["Unsure", "code_identity"]

# Modules whose functions and classes are identified by name and version: their
# code is the library's, and what Numba compiles for them is Numba's.
_STABLE_MODULES = frozenset(
    {
        "numpy",
        "math",
        "cmath",
        "numba",
        "operator",
        "builtins",
        "llvmlite",
        "functools",
        "itertools",
        "random",
    }
)
_SCALARS = (type(None), bool, int, float, complex, str, bytes)
# Arrays bigger than this are not hashed byte by byte (too slow for a key): unsure.
_MAX_ARRAY_BYTES = 64 << 20


class Unsure(Exception):
    """Something the function reads that this module cannot identify safely."""


def _environment() -> bytes:
    """Versions and settings that shape Numba's IR, and enzyme_py's frontend code."""
    global _environment_bytes
    if _environment_bytes is None:
        import llvmlite
        import numba
        import numpy as np
        from numba.core import config

        settings = sorted(
            (name, repr(value))
            for name, value in vars(config).items()
            if name.isupper() and isinstance(value, _SCALARS)
        )
        here = Path(__file__).resolve().parent
        sources = [
            (here / name).read_bytes()
            for name in (
                "numba.py",
                "_numba_compile.py",
                "_numba_results.py",
                "_numba_signatures.py",
                "_numba_runtime.py",
                "_numba_substitutes.py",
                "_numba_linalg.py",
                "_numba_parfor.py",
                "_numba_parfor_ir.py",
                "_numba_parfor_indices.py",
                "_numba_parfor_launch.py",
                "ir.py",
            )
        ]
        h = hashlib.sha256()
        for part in (
            sys.version,
            sys.implementation.cache_tag,
            numba.__version__,
            llvmlite.__version__,
            np.__version__,
            repr(settings),
            *sources,
            Path(__file__).read_bytes(),
        ):
            h.update(part if isinstance(part, bytes) else part.encode())
            h.update(b"\0")
        _environment_bytes = h.digest()
    return _environment_bytes


_environment_bytes: bytes | None = None


class _Hasher:
    def __init__(self) -> None:
        self.h = hashlib.sha256()
        self.seen: dict[int, int] = {}  # functions being hashed (recursion), by id

    def put(self, *parts: Any) -> None:
        for part in parts:
            data = part if isinstance(part, bytes) else str(part).encode()
            self.h.update(len(data).to_bytes(8, "little"))
            self.h.update(data)

    # --- code -------------------------------------------------------------
    def code(self, co: types.CodeType) -> set[str]:
        """Hash a code object (and the code nested in it); the names it reads."""
        self.put(
            "code",
            co.co_name,
            getattr(co, "co_qualname", co.co_name),
            co.co_filename,
            co.co_firstlineno,
            co.co_argcount,
            co.co_posonlyargcount,
            co.co_kwonlyargcount,
            co.co_flags,
            co.co_code,
            repr(co.co_names),
            repr(co.co_varnames),
            repr(co.co_freevars),
            repr(co.co_cellvars),
            getattr(co, "co_linetable", b""),
            getattr(co, "co_exceptiontable", b""),
        )
        names = set(co.co_names)
        self.put("consts", len(co.co_consts))
        for const in co.co_consts:
            if isinstance(const, types.CodeType):
                names |= self.code(const)
            else:
                self.constant(const)
        return names

    def constant(self, value: Any) -> None:
        if isinstance(value, (tuple, frozenset)):
            items = sorted(value, key=repr) if isinstance(value, frozenset) else value
            self.put(type(value).__name__, len(value))
            for item in items:
                self.constant(item)
        elif isinstance(value, _SCALARS) or value is Ellipsis:
            self.put(type(value).__name__, repr(value))
        else:
            raise Unsure(f"a constant of type {type(value).__name__}")

    def function(self, func: Any, options: Any = None) -> None:
        """Hash a Python function: code, closure cells, the globals it reads."""
        key = id(func)
        if key in self.seen:  # recursion: identified by where it is in the walk
            self.put("recursive", self.seen[key])
            return
        self.seen[key] = len(self.seen)
        self.put("function", func.__module__, func.__qualname__, repr(options))
        names = self.code(func.__code__)
        cells = func.__closure__ or ()
        self.put("cells", len(cells))
        for cell in cells:
            try:
                contents = cell.cell_contents
            except ValueError:
                self.put("empty cell")
                continue
            self.value(contents, names)
        module_globals = func.__globals__
        builtins = module_globals.get("__builtins__", {})
        if isinstance(builtins, types.ModuleType):
            builtins = vars(builtins)
        for name in sorted(names):
            if name in module_globals:
                self.put("global", name)
                self.value(module_globals[name], names)
            elif name in builtins:
                self.put("builtin", name)
                self.value(builtins[name], names)
            else:
                self.put("absent", name)  # an attribute name, or not defined (yet)

    # --- values -----------------------------------------------------------
    def value(self, v: Any, names: set[str]) -> None:
        """Hash a value the function reads (a global, a closure cell)."""
        import numpy as np
        from numba.core import types as nbtypes
        from numba.core.dispatcher import Dispatcher

        if isinstance(v, _SCALARS):
            self.put(type(v).__name__, repr(v))
        elif isinstance(v, (tuple, list)):
            self.put(type(v).__name__, len(v))
            for item in v:
                self.value(item, names)
        elif isinstance(v, np.ndarray):
            if v.dtype.hasobject or v.nbytes > _MAX_ARRAY_BYTES:
                raise Unsure("an object array or a very large array")
            self.put("ndarray", v.dtype.str, repr(v.shape), repr(v.strides), v.flags.writeable)
            self.put(np.ascontiguousarray(v).tobytes())
        elif isinstance(v, np.generic):
            self.put("numpy scalar", v.dtype.str, v.tobytes())
        elif isinstance(v, np.dtype):
            self.put("dtype", v.str, repr(v.descr))
        elif isinstance(v, Dispatcher):
            # A callee: its own code, compile options and what it reads.
            options = sorted((k, repr(o)) for k, o in v.targetoptions.items())
            self.put("dispatcher", type(v).__qualname__)
            self.function(v.py_func, options)
        elif isinstance(v, nbtypes.Type):
            self.put("numba type", type(v).__qualname__, repr(v))
        elif isinstance(v, types.ModuleType):
            self.module(v, names)
        else:
            self.named(v)

    def module(self, m: types.ModuleType, names: set[str]) -> None:
        name = m.__name__
        top = name.partition(".")[0]
        if top in _STABLE_MODULES:
            self.put("module", name, getattr(sys.modules.get(top), "__version__", ""))
            return
        # A user's module: what the function reads of it (m.helper, m.CONSTANT) is
        # among its names; each is hashed as a global would be.
        self.put("user module", name)
        if id(m) in self.seen:
            return  # modules that import each other
        self.seen[id(m)] = len(self.seen)
        for attr in sorted(names):
            if attr in vars(m):
                self.put("attribute", attr)
                self.value(vars(m)[attr], names)

    def named(self, v: Any) -> None:
        """A class or function of a stable module (np.float64, math.sin, np.sum), or
        an exception class: identified by its module and name."""
        import numpy as np

        if isinstance(v, np.ufunc):
            self.put("ufunc", v.__name__)
            return
        module = getattr(v, "__module__", None) or ""
        qualname = getattr(v, "__qualname__", None) or getattr(v, "__name__", "")
        # Functions and classes only: an object of some class (a cfunc, a jitclass
        # instance) carries code or state a name does not identify.
        plain = isinstance(v, (types.FunctionType, types.BuiltinFunctionType)) or (
            isinstance(v, type) and type(v) is type
        )
        if plain and module.partition(".")[0] in _STABLE_MODULES:
            self.put("named", module, qualname)
            return
        if isinstance(v, type) and type(v) is type and issubclass(v, BaseException):
            # A user's exception class: raised by reference (its name is pickled).
            self.put("exception class", module, qualname)
            return
        raise Unsure(f"'{qualname}' ({type(v).__qualname__} of module {module or '?'})")


def code_identity(dispatcher: Any) -> str:
    """A hex digest of what identifies the code of ``dispatcher``'s function (see the
    module's docstring); ``Unsure`` when something it reads cannot be identified."""
    hasher = _Hasher()
    hasher.put(_environment())
    options = sorted((k, repr(o)) for k, o in dispatcher.targetoptions.items())
    hasher.function(dispatcher.py_func, options)
    return hasher.h.hexdigest()


def code_key(
    dispatcher: Any,
    signature: tuple[Any, ...],
    restype: Any,
    numba_optimized: bool,
    strided: bool,
    threads: int = 1,
) -> str | None:
    """What identifies the module of this specialisation without compiling it: the
    code identity of the function (``code_identity``), its types and form; None when
    that identity is unsure (then the IR is made at once, and keys the caches)."""
    try:
        identity = code_identity(dispatcher)
        types = " ".join(type_identity(t) for t in (*signature, restype))
    except Unsure as exc:
        log(f"'{dispatcher.py_func.__name__}': derivatives keyed on its IR ({exc})")
        return None
    return (
        f"numba code {identity} ({types}) numba_optimized={numba_optimized} "
        f"strided={strided} threads={threads} prepared={_numba_runtime.REVISION}"
    )


def type_identity(numba_type: Any) -> str:
    """A Numba type as a cache key part. Numbers, arrays and tuples of them are what
    their text says; a function passed as an argument is its code (its type's text
    names only its address, which another process may give another function)."""
    from numba.core import types

    if isinstance(numba_type, types.Dispatcher):
        return f"function {code_identity(numba_type.dispatcher)}"
    if isinstance(numba_type, types.BaseTuple):
        return f"({' '.join(type_identity(t) for t in numba_type.types)})"
    if isinstance(numba_type, (types.Number, types.Boolean, types.Array, types.NoneType)):
        return f"{type(numba_type).__qualname__}:{numba_type!r}"
    raise Unsure(f"an argument or result of Numba type {numba_type}")
