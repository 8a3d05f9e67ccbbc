"""OpenMP in C and C++ (``ez.c``/``ez.cpp`` with ``flags=["-fopenmp"]``): the runtime
the compiled code calls, and which derivatives Enzyme makes of it.

clang 15 compiles ``#pragma omp parallel for`` into a call of ``__kmpc_fork_call`` with
the loop's body outlined; each thread's body takes its share of the iterations from
``__kmpc_for_static_init_*``. Enzyme v0.0.289 differentiates that in Reverse mode:
its reverse pass forks again and adds into shared shadows atomically (checked against
central differences with 2 threads: private temporaries, stencils and gathers whose
adjoints many threads add into one entry, nested loops, ``collapse``, ``lastprivate``,
``atomic`` updates, ``critical`` sections, two ``omp for`` loops in one region). Those
atomic adds make a reverse pass whose iterations all add into the same few entries (a
model's parameters) slower than a serial one; where each iteration's adjoints land in
entries of its own, it runs on every thread.

What Enzyme does not take is refused here, before it runs, naming what the user wrote:
Forward mode asserts on any fork (its ``visitOMPCall``): forward derivatives take the
function compiled without ``-fopenmp`` instead (the pragmas ignored: serial, the same
values), as a prange function's forward derivative takes its serial twin. Reductions
(``__kmpc_reduce*``), ``schedule(dynamic|guided|runtime)`` (``__kmpc_dispatch_*``),
``num_threads(...)`` and ``if(...)`` clauses and code that reads OpenMP's thread numbers
have no derivative there (Enzyme's "unhandled openmp function", or an assertion).

Captured variables reach the outlined body by reference (a stack slot holding the
pointer); where the pointer is a Const argument's, Enzyme cannot tell the slot's
activity ("mixed activity"): OpenMP reverse derivatives are built with runtime activity.

The runtime is LLVM's ``libomp.so.5``: Debian's ``libomp5-19``, which ``liboffload-22``
(in enzyme_py's toolchain) depends on; ``ENZYME_PY_LIBOMP`` names another. It is loaded
privately and its functions given to the JIT by address (``load_runtime``).
"""

from __future__ import annotations

import ctypes
import os
import re
import threading
import weakref
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from enzyme_py import _state
from enzyme_py.core import CompileError, EnzymeError

if TYPE_CHECKING:
    from enzyme_py.frontends.ir import IRFunction, SourceModule

# The runtime functions Enzyme differentiates correctly (the cases above).
_DIFFERENTIATED = frozenset(
    {
        "__kmpc_fork_call",
        "__kmpc_global_thread_num",
        "__kmpc_for_static_init_4",
        "__kmpc_for_static_init_4u",
        "__kmpc_for_static_init_8",
        "__kmpc_for_static_init_8u",
        "__kmpc_for_static_fini",
        "__kmpc_barrier",
        "__kmpc_critical",
        "__kmpc_end_critical",
    }
)

# What Enzyme's reverse of a parallel region calls besides (per-thread caches).
_ENZYME_ADDS = frozenset({"omp_get_thread_num", "omp_get_num_threads", "omp_get_max_threads"})

# Prefix of a runtime function -> (what the user wrote, what to write instead).
_CONSTRUCTS = (
    (
        ("__kmpc_reduce", "__kmpc_end_reduce"),
        "a reduction clause (reduction(+:s))",
        "write each iteration's value into an array inside the loop and sum the array after it",
    ),
    (
        ("__kmpc_dispatch_",),
        "a schedule(dynamic), schedule(guided) or schedule(runtime) clause",
        "leave the schedule out (the static schedule differentiates)",
    ),
    (
        ("__kmpc_push_num_threads",),
        "a num_threads(...) clause",
        "leave it out and set the thread count with the OMP_NUM_THREADS environment variable",
    ),
    (
        ("__kmpc_serialized_parallel", "__kmpc_end_serialized_parallel"),
        "an if(...) clause on a parallel region",
        "leave it out (or branch around two loops yourself)",
    ),
    (
        ("omp_",),
        "a call of OpenMP's API (omp_get_thread_num() and the like)",
        "write the parallel loop as '#pragma omp parallel for' over its iterations, "
        "without thread numbers",
    ),
)

_DECLARED = re.compile(r"^declare [^@\n]*@((?:__kmpc_|omp_)\w+)\(", re.MULTILINE)
_calls: weakref.WeakKeyDictionary[SourceModule, frozenset[str]] = weakref.WeakKeyDictionary()
_twins: weakref.WeakKeyDictionary[IRFunction, IRFunction] = weakref.WeakKeyDictionary()
_runtime_lock = threading.Lock()
_runtime: ctypes.CDLL | None = None
_given: set[str] = set()  # names the JIT resolves to the runtime already


