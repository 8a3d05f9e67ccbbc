"""Measurement helpers shared by the benchmark scripts."""

from __future__ import annotations

import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np


def median_time(fn: Callable[[], Any], repeats: int) -> float:
    """Median wall time of ``fn()`` over ``repeats`` runs, after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def central_difference(f: Callable[..., float], args: list[Any], flat: np.ndarray, j: int) -> float:
    """d f(*args) / d flat[j] by central differences (``flat``: a flat view of one of
    ``args``, restored afterwards), step 1e-6 relative to the entry."""
    old = flat[j]
    h = 1e-6 * max(1.0, abs(old))
    flat[j] = old + h
    up = f(*args)
    flat[j] = old - h
    down = f(*args)
    flat[j] = old
    return float((up - down) / (2.0 * h))


def fd_spot_error(
    f: Callable[..., float],
    args: list[Any],
    grads: list[np.ndarray],
    which: list[int],
    samples: int = 3,
) -> float:
    """Worst relative error, |fd - g| / max(1, |g|), of the gradients ``grads`` (of
    ``args[which[0]]``, ...) against central differences at ``samples`` coordinates of
    each, drawn with seed 1."""
    worst = 0.0
    rng = np.random.default_rng(1)
    for arg_index, g in zip(which, grads, strict=True):
        flat = args[arg_index].reshape(-1)
        for i in rng.choice(flat.size, size=min(samples, flat.size), replace=False):
            fd = central_difference(f, args, flat, i)
            exact = np.asarray(g).reshape(-1)[i]
            worst = max(worst, abs(fd - exact) / max(1.0, abs(exact)))
    return float(worst)


def best_time(fn: Callable[[], Any], repeats: int) -> float:
    """The shortest wall time of ``fn()`` over ``repeats`` runs after a warm-up call:
    what the code costs, where other processes share the CPUs."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def gradient_report_main(
    argv: list[str] | None,
    description: str,
    name: str,
    run: Callable[[bool], list[dict[str, Any]]],
    markdown: Callable[[list[dict[str, Any]], dict[str, Any]], str],
    versions: Callable[[], dict[str, str]],
) -> int:
    """The command line of a gradient/primal benchmark script: ``--quick`` and
    ``--out DIR`` (default ``benchmarks/results/``); ``run(quick)`` makes the rows,
    written with the date, machine, CPU count, Python, NumPy, Enzyme and
    ``versions()`` to ``name.json`` and, as ``markdown(rows, meta)``, to ``name.md``
    (and printed)."""
    import argparse
    import json
    import os
    import platform
    from pathlib import Path

    import enzyme_py as ez

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, few repeats")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    args = parser.parse_args(argv)
    rows = run(args.quick)
    meta = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()} {platform.processor()}".strip(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        **versions(),
        "enzyme": ez.info()["enzyme_version"],
        "quick": args.quick,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    table = markdown(rows, meta)
    (out / f"{name}.md").write_text(table)
    print(table)
    return 0


def launch_rows(run: Callable[[Any, int | None], Any], repeats: int) -> list[dict[str, Any]]:
    """Median times of ``run(device, threads)``, a kernel launch on host arrays: on the
    CPU device with one thread and with all cores, then on each CUDA GPU (transfers
    included)."""
    import os

    import enzyme_py as ez

    rows = [
        {
            "device": "cpu, 1 thread",
            "launch_s": median_time(lambda: run(ez.offload.CPU, 1), repeats),
        },
        {
            "device": f"cpu, {os.cpu_count()} threads",
            "launch_s": median_time(lambda: run(ez.offload.CPU, None), repeats),
        },
    ]
    for gpu in [d for d in ez.offload.devices() if d.is_gpu and d.can_launch]:
        rows.append(
            {
                "device": f"{gpu.name} (host arrays: transfers included)",
                "launch_s": median_time(lambda g=gpu: run(g, None), repeats),
            }
        )
    return rows


def write_launch_results(
    out: str, name: str, title: str, rows: list[dict[str, Any]], **meta: Any
) -> str:
    """Writes ``name.json`` (the rows, each a device and its median ``launch_s``, with
    ``meta`` plus the date, machine and CPU count) and ``name.md`` (``title`` over a
    table of the rows) to the folder ``out``; returns the table."""
    import json
    import os
    import platform
    from pathlib import Path

    meta = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        **meta,
    }
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    lines = [
        f"{title} ({meta['date']}, {meta['cpus']} CPUs)",
        "",
        "| device | launch |",
        "|---|---:|",
    ]
    lines += [f"| {r['device']} | {1e3 * r['launch_s']:.3f} ms |" for r in rows]
    table = "\n".join(lines) + "\n"
    (folder / f"{name}.md").write_text(table)
    return table


def cpu_model() -> str:
    """The CPU's model name, for the benchmarks' machine line."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
