"""ez.info(), ez.has_autodiff() and `python -m enzyme_py info`."""

import json
import subprocess
import sys

import pytest

import enzyme_py as ez

pytestmark = pytest.mark.needs_enzyme


def test_info_describes_the_toolchain():
    details = ez.info()
    assert ez.has_autodiff() is True
    assert details["autodiff"] is True
    assert details["reason"] is None
    assert details["enzyme_version"] == "0.0.289"
    assert details["llvm_version"].startswith("15.")
    assert details["enzyme_plugin"].endswith("LLVMEnzyme-15.so")
    # glibc's libmvec is part of libc6 on Debian 12: loops calling exp vectorise.
    assert details["vector_math"] == "libmvec"


def test_offload_devices_listed_through_liboffload():
    devices = ez.info()["offload_devices"]
    assert isinstance(devices, list), devices
    assert devices, "liboffload lists at least its virtual host device"
    for d in devices:
        assert set(d) == {"name", "platform", "type", "memory", "uid"}
    if not any(d["type"] == "gpu" for d in devices):
        # A machine without a GPU shows only liboffload's virtual host device.
        assert [d["name"] for d in devices] == ["Virtual Host Device"]
        assert devices[0]["platform"] == "host"
    # ez.offload.devices(): enzyme_py's CPU device, then liboffload's GPUs.
    gpus = [d["name"] for d in devices if d["type"] == "gpu"]
    assert [d.name for d in ez.offload.devices()] == ["cpu", *gpus]


def test_cli_info():
    proc = subprocess.run(
        [sys.executable, "-m", "enzyme_py", "info", "--json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    details = json.loads(proc.stdout)
    assert details["autodiff"] is True
    assert details["enzyme_version"] == "0.0.289"
    proc = subprocess.run(
        [sys.executable, "-m", "enzyme_py", "info"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "autodiff: True" in proc.stdout
    assert "llvm_version: 15." in proc.stdout
