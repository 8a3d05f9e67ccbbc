"""Derivatives on a dask.distributed LocalCluster: worker processes (2 workers, 1 thread
each) get a Numba model's derivative by pickle and compute gradients for many parameter
sets, equal to a serial run's; one worker builds the derivative into an empty cache of
its own, the other loads it from the cache the client filled (examples/dask_ensemble.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.needs_enzyme

ROOT = Path(__file__).resolve().parent.parent


def test_gradients_on_a_local_cluster_match_a_serial_run(tmp_path):
    pytest.importorskip("dask.distributed")
    out = tmp_path / "dask.json"
    env = {**os.environ, "ENZYME_PY_CACHE_DIR": str(tmp_path / "shared-cache")}
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "dask_ensemble.py"),
            "--sets",
            "300",
            "--workers",
            "2",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "dask_ensemble: OK" in proc.stdout
    results = json.loads(out.read_text())
    assert results["ok"] and results["max_abs_diff"] <= 1e-12
    assert results["sets"] == 300 and results["workers"] == 2
    (own,) = results["first_call_own_cache"]
    (shared,) = results["first_call_shared_cache"]
    # The shared worker read the client's cache; the other built into its own.
    assert shared["cache_dir"] == env["ENZYME_PY_CACHE_DIR"]
    assert own["cache_dir"] != shared["cache_dir"]
    assert os.path.basename(own["cache_dir"]).startswith("worker_")
    assert own["cache_entries"] >= 1  # what that worker built
    assert shared["cache_entries"] >= 1  # what the client stored
    assert not Path(own["cache_dir"]).exists()  # the workers' caches are removed
