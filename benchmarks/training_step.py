"""A training step (forward + backward) through enzyme_py, before and after split mode.

Usage::

    python benchmarks/training_step.py [--quick] [--out DIR]

The loss: a small two-layer network's mean squared error over a batch, written as a
Numba ``@njit`` loop nest, ``loss(w1, w2, x, y)`` (``w1``: hidden x inputs, ``w2``:
hidden; ``x``: batch x inputs, ``y``: batch). One training step is the loss and its
gradient with respect to ``w1`` and ``w2``, taken two ways, each timed in this run:

- ``ez.torch.function(loss)``: ``l = g(w1, w2, x, y); l.backward()`` on tensors that
  require grad. *split*: the bridge as it is (the forward pass is Enzyme's augmented
  forward pass and keeps its tape, ``backward`` runs only the reverse pass);
  *recompute*: the same bridge with split mode switched off (``backward`` runs the
  combined reverse pass, which computes the primal again), as before split mode.
- ``ez.vjp(loss, w1, w2, x, y)`` then its pullback ``vjp_fn(1.0)``: *split* as it is;
  *recompute*: the pullback of a combined reverse pass (what ``vjp`` did before).
- ``ez.jax.primitive(loss)`` (custom_vjp form) under
  ``jax.jit(jax.value_and_grad(g, argnums=(0, 1)))``, float64: *split*: the forward host
  call keeps the tape in ``ez.jax.tapes``, the backward host call runs only the reverse
  pass; *recompute*: with ``ez.jax.tapes.limit(0)`` (the backward host call runs the
  combined reverse pass), as before split mode.

Also the loss alone (the primal), and ``ez.value_and_grad`` (one combined reverse
pass). Median wall time over repeats (``benchmarks/common.py``) and median CPU time
(``time.process_time``, steadier on a shared machine), with the relative difference of
each gradient from ``value_and_grad``'s. Results go to
``training_step.json`` and ``training_step.md`` in ``--out`` (default
``benchmarks/results/``); the table is printed. Nothing here asserts times.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numba
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import enzyme_py as ez
from benchmarks.common import median_time


@numba.njit
def loss(w1: Any, w2: Any, x: Any, y: Any) -> float:
    hidden, inputs = w1.shape
    total = 0.0
    for b in range(x.shape[0]):
        out = 0.0
        for h in range(hidden):
            a = 0.0
            for i in range(inputs):
                a += w1[h, i] * x[b, i]
            out += w2[h] * math.tanh(a)
        d = out - y[b]
        total += d * d
    return total / x.shape[0]


@contextlib.contextmanager
def split_off() -> Iterator[None]:
    """Split mode refused everywhere: the bridges and vjp recompute, as before it (the
    JAX bridge's tape registry off, so that its forward host call is the primal's)."""
    from enzyme_py import _bridge, _transforms

    original = _transforms.SplitCall.__init__
    limits = _bridge.TAPES.max_count, _bridge.TAPES.max_bytes

    def refuse(self: Any, *args: Any, **kwargs: Any) -> None:
        raise ez.ActivityError("split mode off (benchmark)")

    _transforms.SplitCall.__init__ = refuse  # type: ignore[method-assign]
    _bridge.TAPES.limit(0)
    try:
        yield
    finally:
        _transforms.SplitCall.__init__ = original  # type: ignore[method-assign]
        _bridge.TAPES.limit(*limits)


def median_cpu_time(fn: Callable[[], Any], repeats: int) -> float:
    """Median CPU time of ``fn()`` in this process (``time.process_time``), after a
    warm-up call: steadier than wall time on a shared machine."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return float(np.median(times))


def rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b)) / max(1e-300, float(np.max(np.abs(b)))))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, few repeats")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args(argv)
    batch, inputs, hidden = (16, 8, 8) if args.quick else (512, 32, 64)
    repeats = 5 if args.quick else 20
    rounds = 1 if args.quick else 3
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((hidden, inputs)) / math.sqrt(inputs)
    w2 = rng.standard_normal(hidden) / math.sqrt(hidden)
    x = rng.standard_normal((batch, inputs))
    y = rng.standard_normal(batch)

    value, (g1, g2) = ez.value_and_grad(loss, argnums=(0, 1))(w1, w2, x, y)
    rows: list[dict[str, Any]] = []

    def row(name: str, how: str, step: Callable[[], Any], grads: Any = None) -> None:
        error = None if grads is None else max(rel(grads[0], g1), rel(grads[1], g2))
        rows.append({"step": name, "how": how, "step_fn": step, "grad_rel_error": error})

    def measure() -> None:
        # Rounds over every row in turn; each row keeps its best round's medians, so
        # that a burst of load elsewhere on the machine hits one round, not one row.
        for _ in range(rounds):
            for r in rows:
                with split_off() if r["how"] == "recompute" else contextlib.nullcontext():
                    wall = median_time(r["step_fn"], repeats)
                    cpu = median_cpu_time(r["step_fn"], repeats)
                r["median_s"] = min(wall, r.get("median_s", wall))
                r["cpu_s"] = min(cpu, r.get("cpu_s", cpu))
        for r in rows:
            del r["step_fn"]

    row("loss alone (primal)", "-", lambda: loss(w1, w2, x, y))
    value_and_grad = ez.value_and_grad(loss, (0, 1))
    row("ez.value_and_grad", "combined reverse", lambda: value_and_grad(w1, w2, x, y))

    def vjp_step() -> Any:
        _, pull = ez.vjp(loss, w1, w2, x, y)
        grads = pull(1.0)
        return grads[0], grads[1]

    for how in ("recompute", "split"):
        with split_off() if how == "recompute" else contextlib.nullcontext():
            row("ez.vjp + pullback", how, vjp_step, vjp_step())

    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        g = ez.torch.function(loss)
        tw1 = torch.tensor(w1, requires_grad=True)
        tw2 = torch.tensor(w2, requires_grad=True)
        tx, ty = torch.tensor(x), torch.tensor(y)

        def torch_step() -> Any:
            tw1.grad = tw2.grad = None
            g(tw1, tw2, tx, ty).backward()
            assert tw1.grad is not None and tw2.grad is not None
            return tw1.grad.numpy(), tw2.grad.numpy()

        for how in ("recompute", "split"):
            with split_off() if how == "recompute" else contextlib.nullcontext():
                row("ez.torch.function: forward + backward", how, torch_step, torch_step())

    try:
        import jax
    except ImportError:
        jax = None
    if jax is not None:
        jax.config.update("jax_enable_x64", True)
        gj = ez.jax.primitive(loss)
        jitted = jax.jit(jax.value_and_grad(gj, argnums=(0, 1)))
        jw1, jw2, jx, jy = (jax.numpy.asarray(a) for a in (w1, w2, x, y))

        def jax_step() -> Any:
            _, (d1, d2) = jitted(jw1, jw2, jx, jy)
            return np.asarray(d1), np.asarray(d2)

        for how in ("recompute", "split"):
            with split_off() if how == "recompute" else contextlib.nullcontext():
                row("ez.jax.primitive: jit(value_and_grad)", how, jax_step, jax_step())

    measure()
    meta = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "quick": args.quick,
        "batch": batch,
        "inputs": inputs,
        "hidden": hidden,
        "repeats": repeats,
        "rounds": rounds,
        "loss": float(value),
        "torch": None if torch is None else torch.__version__,
        "jax": None if jax is None else jax.__version__,
    }
    folder = Path(args.out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "training_step.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    primal = rows[0]["cpu_s"]
    lines = [
        f"Training step, batch {batch}, {inputs} inputs, {hidden} hidden "
        f"({meta['date']}, {meta['cpus']} CPUs)",
        "",
        "| step | how | wall time | CPU time | CPU / primal's | gradient rel. error |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        err = "" if r["grad_rel_error"] is None else f"{r['grad_rel_error']:.1e}"
        lines.append(
            f"| {r['step']} | {r['how']} | {1e6 * r['median_s']:.1f} µs | "
            f"{1e6 * r['cpu_s']:.1f} µs | {r['cpu_s'] / max(primal, 1e-9):.2f} | {err} |"
        )
    table = "\n".join(lines) + "\n"
    (folder / "training_step.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
