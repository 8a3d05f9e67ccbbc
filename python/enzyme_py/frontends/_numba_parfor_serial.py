"""A ``parallel=True`` function's prange loops as plain calls on the calling thread,
from the module of Numba's own parallel compile (``_numba_parfor_capture``): the
derivative on one thread without compiling the serial twin (docs/design.md §8).

Each typed launch ``__enzyme_py_parfor_K(first, last, args...)`` becomes a function
that calls the loop's outlined body (Numba's ``__numba_parfor_gufunc_*``) once over
``[first, last]``, as the serial twin's loop runs it. Numba's thread id is 0 and its
thread count 1, so a reduction has one partial sum, the twin's. Numba declares the
body's arrays ``noalias`` (its parallel code assumes them apart); the twin does not,
and neither does this: the promise is dropped, and enzyme_py's own (the arrays of a
call do not overlap, else the build without it) is what holds. A body that fails (an
exception raised in the loop) ends the derivative call with its status and exception
(``__enzyme_py_parfor_fail``, src/parfor_runner.h), as a chunk on a thread does.
"""

from __future__ import annotations

import re

from enzyme_py.frontends._numba_parfor_ir import (
    DECLARE,
    body_ir,
    first_never_negative,
    numba_threads_from,
)
from enzyme_py.frontends._numba_parfor_launch import (
    EXCINFO,
    Launch,
    ParforUnsupported,
    schedule_args,
    split_types,
)

__all__ = ["serial_ir"]

_FAIL = "__enzyme_py_parfor_fail"
_SUPPORT = f"""
declare void @{_FAIL}(i64, i64) inaccessiblememonly nofree nounwind "enzyme_inactive" "enzyme_no_escaping_allocation"
declare void @llvm.assume(i1)
define internal i64 @__enzyme_py_serial_thread() alwaysinline {{
  ret i64 0
}}
define internal i64 @__enzyme_py_serial_threads() alwaysinline {{
  ret i64 1
}}
"""  # noqa: E501

_NOALIAS = re.compile(r" noalias\b")


def serial_ir(ir_text: str, launches: tuple[Launch, ...]) -> str:
    """``ir_text`` (what ``parfor_compile`` makes) with each launch defined as a call of
    its body on the calling thread (module doc)."""
    declared = {m.group(1): split_types(m.group(2)) for m in DECLARE.finditer(ir_text)}
    text = ir_text
    for launch in launches:
        if launch.name not in declared:
            raise ParforUnsupported(f"the launch {launch.name} is missing from the IR")
        # The body's own definition, internal (no other may replace it) and without
        # Numba's noalias promise on its parameters.
        # Plain text, not a regular expression per body's (long, mangled) name: each
        # took about 0.3 ms to compile, per launch of every first derivative.
        opening = f"define linkonce_odr i32 @{launch.body}("
        start = 0 if text.startswith(opening) else text.find("\n" + opening) + 1
        if start == 0 and not text.startswith(opening):
            raise ParforUnsupported(f"the body of {launch.name} is missing from the IR")
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        rest = text[start + len("define linkonce_odr ") : end]
        header = "define internal " + _NOALIAS.sub("", rest)
        text = text[:start] + header + text[end:]
    text = numba_threads_from(text, "__enzyme_py_serial_thread", "__enzyme_py_serial_threads")
    text = re.sub(r"^declare void @llvm\.assume\(i1\)[^\n]*$", "", text, flags=re.M)
    parts = [DECLARE.sub("", text), _SUPPORT]
    for launch in launches:
        types = declared[launch.name]
        never_negative = first_never_negative(text, launch.name)
        if never_negative:
            parts.append(body_ir(launch, types, noalias=False))
        parts.append(_launch(launch, types, never_negative))
    return "\n".join(parts)


def _launch(launch: Launch, types: list[str], never_negative: bool) -> str:
    """Launch K: the body over ``[first, last]``; a failure ends the derivative call."""
    params = ", ".join(f"{t} %p{j}" for j, t in enumerate(types))
    b = [f"define internal void @{launch.name}({params}) alwaysinline {{"]
    args = schedule_args(b, "%p0", "%p1")
    args += [f"{t} %p{j}" for j, t in enumerate(types) if j >= 2]
    body = f"{launch.name}.body" if never_negative else launch.body
    b.append(f"  %status = call i32 @{body}({', '.join(args)})")
    b.append("  %failed = icmp ne i32 %status, 0")
    b.append("  br i1 %failed, label %fail, label %done")
    b.append("fail:")
    b.append(f"  %e = load {EXCINFO[:-1]}, {EXCINFO} %exc")
    b.append(f"  %e.i = ptrtoint {EXCINFO[:-1]} %e to i64")
    b.append("  %s = sext i32 %status to i64")
    b.append(f"  call void @{_FAIL}(i64 %s, i64 %e.i)")
    b.append("  br label %done")
    b.append("done:")
    b += ["  ret void", "}"]
    return "\n".join(b) + "\n"
