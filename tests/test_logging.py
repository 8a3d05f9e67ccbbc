"""Logging through Python's ``logging`` (logger ``enzyme_py``), ENZYME_PY_LOG=1, and the
progress line of long builds."""

from __future__ import annotations

import logging
import time
import uuid

import pytest

import enzyme_py as ez
from enzyme_py import _log


def _fresh_function(name: str = "cube"):
    """An IR function no cache has seen (a unique constant), so it is built by Enzyme."""
    c = 1.0 + (uuid.uuid4().int % 10**6) / 10**7
    text = (
        f"define double @{name}(double %x) {{\n"
        "  %a = fmul double %x, %x\n"
        "  %b = fmul double %a, %x\n"
        f"  %c = fmul double %b, {c:.7e}\n"
        "  ret double %c\n}"
    )
    return ez.llvm_ir(text, name), c


def _records(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "enzyme_py" and r.levelno == level]


def test_progress_lines_only_for_slow_steps(caplog):
    caplog.set_level(logging.INFO, logger="enzyme_py")
    with _log.progress("the fast thing", after_s=5.0):
        pass
    assert _records(caplog, logging.INFO) == []
    with _log.progress("the slow thing", after_s=0.05):
        time.sleep(0.5)
    start, end = (r.getMessage() for r in _records(caplog, logging.INFO))
    assert start == "building the slow thing ..."
    assert end.startswith("built the slow thing in ") and end.endswith(" s")
    assert float(end.split(" in ")[1][:-2]) >= 0.5


def test_progress_is_silent_when_info_is_off(caplog, monkeypatch):
    monkeypatch.delenv("ENZYME_PY_LOG", raising=False)
    caplog.set_level(logging.WARNING, logger="enzyme_py")
    with _log.progress("the slow thing", after_s=0.01):
        time.sleep(0.1)
    assert [r for r in caplog.records if r.name == "enzyme_py"] == []


def test_env_variable_attaches_a_stderr_handler_after_import(monkeypatch, capsys):
    monkeypatch.setenv("ENZYME_PY_LOG", "1")
    _log.log("hello from the test")
    assert "[enzyme_py] hello from the test" in capsys.readouterr().err
    monkeypatch.setenv("ENZYME_PY_LOG", "0")
    _log.log("not shown")
    assert "not shown" not in capsys.readouterr().err
    assert logging.getLogger("enzyme_py").level == logging.NOTSET


@pytest.mark.needs_enzyme
def test_builds_and_cache_hits_are_debug_records(caplog, monkeypatch, tmp_path):
    monkeypatch.setenv("ENZYME_PY_CACHE_DIR", str(tmp_path))
    caplog.set_level(logging.DEBUG, logger="enzyme_py")
    f, c = _fresh_function()
    df = ez.autodiff(f, ez.Reverse, ez.Active, ez.Active)
    assert df(2.0, 1.0)[1] == pytest.approx(3 * c * 4.0)
    (built,) = [r.getMessage() for r in _records(caplog, logging.DEBUG)]
    assert "'cube' in Reverse mode with activities Active, Active: from Enzyme" in built
    # A fast build announces nothing at INFO (the progress line needs a second).
    assert _records(caplog, logging.INFO) == []


@pytest.mark.needs_enzyme
def test_a_slow_build_reports_progress_while_it_runs(caplog, monkeypatch, tmp_path):
    from enzyme_py import _build

    monkeypatch.setenv("ENZYME_PY_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("ENZYME_PY_ISOLATE", "1")
    # The build's child sleeps 1.6 s before it builds: past the progress line's 1 s.
    monkeypatch.setenv("ENZYME_PY_TEST_SLOW_BUILD_MS", "1600")
    returned: list[float] = []
    native_build = _build._native_build

    def timed_build(*args, **kwargs):
        built = native_build(*args, **kwargs)
        returned.append(time.time())
        return built

    monkeypatch.setattr(_build, "_native_build", timed_build)
    caplog.set_level(logging.INFO, logger="enzyme_py")
    f, c = _fresh_function("slowcube")
    asked = time.time()
    df = ez.autodiff(f, ez.Forward, ez.Dual, ez.Dual)
    assert df(2.0, 1.0)[1] == pytest.approx(3 * c * 4.0)
    start, end = _records(caplog, logging.INFO)
    assert start.getMessage() == (
        "building the derivative of 'slowcube' in Forward mode with activities Dual, Dual "
        "(Enzyme) ..."
    )
    assert end.getMessage().startswith("built the derivative of 'slowcube'")
    assert float(end.getMessage().split(" in ")[-1][:-2]) >= 1.6
    # The line came out while Enzyme's child ran, a second in: the GIL is released while
    # this process waits for it, so the timer thread is not held up until the build ends.
    assert asked + 0.9 <= start.created <= returned[0]


@pytest.mark.needs_enzyme
def test_the_log_leaves_out_enzymes_dump_of_a_prange_launch_rule(monkeypatch, tmp_path, capfd):
    # Enzyme prints both functions of a custom augmented forward pass that returns a
    # tape alone (the prange launch's rule), about 800 lines of IR for a body with a
    # loop; ENZYME_PY_LOG=1 shows the build process's output without them.
    import numba
    import numpy as np

    monkeypatch.setenv("ENZYME_PY_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("ENZYME_PY_LOG", "1")
    scale = 1.0 + (uuid.uuid4().int % 10**6) / 10**7  # a function no cache has seen

    @numba.njit(parallel=True)
    def row_sums(a):
        s = 0.0
        for i in numba.prange(a.shape[0]):
            t = 0.0
            for j in range(a.shape[1]):
                t += a[i, j] * a[i, j]
            s += scale * t
        return s

    a = np.arange(12.0).reshape(3, 4)
    row_sums(a)
    capfd.readouterr()
    da = np.zeros_like(a)
    ez.autodiff(row_sums, ez.Reverse, ez.Duplicated, ez.Active, threads=2)(a, da, 1.0)
    np.testing.assert_allclose(da, 2.0 * scale * a, rtol=1e-14)
    err = capfd.readouterr().err
    assert "aug: todiff" not in err and "aug foundcalled" not in err
    assert "define " not in err
