"""The engine around Enzyme: isolation of crashes, caches, logging."""

import os

import numpy as np
import pytest

import enzyme_py as ez

from conftest import run_python

pytestmark = pytest.mark.needs_enzyme

SQUARE = """
import os, enzyme_py as ez
SQ = 'define double @sq(double %x) {\\n %y = fmul double %x, %x\\n ret double %y\\n}'
f = ez.llvm_ir(SQ, 'sq')
df = ez.autodiff(f, ez.Reverse, ez.Active, ez.Active)
print(df(3.0, 1.0))
"""


def test_crash_inside_the_build_becomes_enzyme_error():
    code = """
import os, enzyme_py as ez
SQ = 'define double @sq(double %x) {\\n %y = fmul double %x, %x\\n ret double %y\\n}'
f = ez.llvm_ir(SQ, 'sq')
os.environ['ENZYME_PY_TEST_CRASH_IN_BUILD'] = 'boom'
try:
    ez.autodiff(f, ez.Reverse, ez.Active, ez.Active)
except ez.EnzymeError as exc:
    print('EnzymeError:', exc)
del os.environ['ENZYME_PY_TEST_CRASH_IN_BUILD']
print(ez.autodiff(f, ez.Reverse, ez.Active, ez.Active)(3.0, 1.0))
"""
    proc = run_python(code, env={"ENZYME_PY_DISK_CACHE": "0"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "EnzymeError: Enzyme crashed while differentiating 'sq'" in out
    assert "signal 6 (an assertion or abort)" in out
    assert "simulated crash: boom" in out  # the child's stderr is carried over
    assert "the process that asked lives on" in out
    assert out.strip().endswith("(9.0, 6.0)")


def test_disk_cache_serves_a_new_process(tmp_path):
    env = {"ENZYME_PY_CACHE_DIR": str(tmp_path), "ENZYME_PY_LOG": "1"}
    first = run_python(SQUARE, env=env)
    assert first.returncode == 0, first.stderr
    assert "from Enzyme" in first.stderr
    assert list(tmp_path.rglob("*.ezo")), "the derivative was written to the disk cache"
    second = run_python(SQUARE, env=env)
    assert second.returncode == 0, second.stderr
    assert "from disk cache" in second.stderr
    assert "from Enzyme" not in second.stderr
    assert first.stdout == second.stdout == "(9.0, 6.0)\n"


def test_corrupt_disk_cache_entry_is_rebuilt(tmp_path):
    env = {"ENZYME_PY_CACHE_DIR": str(tmp_path), "ENZYME_PY_LOG": "1"}
    assert run_python(SQUARE, env=env).returncode == 0
    (entry,) = tmp_path.rglob("*.ezo")
    entry.write_bytes(entry.read_bytes()[:-10])  # truncated object code
    proc = run_python(SQUARE, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "from Enzyme" in proc.stderr
    assert proc.stdout == "(9.0, 6.0)\n"


def test_concurrent_processes_share_the_cache(tmp_path):
    import subprocess
    import sys

    env = {**os.environ, "ENZYME_PY_CACHE_DIR": str(tmp_path)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SQUARE],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert all(out == "(9.0, 6.0)\n" for out, _ in outs)
    assert len(list(tmp_path.rglob("*.ezo"))) == 1
    assert not list(tmp_path.rglob(".tmp-*")), "no temporary files are left behind"


def test_disk_cache_can_be_turned_off(tmp_path):
    env = {"ENZYME_PY_CACHE_DIR": str(tmp_path), "ENZYME_PY_DISK_CACHE": "0"}
    assert run_python(SQUARE, env=env).returncode == 0
    assert not list(tmp_path.rglob("*.ezo"))


def test_memory_cache_reuses_compiled_code():
    f = ez.llvm_ir(
        "define double @cube(double %x) {\n %a = fmul double %x, %x\n"
        " %b = fmul double %a, %x\n ret double %b\n}",
        "cube",
    )
    a = ez.autodiff(f, ez.Reverse, ez.Active, ez.Active)
    b = ez.autodiff(f, ez.Reverse, ez.Active, ez.Active)
    assert a.entry == b.entry
    c = ez.autodiff(f, ez.Reverse, ez.Active, ez.ActiveOnly)
    assert c.entry != a.entry
    assert a(2.0, 1.0) == (8.0, 12.0) and c(2.0, 1.0) == (None, 12.0)


def test_in_process_build_gives_the_same_result():
    proc = run_python(SQUARE, env={"ENZYME_PY_ISOLATE": "0", "ENZYME_PY_DISK_CACHE": "0"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "(9.0, 6.0)\n"


def test_log_reports_stages():
    proc = run_python(SQUARE, env={"ENZYME_PY_LOG": "1", "ENZYME_PY_DISK_CACHE": "0"})
    assert proc.returncode == 0, proc.stderr
    assert "reverse 'sq' width=1: enzyme" in proc.stderr
    assert "optimize" in proc.stderr and "codegen" in proc.stderr


def test_fast_and_checked_call_paths_agree():
    m = ez.c(
        "double wsum(const double *x, const double *w, double s, int n) {"
        " double r = 0; for (int i = 0; i < n; ++i) r += s * w[i] * x[i] * x[i]; return r; }"
    )
    x, w = np.linspace(0, 1, 6), np.linspace(1, 2, 6)
    cases = [
        (
            ez.autodiff(
                m.wsum, ez.Reverse, ez.Duplicated, ez.Const, ez.Active, ez.Const, ez.Active
            ),
            lambda: (x, np.zeros(6), w, 1.5, 6, 2.0),
        ),
        (
            ez.autodiff(
                m.wsum, ez.Reverse, ez.Duplicated, ez.Const, ez.Active, ez.Const, ez.Active, width=2
            ),
            lambda: (x, np.zeros((2, 6)), w, 1.5, 6, [1.0, 2.0]),
        ),
        (
            ez.autodiff(m.wsum, ez.Forward, ez.Dual, ez.Const, ez.Dual, ez.Const, ez.Dual),
            lambda: (x, np.ones(6), w, 1.5, 0.5, 6),
        ),
        (
            ez.autodiff(
                m.wsum, ez.Forward, ez.Dual, ez.Const, ez.Dual, ez.Const, ez.DualOnly, width=3
            ),
            lambda: (x, np.ones((3, 6)), w, 1.5, [0.5, 1.0, 0.0], 6),
        ),
    ]
    for df, make in cases:
        assert df._fast is not None, df
        fast_args, slow_args = make(), make()
        fast = df(*fast_args)
        slow = df._call_checked(slow_args)
        np.testing.assert_equal(fast, slow)
        for a, b in zip(fast_args, slow_args, strict=True):
            np.testing.assert_array_equal(a, b)  # shadows written identically
