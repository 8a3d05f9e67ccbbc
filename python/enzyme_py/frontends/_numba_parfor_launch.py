"""What a typed launch of ``_numba_parfor`` is, and the ABI its generated functions
share (``_numba_parfor_ir``, ``_numba_parfor_indices``): a prange loop lowered as
``__enzyme_py_parfor_K(first, last, args...)``, its arguments grouped by Numba
argument, and the outlined body's parameters (its return and exception slots, its
schedule, then the launch's arguments after first and last)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ARRAY_DATA",
    "EXCINFO",
    "LAUNCH_PREFIX",
    "PARFOR_OVERLAP",
    "RET",
    "SCHED_TYPES",
    "SCHED_VALUES",
    "SUPPORT",
    "THREAD_INDEX",
    "Group",
    "Launch",
    "ParforUnsupported",
    "schedule_args",
    "split_types",
]

LAUNCH_PREFIX = "__enzyme_py_parfor_"
THREAD_INDEX = "__enzyme_py_parfor_thread"


class ParforUnsupported(Exception):
    """A prange loop this module cannot run on several threads."""


@dataclass(frozen=True)
class Group:
    """One Numba argument of a launch: its LLVM parameters ``[start, start + count)``."""

    start: int
    count: int
    array: str | None  # "float64" / "float32" (differentiable), "const" (other arrays)
    reduction: bool


@dataclass(frozen=True)
class Launch:
    name: str  # __enzyme_py_parfor_K
    body: str  # the outlined body's LLVM name
    groups: tuple[Group, ...]  # the body's arguments after its schedule


# The status of a derivative call whose prange loop writes an array sharing memory
# with another of its arrays (src/parfor_runner.h: kParforOverlap).
PARFOR_OVERLAP = 8001

ARRAY_DATA = 4  # meminfo, parent, nitems, itemsize, data, shape..., strides...

# The body's schedule, a C array of two int64: meminfo, parent, nitems, itemsize, data,
# shape, stride.
SCHED_TYPES = ("i8*", "i8*", "i64", "i64", "i64*", "i64", "i64")
SCHED_VALUES = ("null", "null", "2", "8", "%s0", "2", "8")  # the schedule at %s0
# Numba's return and exception slots of the body (each chunk has its own).
RET = "i8**"
EXCINFO = "{ i8*, i32, i8*, i8*, i32 }**"

# What the generated functions call (src/parfor_runner.h) and the body's thread index.
SUPPORT = f"""
declare i64 @{THREAD_INDEX}() inaccessiblememonly nounwind willreturn "enzyme_inactive" "enzyme_no_escaping_allocation"
declare void @__enzyme_py_parfor_run(i32 (i64*, i64, i64, i8**)*, i64*, i64, i64, i64, i64, i64)
declare void @__enzyme_py_parfor_reverse(i32 (i64*, i64*, i64, i64, i8**)*, i64*, i64*, i64, i64*, i64, i64, i64, i64, i64, i64)
declare i64* @__enzyme_py_parfor_snapshot(i64*, i64, i64*, i64)
declare void @__enzyme_py_parfor_check(i64*, i64*, i64)
declare i32 @__enzyme_autodiff(i8*, ...)
declare void @llvm.assume(i1)
"""  # noqa: E501


def split_types(text: str) -> list[str]:
    """The parameter types of a declaration's list (commas inside braces kept)."""
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch in "{[(":
            depth += 1
        elif ch in "}])":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current.strip())
    return parts


def schedule_args(b: list[str], first: str, last: str) -> list[str]:
    """The body's own return and exception slots and its schedule ``[first, last]``,
    allocated in ``b``: the body's first arguments (typed, not marked for Enzyme)."""
    b.append("  %ret = alloca i8*")
    b.append(f"  %exc = alloca {EXCINFO[:-1]}")
    b.append("  %sched = alloca [2 x i64]")
    b.append("  %s0 = getelementptr [2 x i64], [2 x i64]* %sched, i64 0, i64 0")
    b.append(f"  store i64 {first}, i64* %s0")
    b.append("  %s1 = getelementptr [2 x i64], [2 x i64]* %sched, i64 0, i64 1")
    b.append(f"  store i64 {last}, i64* %s1")
    sched = [f"{t} {v}" for t, v in zip(SCHED_TYPES, SCHED_VALUES, strict=True)]
    return [f"{RET} %ret", f"{EXCINFO} %exc", *sched]
