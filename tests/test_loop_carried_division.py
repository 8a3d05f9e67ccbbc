"""A value divided in place in a loop and used besides (`disc /= 1 + rate; pv += c[t] *
disc`): Enzyme v0.0.289's reverse pass recomputes every iteration's quotient from the
value after the last one, a silently wrong gradient with respect to the divisor (-38.7
for -42.8 on a present value). The engine divides a `freeze` of the value instead
(src/rewrites.h: freeze_phi_dividends). Checked against central differences, in every
frontend that reaches Enzyme (LLVM IR, C, Numba) and through Enzyme's markers in C."""

from __future__ import annotations

import numba
import numpy as np
import pytest
from corpus.functions import present_value

import enzyme_py as ez

pytestmark = pytest.mark.needs_enzyme

CASH = np.linspace(1.0, 2.0, 8)
RATE = 0.05


def present_value_reference(cash, rate):
    pv, disc = 0.0, 1.0
    for c in cash:
        disc /= 1.0 + rate
        pv += c * disc
    return pv


def central(f, x, h=1e-6):
    return (f(x + h) - f(x - h)) / (2 * h)


EXPECTED_RATE = central(lambda r: present_value_reference(CASH, r), RATE)
EXPECTED_CASH = np.array([(1.0 + RATE) ** -(t + 1) for t in range(CASH.size)])

# The loop as LLVM IR: the dividend is the loop's PHI, which the quotient feeds.
GEOMETRIC = """
define double @geometric(double %q, i64 %n) {
entry:
  %any = icmp sgt i64 %n, 0
  br i1 %any, label %loop, label %exit
loop:
  %i = phi i64 [ 0, %entry ], [ %i.next, %loop ]
  %s = phi double [ 0.0, %entry ], [ %s.next, %loop ]
  %x = phi double [ 1.0, %entry ], [ %x.next, %loop ]
  %x.next = fdiv double %x, %q
  %s.next = fadd double %s, %x.next
  %i.next = add nuw nsw i64 %i, 1
  %done = icmp eq i64 %i.next, %n
  br i1 %done, label %exit, label %loop
exit:
  %r = phi double [ 0.0, %entry ], [ %s.next, %loop ]
  ret double %r
}
"""

C_SOURCE = """
double present_value(const double *cash, double rate, long n) {
    double pv = 0.0, disc = 1.0;
    for (long t = 0; t < n; ++t) {
        disc /= 1.0 + rate;
        pv += cash[t] * disc;
    }
    return pv;
}
float present_value_f(const float *cash, float rate, long n) {
    float pv = 0.0f, disc = 1.0f;
    for (long t = 0; t < n; ++t) {
        disc /= 1.0f + rate;
        pv += cash[t] * disc;
    }
    return pv;
}
"""


# The corpus's present value, without the ZeroDivisionError check between the divisions.
present_value_numba = numba.njit(error_model="numpy")(present_value.py_func)


def test_geometric_sum_in_llvm_ir():
    f = ez.llvm_ir(GEOMETRIC, "geometric")
    df = ez.autodiff(f, ez.Reverse, ez.Active, ez.Const, ez.Active)
    value, dq = df(1.05, 8, 1.0)
    expected = sum(1.05 ** -(t + 1) for t in range(8))
    assert value == pytest.approx(expected, rel=1e-14)
    assert dq == pytest.approx(sum(-(t + 1) * 1.05 ** -(t + 2) for t in range(8)), rel=1e-12)


def test_present_value_in_c_reverse_and_forward():
    m = ez.c(C_SOURCE)
    df = ez.autodiff(m.present_value, ez.Reverse, ez.Duplicated, ez.Active, ez.Const, ez.Active)
    dcash = np.zeros_like(CASH)
    value, drate = df(CASH, dcash, RATE, CASH.size, 1.0)
    assert value == pytest.approx(present_value_reference(CASH, RATE), rel=1e-14)
    assert drate == pytest.approx(EXPECTED_RATE, rel=1e-8)
    np.testing.assert_allclose(dcash, EXPECTED_CASH, rtol=1e-14)
    fwd = ez.autodiff(m.present_value, ez.Forward, ez.Const, ez.Dual, ez.Const, ez.DualOnly)
    assert fwd(CASH, RATE, 1.0, CASH.size) == pytest.approx(EXPECTED_RATE, rel=1e-8)


def test_present_value_in_c_float32():
    m = ez.c(C_SOURCE)
    df = ez.autodiff(m.present_value_f, ez.Reverse, ez.Const, ez.Active, ez.Const, ez.Active)
    cash = CASH.astype(np.float32)
    _, drate = df(cash, np.float32(RATE), cash.size, np.float32(1.0))
    assert drate == pytest.approx(EXPECTED_RATE, rel=1e-5)


def test_present_value_in_numba_with_numpy_error_model():
    dcash, drate = ez.grad(present_value_numba, argnums=(0, 1))(CASH, RATE)
    assert drate == pytest.approx(EXPECTED_RATE, rel=1e-8)
    np.testing.assert_allclose(dcash, EXPECTED_CASH, rtol=1e-14)


def test_present_value_through_enzyme_markers_in_c():
    m = ez.c(
        C_SOURCE
        + """
        extern int enzyme_const;
        extern double __enzyme_autodiff(void *, ...);
        double drate(const double *cash, double rate, long n) {
            return __enzyme_autodiff((void *)present_value, enzyme_const, cash, rate,
                                     enzyme_const, n);
        }
        """
    )
    assert m.drate(CASH, RATE, CASH.size) == pytest.approx(EXPECTED_RATE, rel=1e-8)
