"""The run's environment, and the reports: markdown table and chart."""

from __future__ import annotations

import datetime
import importlib.metadata
import math
import os
import platform
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import cpu_model
from benchmarks.suite.table import CONTENDERS, OWN_PRIMAL


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _numba_threads() -> int | str:
    try:
        import numba

        return int(numba.config.NUMBA_NUM_THREADS)
    except ImportError:
        return "?"


def load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def environment(
    libraries: dict[str, dict[str, Any]], quick: bool, load_at_start: float | None
) -> dict[str, Any]:
    import enzyme_py as ez

    info = ez.info()
    cores = os.cpu_count() or 1
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        usable = cores
    versions: dict[str, Any] = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": _version("numba"),
        "enzyme_py": getattr(ez, "__version__", None),
        "enzyme": info.get("enzyme_version"),
        "llvm": info.get("llvm_version"),
    }
    for library, answer in libraries.items():
        if answer["ok"]:
            versions |= answer["versions"]
        else:
            versions[library] = f"skipped ({answer['reason']})"
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "quick": quick,
        "cpu": cpu_model(),
        "machine": platform.machine(),
        "platform": platform.platform(),
        "cpu_count": cores,
        "usable_cores": usable,
        "versions": versions,
        "threads": (
            "Numba and enzyme_py: 1 thread (the prange rows' Numba primal: Numba's "
            f"{_numba_threads()} threads; their 'enzyme_py reverse' row: ez.grad's "
            f"default, Numba's {_numba_threads()} threads where a prange body has a loop "
            "of its own or the prange loops run once per call, else 1; their "
            f"'enzyme_py reverse, threads=' row: threads={cores}, its shadows zeroed "
            "by the caller); PyTorch: torch.set_num_threads("
            f"{cores}); JAX: XLA CPU client defaults (all cores)"
        ),
        "enzyme_py_ad": bool(info.get("autodiff")),
        "load_average_1min": {"start": load_at_start, "end": load_average()},
    }


