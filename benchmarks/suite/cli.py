"""``python -m benchmarks``'s command line."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.suite.checks import add_checks, add_ratios
from benchmarks.suite.child import child_main, probe_main
from benchmarks.suite.report import chart, environment, load_average, markdown
from benchmarks.suite.runner import map_items, probe_libraries, run_kernel, set_jobs
from benchmarks.suite.table import (
    AD_TOLERANCE,
    DEFAULT_OUT,
    FD_TOLERANCE,
    KERNELS,
    VALUE_TOLERANCE,
    apply_disable,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="enzyme_py against JAX, PyTorch and finite differences on its kernels",
        epilog="The method is described in the docstring of benchmarks/suite/__init__.py.",
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes: runs in seconds")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="results folder")
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="child processes at the same time (default: 1; 2 with --quick)",
    )
    parser.add_argument("--only", default="", help="comma-separated kernel names")
    parser.add_argument("--timeout", type=float, default=600.0, help="per child, seconds")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--probe", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child_main(args.child)
    if args.probe:
        return probe_main(*args.probe)

    apply_disable()
    selected = [k.strip() for k in args.only.split(",") if k.strip()] or list(KERNELS)
    unknown = [k for k in selected if k not in KERNELS]
    if unknown:
        parser.error(f"unknown kernel(s) {unknown}; choose from {list(KERNELS)}")
    jobs = args.jobs or (min(2, os.cpu_count() or 1) if args.quick else 1)

    import enzyme_py as ez

    enzyme_reason = None if ez.has_autodiff() else f"enzyme_py has no AD: {ez.info()['reason']}"
    set_jobs(jobs)
    parallel = jobs > 1
    started = time.perf_counter()
    load_at_start = load_average()
    work = Path(tempfile.mkdtemp(prefix="enzyme_py_suite_"))
    try:
        libraries = probe_libraries(work, parallel)

        def one(name: str) -> dict[str, Any]:
            return run_kernel(
                KERNELS[name], args.quick, libraries, enzyme_reason, work, args.timeout, parallel
            )

        kernel_results = dict(zip(selected, map_items(one, selected, parallel), strict=True))
        failures: list[str] = []
        for name, result in kernel_results.items():
            failures += add_checks(KERNELS[name], result)
            add_ratios(KERNELS[name], result)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    results: dict[str, Any] = {
        "benchmark": "suite",
        "environment": environment(libraries, args.quick, load_at_start),
        "tolerances": {"ad": AD_TOLERANCE, "fd": FD_TOLERANCE, "value": VALUE_TOLERANCE},
        "kernels": kernel_results,
        "failures": failures,
        "wall_s": time.perf_counter() - started,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    no_chart = chart(results, args.out / "suite.png")
    results["chart"] = "suite.png" if no_chart is None else f"not written: {no_chart}"
    (args.out / "suite.json").write_text(json.dumps(results, indent=2) + "\n")
    table = markdown(results)
    (args.out / "suite.md").write_text(table)
    print(table, end="")
    written = ["suite.json", "suite.md"] + (["suite.png"] if no_chart is None else [])
    print(f"\nwritten to {args.out}: {', '.join(written)} ({results['wall_s']:.0f} s)")
    if failures:
        print("FAILURES:\n" + "\n".join(failures), file=sys.stderr)
        return 1
    return 0
