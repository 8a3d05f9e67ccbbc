"""JAX's conventions in the helpers: keyword arguments and defaults, tuple argnums,
jacfwd / jacrev / hvp, output-parameter functions with scalar parameters in jvp, vjp
and jacobian, and the docstring examples. Against float64 central differences."""

import doctest
import math
import pickle

import numpy as np
import pytest

import enzyme_py as ez

from reference import fd_gradient, fd_jacobian, fd_scalar

numba = pytest.importorskip("numba")
pytestmark = pytest.mark.needs_enzyme


@numba.njit
def dist(x, y, p=2.0):
    s = 0.0
    for i in range(x.shape[0]):
        s += abs(x[i] - y[i]) ** p
    return s


X = np.array([0.3, -1.2, 0.8, 2.0])
Y = np.array([1.0, 0.5, -0.4, 1.1])


def test_keywords_and_defaults_pass_through():
    expected = fd_gradient(lambda z: dist.py_func(z, Y), X)
    np.testing.assert_allclose(ez.grad(dist)(X, Y), expected, rtol=1e-8)  # p omitted
    np.testing.assert_allclose(ez.grad(dist)(X, y=Y), expected, rtol=1e-8)
    cubic = fd_gradient(lambda z: dist.py_func(z, Y, 3.0), X)
    np.testing.assert_allclose(ez.grad(dist)(X, Y, p=3.0), cubic, rtol=1e-8)
    # argnums count positions after binding: the default's own derivative.
    dp = fd_scalar(lambda p: dist.py_func(X, Y, p), 2.0)
    value, g = ez.value_and_grad(dist, argnums=2)(x=X, y=Y)
    assert value == pytest.approx(dist.py_func(X, Y), rel=1e-14)
    assert g == pytest.approx(dp, rel=1e-7)
    gx, gy = ez.jacrev(dist, argnums=(0, 1))(X, p=2.0, y=Y)
    np.testing.assert_allclose(gx, expected, rtol=1e-8)
    np.testing.assert_allclose(gy, -expected, rtol=1e-8)
    np.testing.assert_allclose(ez.jacfwd(dist)(X, Y), expected, rtol=1e-8)
    h = ez.hessian(dist)(X, y=Y)
    np.testing.assert_allclose(h, 2 * np.eye(4), rtol=1e-12, atol=1e-12)
    # jvp, vjp and hvp fill in defaults too.
    v = np.linspace(-1.0, 1.0, 4)
    _, dy = ez.jvp(dist, (X, Y), (v, None))
    assert dy == pytest.approx(float(expected @ v), rel=1e-8)
    _, pullback = ez.vjp(dist, X, Y)
    back = pullback(2.0)
    assert len(back) == 2  # one entry per primal given
    np.testing.assert_allclose(back[0], 2 * expected, rtol=1e-8)
    g, hv = ez.hvp(dist, (X, Y), (v, None))
    np.testing.assert_allclose(g, expected, rtol=1e-8)
    np.testing.assert_allclose(hv, 2 * v, rtol=1e-12)


def test_bad_keywords_name_the_keyword_and_the_function():
    with pytest.raises(TypeError, match=r"grad\(dist\).*unexpected keyword argument 'q'.*dist"):
        ez.grad(dist)(X, Y, q=3.0)
    with pytest.raises(TypeError, match=r"jacobian\(dist\).*missing a required argument: 'y'"):
        ez.jacobian(dist)(X)
    with pytest.raises(TypeError, match="multiple values for argument 'x'"):
        ez.value_and_grad(dist)(X, Y, x=X)
    with pytest.raises(TypeError, match=r"hessian\(dist\): too many positional"):
        ez.hessian(dist)(X, Y, 2.0, 1.0)
    with pytest.raises(TypeError) as info:
        ez.grad(dist)(X, Y, q=3.0)
    assert "_Gradient" not in str(info.value)


