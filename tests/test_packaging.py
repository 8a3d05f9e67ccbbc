"""The licence files travel with every distribution: the sdist and the wheel.

Builds the pure-Python wheel (ENZYME_PY_AD=OFF, a few seconds) and the sdist with
scikit-build-core's PEP 517 hooks, in a fresh interpreter, and reads their file lists
and metadata. The binary wheel (scripts/build_wheel.sh) takes the same metadata.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LICENCE_FILES = ("LICENSE", "THIRD_PARTY_NOTICES")

BUILD = """
import sys
from scikit_build_core import build
out, work = sys.argv[1], sys.argv[2]
wheel = build.build_wheel(out, {"build-dir": work})
sdist = build.build_sdist(out)
print("BUILT", wheel, sdist)
"""


@pytest.fixture(scope="module")
def distributions(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    pytest.importorskip("scikit_build_core", reason="the test extra installs scikit-build-core")
    out = tmp_path_factory.mktemp("dist")
    env = {**os.environ, "ENZYME_PY_AD": "OFF"}
    proc = subprocess.run(
        [sys.executable, "-c", BUILD, str(out), str(out / "build")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (built,) = [line for line in proc.stdout.splitlines() if line.startswith("BUILT ")]
    _, wheel_name, sdist_name = built.split()
    return out / wheel_name, out / sdist_name


def test_the_repository_has_the_licence_files():
    licence = (ROOT / "LICENSE").read_text()
    assert "Apache License" in licence and "Version 2.0, January 2004" in licence
    notices = (ROOT / "THIRD_PARTY_NOTICES").read_text()
    # Every library auditwheel bundles into the binary wheel, and the Enzyme plugin.
    for bundled in (
        "LLVMEnzyme-15.so",
        "libLLVM-15",
        "libz3",
        "libicuuc",
        "libicudata",
        "libxml2",
        "libedit",
        "libffi",
        "libtinfo",
        "liblzma",
        "libbsd",
        "libmd",
        "pybind11",
    ):
        assert bundled in notices, bundled
    assert "LLVM Exceptions" in notices


def test_the_wheel_carries_the_licence_files(distributions):
    wheel, _ = distributions
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        dist_info = next(n.split("/")[0] for n in names if ".dist-info/" in n)
        for name in LICENCE_FILES:
            member = f"{dist_info}/licenses/{name}"
            assert member in names, names
            assert z.read(member) == (ROOT / name).read_bytes()
        metadata = z.read(f"{dist_info}/METADATA").decode()
    assert "License-Expression: Apache-2.0" in metadata
    for name in LICENCE_FILES:
        assert f"License-File: {name}" in metadata
    assert "Author: enzyme_py developers" in metadata


def test_the_sdist_carries_the_licence_files(distributions):
    _, sdist = distributions
    assert sdist.name.endswith(".tar.gz"), sdist.name
    with tarfile.open(sdist) as t:
        names = t.getnames()
        top = names[0].split("/")[0]
        for name in LICENCE_FILES:
            assert f"{top}/{name}" in names, names
        pkg_info = t.extractfile(f"{top}/PKG-INFO")
        assert pkg_info is not None
        metadata = pkg_info.read().decode()
    for name in LICENCE_FILES:
        assert f"License-File: {name}" in metadata
