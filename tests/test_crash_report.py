"""ENZYME_PY_CRASH_REPORT=1: a process that dies of a fatal signal in loaded code says
where (the derivative's entry point, the faulting address, the native stack) before
Python's faulthandler names the Python frames."""

from __future__ import annotations

import signal

import pytest

from conftest import run_python

pytestmark = pytest.mark.needs_enzyme

# The function itself (m.f) reads address 24 for x > 0: a SIGSEGV in JIT code.
READS_ADDRESS_24 = """
import faulthandler
import resource
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the crash is wanted, its core file is not
faulthandler.enable()
import enzyme_py as ez
m = ez.c('''
double f(double x) {
  volatile double *p = (volatile double *)(unsigned long)(x > 0 ? 24 : 0);
  return *p * x;
}
''')
print(m.f(1.0))
"""


def test_a_fault_in_loaded_code_names_the_entry_point_then_the_python_frames():
    done = run_python(READS_ADDRESS_24, env={"ENZYME_PY_CRASH_REPORT": "1"})
    assert done.returncode == -signal.SIGSEGV, done.stderr[-2000:]
    report = done.stderr
    assert "enzyme_py: fatal signal 11" in report
    assert "fault address 0x0000000000000018" in report
    assert "in the JIT's code reservation; nearest entry below: __enzyme_py_entry_" in report
    assert "native stack:" in report
    # The previous handler (faulthandler's) still runs, after the report.
    python_frames = report.index("Fatal Python error: Segmentation fault")
    assert report.index("enzyme_py: fatal signal") < python_frames
    assert "in __call__" in report[python_frames:]


def test_without_the_variable_no_handler_is_installed():
    done = run_python(READS_ADDRESS_24, env={"ENZYME_PY_CRASH_REPORT": "0"})
    assert done.returncode == -signal.SIGSEGV
    assert "enzyme_py: fatal signal" not in done.stderr
    assert "Fatal Python error: Segmentation fault" in done.stderr