C = (
    ez.c(
        """
    #include <math.h>
    double energy(const double *x, double k, int n) {
        double s = 0.0;
        for (int i = 0; i < n; ++i) s += k * sin(x[i]) * x[i];
        return s;
    }
    """
    )
    if ez.has_autodiff()
    else None
)


def test_keywords_of_c_functions_are_their_parameter_names():
    x = np.linspace(0.1, 1.0, 5)
    expected = 2.5 * (np.cos(x) * x + np.sin(x))
    np.testing.assert_allclose(ez.grad(C.energy)(x, n=5, k=2.5), expected, rtol=1e-13)
    with pytest.raises(TypeError, match=r"grad\(.*energy.*\).*unexpected keyword argument 'm'"):
        ez.grad(C.energy)(x, 2.5, 5, m=5)


@numba.njit
def sweep(x, a, b, out):
    # An output-parameter function with scalar parameters (the corpus's common shape).
    for i in range(out.shape[0]):
        out[i] = a * math.sin(x[i % x.shape[0]]) + b * b * x[(i + 1) % x.shape[0]]


def sweep_np(x, a, b, m=11):
    out = np.zeros(m)
    sweep.py_func(x, a, b, out)
    return out


XS, A, B = np.linspace(0.2, 1.4, 9), 1.7, -0.6


@pytest.mark.parametrize("helper", [ez.jacobian, ez.jacfwd, ez.jacrev])
def test_jacobians_of_an_output_function_with_scalar_parameters(helper):
    # 9 inputs + 2 scalars against 11 outputs: jacobian picks forward mode; 9 columns
    # and 11 rows both take two batches.
    jx, ja, jb = helper(sweep, argnums=(0, 1, 2), output=3)(XS, A, B, np.zeros(11))
    assert jx.shape == (11, 9) and ja.shape == (11,) and jb.shape == (11,)
    np.testing.assert_allclose(jx, fd_jacobian(lambda z: sweep_np(z, A, B), XS), rtol=1e-7)
    np.testing.assert_allclose(ja, fd_jacobian(lambda a: sweep_np(XS, a, B), A), rtol=1e-7)
    np.testing.assert_allclose(jb, fd_jacobian(lambda b: sweep_np(XS, A, b), B), rtol=1e-7)
    jb_only = helper(sweep, argnums=2, output=3)(XS, A, B, np.zeros(11))  # int: one block
    np.testing.assert_allclose(jb_only, jb, rtol=1e-14)


def test_jacobian_picks_reverse_mode_for_few_outputs():
    out = np.zeros(2)  # 9 inputs, 2 outputs: rows by reverse mode, as jacrev
    by_size = ez.jacobian(sweep, 0, output=3)(XS, A, B, out)
    np.testing.assert_allclose(by_size, ez.jacrev(sweep, 0, output=3)(XS, A, B, out), rtol=1e-14)
    np.testing.assert_allclose(
        by_size, fd_jacobian(lambda z: sweep_np(z, A, B, 2), XS), rtol=1e-7, atol=1e-9
    )
    with pytest.raises(TypeError, match=r"output=1 names argument 1, a float"):
        ez.jacobian(sweep, 0, output=1)(XS, A, B, out)
    with pytest.raises(TypeError, match="output must be an argument position"):
        ez.jacobian(sweep, 0, output="out")


