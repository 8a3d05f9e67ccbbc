"""check_grad and autodiff(..., check=True): reverse, forward and finite differences."""

import warnings

import numpy as np
import pytest

import enzyme_py as ez

numba = pytest.importorskip("numba")

from numba_functions import cubes  # noqa: E402

pytestmark = pytest.mark.needs_enzyme


@numba.njit
def rosen(x, a):
    s = 0.0
    for i in range(x.shape[0] - 1):
        s += a * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2
    return s


@numba.njit
def kink(x):
    return abs(x) * 3.0


def test_check_grad_agrees_on_a_smooth_function():
    x = np.linspace(-1, 1, 6)
    report = ez.check_grad(rosen, x, 100.0)
    assert report.ok and report.worst < 1e-6
    assert [r["argument"] for r in report.rows] == ["arg 0", "arg 1"]
    text = str(report)
    assert "reverse-vs-FD" in text and "all agree" in text
    np.testing.assert_array_equal(x, np.linspace(-1, 1, 6))  # arguments untouched


def test_check_grad_flags_a_kink():
    report = ez.check_grad(kink, 1e-8)  # finite differences straddle the kink of abs
    assert not report.ok
    assert "DISAGREEMENT" in str(report) and "<-- disagrees" in str(report)


def test_autodiff_check_warns_once_on_disagreement():
    df = ez.autodiff(kink, ez.Reverse, ez.Active, ez.Active, check=True)
    with pytest.warns(ez.GradientCheckWarning, match="'kink' disagrees with finite differences"):
        assert df(1e-8, 1.0) == (pytest.approx(3e-8), 3.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert df(1e-8, 1.0) == (pytest.approx(3e-8), 3.0)  # checked once only


@pytest.mark.parametrize("mode", ["reverse", "forward"])
def test_autodiff_check_is_silent_when_right(mode):
    x = np.linspace(-1, 1, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        if mode == "reverse":
            df = ez.autodiff(rosen, ez.Reverse, ez.Duplicated, ez.Active, ez.Active, check=True)
            dx = np.zeros(5)
            value, da = df(x, dx, 100.0, 2.0)
            assert value == pytest.approx(rosen(x, 100.0))
            assert da == pytest.approx(2.0 * np.sum((x[1:] - x[:-1] ** 2) ** 2))
        else:
            df = ez.autodiff(rosen, ez.Forward, ez.Dual, ez.Const, ez.DualOnly, check=True)
            df(x, np.ones(5), 100.0)


def test_check_unsupported_shapes_are_said():
    @numba.njit
    def write(x, out):
        for i in range(x.shape[0]):
            out[i] = x[i] * 2

    df = ez.autodiff(write, ez.Reverse, ez.Duplicated, ez.Duplicated, check=True)
    with pytest.warns(ez.GradientCheckWarning, match="was not checked"):
        df(np.ones(3), np.zeros(3), np.zeros(3), np.ones(3))


def test_float32_gets_a_step_and_tolerance_of_its_own():
    # A step of 1e-6 is below float32's resolution near 1: differences were 9% off.
    x = np.linspace(0.1, 1.0, 6).astype(np.float32)
    report = ez.check_grad(cubes, x)
    assert report.ok and report.rtol == 1e-2, str(report)
    m = ez.c("float cube(float x) { return x * x * x; }")  # a Python float, computed in float32
    assert ez.check_grad(m.cube, 0.7).ok
    assert not ez.check_grad(kink, np.float32(1e-8)).ok  # still sees a wrong derivative
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        df = ez.autodiff(cubes, ez.Reverse, ez.Duplicated, ez.Active, check=True)
        dx = np.zeros_like(x)
        df(x, dx, 1.0)
    np.testing.assert_allclose(dx, 3 * x.astype(np.float64) ** 2, rtol=1e-6)


def test_check_with_a_zero_seed():
    x = np.linspace(-1, 1, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the zero adjoint was compared with the gradient
        df = ez.autodiff(rosen, ez.Reverse, ez.Duplicated, ez.Active, ez.Active, check=True)
        dx = np.zeros(5)
        assert df(x, dx, 100.0, 0.0) == (pytest.approx(rosen(x, 100.0)), 0.0)
    np.testing.assert_array_equal(dx, 0.0)


@numba.njit
def squares_into(x, out):
    s = 0.0
    for i in range(x.shape[0]):
        out[i] = x[i] * x[i]
        s += out[i]
    return s


@numba.njit
def kinks_into(x, out):
    for i in range(x.shape[0]):
        out[i] = abs(x[i]) * 3.0
    return 0.0


def test_check_counts_the_seed_an_output_array_carries():
    # Reverse mode: out's shadow holds the seed of out (consumed); dx receives the
    # gradient of seed * f + sum(dout * out).
    x = np.linspace(0.1, 1.0, 4)
    acts = (ez.Duplicated, ez.Duplicated, ez.Active)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        df = ez.autodiff(squares_into, ez.Reverse, *acts, check=True)
        dx, dout = np.zeros(4), np.array([1.0, -2.0, 0.5, 3.0])
        df(x, dx, np.zeros(4), dout, 2.0)
    np.testing.assert_allclose(dx, 2 * x * (2.0 + np.array([1.0, -2.0, 0.5, 3.0])), rtol=1e-14)
    np.testing.assert_array_equal(dout, 0.0)
    # A derivative that is wrong only through the output's seed is still caught.
    wrong = ez.autodiff(kinks_into, ez.Reverse, *acts, check=True)
    with pytest.warns(ez.GradientCheckWarning, match="'kinks_into' disagrees"):
        wrong(np.full(4, 1e-8), np.zeros(4), np.zeros(4), np.ones(4), 1.0)
