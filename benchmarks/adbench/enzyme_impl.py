"""enzyme_py's derivatives of the ADBench objectives: each ``make_*`` returns a
``Contender`` whose ``primal()`` evaluates the objective and ``derivative()`` its
gradient (GMM, LSTM: reverse mode) or Jacobian (BA: per-observation blocks, HAND:
26 columns, both forward mode with lanes), on the inputs it was made for.

BA's Jacobian is forward mode over all observations at once: observation i depends on
one camera (11 values), one point (3) and one weight, so lane j < 11 seeds coordinate j
of every camera, lanes 11..13 every point's coordinates and lane 14 every weight; the
tangent of observation i's residual in lane j is then its own 2 x 15 block (column
compression of the sparse Jacobian; the weight errors' derivative is lane 14). The 15
lanes are 3 calls of ``width=5``; HAND's 26 columns 2 calls of ``width=13`` seeded with
the identity. Measured on 2 quiet cores (2026-12-04, best of 7 x 20 calls; build: wall
seconds of ``ez.autodiff`` and the first call, fresh cache): BA in C++ width 3 / 5 / 15
9.71 / 8.68 / 7.25 ms (builds 0.11 / 0.30 / 0.24 s), in Numba 9.02 / 7.54 / 8.10 ms;
HAND width 1 / 2 / 13 / 26 1.09 / 0.794 / 0.614 / 0.677 ms (builds 0.15 / 0.37 / 0.58 /
1.25 s): each call computes the primal once for its lanes, and the width-k IR is k
copies of every tangent instruction, which the optimiser and codegen then chew (on 2
loaded cores on 2026-12-01 HAND's width 26 took 3.9 CPU seconds to build).
"""

from __future__ import annotations

import functools
import os
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
    the derivative (``ez.autodiff`` and its first call, minus one later call);
    ``primal_compile_s``: for a Numba objective, its own first call before that
    (Numba's compile, which a user pays running the function and the derivative does
    not repeat); None for C++ (``ez.cpp``'s compile is reported apart)."""

    primal: Callable[[], Any]
    derivative: Callable[[], Any]
    build_s: float = float("nan")
    build_cpu_s: float = float("nan")
    primal_compile_s: float | None = None
    notes: dict[str, Any] = field(default_factory=dict)


@functools.lru_cache(maxsize=1)
def cpp_module() -> Any:
    return ez.cpp(SOURCE)


def cpp_compile_seconds() -> float:
    """Seconds ``ez.cpp`` takes for the four objectives (a fresh compile)."""
    start = time.perf_counter()
    ez.cpp(SOURCE)
    return time.perf_counter() - start


def clock() -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process and its finished children: Enzyme
    builds in a forked child, clang is a subprocess)."""
    t = os.times()
    return time.perf_counter(), t.user + t.system + t.children_user + t.children_system


def _first_call_seconds(call: Callable[[], Any]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def _timed_first(c: Contender, start: tuple[float, float]) -> Contender:
    """``build_s`` (wall) and ``build_cpu_s``: from ``start`` (before ``ez.autodiff``)
    to the end of the first call, minus the time of a second call."""
    c.derivative()
    first = clock()
    c.derivative()
    again = clock()
    c.build_s = max(0.0, (first[0] - start[0]) - (again[0] - first[0]))
    c.build_cpu_s = max(0.0, (first[1] - start[1]) - (again[1] - first[1]))
    return c


# ---------------------------------------------------------------- GMM
def make_gmm_cpp(alphas, means, icf, x, gamma, m) -> Contender:
    f = cpp_module().gmm_objective
    start = clock()
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
    return _gmm_numba(numba_objectives.gmm_objective, A, alphas, means, icf, x, gamma, m)


def make_gmm_numba_prange(alphas, means, icf, x, gamma, m) -> Contender:
    """The suite's prange GMM (parallel=True, a prange loop over the samples): its
    derivative on all Numba threads, without the value (ez.ActiveOnly, as ez.grad)."""
    f = numba_objectives.gmm_objective_prange
    return _gmm_numba(f, ez.ActiveOnly, alphas, means, icf, x, gamma, m)


def _gmm_numba(f, ret, alphas, means, icf, x, gamma, m) -> Contender:
    """The Numba GMM ``f``'s primal and its reverse derivative (return activity ``ret``)."""

    def primal():
        return f(alphas, means, icf, x, gamma, m)

    compiled = _first_call_seconds(primal)
    start = clock()
    df = ez.autodiff(f, ez.Reverse, Dup, Dup, Dup, C, C, C, ret)

    def derivative():
        da, dm, di = np.zeros_like(alphas), np.zeros_like(means), np.zeros_like(icf)
        df(alphas, da, means, dm, icf, di, x, gamma, m, 1.0)
        return da, dm, di

    return _timed_first(Contender(primal, derivative, primal_compile_s=compiled), start)


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


def _ba(f: Any, cpp: bool, cams, X, w, obs, feats, width: int = 5) -> Contender:
    n, m, p = cams.shape[0], X.shape[0], w.shape[0]
    sizes = (n, m, p) if cpp else ()
    lead = (C, C, C) if cpp else ()
    if 15 % width:
        raise ValueError("width must divide 15")
    err, werr = np.zeros((p, 2)), np.zeros(p)

    def primal():
        f(*sizes, cams, X, w, obs, feats, err, werr)
        return err, werr

    compiled = None if cpp else _first_call_seconds(primal)
    start = clock()
    df = ez.autodiff(f, ez.Forward, *lead, Dual, Dual, Dual, C, C, Dual, Dual, width=width)
    tc, tx, tw = ba_seeds(n, m, p)
    # width 1 takes arrays without the lane axis
    chunks = [slice(i, i + width) if width > 1 else i for i in range(0, 15, width)]
    seeds = [tuple(np.ascontiguousarray(t[s]) for t in (tc, tx, tw)) for s in chunks]
    # the outputs' tangents are written, not read: made once
    terr, twerr = np.zeros((15, p, 2)), np.zeros((15, p))
    outs = [(terr[s], twerr[s]) for s in chunks]

    def derivative():
        for (sc, sx, sw), (oe, ow) in zip(seeds, outs, strict=True):
            df(*sizes, cams, sc, X, sx, w, sw, obs, feats, err, oe, werr, ow)
        # blocks (p, 2, 15): d reproj_err[i] / d (cams[obs[i, 0]], X[obs[i, 1]], w[i]);
        # d w_err[i] / d w[i] is twerr[14, i]
        return terr, twerr[14]

    return _timed_first(Contender(primal, derivative, primal_compile_s=compiled), start)


def make_ba_cpp(cams, X, w, obs, feats, width: int = 5) -> Contender:
    return _ba(cpp_module().ba_objective, True, cams, X, w, obs, feats, width)


def make_ba_numba(cams, X, w, obs, feats, width: int = 5) -> Contender:
    return _ba(numba_objectives.ba_objective, False, cams, X, w, obs, feats, width)


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
    width: int = 13,
) -> Contender:
    f = cpp_module().hand_objective
    start = clock()
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
    lane = (width,) if width > 1 else ()  # width 1 takes arrays without the lane axis
    seeds = [eye[i * width : (i + 1) * width].reshape(*lane, 26) for i in range(lanes)]
    tsk = np.zeros((*lane, nv, 3))
    terrs = [np.zeros((*lane, nc, 3)) for _ in range(lanes)]

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
    f = cpp_module().lstm_objective
    start = clock()
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
