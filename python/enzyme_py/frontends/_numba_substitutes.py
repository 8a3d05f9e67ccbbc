"""NumPy functions whose Numba implementations Enzyme v0.0.289 cannot differentiate,
replaced in the compile enzyme_py differentiates by implementations it can.

enzyme_py differentiates a private compile of the user's function
(``_numba_compile.ad_compile``); that compile's Python function is the user's, with its
globals seen through ``with_substitutes``: the names bound to NumPy (``np``,
``numpy``, ``from numpy import sort``) see these instead of

- ``np.sort`` of a 1-d float array and ``np.median`` of a float array: Numba's
  quicksort moves values through untyped memory (Enzyme: "Cannot deduce type of
  phi"); here the values are gathered through ``np.argsort`` (an integer array: no
  derivative), so that the derivative follows the permutation; the values are the
  same (ties are equal values);
- ``np.outer`` of float arrays and ``np.diff`` of a 1-d float array: Numba's
  broadcasting machinery Enzyme cannot type ("Illegal updateAnalysis"); here loops;
- ``np.linalg.solve``, ``inv``, ``det``, ``slogdet``, ``cholesky`` and ``norm`` of
  float matrices: Numba's code calls LAPACK, which Enzyme cannot see into; here LU and
  Cholesky factorisations as loops (``_numba_linalg``). ``np.linalg`` is seen through
  a view too (``np.linalg.solve``, ``import numpy.linalg as la``, ``from numpy import
  linalg``, ``from numpy.linalg import solve``);
- ``print``: a function that does nothing. print only has side effects (it cannot
  change the derivative), and Numba's needs an environment object the compile
  differentiated lacks. The derivative's call therefore prints nothing; the
  function called by itself prints as before.

Other argument types go to NumPy's function as before.

The substitutes reach the @njit functions it calls too: a global or closure cell bound
to an @njit dispatcher whose code (or that of an @njit function it calls, transitively)
names a substitute sees, in the clone, a clone of that dispatcher with the substitutes
(the same options but ``cache`` and ``parallel``, made once per dispatcher in one
compile: calls that recurse or form a cycle reach the same clone). @njit functions that
use none keep their own compiles, as do those passed as arguments and those reached
through an attribute of a user's module (``mymodule.helper``).
"""

from __future__ import annotations

import contextlib
import types as pytypes
from collections.abc import Callable
from typing import Any

import numpy as np

_made: dict[str, Any] = {}


def _definitions() -> dict[str, Any]:
    """The substitutes, by NumPy name (made once, on first use: Numba is imported late)."""
    if _made:
        return _made
    import numba
    from numba.core import types
    from numba.extending import overload

    def _is_float_array(a: Any, ndim: int | None = None) -> bool:
        return (
            isinstance(a, types.Array)
            and isinstance(a.dtype, types.Float)
            and (ndim is None or a.ndim == ndim)
        )

    @numba.njit
    def _sorted_values(a):  # type: ignore[no-untyped-def]
        v = a.ravel()
        order = np.argsort(v)
        out = np.empty(v.shape[0], v.dtype)
        for i in range(v.shape[0]):
            out[i] = v[order[i]]
        return out

    def sort(a):  # type: ignore[no-untyped-def]
        return np.sort(a)

    @overload(sort)
    def _sort(a):  # type: ignore[no-untyped-def]
        if _is_float_array(a, 1):
            return lambda a: _sorted_values(a)
        return lambda a: np.sort(a)

    def median(a):  # type: ignore[no-untyped-def]
        return np.median(a)

    @overload(median)
    def _median(a):  # type: ignore[no-untyped-def]
        if _is_float_array(a):

            def impl(a):  # type: ignore[no-untyped-def]
                s = _sorted_values(a)
                n = s.shape[0]
                if n == 0 or np.isnan(s[n - 1]):
                    return np.nan  # NumPy: nan for an empty array or one with a nan
                half = n // 2
                if n % 2 == 1:
                    return s[half]
                return (s[half - 1] + s[half]) / 2.0

            return impl
        return lambda a: np.median(a)

    def outer(a, b, out=None):  # type: ignore[no-untyped-def]
        return np.outer(a, b, out)

    @overload(outer)
    def _outer(a, b, out=None):  # type: ignore[no-untyped-def]
        plain = out is None or isinstance(out, (types.NoneType, types.Omitted))
        if plain and _is_float_array(a) and _is_float_array(b):
            from numba.np.numpy_support import as_dtype

            kind = getattr(np, str(np.result_type(as_dtype(a.dtype), as_dtype(b.dtype))))

            def impl(a, b, out=None):  # type: ignore[no-untyped-def]
                u = a.ravel()
                v = b.ravel()
                r = np.empty((u.shape[0], v.shape[0]), kind)
                for i in range(u.shape[0]):
                    for j in range(v.shape[0]):
                        r[i, j] = u[i] * v[j]
                return r

            return impl
        if plain:
            return lambda a, b, out=None: np.outer(a, b)
        return lambda a, b, out=None: np.outer(a, b, out)

    def diff(a, n=1):  # type: ignore[no-untyped-def]
        return np.diff(a, n)

    @overload(diff)
    def _diff(a, n=1):  # type: ignore[no-untyped-def]
        if _is_float_array(a, 1):

            def impl(a, n=1):  # type: ignore[no-untyped-def]
                if n < 0:
                    raise ValueError("diff(): order must be non-negative")
                r = a.copy()
                m = r.shape[0]
                k = 0
                while k < n and m > 0:
                    for i in range(m - 1):
                        r[i] = r[i + 1] - r[i]
                    m -= 1
                    k += 1
                return r[:m].copy()

            return impl
        return lambda a, n=1: np.diff(a, n)

    @numba.njit
    def print_nothing(*args):  # type: ignore[no-untyped-def]
        return None

    from enzyme_py.frontends._numba_linalg import definitions as linalg_definitions

    _made.update(sort=sort, median=median, outer=outer, diff=diff, print=print_nothing)
    _made.update({f"linalg.{k}": v for k, v in linalg_definitions().items()})
    return _made


