"""Calls a hostile user makes (issue 22, items 2, 3, 7, 8): lane counts checked in
df.njit(), a dispatcher's history that does not poison autodiff, Const returns in
Reverse mode, and messages that name the parameter."""

from __future__ import annotations

import math

import numpy as np
import pytest

import enzyme_py as ez

pytestmark = pytest.mark.needs_enzyme

numba = pytest.importorskip("numba")


@pytest.fixture(scope="module")
def m():
    return ez.c(
        """
        #include <math.h>
        double g(double a, double b) { return a * b + sin(a); }
        double mix(double a, const double *x, double *out, int n) {
          double s = 0;
          for (int i = 0; i < n; ++i) { out[i] = a * x[i] * x[i]; s += out[i]; }
          return s;
        }
        """
    )


# --- item 2: df.njit() checks the lanes of tangents and seeds ----------------


@pytest.mark.parametrize("lanes", [0, 1, 3])
def test_njit_forward_refuses_a_tangent_of_the_wrong_lane_count(m, lanes):
    d = ez.autodiff(m.g, ez.Forward, ez.Dual, ez.Const, ez.DualOnly, width=2).njit()

    @numba.njit
    def call(t):
        return d(2.0, t, 3.0)

    with pytest.raises(
        ValueError, match=r"the tangent of parameter 0 \('a'\) of 'g' needs 2 values \(width=2\)"
    ):
        call(np.ones(lanes))
    # d/da (a*b + sin a) = b + cos a, per lane
    np.testing.assert_allclose(
        call(np.array([1.0, -2.0])), [3 + math.cos(2), -2 * (3 + math.cos(2))]
    )


def test_njit_reverse_refuses_a_seed_of_the_wrong_lane_count(m):
    d = ez.autodiff(m.g, ez.Reverse, ez.Active, ez.Const, ez.ActiveOnly, width=2).njit()

    @numba.njit
    def call(seed):
        return d(2.0, 3.0, seed)

    with pytest.raises(ValueError, match=r"the seed of 'g' needs 2 values \(width=2\)"):
        call(np.zeros(0))
    _, da = call(np.array([1.0, 0.5]))
    np.testing.assert_allclose(da, [3 + math.cos(2), 0.5 * (3 + math.cos(2))])


def test_njit_refuses_a_tuple_of_the_wrong_length_when_typing(m):
    d = ez.autodiff(m.g, ez.Forward, ez.Dual, ez.Const, ez.DualOnly, width=2).njit()

    @numba.njit
    def call():
        return d(2.0, (1.0, 2.0, 3.0), 3.0)

    with pytest.raises(
        numba.core.errors.TypingError, match=r"the tangent of parameter 0 \('a'\) of 'g' needs 2"
    ):
        call()


# --- item 3: a dispatcher's history -----------------------------------------


def test_an_integer_call_of_the_primal_does_not_poison_grad():
    @numba.njit
    def g(x, y):
        return x * x * y

    assert g(1, 2) == 2  # the dispatcher's only signature is (int64, int64)
    assert ez.grad(g)(1.5, 2.0) == pytest.approx(2 * 1.5 * 2.0)
    assert ez.grad(g, (0, 1))(1.5, 2.0) == pytest.approx((6.0, 2.25))


def test_a_fortran_order_call_of_the_primal_does_not_poison_grad():
    @numba.njit
    def s(x):
        t = 0.0
        for i in range(x.shape[0]):
            for j in range(x.shape[1]):
                t += x[i, j] ** 2
        return t

    x = np.arange(6.0).reshape(2, 3)
    s(np.asfortranarray(x))
    np.testing.assert_allclose(ez.grad(s)(x), 2 * x)


def test_a_failed_derivative_call_does_not_poison_the_next():
    @numba.njit
    def h(x, y):
        return x * y

    dh = ez.autodiff(h, ez.Reverse, ez.Active, ez.Active, ez.Active)
    with pytest.raises(ez.ActivityError, match="parameter 0 \\('x'\\)"):
        dh(1, 2, 1.0)  # integers cannot be Active: h is now compiled for them
    again = ez.autodiff(h, ez.Reverse, ez.Active, ez.Active, ez.Active)
    assert again(1.5, 2.0, 1.0) == pytest.approx((3.0, 2.0, 1.5))


# --- item 7: Reverse mode with a Const return ---------------------------------