def test_jvp_and_vjp_of_an_output_function_with_scalar_parameters():
    v, da = np.linspace(-1.0, 1.0, 9), 0.3
    out = np.zeros(11)
    y, tangents = ez.jvp(sweep, (XS, A, B, out), (v, da, None, None))
    assert y is None and len(tangents) == 4
    assert tangents[1] is None and tangents[2] is None  # scalars: no output tangent
    np.testing.assert_array_equal(tangents[0], v)
    along = fd_jacobian(lambda t: sweep_np(XS + t * v, A + t * da, B), 0.0)
    np.testing.assert_allclose(tangents[3], along, rtol=1e-7)
    np.testing.assert_allclose(out, sweep_np(XS, A, B), rtol=1e-15)  # the primal, written
    w = np.linspace(0.5, -2.0, 11)
    value, pullback = ez.vjp(sweep, XS, A, B, np.zeros(11))
    assert value is None
    gx, ga, gb, gout = pullback((None, None, None, w))
    np.testing.assert_allclose(gx, w @ fd_jacobian(lambda z: sweep_np(z, A, B), XS), rtol=1e-7)
    assert ga == pytest.approx(float(w @ fd_jacobian(lambda a: sweep_np(XS, a, B), A)), rel=1e-7)
    assert gb == pytest.approx(float(w @ fd_jacobian(lambda b: sweep_np(XS, A, b), B)), rel=1e-7)
    np.testing.assert_array_equal(gout, np.zeros(11))  # out's old values are not read
    # The pullback is a transpose of the tangent map: <w, J t> == <J^T w, t>.
    assert float(w @ tangents[3]) == pytest.approx(float(gx @ v + ga * da), rel=1e-12)
    with pytest.raises(TypeError, match="returns nothing, so vjp_fn takes one cotangent per"):
        pullback(w)
    with pytest.raises(TypeError, match="cotangent 1 given to vjp_fn: argument 1 is not"):
        pullback((None, 1.0, None, w))
    with pytest.raises(ValueError, match=r"cotangent 3 given to vjp_fn has shape \(3,\)"):
        pullback((None, None, None, np.ones(3)))


@numba.njit
def mixed(x, c):
    s = 0.0
    for i in range(x.shape[0]):
        s += c * x[i] ** 3 + math.cos(x[i] * x[(i + 1) % x.shape[0]])
    return s


def mixed_grad(x, c):
    return fd_gradient(lambda z: mixed.py_func(z, c), x, 1e-5)


def test_hvp_is_jvp_of_grad():
    x, c = np.linspace(-0.8, 1.1, 6), 0.7
    v, dc = np.linspace(1.0, -1.0, 6), 0.4
    g, hv = ez.hvp(mixed, (x, c), (v, dc))
    np.testing.assert_allclose(g, mixed_grad(x, c), rtol=1e-7)
    along = fd_jacobian(lambda t: mixed_grad(x + t * v, c + t * dc), 0.0, 1e-4)
    np.testing.assert_allclose(hv, along, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(
        ez.hvp(mixed, (x, c), (v, None))[1], ez.hessian(mixed)(x, c) @ v, rtol=1e-12
    )
    with pytest.raises(TypeError, match="hvp differentiates argument 0 of mixed"):
        ez.hvp(mixed, (c, x), (None, v))
    with pytest.raises(ValueError, match="hvp got 2 primals and 1 tangents"):
        ez.hvp(mixed, (x, c), (v,))


def test_jacobian_and_hessian_results_pickle():
    for made in (ez.jacfwd(dist), ez.jacobian(sweep, (0, 1), output=3), ez.hessian(dist)):
        again = pickle.loads(pickle.dumps(made))
        assert repr(again) == repr(made)
    np.testing.assert_allclose(pickle.loads(pickle.dumps(ez.hessian(dist)))(X, Y), 2 * np.eye(4))


@pytest.mark.parametrize(
    "module",
    [
        "enzyme_py.helpers",
        "enzyme_py._jacobians",
        "enzyme_py._hessians",
        "enzyme_py._compose",
        "enzyme_py._linear",
        "enzyme_py._reverse_over_reverse",
        "enzyme_py._third_order",
        "enzyme_py._api",
        "enzyme_py._split",
        "enzyme_py._aux",
        "enzyme_py._python_functions",
    ],
)
def test_docstring_examples_run(module):
    import importlib

    found = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert found.attempted > 0
    assert found.failed == 0
