"""Compile latency and call overhead of an enzyme_py derivative.

Usage::

    python benchmarks/compile_and_call.py [--quick] [--out DIR]

What is measured, and how:

Compile latency, for ``double f(double x) { return x*x*sin(x); }`` made with
``ez.c(...)`` and differentiated with ``ez.autodiff(f, ez.Reverse, ez.Active, ez.Active)``.
Each measurement runs in a child Python process (``sys.executable``) that times,
with ``time.perf_counter``, only the call in question and prints the result:

- ``ez.c(...)``: the clang-15 compile of the source to LLVM IR (and its parsing);
- (a) the first ``ez.autodiff`` request in a fresh process with an empty disk cache
  (a new temporary ``ENZYME_PY_CACHE_DIR``): Enzyme, the optimizer and the JIT, with
  Enzyme run in a forked child as by default;
- (b) the same request again in that process: the in-memory cache;
- (c) the same request in a new process, with the disk cache (a) filled: object
  code read from disk and loaded into the JIT;
- (a) again with ``ENZYME_PY_ISOLATE=0``: Enzyme run in the process itself.

First calls of a Numba kernel's gradient (Rosenbrock, n=1000, ``@numba.njit``), each in
a child process: the primal's own first call (Numba's compile), then the first
derivative (``ez.autodiff`` and its first call) with an empty disk cache and, in a new
process, with the disk cache filled (served without compiling the Numba function a
second time: the cache is keyed on the code, see frontends/_numba_identity.py); next
to them JAX's first ``jax.jit(jax.grad(f))`` call on the same kernel (row left out
when JAX is not installed).

Each trial uses fresh cache folders; the tables show the median (and minimum)
over the trials. ``ENZYME_PY_LOG=1`` is set in the children so that the source
each derivative came from (Enzyme, disk cache) is recorded next to its time.

Call overhead, in this process, with ``timeit`` (median over at least 5 repeats
of the per-call time): the derivative call ``df(3.0, 1.0)``; the reverse
derivative of ``double dot(const double *a, const double *b, int n)`` with
activities Duplicated, Const, Const, Active called on n=4 arrays,
``ddot(a, da, b, 4, 1.0)``. Reference points: a plain Python call of
``lambda x: x``, the NumPy ufunc call ``np.sin(3.0)`` and ``np.dot(a, b)`` on the
same arrays. (enzyme_py has no path that calls the primal alone.)

Results go to ``compile_and_call.json`` and ``compile_and_call.md`` in ``--out``
(default ``benchmarks/results/``); the Markdown table is also printed. Nothing
here asserts anything about the times.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import enzyme_py as ez

SCALAR_SOURCE = """
#include <math.h>
double f(double x) { return x * x * sin(x); }
"""

DOT_SOURCE = """
double dot(const double *a, const double *b, int n) {
    double s = 0.0;
    for (int i = 0; i < n; ++i) s += a[i] * b[i];
    return s;
}
"""

# Run in a child process: times ez.c, the first ez.autodiff request and the same
# request again, and prints one line "RESULT <json>".
CHILD_CODE = """
import json, sys, time
import enzyme_py as ez

source = sys.argv[1]
t0 = time.perf_counter()
module = ez.c(source)
t1 = time.perf_counter()
df = ez.autodiff(module.f, ez.Reverse, ez.Active, ez.Active)
t2 = time.perf_counter()
df_again = ez.autodiff(module.f, ez.Reverse, ez.Active, ez.Active)
t3 = time.perf_counter()
value, adjoint = df(3.0, 1.0)
again = df_again(3.0, 1.0)
print("RESULT " + json.dumps({
    "c_s": t1 - t0,
    "autodiff_s": t2 - t1,
    "autodiff_again_s": t3 - t2,
    "result": [value, adjoint],
    "same_result": list(again) == [value, adjoint],
}))
"""

# First calls of a Numba kernel's gradient in a child process: the primal's own first
# call (Numba's compile), then the first derivative (ez.autodiff and its first call).
# Prints one line "RESULT <json>". Imports are not timed.
NUMBA_CHILD_CODE = """
import json, sys, time
import numpy as np
import numba
import enzyme_py as ez

@numba.njit
def rosenbrock(x):
    s = 0.0
    for i in range(x.shape[0] - 1):
        s += 100.0 * (x[i + 1] - x[i] * x[i]) ** 2 + (1.0 - x[i]) ** 2
    return s