def fmt_time(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-"
    if seconds < 0:  # a difference of noisy times ("less one call")
        return "-" + fmt_time(-seconds)
    if seconds >= 1.0:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    if seconds >= 1e-6:
        return f"{seconds * 1e6:.3g} µs"
    return f"{seconds * 1e9:.3g} ns"


def _fmt_ratio(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:.3g}"


def _fmt_load(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _fmt_mib(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _sources_text(sources: list[str]) -> str:
    """'Enzyme (isolated) x3, disk cache' from the log's list of derivative sources."""
    counts: dict[str, int] = {}
    for source in sources:
        counts[source] = counts.get(source, 0) + 1
    return ", ".join(f"{s} x{n}" if n > 1 else s for s, n in counts.items()) or "-"


def markdown(results: dict[str, Any]) -> str:
    env = results["environment"]
    v = env["versions"]
    load = env["load_average_1min"]
    busy = (
        " (other processes were running: times, above all multi-threaded JAX and PyTorch "
        "ones, are disturbed)"
        if (load["start"] or 0.0) > 0.5
        else ""
    )
    version_text = ", ".join(f"{k} {val}" for k, val in v.items() if val is not None)
    lines = [
        "# enzyme_py against JAX, PyTorch and finite differences",
        "",
        f"- date: {env['date']}{' (--quick: tiny sizes)' if env['quick'] else ''}",
        f"- machine: {env['cpu']} ({env['machine']}), {env['cpu_count']} cores "
        f"({env['usable_cores']} usable), {env['platform']}",
        f"- versions: {version_text}",
        f"- threads: {env['threads']}",
        f"- load average (1 min) before the run: {_fmt_load(load['start'])}{busy}; at the "
        f"end (the suite's own children included): {_fmt_load(load['end'])}",
        "",
        "Times are medians of at least 5 samples after warm-up, per derivative (or primal) "
        "call. `/ primal`: time / Numba primal time (the Cython and C rows: `(r own)`, "
        "gradient time / the same kernel's Cython or C primal time). `enzyme_py / this`: "
        "enzyme_py's time (reverse; forward for the JVP) / this contender's (< 1: "
        "enzyme_py is faster). "
        "`first call`: the first call in a fresh process (tracing, compiling). "
        "`MiB per call`: the resident memory one more call takes at its peak, after the "
        "C heap's free memory was handed back (`malloc_trim`) and the high-water mark "
        "reset: its result and temporaries, in the contender's own process, plus for "
        "enzyme_py the most its tape stack held (kept between calls). `peak MiB`: "
        "ru_maxrss growth of that process over its baseline, first call (compiling) "
        "included. `error`: max |a - b| / max |b| against the contender named.",
        "",
        "| kernel | contender | time | / primal | enzyme_py / this | first call | "
        "MiB per call | peak MiB | checked against | error |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for k in results["kernels"].values():
        title = f"**{k['title']}**: {k['derivative']}"
        for e in k["contenders"].values():
            label = e["label"]
            if e["status"] != "ok":
                lines.append(
                    f"| {title} | {label} | {e['status'].replace('_', ' ')}: {e['reason']} "
                    "| | | | | | | |"
                )
                title = ""
                continue
            mem = e.get("memory", {})
            check = e.get("check", {})
            against = check.get("against") or ("(reference)" if e["role"] == "primal" else "-")
            error = check.get("max_rel_error")
            error_text = "-" if error is None else f"{error:.1e}"
            if check and not check.get("ok"):
                error_text += " FAILED"
            vc = e.get("value_check")
            if vc is not None:
                error_text += f" (value {vc['rel_error']:.0e})"
            cells = [
                title,
                label,
                fmt_time(e["time_s"]),
                _fmt_ratio(e.get("over_primal"))
                + (f" ({_fmt_ratio(e['over_own_primal'])} own)" if "over_own_primal" in e else ""),
                _fmt_ratio(e.get("enzyme_py_over_this")),
                fmt_time(e.get("first_call_s")),
                _fmt_mib(mem.get("per_call_mib")),
                _fmt_mib(mem.get("peak_mib")),
                against,
                error_text,
            ]
            lines.append("| " + " | ".join(cells) + " |")
            title = ""
    lines += [
        "",
        "## enzyme_py first-call latency",
        "",
        "First derivative call in a fresh process (the Numba primal already compiled): "
        "with an empty disk cache, and in new processes with that cache filled (the "
        "median of three; one with --quick). "
        "`from`: where enzyme_py's log (`ENZYME_PY_LOG=1`) says each derivative requested "
        "in that process came from (the first process also made the timed calls: a "
        "count above 1 means derivatives were built again for later calls). "
        "`less one call`: the filled-cache first call minus the row's time per call "
        "(what loading the derivative cost beyond running it).",
        "",
        "| kernel | contender | empty disk cache | from | filled disk cache, new processes "
        "| less one call | from |",
        "|---|---|---:|---|---:|---:|---|",
    ]
    for k in results["kernels"].values():
        for e in k["contenders"].values():
            if e["library"] != "enzyme_py" or e["status"] != "ok":
                continue
            again = e.get("compile_new_process", {})
            filled = again.get("first_call_s")
            beyond = None if filled is None else filled - e["time_s"]
            lines.append(
                f"| {k['title']} | {e['label']} | {fmt_time(e.get('first_call_s'))} "
                f"| {_sources_text(e.get('first_call_sources', []))} "
                f"| {fmt_time(filled)} | {fmt_time(beyond)} "
                f"| {_sources_text(again.get('sources', [])) or again.get('reason', '-')} |"
            )
    if results["failures"]:
        lines += ["", "## Failures", ""] + [f"- {f}" for f in results["failures"]]
    lines += [
        "",
        "Method: the docstring of `benchmarks/suite/__init__.py` "
        "(each contender in its own child process; per-call memory = that child's "
        "VmHWM during one call minus its VmRSS before it, after malloc_trim; peak = "
        "ru_maxrss of that child minus its ru_maxrss once it had imported its libraries "
        "and built its inputs).",
    ]
    return "\n".join(lines) + "\n"


def chart(results: dict[str, Any], path: Path) -> str | None:
    """Bar chart of derivative time / primal time; returns why not, if not written."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        return f"matplotlib is not importable: {exc}"
    kernels = list(results["kernels"].values())
    names = [n for n in CONTENDERS if n != "numba_primal" and n not in OWN_PRIMAL.values()]
    present = [
        n
        for n in names
        if any(k["contenders"].get(n, {}).get("over_primal") is not None for k in kernels)
    ]
    fig, ax = plt.subplots(figsize=(max(8.0, 2.2 * len(kernels)), 5.0))
    width = 0.8 / max(1, len(present))
    for j, name in enumerate(present):
        xs, ys = [], []
        for i, k in enumerate(kernels):
            ratio = k["contenders"].get(name, {}).get("over_primal")
            if ratio is not None and ratio > 0:
                xs.append(i - 0.4 + width * (j + 0.5))
                ys.append(ratio)
        bars = ax.bar(xs, ys, width=width, label=CONTENDERS[name].label)
        ax.bar_label(bars, labels=[f"{y:.3g}" for y in ys], fontsize=6, padding=1)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(kernels)))
    ax.set_xticklabels([k["title"] for k in kernels], rotation=15, ha="right", fontsize=8)
    ax.set_ylabel("derivative time / Numba primal time")
    quick = " (--quick)" if results["environment"]["quick"] else ""
    ax.set_title(f"Derivative cost relative to the primal{quick}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None
