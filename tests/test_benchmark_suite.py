"""``python -m benchmarks --quick`` runs and writes a complete report.

Structure and correctness only (every kernel, every contender either measured with a
derivative that agrees with another contender's, or skipped / not feasible with a
reason); never anything about the times. JAX and PyTorch are optional: the suite runs
with whatever is installed, and once more with both blocked (``BENCH_DISABLE``) when
either is installed, as it runs in CI.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.needs_enzyme
pytest.importorskip("numba")

ROOT = Path(__file__).resolve().parent.parent

# The Cython row: the kernel in Cython and in C, primal and gradient.
COMPILED = {"cython_primal", "enzyme_py_cython", "c_primal", "enzyme_py_c"}
GRADIENT = {"numba_primal", "enzyme_py_reverse", "jax", "torch", "finite_differences"}
KERNELS = {
    "rosenbrock": GRADIENT | COMPILED,
    "gmm": GRADIENT,
    "heat": GRADIENT | COMPILED,
    # The same kernels written with parallel=True and prange, and their threads= row.
    "rosenbrock_prange": GRADIENT | {"enzyme_py_threads"},
    "gmm_prange": GRADIENT | {"enzyme_py_threads"},
    "heat_prange": GRADIENT | {"enzyme_py_threads"},
    # Rosenbrock on 10 doubles: the cost of a call where the array is small.
    "rosenbrock_small": GRADIENT,
    "nbody": {
        "numba_primal",
        "enzyme_py_forward",
        "enzyme_py_jvp_helper",
        "jax",
        "torch",
        "finite_differences",
    },
    "scalar": {
        "numba_primal",
        "enzyme_py_reverse",
        "enzyme_py_forward",
        "jax",
        "torch",
        "finite_differences",
    },
}
OPTIONAL = {"jax", "torch"}
# Checks: derivatives by AD agree to rounding, finite differences to their truncation.
AD_TOLERANCE = 1e-8
FD_TOLERANCE = 1e-4


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def run_suite(out: Path, extra_env: dict[str, str]) -> tuple[dict[str, Any], str]:
    env = {k: v for k, v in os.environ.items() if k != "BENCH_DISABLE"} | extra_env
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    assert (out / "suite.md").is_file()
    return json.loads((out / "suite.json").read_text()), proc.stdout


def check_results(results: dict[str, Any], stdout: str, blocked: set[str]) -> None:
    env = results["environment"]
    assert env["quick"] is True
    for key in ("date", "cpu", "cpu_count", "versions", "threads"):
        assert key in env
    assert env["versions"]["enzyme"]
    assert results["failures"] == []
    assert "| kernel | contender |" in stdout

    assert set(results["kernels"]) == set(KERNELS)
    for kernel, expected in KERNELS.items():
        entries = results["kernels"][kernel]["contenders"]
        assert set(entries) == expected, kernel
        primal = entries["numba_primal"]
        assert primal["status"] == "ok", primal
        assert primal["time_s"] > 0
        for name, entry in entries.items():
            where = f"{kernel}/{name}"
            if name in OPTIONAL and (name in blocked or not _installed(name)):
                assert entry["status"] == "skipped", where
            if entry["status"] in ("skipped", "not_feasible"):
                assert entry["reason"], where
                continue
            assert entry["status"] == "ok", (where, entry)
            assert len(entry["samples_s"]) >= 5, where
            assert "first_call_s" in entry and "memory" in entry, where
            if name in ("numba_primal", "cython_primal", "c_primal"):
                continue
            if name in ("enzyme_py_cython", "enzyme_py_c"):
                assert entry["over_own_primal"] > 0, where
            check = entry["check"]
            assert check["against"], where
            error = check["max_rel_error"]
            assert error is not None and math.isfinite(error), where
            fd = "finite" in name or "finite" in str(check["against"])
            assert error < (FD_TOLERANCE if fd else AD_TOLERANCE), (where, check)
            assert check["ok"], where
            if "value_check" in entry:
                assert entry["value_check"]["ok"], (where, entry["value_check"])
            if name.startswith("enzyme_py"):
                again = entry["compile_new_process"]
                # --quick: one new process on the filled cache (three, their median, else).
                assert again["status"] == "ok", (where, again)
                assert len(again["samples_s"]) == 1, (where, again)
                assert again["first_call_s"] == again["samples_s"][0] > 0, (where, again)
        # Every kernel's gradient contenders at the --quick sizes include finite differences
        # (for the prange rows, when Numba's threads make the primal fast enough: on a
        # loaded machine they may not; enzyme_py is then checked at sampled inputs).
        if not kernel.endswith("_prange"):
            assert entries["finite_differences"]["status"] == "ok", kernel
    for name in blocked:
        assert "skipped" in str(env["versions"].get(name, "")), name


def test_suite_quick(tmp_path: Path) -> None:
    results, stdout = run_suite(tmp_path, {})
    check_results(results, stdout, blocked=set())
    if _installed("matplotlib"):
        assert (tmp_path / "suite.png").is_file()
    else:
        assert results["chart"].startswith("not written")


@pytest.mark.skipif(
    not any(_installed(name) for name in OPTIONAL),
    reason="neither JAX nor PyTorch is installed: test_suite_quick already ran without them",
)
def test_suite_quick_without_jax_and_torch(tmp_path: Path) -> None:
    results, stdout = run_suite(tmp_path, {"BENCH_DISABLE": "jax,torch"})
    check_results(results, stdout, blocked=OPTIONAL)
    for kernel in results["kernels"].values():
        for name in OPTIONAL:
            assert "BENCH_DISABLE" in kernel["contenders"][name]["reason"]


def test_times_are_written_in_their_unit_negative_ones_too() -> None:
    # "less one call" is a difference of two noisy times and can come out negative:
    # it was written "-2.16e+06 ns" for -2.16 ms.
    from benchmarks.suite.report import fmt_time

    assert fmt_time(-2.16e-3) == "-2.16 ms"
    assert fmt_time(2.16e-3) == "2.16 ms"
    assert fmt_time(-0.5e-6) == "-500 ns"
    assert fmt_time(1.5) == "1.50 s"
    assert fmt_time(float("nan")) == "-"
