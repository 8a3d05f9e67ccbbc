"""libm's lgamma and tgamma (and lgammaf, tgammaf) in C code: their derivatives come
from enzyme_py's rules (python/enzyme_py/frontends/_gamma_rules.py; Enzyme aborts on
lgamma, and its tgamma derivative calls digamma, which libm lacks), their values stay
libm's. Against digamma and trigamma from differences of math.lgamma. A function whose
address the code takes keeps libm's declaration, and Enzyme's refusal."""

import math

import numpy as np
import pytest

import enzyme_py as ez

pytestmark = pytest.mark.needs_enzyme

SOURCE = r"""
#include <math.h>
double lg(double x) { return lgamma(x) * x; }
double tg(double x) { return tgamma(x) * x; }
float both32(float x) { return tgammaf(x) + lgammaf(x) * x; }
double sum(const double *x, int n) {
    double s = 0.0;
    for (int i = 0; i < n; ++i) s += lgamma(x[i]) * x[i] + tgamma(x[i]);
    return s;
}
"""

ADDRESS_TAKEN = r"""
#include <math.h>
static double (*const table[2])(double) = {lgamma, tgamma};
double pick(double x, int k) { return table[k](x) * x + lgamma(x); }
"""


@pytest.fixture(scope="module")
def m():
    return ez.c(SOURCE)


def digamma(v, e=1e-6):
    return (math.lgamma(v + e) - math.lgamma(v - e)) / (2 * e)


def trigamma(v, e=1e-4):
    return (digamma(v + e, 1e-5) - digamma(v - e, 1e-5)) / (2 * e)


@pytest.mark.parametrize("v", [0.3, 1.7, 4.2, -0.6, -2.5])
def test_gradients_of_lgamma_and_tgamma(m, v):
    assert ez.grad(m.lg)(v) == pytest.approx(math.lgamma(v) + v * digamma(v), rel=1e-8)
    g = math.gamma(v)
    assert ez.grad(m.tg)(v) == pytest.approx(g + v * g * digamma(v), rel=1e-8)
    # The derivative's value is libm's, bit for bit: the primal's own call.
    value, _ = ez.autodiff(m.tg, ez.Reverse, ez.Active, ez.Active)(v, 1.0)
    assert value == m.tg(v)


def test_float32_forms(m):
    v = np.float32(1.7)
    want = math.gamma(1.7) * digamma(1.7) + math.lgamma(1.7) + 1.7 * digamma(1.7)
    assert ez.grad(m.both32)(v) == pytest.approx(want, rel=2e-6)


def test_second_derivatives(m):
    x = np.array([0.5, 1.5, 2.5])
    h = ez.hessian(m.sum)(x, 3)
    for i, v in enumerate(x):
        g = math.gamma(v)
        # d2/dv2 [v lgamma(v) + gamma(v)] = 2 digamma + v trigamma + gamma (digamma^2 + trigamma)
        want = 2 * digamma(v) + v * trigamma(v) + g * (digamma(v) ** 2 + trigamma(v))
        assert h[i, i] == pytest.approx(want, rel=1e-5)
    assert h[0, 1] == 0.0


def test_a_function_whose_address_is_taken_keeps_enzymes_refusal():
    m = ez.c(ADDRESS_TAKEN)
    with pytest.raises(ez.EnzymeError, match="differentiating 'pick'"):
        ez.grad(m.pick)(1.7, 0)
