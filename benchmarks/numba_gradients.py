"""Gradient / primal time ratio of enzyme_py on Numba kernels.

Usage::

    python benchmarks/numba_gradients.py [--quick] [--out DIR]

For each kernel of ``benchmarks/kernels.py`` (Rosenbrock with n = 10^6; the ADBench
GMM objective with d = 10, k = 25, n = 10^4), in this process:

- the primal: the Numba function itself;
- the gradient: ``ez.grad`` / ``ez.autodiff(..., ez.Reverse, ..., ez.ActiveOnly)``,
  with respect to every float array parameter (GMM: alphas, means, icf);

each timed as the median of at least 5 runs after a warm-up call, and the gradient
checked against central finite differences on a few coordinates. ``--quick`` runs
tiny sizes. Results go to ``numba_gradients.json`` / ``.md`` in ``--out``
(default ``benchmarks/results/``). Nothing asserts anything about the times.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import enzyme_py as ez
from benchmarks import kernels
from benchmarks.common import central_difference, median_time


def fd_check(
    f: Callable[..., float],
    args: list[Any],
    grads: list[np.ndarray],
    which: list[int],
    samples: int = 3,
) -> float:
    """Worst relative error of the gradient against central differences."""
    worst = 0.0
    rng = np.random.default_rng(1)
    for arg_index, g in zip(which, grads, strict=True):
        flat = args[arg_index].reshape(-1)
        for i in rng.choice(flat.size, size=min(samples, flat.size), replace=False):
            fd = central_difference(f, args, flat, i)
            exact = g.reshape(-1)[i]
            worst = max(worst, abs(fd - exact) / max(1.0, abs(exact)))
    return worst


def bench_rosenbrock(n: int, repeats: int) -> dict[str, Any]:
    (x,) = kernels.rosenbrock_inputs(n)
    grad = ez.grad(kernels.rosenbrock)
    primal = median_time(lambda: kernels.rosenbrock(x), repeats)
    gradient = median_time(lambda: grad(x), repeats)
    error = fd_check(kernels.rosenbrock, [x], [grad(x)], [0])
    return {
        "kernel": f"Rosenbrock n={n}",
        "primal_s": primal,
        "gradient_s": gradient,
        "ratio": gradient / primal,
        "fd_rel_error": error,
    }


def bench_gmm(d: int, k: int, n: int, repeats: int) -> dict[str, Any]:
    args = list(kernels.gmm_inputs(d, k, n))
    grad = ez.grad(kernels.gmm_objective, argnums=(0, 1, 2))
    primal = median_time(lambda: kernels.gmm_objective(*args), repeats)
    gradient = median_time(lambda: grad(*args), repeats)
    error = fd_check(kernels.gmm_objective, args, list(grad(*args)), [0, 1, 2])
    return {
        "kernel": f"GMM d={d} k={k} n={n}",
        "primal_s": primal,
        "gradient_s": gradient,
        "ratio": gradient / primal,
        "fd_rel_error": error,
    }


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        f"Measured {meta['date']} on {meta['machine']} ({meta['cpus']} CPUs), "
        f"Python {meta['python']}, NumPy {meta['numpy']}, Numba {meta['numba']}, "
        f"Enzyme {meta['enzyme']}.",
        "",
        "| kernel | Numba primal | enzyme_py gradient | gradient / primal | FD check |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['kernel']} | {1e3 * r['primal_s']:.3f} ms | {1e3 * r['gradient_s']:.3f} ms "
            f"| {r['ratio']:.2f} | {r['fd_rel_error']:.1e} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, few repeats")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    args = parser.parse_args(argv)
    import numba

    repeats = 3 if args.quick else 7
    rows = [
        bench_rosenbrock(1000 if args.quick else 1_000_000, repeats),
        bench_gmm(*((3, 4, 50) if args.quick else (10, 25, 10_000)), repeats),
    ]
    meta = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()} {platform.processor()}".strip(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": numba.__version__,
        "enzyme": ez.info()["enzyme_version"],
        "quick": args.quick,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "numba_gradients.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    table = markdown(rows, meta)
    (out / "numba_gradients.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
