"""Numba's parallel launch of a ``prange`` loop as an OpenMP loop, for Enzyme.

With ``parallel=True`` Numba outlines each prange loop into a gufunc over chunks of
the index range and launches it through its own runtime (``numba_parallel_for``),
which Enzyme cannot see into. Enzyme v0.0.289 differentiates OpenMP's form of a
parallel loop (``__kmpc_fork_call`` of an outlined body that takes its share of the
iterations from ``__kmpc_for_static_init_8``), with the adjoints of shared memory
added atomically in the reverse pass. So each launch is rewritten here as a fork of
an outlined body over Numba's chunks: every OpenMP thread calls the gufunc on its
share of the chunks (its arguments offset to the first of them, the chunk count
set), on ``threads`` threads. A reduction (``s += ...``) is not rewritten: Numba adds
into per-thread partial results chosen by its own thread id, which OpenMP threads do
not have. The OpenMP runtime is LLVM's (``libomp.so.5``), loaded when first needed.

Enzyme v0.0.289 refuses the rewritten form of every launch tried (2026-12-03): it has
no rule for ``set_parallel_chunksize`` and cannot type the steps the gufunc reads; the
caller (``_numba_derivative``) then builds the serial derivative with a
PerformanceWarning.

Numba's scheduling functions (the chunks' bounds, its thread count, the GIL) are
marked ``enzyme_inactive``; the chunks' schedule is not freed, since the reverse
pass reads it again (a few bytes per chunk and call).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import re
import threading

__all__ = ["has_parallel_launch", "load_runtime", "openmp_ir"]

_LAUNCH = re.compile(
    r"call void @numba_parallel_for\(i8\* bitcast \(void \(i8\*\*, i64\*, i64\*, i8\*\)\* "
    r"@(\S+) to i8\*\), i8\* (?:nonnull )?(%[\w.]+), i8\* (?:nonnull )?(%[\w.]+), "
    r"i8\* (?:nonnull )?(%[\w.]+), i8\* (?:nonnull )?(\S+), i64 (\d+), i64 (\d+), i64 (\S+)\)"
)
_INACTIVE = (
    "get_num_threads",
    "get_sched_size",
    "set_parallel_chunksize",
    "get_parallel_chunksize",
    "allocate_sched",
    "do_scheduling_unsigned",
    "do_scheduling_signed",
    "numba_gil_ensure",
    "numba_gil_release",
    "PyEval_SaveThread",
    "PyEval_RestoreThread",
    "get_thread_id",
)
_DECLARATIONS = r"""
%__enzyme_py_ident = type { i32, i32, i32, i32, i8* }
@__enzyme_py_omp_where = private unnamed_addr constant [23 x i8] c";unknown;unknown;0;0;;\00"
@__enzyme_py_omp_ident = private unnamed_addr constant %__enzyme_py_ident { i32 0, i32 2, i32 0, i32 22, i8* getelementptr inbounds ([23 x i8], [23 x i8]* @__enzyme_py_omp_where, i32 0, i32 0) }
declare void @__kmpc_fork_call(%__enzyme_py_ident*, i32, void (i32*, i32*, ...)*, ...)
declare void @__kmpc_for_static_init_8(%__enzyme_py_ident*, i32, i32, i32*, i64*, i64*, i64*, i64, i64)
declare void @__kmpc_for_static_fini(%__enzyme_py_ident*, i32)
declare i32 @__kmpc_global_thread_num(%__enzyme_py_ident*)
declare void @__kmpc_push_num_threads(%__enzyme_py_ident*, i32, i32)
"""  # noqa: E501
_IDENT = "%__enzyme_py_ident* @__enzyme_py_omp_ident"


def has_parallel_launch(ir: str) -> bool:
    return "call void @numba_parallel_for(" in ir


def _launcher(k: int, gufunc: str, arrays: int, dims: int, threads: int) -> str:
    """``__enzyme_py_omp_k(args, dims, steps, data)``: the gufunc over its chunks on
    ``threads`` OpenMP threads, each calling it once on its share."""
    body = f"@__enzyme_py_omp_{k}.body"
    body_type = "void (i32*, i32*, i8*, i8*, i8*, i8*)*"
    lines = [
        f"define internal void @__enzyme_py_omp_{k}(i8* %args, i8* %dims, i8* %steps, "
        "i8* %data) {",
        f"  %gtid = call i32 @__kmpc_global_thread_num({_IDENT})",
        f"  call void @__kmpc_push_num_threads({_IDENT}, i32 %gtid, i32 {threads})",
        f"  call void (%__enzyme_py_ident*, i32, void (i32*, i32*, ...)*, ...) "
        f"@__kmpc_fork_call({_IDENT}, i32 4, void (i32*, i32*, ...)* bitcast ({body_type} "
        f"{body} to void (i32*, i32*, ...)*), i8* %args, i8* %dims, i8* %steps, i8* %data)",
        "  ret void",
        "}",
        f"define internal void {body}(i32* noalias %gtid, i32* noalias %btid, i8* %args, "
        "i8* %dims, i8* %steps, i8* %data) {",
        "entry:",
        "  %last = alloca i32",
        "  %lo = alloca i64",
        "  %hi = alloca i64",
        "  %stride = alloca i64",
        f"  %my_args = alloca [{arrays} x i8*]",
        f"  %my_dims = alloca [{dims} x i64]",
        "  %dims64 = bitcast i8* %dims to i64*",
        "  %chunks = load i64, i64* %dims64",
        "  %top = sub i64 %chunks, 1",
        "  store i32 0, i32* %last",
        "  store i64 0, i64* %lo",
        "  store i64 %top, i64* %hi",
        "  store i64 1, i64* %stride",
        "  %tid = load i32, i32* %gtid",
        f"  call void @__kmpc_for_static_init_8({_IDENT}, i32 %tid, i32 34, i32* %last, "
        "i64* %lo, i64* %hi, i64* %stride, i64 1, i64 1)",
        "  %first = load i64, i64* %lo",
        "  %hi0 = load i64, i64* %hi",
        "  %below = icmp slt i64 %hi0, %top",
        "  %end = select i1 %below, i64 %hi0, i64 %top",
        "  %none = icmp sgt i64 %first, %end",
        "  br i1 %none, label %done, label %run",
        "run:",
        "  %args8 = bitcast i8* %args to i8**",
        "  %steps64 = bitcast i8* %steps to i64*",
    ]
    for j in range(arrays):
        lines += [
            f"  %a{j} = getelementptr i8*, i8** %args8, i64 {j}",
            f"  %p{j} = load i8*, i8** %a{j}",
            f"  %s{j}.at = getelementptr i64, i64* %steps64, i64 {j}",
            f"  %s{j} = load i64, i64* %s{j}.at",
            f"  %o{j} = mul i64 %s{j}, %first",
            f"  %q{j} = getelementptr i8, i8* %p{j}, i64 %o{j}",
            f"  %m{j} = getelementptr [{arrays} x i8*], [{arrays} x i8*]* %my_args, i64 0, i64 {j}",
            f"  store i8* %q{j}, i8** %m{j}",
        ]
    lines += [
        "  %span = sub i64 %end, %first",
        "  %count = add i64 %span, 1",
        f"  %d0 = getelementptr [{dims} x i64], [{dims} x i64]* %my_dims, i64 0, i64 0",
        "  store i64 %count, i64* %d0",
    ]
    for j in range(1, dims):
        lines += [
            f"  %g{j} = getelementptr i64, i64* %dims64, i64 {j}",
            f"  %v{j} = load i64, i64* %g{j}",
            f"  %d{j} = getelementptr [{dims} x i64], [{dims} x i64]* %my_dims, i64 0, i64 {j}",
            f"  store i64 %v{j}, i64* %d{j}",
        ]
    lines += [
        f"  %my_args0 = getelementptr [{arrays} x i8*], [{arrays} x i8*]* %my_args, i64 0, i64 0",
        f"  %my_dims0 = getelementptr [{dims} x i64], [{dims} x i64]* %my_dims, i64 0, i64 0",
        f"  call void @{gufunc}(i8** %my_args0, i64* %my_dims0, i64* %steps64, i8* %data)",
        "  br label %done",
        "done:",
        f"  call void @__kmpc_for_static_fini({_IDENT}, i32 %tid)",
        "  ret void",
        "}",
    ]
    return "\n".join(lines)


def openmp_ir(ir: str, threads: int) -> str:
    """Numba's IR with every ``numba_parallel_for`` launch an OpenMP loop on
    ``threads`` threads (unchanged if it has none); ValueError if a launch is not in
    the form this rewrite knows."""
    launchers: list[str] = []

    def launch(match: re.Match[str]) -> str:
        gufunc, args, dims, steps, data, _inner, arrays, _threads = match.groups()
        shape = re.search(re.escape(dims) + r" = bitcast \[(\d+) x i64\]\*", ir)
        if shape is None:
            raise ValueError("a parallel launch whose dimensions are not a local array")
        k = len(launchers)
        launchers.append(_launcher(k, gufunc, int(arrays), int(shape.group(1)), threads))
        return f"call void @__enzyme_py_omp_{k}(i8* {args}, i8* {dims}, i8* {steps}, i8* {data})"

    if re.search(r"call i64 @get_thread_id\(", ir):
        # Numba's reductions add into a per-thread partial result chosen by Numba's
        # thread id and sized by Numba's thread count; an OpenMP thread has neither
        # (all would add into one entry at once), so such a launch is never rewritten.
        raise ValueError(
            "a prange reduction (Numba's per-thread partial results, indexed by its "
            "thread id) cannot run on OpenMP threads"
        )
    out = _LAUNCH.sub(launch, ir)
    if has_parallel_launch(out):
        raise ValueError("a parallel launch in a form enzyme_py does not know")
    if not launchers:
        return ir
    out = re.sub(r"  call void @deallocate_sched\([^\n]*\n", "", out)
    for name in _INACTIVE:
        out = re.sub(
            r"^(declare [^\n]*@" + name + r"\([^\n]*?\))( local_unnamed_addr)?( #\d+)?$",
            lambda m: m.group(1) + ' "enzyme_inactive"',
            out,
            flags=re.MULTILINE,
        )
    return out + "\n" + _DECLARATIONS + "\n".join(launchers) + "\n"


_runtime: ctypes.CDLL | None = None
_runtime_lock = threading.Lock()


def load_runtime() -> None:
    """Load LLVM's OpenMP runtime into the process, its symbols global (the JIT
    resolves the derivative's calls to it); RuntimeError if it is not installed."""
    global _runtime
    with _runtime_lock:
        if _runtime is not None:
            return
        names = ["libomp.so.5", "libomp.so"]
        found = ctypes.util.find_library("omp")
        if found:
            names.insert(0, found)
        for name in names:
            try:
                _runtime = ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
                return
            except OSError:
                continue
        raise RuntimeError(
            "threads= above 1 runs a derivative's prange loops on LLVM's OpenMP runtime "
            "(libomp.so.5), which is not installed: apt-get install libomp5 (or "
            "libomp-dev), or leave threads= out for the serial derivative"
        )
