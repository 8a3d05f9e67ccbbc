"""Child side: one contender of one kernel (``--child``), or one library's probe (``--probe``)."""

from __future__ import annotations

import importlib.metadata
import json
import resource
import statistics
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.suite.enzyme_setup import setup_enzyme
from benchmarks.suite.jax_torch_setup import setup_jax, setup_torch
from benchmarks.suite.memory import (
    enzyme_tape_mib,
    maxrss_mib,
    one_call_mib,
    reset_high_water_mark,
    status_kib,
)
from benchmarks.suite.numba_setup import fd_spot, setup_numba
from benchmarks.suite.setups import Setup, kernel_inputs, numba_function
from benchmarks.suite.table import CONTENDERS, apply_disable


def _time_calls(
    call: Callable[[], Any], estimate_s: float, timing: dict[str, float]
) -> tuple[list[float], int, Any]:
    """Per-call times of samples of `number` calls each, and the last call's result."""
    estimate_s = max(estimate_s, 1e-8)
    number = max(1, round(timing["sample_s"] / estimate_s))
    sample_s = number * estimate_s
    runs = int(min(timing["max_runs"], max(timing["min_runs"], timing["budget_s"] / sample_s)))
    samples = []
    result = None
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(number):
            result = call()
        samples.append((time.perf_counter() - start) / number)
    return samples, number, result


_SETUPS: dict[str, Callable[[str, dict[str, Any], str], Setup]] = {
    "numba": setup_numba,
    "enzyme_py": setup_enzyme,
    "jax": setup_jax,
    "torch": setup_torch,
}


def child_main(spec_path: str) -> int:
    """Run one contender of one kernel as ``spec`` says; write its JSON result."""
    spec = json.loads(Path(spec_path).read_text())
    out: dict[str, Any] = {"status": "ok"}
    try:
        disabled = apply_disable()
        library = CONTENDERS[spec["contender"]].library
        try:
            data = kernel_inputs(spec["kernel"], spec["sizes"])
            setup = _SETUPS[library](spec["kernel"], data, spec["contender"])
        except ImportError as exc:
            why = f"{library} is not importable: {exc}"
            if library in disabled:
                why += " (BENCH_DISABLE)"
            Path(spec["result"]).write_text(json.dumps({"status": "skipped", "reason": why}))
            return 0
        out["versions"] = setup.versions
        out["notes"] = setup.notes
        baseline = maxrss_mib()
        start = time.perf_counter()
        call = setup.make()
        result = call()
        out["first_call_s"] = time.perf_counter() - start
        memory: dict[str, Any] = {
            "baseline_maxrss_mib": baseline,
            "peak_first_call_mib": maxrss_mib() - baseline,
        }
        if not spec.get("first_call_only"):
            start = time.perf_counter()
            call()  # warm-up
            estimate = time.perf_counter() - start
            reset = reset_high_water_mark()
            rss_before = status_kib("VmRSS")
            samples, number, result = _time_calls(call, estimate, spec["timing"])
            hwm = status_kib("VmHWM")
            out["samples_s"] = samples
            out["number"] = number
            out["time_s"] = statistics.median(samples)
            # The reset of the high-water mark resets ru_maxrss too: the peak of the
            # whole measurement is the larger of the two readings.
            memory["peak_mib"] = max(memory["peak_first_call_mib"], maxrss_mib() - baseline)
            memory["steady_peak_mib"] = (
                (hwm - rss_before) / 1024.0
                if reset and hwm is not None and rss_before is not None
                else None
            )
            # The least of 3 readings (page faults of other work in the process, such
            # as a library's background threads, only add).
            readings = [one_call_mib(call) for _ in range(3)]
            pages = None if None in readings else min(r for r in readings if r is not None)
            memory["per_call_new_pages_mib"] = pages
            tape = enzyme_tape_mib() if library == "enzyme_py" else None
            memory["tape_mib"] = tape
            # A tape kept between calls was resident before the call: not in its new
            # pages, so added; one given back after each call (above 256 MiB) was
            # faulted in anew: in them already.
            memory["per_call_mib"] = (
                None if pages is None else pages + (tape[0] if tape and tape[1] else 0.0)
            )
        if library == "enzyme_py":
            memory["enzyme_build_child_maxrss_mib"] = maxrss_mib(resource.RUSAGE_CHILDREN)
        out["memory"] = memory
        arrays: dict[str, np.ndarray] = {}
        if setup.derivative is not None:
            arrays["derivative"] = setup.derivative(result)
        if setup.value is not None:
            out["value"] = setup.value(result)
        if spec.get("spot") and "diff" in data:
            f = numba_function(spec["kernel"])
            arrays["spot_index"], arrays["spot_value"] = fd_spot(f, data["args"], data["diff"])
        if arrays:
            np.savez(spec["npz"], **arrays)
    except Exception as exc:  # reported, not raised: the parent records the failure
        out = {
            "status": "error",
            "reason": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(),
        }
    Path(spec["result"]).write_text(json.dumps(out))
    return 0


def probe_main(library: str, result: str) -> int:
    """Import one optional library; write its version or why it cannot be imported."""
    disabled = apply_disable()
    try:
        if library == "jax":
            import jax

            version = {"jax": jax.__version__, "jaxlib": importlib.metadata.version("jaxlib")}
        elif library == "torch":
            import torch

            version = {"torch": torch.__version__}
        else:
            raise ValueError(library)
        answer: dict[str, Any] = {"ok": True, "versions": version}
    except ImportError as exc:
        why = f"{library} is not importable: {exc}"
        if library in disabled:
            why += " (BENCH_DISABLE)"
        answer = {"ok": False, "reason": why}
    Path(result).write_text(json.dumps(answer))
    return 0
