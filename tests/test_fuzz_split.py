"""Split mode under the fuzz driver (tests/fuzz_driver.py with a split fraction):
ez.ReverseSplit's halves (the reverse half twice from one tape), ez.vjp's pullback and
the PyTorch bridge's backward, in a child process: no crash, no write outside guards,
typed errors naming what is wrong, numbers matching central differences. And what the
larger run (scripts/fuzz_run.py) found: split derivatives with no primal to return."""

from __future__ import annotations

import numpy as np
import pytest

import enzyme_py as ez

from _helpers import run_fuzz_driver

pytestmark = pytest.mark.needs_enzyme

C = """
void sq(double *out, const double *x, double a, int n) {
  for (int i = 0; i < n; ++i) out[i] = a * x[i] * x[i];
}
double poly(double a, double b) { double t = a * a; t = t * b; return t + 3.0 * b; }
"""


@pytest.fixture(scope="module")
def m():
    return ez.c(C)


def test_split_mode_of_a_function_returning_nothing(m):
    # Its augmented forward pass returns the tape alone; this was refused after the
    # build ("returns its tape in an unexpected place").
    df = ez.autodiff(m.sq, ez.ReverseSplit, ez.Duplicated, ez.Duplicated, ez.Active, ez.Const)
    x, dx = np.array([1.0, 2.0, 3.0]), np.zeros(3)
    out, dout = np.zeros(3), np.array([1.0, 10.0, 100.0])
    primal, tape = df.forward(out, dout, x, dx, 0.5, 3)
    assert primal is None
    np.testing.assert_allclose(out, 0.5 * x * x)
    (da,) = df.reverse(tape, out, dout, x, dx, 0.5, 3)
    np.testing.assert_allclose(dx, 0.5 * 2 * x * [1.0, 10.0, 100.0])
    assert da == pytest.approx(float(x * x @ [1.0, 10.0, 100.0]))
    np.testing.assert_array_equal(dout, 0.0)  # consumed, as in the combined pass


def test_split_mode_with_an_active_only_return(m):
    df = ez.autodiff(m.poly, ez.ReverseSplit, ez.Active, ez.Active, ez.ActiveOnly)
    primal, tape = df.forward(1.5, 2.0)
    assert primal is None
    assert df.reverse(tape, 1.5, 2.0, 1.0) == pytest.approx((2 * 1.5 * 2.0, 1.5**2 + 3))
    assert df.reverse(tape, 1.5, 2.0, 2.0) == pytest.approx((4 * 1.5 * 2.0, 2 * (1.5**2 + 3)))


@pytest.mark.parametrize("seed", [20261202])
def test_fuzzed_split_calls(seed):
    pytest.importorskip("numba")
    report = run_fuzz_driver(str(seed), "150", "1.0")
    assert report["failures"] == []
    kinds = report["kinds"]
    assert sum(report["counts"].values()) == 150
    assert kinds.get("SplitCase ok", 0) > 20 and kinds.get("VjpCase ok", 0) > 20, kinds
