"""@njit functions passed as arguments (an objective given to a solver or a finite
difference): Const, part of the specialisation, so each function passed gets its own
derivative. Against finite differences."""

import numba
import numpy as np
import pytest

import enzyme_py as ez

from reference import fd_scalar

pytestmark = pytest.mark.needs_enzyme


@numba.njit
def cubic(x):
    return x * x * x - 2.0 * x


@numba.njit
def wave(x):
    return np.sin(3.0 * x) * x


@numba.njit
def newton_iterate(f, x0, steps=6, h=1e-4):
    # A few Newton steps on f with a finite-difference slope, as a root finder writes
    # them; the result depends smoothly on x0 through the fixed number of steps.
    x = x0
    for _ in range(steps):
        slope = (f(x + h) - f(x - h)) / (2.0 * h)
        x = x - 0.5 * f(x) / slope
    return x


@numba.njit
def apply_scaled(x, out, f):
    for i in range(x.size):
        out[i] = f(x[i]) * x[i]


def test_grad_with_a_function_argument_matches_finite_differences():
    g = ez.grad(newton_iterate, argnums=1)
    for f in (cubic, wave, cubic):  # each function its own specialisation, in turn
        want = fd_scalar(lambda x0, f=f: newton_iterate.py_func(f, x0), 1.7)
        assert g(f, 1.7) == pytest.approx(want, rel=1e-5)


def test_reverse_and_forward_autodiff_with_a_function_argument():
    rev = ez.autodiff(newton_iterate, ez.Reverse, ez.Const, ez.Active, ez.Active)
    fwd = ez.autodiff(newton_iterate, ez.Forward, ez.Const, ez.Dual, ez.Dual)
    for f in (wave, cubic):
        want = fd_scalar(lambda x0, f=f: newton_iterate.py_func(f, x0), 0.9)
        value, dx0 = rev(f, 0.9, 1.0)
        assert value == pytest.approx(newton_iterate(f, 0.9))
        assert dx0 == pytest.approx(want, rel=1e-5)
        _, tangent = fwd(f, 0.9, 1.0)
        assert tangent == pytest.approx(want, rel=1e-5)


def test_jacobian_of_an_output_function_with_a_function_argument():
    x = np.linspace(0.1, 1.0, 5)
    for f, df in ((wave, lambda t: 3 * np.cos(3 * t) * t + np.sin(3 * t)),
                  (cubic, lambda t: 3 * t * t - 2.0)):  # fmt: skip
        jac = ez.jacobian(apply_scaled, 0, output=1)(x, np.zeros(5), f)
        expected = np.diag(df(x) * x + f.py_func(x))
        np.testing.assert_allclose(jac, expected, rtol=1e-10, atol=1e-12)


def test_a_function_argument_must_be_const():
    df = ez.autodiff(newton_iterate, ez.Reverse, ez.Active, ez.Active, ez.Active)
    with pytest.raises(ez.ActivityError, match=r"parameter 0 \('f'\) of 'newton_iterate' is "
                       r"an @njit function, which can only be Const"):  # fmt: skip
        df(cubic, 1.0, 1.0)


def test_a_derivative_taking_functions_is_not_called_from_njit():
    df = ez.autodiff(newton_iterate, ez.Reverse, ez.Const, ez.Active, ez.Const, ez.Const,
                     ez.Active)  # fmt: skip
    df(cubic, 1.0, 6, 1e-4, 1.0)
    with pytest.raises(ez.ActivityError, match="takes @njit functions as arguments.*close over"):
        df.njit()
