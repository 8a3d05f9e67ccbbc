"""``check_grad``: reverse mode, forward mode and central finite differences compared
per argument, with the settings and report of ``_check``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from enzyme_py import _python_functions as pf
from enzyme_py._check import GradCheck, dtype_of, fd_settings, rel
from enzyme_py._derivative import resolve_function
from enzyme_py._transforms import Derivatives, positions, reverse_call
from enzyme_py.core import Active, Const, Dual, Forward
from enzyme_py.frontends import numba as numba_frontend

__all__ = ["check_grad"]


def _differentiable(value: Any) -> bool:
    if isinstance(value, np.ndarray):
        return value.dtype.kind == "f"
    return isinstance(value, (float, np.floating)) and not isinstance(value, bool)


def _declared_dtypes(f: Any) -> list[Any]:
    """The float dtypes of a C or IR function's parameters and result (a float
    parameter computes in its own type, whatever the argument was); none for Numba,
    which compiles for the arguments' dtypes."""
    if numba_frontend.is_dispatcher(f):
        return []
    try:
        fn = resolve_function(f)
    except TypeError:
        return []
    return [p.dtype for _, p in fn.visible_params] + ([fn.ret.dtype] if fn.ret else [])


def check_grad(
    f: Any,
    *args: Any,
    argnums: int | Sequence[int] | None = None,
    eps: float | None = None,
    rtol: float | None = None,
    coordinates: int = 8,
    seed: int = 0,
) -> GradCheck:
    """Compare reverse mode, forward mode and central finite differences for scalar ``f``.

    For each float argument (or those in ``argnums``): the reverse gradient and the
    forward-mode derivative along a random direction are compared with central
    differences along that direction, and, for up to ``coordinates`` coordinates of
    it, coordinate by coordinate. Arguments are not modified. Returns a ``GradCheck``
    (``print`` it for the table; ``.ok`` and ``.worst`` summarise it).

    ``eps`` (the difference step, relative to the argument's largest value) and
    ``rtol`` default to the least precise float type among the differentiated
    arguments (and a C or IR function's parameters and result): 1e-6 and 1e-5 for
    float64, 1e-3 and 1e-2 for float32.
    """
    if argnums is None:
        nums = tuple(i for i, a in enumerate(args) if _differentiable(a))
    else:
        nums = positions(argnums, len(args))
    if pf.is_python_function(f):  # a lambda, def or partial: check the function it calls
        return _check_python_function(f, args, nums, eps, rtol, coordinates, seed)
    derivatives = Derivatives(f)
    primal = derivatives.get(Forward, [Const] * len(args), Const)
    step, tolerance, _ = fd_settings([dtype_of(args[i]) for i in nums] + _declared_dtypes(f))
    eps = step if eps is None else eps
    rtol = tolerance if rtol is None else rtol

    def value(call_args: list[Any]) -> float:
        return float(primal(*[a.copy() if isinstance(a, np.ndarray) else a for a in call_args]))

    _, grads = reverse_call(
        derivatives, [a.copy() if isinstance(a, np.ndarray) else a for a in args], nums, Active
    )
    rng = np.random.default_rng(seed)
    report = GradCheck(rtol=rtol)
    for i, g in zip(nums, grads, strict=True):
        x = args[i]
        direction: Any = 1.0
        if isinstance(x, np.ndarray):
            direction = np.asarray(rng.standard_normal(x.shape)).astype(x.dtype)

        def shifted(t: float, x: Any = x, i: int = i, d: Any = direction) -> float:
            call = list(args)
            call[i] = x + t * d
            return value(call)

        h = eps * max(1.0, float(np.max(np.abs(x))))
        fd_dir = (shifted(h) - shifted(-h)) / (2 * h)
        reverse_dir = float(np.sum(np.asarray(g) * direction))
        acts = [Dual if k == i else Const for k in range(len(args))]
        call: list[Any] = []
        for k, a in enumerate(args):
            call.append(a.copy() if isinstance(a, np.ndarray) else a)
            if k == i:
                call.append(direction)
        _, forward_dir = derivatives.get(Forward, acts, Dual)(*call)
        worst_fd_coord = 0.0
        if isinstance(x, np.ndarray):
            flat = np.asarray(g).reshape(-1)
            picks = rng.choice(x.size, size=min(coordinates, x.size), replace=False)
            for j in picks:
                e = np.zeros(x.size, dtype=x.dtype)
                e[j] = 1
                e = e.reshape(x.shape)

                def along(t: float, x: Any = x, i: int = i, e: Any = e) -> float:
                    call = list(args)
                    call[i] = x + t * e
                    return value(call)

                worst_fd_coord = max(worst_fd_coord, rel(flat[j], (along(h) - along(-h)) / (2 * h)))
        row: dict[str, Any] = {
            "argument": f"arg {i}",
            "reverse_vs_fd": max(rel(reverse_dir, fd_dir), worst_fd_coord),
            "forward_vs_fd": rel(float(forward_dir), fd_dir),
            "reverse_vs_forward": rel(reverse_dir, float(forward_dir)),
        }
        row["worst"] = max(row["reverse_vs_fd"], row["forward_vs_fd"], row["reverse_vs_forward"])
        report.rows.append(row)
    return report


def _check_python_function(
    f: Any, args: Sequence[Any], nums: Sequence[int], eps: float | None, rtol: float | None,
    coordinates: int, seed: int,
) -> GradCheck:  # fmt: skip
    """``check_grad`` of the function a lambda, def or partial calls, at the positions
    its arguments reach there; the rows name the Python function's arguments."""
    lowered = pf.lower(f, args, {}, nums, "check_grad")
    report = check_grad(
        lowered.target, *lowered.args, argnums=tuple(lowered.where[i] for i in nums), eps=eps,
        rtol=rtol, coordinates=coordinates, seed=seed,
    )  # fmt: skip
    named = {f"arg {lowered.where[i]}": f"arg {i}" for i in nums}
    for found in report.rows:
        found["argument"] = named[found["argument"]]
    return report
