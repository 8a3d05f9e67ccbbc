"""C compiled with -fopenmp (frontends/_openmp.py): reverse derivatives of
'#pragma omp parallel for' loops run on OpenMP's threads and match central differences
and the serial derivative on 1, 2 and 4 threads; forward derivatives take the function
compiled without OpenMP; what Enzyme v0.0.289 does not differentiate (reductions,
dynamic schedules, num_threads and if clauses, thread numbers) is refused by name."""

from __future__ import annotations

import numpy as np
import pytest

import enzyme_py as ez
from enzyme_py.frontends import _openmp

from conftest import run_python
from reference import fd_gradient, fd_jacobian

pytestmark = pytest.mark.needs_enzyme

OPENMP = ["-fopenmp"]

# A weighted stencil into a private temporary, then a serial sum: `w` is a Const
# array the parallel body captures (by reference: Enzyme needs runtime activity).
STENCIL = r"""
#include <math.h>
#include <stdlib.h>
double stencil(const double *x, const double *w, int n) {
    double *t = (double *)malloc(sizeof(double) * n);
    t[0] = x[0];
    t[n - 1] = x[n - 1];
    #pragma omp parallel for
    for (int i = 1; i < n - 1; ++i)
        t[i] = w[i] * sin(x[i - 1]) * x[i] + x[i + 1] * x[i + 1];
    double s = 0.0;
    for (int i = 0; i < n; ++i)
        s += t[i] * t[i];
    free(t);
    return s;
}
"""

# Every iteration's adjoint adds into x[0]'s: a race would lose updates.
ONE_ENTRY = r"""
double one_entry(const double *x, double *t, int n) {
    #pragma omp parallel for
    for (int i = 0; i < n; ++i)
        t[i] = x[i] * x[0];
    double s = 0.0;
    for (int i = 0; i < n; ++i)
        s += t[i];
    return s;
}
"""

# Two loops in one region (a barrier between them), an atomic update, a critical one.
CONSTRUCTS = r"""
#include <math.h>
double constructs(const double *x, int n) {
    double t[64], u[64], h[4] = {0.0, 0.0, 0.0, 0.0}, c = 0.0;
    #pragma omp parallel
    {
        #pragma omp for
        for (int i = 0; i < n; ++i)
            t[i] = x[i] * x[i];
        #pragma omp for
        for (int i = 0; i < n; ++i)
            u[i] = t[i] * t[(i + 1) % n];
    }
    #pragma omp parallel for
    for (int i = 0; i < n; ++i) {
        #pragma omp atomic
        h[i % 4] += exp(-x[i]) * u[i];
        #pragma omp critical
        c += x[i] * x[i] * x[i];
    }
    return h[0] + 2.0 * h[1] + 3.0 * h[2] + 4.0 * h[3] + c;
}
"""


@pytest.fixture
def threads():
    """Sets OpenMP's thread count for parallel regions; restores it after."""
    runtime = _openmp.load_runtime()
    before = runtime.omp_get_max_threads()
    yield runtime.omp_set_num_threads
    runtime.omp_set_num_threads(before)


@pytest.mark.parametrize("count", [1, 2, 4])
def test_a_parallel_stencil_matches_central_differences_and_the_serial_one(threads, count):
    threads(count)
    n = 300
    rng = np.random.default_rng(count)
    x, w = rng.uniform(0.5, 1.5, n), rng.uniform(0.5, 1.5, n)
    C, Dup = ez.Const, ez.Duplicated
    f = ez.c(STENCIL, flags=OPENMP).stencil
    df = ez.autodiff(f, ez.Reverse, Dup, C, C, ez.Active)
    dx = np.zeros(n)
    df(x, dx, w, n, 1.0)
    np.testing.assert_allclose(dx, fd_gradient(lambda v: f(v, w, n), x), rtol=1e-6, atol=1e-8)
    serial = ez.c(STENCIL).stencil
    dx_serial = np.zeros(n)
    ez.autodiff(serial, ez.Reverse, Dup, C, C, ez.Active)(x, dx_serial, w, n, 1.0)
    np.testing.assert_allclose(dx, dx_serial, rtol=1e-13, atol=1e-14)
    assert f(x, w, n) == pytest.approx(serial(x, w, n), rel=1e-14)


def test_many_iterations_adding_into_one_entry_on_four_threads(threads):
    threads(4)
    n = 20000
    x = np.random.default_rng(5).uniform(0.5, 1.5, n)
    f = ez.c(ONE_ENTRY, flags=OPENMP).one_entry
    df = ez.autodiff(f, ez.Reverse, ez.Duplicated, ez.Duplicated, ez.Const, ez.Active)
    for _ in range(3):
        dx = np.zeros(n)
        df(x, dx, np.zeros(n), np.zeros(n), n, 1.0)
        expected = x[0] * np.ones(n)  # d/dx_i of sum_i x_i x_0, i > 0 ...
        expected[0] = x[0] + x.sum()  # ... and of x_0 itself: x_0 + sum_i x_i
        np.testing.assert_allclose(dx, expected, rtol=1e-12)


def test_barriers_atomics_and_critical_sections_match_central_differences(threads):
    threads(2)
    n = 40
    x = np.random.default_rng(6).uniform(0.5, 1.5, n)
    f = ez.c(CONSTRUCTS, flags=OPENMP).constructs
    dx = ez.grad(f)(x, n)
    np.testing.assert_allclose(dx, fd_gradient(lambda v: f(v, n), x), rtol=1e-6, atol=1e-8)


