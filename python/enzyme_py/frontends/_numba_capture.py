"""The IR of Numba's own compiles, kept so that a first derivative need not compile
the function a second time.

enzyme_py differentiates a function's IR before Numba's module optimisation
(``_numba_compile.ad_compile``). Numba does not keep that IR: each module its lowering
makes goes through function-level passes (``CPUCodeLibrary._optimize_functions``) and is
then linked into the library's module, which ``finalize`` optimises in place. So the
first derivative compiled the function again, about half of its time (Rosenbrock on a
2-core Xeon: 30 of 70 ms, JAX's first ``jit(grad)`` taking 55).

Once ``install`` has run (when ``numba.core.codegen`` is imported, before or after
enzyme_py), each module Numba adds to a library is also kept, as text after those
function-level passes, compressed, until the library is collected: the very module the
second compile would have produced for a function compiled without ``parallel`` and
without the substitutes (same code, same flags: ``_numba_compile.serial_options``),
apart from Numba's wrappers for Python and C callers, which are kept out. Modules made
only of those wrappers are not kept. What is kept is bounded (``KEEP_BYTES``, oldest
dropped first); a function compiled before ``install``, loaded from Numba's own disk
cache, or whose module was dropped, is compiled again as before.
"""

from __future__ import annotations

import collections
import contextlib
import importlib.abc
import importlib.machinery
import sys
import threading
import weakref
import zlib
from collections.abc import Callable, Sequence
from typing import Any

__all__ = [
    "KEEP_BYTES",
    "after_import",
    "for_linking",
    "install",
    "install_when_imported",
    "kept_modules",
    "module_defining",
]

KEEP_BYTES = 64 << 20  # compressed IR text; a module is typically 2-20 KB compressed

_WRAPPERS = ("cpython.", "cfunc.")
_lock = threading.RLock()  # a weakref callback (_forget) may run inside _keep
# id(library) -> (weak reference to it, its modules' compressed texts, in order)
_kept: collections.OrderedDict[int, tuple[weakref.ref[Any], list[bytes]]] = (
    collections.OrderedDict()
)
_kept_bytes = 0
_installed = False


def _forget(key: int) -> None:
    global _kept_bytes
    with _lock:
        found = _kept.pop(key, None)
        if found is not None:
            _kept_bytes -= sum(len(t) for t in found[1])


def _keep(library: Any, ll_module: Any) -> None:
    global _kept_bytes
    defined = [f.name for f in ll_module.functions if not f.is_declaration]
    if not defined or all(name.startswith(_WRAPPERS) for name in defined):
        return
    text = zlib.compress(str(ll_module).encode(), 1)
    key = id(library)
    with _lock:
        entry = _kept.get(key)
        if entry is None or entry[0]() is not library:
            if entry is not None:  # an id reused by a new library
                _kept_bytes -= sum(len(t) for t in entry[1])
            entry = (weakref.ref(library, lambda _, key=key: _forget(key)), [])  # type: ignore[misc]
            _kept[key] = entry
        entry[1].append(text)
        _kept_bytes += len(text)
        while _kept_bytes > KEEP_BYTES and _kept:
            _, (_, texts) = _kept.popitem(last=False)
            _kept_bytes -= sum(len(t) for t in texts)


def install() -> bool:
    """Keep the modules of every Numba compile from now on; False where this Numba's
    code library has no ``_optimize_functions`` (nothing is kept then)."""
    global _installed
    from numba.core import codegen

    with _lock:
        if _installed:
            return True
        library_class = codegen.CPUCodeLibrary
        optimize = getattr(library_class, "_optimize_functions", None)
        if optimize is None:
            return False

        def optimize_and_keep(self: Any, ll_module: Any) -> None:
            optimize(self, ll_module)
            # Keeping is an optimisation: it never fails Numba's compile.
            with contextlib.suppress(Exception):
                _keep(self, ll_module)

        library_class._optimize_functions = optimize_and_keep
        _installed = True
    return True


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``then`` once module ``name`` has been imported."""

    def __init__(self, name: str, then: Callable[[], object]) -> None:
        self.name, self.then = name, then

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader
        run = loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            with contextlib.suppress(Exception):
                self.then()

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def after_import(name: str, then: Callable[[], object]) -> None:
    """``then()`` now if module ``name`` is imported, else once it is (failures of
    ``then`` are ignored there: keeping IR is an optimisation)."""
    if name in sys.modules:
        then()
    elif not any(isinstance(f, _AfterImport) and f.name == name for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(name, then))


def install_when_imported() -> None:
    """``install`` now if Numba's code generation is imported, else when it is."""
    after_import("numba.core.codegen", install)


def module_defining(library: Any, name: str) -> str | None:
    """The kept module of ``library`` that defines function ``name`` (its IR text after
    Numba's function-level passes), or None if none was kept."""
    with _lock:
        entry = _kept.get(id(library))
        texts = list(entry[1]) if entry is not None and entry[0]() is library else []
    found = [t for t in (zlib.decompress(b).decode() for b in texts) if _defines(t, name)]
    return found[0] if len(found) == 1 else None


def _defines(text: str, name: str) -> bool:
    """Whether the IR ``text`` defines function ``name``: a line starting ``define``
    holds ``@name(`` or ``@"name"(``. Searched as plain text: a regular expression
    made for each mangled name (about 300 characters) took 0.6 ms to compile, twice per
    first derivative of a prange function."""
    for needle in (f"@{name}(", f'@"{name}"('):
        at = text.find(needle)
        while at >= 0:
            if text.startswith("define ", text.rfind("\n", 0, at) + 1):
                return True
            at = text.find(needle, at + 1)
    return False


def for_linking(module: Any, keep: str | None = None) -> Any:
    """``module`` (an llvmlite module enzyme_py owns, never Numba's own) with its
    external definitions linkonce_odr, as Numba's ``_get_module_for_linking`` makes a
    library's: linked into several modules they merge, and the first module stage may
    inline and drop them. ``keep``: a definition made external instead (the linker
    drops a linkonce_odr definition nothing in the module it joins calls yet)."""
    from llvmlite import binding as ll

    for fn in module.functions:
        if fn.is_declaration:
            continue
        if fn.name == keep:
            fn.linkage = ll.Linkage.external
        elif fn.linkage == ll.Linkage.external:
            fn.linkage = ll.Linkage.linkonce_odr
    return module


def kept_modules(library: Any) -> list[str]:
    """Every kept module of ``library`` (IR texts after Numba's function-level passes,
    in the order Numba added them); empty if none was kept."""
    with _lock:
        entry = _kept.get(id(library))
        texts = list(entry[1]) if entry is not None and entry[0]() is library else []
    return [zlib.decompress(b).decode() for b in texts]
