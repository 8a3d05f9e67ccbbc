"""Random calls in a child process (tests/fuzz_driver.py): no crash, no write outside
the guard bytes around the arrays, every error typed and naming what is wrong, every
success matching central finite differences (issue 22)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.needs_enzyme

DRIVER = Path(__file__).with_name("fuzz_driver.py")


@pytest.mark.parametrize("seed", [20261201])
def test_fuzzed_calls(seed):
    pytest.importorskip("numba")
    proc = subprocess.run(
        [sys.executable, str(DRIVER), str(seed), "250"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, f"the child crashed ({proc.returncode}): {proc.stderr[-3000:]}"
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["failures"] == []
    counts = report["counts"]
    assert sum(counts.values()) == 250
    # Both kinds of outcome are exercised: derivatives checked, bad calls refused.
    assert counts["ok"] > 100 and counts["refused"] > 30, counts
