"""The CPU device's launcher: the range driver around a per-index body, the thread
pool, and how the threads of a reverse launch add into its shadows (per-thread copies,
plain adds where each index provably touches only entries near its own, atomic adds
otherwise)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import replace
from typing import Any

import numpy as np

from enzyme_py import _state
from enzyme_py._activities import check_activities
from enzyme_py._derivative import Derivative, Options
from enzyme_py._signature import Param
from enzyme_py.core import Const, Forward
from enzyme_py.frontends.ir import IRFunction, parse_module
from enzyme_py.offload._body import KernelBody, launch_key

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def thread_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(
                max_workers=os.cpu_count() or 1, thread_name_prefix="enzyme_py"
            )
        return _pool


_RANGE = "__enzyme_py_range"

#: Shadows up to this size (all threads' copies together) are copied per thread in
#: multi-threaded reverse launches rather than added into atomically.
PRIVATE_BYTES = 16 << 20


def range_driver(
    body: Any, alias_safe: Any = None, describe: Callable[[int, Param], str] | None = None
) -> Any:
    """An IRFunction ``range(start, end, *body's other parameters)`` that calls
    ``body(i, ...)`` for i in [start, end), stopping at the first error reported
    through a hidden errors parameter; ``describe`` names its parameters in errors."""
    info = next(i for i in body.module.functions() if i["name"] == body.name)
    types = info["params"]
    if not types or types[0] != "i64":
        raise TypeError(
            f"a kernel body takes the index first, as a 64-bit integer; "
            f"'{body.display_name}' takes {types[0] if types else 'nothing'}"
        )
    rest = [f"{t} %p{k}" for k, t in enumerate(types[1:], start=1)]
    call_args = ", ".join(["i64 %i", *(f"{t} %p{k}" for k, t in enumerate(types[1:], start=1))])
    errors = next(
        (k for k, p in enumerate(body.params) if p.hidden and p.hidden[0] == "errors"), None
    )
    ret = info["ret"]
    check = []
    if errors is not None:
        check = [
            f"  %status = load i64, i64* %p{errors}",
            "  %failed = icmp ne i64 %status, 0",
            "  br i1 %failed, label %done, label %next_index",
            "next_index:",
        ]
    lines = [
        f"define void @{_RANGE}(i64 %start, i64 %end{''.join(', ' + r for r in rest)}) {{",
        "entry:",
        "  %empty = icmp sge i64 %start, %end",
        "  br i1 %empty, label %done, label %loop",
        "loop:",
        "  %i = phi i64 [ %start, %entry ], [ %next, %next_index ]"
        if check
        else "  %i = phi i64 [ %start, %entry ], [ %next, %loop ]",
        f"  call {ret} @{body.name}({call_args})",
        *check,
        "  %next = add i64 %i, 1",
        "  %more = icmp slt i64 %next, %end",
        "  br i1 %more, label %loop, label %done",
        "done:",
        "  ret void",
        "}",
    ]
    if not check:
        lines = [line for line in lines if line != "next_index:"]
    module = parse_module(body.module.ir() + "\n" + "\n".join(lines) + "\n")
    index = Param("start", "int", np.dtype(np.int64))
    # Every parameter moves one place up (the index became start, end): so do the
    # positions that hidden shapes and shadows' layouts (Param.layout_of) refer to.
    shifted = tuple(
        replace(
            p,
            hidden=(p.hidden[0], p.hidden[1] + 1, p.hidden[2])
            if p.hidden is not None and p.hidden[0] == "shape"
            else p.hidden,
            layout_of=None if p.layout_of is None else p.layout_of + 1,
        )
        for p in body.params[1:]
    )
    params = (index, Param("end", "int", np.dtype(np.int64)), *shifted)
    return IRFunction(
        module,
        _RANGE,
        params,
        None,
        f"kernel {body.display_name}",
        body.on_error,
        alias_safe,
        describe_argument=describe,
    )


class CpuLauncher:
    """The CPU device's launches of one kernel, with their compiled range drivers (by
    argument types) and the reach of its shadows (by argument types and shapes)."""

    def __init__(self, body: KernelBody):
        self.body = body
        self.launchers: dict[Any, Any] = {}
        self.reach: dict[Any, dict[int, int | None]] = {}

    def launch(self, n: int, host_args: tuple[Any, ...], threads: int | None) -> None:
        """body(i, *host_args) for i in range(n), split across ``threads`` (see
        ``Kernel.launch``)."""
        parts = max(1, min(threads or os.cpu_count() or 1, n))
        bounds = [n * j // parts for j in range(parts + 1)]
        if parts == 1:
            self.launcher(host_args, one_thread=True)(0, n, *host_args)
            return
        private, plain, held_back = self.shadow_plan(host_args, n, parts)
        copies = {k: [np.array(host_args[k]) for _ in range(parts)] for k in private}

        def arguments(j: int) -> tuple[Any, ...]:
            return tuple(copies[k][j] if k in copies else a for k, a in enumerate(host_args))

        if plain.issuperset(self.body.shadow_positions() if self.body.is_reverse else ()):
            launcher = self.launcher(host_args, one_thread=True)  # no atomic adds at all
        else:
            launcher = self.launcher(host_args, plain=plain)

        def run_part(j: int) -> None:
            launcher(bounds[j], max(bounds[j], bounds[j + 1] - held_back), *arguments(j))

        # The first part runs on this thread: one wake-up fewer (tens of µs).
        futures = [thread_pool().submit(run_part, j) for j in range(1, parts)]
        try:
            run_part(0)
        finally:
            wait(futures)  # all threads done before an error of one is raised
        for future in futures:
            future.result()
        if held_back:
            for j in range(parts):
                launcher(max(bounds[j], bounds[j + 1] - held_back), bounds[j + 1], *arguments(j))
        for k, mine in copies.items():
            # Each copy started as the shadow: what a thread added is its difference.
            shared, start = host_args[k], np.array(host_args[k])
            for copy in mine:
                copy -= start
                shared += copy

    def shadow_plan(
        self, args: tuple[Any, ...], n: int, parts: int
    ) -> tuple[frozenset[int], frozenset[int], int]:
        """How ``parts`` threads of a reverse launch add into its shadows, by launch
        position: ``(private, plain, held_back)``.

        A shadow that each index provably touches only near its own entry is shared,
        with plain adds, and the last ``held_back`` indices of each thread's range run
        after the rest (indices further apart than that touch different entries).
        Another shadow, if small next to the launch, is copied per thread (``private``;
        plain adds into the copies, which are summed at the end). Any other is added
        into atomically: it is in neither set."""
        if parts == 1 or not self.body.is_reverse:
            return frozenset(), frozenset(), 0
        reach = self.reach_of(args)
        arrays = [(k, a) for k, a in enumerate(args) if isinstance(a, np.ndarray)]
        private, plain, held_back = set(), set(), 0
        for k, shadow in enumerate(args):
            if k not in reach or not isinstance(shadow, np.ndarray):
                continue
            if any(j != k and np.may_share_memory(a, shadow) for j, a in arrays):
                continue  # its entries are another array's too: atomic adds
            near = reach[k]
            if near is not None:
                plain.add(k)
                held_back = max(held_back, near)
            elif (
                shadow.size
                and shadow.flags.c_contiguous
                and shadow.flags.writeable
                and (shadow.nbytes * parts <= PRIVATE_BYTES or shadow.size * parts <= n)
            ):
                private.add(k)
                plain.add(k)
        return frozenset(private), frozenset(plain), held_back

    def reach_of(self, args: tuple[Any, ...]) -> dict[int, int | None]:
        """For each shadow's launch position: how far apart two indices may be and still
        touch the same entry of it (None: it may be touched anywhere); see
        ``index_reach`` in src/kernel_ir.h."""
        assert self.body.derivative_of is not None
        # Array shapes are held at their values: they make a row's address linear in i.
        shapes = tuple(a.shape for a in args if isinstance(a, np.ndarray))
        key = (launch_key(args), shapes)
        if key not in self.reach:
            shadows = self.body.shadow_positions()
            fn = self.body.per_index(self.body.function(args), one_thread=True)
            positions = [k for k, _ in fn.visible_params]  # [index, *launch arguments]
            argument_at = {p: k - 1 for k, p in enumerate(positions) if k > 0}
            constants = [
                (p, args[argument_at[param.hidden[1]]].shape[param.hidden[2]])
                for p, param in enumerate(fn.params)
                if param.hidden is not None and param.hidden[0] == "shape"
            ]
            found = _state.native.index_reach(
                fn.module.ir(),
                fn.name,
                positions[0],
                [positions[1 + k] for k in shadows],
                constants,
            )
            self.reach[key] = dict(zip(shadows, found, strict=True))
        return self.reach[key]

    def launcher(
        self, args: tuple[Any, ...], one_thread: bool = False, plain: frozenset[int] = frozenset()
    ) -> Any:
        # Reverse kernels accumulate atomically only when threads share shadows.
        one_thread = one_thread and self.body.derivative_of is not None
        key = (
            tuple((a.dtype.str, a.ndim) if isinstance(a, np.ndarray) else type(a) for a in args),
            one_thread,
            plain,
        )
        launcher = self.launchers.get(key)
        if launcher is None:
            body = self.body.function(args)
            # Bodies that promise disjoint arrays (Numba's noalias) come with a safe
            # twin; overlapping arrays in a launch go to its driver.
            safe = None
            if body.alias_safe is not None:
                unsafe_body = body

                def safe() -> Any:
                    return range_driver(
                        self.body.per_index(unsafe_body.alias_safe(), one_thread, plain),
                        describe=self.body.describe_argument,
                    )

            driver = range_driver(
                self.body.per_index(body, one_thread, plain), safe, self.body.describe_argument
            )
            options = Options(1, False, False, primal_only=True)
            acts, _ = check_activities(driver, Forward, [Const] * len(driver.visible_params))
            launcher = Derivative(driver, Forward, acts, None, options)
            self.launchers[key] = launcher
        return launcher
