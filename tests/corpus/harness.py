"""Runs one corpus entry in forward and reverse mode and compares with finite differences.

Forward mode is ``ez.jvp`` along a random tangent; reverse mode is ``ez.grad`` for a
float result and ``ez.vjp`` with a random cotangent otherwise (array and tuple results,
output-parameter functions); entries marked ``jacobian`` are also checked through
``ez.jacobian``. The reference is the full float64 central-difference Jacobian of the
outputs (the result, or the output arrays the function writes) with respect to every
differentiated argument, each evaluation on fresh arguments from ``entry.make()``.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import enzyme_py as ez

CORRECT, REFUSED, WRONG, ERROR = "correct", "refused", "wrong", "error"


@dataclass(frozen=True)
class Refused:
    """An expected refusal: the error's type and a regex its message must match (the
    part that says what to write instead)."""

    error: type[BaseException]
    advice: str


@dataclass(frozen=True)
class Entry:
    name: str
    category: str
    fn: Any
    make: Callable[[], tuple[Any, ...]]  # fresh arguments, as a user passes them
    diff: tuple[int, ...] = (0,)  # the arguments differentiated
    outputs: tuple[int, ...] = ()  # output arrays written (the function returns nothing)
    expect: Refused | None = None  # None: a correct derivative in both modes
    jacobian: bool = False  # also ez.jacobian(f, diff[0]) (output=outputs[0])
    rtol: float = 1e-5
    note: str = ""


@dataclass
class Outcome:
    name: str
    mode: str
    status: str
    detail: str = ""


@dataclass
class Result:
    entry: Entry
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def status(self) -> str:
        statuses = {o.status for o in self.outcomes}
        for s in (WRONG, ERROR, REFUSED):
            if s in statuses:
                return s
        return CORRECT

    def as_expected(self) -> bool:
        if self.entry.expect is None:
            return all(o.status == CORRECT for o in self.outcomes)
        return all(o.status in (REFUSED, CORRECT) for o in self.outcomes) and any(
            o.status == REFUSED for o in self.outcomes
        )


def _flat(value: Any) -> np.ndarray:
    """The result's floats as one vector (tuples in order, scalars as one entry)."""
    if value is None:
        return np.zeros(0)
    if isinstance(value, tuple):
        return np.concatenate([_flat(v) for v in value]) if value else np.zeros(0)
    return np.asarray(value, dtype=np.float64).ravel().copy()


def _like(value: Any, rng: np.random.Generator) -> Any:
    """A random cotangent shaped like a result."""
    if isinstance(value, tuple):
        return tuple(_like(v, rng) for v in value)
    if isinstance(value, np.ndarray):
        return rng.standard_normal(value.shape)
    return float(rng.standard_normal())


def _outputs(entry: Entry, args: Sequence[Any]) -> np.ndarray:
    result = entry.fn(*args)
    if entry.outputs:
        return np.concatenate(
            [np.asarray(args[j], dtype=np.float64).ravel() for j in entry.outputs]
        )
    return _flat(result)


def _perturbed(entry: Entry, i: int, index: tuple[int, ...] | None, delta: float) -> list[Any]:
    args = list(entry.make())
    if index is None:
        args[i] = float(args[i]) + delta
    else:
        args[i][index] += delta
    return args


def finite_differences(entry: Entry) -> dict[int, np.ndarray]:
    """Per differentiated argument, the Jacobian (outputs x elements of the argument)."""
    jac = {}
    base = entry.make()
    for i in entry.diff:
        x = base[i]
        if isinstance(x, np.ndarray):
            indices: list[tuple[int, ...] | None] = list(np.ndindex(x.shape))
            values = [float(x[k]) for k in indices if k is not None]
        else:
            indices, values = [None], [float(x)]
        columns = []
        for k, v in zip(indices, values, strict=True):
            h = 1e-6 * max(1.0, abs(v))
            plus = _outputs(entry, _perturbed(entry, i, k, h))
            minus = _outputs(entry, _perturbed(entry, i, k, -h))
            columns.append((plus - minus) / (2 * h))
        jac[i] = np.stack(columns, axis=1)
    return jac


def _close(got: np.ndarray, want: np.ndarray, rtol: float) -> bool:
    scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
    return got.shape == want.shape and bool(np.allclose(got, want, rtol=rtol, atol=rtol * scale))


