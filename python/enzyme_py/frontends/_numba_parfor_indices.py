"""What a prange loop's body does at one index, for ``_numba_parfor_ir``: which
entries of each float array an index touches (how far apart two indices may be and
still touch the same entry: ``index_reach`` in src/kernel_ir.h), and whether the body
is light (straight-line code, no loop of its own).

The analysis runs on ``K.one.<m>(i, args...)``, the body over the one index ``i >= m``:
its loop of one trip unrolled, Numba's wraparound of negative indices folded where
``i >= m`` proves it never wraps (``a[i - 1]`` needs ``m >= 1``)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from enzyme_py.frontends._numba_parfor_launch import (
    ARRAY_DATA,
    SUPPORT,
    Launch,
    schedule_args,
)

__all__ = ["MINIMUMS", "Indices", "Reaches", "body_indices"]

# The least first index of a launch that each reach is worked out for: Numba's
# wraparound of ``a[i - 1]`` folds away only where ``i >= 1`` is known.
MINIMUMS = (0, 1, 2, 4)
Reaches = tuple[int | None, ...]  # per minimum: index_reach's answer


@dataclass(frozen=True)
class Indices:
    """What the body does at one index: per float array it reads (its data slot), the
    reach per least first index of ``MINIMUMS``; whether it is straight-line code."""

    reach: dict[int, Reaches]
    light: bool


def one_ir(launch: Launch, types: list[str], minimum: int) -> str:
    """``K.one.<minimum>(i, args...)``: the body over the one index ``i``, which is at
    least ``minimum`` (what ``index_reach`` analyses: which entries index ``i``
    touches)."""
    k = launch.name
    params = ", ".join(f"{t} %p{j}" for j, t in enumerate(types) if j >= 2)
    b = [f"define i32 @{k}.one.{minimum}(i64 %i, {params}) {{"]
    b.append(f"  %least = icmp sge i64 %i, {minimum}")
    b.append("  call void @llvm.assume(i1 %least)")
    args = schedule_args(b, "%i", "%i")
    args += [f"{t} %p{j}" for j, t in enumerate(types) if j >= 2]
    b.append(f"  %r = call i32 @{k}.body({', '.join(args)})")
    b += ["  ret i32 %r", "}"]
    return "\n".join(b) + "\n"


# What makes the body over one index (``K.one``) straight-line code: its loop of one
# trip unrolled, the index's bounds propagated into Numba's wraparound.
_ONE_INDEX = (
    "function(sroa,early-cse<memssa>,instcombine,simplifycfg,loop-simplify,lcssa,"
    "loop(loop-rotate,indvars),loop-unroll-full,instcombine,correlated-propagation,"
    "simplifycfg)"
)


def body_indices(
    text: str, bodies: list[str], launches: tuple[Launch, ...], declared: dict[str, list[str]]
) -> dict[str, Indices]:
    """Per launch, what its body does at one index: per float array it reads (its data
    slot), how far apart two indices may be and still touch the same entry
    (``index_reach`` in src/kernel_ir.h) for each least first index of ``MINIMUMS``;
    and whether it is light (straight-line code)."""
    ones = [one_ir(launch, declared[launch.name], m) for launch in launches for m in MINIMUMS]
    count = "define internal i64 @__enzyme_py_parfor_count() {\n  ret i64 1\n}\n"
    source = "\n".join([text, SUPPORT, count, *bodies, *ones])
    slots = {
        launch.name: [
            g.start + ARRAY_DATA
            for g in launch.groups
            if g.array in ("float64", "float32") and not g.reduction
        ]
        for launch in launches
    }
    least, most = MINIMUMS[0], MINIMUMS[-1]
    optimized = _optimized_ones(source, launches, (least, most))
    reaches = _reaches(optimized, launches, (least, most), slots)
    # The minimums between are asked only of launches with an array whose reach is
    # known from the largest: unknown there, it is taken as unknown from every
    # minimum above the least (the safe answer: shared), not worked out (GMM prange:
    # unknown everywhere, two copies of its body simplified instead of four, 12 ms).
    middle = MINIMUMS[1:-1]
    asked = tuple(
        launch for launch in launches if any(r is not None for r in reaches[launch.name, most])
    )
    if asked and middle:
        reaches.update(_reaches(_optimized_ones(source, asked, middle), asked, middle, slots))
    found: dict[str, Indices] = {}
    for launch in launches:
        unknown = [None] * len(slots[launch.name])
        per_minimum = [reaches.get((launch.name, m), unknown) for m in MINIMUMS]
        reach = {j: tuple(r[p] for r in per_minimum) for p, j in enumerate(slots[launch.name])}
        found[launch.name] = Indices(reach, _straight_line(optimized, f"{launch.name}.one.{least}"))
    return found


def _optimized_ones(source: str, launches: tuple[Launch, ...], minimums: tuple[int, ...]) -> str:
    """The IR of the launches' ``K.one.<m>`` in ``source`` for ``minimums``, made
    straight-line code (``_ONE_INDEX``); the rest of the module dropped (the Numba
    function and its wrapper not simplified: GMM prange 30 -> 5 ms)."""
    from enzyme_py.frontends.ir import parse_module

    module = parse_module(source)
    module.native.keep_reached([f"{launch.name}.one.{m}" for launch in launches for m in minimums])
    module.native.optimize("always-inline")
    module.native.optimize(_ONE_INDEX)
    return str(module.native.ir())


def _reaches(
    optimized: str,
    launches: tuple[Launch, ...],
    minimums: tuple[int, ...],
    slots: dict[str, list[int]],
) -> dict[tuple[str, int], list[int | None]]:
    """Per launch and least first index of ``minimums``: the reach of each of its
    ``slots`` (``index_reach``), every question in one parse of ``optimized``."""
    from enzyme_py import _state

    # K.one's parameters: the index, then the launch's after first and last.
    asked = [(launch.name, m) for launch in launches for m in minimums]
    queries = [(f"{k}.one.{m}", 0, [j - 1 for j in slots[k]]) for k, m in asked]
    answers = _state.native.index_reaches(optimized, queries)
    return {question: list(answer) for question, answer in zip(asked, answers, strict=True)}


_LABEL = re.compile(r"^([-\w.$]+):", re.M)
_TARGET = re.compile(r"label %([-\w.$]+)")


def _straight_line(ir: str, function: str) -> bool:
    """Whether ``function`` in ``ir`` has no loop (no branch back to a block at or
    before its own) and few instructions."""
    start = ir.find(f"@{function}(")
    text = ir[start : ir.find("\n}\n", start)]
    if text.count("\n") > 400:
        return False
    seen: set[str] = set()
    for line in text.splitlines():
        label = _LABEL.match(line)
        if label:
            seen.add(label.group(1))
        elif " br " in f" {line.strip()} " and any(t in seen for t in _TARGET.findall(line)):
            return False
    return True
