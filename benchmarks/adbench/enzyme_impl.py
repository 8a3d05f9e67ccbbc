"""enzyme_py's derivatives of the ADBench objectives: each ``make_*`` returns a
``Contender`` whose ``primal()`` evaluates the objective and ``derivative()`` its
gradient (GMM, LSTM: reverse mode) or Jacobian (BA: per-observation blocks, HAND:
26 columns, both forward mode with lanes), on the inputs it was made for.

BA's Jacobian is one forward call of width 15 over all observations: observation i
depends on one camera (11 values), one point (3) and one weight, so lane j < 11 seeds
coordinate j of every camera, lanes 11..13 every point's coordinates and lane 14 every
weight; the tangent of observation i's residual in lane j is then its own 2 x 15 block
(column compression of the sparse Jacobian; the weight errors' derivative is lane 14).
HAND's is one forward call of width 26 seeded with the identity.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import enzyme_py as ez
from benchmarks.adbench import numba_objectives
from benchmarks.adbench.cpp_source import SOURCE

C, A, Dup, Dual = ez.Const, ez.Active, ez.Duplicated, ez.Dual


@dataclass
class Contender:
    """``primal()`` / ``derivative()`` on fixed inputs; ``build_s``: seconds to build
    the derivative (``ez.autodiff`` and its first call, minus one later call)."""

    primal: Callable[[], Any]
    derivative: Callable[[], Any]
    build_s: float = float("nan")
    notes: dict[str, Any] = field(default_factory=dict)


@functools.lru_cache(maxsize=1)
def cpp_module() -> Any:
    return ez.cpp(SOURCE)


def cpp_compile_seconds() -> float:
    """Seconds ``ez.cpp`` takes for the four objectives (a fresh compile)."""
    start = time.perf_counter()
    ez.cpp(SOURCE)
    return time.perf_counter() - start


def _timed_first(c: Contender, start: float) -> Contender:
    """``build_s``: from ``start`` (before ``ez.autodiff``) to the end of the first
    call, minus the time of a second call."""
    c.derivative()
    first = time.perf_counter() - start
    start = time.perf_counter()
    c.derivative()
    c.build_s = max(0.0, first - (time.perf_counter() - start))
    return c


# ---------------------------------------------------------------- GMM
def make_gmm_cpp(alphas, means, icf, x, gamma, m) -> Contender:
    start = time.perf_counter()
    f = cpp_module().gmm_objective
    k, d = means.shape
    n = x.shape[0]
    df = ez.autodiff(f, ez.Reverse, C, C, C, Dup, Dup, Dup, C, C, C, A)

    def derivative():
        da, dm, di = np.zeros_like(alphas), np.zeros_like(means), np.zeros_like(icf)
        df(d, k, n, alphas, da, means, dm, icf, di, x, gamma, m, 1.0)
        return da, dm, di

    return _timed_first(
        Contender(lambda: f(d, k, n, alphas, means, icf, x, gamma, m), derivative), start
    )


def make_gmm_numba(alphas, means, icf, x, gamma, m) -> Contender:
    start = time.perf_counter()
    f = numba_objectives.gmm_objective
    df = ez.autodiff(f, ez.Reverse, Dup, Dup, Dup, C, C, C, A)

    def derivative():
        da, dm, di = np.zeros_like(alphas), np.zeros_like(means), np.zeros_like(icf)
        df(alphas, da, means, dm, icf, di, x, gamma, m, 1.0)
        return da, dm, di

    return _timed_first(Contender(lambda: f(alphas, means, icf, x, gamma, m), derivative), start)


# ---------------------------------------------------------------- BA
def ba_seeds(n: int, m: int, p: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The 15 lanes' tangents of cams (15, n, 11), X (15, m, 3) and w (15, p)."""
    tc = np.zeros((15, n, 11))
    tx = np.zeros((15, m, 3))
    tw = np.zeros((15, p))
    for j in range(11):
        tc[j, :, j] = 1.0
    for j in range(3):
        tx[11 + j, :, j] = 1.0
    tw[14] = 1.0
    return tc, tx, tw


