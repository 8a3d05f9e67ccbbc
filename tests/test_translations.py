"""The frontends' translations kept in the disk cache (enzyme_py/_translations.py):
Cython's C and clang's IR, served to a new process without running Cython or clang,
and made again when the source, a .pxd file Cython read, a header clang read, the
headers an include folder holds, or the entry itself changes."""

from __future__ import annotations

import json
import os
import textwrap

import pytest

import enzyme_py as ez
from enzyme_py import _cache, _translations
from enzyme_py.frontends import cython as frontend
from enzyme_py.frontends import ir

from conftest import run_python

pytestmark = pytest.mark.needs_enzyme

SOURCE = r"""
cimport cython
from libc.math cimport sin

@cython.boundscheck(False)
cdef double energy(const double[::1] x, double k) noexcept nogil:
    cdef double e = 0.0
    cdef Py_ssize_t i
    for i in range(x.shape[0]):
        e += k * x[i] * x[i] * sin(x[i])
    return e
"""


@pytest.fixture
def counted(monkeypatch, tmp_path):
    """Cython's runs (the driver's subprocesses), with a disk cache of this test's own."""
    monkeypatch.setenv("ENZYME_PY_CACHE_DIR", str(tmp_path / "cache"))
    runs: list[list[str]] = []
    real_run = frontend.subprocess.run

    def run(cmd, *args, **kwargs):
        runs.append(cmd)
        return real_run(cmd, *args, **kwargs)

    monkeypatch.setattr(frontend.subprocess, "run", run)
    return runs


def _rewrite(path, text: str) -> None:
    """``path`` given ``text`` and a modification time a second later than it had (the
    cache compares times; a rewrite within the file system's time step would not show)."""
    path.write_text(text)
    status = os.stat(path)
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns + 10**9))


def test_a_kept_translation_is_served_without_cython(counted):
    first = frontend._run_cython(SOURCE, "kept", {}, None)
    again = frontend._run_cython(SOURCE, "kept", {}, None)
    assert len(counted) == 1
    assert again == first
    other = frontend._run_cython(SOURCE + "\n", "kept", {}, None)  # another source
    assert len(counted) == 2 and other[1] == first[1]
    frontend._run_cython(SOURCE, "kept", {"cdivision": True}, None)  # other directives
    assert len(counted) == 3


def test_a_changed_pxd_makes_it_again(counted, tmp_path):
    folder = tmp_path / "pkg"
    folder.mkdir()
    helper = folder / "helper.pxd"
    helper.write_text("cdef inline double scale(double x) noexcept nogil:\n    return 2.0 * x\n")
    source = "from helper cimport scale\n\ncdef double f(double x) noexcept nogil:\n"
    source += "    return scale(x)\n"
    first = frontend._run_cython(source, "kern", {}, str(folder))
    assert "2.0" in first[0]
    frontend._run_cython(source, "kern", {}, str(folder))
    assert len(counted) == 1
    _rewrite(helper, "cdef inline double scale(double x) noexcept nogil:\n    return 3.0 * x\n")
    second = frontend._run_cython(source, "kern", {}, str(folder))
    assert len(counted) == 2
    assert "3.0" in second[0] and "2.0" not in second[0]
    # A new .pxd beside the .pyx may be cimported instead of an installed one: new key.
    (folder / "other.pxd").write_text("cdef double unused\n")
    frontend._run_cython(source, "kern", {}, str(folder))
    assert len(counted) == 3


def test_a_damaged_entry_is_made_again(counted):
    first = frontend._run_cython(SOURCE, "damaged", {}, None)
    key = _translations.key(frontend._translation_parts(SOURCE, "damaged", {}, None))
    damaged = {"made": {"c": "int x;", "functions": "not a list"}, "read": []}
    _cache.store_text(key, json.dumps(damaged))
    again = frontend._run_cython(SOURCE, "damaged", {}, None)
    assert len(counted) == 2 and again == first
    _cache.store_text(key, "{not json")
    assert frontend._run_cython(SOURCE, "damaged", {}, None) == first
    assert len(counted) == 3