def test_c_reverse_with_a_const_return_gives_the_primal_and_zero_adjoints(m):
    # clang contracts a * b + sin(a) into fmuladd. Enzyme v0.0.289 asserted on it
    # ("getting diffe of constant value") while the intrinsic's attributes were
    # stripped; kept, the request has its defined meaning: the primal, and zero
    # adjoints (nothing flows back from a Const return).
    value, da, db = ez.autodiff(m.g, ez.Reverse, ez.Active, ez.Active, ez.Const)(2.0, 3.0)
    assert (value, da, db) == (pytest.approx(6 + math.sin(2)), 0.0, 0.0)
    value, da, db = ez.autodiff(m.g, ez.Reverse, ez.Active, ez.Active, ez.Active)(2.0, 3.0, 0.0)
    assert (value, da, db) == (pytest.approx(6 + math.sin(2)), 0.0, 0.0)


def test_c_reverse_with_a_const_return_and_an_output_array(m):
    # The seed is in out's shadow; d out_i / d a = x_i^2, d out_i / d x_i = 2 a x_i.
    x, dx = np.array([1.0, 2.0, 3.0]), np.full(3, 0.5)
    out, dout = np.zeros(3), np.array([1.0, -1.0, 2.0])
    df = ez.autodiff(m.mix, ez.Reverse, ez.Active, ez.Duplicated, ez.Duplicated, ez.Const, ez.Const)
    value, da = df(2.0, x, dx, out, dout.copy(), 3)
    assert value == pytest.approx(2.0 * 14.0)
    assert da == pytest.approx(np.dot(dout, x * x))
    np.testing.assert_allclose(dx, 0.5 + dout * 2 * 2.0 * x)


def test_numba_reverse_with_a_const_return():
    @numba.njit
    def f(a, x):
        t = 0.0
        for i in range(x.shape[0]):
            t += a * x[i]
        return t

    x, dx = np.array([1.0, 2.0]), np.array([0.25, 0.25])
    value, da = ez.autodiff(f, ez.Reverse, ez.Active, ez.Duplicated, ez.Const)(3.0, x, dx)
    assert (value, da) == (9.0, 0.0)
    np.testing.assert_array_equal(dx, [0.25, 0.25])  # nothing added


# --- item 8: messages that name the parameter --------------------------------


def test_a_string_activity_for_a_numba_function_is_named():
    @numba.njit
    def h(a, b):
        return a * b

    with pytest.raises(ez.ActivityError, match=r"parameter 0 \('a'\) of 'h' is 'Duplicated'"):
        ez.autodiff(h, ez.Reverse, "Duplicated", ez.Active, ez.Active)


def test_a_0d_seed_with_width_2_is_named(m):
    df = ez.autodiff(m.g, ez.Reverse, ez.Active, ez.Active, ez.Active, width=2)
    with pytest.raises(
        ValueError, match=r"the seed of 'g' needs 2 values \(width=2\); got shape \(\)"
    ):
        df(2.0, 3.0, np.array(1.0))


@pytest.mark.parametrize("option", ["runtime_activity", "strong_zero", "check"])
def test_an_option_that_is_not_a_bool_is_named(m, option):
    with pytest.raises(TypeError, match=f"{option} must be True or False; got 'yes'"):
        ez.autodiff(m.g, ez.Reverse, ez.Active, ez.Active, ez.Active, **{option: "yes"})


def test_a_big_endian_array_for_numba_is_named():
    @numba.njit
    def s(x):
        t = 0.0
        for i in range(x.shape[0]):
            t += x[i] * x[i]
        return t

    x = np.arange(3.0).astype(">f8")
    with pytest.raises(ValueError, match=r"parameter 0 \('x'\) of 's' has byte order >f8.*native"):
        ez.autodiff(s, ez.Reverse, ez.Duplicated, ez.Active)(x, np.zeros_like(x), 1.0)


@pytest.mark.parametrize(
    "value, error, text",
    [
        (np.ones(3), TypeError, "is Active, a float scalar; got an array"),
        (None, TypeError, "got NoneType; pass a real number"),
        ("1.5", TypeError, "got str; pass a real number"),
        (10**400, ValueError, "an integer of 401 digits"),
    ],
)
def test_a_bad_value_for_a_numba_float_parameter_is_named(value, error, text):
    @numba.njit
    def h(a, b):
        return a * b

    with pytest.raises(error, match=rf"parameter 0 \('a'\) of 'h' .*{text}"):
        ez.autodiff(h, ez.Reverse, ez.Active, ez.Active, ez.Active)(value, 2.0, 1.0)
