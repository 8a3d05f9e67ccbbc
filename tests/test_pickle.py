"""Derivatives pickle (rebuilt from what made them, the disk cache serving the code),
so they work in process pools."""

import multiprocessing
import pickle
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest

import enzyme_py as ez

numba = pytest.importorskip("numba")
pytestmark = pytest.mark.needs_enzyme


@numba.njit
def numba_energy(x, k):
    s = 0.0
    for i in range(x.shape[0]):
        s += k * x[i] ** 3
    return s


C_SOURCE = (
    "double sq(const double *x, int n) {"
    " double s = 0; for (int i = 0; i < n; ++i) s += x[i] * x[i]; return s; }"
)


def reverse_in_worker(df, x):
    dx = np.zeros_like(x)
    result = df(x, dx, *((len(x),) if "sq" in repr(df) else (2.0,)), 1.0)
    return result, dx


def test_activities_and_modes_stay_singletons():
    for obj in (ez.Const, ez.Active, ez.DualOnly, ez.Reverse, ez.Forward):
        assert pickle.loads(pickle.dumps(obj)) is obj


@pytest.mark.parametrize("frontend", ["c", "llvm_ir", "numba"])
def test_round_trip_in_process(frontend):
    if frontend == "c":
        df = ez.autodiff(ez.c(C_SOURCE).sq, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)
        x, extra, expected = np.arange(1.0, 4.0), (3,), 2 * np.arange(1.0, 4.0)
    elif frontend == "numba":
        df = ez.autodiff(numba_energy, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)
        x, extra, expected = np.arange(1.0, 4.0), (2.0,), 6 * np.arange(1.0, 4.0) ** 2
    else:
        ir = (
            "define double @f(double* %x) {\n %v = load double, double* %x\n"
            " %r = fmul double %v, %v\n ret double %r\n}"
        )
        df = ez.autodiff(ez.llvm_ir(ir, "f"), ez.Reverse, ez.Duplicated, ez.Active)
        x, extra, expected = np.array([3.0]), (), np.array([6.0])
    again = pickle.loads(pickle.dumps(df))
    dx = np.zeros_like(x)
    again(x, dx, *extra, 1.0)
    np.testing.assert_allclose(dx, expected)


def test_higher_order_derivative_pickles():
    f = ez.llvm_ir(
        "define double @f(double %x) {\n %y = fmul double %x, %x\n ret double %y\n}", "f"
    )
    second = ez.autodiff(
        ez.autodiff(f, ez.Reverse, ez.Active, ez.Active), ez.Forward, ez.Dual, ez.Const, ez.DualOnly
    )
    assert pickle.loads(pickle.dumps(second))(3.0, 1.0, 1.0) == (6.0, 2.0)


def test_process_pool_with_spawned_workers():
    context = multiprocessing.get_context("spawn")  # nothing inherited: rebuilt from pickles
    c_df = ez.autodiff(ez.c(C_SOURCE).sq, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)
    nb_df = ez.autodiff(numba_energy, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)
    x = np.linspace(0.5, 2.0, 4)
    with ProcessPoolExecutor(max_workers=2, mp_context=context) as pool:
        c_result, c_dx = pool.submit(reverse_in_worker, c_df, x).result(timeout=300)
        nb_result, nb_dx = pool.submit(reverse_in_worker, nb_df, x).result(timeout=300)
    assert c_result == (pytest.approx(float(np.sum(x * x))),)
    np.testing.assert_allclose(c_dx, 2 * x)
    assert nb_result == (pytest.approx(float(np.sum(2.0 * x**3))),)
    np.testing.assert_allclose(nb_dx, 6.0 * x**2)


def test_unpicklable_function_says_why():
    from dataclasses import replace

    fn = replace(ez.c(C_SOURCE).sq, origin=None)
    df = ez.autodiff(fn, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(df)


def call_in_worker(f, *args):
    return f(*args)


def test_helpers_results_and_c_functions_pickle():
    # ez.grad(...) was a closure, and IRFunction held a native module: neither pickled.
    sq = ez.c(C_SOURCE).sq
    x = np.linspace(0.5, 2.0, 4)
    assert pickle.loads(pickle.dumps(sq)).name == sq.name
    module = pickle.loads(pickle.dumps(ez.c(C_SOURCE, flags=["-O1"])))
    assert module.functions() == ["sq"] and module._origin[1] == ("-O1",)
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        g = pool.submit(call_in_worker, ez.grad(numba_energy), x, 2.0).result(timeout=300)
        value, gc = pool.submit(call_in_worker, ez.value_and_grad(sq), x, 4).result(timeout=300)
    np.testing.assert_allclose(g, 6.0 * x**2)
    assert value == pytest.approx(float(np.sum(x * x)))
    np.testing.assert_allclose(gc, 2 * x)
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(replace_origin(sq))


def replace_origin(fn):
    from dataclasses import replace

    return replace(fn, origin=None)