x = np.linspace(-1.0, 1.0, 1000)
dx = np.zeros_like(x)
t0 = time.perf_counter()
value = rosenbrock(x)
t1 = time.perf_counter()
ez.autodiff(rosenbrock, ez.Reverse, ez.Duplicated, ez.Active)(x, dx, 1.0)
t2 = time.perf_counter()
print("RESULT " + json.dumps({
    "primal_first_call_s": t1 - t0,
    "derivative_first_s": t2 - t1,
    "gradient_sum": float(dx.sum()),
}))
"""

# The same kernel's first jax.jit(jax.grad(.)) call, in a child process (imports untimed).
JAX_CHILD_CODE = """
import json, time
import numpy as np
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp

def rosenbrock(x):
    return jnp.sum(100.0 * (x[1:] - x[:-1] * x[:-1]) ** 2 + (1.0 - x[:-1]) ** 2)

x = jnp.asarray(np.linspace(-1.0, 1.0, 1000))
t0 = time.perf_counter()
g = jax.jit(jax.grad(rosenbrock))(x).block_until_ready()
t1 = time.perf_counter()
print("RESULT " + json.dumps({"jit_grad_first_call_s": t1 - t0, "gradient_sum": float(g.sum())}))
"""

NUMBA_ROWS: tuple[tuple[str, str], ...] = (
    ("primal_first_call", "Numba primal's own first call (its compile), fresh process"),
    (
        "first_derivative_empty_disk_cache",
        "first derivative (autodiff + first call), fresh process, empty disk cache",
    ),
    (
        "first_derivative_filled_disk_cache",
        "first derivative, new process, filled disk cache (beyond the primal's first call)",
    ),
    ("jax_jit_grad_first_call", "JAX `jit(grad)` first call, fresh process"),
)

# Environment variables of enzyme_py that would change what a child measures.
_CONTROLLED = ("ENZYME_PY_CACHE_DIR", "ENZYME_PY_DISK_CACHE", "ENZYME_PY_ISOLATE", "ENZYME_PY_LOG")

COMPILE_ROWS: tuple[tuple[str, str], ...] = (
    ("c_compile", "`ez.c(...)` (clang-15 to LLVM IR), fresh process"),
    ("first_request_empty_disk_cache", "(a) first `ez.autodiff`, fresh process, empty disk cache"),
    ("same_request_same_process", "(b) same request again, same process (memory cache)"),
    ("new_process_filled_disk_cache", "(c) same request, new process, filled disk cache"),
    (
        "first_request_empty_disk_cache_in_process",
        "(a) with `ENZYME_PY_ISOLATE=0` (Enzyme in the process itself)",
    ),
)


def _child_env(cache_dir: Path, isolate: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _CONTROLLED}
    env["ENZYME_PY_CACHE_DIR"] = str(cache_dir)
    env["ENZYME_PY_LOG"] = "1"
    if not isolate:
        env["ENZYME_PY_ISOLATE"] = "0"
    return env


def _derivative_source(stderr: str) -> str:
    """Where the log says the derivative came from ('unknown' if it does not say)."""
    for line in stderr.splitlines():
        if "from disk cache" in line:
            return "disk cache"
        if "from Enzyme (isolated)" in line:
            return "Enzyme (isolated)"
        if "from Enzyme" in line:
            return "Enzyme"
    return "unknown"


def run_child(
    cache_dir: Path,
    isolate: bool = True,
    timeout: float = 300.0,
    code: tuple[str, ...] = (CHILD_CODE, SCALAR_SOURCE),
) -> dict[str, Any]:
    """One child process: its timings, and the source of its first derivative."""
    proc = subprocess.run(
        [sys.executable, "-c", *code],
        capture_output=True,
        text=True,
        env=_child_env(cache_dir, isolate),
        timeout=timeout,
        check=False,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(
            f"the benchmark child failed (exit code {proc.returncode}):\n"
            f"{proc.stdout}\n{proc.stderr}"
        )
    result: dict[str, Any] = json.loads(lines[-1][len("RESULT ") :])
    result["source"] = _derivative_source(proc.stderr)
    return result


def _summary(samples: list[float], sources: list[str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "median_s": statistics.median(samples),
        "min_s": min(samples),
        "samples_s": samples,
    }
    if sources is not None:
        out["sources"] = sorted(set(sources))
    return out


def measure_compile(trials: int) -> dict[str, dict[str, Any]]:
    """Compile latency scenarios, each over `trials` runs with fresh cache folders."""
    samples: dict[str, list[float]] = {name: [] for name, _ in COMPILE_ROWS}
    sources: dict[str, list[str]] = {name: [] for name, _ in COMPILE_ROWS[1:]}
    for _ in range(trials):
        with tempfile.TemporaryDirectory(prefix="enzyme_py_bench_") as tmp:
            isolated_cache = Path(tmp) / "isolated"
            in_process_cache = Path(tmp) / "in_process"
            first = run_child(isolated_cache, isolate=True)
            again = run_child(isolated_cache, isolate=True)
            in_process = run_child(in_process_cache, isolate=False)
        for child in (first, again, in_process):
            samples["c_compile"].append(child["c_s"])
        samples["first_request_empty_disk_cache"].append(first["autodiff_s"])
        sources["first_request_empty_disk_cache"].append(first["source"])
        samples["same_request_same_process"].append(first["autodiff_again_s"])
        sources["same_request_same_process"].append("memory cache")
        samples["new_process_filled_disk_cache"].append(again["autodiff_s"])
        sources["new_process_filled_disk_cache"].append(again["source"])
        samples["first_request_empty_disk_cache_in_process"].append(in_process["autodiff_s"])
        sources["first_request_empty_disk_cache_in_process"].append(in_process["source"])
    return {
        name: _summary(samples[name], sources.get(name)) | {"description": text}
        for name, text in COMPILE_ROWS
    }


def measure_numba_first_calls(trials: int) -> dict[str, dict[str, Any]]:
    """First calls of a Numba kernel's gradient (empty and filled disk cache) and of
    JAX's jit(grad) on the same kernel, each over `trials` fresh processes."""
    samples: dict[str, list[float]] = {name: [] for name, _ in NUMBA_ROWS}
    sources: dict[str, list[str]] = {name: [] for name, _ in NUMBA_ROWS}
    try:
        import jax  # noqa: F401

        has_jax = True
    except ImportError:
        has_jax = False
    for _ in range(trials):
        with tempfile.TemporaryDirectory(prefix="enzyme_py_bench_") as tmp:
            first = run_child(Path(tmp), code=(NUMBA_CHILD_CODE,))
            again = run_child(Path(tmp), code=(NUMBA_CHILD_CODE,))
            if has_jax:
                jax_run = run_child(Path(tmp), code=(JAX_CHILD_CODE,))
                samples["jax_jit_grad_first_call"].append(jax_run["jit_grad_first_call_s"])
                sources["jax_jit_grad_first_call"].append("jax")
        for child in (first, again):
            samples["primal_first_call"].append(child["primal_first_call_s"])
        sources["primal_first_call"].append("numba")
        samples["first_derivative_empty_disk_cache"].append(first["derivative_first_s"])
        sources["first_derivative_empty_disk_cache"].append(first["source"])
        samples["first_derivative_filled_disk_cache"].append(again["derivative_first_s"])
        sources["first_derivative_filled_disk_cache"].append(again["source"])
    return {
        name: _summary(samples[name], sources[name]) | {"description": text}
        for name, text in NUMBA_ROWS
        if samples[name]
    }