def _ba(f: Any, cpp: bool, cams, X, w, obs, feats) -> Contender:
    start = time.perf_counter()
    n, m, p = cams.shape[0], X.shape[0], w.shape[0]
    sizes = (n, m, p) if cpp else ()
    lead = (C, C, C) if cpp else ()
    df = ez.autodiff(f, ez.Forward, *lead, Dual, Dual, Dual, C, C, Dual, Dual, width=15)
    tc, tx, tw = ba_seeds(n, m, p)
    zc, zx, zw = np.zeros_like(tc), np.zeros_like(tx), np.zeros_like(tw)
    err, werr = np.zeros((p, 2)), np.zeros(p)
    # outputs' tangents (written, not read): one set per call would only add allocation
    terr, twerr = np.zeros((15, p, 2)), np.zeros((15, p))
    del zc, zx, zw

    def primal():
        f(*sizes, cams, X, w, obs, feats, err, werr)
        return err, werr

    def derivative():
        df(*sizes, cams, tc, X, tx, w, tw, obs, feats, err, terr, werr, twerr)
        # blocks (p, 2, 15): d reproj_err[i] / d (cams[obs[i, 0]], X[obs[i, 1]], w[i]);
        # d w_err[i] / d w[i] is twerr[14, i]
        return terr, twerr[14]

    return _timed_first(Contender(primal, derivative), start)


def make_ba_cpp(cams, X, w, obs, feats) -> Contender:
    return _ba(cpp_module().ba_objective, True, cams, X, w, obs, feats)


def make_ba_numba(cams, X, w, obs, feats) -> Contender:
    return _ba(numba_objectives.ba_objective, False, cams, X, w, obs, feats)


# ---------------------------------------------------------------- HAND
def make_hand_cpp(
    theta,
    parents,
    base_relatives,
    inverse_base_absolutes,
    base_positions,
    weights,
    correspondences,
    points,
    width: int = 26,
) -> Contender:
    start = time.perf_counter()
    f = cpp_module().hand_objective
    nb, nv, nc = parents.shape[0], base_positions.shape[0], correspondences.shape[0]
    model = (
        nb,
        parents,
        base_relatives,
        inverse_base_absolutes,
        nv,
        base_positions,
        weights,
        nc,
        correspondences,
        points,
    )
    skinned, err = np.zeros((nv, 3)), np.zeros((nc, 3))
    if 26 % width:
        raise ValueError("width must divide 26")
    lanes = 26 // width
    df = ez.autodiff(f, ez.Forward, Dual, *[C] * 10, Dual, Dual, width=width)
    eye = np.eye(26)
    seeds = [np.ascontiguousarray(eye[i * width : (i + 1) * width]) for i in range(lanes)]
    tsk = np.zeros((width, nv, 3))
    terrs = [np.zeros((width, nc, 3)) for _ in range(lanes)]

    def primal():
        f(theta, *model, skinned, err)
        return err

    def derivative():
        for seed, terr in zip(seeds, terrs, strict=False):
            df(theta, seed, *model, skinned, tsk, err, terr)
        # J (3 n_corr, 26): column q is the tangent along theta[q]
        return np.concatenate(terrs).reshape(26, -1).T

    return _timed_first(Contender(primal, derivative), start)


# ---------------------------------------------------------------- LSTM
def make_lstm_cpp(main_params, extra_params, state, sequence) -> Contender:
    start = time.perf_counter()
    f = cpp_module().lstm_objective
    l, b = main_params.shape[0], main_params.shape[-1]  # noqa: E741
    c = sequence.shape[0]
    df = ez.autodiff(f, ez.Reverse, C, C, C, Dup, Dup, Dup, C, A)
    work = np.empty_like(state)

    def primal():
        work[...] = state
        return f(l, c, b, main_params, extra_params, work, sequence)

    def derivative():
        work[...] = state
        dmain, dextra, dstate = (
            np.zeros_like(main_params),
            np.zeros_like(extra_params),
            np.zeros_like(state),
        )
        df(l, c, b, main_params, dmain, extra_params, dextra, work, dstate, sequence, 1.0)
        return dmain, dextra

    return _timed_first(Contender(primal, derivative), start)
