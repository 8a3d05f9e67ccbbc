"""The GPU tests (tests/gpu/) against the simulated CUDA driver, in a process of their own:
liboffload's CUDA plugin finds the driver on LD_LIBRARY_PATH only at start-up."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import enzyme_py as ez

pytestmark = pytest.mark.needs_enzyme

GPU_TESTS = Path(__file__).resolve().parent / "gpu"
sys.path.insert(0, str(GPU_TESTS))
import simulator  # noqa: E402 - tests/gpu is not a package


def test_gpu_tests_pass_against_the_simulated_driver(tmp_path):
    try:
        ez.offload.devices()
    except RuntimeError as error:  # liboffload missing: nothing to drive the driver
        pytest.skip(str(error))
    driver = simulator.build(tmp_path)
    env = {
        **os.environ,
        simulator.ENV: str(driver),
        "LD_LIBRARY_PATH": os.pathsep.join([str(tmp_path), os.environ.get("LD_LIBRARY_PATH", "")]),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(GPU_TESTS)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    report = proc.stdout + proc.stderr
    assert proc.returncode == 0, report
    passed = re.search(r"(\d+) passed", report)
    assert passed and int(passed.group(1)) >= 20, report
    # Only the tests that need ptxas may skip (where it is not installed); the tests of
    # test_gpu.py must all have found the simulated GPU.
    skips = re.findall(r"SKIPPED \[\d+\] (\S+)", report)
    assert all("test_simulated_driver.py" in s for s in skips), report
    assert len(skips) <= 2, report
