"""The feature flag ENZYME_PY_AD, exercised on CMake's configure step."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def cmake() -> str:
    found = shutil.which("cmake", path=os.path.dirname(sys.executable)) or shutil.which("cmake")
    if not found:
        pytest.skip("cmake is not installed in this environment")
    return found


def configure(tmp_path: Path, *defines: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [cmake(), "-S", str(ROOT), "-B", str(tmp_path / "build"), *defines],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env={**os.environ, "ENZYME_PY_PLUGIN": ""},
    )


@pytest.mark.skipif(not (ROOT / "CMakeLists.txt").exists(), reason="needs the source tree")
def test_on_without_plugin_fails_clearly(tmp_path):
    proc = configure(
        tmp_path, "-DENZYME_PY_AD=ON", "-DENZYME_PY_PLUGIN=/nonexistent/LLVMEnzyme-15.so"
    )
    assert proc.returncode != 0
    text = " ".join((proc.stdout + proc.stderr).split())  # CMake wraps its messages
    assert "ENZYME_PY_AD=ON but the Enzyme plugin was not found at /nonexistent" in text
    assert "get_toolchain.sh" in text


def test_auto_without_plugin_builds_pure_python(tmp_path):
    proc = configure(
        tmp_path, "-DENZYME_PY_AD=AUTO", "-DENZYME_PY_PLUGIN=/nonexistent/LLVMEnzyme-15.so"
    )
    assert proc.returncode == 0, proc.stderr
    text = " ".join((proc.stdout + proc.stderr).split())
    assert "building the pure-Python package (no AD)" in text


def test_off_needs_no_toolchain(tmp_path):
    proc = configure(tmp_path, "-DENZYME_PY_AD=OFF")
    assert proc.returncode == 0, proc.stderr
    assert "ENZYME_PY_AD=OFF, building the pure-Python package" in proc.stdout


def test_bad_value_is_refused(tmp_path):
    proc = configure(tmp_path, "-DENZYME_PY_AD=MAYBE")
    assert proc.returncode != 0
    assert "ENZYME_PY_AD must be ON, OFF or AUTO" in " ".join((proc.stdout + proc.stderr).split())


def test_sdist_and_pure_python_wheel(tmp_path):
    """The sdist carries what a source build needs; built with ENZYME_PY_AD=OFF it gives
    a pure-Python wheel."""
    import tarfile

    env = {**os.environ, "ENZYME_PY_AD": "OFF"}
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (wheel,) = tmp_path.glob("enzyme_py-*.whl")
    assert wheel.name.endswith("-py3-none-any.whl")
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert "enzyme_py/_stub.py" in names and not any("_native" in n for n in names)

    from scikit_build_core.build import build_sdist

    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        sdist = tmp_path / build_sdist(str(tmp_path))
    finally:
        os.chdir(cwd)
    with tarfile.open(sdist) as archive:
        members = {m.split("/", 1)[1] for m in archive.getnames() if "/" in m}
    for needed in (
        "CMakeLists.txt",
        "pyproject.toml",
        "src/engine.cpp",
        "src/enzyme_capi.h",
        "third_party/get_toolchain.sh",
        "python/enzyme_py/core.py",
    ):
        assert needed in members, needed
    assert not any(m.startswith((".venv", "build/", "dist/")) for m in members)
