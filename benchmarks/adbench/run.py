"""``python -m benchmarks.adbench [--quick] [--out DIR] [--only gmm,ba,hand,lstm]``.

For each ADBench objective: the C++ primal (``ez.cpp``) and enzyme_py's derivative of
it, for GMM and BA also the Numba primal and its derivative (GMM also the prange
variant, on all Numba threads), JAX and PyTorch (each
skipped when not installed, or with ``BENCH_DISABLE=jax,torch``), every derivative
checked against enzyme_py's C++ one; median times, derivative/primal ratios and the
build time of each derivative (its first call, Enzyme and codegen, minus a later call;
the disk cache is a fresh folder, so nothing is reused from an earlier run). Writes
``adbench.json`` and ``adbench.md`` to ``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import cpu_model

OBJECTIVES = ("gmm", "ba", "hand", "lstm")
WHAT = {
    "gmm": "gradient (reverse)",
    "ba": "per-observation Jacobian blocks (forward: 15 lanes, 3 calls of width 5)",
    "hand": "Jacobian, 26 columns (forward: 2 calls of width 13)",
    "lstm": "gradient (reverse)",
}


def _time(fn: Callable[[], Any], budget_s: float, quick: bool) -> tuple[float, float]:
    """(median, best) seconds of ``fn()`` after a warm-up call, over as many runs as fit
    in ``budget_s`` (3 to 50; 3 when quick)."""
    start = time.perf_counter()
    fn()
    once = max(time.perf_counter() - start, 1e-7)
    repeats = 3 if quick else int(min(50, max(3, budget_s / once)))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times)), float(np.min(times))


def _flat(result: Any) -> np.ndarray:
    if isinstance(result, (list, tuple)):
        return np.concatenate([np.ravel(np.asarray(r, dtype=np.float64)) for r in result])
    return np.ravel(np.asarray(result, dtype=np.float64))


def _ba_blocks(result: Any) -> np.ndarray:
    """enzyme_py's (tangents (15, p, 2), dw_err) as JAX's ((p, 2, 15), dw_err)."""
    terr, dw = result
    return _flat([np.transpose(terr, (1, 2, 0)), dw])


def _agrees(got: np.ndarray, want: np.ndarray) -> float:
    scale = max(float(np.max(np.abs(want))), 1e-300)
    return float(np.max(np.abs(got - want))) / scale


def _inputs(name: str, size: Any) -> dict[str, Any]:
    from benchmarks.adbench import data

    if name == "gmm":
        a, mu, icf, x, gamma, m = data.gmm_inputs(size.d, size.k, size.n)
        return {"alphas": a, "means": mu, "icf": icf, "x": x, "gamma": gamma, "m": m}
    if name == "ba":
        return data.ba_inputs(size.n, size.m, size.p)
    if name == "hand":
        return data.hand_inputs(size.verts_per_bone, size.n_corr)
    return data.lstm_inputs(size.l, size.c, size.b)


def _contenders(name: str, inp: dict[str, Any], disabled: set[str]) -> dict[str, Any]:
    """name -> (primal, derivative, (build_s, build_cpu_s, primal_compile_s or None)) or a
    skip reason (str)."""
    from benchmarks.adbench import contenders as ct
    from benchmarks.adbench import enzyme_impl as ei

    hand_keys = (
        "theta",
        "parents",
        "base_relatives",
        "inverse_base_absolutes",
        "base_positions",
        "weights",
        "correspondences",
        "points",
    )
    if name == "gmm":
        args: tuple[Any, ...] = tuple(inp[k] for k in ("alphas", "means", "icf", "x", "gamma", "m"))
        ours = {
            "enzyme_py C++": ei.make_gmm_cpp,
            "enzyme_py Numba": ei.make_gmm_numba,
            "enzyme_py Numba prange": ei.make_gmm_numba_prange,
        }
        others = {"JAX": ct.jax_gmm, "PyTorch": ct.torch_gmm}
    elif name == "ba":
        args = tuple(inp[k] for k in ("cams", "X", "w", "obs", "feats"))
        ours = {"enzyme_py C++": ei.make_ba_cpp, "enzyme_py Numba": ei.make_ba_numba}
        others = {"JAX": ct.jax_ba, "PyTorch": ct.torch_ba}
    elif name == "hand":
        args = tuple(inp[k] for k in hand_keys)
        ours = {"enzyme_py C++": ei.make_hand_cpp}
        others = {"JAX": lambda *_: ct.jax_hand(inp), "PyTorch": lambda *_: ct.torch_hand(inp)}
    else:
        args = tuple(inp[k] for k in ("main_params", "extra_params", "state", "sequence"))
        ours = {"enzyme_py C++": ei.make_lstm_cpp}
        others = {"JAX": ct.jax_lstm, "PyTorch": ct.torch_lstm}
    out: dict[str, Any] = {}
    for label, make in ours.items():
        c = make(*args)
        out[label] = (c.primal, c.derivative, (c.build_s, c.build_cpu_s, c.primal_compile_s))
    for label, make in others.items():
        key = "jax" if label == "JAX" else "torch"
        if key in disabled:
            out[label] = "disabled (BENCH_DISABLE)"
            continue
        try:
            start = ei.clock()
            primal, derivative = make(*args)
            derivative()
            end = ei.clock()
        except ImportError as exc:
            out[label] = f"not installed ({exc})"
            continue
        out[label] = (primal, derivative, (end[0] - start[0], end[1] - start[1], None))
    return out


def run(quick: bool, only: tuple[str, ...], out_dir: Path) -> dict[str, Any]:
    import enzyme_py as ez
    from benchmarks.adbench import data
    from benchmarks.adbench import enzyme_impl as ei

    disabled = {s.strip() for s in os.environ.get("BENCH_DISABLE", "").split(",") if s.strip()}
    sizes = data.SIZES["quick" if quick else "full"]
    env = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "load_average_start": list(os.getloadavg()),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "enzyme_py": getattr(ez, "__version__", "?"),
        "quick": quick,
    }
    for mod in ("numba", "jax", "torch"):
        try:
            env[mod] = __import__(mod).__version__
        except ImportError:
            env[mod] = None
    start = time.perf_counter()
    ei.cpp_module()
    env["cpp_compile_s"] = time.perf_counter() - start
    budget = 0.05 if quick else 1.0
    results: dict[str, Any] = {}
    for name in only:
        size = sizes[name]
        inp = _inputs(name, size)
        rows: dict[str, Any] = {}
        conts = _contenders(name, inp, disabled)
        reference = None
        for label, c in conts.items():
            if isinstance(c, str):
                rows[label] = {"skipped": c}
                continue
            primal, derivative, (build_s, build_cpu_s, primal_compile_s) = c
            value = derivative()
            flat = (
                _ba_blocks(value) if (name == "ba" and label.startswith("enzyme")) else _flat(value)
            )
            if reference is None:
                reference = flat
            error = _agrees(flat, reference)
            if not error < 1e-6:
                raise SystemExit(
                    f"adbench {name}: {label}'s derivative disagrees with "
                    f"enzyme_py C++'s (relative error {error:.2e})"
                )
            primal_s, primal_best_s = _time(primal, budget, quick)
            derivative_s, derivative_best_s = _time(derivative, budget, quick)
            row = {
                # the table shows the best: on a loaded machine the median is mostly
                # how often another process got the core
                "primal_s": primal_best_s,
                "derivative_s": derivative_best_s,
                "primal_median_s": primal_s,
                "derivative_median_s": derivative_s,
                # ours: ez.autodiff + first call - a later call; theirs: the first call
                "build_s": build_s,
                "build_cpu_s": build_cpu_s,
                # a Numba objective's own first call, before ez.autodiff (Numba's compile)
                "primal_compile_s": primal_compile_s,
                "relative_error_vs_cpp": error,
            }
            row["ratio"] = row["derivative_s"] / row["primal_s"]
            rows[label] = row
        results[name] = {"size": vars(size), "what": WHAT[name], "rows": rows}
    env["load_average_end"] = list(os.getloadavg())
    report = {"environment": env, "results": results}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "adbench.json").write_text(json.dumps(report, indent=2))
    table = markdown(report)
    (out_dir / "adbench.md").write_text(table)
    return report


def _ms(s: float) -> str:
    return f"{1e3 * s:.3g} ms" if s >= 1e-4 else f"{1e6 * s:.3g} µs"


def markdown(report: dict[str, Any]) -> str:
    env = report["environment"]
    lines = [
        f"ADBench objectives ({env['date']}; {env['cpu']}, {env['cpus']} CPUs; load average "
        f"{env['load_average_start'][0]:.2f} at the start, {env['load_average_end'][0]:.2f} "
        f"at the end; `ez.cpp` of the four objectives {env['cpp_compile_s']:.2f} s"
        + ("; --quick sizes" if env["quick"] else "")
        + ")",
        "",
        "Times: the best of several calls (3 to 50, about a second's worth; the medians "
        "are in the JSON file). "
        "Build: enzyme_py's is `ez.autodiff` plus the first call minus a later call, with a "
        "fresh disk cache, after the objective's own first call (for Numba its compile, "
        "shown beside: what running the function costs, which the derivative does not "
        "repeat); JAX's and PyTorch's is their first call (tracing, compiling). "
        "CPU: this process and its children (Enzyme builds in a forked child), which the "
        "load of the machine inflates less than the wall time.",
        "",
        "| objective | contender | primal | derivative | derivative / primal "
        "| build: wall (CPU) | C++ enzyme_py vs this |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for name, res in report["results"].items():
        size = ", ".join(f"{k}={v}" for k, v in res["size"].items())
        ours = res["rows"].get("enzyme_py C++", {})
        for label, row in res["rows"].items():
            head = f"{name.upper()} ({size}): {res['what']}"
            if "skipped" in row:
                lines.append(f"| {head} | {label} | | | | | {row['skipped']} |")
                continue
            build = f"{row['build_s']:.2f} s ({row['build_cpu_s']:.2f} s)"
            if row.get("primal_compile_s") is not None:
                build += f"; Numba's compile before: {row['primal_compile_s']:.2f} s"
            if label == "enzyme_py C++":
                versus = ""
            else:
                r = row["derivative_s"] / ours["derivative_s"]
                versus = f"{r:.2f}x faster" if r >= 1 else f"{1 / r:.2f}x slower"
            lines.append(
                f"| {head} | {label} | {_ms(row['primal_s'])} | {_ms(row['derivative_s'])} | "
                f"{row['ratio']:.2f} | {build} | {versus} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.adbench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "results"))
    parser.add_argument("--only", default=",".join(OBJECTIVES))
    args = parser.parse_args(argv)
    only = tuple(s for s in args.only.split(",") if s)
    unknown = set(only) - set(OBJECTIVES)
    if unknown:
        parser.error(f"unknown objectives {sorted(unknown)}; choose from {OBJECTIVES}")
    report = run(args.quick, only, Path(args.out))
    sys.stdout.write(markdown(report))
    return 0


def fresh_cache() -> None:
    """A fresh disk cache for this process, so build times are first builds."""
    import atexit
    import shutil

    folder = tempfile.mkdtemp(prefix="adbench-cache-")
    atexit.register(shutil.rmtree, folder, True)
    os.environ["ENZYME_PY_CACHE_DIR"] = folder
