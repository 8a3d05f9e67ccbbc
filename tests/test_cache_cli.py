"""`python -m enzyme_py cache info|clear`, and ez.info()'s versions and cache folder.

These run in both builds: the cache commands and ez.info() are pure Python. The one
that fills the cache with a real derivative needs Enzyme.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import enzyme_py as ez

KEY_A = "ab" + "0" * 62
KEY_B = "cd" + "1" * 62


def cli(*args: str, cache: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "ENZYME_PY_CACHE_DIR": str(cache), **env}
    full_env.pop("ENZYME_PY_DISK_CACHE", None)
    full_env.update(env)
    return subprocess.run(
        [sys.executable, "-m", "enzyme_py", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=120,
        check=False,
    )


def _fill(cache: Path) -> dict[str, int]:
    """Two entries and an interrupted write in enzyme_py's layout, and a stranger's file."""
    sizes = {}
    for key, size in ((KEY_A, 1000), (KEY_B, 2345)):
        path = cache / key[:2] / f"{key}.ezo"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * size)
        sizes[key] = size
    (cache / "ab" / ".tmp-abc123.ezo").write_bytes(b"y" * 10)
    (cache / "notes.txt").write_text("not enzyme_py's")
    return sizes


def test_cache_info_counts_entries_and_bytes(tmp_path):
    _fill(tmp_path)
    proc = cli("cache", "info", "--json", cache=tmp_path)
    assert proc.returncode == 0, proc.stderr
    details = json.loads(proc.stdout)
    assert details == {
        "directory": str(tmp_path),
        "enabled": True,
        "entries": 2,
        "bytes": 1000 + 2345 + 10,  # the interrupted write's file takes room too
    }
    proc = cli("cache", "info", cache=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"directory: {tmp_path}\n" in proc.stdout
    assert "entries: 2\n" in proc.stdout
    assert "size: 3.3 KiB (3355 bytes)" in proc.stdout


def test_cache_info_of_a_missing_or_unused_folder(tmp_path):
    missing = tmp_path / "never-written"
    proc = cli("cache", "info", cache=missing, ENZYME_PY_DISK_CACHE="0")
    assert proc.returncode == 0, proc.stderr
    assert f"directory: {missing} (not used: ENZYME_PY_DISK_CACHE=0)" in proc.stdout
    assert "entries: 0\n" in proc.stdout and "size: 0 bytes" in proc.stdout
    assert not missing.exists()


def test_cache_clear_removes_only_enzyme_py_files(tmp_path):
    _fill(tmp_path)
    proc = cli("cache", "clear", cache=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"removed 3 files (3.3 KiB) from {tmp_path}"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["notes.txt"]  # subfolders too
    again = cli("cache", "clear", "--json", cache=tmp_path)
    assert json.loads(again.stdout) == {"directory": str(tmp_path), "removed": 0, "bytes": 0}


def test_cache_command_needs_an_action(tmp_path):
    proc = cli("cache", cache=tmp_path)
    assert proc.returncode == 2
    assert "the following arguments are required: action" in proc.stderr
    proc = cli("cache", "purge", cache=tmp_path)
    assert proc.returncode == 2
    assert "invalid choice: 'purge'" in proc.stderr and "{info,clear}" in proc.stderr


def test_info_has_versions_and_the_cache_folder(monkeypatch, tmp_path):
    from importlib import metadata

    monkeypatch.setenv("ENZYME_PY_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("ENZYME_PY_DISK_CACHE", raising=False)
    details = ez.info()
    assert details["version"] == ez.__version__ == metadata.version("enzyme_py")
    assert details["numba_version"] == metadata.version("numba")
    assert details["cache_dir"] == str(tmp_path)
    monkeypatch.setenv("ENZYME_PY_DISK_CACHE", "0")
    assert ez.info()["cache_dir"] is None
    if ez.has_autodiff():
        assert details["enzyme_version"] == "0.0.289"
        assert details["llvm_version"].startswith("15.")
    else:
        assert details["enzyme_version"] is None and details["llvm_version"] is None


@pytest.mark.needs_enzyme
def test_cache_info_and_clear_see_a_real_derivative(tmp_path):
    code = (
        "import enzyme_py as ez\n"
        "f = ez.c('double sq(double x) { return 3.5 * x * x; }').sq\n"
        "print(ez.autodiff(f, ez.Reverse, ez.Active, ez.Active)(2.0, 1.0))\n"
    )
    env = {**os.environ, "ENZYME_PY_CACHE_DIR": str(tmp_path)}
    env.pop("ENZYME_PY_DISK_CACHE", None)
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "(14.0, 14.0)"
    # The derivative's object code, and clang's IR of the source (_translations.py).
    entries = list(tmp_path.rglob("*.ezo"))
    details = json.loads(cli("cache", "info", "--json", cache=tmp_path).stdout)
    (texts,) = tmp_path.rglob("*.ezi")  # its IR, beside its object code
    size = sum(e.stat().st_size for e in entries) + texts.stat().st_size
    assert len(entries) == 2 and details["entries"] == 2 and details["bytes"] == size > 0
    cleared = cli("cache", "clear", cache=tmp_path)
    assert cleared.stdout.startswith("removed 3 files (")
    assert not any(e.exists() for e in entries) and not texts.exists()