def compiled_with_openmp(flags: Sequence[str] | None) -> bool:
    """Whether clang flags ask for OpenMP's runtime (``-fopenmp``, ``-fopenmp=libomp``;
    not ``-fopenmp-simd``, which calls nothing)."""
    return any(f == "-fopenmp" or f.startswith("-fopenmp=") for f in flags or ())


def _uses_openmp(fn: IRFunction) -> bool:
    origin = fn.origin
    return origin is not None and origin[0] == "c" and compiled_with_openmp(origin[2])


def openmp_calls(fn: IRFunction) -> frozenset[str]:
    """The OpenMP runtime functions ``fn``'s module declares (made once per module)."""
    found = _calls.get(fn.module)
    if found is None:
        found = _calls[fn.module] = frozenset(_DECLARED.findall(fn.module.ir()))
    return found


def load_runtime() -> ctypes.CDLL:
    """LLVM's OpenMP runtime, loaded once and privately (RTLD_LOCAL): the JIT is given
    its functions by address (``_give_to_jit``), not through the process's symbols,
    where another OpenMP runtime (GNU's libgomp, loaded by Numba's threading layer or
    PyTorch) may define omp_get_thread_num too: code forking with one runtime and
    numbering threads with the other would be wrong."""
    global _runtime
    with _runtime_lock:
        if _runtime is not None:
            return _runtime
        explicit = os.environ.get("ENZYME_PY_LIBOMP")
        candidates = [explicit] if explicit else ["libomp.so.5", "libomp.so"]
        for candidate in candidates:
            try:
                _runtime = ctypes.CDLL(candidate, mode=ctypes.RTLD_LOCAL)
                return _runtime
            except OSError:
                continue
        raise CompileError(
            "code compiled with -fopenmp calls LLVM's OpenMP runtime, which was not found "
            f"(tried {', '.join(candidates)}): install it (Debian: apt-get install "
            "libomp5-19) or set ENZYME_PY_LIBOMP to its path; or compile without -fopenmp"
        )


def _give_to_jit(names: frozenset[str]) -> None:
    """Resolve ``names`` (and what Enzyme's reverse passes add: the thread number and
    count) to OpenMP's runtime in code the JIT loads later (each name once)."""
    runtime = load_runtime()
    symbols = {}
    for name in sorted((names | _DIFFERENTIATED | _ENZYME_ADDS) - _given):
        function = getattr(runtime, name, None)
        address = ctypes.cast(function, ctypes.c_void_p).value if function else None
        if address:
            symbols[name] = address
    _state.native.define_symbols(symbols)
    _given.update(symbols)


def _refusal(fn: IRFunction, unsupported: list[str]) -> EnzymeError:
    constructs = []
    for prefixes, construct, instead in _CONSTRUCTS:
        names = [n for n in unsupported if n.startswith(prefixes)]
        if names:
            constructs.append(f"{construct} (it calls {', '.join(names)}): {instead}")
    rest = [n for n in unsupported if not any(n.startswith(p) for p, _, _ in _CONSTRUCTS)]
    if rest:
        constructs.append(
            f"an OpenMP construct calling {', '.join(rest)}: write the parallel part as "
            "'#pragma omp parallel for' loops"
        )
    return EnzymeError(
        f"'{fn.display_name}' uses OpenMP that Enzyme v0.0.289 does not differentiate: "
        + "; ".join(constructs)
        + ". Or compile it without -fopenmp for a serial derivative."
    )


def prepare(fn: IRFunction, request: Any) -> tuple[IRFunction, Any]:
    """``fn`` and ``request`` as Enzyme takes them where ``fn`` was compiled with
    ``-fopenmp``: the runtime loaded; a forward derivative from the function compiled
    without it; a reverse one with runtime activity; refused where it uses what Enzyme
    does not differentiate. Anything else is returned as it is."""
    if not _uses_openmp(fn):
        return fn, request
    calls = openmp_calls(fn)
    if not calls:
        return fn, request
    _give_to_jit(calls)
    if request.primal_only:
        return fn, request
    if request.forward:
        return serial_twin(fn), request
    unsupported = sorted(calls - _DIFFERENTIATED)
    if unsupported:
        raise _refusal(fn, unsupported)
    return fn, replace(request, runtime_activity=True)


def serial_twin(fn: IRFunction) -> IRFunction:
    """``fn`` compiled from the same source without OpenMP (its pragmas ignored), made
    once per function."""
    from enzyme_py.frontends.ir import rebuild_ir_function

    twin = _twins.get(fn)
    if twin is None:
        assert fn.origin is not None
        kind, source, flags, language, attribute = fn.origin
        kept = [f for f in flags if not compiled_with_openmp([f])]
        twin = _twins[fn] = rebuild_ir_function((kind, source, kept, language, attribute))
    return twin
