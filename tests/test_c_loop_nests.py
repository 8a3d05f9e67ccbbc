"""Loop nests that overwrite an array in their outer loop, and branchy reconstructions
(WENO/TENO-style), compiled by ez.c with its default flags and others, against float64
central differences, in reverse and forward mode (issue 18, item 3)."""

import numpy as np
import pytest

import enzyme_py as ez

from reference import fd_gradient

pytestmark = pytest.mark.needs_enzyme

LOOP_NESTS = r"""
#include <math.h>
/* explicit time stepping in place: u[i] = f(u[i-1], u[i], u[i+1]) */
double heat(double *u, int n, int steps) {
    for (int t = 0; t < steps; ++t) {
        double left = u[0];
        for (int i = 1; i < n - 1; ++i) {
            double mid = u[i];
            u[i] = mid + 0.2 * (left - 2.0 * mid + u[i + 1]) + 0.1 * sin(mid);
            left = mid;
        }
    }
    double s = 0.0;
    for (int i = 0; i < n; ++i) s += u[i] * u[i];
    return s;
}
/* the same with constant bounds (clang keeps the loops under -fno-unroll-loops) */
double heat8(double *u) {
    for (int t = 0; t < 4; ++t) {
        double left = u[0];
        for (int i = 1; i < 7; ++i) {
            double mid = u[i];
            u[i] = mid + 0.2 * (left - 2.0 * mid + u[i + 1]) + 0.1 * cos(mid);
            left = mid;
        }
    }
    double s = 0.0;
    for (int i = 0; i < 8; ++i) s += u[i] * u[i];
    return s;
}
/* Gauss-Seidel sweeps: each update reads the one just made */
double gauss_seidel(double *u, const double *f, int n, int sweeps) {
    for (int k = 0; k < sweeps; ++k)
        for (int i = 1; i < n - 1; ++i)
            u[i] = 0.5 * (u[i - 1] + u[i + 1] + f[i]) - 0.05 * u[i] * u[i];
    double s = 0.0;
    for (int i = 0; i < n; ++i) s += u[i] * u[i] * u[i];
    return s;
}
/* a prefix recurrence overwritten once per outer iteration */
double prefix(double *x, int n, int reps) {
    for (int r = 0; r < reps; ++r)
        for (int i = 1; i < n; ++i) x[i] = x[i - 1] * 0.5 + x[i] * x[i] * 0.3;
    double s = 0.0;
    for (int i = 0; i < n; ++i) s += sin(x[i]);
    return s;
}
double prefix8(double *x) {
    for (int r = 0; r < 3; ++r)
        for (int i = 1; i < 8; ++i) x[i] = x[i - 1] * 0.5 + x[i] * x[i] * 0.3;
    double s = 0.0;
    for (int i = 0; i < 8; ++i) s += sin(x[i]);
    return s;
}
/* an inner loop reads the array, the next one overwrites all of it */
double read_then_overwrite(double *a, int n, int m) {
    double sum = 0;
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < n; j++) sum += a[j] * a[j] * (i + 1);
        for (int j = 0; j < n; j++) a[j] = sin(a[j]) + 0.5 * a[j];
    }
    return sum;
}
/* normalised power iteration: the outer loop rescales the array by its norm */
double normalise(double *a, int n, int m) {
    double sum = 0;
    for (int i = 0; i < m; i++) {
        double s = 0;
        for (int j = 0; j < n; j++) s += a[j] * a[j];
        for (int j = 0; j < n; j++) a[j] = a[j] / sqrt(s) + 0.1 * a[(j + 1) % n];
        sum += s;
    }
    return sum;
}
"""

# (kernel, extra Const arguments after the array, length of the array)
KERNELS = {
    "heat": (("n", 3), 9),
    "heat8": ((), 8),
    "gauss_seidel": (("f", "n", 4), 9),
    "prefix": (("n", 3), 9),
    "prefix8": ((), 8),
    "read_then_overwrite": (("n", 5), 7),
    "normalise": (("n", 4), 6),
}
FLAGS = {
    "default": None,
    "O0": ["-O0"],
    "O1": ["-O1"],
    "O2-vectorized": ["-fvectorize", "-fslp-vectorize", "-funroll-loops"],
    "O3": ["-O3"],
}


@pytest.fixture(scope="module", params=list(FLAGS))
def nests(request):
    return ez.c(LOOP_NESTS, FLAGS[request.param])


def _args(name, size):
    extra, _ = KERNELS[name]
    forcing = np.linspace(0.0, 1.0, size)
    return [size if e == "n" else forcing if e == "f" else e for e in extra]


def _primal(module, name, x, extra):
    # The function's own value (an all-Const forward call: no derivative involved).
    fn = module[name]
    value = ez.autodiff(fn, ez.Forward, *[ez.Const] * (len(fn.params) + 1))
    return lambda z: value(z.copy(), *extra)


