"""Gradient checking: derivatives compared with central finite differences.

``autodiff(..., check=True)`` checks the first call of a derivative
(``check_first_call``) and warns when it disagrees: the answer to silent wrong
gradients (a missing ``runtime_activity``, an aliasing assumption broken, a bug in a
rule). ``check_grad`` (``_gradcheck``) compares reverse mode, forward mode and
differences per argument, with the same settings and report.

The finite-difference step and the tolerance follow the least precise float type
involved: float32 data gets a larger step (a step of 1e-6 is below float32's
resolution) and a looser tolerance than float64.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from enzyme_py._activities import check_activities
from enzyme_py._derivative import Derivative, Options
from enzyme_py.core import (
    Active,
    ActiveOnly,
    Const,
    Dual,
    DualOnly,
    Forward,
    GradientCheckWarning,
    Reverse,
)

__all__ = ["GradCheck", "GradientCheckWarning", "check_first_call", "fd_settings"]


@dataclass
class GradCheck:
    """The result of ``check_grad``: per argument, the worst relative errors."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    rtol: float = 1e-5

    @property
    def ok(self) -> bool:
        return all(r["worst"] <= self.rtol for r in self.rows)

    @property
    def worst(self) -> float:
        return max((r["worst"] for r in self.rows), default=0.0)

    def __str__(self) -> str:
        lines = [
            "argument   reverse-vs-FD   forward-vs-FD   reverse-vs-forward   worst",
            "--------   -------------   -------------   ------------------   -----",
        ]
        for r in self.rows:
            lines.append(
                f"{r['argument']:<10} {r['reverse_vs_fd']:>13.2e}   {r['forward_vs_fd']:>13.2e}"
                f"   {r['reverse_vs_forward']:>18.2e}   {r['worst']:.2e}"
                + ("" if r["worst"] <= self.rtol else "   <-- disagrees")
            )
        lines.append(f"{'all agree' if self.ok else 'DISAGREEMENT'} (rtol {self.rtol:g})")
        return "\n".join(lines)


def rel(a: float, b: float) -> float:
    return abs(a - b) / max(1.0, abs(a), abs(b))


# (finite-difference step relative to the arguments' size, check_grad's tolerance,
# check=True's tolerance) per precision. Central differences err by about
# step**2 (truncation) + eps / step (rounding): float64's 1e-6 step is near its best;
# float32's best is near 1e-3, where differences still err by about 1e-3 on ordinary
# functions, so its tolerance is 1e-2 (a wrong derivative is off by far more).
_FLOAT64_FD = (1e-6, 1e-5, 1e-4)
_FLOAT32_FD = (1e-3, 1e-2, 1e-2)


def fd_settings(dtypes: Sequence[Any]) -> tuple[float, float, float]:
    """The finite-difference settings for the least precise of ``dtypes`` (floats)."""
    eps = [np.finfo(d).eps for d in dtypes if d is not None and np.dtype(d).kind == "f"]
    return _FLOAT32_FD if max(eps, default=0.0) > np.finfo(np.float64).eps else _FLOAT64_FD


def dtype_of(value: Any) -> Any:
    """The float dtype a value is computed in: Python floats are float64."""
    return value.dtype if isinstance(value, (np.ndarray, np.generic)) else np.dtype(np.float64)


def warn_if_wrong(report: GradCheck, name: str) -> None:
    if not report.ok:
        warnings.warn(
            f"the derivative of '{name}' disagrees with finite differences:\n{report}",
            GradientCheckWarning,
            stacklevel=3,
        )


