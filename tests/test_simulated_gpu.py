"""The GPU tests (tests/gpu/) against the simulated CUDA driver, in a process of their own:
liboffload's CUDA plugin finds the driver on LD_LIBRARY_PATH only at start-up."""

import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

import enzyme_py as ez

pytestmark = pytest.mark.needs_enzyme

GPU_TESTS = Path(__file__).resolve().parent / "gpu"
sys.path.insert(0, str(GPU_TESTS))
import simulator  # noqa: E402 - tests/gpu is not a package


def simulated_environment(tmp_path):
    """The environment of a process whose liboffload finds the simulated driver."""
    try:
        ez.offload.devices()
    except RuntimeError as error:  # liboffload missing: nothing to drive the driver
        pytest.skip(str(error))
    driver = simulator.build(tmp_path)
    return {
        **os.environ,
        simulator.ENV: str(driver),
        "LD_LIBRARY_PATH": os.pathsep.join([str(tmp_path), os.environ.get("LD_LIBRARY_PATH", "")]),
    }


def test_gpu_tests_pass_against_the_simulated_driver(tmp_path):
    env = simulated_environment(tmp_path)
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


LIBOFFLOAD = Path("/usr/lib/llvm-22/lib/libLLVMOffload.so.22.1")


def test_the_device_script_runs_from_a_pack(tmp_path):
    # What scripts/device_pack.sh makes (enzyme_py in site/, liboffload in lib/), here
    # from the installed package; the device machine's run, rehearsed.
    env = simulated_environment(tmp_path)
    if not LIBOFFLOAD.exists():
        pytest.skip(f"{LIBOFFLOAD} is not here")
    pack = tmp_path / "enzyme_py_device.tar.xz"
    with tarfile.open(pack, "w:xz", preset=0) as tar:
        tar.add(Path(ez.__file__).parent, "site/enzyme_py")
        tar.add(LIBOFFLOAD, "lib/libLLVMOffload.so.22.1")
    env.update(PYTHON=sys.executable, PACK=str(pack), STAGE=str(tmp_path / "stage"))
    env.update(OUT=str(tmp_path))
    script = GPU_TESTS / "run_device_checks.sh"
    proc = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, env=env, timeout=600, check=False
    )
    report = proc.stdout + proc.stderr
    assert proc.returncode == 0, report
    assert "staged enzyme_py" in report
    assert "Simulated H200" in report and "arch='sm_90'" in report  # the devices line
    table = report.split("== pass/fail ==")[1].split("== benchmarks")[0].split()
    assert table.count("PASSED") >= 11, report
    assert not {"FAILED", "SKIPPED", "ERROR"} & set(table), report
    assert "| cpu, 1 thread |" in report  # the benchmark ran


def test_the_device_script_says_when_the_pack_is_missing(tmp_path):
    env = {**os.environ, "PACK": str(tmp_path / "none.tar.xz"), "STAGE": str(tmp_path / "stage")}
    script = GPU_TESTS / "run_device_checks.sh"
    proc = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, env=env, check=False
    )
    assert proc.returncode == 3
    assert "run scripts/device_pack.sh here, then carry .device/pack" in proc.stdout


def test_a_driver_without_what_the_architecture_needs_gives_none(tmp_path):
    # A libcuda.so from before cuDeviceGetUuid: no architectures, no error.
    source = tmp_path / "old_cuda.c"
    source.write_text("int cuInit(unsigned flags) { return 0; }\n")
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler")
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-o", str(tmp_path / "libcuda.so"), str(source)],
        check=True,
    )
    env = {**os.environ, "LD_LIBRARY_PATH": str(tmp_path)}
    code = "from enzyme_py import _cuda_driver; print(_cuda_driver.architectures())"
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_architectures_are_matched_by_uuid_prefix_then_by_order():
    from enzyme_py.offload._devices import Device, _matched_architectures

    def gpu(index: int, uid: str) -> Device:
        return Device(name="g", platform="cuda", type="gpu", memory=0, index=index, uid=uid)

    driver = [("CUDA-577e9124" + "0" * 24, "sm_90"), ("CUDA-0123abcd" + "1" * 24, "sm_80")]
    # liboffload 22.1 on an H200 gave a UID of 8 hex digits: a prefix of the driver's.
    assert _matched_architectures([gpu(1, "CUDA-0123abcd"), gpu(2, "CUDA-577e9124")], driver) == {
        1: "sm_80",
        2: "sm_90",
    }
    # UIDs that name nothing: both list GPUs in the driver's order.
    assert _matched_architectures([gpu(1, ""), gpu(2, "CUDA-ffff")], driver) == {
        1: "sm_90",
        2: "sm_80",
    }
    # Unmatched and counts differ: no guess.
    assert _matched_architectures([gpu(1, "CUDA-ffff")], driver) == {}
