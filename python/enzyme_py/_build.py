"""From a checked request to callable machine code: memory cache, disk cache, Enzyme.

Enzyme runs in a forked child by default (``ENZYME_PY_ISOLATE=0`` runs it in this
process): its assertions are enabled, and an abort there must not kill the caller.
"""

from __future__ import annotations

import gc
import hashlib
import os
import threading
import time
import weakref
from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from enzyme_py import _cache, _log, _state
from enzyme_py._build_errors import enzyme_error, missing_symbols_error
from enzyme_py._const_memory import check_const_memory
from enzyme_py._info import ENZYME_VERSION
from enzyme_py._pipeline import PASSES
from enzyme_py._signature import DFT_DUP_ARG, DFT_DUP_NONEED, DFT_OUT_DIFF, Param
from enzyme_py._version import __version__
from enzyme_py.frontends import IRFunction
from enzyme_py.frontends import _openmp as openmp

if TYPE_CHECKING:
    from enzyme_py._native import BuildArtifact

# PASSES (_pipeline.py): LLVM 15's default<O2>, its load PRE moved after the loop
# vectoriser. For a derivative that Enzyme differentiates again: O2's cleanup without its
# vectorizers, since Enzyme has no derivatives of libmvec's vector math calls
# (_ZGVdN4v_sin) or of masked gathers. (LLVM 15's C API runs the vectorizers in
# default<O2> even when its pass-builder options turn them off.) No load PRE, as in
# src/numba_rewrites.h's kSimplifyPasses.
PASSES_TO_DIFFERENTIATE_AGAIN = (
    "cgscc(inline),function(sroa,early-cse<memssa>,simplifycfg,instcombine,"
    "loop(loop-rotate),loop-mssa(licm),gvn<no-load-pre>,sccp,dse,adce,instcombine,simplifycfg),"
    "globaldce"
)


@dataclass(frozen=True)
class Request:
    """Everything Enzyme is asked, in the engine's terms (src/engine.h)."""

    forward: bool
    args: tuple[int, ...]  # CDIFFE_TYPE per parameter
    ret: int  # CDIFFE_TYPE of the return value
    return_primal: bool
    width: int
    runtime_activity: bool
    strong_zero: bool
    atomic_add: bool = False  # reverse mode: shadows updated atomically (kernels)
    primal_only: bool = False  # no differentiation: the function itself (launchers)
    # Split reverse mode: 1 the augmented forward pass (returns its tape, then the
    # primal), 2 its reverse pass (the combined one's inputs, then the tape).
    split: int = 0
    # Combined reverse mode, width 1: per shadow the derivative zeroes itself (the
    # caller passes it uninitialised), the parameter it shadows, the parameters whose
    # product is its element count, and its element size (src/shadow_zeroing.h).
    zeroed_shadows: tuple[tuple[int, tuple[int, ...], int], ...] = ()
    # The most threads a fused reverse stencil loop runs on (src/fused_threads.h); 0:
    # one per core.
    fused_workers: int = 0


@dataclass(frozen=True)
class Compiled:
    """A derivative loaded into the JIT: its entry point and slot layout."""

    key: str
    entry: int
    in_slots: str
    out_slots: str
    artifact: _cache.Artifact


# The memory cache: every derivative still in use (weakly), and the most recently
# asked for, whether in use or not (an LRU of strong references, so that a loop making
# the same derivative again finds it here). A derivative nobody uses beyond those is
# dropped with its artifact, and its code is removed from the JIT (at the next request,
# under the lock), unless its address went where no reference follows it (``pin``:
# ``df.njit()`` compiles it into Numba code); pinned code stays and serves again.
RECENT = 256
# On (a switch: off, dropped code stays loaded and serves again when asked, about 13 KB
# per distinct derivative). It was off for a while: the full test suite crashed calling
# a derivative after some 500 tests. The cause was the JIT's placement of code far from
# its constants (src/jit_memory.h), which the holes unloading leaves made likelier.
UNLOAD_CODE = True
_loaded: weakref.WeakValueDictionary[str, Compiled] = weakref.WeakValueDictionary()
_recent: OrderedDict[str, Compiled] = OrderedDict()
_entries: dict[str, int] = {}  # key -> entry point, for all code loaded in the JIT
_entry_names: dict[str, str] = {}  # key -> its entry symbol in the JIT
_pinned: set[str] = set()
_unused: list[str] = []  # keys whose last Compiled was collected (appended by GC)