@pytest.mark.parametrize("name", list(KERNELS))
def test_loop_nest_reverse(nests, name):
    size = KERNELS[name][1]
    x0 = np.random.default_rng(3).uniform(0.1, 0.9, size)
    extra = _args(name, size)
    reference = fd_gradient(_primal(nests, name, x0, extra), x0)
    nconst = len(nests[name].params) - 1
    df = ez.autodiff(nests[name], ez.Reverse, ez.Duplicated, *[ez.Const] * nconst, ez.Active)
    dx = np.zeros_like(x0)
    df(x0.copy(), dx, *extra, 1.0)
    np.testing.assert_allclose(dx, reference, rtol=1e-6, atol=1e-7 * np.abs(reference).max())


@pytest.mark.parametrize("name", list(KERNELS))
def test_loop_nest_forward(nests, name):
    size = KERNELS[name][1]
    rng = np.random.default_rng(4)
    x0 = rng.uniform(0.1, 0.9, size)
    v = rng.normal(size=size)
    extra = _args(name, size)
    reference = float(fd_gradient(_primal(nests, name, x0, extra), x0) @ v)
    nconst = len(nests[name].params) - 1
    df = ez.autodiff(nests[name], ez.Forward, ez.Dual, *[ez.Const] * nconst, ez.Dual)
    _, dy = df(x0.copy(), v.copy(), *extra)
    assert dy == pytest.approx(reference, rel=1e-6, abs=1e-8)


def test_two_state_map_iterated():
    # x <- (3 sin(2 x0 + x1), 4 cos(x0 + x1)) five times, the adjoint seeded in x's shadow.
    m = ez.c(
        r"""
        #include <math.h>
        void iterate(double *x) {
            for (int r = 0; r < 5; ++r) {
                double t = 4 * cos(x[0] + x[1]);
                x[0] = 3 * sin(2 * x[0] + x[1]);
                x[1] = t;
            }
        }""",
        ["-O0"],
    )

    def f(z):
        for _ in range(5):
            z = np.array([3 * np.sin(2 * z[0] + z[1]), 4 * np.cos(z[0] + z[1])])
        return z[0] + 2 * z[1]

    x0 = np.array([0.9, 0.7])
    dx = np.array([1.0, 2.0])
    ez.autodiff(m.iterate, ez.Reverse, ez.Duplicated)(x0.copy(), dx)
    np.testing.assert_allclose(dx, fd_gradient(f, x0), rtol=1e-6)


# A TENO5-style reconstruction: smoothness indicators, pow, a cut-off of stencils whose
# weight falls below CT, two states written through pointers per face, a count of cut
# stencils through an int pointer and an unused parameter.
TENO = r"""
#include <math.h>
static inline double sq(double x) { return x * x; }
/* reconstruct one face: writes qL, qR and the number of stencils cut off */
static void teno_face(const double *v, double *qL, double *qR, int *ncut, double CT) {
  double b[3], g[3], dd[3], q[3];
  const double dlin[3] = {0.1, 0.6, 0.3};
  b[0] = 13.0/12.0*sq(v[0] - 2*v[1] + v[2]) + 0.25*sq(v[0] - 4*v[1] + 3*v[2]);
  b[1] = 13.0/12.0*sq(v[1] - 2*v[2] + v[3]) + 0.25*sq(v[1] - v[3]);
  b[2] = 13.0/12.0*sq(v[2] - 2*v[3] + v[4]) + 0.25*sq(3*v[2] - 4*v[3] + v[4]);
  double tau = fabs(b[0] - b[2]);
  double gs = 0.0;
  for (int k = 0; k < 3; ++k) { g[k] = pow(1.0 + tau / (b[k] + 1e-40), 6.0); gs += g[k]; }
  double ds = 0.0;
  for (int k = 0; k < 3; ++k) {
    if (g[k] / gs < CT) { dd[k] = 0.0; ++*ncut; } else dd[k] = dlin[k];
    ds += dd[k];
  }
  q[0] = (2*v[0] - 7*v[1] + 11*v[2])/6;
  q[1] = (-v[1] + 5*v[2] + 2*v[3])/6;
  q[2] = (2*v[2] + 5*v[3] - v[4])/6;
  double r = 0.0;
  for (int k = 0; k < 3; ++k) r += dd[k] * q[k];
  *qL = r / ds;
  double w0 = 0.1/sq(1e-6 + b[0]), w1 = 0.6/sq(1e-6 + b[1]), w2 = 0.3/sq(1e-6 + b[2]);
  *qR = (w0*q[0] + w1*q[1] + w2*q[2]) / (w0 + w1 + w2);
}
void teno_all(const double *u, double *out, int *ncut, int n, double CT, double unused) {
  *ncut = 0;
  for (int i = 2; i < n - 2; ++i) teno_face(u + i - 2, &out[2*i], &out[2*i+1], ncut, CT);
}
double teno_energy(const double *u, double *out, int *ncut, int n, double CT) {
  teno_all(u, out, ncut, n, CT, 0.0);
  double s = 0.0;
  for (int i = 2; i < n - 2; ++i) s += sq(out[2*i] - out[2*i+1]) + out[2*i] * u[i];
  return s;
}
"""


