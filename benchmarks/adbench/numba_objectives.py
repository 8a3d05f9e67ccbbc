"""GMM and BA as Numba loops (GMM: ``benchmarks.kernels.gmm_objective`` and its prange
variant, shared with the suite; BA written here with the C++ twin's layout and maths)."""

from __future__ import annotations

import math

import numba

from benchmarks.kernels import gmm_objective, gmm_objective_prange

__all__ = ["ba_objective", "gmm_objective", "gmm_objective_prange"]


@numba.njit(cache=False)
def _ba_reproj(cams, c, X, pt, w, feats, i, err):
    p0 = X[pt, 0] - cams[c, 3]
    p1 = X[pt, 1] - cams[c, 4]
    p2 = X[pt, 2] - cams[c, 5]
    r0, r1, r2 = cams[c, 0], cams[c, 1], cams[c, 2]
    sqtheta = r0 * r0 + r1 * r1 + r2 * r2
    if sqtheta != 0.0:
        theta = math.sqrt(sqtheta)
        ct, st, inv = math.cos(theta), math.sin(theta), 1.0 / theta
        w0, w1, w2 = r0 * inv, r1 * inv, r2 * inv
        c0, c1, c2 = w1 * p2 - w2 * p1, w2 * p0 - w0 * p2, w0 * p1 - w1 * p0
        tmp = (w0 * p0 + w1 * p1 + w2 * p2) * (1.0 - ct)
        x0 = p0 * ct + c0 * st + w0 * tmp
        x1 = p1 * ct + c1 * st + w1 * tmp
        x2 = p2 * ct + c2 * st + w2 * tmp
    else:
        x0 = p0 + (r1 * p2 - r2 * p1)
        x1 = p1 + (r2 * p0 - r0 * p2)
        x2 = p2 + (r0 * p1 - r1 * p0)
    u0, u1 = x0 / x2, x1 / x2
    rsq = u0 * u0 + u1 * u1
    L = 1.0 + cams[c, 9] * rsq + cams[c, 10] * rsq * rsq
    err[i, 0] = w * (u0 * L * cams[c, 6] + cams[c, 7] - feats[i, 0])
    err[i, 1] = w * (u1 * L * cams[c, 6] + cams[c, 8] - feats[i, 1])


@numba.njit(cache=False)
def ba_objective(cams, X, w, obs, feats, reproj_err, w_err):
    """Writes the reprojection errors (p, 2) and the weight errors 1 - w^2 (p,)."""
    for i in range(w.shape[0]):
        _ba_reproj(cams, obs[i, 0], X, obs[i, 1], w[i], feats, i, reproj_err)
    for i in range(w.shape[0]):
        w_err[i] = 1.0 - w[i] * w[i]
