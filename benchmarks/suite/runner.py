"""Parent side: each contender of each kernel in its own child process."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.suite.report import fmt_time
from benchmarks.suite.table import CONTENDERS, FD_BUDGET_S, OWN_PRIMAL, ROOT, Kernel, apply_disable

_CONTROLLED = ("ENZYME_PY_CACHE_DIR", "ENZYME_PY_DISK_CACHE", "ENZYME_PY_ISOLATE", "ENZYME_PY_LOG")


def _child_env(cache_dir: Path, log: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _CONTROLLED}
    env["ENZYME_PY_CACHE_DIR"] = str(cache_dir)
    if log:
        env["ENZYME_PY_LOG"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
    )
    return env


def _derivative_sources(stderr: str) -> list[str]:
    """Where enzyme_py's log says each derivative came from, in order."""
    sources = []
    for line in stderr.splitlines():
        match = re.search(r": from (.+?) in [0-9.]+ ms", line)
        if match:
            sources.append(match.group(1))
    return sources


# Child processes running at once (``--jobs``); set by main.
_SLOTS = threading.Semaphore(1)


def set_jobs(jobs: int) -> None:
    """Let ``jobs`` child processes run at once."""
    global _SLOTS
    _SLOTS = threading.Semaphore(jobs)


def _spawn(
    args: list[str], env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    with _SLOTS:
        return subprocess.run(
            [sys.executable, "-m", "benchmarks.suite", *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            timeout=timeout,
            check=False,
        )


def run_child(
    spec: dict[str, Any], work: Path, cache_dir: Path, timeout: float
) -> tuple[dict[str, Any], str]:
    """One child; its result (status 'error' if it died) and its stderr."""
    stage = "first" if spec.get("first_call_only") else "run"
    tag = f"{spec['kernel']}_{spec['contender']}_{stage}"
    spec = spec | {"result": str(work / f"{tag}.json"), "npz": str(work / f"{tag}.npz")}
    spec_path = work / f"{tag}.spec.json"
    spec_path.write_text(json.dumps(spec))
    log = CONTENDERS[spec["contender"]].library == "enzyme_py"
    started = time.perf_counter()
    try:
        proc = _spawn(["--child", str(spec_path)], _child_env(cache_dir, log), timeout)
        if os.environ.get("BENCH_VERBOSE"):
            took = time.perf_counter() - started
            print(f"[suite] {tag}: {took:.1f} s (incl. wait for a slot)", file=sys.stderr)
    except subprocess.TimeoutExpired:
        return {"status": "error", "reason": f"timed out after {timeout:.0f} s"}, ""
    result_path = Path(spec["result"])
    if proc.returncode != 0 or not result_path.is_file():
        tail = (proc.stdout + proc.stderr)[-2000:]
        return {
            "status": "error",
            "reason": f"child exited with code {proc.returncode}",
            "output": tail,
        }, proc.stderr
    result: dict[str, Any] = json.loads(result_path.read_text())
    npz = Path(spec["npz"])
    if npz.is_file():
        result["_npz"] = str(npz)
    return result, proc.stderr


def probe_libraries(work: Path, parallel: bool) -> dict[str, dict[str, Any]]:
    """Whether JAX and PyTorch import, each tried in a child process (not tried when
    ``BENCH_DISABLE`` names it or it is not installed at all)."""
    disabled = apply_disable()

    def probe(library: str) -> dict[str, Any]:
        if library in disabled:
            return {"ok": False, "reason": f"{library} is disabled (BENCH_DISABLE)"}
        try:
            installed = importlib.util.find_spec(library) is not None
        except (ImportError, ValueError) as exc:
            return {"ok": False, "reason": f"{library} is not importable: {exc}"}
        if not installed:
            return {"ok": False, "reason": f"{library} is not installed"}
        result = work / f"probe_{library}.json"
        env = _child_env(work / "probe_cache", log=False)
        try:
            proc = _spawn(["--probe", library, str(result)], env, timeout=300)
        except subprocess.TimeoutExpired:
            return {"ok": False, "reason": f"importing {library} timed out"}
        if proc.returncode != 0 or not result.is_file():
            return {"ok": False, "reason": f"probing {library} failed: {proc.stderr[-500:]}"}
        answer: dict[str, Any] = json.loads(result.read_text())
        return answer

    libraries = ("jax", "torch")
    return dict(zip(libraries, map_items(probe, libraries, parallel), strict=True))


def _timing(quick: bool) -> dict[str, float]:
    if quick:
        return {"sample_s": 0.001, "budget_s": 0.02, "min_runs": 5, "max_runs": 20}
    return {"sample_s": 0.02, "budget_s": 1.0, "min_runs": 7, "max_runs": 50}


def map_items(fn: Callable[[Any], Any], items: Sequence[Any], parallel: bool) -> list[Any]:
    """fn over items: in threads (each child still waits for a slot) or in order."""
    if not parallel or len(items) < 2:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=len(items)) as pool:
        return list(pool.map(fn, items))


# New processes on the filled disk cache, per enzyme_py contender; the median is
# reported. One run alone once read 194 ms where later ones read 43-47 ms (the GMM
# gradient, 2026-12-04): the first process after a build is sometimes slow.
FILLED_CACHE_RUNS = 3
FILLED_CACHE_RUNS_QUICK = 1


def _filled_cache_first_call(
    spec: dict[str, Any], work: Path, cache_dir: Path, timeout: float, runs: int
) -> dict[str, Any]:
    """The first call in ``runs`` new processes on ``cache_dir`` (filled by the run
    before): the median of those that ran, every sample, and where the first one's
    derivatives came from; a failure is reported as the first process's."""
    samples: list[float] = []
    first: dict[str, Any] | None = None
    first_sources: list[str] = []
    for _ in range(runs):
        again, stderr = run_child(spec | {"first_call_only": True}, work, cache_dir, timeout)
        if first is None:
            first, first_sources = again, _derivative_sources(stderr)
        if again["status"] != "ok" or again.get("first_call_s") is None:
            break
        samples.append(again["first_call_s"])
    assert first is not None
    return {
        "status": first["status"],
        "first_call_s": statistics.median(samples) if samples else None,
        "samples_s": samples,
        "sources": first_sources,
        **({"reason": first["reason"]} if "reason" in first else {}),
    }


def run_contender(
    kernel: Kernel,
    name: str,
    quick: bool,
    primal_time: float | None,
    libraries: dict[str, dict[str, Any]],
    enzyme_reason: str | None,
    work: Path,
    timeout: float,
) -> dict[str, Any]:
    """One contender of one kernel: its child process(es), or why it did not run."""
    contender = CONTENDERS[name]
    sizes = kernel.quick if quick else kernel.full
    entry: dict[str, Any]
    if contender.library in libraries and not libraries[contender.library]["ok"]:
        entry = {"status": "skipped", "reason": libraries[contender.library]["reason"]}
    elif contender.library == "enzyme_py" and enzyme_reason is not None:
        entry = {"status": "skipped", "reason": enzyme_reason}
    elif name == "finite_differences" and primal_time is None:
        entry = {"status": "skipped", "reason": "no primal time to size it by"}
    elif (
        name == "finite_differences"
        and (estimate := kernel.fd_evaluations(sizes) * (primal_time or 0.0)) > FD_BUDGET_S
    ):
        entry = {
            "status": "not_feasible",
            "reason": (
                f"{kernel.fd_evaluations(sizes)} primal evaluations, about "
                f"{fmt_time(estimate)} per gradient (limit {fmt_time(FD_BUDGET_S)})"
            ),
            "estimate_s": estimate,
        }
    else:
        cache_dir = work / f"cache_{kernel.name}_{name}"
        spec = {
            "kernel": kernel.name,
            "sizes": sizes,
            "timing": _timing(quick),
            "contender": name,
            "spot": name == "numba_primal",
        }
        entry, stderr = run_child(spec, work, cache_dir, timeout)
        if contender.library == "enzyme_py" and entry["status"] == "ok":
            entry["first_call_sources"] = _derivative_sources(stderr)
            runs = FILLED_CACHE_RUNS_QUICK if quick else FILLED_CACHE_RUNS
            entry["compile_new_process"] = _filled_cache_first_call(
                spec, work, cache_dir, timeout, runs
            )
    entry["label"] = contender.label
    entry["library"] = contender.library
    primal = name == "numba_primal" or name in OWN_PRIMAL.values()
    entry["role"] = "primal" if primal else "derivative"
    return entry


def run_kernel(
    kernel: Kernel,
    quick: bool,
    libraries: dict[str, dict[str, Any]],
    enzyme_reason: str | None,
    work: Path,
    timeout: float,
    parallel: bool,
) -> dict[str, Any]:
    """Every contender of one kernel: the primal first (it sizes finite differences),
    then the others."""
    sizes = kernel.quick if quick else kernel.full

    def one(name: str, primal_time: float | None = None) -> dict[str, Any]:
        return run_contender(
            kernel, name, quick, primal_time, libraries, enzyme_reason, work, timeout
        )

    primal = one("numba_primal")
    primal_time = primal.get("time_s") if primal["status"] == "ok" else None
    rest = [n for n in kernel.contenders if n != "numba_primal"]
    entries = map_items(lambda n: one(n, primal_time), rest, parallel)
    return {
        "title": kernel.title(sizes),
        "derivative": kernel.derivative,
        "sizes": sizes,
        "enzyme_reference": kernel.enzyme_reference,
        "contenders": {"numba_primal": primal} | dict(zip(rest, entries, strict=True)),
    }