@pytest.fixture(scope="module")
def teno():
    return ez.c(TENO)


def _teno_input(n=16):
    u = np.sin(np.linspace(0.0, 3.0, n))
    u[n // 2 :] += 1.0  # a jump: some stencils are cut off
    return u


def test_teno_reverse_forward_and_const(teno):
    n = 16
    u = _teno_input(n)
    count = np.zeros(1, np.int32)

    def energy(z):
        value = ez.autodiff(teno.teno_energy, ez.Forward, *[ez.Const] * 6)
        return value(z, np.zeros(2 * n), count, n, 1e-5)

    reference = fd_gradient(energy, u)
    assert 0 < count[0] < 3 * (n - 4)  # the cut-off is taken at some faces only
    acts = [ez.Duplicated, ez.Duplicated, ez.Const, ez.Const, ez.Const, ez.Active]
    du = np.zeros(n)
    ez.autodiff(teno.teno_energy, ez.Reverse, *acts)(
        u, du, np.zeros(2 * n), np.zeros(2 * n), count, n, 1e-5, 1.0
    )
    np.testing.assert_allclose(du, reference, rtol=1e-5, atol=1e-6)
    v = np.random.default_rng(5).normal(size=n)
    fwd = [ez.Dual, ez.Dual, ez.Const, ez.Const, ez.Const, ez.Dual]
    _, dy = ez.autodiff(teno.teno_energy, ez.Forward, *fwd)(
        u, v, np.zeros(2 * n), np.zeros(2 * n), count, n, 1e-5
    )
    assert dy == pytest.approx(float(reference @ v), rel=1e-5)


def test_teno_outputs_through_pointers(teno):
    # The Jacobian-vector product of the reconstructed states against differences of
    # the void function's outputs, and the vector-Jacobian product against it.
    n = 16
    u = _teno_input(n)
    count = np.zeros(1, np.int32)
    states = ez.autodiff(teno.teno_all, ez.Forward, *[ez.Const] * 6)

    def out_of(z):
        out = np.zeros(2 * n)
        states(z, out, count, n, 1e-5, 0.0)
        return out

    v = np.random.default_rng(6).normal(size=n)
    h = 1e-6
    jv = (out_of(u + h * v) - out_of(u - h * v)) / (2 * h)
    acts = [ez.Dual, ez.Dual, ez.Const, ez.Const, ez.Const, ez.Const]
    dout = np.zeros(2 * n)
    ez.autodiff(teno.teno_all, ez.Forward, *acts)(u, v, np.zeros(2 * n), dout, count, n, 1e-5, 0.0)
    np.testing.assert_allclose(dout, jv, rtol=1e-5, atol=1e-6)
    w = np.random.default_rng(7).normal(size=2 * n)
    du = np.zeros(n)
    rev = [ez.Duplicated, ez.Duplicated, ez.Const, ez.Const, ez.Const, ez.Const]
    ez.autodiff(teno.teno_all, ez.Reverse, *rev)(
        u, du, np.zeros(2 * n), w.copy(), count, n, 1e-5, 0.0
    )
    assert float(du @ v) == pytest.approx(float(w @ jv), rel=1e-5)


# Math intrinsics whose result only feeds a comparison (a cut-off, a limiter):
# Enzyme aborted on fmin's ("getting diffe of constant value") when enzyme_py had
# stripped the intrinsics' readnone; Enzyme's pass never did.
LIMITERS = [
    "fmin(x[i], 0.5)",
    "fmax(fabs(x[i]), fabs(x[i + 1]))",
    "fmax(x[i], 0.5)",
    "fabs(x[i] - x[i + 1])",
]


@pytest.mark.parametrize("expr", LIMITERS)
def test_limiter_in_comparison(expr):
    m = ez.c(
        "#include <math.h>\n"
        "double g(const double *x, int n) { double s = 0;"
        f" for (int i = 0; i < n - 1; ++i) s += ({expr} < 0.4) ? x[i] * 2.0 : x[i] * x[i];"
        " return s; }"
    )
    x = np.linspace(0.13, 0.91, 6)
    value = ez.autodiff(m.g, ez.Forward, ez.Const, ez.Const, ez.Const)
    reference = fd_gradient(lambda z: value(z, 6), x)
    dx = np.zeros(6)
    ez.autodiff(m.g, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)(x, dx, 6, 1.0)
    np.testing.assert_allclose(dx, reference, rtol=1e-6, atol=1e-8)
    _, dy = ez.autodiff(m.g, ez.Forward, ez.Dual, ez.Const, ez.Dual)(x, np.ones(6), 6)
    assert dy == pytest.approx(reference.sum(), rel=1e-6)


def test_numba_gauss_seidel():
    # The same class through the Numba frontend (its pre-Enzyme GVN had load PRE on).
    numba = pytest.importorskip("numba")

    @numba.njit
    def sweeps(u, f, count):
        n = u.shape[0]
        for _ in range(count):
            for i in range(1, n - 1):
                u[i] = 0.5 * (u[i - 1] + u[i + 1] + f[i]) - 0.05 * u[i] * u[i]
        s = 0.0
        for i in range(n):
            s += u[i] ** 3
        return s

    u0 = 0.1 + 0.08 * np.arange(9.0)
    f = np.arange(9.0) / 8
    reference = fd_gradient(lambda z: sweeps(z.copy(), f, 4), u0)
    du = np.zeros(9)
    ez.autodiff(sweeps, ez.Reverse, ez.Duplicated, ez.Const, ez.Const, ez.Active)(
        u0.copy(), du, f, 4, 1.0
    )
    np.testing.assert_allclose(du, reference, rtol=1e-6, atol=1e-8)


# A helper with __restrict__ parameters inlined into a loop that updates state in
# place (an LSTM's layers): clang leaves scoped noalias metadata valid for one call,
# which Enzyme v0.0.289 took as valid across iterations (a wrong gradient, up to 50 %
# here, no error) until the engine stripped it before Enzyme.
RESTRICT_LOOP = r"""
#include <cmath>
static inline void step(int n, const double *__restrict__ w, double *__restrict__ h,
                        const double *__restrict__ in) {
    for (int i = 0; i < n; ++i) h[i] = std::tanh(h[i] * w[i] + in[i]);
}
extern "C" double loss(int n, int T, int layers, const double *w, double *state,
                       const double *x) {
    double s = 0.0;
    for (int t = 0; t < T; ++t) {
        const double *in = x + t * n;
        for (int l = 0; l < layers; ++l) {
            step(n, w + l * n, state + l * n, in);
            in = state + l * n;
        }
        for (int i = 0; i < n; ++i) s += in[i];
    }
    return s;
}
"""


@pytest.mark.parametrize("restrict", ["__restrict__", ""])
def test_inlined_restrict_helper_in_a_loop(restrict):
    m = ez.cpp(RESTRICT_LOOP.replace("__restrict__", restrict))
    rng = np.random.default_rng(0)
    n, steps, layers = 3, 4, 2
    w, state, x = (rng.normal(size=k) for k in (layers * n, layers * n, steps * n))

    def loss(w_):
        return m.loss(n, steps, layers, w_, state.copy(), x)

    h = 1e-6
    want = np.array([(loss(w + h * e) - loss(w - h * e)) / (2 * h) for e in np.eye(w.size)])
    D = ez.Duplicated
    # x Duplicated too: `in` is x or the state (one pointer, Const or active, is
    # Enzyme's "mixed activity")
    df = ez.autodiff(m.loss, ez.Reverse, ez.Const, ez.Const, ez.Const, D, D, D, ez.Active)
    dw = np.zeros_like(w)
    df(n, steps, layers, w, dw, state.copy(), np.zeros_like(state), x, np.zeros_like(x), 1.0)
    np.testing.assert_allclose(dw, want, rtol=1e-6, atol=1e-8)
    fwd = ez.autodiff(m.loss, ez.Forward, ez.Const, ez.Const, ez.Const, ez.Dual, ez.Dual,
                      ez.Dual, ez.Dual)  # fmt: skip
    tangent = rng.normal(size=w.size)
    _, dy = fwd(n, steps, layers, w, tangent, state.copy(), np.zeros_like(state), x,
                np.zeros_like(x))  # fmt: skip
    assert dy == pytest.approx(float(want @ tangent), rel=1e-6)


def test_a_pointer_both_const_and_active_gets_advice_for_c():
    m = ez.cpp(RESTRICT_LOOP)
    D, C = ez.Duplicated, ez.Const
    # x Const: `in` is x (Const) in the first layer and the state (active) after it
    with pytest.raises(ez.EnzymeError, match=r"make both Duplicated") as info:
        ez.autodiff(m.loss, ez.Reverse, C, C, C, D, D, C, ez.Active)
    assert "np.arange" not in str(info.value)  # no Numba advice on C code