_NUMPY = ("sort", "median", "outer", "diff")
_LINALG = ("solve", "inv", "det", "slogdet", "cholesky", "norm")


def _views(made: dict[str, Any]) -> tuple[pytypes.ModuleType, pytypes.ModuleType]:
    """Modules with NumPy's and numpy.linalg's names, the substitutes in place of
    theirs (made once)."""
    if not _made_views:
        linalg = pytypes.ModuleType("numpy.linalg")
        linalg.__dict__.update(np.linalg.__dict__)
        for name in _LINALG:
            linalg.__dict__[name] = made[f"linalg.{name}"]
        view = pytypes.ModuleType("numpy")
        view.__dict__.update(np.__dict__)
        for name in _NUMPY:
            view.__dict__[name] = made[name]
        view.__dict__["linalg"] = linalg
        _made_views.extend((view, linalg))
    return _made_views[0], _made_views[1]


_made_views: list[pytypes.ModuleType] = []


def _originals(made: dict[str, Any]) -> dict[int, tuple[Any, Any]]:
    """NumPy's functions replaced, by id: (NumPy's, the substitute)."""
    originals = {id(getattr(np, n)): (getattr(np, n), made[n]) for n in _NUMPY}
    for n in _LINALG:
        originals[id(getattr(np.linalg, n))] = (getattr(np.linalg, n), made[f"linalg.{n}"])
    return originals


def _names(code: pytypes.CodeType) -> set[str]:
    """The global and attribute names ``code`` (and the code nested in it) reads."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, pytypes.CodeType):
            names |= _names(const)
    return names


def _is_dispatcher(value: Any) -> bool:
    """An @njit function's dispatcher (CPU target)."""
    from numba.core.registry import CPUDispatcher

    return isinstance(value, CPUDispatcher)


def _cells(func: Any) -> tuple[Any, ...]:
    """The contents of ``func``'s closure cells (empty cells left out)."""
    found = []
    for cell in func.__closure__ or ():
        with contextlib.suppress(ValueError):  # an empty cell
            found.append(cell.cell_contents)
    return tuple(found)


def njit_callees(func: Any) -> list[Any]:
    """The @njit dispatchers ``func`` reads from its globals or closure cells."""
    found = [func.__globals__.get(name) for name in sorted(_names(func.__code__))]
    found += _cells(func)
    return [value for value in found if _is_dispatcher(value)]