def pin(compiled: Compiled) -> None:
    """Keep ``compiled``'s code in the JIT for the process: its address is used where
    no reference to it follows (Numba code calling it)."""
    _pinned.add(compiled.key)


def _release_unused() -> None:
    """Remove the code of collected derivatives from the JIT (under ``_lock``), if
    UNLOAD_CODE."""
    if not UNLOAD_CODE:
        _unused.clear()
        return
    while _unused:
        key = _unused.pop()
        if key in _pinned or key in _loaded or key not in _entries:
            continue
        del _entries[key]
        unload = getattr(_state.native, "unload_object", None)
        name = _entry_names.pop(key, None)
        if unload is not None and name is not None:
            unload(name)


_environment: list[str] = []


def isolated() -> bool:
    return os.environ.get("ENZYME_PY_ISOLATE", "1").strip() != "0"


def environment_parts() -> list[str]:
    """Versions of everything that shapes the object code."""
    if not _environment:
        native = _state.native
        plugin = native.plugin_path()
        stat = os.stat(plugin)
        _environment.extend(
            [
                __version__,
                ENZYME_VERSION,
                native.llvm_version,
                f"codegen {native.codegen_revision}",
                plugin,
                f"{stat.st_size}:{stat.st_mtime_ns}",
                *native.host(),
                PASSES,
                f"code {_code_digest()}",
            ]
        )
    return _environment


def _code_digest(package: str | None = None) -> str:
    """A digest of enzyme_py's own code (``package``: its folder): the native module
    and the Python sources, by path, size and modification time (nanoseconds). Any
    change to them may change what a derivative compiles to; with it in the keys, no
    cache entry made by other code is served (kCodegenRevision, bumped by hand, missed
    changes: a disk cache kept serving entries the current code no longer builds).
    Each file's metadata, not its bytes: hashing the bytes (the 1 MB native module
    among them) took 2-2.5 ms of every process's first derivative, a third of a
    derivative served from the disk cache; any install or copy writes new times."""
    package = package or os.path.dirname(os.path.abspath(__file__))
    digest = hashlib.sha256()
    for folder, dirs, files in os.walk(package):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and d != "_lib")
        for name in sorted(files):
            if name.endswith((".py", ".so")):
                path = os.path.join(folder, name)
                stat = os.stat(path)
                digest.update(path[len(package) + 1 :].encode())  # relative, cheaply
                digest.update(f"\0{stat.st_size}:{stat.st_mtime_ns}\0".encode())
    return digest.hexdigest()[:32]


# Frontends whose modules get the libm rules at build time (SourceModule.for_derivatives).
_LIBM_RULED = ("c", "cython", "llvm_ir")


def _native_build(fn: IRFunction, request: Request, key: str, mincut: bool) -> BuildArtifact:
    native = _state.native
    ruled = not request.primal_only and fn.origin is not None and fn.origin[0] in _LIBM_RULED
    return native.build(
        fn.module.for_derivatives() if ruled else fn.module.native,
        native.BuildRequest(
            function=fn.name,
            entry_name=f"__enzyme_py_entry_{key[:32]}",
            forward=request.forward,
            args=list(request.args),
            ret=request.ret,
            return_primal=request.return_primal,
            width=request.width,
            pointee=[p.enzyme_pointee for p in fn.params],
            runtime_activity=request.runtime_activity,
            strong_zero=request.strong_zero,
            passes=PASSES,
            mincut=mincut,
            atomic_add=request.atomic_add,
            primal_only=request.primal_only,
            split=request.split,
            zeroed_shadows=[(p, list(dims), size) for p, dims, size in request.zeroed_shadows],
            fused_workers=request.fused_workers,
        ),
        isolate=isolated(),
    )


_lock = threading.RLock()  # one build or load at a time (kernels launch from threads)


def derivative(fn: IRFunction, request: Request, description: str) -> Compiled:
    """The compiled derivative for request, from the cheapest place that has it."""
    with _lock:
        return _derivative(fn, request, description)


