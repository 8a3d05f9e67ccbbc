"""Every allowed combination of mode x activity x parameter kind x width, against calculus.

f(x, s, n) = sum_i s * x[i]^2 (an array, a float scalar, an integer), in float64 and
float32, each activity of each parameter and of the return value, width 1 and 2.
"""

import itertools

import numpy as np
import pytest

import enzyme_py as ez

pytestmark = pytest.mark.needs_enzyme

SOURCE = """
double f64(const double *x, double s, int n) {
    double r = 0.0;
    for (int i = 0; i < n; ++i) r += s * x[i] * x[i];
    return r;
}
float f32(const float *x, float s, int n) {
    float r = 0.0f;
    for (int i = 0; i < n; ++i) r += s * x[i] * x[i];
    return r;
}
"""

DTYPES = {"f64": np.float64, "f32": np.float32}
TOL = {"f64": 1e-13, "f32": 2e-6}


@pytest.fixture(scope="module")
def m():
    return ez.c(SOURCE)


def lanes(values, k):
    return values[0] if k == 1 else np.asarray(values)


REVERSE = list(
    itertools.product(
        ["f64", "f32"],
        [ez.Const, ez.Duplicated, ez.DuplicatedOnly],
        [ez.Const, ez.Active],
        [ez.Const, ez.Active, ez.ActiveOnly],
        [1, 2],
    )
)


@pytest.mark.parametrize(
    ("name", "xa", "sa", "ra", "k"), REVERSE, ids=lambda v: getattr(v, "name", str(v))
)
def test_reverse(m, name, xa, sa, ra, k):
    dt = DTYPES[name]
    x = np.linspace(0.5, 1.5, 5).astype(dt)
    s = 1.25
    seeds = [1.0, -2.0][:k]
    df = ez.autodiff(getattr(m, name), ez.Reverse, xa, sa, ez.Const, ra, width=k)
    args = [x]
    dx = np.zeros((k, 5) if k > 1 else 5, dtype=dt)
    if xa.shadow:
        args.append(dx)
    args += [s, 5]
    if ra is not ez.Const:
        args.append(lanes(seeds, k))
    out = df(*args)
    primal, *adjoints = out
    f = float(np.sum(s * x.astype(np.float64) ** 2))
    tol = TOL[name]
    if ra is ez.ActiveOnly:
        assert primal is None
    else:
        assert primal == pytest.approx(f, rel=tol)
    seeded = ra is not ez.Const
    expected_ds = [sd * float(np.sum(x.astype(np.float64) ** 2)) if seeded else 0.0 for sd in seeds]
    if sa is ez.Active:
        (ds,) = adjoints
        np.testing.assert_allclose(ds, lanes(expected_ds, k), rtol=tol)
    else:
        assert adjoints == []
    if xa.shadow:
        expected_dx = np.array([sd * 2 * s * x if seeded else 0 * x for sd in seeds], dtype=dt)
        np.testing.assert_allclose(dx, expected_dx[0] if k == 1 else expected_dx, rtol=tol)


FORWARD = list(
    itertools.product(
        ["f64", "f32"],
        [ez.Const, ez.Dual, ez.DualOnly],
        [ez.Const, ez.Dual, ez.DualOnly],
        [ez.Const, ez.Dual, ez.DualOnly],
        [1, 2],
    )
)


@pytest.mark.parametrize(
    ("name", "xa", "sa", "ra", "k"), FORWARD, ids=lambda v: getattr(v, "name", str(v))
)
def test_forward(m, name, xa, sa, ra, k):
    dt = DTYPES[name]
    x = np.linspace(0.5, 1.5, 5).astype(dt)
    tx = np.array([np.linspace(-1, 1, 5), np.ones(5)][:k], dtype=dt)
    s, ts = 1.25, [0.5, -1.0][:k]
    df = ez.autodiff(getattr(m, name), ez.Forward, xa, sa, ez.Const, ra, width=k)
    args = [x]
    if xa.shadow:
        args.append(tx[0] if k == 1 else tx)
    args.append(s)
    if sa.shadow:
        args.append(lanes(ts, k))
    args.append(5)
    out = df(*args)
    x64 = x.astype(np.float64)
    f = float(np.sum(s * x64**2))
    dy = [
        (float(np.sum(2 * s * x64 * tx[j])) if xa.shadow else 0.0)
        + (ts[j] * float(np.sum(x64**2)) if sa.shadow else 0.0)
        for j in range(k)
    ]
    tol = TOL[name]
    if ra is ez.Const:
        assert out == pytest.approx(f, rel=tol)
    elif ra is ez.DualOnly:
        np.testing.assert_allclose(out, lanes(dy, k), rtol=tol, atol=tol)
    else:
        y, d = out
        assert y == pytest.approx(f, rel=tol)
        np.testing.assert_allclose(d, lanes(dy, k), rtol=tol, atol=tol)