def test_a_new_process_differentiates_from_a_kept_translation(tmp_path):
    # The second process must not run Cython (the driver's subprocess fails an
    # assertion there), and its gradient is right.
    code = textwrap.dedent(
        f"""
        import numpy as np
        import enzyme_py as ez
        from enzyme_py.frontends import cython as frontend
        AGAIN = False
        if AGAIN:
            real_run = frontend.subprocess.run
            def refuse_cython(cmd, *args, **kwargs):
                assert frontend._DRIVER not in cmd, "Cython ran again"
                return real_run(cmd, *args, **kwargs)
            frontend.subprocess.run = refuse_cython
        m = ez.cython({SOURCE!r})
        x = np.linspace(0.1, 1.5, 6)
        g = ez.grad(m.energy)(x, 3.0)
        expected = 3.0 * (2.0 * x * np.sin(x) + x * x * np.cos(x))
        np.testing.assert_allclose(g, expected, rtol=1e-12)
        print("ok")
        """
    )
    env = {"ENZYME_PY_CACHE_DIR": str(tmp_path / "cache")}
    first = run_python(code, env)
    assert first.returncode == 0 and first.stdout.strip() == "ok", first.stderr
    again = run_python(code.replace("AGAIN = False", "AGAIN = True"), env)
    assert again.returncode == 0 and again.stdout.strip() == "ok", again.stderr


def _clang_runs(runs: list[list[str]]) -> int:
    return sum(1 for cmd in runs if cmd and "clang" in os.path.basename(cmd[0]))


def test_kept_ir_is_served_without_clang(counted):
    source = "double twice(double x) { return 2.0 * x; }\n"
    first = ez.c(source)
    again = ez.c(source)
    assert _clang_runs(counted) == 1
    assert again.twice(1.5) == first.twice(1.5) == 3.0
    ez.c(source, flags=["-O1"])  # other flags: compiled
    assert _clang_runs(counted) == 2


def test_a_changed_header_compiles_again(counted, tmp_path):
    folder = tmp_path / "include"
    folder.mkdir()
    header = folder / "scale.h"
    header.write_text("#define SCALE 2.0\n")
    source = '#include "scale.h"\ndouble scaled(double x) { return SCALE * x; }\n'
    flags = [f"-I{folder}"]
    assert ez.c(source, flags=flags).scaled(1.5) == 3.0
    assert ez.c(source, flags=flags).scaled(1.5) == 3.0
    assert _clang_runs(counted) == 1
    _rewrite(header, "#define SCALE 3.0\n")
    assert ez.c(source, flags=flags).scaled(1.5) == 4.5
    assert _clang_runs(counted) == 2
    # A header added to the folder may be found instead of another: compiled again.
    (folder / "other.h").write_text("#define OTHER 1\n")
    assert ez.c(source, flags=["-I", str(folder)]).scaled(1.5) == 4.5
    assert ez.c(source, flags=flags).scaled(1.5) == 4.5
    assert _clang_runs(counted) == 4


def test_clang_warnings_come_again_from_kept_ir(counted):
    source = "double f(double x) { double y; return x + y; }\n"  # y uninitialised
    with pytest.warns(ez.CompilerWarning, match="uninitialized"):
        ez.c(source)
    with pytest.warns(ez.CompilerWarning, match="uninitialized"):
        ez.c(source)
    assert _clang_runs(counted) == 1


def test_a_header_modified_while_compiling_is_not_kept(tmp_path):
    header = tmp_path / "late.h"
    header.write_text("#define LATE 1\n")
    status = os.stat(header)
    assert ir.files_as_read([str(header)], status.st_mtime_ns + 1) is not None
    assert ir.files_as_read([str(header)], status.st_mtime_ns) is None  # at or after
    assert ir.files_as_read([str(tmp_path / "gone.h")], status.st_mtime_ns + 1) is None
