"""Independent references for derivative tests: central finite differences in float64."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

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


def fd_partial(f: Callable[..., float], args: Sequence[Any], k: int, h: float = 1e-6) -> np.ndarray:
    """The gradient of ``f(*args)`` with respect to the array ``args[k]`` (in float64)."""
    x = np.asarray(args[k], dtype=np.float64)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        plus, minus = x.copy(), x.copy()
        plus[i] += h
        minus[i] -= h
        call_p = [plus if j == k else a for j, a in enumerate(args)]
        call_m = [minus if j == k else a for j, a in enumerate(args)]
        g[i] = (f(*call_p) - f(*call_m)) / (2 * h)
    return g


def fd_jacobian(g: Callable[[Any], Any], x: Any, h: float = 1e-6) -> np.ndarray:
    """d g(x) / d x, of shape g(x).shape + np.shape(x): ``x`` a float, or an array (taken
    in float64)."""
    if not isinstance(x, np.ndarray) and np.ndim(x) == 0:
        return (np.asarray(g(x + h)) - np.asarray(g(x - h))) / (2 * h)
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(g(x))
    jac = np.zeros((y.size, x.size))
    for k in range(x.size):
        step = np.zeros(x.size)
        step[k] = h
        step = step.reshape(x.shape)
        jac[:, k] = (np.asarray(g(x + step)) - np.asarray(g(x - step))).reshape(-1) / (2 * h)
    return jac.reshape(*y.shape, *x.shape)
