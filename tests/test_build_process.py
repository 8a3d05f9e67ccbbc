"""The isolated build process: bounded widths, deaths from memory not retried, file
size limits reported as such, Ctrl-C that stops a build at once (issue 22, items 4, 6)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import enzyme_py as ez

from conftest import run_python

pytestmark = pytest.mark.needs_enzyme

CUBE = (
    "define double @cube(double %x) {\n %a = fmul double %x, %x\n"
    " %b = fmul double %a, %x\n ret double %b\n}"
)
# Each program builds the derivative of cube with ENZYME_PY_TEST_CRASH_IN_BUILD set
# to what the test asks, then once more without it.
PROGRAM = """
import os, enzyme_py as ez
f = ez.llvm_ir({cube!r}, 'cube')
os.environ['ENZYME_PY_TEST_CRASH_IN_BUILD'] = {what!r}
try:
    ez.autodiff(f, ez.Reverse, ez.Active, ez.Active)
    print('built')
except ez.EnzymeError as exc:
    print('EnzymeError:', exc)
del os.environ['ENZYME_PY_TEST_CRASH_IN_BUILD']
print(ez.autodiff(f, ez.Reverse, ez.Active, ez.Active)(2.0, 1.0))
"""


def _run(what: str, **kwargs):
    env = {"ENZYME_PY_LOG": "1", "ENZYME_PY_DISK_CACHE": "0"}
    proc = run_python(PROGRAM.format(cube=CUBE, what=what), env=env, **kwargs)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("(8.0, 12.0)"), proc.stdout  # x**3, 3x**2 at 2
    return proc


# --- widths -----------------------------------------------------------------


@pytest.mark.parametrize("width", [ez.MAX_WIDTH + 1, 1000, 2**31])
def test_a_width_beyond_the_bound_is_refused_before_any_build(width, monkeypatch):
    # A build would fail with EnzymeError (the child aborts): none is started.
    monkeypatch.setenv("ENZYME_PY_TEST_CRASH_IN_BUILD", "boom")
    f = ez.llvm_ir(CUBE, "cube")
    with pytest.raises(
        ValueError, match=rf"width={width} is beyond .*\(64, ez.MAX_WIDTH\).* several times"
    ):
        ez.autodiff(f, ez.Forward, ez.Dual, ez.Dual, width=width)


@pytest.mark.parametrize("width", [0, -3, 2.0, "8", True, None])
def test_a_width_that_is_not_a_positive_integer_is_refused(width):
    f = ez.llvm_ir(CUBE, "cube")
    with pytest.raises(ValueError, match="width must be a positive integer"):
        ez.autodiff(f, ez.Forward, ez.Dual, ez.Dual, width=width)


def test_the_largest_width_builds_and_is_right():
    f = ez.llvm_ir(CUBE, "cube")
    k = ez.MAX_WIDTH
    df = ez.autodiff(f, ez.Forward, ez.Dual, ez.DualOnly, width=np.int64(k))
    tangents = np.arange(1.0, k + 1)
    np.testing.assert_allclose(df(2.0, tangents), 12.0 * tangents)


# --- how the build child dies -------------------------------------------------


def test_a_child_killed_like_the_oom_killer_does_is_not_retried():
    proc = _run("sigkill")
    assert "EnzymeError: Enzyme crashed while differentiating 'cube'" in proc.stdout
    assert "signal 9 (SIGKILL: the kernel's out-of-memory killer" in proc.stdout
    assert "retrying" not in proc.stderr
    assert proc.stderr.count("simulated crash: sigkill") == 1


def test_a_child_that_exhausts_its_memory_is_not_retried():
    proc = _run("memory")
    assert "EnzymeError: Enzyme ran out of memory while differentiating 'cube'" in proc.stdout
    assert "retrying" not in proc.stderr
    assert proc.stderr.count("simulated crash: memory") == 1


@pytest.mark.parametrize("what, signal_text", [("segv", "segmentation fault"), ("boom", "abort")])
def test_a_crash_is_retried_once_without_min_cut(what, signal_text):
    proc = _run(what)
    assert "EnzymeError: Enzyme crashed while differentiating 'cube'" in proc.stdout
    assert signal_text in proc.stdout
    assert proc.stderr.count("retrying without min-cut caching") == 1
    assert proc.stderr.count(f"simulated crash: {what}") == 2


def test_a_small_file_size_limit_is_named():
    # The limit is set by the child itself: a preexec_fn would run Python between
    # fork and exec in this (multithreaded, with JAX: warning) process.
    code = f"""