def test_forward_mode_takes_the_function_compiled_without_openmp(threads):
    threads(2)
    n = 50
    rng = np.random.default_rng(7)
    x, w, t = rng.uniform(0.5, 1.5, n), rng.uniform(0.5, 1.5, n), rng.normal(size=n)
    f = ez.c(STENCIL, flags=OPENMP).stencil
    value, tangent = ez.autodiff(f, ez.Forward, ez.Dual, ez.Const, ez.Const, ez.Dual)(x, t, w, n)
    assert value == pytest.approx(f(x, w, n), rel=1e-14)
    expected = fd_gradient(lambda v: f(v, w, n), x) @ t
    assert tangent == pytest.approx(expected, rel=1e-6)


def test_a_new_process_runs_openmp_code_without_loading_the_runtime_itself():
    # Without enzyme_py loading libomp, the JIT finds no __kmpc_fork_call. The runtime
    # stays private: a Numba prange function run after it keeps its own threading
    # layer's OpenMP (with libomp global, Numba's omp layer bound to it and LLVM's
    # runtime printed "OMP: Info #276: omp_set_nested routine deprecated").
    script = (
        "import numba, numpy as np, enzyme_py as ez\n"
        f"f = ez.c({STENCIL!r}, flags=['-fopenmp']).stencil\n"
        "x = np.linspace(0.5, 1.5, 30); w = np.ones(30)\n"
        "print(f(x, w, 30), ez.c(" + repr(STENCIL) + ").stencil(x, w, 30))\n"
        "@numba.njit(parallel=True)\n"
        "def total(v):\n"
        "    s = 0.0\n"
        "    for i in numba.prange(v.shape[0]):\n"
        "        s += v[i]\n"
        "    return s\n"
        "assert total(np.ones(1000)) == 1000.0\n"
    )
    run = run_python(script)
    assert run.returncode == 0, run.stderr
    parallel, serial = map(float, run.stdout.split())
    assert parallel == pytest.approx(serial, rel=1e-14)
    assert "OMP:" not in run.stderr


REFUSED = {
    "reduction": (
        "#pragma omp parallel for reduction(+:s)\nfor (int i = 0; i < n; ++i) s += x[i] * x[i];",
        "a reduction clause",
    ),
    "dynamic schedule": (
        "#pragma omp parallel for schedule(dynamic, 4)\n"
        "for (int i = 0; i < n; ++i) t[i] = x[i] * x[i];\n"
        "for (int i = 0; i < n; ++i) s += t[i];",
        "a schedule(dynamic)",
    ),
    "num_threads": (
        "#pragma omp parallel for num_threads(2)\n"
        "for (int i = 0; i < n; ++i) t[i] = x[i] * x[i];\n"
        "for (int i = 0; i < n; ++i) s += t[i];",
        "a num_threads(...) clause",
    ),
    "if clause": (
        "#pragma omp parallel for if(n > 10)\n"
        "for (int i = 0; i < n; ++i) t[i] = x[i] * x[i];\n"
        "for (int i = 0; i < n; ++i) s += t[i];",
        "an if(...) clause",
    ),
    "thread numbers": (
        "#pragma omp parallel\n{ t[omp_get_thread_num()] = x[0] * x[0]; }\ns = t[0];",
        "omp_get_thread_num",
    ),
}


@pytest.mark.parametrize("construct", sorted(REFUSED))
def test_what_enzyme_does_not_differentiate_is_refused_by_name(construct):
    body, named = REFUSED[construct]
    source = (
        "int omp_get_thread_num(void);\n"
        "double g(const double *x, int n) {\n"
        "double t[64] = {0}; double s = 0.0;\n" + body + "\nreturn s;\n}\n"
    )
    f = ez.c(source, flags=OPENMP).g
    x = np.linspace(0.5, 1.5, 20)
    assert np.isfinite(f(x, 20))  # the primal runs
    with pytest.raises(ez.EnzymeError) as caught:
        ez.autodiff(f, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)(x, np.zeros(20), 20, 1.0)
    message = str(caught.value)
    assert "'g' uses OpenMP that Enzyme v0.0.289 does not differentiate" in message
    assert named in message
    assert "compile it without -fopenmp" in message
    # Forward mode differentiates it, serially.
    _, tangent = ez.autodiff(f, ez.Forward, ez.Dual, ez.Const, ez.Dual)(x, np.ones(20), 20)
    expected = fd_gradient(lambda v: f(v, 20), x).sum()
    assert tangent == pytest.approx(expected, rel=1e-6, abs=1e-9)


def test_a_second_derivative_is_refused_with_what_to_do(threads):
    threads(2)
    n = 20
    x, w = np.linspace(0.5, 1.5, n), np.ones(n)
    f = ez.c(STENCIL, flags=OPENMP).stencil
    with pytest.raises(ez.EnzymeError) as caught:
        ez.hessian(f)(x, w, n)
    assert "Take second derivatives of the function compiled without -fopenmp" in str(caught.value)
    # As it says: the function compiled without OpenMP.
    serial = ez.c(STENCIL).stencil
    hessian = ez.hessian(serial)(x, w, n)
    expected = fd_jacobian(lambda v: ez.grad(f)(v, w, n), x)  # of the OpenMP gradient
    np.testing.assert_allclose(hessian, expected, rtol=1e-5, atol=1e-6)


def test_only_fopenmp_itself_asks_for_the_runtime():
    assert _openmp.compiled_with_openmp(["-O2", "-fopenmp"])
    assert _openmp.compiled_with_openmp(["-fopenmp=libomp"])
    assert not _openmp.compiled_with_openmp(["-fopenmp-simd"])
    assert not _openmp.compiled_with_openmp(None)
