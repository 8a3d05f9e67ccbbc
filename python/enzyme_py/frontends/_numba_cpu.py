"""The CPU Numba's optimisation passes plan for on hosts with AVX-512.

LLVM 15 (Numba 0.61's llvmlite) calls a CPU newer than it, such as AMD Zen 5,
"generic", and gives it all the host's features, AVX-512 included, without the
tuning of a named CPU. Numba's passes, planning for that pair, shape slice
assignments and ``np.dot`` into IR that Enzyme refuses ("mixed activity" on a phi of
an error message's bytes and array data), and the linear-algebra substitutes' loops
into IR whose type analysis Enzyme gives up on. A CPU LLVM names and that has AVX-512
(an Intel Rocket Lake, "rocketlake") does the same to the substitutes' loops and to
``np.outer`` ("Illegal updateAnalysis" on an array header's fields), although its
tuning prefers 256-bit vectors. Planned without AVX-512 (for "generic", the host's
x86-64 level; for a named CPU, its name), they differentiate.

``plan_for_named_cpu`` makes Numba's passes plan so: the target machine they consult
(the cost model) is replaced; the engine that makes Numba's machine code keeps the
host's CPU and features. It runs when enzyme_py is imported (and imports Numba then,
on such hosts only), so that it precedes the user's Numba compiles; code Numba
compiled before keeps its shape (and may still be refused). Where the user names
Numba's CPU (``NUMBA_CPU_NAME``), or the host has no AVX-512, nothing changes.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

__all__ = ["cpu_level", "plan_for_named_cpu", "planning_target", "without_avx512"]

#: x86-64 micro-architecture levels, highest first, with the features each needs.
_X86_LEVELS = (
    ("x86-64-v4", ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl")),
    ("x86-64-v3", ("avx2", "bmi2", "fma", "movbe")),
    ("x86-64-v2", ("sse4.2", "popcnt", "ssse3")),
)

_planned: list[tuple[str, str]] = []  # the (cpu, features) given, once given


def cpu_level(features: str) -> str | None:
    """The highest x86-64 level whose features ``features`` (LLVM's ``+a,-b,...``
    form) all has, or None."""
    on = {f[1:] for f in features.split(",") if f.startswith("+")}
    return next((name for name, needs in _X86_LEVELS if on.issuperset(needs)), None)


def without_avx512(features: str) -> str:
    """``features`` with every AVX-512 feature turned off."""
    return ",".join(
        "-" + f[1:] if f[1:].startswith("avx512") else f for f in features.split(",") if f
    )


def planning_target(triple: str, cpu: str, features: str) -> tuple[str, str] | None:
    """``(cpu, features)`` for Numba's passes on a host LLVM describes so, or None
    where they stay as Numba makes them: a named CPU with AVX-512 keeps its name
    (its tuning) without those features; "generic" becomes its x86-64 level."""
    if not triple.startswith("x86_64"):
        return None
    planned = without_avx512(features)
    if cpu != "generic":
        return (cpu, planned) if "+avx512f" in features.split(",") else None
    level = cpu_level(planned)
    return None if level is None else (level, planned)


def plan_for_named_cpu(triple: str, cpu: str, features: str) -> tuple[str, str] | None:
    """Make Numba's passes plan for ``planning_target``'s CPU (see the module
    docstring); what they plan for, or None where nothing changed. Idempotent."""
    if _planned:
        return _planned[0]
    wanted = planning_target(triple, cpu, features)
    if wanted is None or os.environ.get("NUMBA_CPU_NAME"):
        return None
    if importlib.util.find_spec("numba") is None:
        return None
    if _replace_planning_machine(*wanted):
        _planned.append(wanted)
        return wanted
    return None


def _replace_planning_machine(cpu: str, features: str) -> bool:
    """Numba's CPU codegen's target machine (the one its pass managers consult), made
    again for ``cpu`` and ``features``. False where the codegen has not the shape
    this expects (another Numba version) or its CPU is named by its config."""
    try:
        import llvmlite.binding as ll
        from numba.core import config
        from numba.core.compiler_lock import global_compiler_lock
        from numba.core.registry import cpu_target

        if config.CPU_NAME is not None:
            return False
        codegen: Any = cpu_target.target_context.codegen()
        if not hasattr(codegen, "_tm") or not hasattr(codegen, "_customize_tm_options"):
            return False
        with global_compiler_lock:
            options: dict[str, Any] = {"opt": config.OPT}
            codegen._customize_tm_options(options)
            options["cpu"], options["features"] = cpu, features
            target = ll.Target.from_triple(ll.get_process_triple())
            codegen._tm = target.create_target_machine(**options)
    except Exception:  # never fail the import over a tuning choice
        return False
    return True
