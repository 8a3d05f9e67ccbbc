"""Random calls in a child process (tests/fuzz_driver.py): no crash, no write outside
the guard bytes around the arrays, every error typed and naming what is wrong, every
success matching central finite differences (issue 22)."""

from __future__ import annotations

import pytest

from _helpers import run_fuzz_driver

pytestmark = pytest.mark.needs_enzyme


@pytest.mark.parametrize("seed", [20261201])
def test_fuzzed_calls(seed):
    pytest.importorskip("numba")
    report = run_fuzz_driver(str(seed), "250")
    assert report["failures"] == []
    counts = report["counts"]
    assert sum(counts.values()) == 250
    # Both kinds of outcome are exercised: derivatives checked, bad calls refused.
    assert counts["ok"] > 100 and counts["refused"] > 30, counts
