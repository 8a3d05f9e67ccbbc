"""Independent references for derivative tests: central finite differences in float64."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def fd_scalar(f: Callable[[float], float], x: float, h: float = 1e-6) -> float:
    return (f(x + h) - f(x - h)) / (2 * h)


def fd_gradient(f: Callable[[np.ndarray], float], x: np.ndarray, h: float = 1e-6) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    g = np.zeros_like(x)
    flat = g.reshape(-1)
    for i in range(x.size):
        step = np.zeros_like(x).reshape(-1)
        step[i] = h
        step = step.reshape(x.shape)
        flat[i] = (f(x + step) - f(x - step)) / (2 * h)
    return g