def _replacements(func: Any, made: dict[str, Any]) -> dict[str, Any]:
    """The globals of ``func`` the substitutes replace (its callees not included)."""
    numpy_view, linalg_view = _views(made)
    originals = _originals(made)
    replaced: dict[str, Any] = {}
    for name in _names(func.__code__):
        value = func.__globals__.get(name)
        known = originals.get(id(value))
        if value is np:
            replaced[name] = numpy_view
        elif value is np.linalg:
            replaced[name] = linalg_view
        elif known is not None and value is known[0]:
            replaced[name] = known[1]
        elif name == "print" and name not in func.__globals__:
            replaced[name] = made["print"]
    return replaced


def _uses_directly(func: Any) -> bool:
    """Whether ``func``'s own code names a substitute (by name, see ``uses_substitutes``)."""
    code = getattr(func, "__code__", None)
    return code is not None and not _SUBSTITUTED.isdisjoint(_names(code))


def _uses(func: Any, seen: set[int]) -> bool:
    """Whether ``func`` or an @njit function it calls (transitively) names a substitute;
    ``seen``: the functions visited (a cycle adds nothing to what its members use)."""
    if id(func) in seen or getattr(func, "__code__", None) is None:
        return False
    seen.add(id(func))
    if _uses_directly(func):
        return True
    return any(_uses(callee.py_func, seen) for callee in njit_callees(func))


def _substituted(
    func: Any,
    clones: dict[int, tuple[Any, Any]],
    register: Callable[[Any], None] | None = None,
) -> Any:
    """A copy of ``func`` whose globals see the substitutes, and whose globals and
    closure cells bound to @njit functions that use substitutes (transitively) see
    their clones (``_clone``), or ``func`` itself when nothing is replaced.
    ``register`` is called with the copy before the callees' clones are made."""
    made = _definitions()
    replaced = _replacements(func, made)
    using = {id(callee): callee for callee in njit_callees(func) if _uses(callee.py_func, set())}
    if not replaced and not using:
        if register is not None:
            register(func)
        return func
    new_globals = dict(func.__globals__)
    new_globals.update(replaced)
    closure = func.__closure__
    if closure is not None and any(id(v) in using for v in _cells(func)):
        closure = tuple(pytypes.CellType() for _ in closure)
    clone = pytypes.FunctionType(
        func.__code__, new_globals, func.__name__, func.__defaults__, closure
    )
    clone.__kwdefaults__ = func.__kwdefaults__
    clone.__qualname__ = func.__qualname__
    clone.__module__ = func.__module__
    if register is not None:
        register(clone)
    # The callees' clones after this copy is registered: a callee that calls back
    # (recursion, a cycle) finds it in ``clones``. Numba reads globals and cells when
    # it compiles, after this.
    for name in _names(func.__code__):
        value = func.__globals__.get(name)
        if id(value) in using:
            new_globals[name] = _clone(value, clones)
    if closure is not func.__closure__:
        for old, new in zip(func.__closure__ or (), closure or (), strict=True):
            try:
                value = old.cell_contents
            except ValueError:
                continue  # an empty cell stays empty
            new.cell_contents = _clone(value, clones) if id(value) in using else value
    return clone


def _clone(dispatcher: Any, clones: dict[int, tuple[Any, Any]]) -> Any:
    """A dispatcher of ``dispatcher``'s function with the substitutes (``_substituted``)
    and its options (fastmath, error_model, boundscheck, ...) but ``cache``,
    ``nopython`` and ``parallel`` (compiled serially, as the function differentiated
    is); one per dispatcher in ``clones``, which keeps the originals alive (their ids
    stay unique)."""
    import numba

    known = clones.get(id(dispatcher))
    if known is not None:
        return known[1]
    options = {
        k: v
        for k, v in dispatcher.targetoptions.items()
        if k not in ("cache", "nopython", "parallel")
    }

    def register(func: Any) -> None:
        clone = dispatcher if func is dispatcher.py_func else numba.njit(**options)(func)
        clones[id(dispatcher)] = (dispatcher, clone)

    _substituted(dispatcher.py_func, clones, register)
    return clones[id(dispatcher)][1]


def with_substitutes(func: Any) -> Any:
    """``func`` with its globals seeing the substitutes, and its @njit callees that use
    them (transitively) seeing clones that do (``func`` itself when nothing is
    replaced)."""
    return _substituted(func, {})


_SUBSTITUTED = frozenset((*_NUMPY, *_LINALG, "print"))


def uses_substitutes(func: Any) -> bool:
    """Whether ``func``'s code, or that of an @njit function it calls (transitively,
    through its globals and closure cells), names a function this module substitutes
    (by name: an over-approximation, which only costs the slower full compile)."""
    return _uses(func, set())