def _derivative(fn: IRFunction, request: Request, description: str) -> Compiled:
    _release_unused()
    fn, request = openmp.prepare(fn, request)
    key = _cache.request_key([*environment_parts(), fn.module.digest, fn.name, request])
    compiled = _loaded.get(key)
    if compiled is not None:
        _remember(compiled)
        return compiled
    native = _state.native
    start = time.perf_counter()
    source = "disk cache"
    artifact = _cache.load(key)
    implied = implied_slots(fn, request)
    entry = _entries.get(key)
    if entry is not None:
        # Its code is still loaded: the artifact only (never loaded twice).
        source = "the JIT, artifact from the disk cache"
        if artifact is None or (implied is not None and _slot_counts(artifact) != implied):
            source = "the JIT, artifact from Enzyme"
            artifact = _build_artifact(fn, request, key, description)
    elif artifact is not None:
        entry = _load_cached(key, artifact, implied)
    if entry is None:
        source = "Enzyme" + (" (isolated)" if isolated() else "")
        with _log.progress(f"the derivative of {description} (Enzyme)"):
            artifact = _build_artifact(fn, request, key, description)
        try:
            entry = _load_object(artifact)
        except native.MissingSymbols as exc:
            raise missing_symbols_error(str(exc), fn, description) from None
    assert artifact is not None
    compiled = Compiled(key, int(entry), artifact.in_slots, artifact.out_slots, artifact)
    _entries[key] = compiled.entry
    _entry_names[key] = artifact.entry_name
    weakref.finalize(compiled, _unused.append, key).atexit = False
    _loaded[key] = compiled
    _remember(compiled)
    _log.log(f"{description}: from {source} in {1e3 * (time.perf_counter() - start):.1f} ms")
    return compiled


def ir_texts(
    compiled: Compiled, fn: IRFunction, request: Request, description: str
) -> _cache.IRTexts:
    """The IR texts of ``compiled`` (built from ``fn`` for ``request``): those of its
    build, else the disk cache's (read once), else made again where that entry is
    missing or damaged (its code stays the one loaded)."""
    artifact = compiled.artifact
    if artifact.texts is None:
        artifact.texts = _cache.load_texts(compiled.key)
    if artifact.texts is None:
        with _lock, _log.progress(f"the IR of {description} (Enzyme)"):
            artifact.texts = _build_artifact(fn, request, compiled.key, description).texts
        _log.log(f"{description}: IR texts made again by Enzyme")
    assert artifact.texts is not None
    return artifact.texts


def _remember(compiled: Compiled) -> None:
    """Keep ``compiled`` among the most recent derivatives."""
    _recent[compiled.key] = compiled
    _recent.move_to_end(compiled.key)
    while len(_recent) > RECENT:
        _recent.popitem(last=False)


def _build_artifact(
    fn: IRFunction, request: Request, key: str, description: str
) -> _cache.Artifact:
    """Build with Enzyme; the artifact is written to the disk cache."""
    native = _state.native
    if not request.primal_only:
        check_const_memory(fn, request.args, request.forward)
    try:
        built = _native_build(fn, request, key, mincut=isolated())
    except native.BuildCrashed:
        # An assertion or crash in the child; min-cut caching (smaller tapes) is what
        # crashes most often: retry without. Deaths from memory are not retried.
        _log.log(f"{description}: retrying without min-cut caching")
        try:
            built = _native_build(fn, request, key, mincut=False)
        except native.EnzymeFailure as again:
            raise enzyme_error(str(again), fn, description) from None
    except native.EnzymeFailure as exc:
        raise enzyme_error(str(exc), fn, description) from None
    artifact = _cache.Artifact.from_native(built)
    implied = implied_slots(fn, request)
    if implied is not None and _slot_counts(artifact) != implied:
        # A layout this check does not foresee: served, but never from the disk
        # cache, where it could not be verified.
        _log.log(
            f"{description}: slots {artifact.in_slots} -> {artifact.out_slots} not as "
            "foreseen; not written to the disk cache"
        )
    else:
        _cache.store(key, artifact)
    interrupt = built.interrupt
    if interrupt is not None:
        # Ctrl-C came as the build finished: its result is kept (on disk), then the
        # interrupt goes on.
        raise interrupt
    return artifact