def _time_call(stmt: str, namespace: dict[str, Any], quick: bool, repeat: int) -> dict[str, Any]:
    """Median and minimum per-call time of `stmt` over `repeat` timeit repeats."""
    timer = timeit.Timer(stmt, globals=namespace)
    if quick:
        number = 2000
    else:
        number, _ = timer.autorange()  # at least 0.2 s per repeat
        number = max(number, 10_000)
    per_call = [t / number for t in timer.repeat(repeat=repeat, number=number)]
    return {
        "median_s": statistics.median(per_call),
        "min_s": min(per_call),
        "number": number,
        "repeat": repeat,
        "samples_s": per_call,
    }


def measure_calls(quick: bool) -> dict[str, dict[str, Any]]:
    """Per-call overhead of derivative calls and of reference calls."""
    scalar = ez.c(SCALAR_SOURCE)
    df = ez.autodiff(scalar.f, ez.Reverse, ez.Active, ez.Active)
    dot = ez.c(DOT_SOURCE)
    ddot = ez.autodiff(dot.dot, ez.Reverse, ez.Duplicated, ez.Const, ez.Const, ez.Active)
    a = np.linspace(0.5, 2.0, 4)
    b = np.linspace(-1.0, 1.0, 4)
    da = np.zeros_like(a)
    ddot(a, da, b, 4, 1.0)  # warm: the first call may set up the native caller
    df(3.0, 1.0)

    identity: Callable[[float], float] = lambda x: x  # noqa: E731
    namespace: dict[str, Any] = {
        "df": df,
        "ddot": ddot,
        "identity": identity,
        "sin": np.sin,
        "np_dot": np.dot,
        "a": a,
        "b": b,
        "da": da,
    }
    cases: tuple[tuple[str, str, str], ...] = (
        ("python_lambda", "identity(3.0)", "plain Python call `(lambda x: x)(3.0)`"),
        ("numpy_sin_scalar", "sin(3.0)", "NumPy ufunc `np.sin(3.0)`"),
        ("df_scalar", "df(3.0, 1.0)", "derivative `df(3.0, 1.0)` of `x*x*sin(x)`"),
        ("numpy_dot_n4", "np_dot(a, b)", "`np.dot(a, b)`, n=4"),
        (
            "ddot_n4",
            "ddot(a, da, b, 4, 1.0)",
            "derivative of `dot(a, b, n)`, Duplicated/Const/Const/Active, n=4",
        ),
    )
    repeat = 5 if quick else 7
    results: dict[str, dict[str, Any]] = {}
    for name, stmt, description in cases:
        results[name] = _time_call(stmt, namespace, quick, repeat) | {
            "statement": stmt,
            "description": description,
        }
    return results


