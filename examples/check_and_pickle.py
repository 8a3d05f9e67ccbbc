"""Gradient checking, and derivatives sent to a process pool.

python examples/check_and_pickle.py
"""

import math
from concurrent.futures import ProcessPoolExecutor

import numba
import numpy as np

import enzyme_py as ez


@numba.njit
def objective(x, scale):
    s = 0.0
    for i in range(x.shape[0]):
        s += scale * math.log1p(x[i] * x[i])
    return s


def gradient_in_worker(df, x):
    dx = np.zeros_like(x)
    df(x, dx, 2.0, 1.0)
    return dx


if __name__ == "__main__":
    x = np.linspace(-2.0, 2.0, 9)
    report = ez.check_grad(objective, x, 2.0)
    print(report)
    df = ez.autodiff(objective, ez.Reverse, ez.Duplicated, ez.Const, ez.ActiveOnly, check=True)
    with ProcessPoolExecutor(max_workers=2) as pool:  # derivatives pickle
        grads = list(pool.map(gradient_in_worker, [df, df], [x, 2 * x]))
    expected = [2.0 * 2 * v / (1 + v * v) for v in (x, 2 * x)]
    if not report.ok or not all(np.allclose(g, e) for g, e in zip(grads, expected, strict=True)):
        raise SystemExit("check_and_pickle: disagreement")
    print("check_and_pickle: OK")