def check_first_call(df: Any, args: tuple[Any, ...]) -> Any:
    """Call derivative ``df`` with ``args`` and compare its result with central
    differences of the primal along a random direction; warn on disagreement.

    In reverse mode the adjoints are those of ``seed * f + sum(s * a)`` over each
    array ``a`` with a shadow ``s`` (its value as given: an output array's shadow
    carries its seed, an input's the gradient it is added to), ``a`` taken after the
    call. Supports width 1 and a float return value (Active/ActiveOnly in reverse
    mode, Dual/DualOnly in forward mode); otherwise the call is made without a check
    and a warning says so.
    """
    fn = df.function
    name = fn.display_name
    reverse = df.mode is Reverse
    ret = df.return_activity
    supported = df.width == 1 and (
        (reverse and ret in (Active, ActiveOnly)) or (not reverse and ret in (Dual, DualOnly))
    )
    if not supported:
        warnings.warn(
            f"check=True: the derivative of '{name}' was not checked (checks need width=1 "
            "and a float return value)",
            GradientCheckWarning,
            stacklevel=3,
        )
        return df.call(args)
    # Split the call into primal arguments and their shadows/tangents.
    primals: list[Any] = []
    shadows: dict[int, Any] = {}
    pos = 0
    visible = [(p, a) for p, a in zip(fn.params, df.activities, strict=True) if p.hidden is None]
    for k, (_, act) in enumerate(visible):
        primals.append(args[pos])
        pos += 1
        if act.shadow:
            shadows[k] = args[pos]
            pos += 1
    # Shadows as given: the call adds into them (reverse) or writes them (forward).
    before = {k: np.array(v, copy=True) for k, v in shadows.items() if isinstance(v, np.ndarray)}
    originals = [a.copy() if isinstance(a, np.ndarray) else a for a in primals]
    result = df.call(args)
    seed = float(args[pos]) if reverse else 1.0  # checked by the call

    rng = np.random.default_rng(0)
    directions: dict[int, Any] = {}
    for k, (_, act) in enumerate(visible):
        if (reverse and (act is Active or act.shadow)) or (not reverse and act.shadow):
            x = originals[k]
            if not reverse:
                directions[k] = before.get(k, shadows[k])  # the tangent given
            elif isinstance(x, np.ndarray):
                directions[k] = np.asarray(rng.standard_normal(x.shape)).astype(x.dtype)
            else:
                directions[k] = 1.0
    params, ret_activity = check_activities(fn, Forward, [Const] * (len(visible) + 1))
    primal_of = Derivative(fn, Forward, params, ret_activity, Options(1, False, False))
    step, _, rtol = fd_settings(
        [visible[k][0].dtype for k in directions] + ([fn.ret.dtype] if fn.ret else [])
    )

    def value(t: float) -> tuple[float, dict[int, np.ndarray]]:
        """f and the arrays that have shadows, after a call at originals + t * directions."""
        call = []
        for k, x in enumerate(originals):
            d = directions.get(k)
            call.append(
                x + t * np.asarray(d, dtype=np.float64).astype(np.asarray(x).dtype)
                if d is not None
                else (x.copy() if isinstance(x, np.ndarray) else x)
            )
        return float(primal_of(*call)), {k: call[k] for k in before}

    scale = max(1.0, *(float(np.max(np.abs(originals[k]))) for k in directions))
    h = step * scale
    (up, arrays_up), (down, arrays_down) = value(h), value(-h)
    if reverse:
        # d/dt of seed * f + sum(s * a), differences taken per element first (the
        # arrays' values may be large next to their change).
        fd = seed * (up - down) / (2 * h)
        for k, s in before.items():
            change = arrays_up[k].astype(np.float64) - arrays_down[k]
            fd += float(np.sum(s * change)) / (2 * h)
        adjoints = iter(result[1:])
        ad = 0.0
        for k, (_, act) in enumerate(visible):
            if act is Active:
                ad += float(next(adjoints)) * float(directions[k])
            elif k in before:
                ad += float(np.sum(np.asarray(shadows[k], dtype=np.float64) * directions[k]))
        # Compare relative to the seeds' size (a zero seed expects zero adjoints).
        size = max([abs(seed)] + [float(np.max(np.abs(s), initial=0.0)) for s in before.values()])
        if size > 0:
            ad, fd = ad / size, fd / size
    else:
        fd = (up - down) / (2 * h)
        ad = float(result[1] if ret is Dual else result)
    error = rel(ad, fd)
    report = GradCheck(
        rows=[
            {
                "argument": "direction",
                "reverse_vs_fd": error if reverse else 0.0,
                "forward_vs_fd": 0.0 if reverse else error,
                "reverse_vs_forward": 0.0,
                "worst": error,
            }
        ],
        rtol=rtol,
    )
    warn_if_wrong(report, name)
    return result