def _compare(name: str, mode: str, got: np.ndarray, want: np.ndarray, rtol: float) -> Outcome:
    if _close(got, want, rtol):
        return Outcome(name, mode, CORRECT)
    err = np.max(np.abs(got - want)) if got.shape == want.shape else float("nan")
    return Outcome(
        name, mode, WRONG, f"max error {err:.3g}; enzyme_py {got[:6]} vs differences {want[:6]}"
    )


def _forward(entry: Entry, jac: dict[int, np.ndarray], rng: np.random.Generator) -> tuple:
    args = entry.make()
    tangents: list[Any] = [None] * len(args)
    want = 0.0
    for i in entry.diff:
        t = rng.standard_normal(np.shape(args[i])) if isinstance(args[i], np.ndarray) else 1.0
        tangents[i] = t
        want = want + jac[i] @ np.ravel(t)
    _, dy = ez.jvp(entry.fn, tuple(args), tuple(tangents))
    got = np.concatenate([np.ravel(dy[j]) for j in entry.outputs]) if entry.outputs else _flat(dy)
    return got, np.asarray(want, dtype=np.float64).ravel()


def _reverse(entry: Entry, jac: dict[int, np.ndarray], rng: np.random.Generator) -> tuple:
    args = entry.make()
    value = None
    if entry.outputs:
        cot: Any = [None] * len(args)
        for j in entry.outputs:
            cot[j] = rng.standard_normal(args[j].shape)
        _, vjp_fn = ez.vjp(entry.fn, *args)
        pulled = vjp_fn(tuple(cot))
        flat_cot = np.concatenate([cot[j].ravel() for j in entry.outputs])
        got = [np.ravel(pulled[i]) for i in entry.diff]
    else:
        value = entry.fn(*entry.make())
        if isinstance(value, float):
            g = ez.grad(entry.fn, entry.diff if len(entry.diff) > 1 else entry.diff[0])(*args)
            grads = g if len(entry.diff) > 1 else (g,)
            flat_cot = np.ones(1)
            got = [np.ravel(v) for v in grads]
        else:
            cot = _like(value, rng)
            _, vjp_fn = ez.vjp(entry.fn, *args)
            pulled = vjp_fn(cot)
            flat_cot = _flat(cot)
            got = [np.ravel(pulled[i]) for i in entry.diff]
    want = [flat_cot @ jac[i] for i in entry.diff]
    return np.concatenate(got), np.concatenate(want)


def _jacobian(entry: Entry, jac: dict[int, np.ndarray]) -> tuple:
    i = entry.diff[0]
    args = entry.make()
    if entry.outputs:
        got = ez.jacobian(entry.fn, i, output=entry.outputs[0])(*args)
        rows = args[entry.outputs[0]].size
        want = jac[i][:rows]
    else:
        got = ez.jacobian(entry.fn, i)(*args)
        want = jac[i]
    return np.ravel(got), np.ravel(want)


def _refusal(entry: Entry, mode: str, exc: BaseException) -> Outcome:
    text = f"{type(exc).__name__}: {exc}"
    expect = entry.expect
    if expect is not None and isinstance(exc, expect.error) and re.search(expect.advice, str(exc)):
        return Outcome(entry.name, mode, REFUSED, text)
    return Outcome(entry.name, mode, ERROR, text)


def run(entry: Entry) -> Result:
    """Both modes (and ez.jacobian where asked) of one entry."""
    result = Result(entry)
    rng = np.random.default_rng(zlib.crc32(entry.name.encode()))
    jac = finite_differences(entry)
    checks: list[tuple[str, Callable[[], tuple]]] = [
        ("forward", lambda: _forward(entry, jac, rng)),
        ("reverse", lambda: _reverse(entry, jac, rng)),
    ]
    if entry.jacobian:
        checks.append(("jacobian", lambda: _jacobian(entry, jac)))
    for mode, check in checks:
        try:
            got, want = check()
        except Exception as exc:  # refusals and unexpected errors alike are recorded
            result.outcomes.append(_refusal(entry, mode, exc))
            continue
        result.outcomes.append(_compare(entry.name, mode, got, want, entry.rtol))
    return result
