"""The examples and the benchmark script run to completion (structure only, never timings)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.needs_enzyme

ROOT = Path(__file__).resolve().parent.parent


def run_script(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ),
        timeout=timeout,
        check=False,
    )


@pytest.mark.parametrize(
    "example",
    [
        "quickstart.py",
        "c_kernel.py",
        "cython_kernel.py",
        "cython_optimizer.py",
        "fit_scipy.py",
        "check_and_pickle.py",
        "custom_rule.py",
        "offload_kernel.py",
        "torch_bridge.py",
        "jax_bridge.py",
    ],
)
def test_example_runs(example):
    optional = {"torch_bridge.py": "torch", "jax_bridge.py": "jax"}
    if example in optional:
        pytest.importorskip(optional[example])
    proc = run_script(str(ROOT / "examples" / example))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "OK" in proc.stdout


def test_compile_and_call_benchmark_quick(tmp_path):
    script = ROOT / "benchmarks" / "compile_and_call.py"
    proc = run_script(str(script), "--quick", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "| call |" in proc.stdout

    result_file = tmp_path / "compile_and_call.json"
    assert result_file.is_file()
    assert (tmp_path / "compile_and_call.md").is_file()
    results = json.loads(result_file.read_text())

    assert {"environment", "compile", "call", "quick", "compile_trials"} <= results.keys()
    assert results["quick"] is True
    env = results["environment"]
    for key in ("date", "processor", "machine", "cpu_count", "python", "numpy"):
        assert key in env
    assert env["enzyme_version"]

    assert set(results["compile"]) == {
        "c_compile",
        "first_request_empty_disk_cache",
        "same_request_same_process",
        "new_process_filled_disk_cache",
        "first_request_empty_disk_cache_in_process",
    }
    assert set(results["call"]) == {
        "python_lambda",
        "numpy_sin_scalar",
        "df_scalar",
        "numpy_dot_n4",
        "ddot_n4",
    }
    first_calls = results["numba_first_call"]
    assert {
        "primal_first_call",
        "first_derivative_empty_disk_cache",
        "first_derivative_filled_disk_cache",
    } <= set(first_calls)
    assert first_calls["first_derivative_filled_disk_cache"]["sources"] == ["disk cache"]
    for section in ("compile", "call", "numba_first_call"):
        for row in results[section].values():
            assert {"median_s", "min_s", "samples_s", "description"} <= row.keys()
            assert isinstance(row["median_s"], float)
            assert row["samples_s"]
    for row in results["call"].values():
        assert row["repeat"] >= 5


def test_training_step_benchmark_quick(tmp_path):
    proc = run_script(
        str(ROOT / "benchmarks" / "training_step.py"), "--quick", "--out", str(tmp_path)
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads((tmp_path / "training_step.json").read_text())
    assert results["meta"]["quick"] is True
    hows = {(row["step"], row["how"]) for row in results["rows"]}
    assert ("ez.vjp + pullback", "split") in hows
    assert ("ez.vjp + pullback", "recompute") in hows
    for row in results["rows"]:
        assert row["median_s"] > 0
        if row["grad_rel_error"] is not None:
            assert row["grad_rel_error"] < 1e-12  # every way gives the same gradient


def test_numba_gradients_benchmark_quick(tmp_path):
    proc = run_script(
        str(ROOT / "benchmarks" / "numba_gradients.py"), "--quick", "--out", str(tmp_path)
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads((tmp_path / "numba_gradients.json").read_text())
    assert results["meta"]["quick"] is True
    kernels = [row["kernel"] for row in results["rows"]]
    assert kernels[0].startswith("Rosenbrock") and kernels[1].startswith("GMM")
    for row in results["rows"]:
        assert row["fd_rel_error"] < 1e-5  # each gradient agrees with finite differences
        assert row["primal_s"] > 0 and row["gradient_s"] > 0


def test_cython_gradients_benchmark_quick(tmp_path):
    pytest.importorskip("Cython")
    proc = run_script(
        str(ROOT / "benchmarks" / "cython_gradients.py"), "--quick", "--out", str(tmp_path)
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads((tmp_path / "cython_gradients.json").read_text())
    assert results["meta"]["quick"] is True
    fronts = {(row["kernel"].split()[0], row["frontend"]) for row in results["rows"]}
    for kernel in ("Rosenbrock", "heat"):
        assert {(kernel, "Numba"), (kernel, "C (ez.c)"), (kernel, "Cython double[::1]")} <= fronts
    for row in results["rows"]:
        assert row["fd_rel_error"] < 1e-5  # each gradient agrees with finite differences
        assert row["primal_s"] > 0 and row["gradient_s"] > 0


@pytest.mark.parametrize("body", ["numba", "numba-unchecked", "ir"])
def test_offload_stencil_benchmark_quick(tmp_path, body):
    proc = run_script(
        str(ROOT / "benchmarks" / "offload_stencil.py"),
        "--quick",
        "--out",
        str(tmp_path),
        "--body",
        body,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"({body} body)" in proc.stdout
    results = json.loads((tmp_path / "offload_stencil.json").read_text())
    assert results["meta"]["check_error"] < 1e-12  # the derivative kernel is right
    devices = [row["device"] for row in results["rows"]]
    assert devices[0] == "cpu, 1 thread" and devices[1].startswith("cpu,")


def test_offload_fit_benchmark_quick(tmp_path):
    proc = run_script(
        str(ROOT / "benchmarks" / "offload_fit.py"), "--quick", "--out", str(tmp_path)
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads((tmp_path / "offload_fit.json").read_text())
    assert results["meta"]["check_error"] < 1e-10  # against the analytic gradient
    devices = [row["device"] for row in results["rows"]]
    assert devices[0] == "cpu, 1 thread" and devices[1].startswith("cpu,")


def test_fresh_gradient_benchmark_quick(tmp_path):
    proc = run_script(
        str(ROOT / "benchmarks" / "fresh_gradient.py"), "--quick", "--out", str(tmp_path)
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads((tmp_path / "fresh_gradient.json").read_text())
    (row,) = results["rows"]
    assert row["rel_error"] < 1e-13  # ez.grad's gradient is the analytic one
    assert row["fresh_s"] > 0 and row["reused_filled_s"] > 0
