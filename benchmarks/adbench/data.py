"""Inputs of the four ADBench objectives, generated (seeded) at ADBench's sizes.

- GMM: ``benchmarks.kernels.gmm_inputs`` (d, k, n).
- BA: ``n`` cameras, ``m`` points, ``p`` observations; observation ``i`` sees point
  ``i % m`` from camera ``i % n`` (as ADBench's replicated data sets do), cameras a few
  units in front of the points, so every projection is well defined.
- HAND: a hand model made here (``hand_model``): a palm and five fingers of four bones
  (21 bones, parents first), vertices along each bone skinned to it and its parent.
- LSTM: ``l`` layers of hidden size ``b`` (ADBench: 14) over a sequence of ``c``
  one-hot-like rows (ADBench: ``lstm_l2_c1024`` is l = 2, c = 1024, b = 14).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from benchmarks.kernels import gmm_inputs

__all__ = ["BA", "GMM", "HAND", "LSTM", "ba_inputs", "gmm_inputs", "hand_inputs", "lstm_inputs"]


@dataclass(frozen=True)
class GMM:
    d: int
    k: int
    n: int


@dataclass(frozen=True)
class BA:
    n: int
    m: int
    p: int


@dataclass(frozen=True)
class HAND:
    verts_per_bone: int
    n_corr: int


@dataclass(frozen=True)
class LSTM:
    l: int  # noqa: E741 - ADBench's name
    c: int
    b: int


SIZES = {
    "full": {
        "gmm": GMM(d=10, k=25, n=10_000),
        "ba": BA(n=21, m=11_315, p=36_455),
        "hand": HAND(verts_per_bone=26, n_corr=2_000),
        "lstm": LSTM(l=2, c=1024, b=14),
    },
    "quick": {
        "gmm": GMM(d=3, k=4, n=50),
        "ba": BA(n=3, m=10, p=25),
        "hand": HAND(verts_per_bone=3, n_corr=20),
        "lstm": LSTM(l=2, c=6, b=4),
    },
}


def ba_inputs(n: int, m: int, p: int, seed: int = 0) -> dict[str, np.ndarray]:
    """``cams`` (n, 11), ``X`` (m, 3), ``w`` (p,), ``obs`` (p, 2) int32, ``feats`` (p, 2)."""
    rng = np.random.default_rng(seed)
    cams = np.empty((n, 11))
    cams[:, 0:3] = rng.normal(scale=0.2, size=(n, 3))  # small rotations
    cams[:, 3:5] = rng.normal(scale=0.5, size=(n, 2))
    cams[:, 5] = rng.uniform(-12.0, -8.0, size=n)  # centres behind the points (z < 0)
    cams[:, 6] = rng.uniform(0.8, 1.2, size=n)  # focal length
    cams[:, 7:9] = rng.normal(scale=0.05, size=(n, 2))  # principal point
    cams[:, 9:11] = rng.normal(scale=0.01, size=(n, 2))  # radial distortion
    X = rng.normal(size=(m, 3))
    w = rng.uniform(0.5, 1.5, size=p)
    i = np.arange(p)
    obs = np.stack([i % n, i % m], axis=1).astype(np.int32)
    feats = rng.normal(scale=0.1, size=(p, 2))
    return {"cams": cams, "X": X, "w": w, "obs": obs, "feats": feats}


def _rot_z(a: float) -> np.ndarray:
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def hand_model(verts_per_bone: int, seed: int = 0) -> dict[str, np.ndarray]:
    """A rest-pose hand: ``parents`` (21,) int32, ``base_relatives`` and
    ``inverse_base_absolutes`` (21, 3, 4) affine transforms, ``base_positions``
    (V, 3) and skinning ``weights`` (V, 21) whose rows sum to 1."""
    rng = np.random.default_rng(seed)
    n_bones = 21
    parents = np.array([-1] + [p for f in range(5) for p in (0, 1 + 4 * f, 2 + 4 * f, 3 + 4 * f)])
    rel = np.zeros((n_bones, 3, 4))
    rel[0, :, :3] = np.eye(3)
    lengths = [0.9, 0.45, 0.3, 0.25]
    for f in range(5):
        spread = 0.25 * (f - 2)
        for j in range(4):
            b = 1 + 4 * f + j
            rel[b, :, :3] = _rot_z(spread) if j == 0 else np.eye(3)
            # a bone's joint sits at the end of its parent (the palm: its base row)
            offset = [0.3 * (f - 2), 0.0, 0.0] if j == 0 else [0.0, lengths[j - 1], 0.0]
            rel[b, :, 3] = offset
    absolute = np.zeros((n_bones, 4, 4))
    for b in range(n_bones):
        r4 = np.vstack([rel[b], [0.0, 0.0, 0.0, 1.0]])
        absolute[b] = r4 if parents[b] < 0 else absolute[parents[b]] @ r4
    inv_abs = np.array([np.linalg.inv(a)[:3] for a in absolute])
    positions = []
    weights = []
    for b in range(n_bones):
        length = 0.6 if b == 0 else lengths[(b - 1) % 4]
        for _ in range(verts_per_bone):
            t = rng.uniform(0.0, 1.0)
            local = np.array([rng.normal(scale=0.08), t * length, rng.normal(scale=0.08), 1.0])
            positions.append((absolute[b] @ local)[:3])
            wrow = np.zeros(n_bones)
            if parents[b] < 0:
                wrow[b] = 1.0
            else:
                near = max(0.0, 0.5 - t)  # near the joint: blended with the parent
                wrow[b] = 1.0 - near
                wrow[parents[b]] = near
            weights.append(wrow)
    return {
        "parents": parents.astype(np.int32),
        "base_relatives": rel,
        "inverse_base_absolutes": inv_abs,
        "base_positions": np.array(positions),
        "weights": np.array(weights),
    }


def hand_inputs(verts_per_bone: int, n_corr: int, seed: int = 0) -> dict[str, np.ndarray]:
    """The model, a pose ``theta`` (26,), ``correspondences`` (n_corr,) int32 and
    ``points`` (n_corr, 3) near the corresponding rest-pose vertices."""
    model = hand_model(verts_per_bone, seed)
    rng = np.random.default_rng(seed + 1)
    n_verts = model["base_positions"].shape[0]
    theta = rng.normal(scale=0.3, size=26)
    theta[0:3] = [0.2, -0.1, 0.3]  # a global rotation away from 0 (angle-axis)
    corr = rng.integers(0, n_verts, size=n_corr).astype(np.int32)
    points = model["base_positions"][corr] + rng.normal(scale=0.05, size=(n_corr, 3))
    return {**model, "theta": theta, "correspondences": corr, "points": points}


def lstm_inputs(l: int, c: int, b: int, seed: int = 0) -> dict[str, np.ndarray]:  # noqa: E741
    """``main_params`` (l, 2, 4, b): per layer weights then biases of the four gates;
    ``extra_params`` (3, b): input scale, output scale, output bias; ``state``
    (l, 2, b): hidden then cell; ``sequence`` (c, b)."""
    rng = np.random.default_rng(seed)
    return {
        "main_params": rng.normal(scale=0.5, size=(l, 2, 4, b)),
        "extra_params": rng.normal(scale=0.5, size=(3, b)),
        "state": rng.normal(scale=0.5, size=(l, 2, b)),
        "sequence": rng.dirichlet(np.ones(b), size=c),
    }