def _load_object(artifact: _cache.Artifact) -> int:
    """Load ``artifact``'s code into the JIT. Its reservation full (a MemoryError from
    src/jit_memory.cpp, before anything is loaded): the recent derivatives nobody else
    holds are let go and their code removed, then one more try; still full, the
    MemoryError (which says what to do) goes to the caller, and the process lives on."""
    native = _state.native
    try:
        return int(native.load_object(artifact.object, artifact.entry_name))
    except MemoryError:
        if not UNLOAD_CODE:
            raise
    _recent.clear()
    gc.collect()
    _release_unused()
    return int(native.load_object(artifact.object, artifact.entry_name))


def _load_cached(key: str, artifact: _cache.Artifact, implied: SlotCounts | None) -> int | None:
    """The entry point of a disk-cache artifact, or None (a miss: the entry is removed)."""
    if implied is not None and _slot_counts(artifact) != implied:
        _cache.discard(
            key, f"slot codes {artifact.in_slots} -> {artifact.out_slots} do not match the request"
        )
        return None
    try:
        return int(_load_object(artifact))
    except MemoryError:
        raise  # the JIT's reservation is full: the entry is fine
    except Exception as exc:  # the JIT's error, a missing symbol: rebuilt, then reported
        _cache.discard(key, f"the JIT could not load it ({exc})")
        return None


# Slot codes of scalars by dtype (src/engine.cpp, slot_code).
_CODES = {
    "float64": "d",
    "float32": "f",
    "int64": "q",
    "int32": "i",
    "int16": "h",
    "int8": "b",
    "bool": "?",
}
SlotCounts = tuple[tuple[tuple[str, int], ...], tuple[tuple[str, int], ...]]


def _counts(codes: str) -> tuple[tuple[str, int], ...]:
    # A bool travels as i1 or as i8 (Numba's booleans): one class.
    return tuple(sorted(Counter(codes.replace("?", "b")).items()))


def _slot_counts(artifact: _cache.Artifact) -> SlotCounts:
    return _counts(artifact.in_slots), _counts(artifact.out_slots)


def _param_code(p: Param) -> str | None:
    if p.kind == "pointer":
        return "p"
    code = _CODES.get(str(p.dtype)) if p.dtype is not None else None
    if code is None:
        return None
    return code * p.fields if p.kind == "struct" else code


def implied_slots(fn: IRFunction, request: Request) -> SlotCounts | None:
    """How many input and output slots of each code the request implies (order aside),
    or None where this cannot tell."""
    k = request.width
    ins: list[str] = []
    outs: list[str] = []
    codes = [_param_code(p) for p in fn.params]
    ret = _param_code(fn.ret) if fn.ret is not None else ""
    if ret is None or None in codes or len(codes) != len(request.args):
        return None
    for code, act in zip(codes, request.args, strict=True):
        assert code is not None
        ins.append(code)
        if request.primal_only:
            continue
        if act in (DFT_DUP_ARG, DFT_DUP_NONEED):
            ins.append(code * k)
        elif act == DFT_OUT_DIFF and not request.forward:
            outs.append(code * k)
    if request.split == 1:  # the tape, the primal; no adjoints, no seed
        return _counts("".join(ins)), _counts("p" + (ret if request.return_primal else ""))
    if request.split == 2:  # the seed, then the tape; the adjoints only
        if ret and request.ret == DFT_OUT_DIFF:
            ins.append(ret * k)
        return _counts("".join(ins) + "p"), _counts("".join(outs))
    # The byte sizes of shadows zeroed by the derivative that no shapes give, last.
    ins.append("q" * sum(1 for _, dims, _ in request.zeroed_shadows if not dims))
    if request.primal_only or request.return_primal:
        outs.append(ret)
    if not request.primal_only and ret:
        if request.forward and request.ret in (DFT_DUP_ARG, DFT_DUP_NONEED):
            outs.append(ret * k)
        elif not request.forward and request.ret == DFT_OUT_DIFF:
            ins.append(ret * k)
    return _counts("".join(ins)), _counts("".join(outs))