def environment() -> dict[str, Any]:
    info = ez.info()
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "processor": platform.processor(),
        "machine": platform.machine(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "enzyme_py": getattr(ez, "__version__", None),
        "enzyme_version": info.get("enzyme_version"),
        "llvm_version": info.get("llvm_version"),
    }


def _ms(seconds: float) -> str:
    return f"{1e3 * seconds:.3f}"


def _us(seconds: float) -> str:
    return f"{1e6 * seconds:.3f}"


def markdown(results: dict[str, Any]) -> str:
    env = results["environment"]
    lines = [
        "# enzyme_py: compile latency and call overhead",
        "",
        f"- date: {env['date']}{' (--quick)' if results['quick'] else ''}",
        f"- machine: {env['machine']}, processor: {env['processor'] or 'n/a'}, "
        f"CPUs: {env['cpu_count']}",
        f"- Python {env['python']}, NumPy {env['numpy']}, enzyme_py {env['enzyme_py']}, "
        f"Enzyme {env['enzyme_version']}, LLVM {env['llvm_version']}",
        "",
        "## Compile latency of `x*x*sin(x)`, Reverse: Active -> Active "
        f"({results['compile_trials']} trial(s))",
        "",
        "| what | median ms | min ms | derivative from |",
        "|---|---:|---:|---|",
    ]
    for name, _ in COMPILE_ROWS:
        row = results["compile"][name]
        source = ", ".join(row.get("sources", [])) or "-"
        lines.append(
            f"| {row['description']} | {_ms(row['median_s'])} | {_ms(row['min_s'])} | {source} |"
        )
    lines += [
        "",
        "## First calls of a Numba Rosenbrock gradient (n=1000), Reverse: Duplicated -> "
        f"Active, and JAX ({results['compile_trials']} trial(s))",
        "",
        "| what | median ms | min ms | from |",
        "|---|---:|---:|---|",
    ]
    for row in results["numba_first_call"].values():
        source = ", ".join(row.get("sources", [])) or "-"
        lines.append(
            f"| {row['description']} | {_ms(row['median_s'])} | {_ms(row['min_s'])} | {source} |"
        )
    lines += [
        "",
        "## Call overhead (timeit, median per-call time over the repeats)",
        "",
        "| call | median us | min us | x lambda call |",
        "|---|---:|---:|---:|",
    ]
    base = results["call"]["python_lambda"]["median_s"]
    for row in results["call"].values():
        ratio = row["median_s"] / base if base > 0 else float("nan")
        lines.append(
            f"| {row['description']} | {_us(row['median_s'])} | {_us(row['min_s'])} | {ratio:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="few repetitions: finishes in a few seconds"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parent / "results",
        help="folder for compile_and_call.json / .md (default: benchmarks/results/)",
    )
    args = parser.parse_args(argv)
    if not ez.has_autodiff():
        print(f"compile_and_call: enzyme_py has no AD here: {ez.info()['reason']}", file=sys.stderr)
        return 2

    # This process's own derivatives go to a throwaway disk cache, not the user's.
    own_cache = tempfile.mkdtemp(prefix="enzyme_py_bench_own_")
    os.environ["ENZYME_PY_CACHE_DIR"] = own_cache
    try:
        trials = 1 if args.quick else 5
        results: dict[str, Any] = {
            "benchmark": "compile_and_call",
            "quick": args.quick,
            "environment": environment(),
            "compile_trials": trials,
            "compile": measure_compile(trials),
            "numba_first_call": measure_numba_first_calls(trials),
            "call": measure_calls(args.quick),
        }
    finally:
        shutil.rmtree(own_cache, ignore_errors=True)

    table = markdown(results)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "compile_and_call.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.out / "compile_and_call.md").write_text(table)
    print(table, end="")
    print(f"\nwritten: {args.out / 'compile_and_call.json'}, {args.out / 'compile_and_call.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
