"""A fuzz run larger than the suite's: tests/fuzz_driver.py in child processes.

    python scripts/fuzz_run.py [--calls 10000] [--per-child 1000] [--split 0.3] [--seed S]

Each child makes ``--per-child`` random calls (tests/fuzz_driver.py: modes, activities,
widths, dtypes, layouts, overlaps, bad values; a fraction ``--split`` of them split-mode
calls: ez.ReverseSplit's halves, ez.vjp's pullback, the PyTorch bridge's backward), with
split mode and code unloading on as shipped (enzyme_py._api.SPLIT_MODE,
enzyme_py._build.UNLOAD_CODE). A child that dies is a crash; its last case is read from
its trace file. Prints one JSON object: the totals, the failures by kind (writes outside
the guard bytes, wrong numbers against central differences, untyped errors, refusals that
name nothing, wrong acceptances), per-kind-of-case counts, crashes, the first failures.
Not a unit test (minutes); tests/test_fuzz.py runs a bounded number in the suite.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DRIVER = Path(__file__).resolve().parent.parent / "tests" / "fuzz_driver.py"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=10000)
    ap.add_argument("--per-child", type=int, default=1000)
    ap.add_argument("--split", type=float, default=0.3)
    ap.add_argument("--seed", type=int, default=20261202)
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per child")
    opts = ap.parse_args()
    totals = {"ok": 0, "refused": 0, "failed": 0}
    kinds: dict[str, int] = {}
    crashes: list[str] = []
    failures: list[str] = []
    started = time.monotonic()
    children = (opts.calls + opts.per_child - 1) // opts.per_child
    with tempfile.TemporaryDirectory() as tmp:
        for c in range(children):
            seed = opts.seed + c
            n = min(opts.per_child, opts.calls - c * opts.per_child)
            trace = Path(tmp) / f"trace-{seed}"
            env = {**os.environ, "FUZZ_TRACE": str(trace)}
            t0 = time.monotonic()
            try:
                proc = subprocess.run(
                    [sys.executable, str(DRIVER), str(seed), str(n), str(opts.split)],
                    capture_output=True,
                    text=True,
                    timeout=opts.timeout,
                    env=env,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                crashes.append(f"seed {seed}: timed out after {opts.timeout} s")
                continue
            last = trace.read_text().splitlines()[-1:] if trace.exists() else []
            if proc.returncode != 0:
                crashes.append(
                    f"seed {seed}: exit {proc.returncode} at case {last}: {proc.stderr[-800:]}"
                )
                continue
            report = json.loads(proc.stdout.strip().splitlines()[-1])
            for k, v in report["counts"].items():
                totals[k] += v
            for k, v in report["kinds"].items():
                kinds[k] = kinds.get(k, 0) + v
            failures += [f"seed {seed}: {f}" for f in report["failures"]]
            print(
                f"child {c + 1}/{children} seed {seed}: {report['counts']} "
                f"({time.monotonic() - t0:.0f} s)",
                file=sys.stderr,
                flush=True,
            )
    print(
        json.dumps(
            {
                "calls": sum(totals.values()),
                "children": children,
                "split_fraction": opts.split,
                "seconds": round(time.monotonic() - started),
                "totals": totals,
                "kinds": dict(sorted(kinds.items())),
                "crashes": crashes,
                "failures": failures[:40],
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