import resource
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
import enzyme_py as ez
try:
    ez.autodiff(ez.llvm_ir({CUBE!r}, 'cube'), ez.Reverse, ez.Active, ez.Active)
except ez.EnzymeError as exc:
    print('EnzymeError:', exc)
"""
    env = {**os.environ, "ENZYME_PY_DISK_CACHE": "0"}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "could not write its result" in proc.stdout
    assert "file size limit (RLIMIT_FSIZE, `ulimit -f`)" in proc.stdout
    assert "Enzyme gave up" not in proc.stdout


# --- Ctrl-C -------------------------------------------------------------------

INTERRUPTED = """
import os, sys, time, enzyme_py as ez
f = ez.llvm_ir({cube!r}, 'cube')
os.environ['ENZYME_PY_TEST_CRASH_IN_BUILD'] = {what!r}
print('building', flush=True)
try:
    ez.autodiff(f, ez.Reverse, ez.Active, ez.Active)
    print('built', flush=True)
except KeyboardInterrupt:
    print('KeyboardInterrupt at', time.monotonic(), flush=True)
try:
    os.waitpid(-1, os.WNOHANG)
    print('a child is left')
except ChildProcessError:
    print('no child left')
del os.environ['ENZYME_PY_TEST_CRASH_IN_BUILD']
print(ez.autodiff(f, ez.Reverse, ez.Active, ez.Active)(2.0, 1.0), flush=True)
"""


def _start(what: str, cache: str) -> subprocess.Popen[str]:
    env = {**os.environ, "ENZYME_PY_LOG": "1", "ENZYME_PY_CACHE_DIR": cache}
    return subprocess.Popen(
        [sys.executable, "-c", INTERRUPTED.format(cube=CUBE, what=what)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Python turns SIGINT into KeyboardInterrupt only where its parent left SIGINT
        # alone: a suite started in the background (`cmd &` without job control)
        # ignores it, and so would this child.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def test_ctrl_c_stops_a_build_at_once(tmp_path):
    proc = _start("sleep", str(tmp_path))  # the child sleeps 60 s before it builds
    assert proc.stdout is not None
    assert proc.stdout.readline() == "building\n"
    time.sleep(0.3)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, out + err
    lines = out.splitlines()
    assert lines[0].startswith("KeyboardInterrupt at"), out + err
    assert float(lines[0].split()[-1]) - sent < 0.5, "KeyboardInterrupt arrived late"
    assert lines[1] == "no child left"
    assert lines[2] == "(8.0, 12.0)"  # a later build works


def test_ctrl_c_as_a_build_finishes_keeps_its_result(tmp_path):
    # The child writes its result, then sends the parent SIGINT and lingers.
    proc = _start("interrupt_after", str(tmp_path))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, out + err
    lines = out.splitlines()
    assert lines[1].startswith("KeyboardInterrupt at"), out + err
    assert lines[2] == "no child left"
    assert lines[3] == "(8.0, 12.0)"
    assert "from disk cache" in err and err.count("from Enzyme") == 0, err


# --- reaping --------------------------------------------------------------------

REAPED = """
import glob, time, enzyme_py as ez
f = ez.llvm_ir({cube!r}, 'cube')
print(ez.autodiff(f, ez.Reverse, ez.Active, ez.Active)(2.0, 1.0))
ez.autodiff(f, ez.Forward, ez.Dual, ez.Dual)
def children():
    found = []
    for path in glob.glob('/proc/self/task/*/children'):
        try:  # a thread may end between the listing and the read
            with open(path) as listed:
                found += listed.read().split()
        except FileNotFoundError:
            pass
    return found
deadline = time.monotonic() + 10.0
while children() and time.monotonic() < deadline:
    time.sleep(0.01)
print('children left:', children())
"""


def test_build_processes_that_answered_are_reaped():
    # The caller takes a child's result once it is written, without waiting for the
    # child to exit (src/isolation.cpp); the exited child is still reaped, no zombie.
    env = {"ENZYME_PY_LOG": "1", "ENZYME_PY_DISK_CACHE": "0"}
    proc = run_python(REAPED.format(cube=CUBE), env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "(8.0, 12.0)", proc.stdout + proc.stderr
    assert lines[-1] == "children left: []", proc.stdout + proc.stderr
    assert proc.stderr.count("from Enzyme (isolated)") == 2, proc.stderr
