"""The ADBench objectives in JAX and PyTorch, from the same maths as the C++ (vectorised
array code as users of each write it); GMM is the suite's (``benchmarks.contenders``).

- GMM, LSTM: ``jax.jit(jax.grad)``; PyTorch ``backward()``.
- BA: per-observation Jacobian blocks, ``jit(vmap(jacfwd))`` over the observations
  (cameras and points gathered per observation); ``torch.func.vmap(jacfwd)``.
- HAND: ``jit(jacfwd)`` of the 26 parameters; ``torch.func.jacfwd``.

Each ``make_*`` takes NumPy inputs and returns ``(primal, derivative)`` callables that
block until their results exist, returning NumPy arrays.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks.contenders import jax_kernels, torch_kernels

Pair = tuple[Callable[[], Any], Callable[[], Any]]

# poses: finger f's bones 2..4 of 1 + 4f.. take theta 6 + 4f + (0, 1 | 2 | 3)
_POSE_BONE = np.array([1 + 4 * f + j for f in range(5) for j in (1, 1, 2, 3)])
_POSE_AXIS = np.array([a for _ in range(5) for a in (0, 2, 0, 0)])


def _hand_common(
    xp: Any, theta: Any, model: dict[str, Any], stack: Callable, cat: Callable, zeros: Callable
) -> Any:
    """The hand objective in array code (``xp``: jnp or torch)."""
    nb = model["parents"].shape[0]
    pose = zeros((nb, 3))
    pose = model["set_pose"](pose, theta[6:])
    cx, sx = xp.cos(pose[:, 0]), xp.sin(pose[:, 0])
    cy, sy = xp.cos(pose[:, 1]), xp.sin(pose[:, 1])
    cz, sz = xp.cos(pose[:, 2]), xp.sin(pose[:, 2])
    R = stack(
        [
            stack([cz * cy, cz * sy * sx - sz * cx, cz * sy * cx + sz * sx], 1),
            stack([sz * cy, sz * sy * sx + cz * cx, sz * sy * cx - cz * sx], 1),
            stack([-sy, cy * sx, cy * cx], 1),
        ],
        1,
    )  # (nb, 3, 3)
    rel_base = model["base_relatives"]
    rel_R = rel_base[:, :, :3] @ R
    rel_t = rel_base[:, :, 3]
    parents = model["parents_list"]
    abs_R: list[Any] = []
    abs_t: list[Any] = []
    for b in range(nb):
        p = parents[b]
        if p < 0:
            abs_R.append(rel_R[b])
            abs_t.append(rel_t[b])
        else:
            abs_R.append(abs_R[p] @ rel_R[b])
            abs_t.append(abs_R[p] @ rel_t[b] + abs_t[p])
    AR, At = stack(abs_R, 0), stack(abs_t, 0)
    inv = model["inverse_base_absolutes"]
    TR = AR @ inv[:, :, :3]
    Tt = (AR @ inv[:, :, 3:4])[:, :, 0] + At
    pos = model["base_positions"]  # (V, 3)
    per_bone = xp.einsum("brc,vc->vbr", TR, pos) + Tt[None, :, :]  # (V, nb, 3)
    s = xp.einsum("vb,vbr->vr", model["weights"], per_bone)
    t = xp.sqrt(xp.sum(theta[0:3] * theta[0:3]))
    k = theta[0:3] / t
    ct, st = xp.cos(t), xp.sin(t)
    x, y, z = k[0], k[1], k[2]
    G = stack(
        [
            stack([ct + x * x * (1 - ct), x * y * (1 - ct) - z * st, x * z * (1 - ct) + y * st], 0),
            stack([y * x * (1 - ct) + z * st, ct + y * y * (1 - ct), y * z * (1 - ct) - x * st], 0),
            stack([z * x * (1 - ct) - y * st, z * y * (1 - ct) + x * st, ct + z * z * (1 - ct)], 0),
        ],
        0,
    )
    skinned = s @ G.T + theta[3:6]
    return model["points"] - skinned[model["correspondences"]]


def _ba_block(xp: Any, cam: Any, X: Any, w: Any, feat: Any, stack: Callable) -> Any:
    """One observation's reprojection error (2,) (the rotation is never 0 here)."""
    rot = cam[0:3]
    p = X - cam[3:6]
    theta = xp.sqrt(xp.sum(rot * rot))
    ct, st = xp.cos(theta), xp.sin(theta)
    k = rot / theta
    cross = stack(
        [k[1] * p[2] - k[2] * p[1], k[2] * p[0] - k[0] * p[2], k[0] * p[1] - k[1] * p[0]], 0
    )
    xr = p * ct + cross * st + k * (xp.sum(k * p) * (1.0 - ct))
    u = xr[0:2] / xr[2]
    rsq = xp.sum(u * u)
    L = 1.0 + cam[9] * rsq + cam[10] * rsq * rsq
    return w * (u * L * cam[6] + cam[7:9] - feat)


# ---------------------------------------------------------------- JAX
def jax_gmm(alphas, means, icf, x, gamma, m) -> Pair:
    jk = jax_kernels()
    jax, jnp = jk.jax, jk.jnp
    args = [jnp.asarray(a) for a in (alphas, means, icf, x)]
    f = jax.jit(jk.gmm_objective)
    g = jax.jit(jax.grad(jk.gmm_objective, argnums=(0, 1, 2)))
    return (
        lambda: float(f(*args, gamma, m)),
        lambda: [np.asarray(r) for r in jax.block_until_ready(g(*args, gamma, m))],
    )


def jax_ba(cams, X, w, obs, feats) -> Pair:
    jk = jax_kernels()
    jax, jnp = jk.jax, jk.jnp

    def block(cam, Xp, wi, feat):
        return _ba_block(jnp, cam, Xp, wi, feat, jnp.stack)

    def objective(cams, X, w, obs, feats):
        r = jax.vmap(block)(cams[obs[:, 0]], X[obs[:, 1]], w, feats)
        return r, 1.0 - w * w

    def jacobian(cams, X, w, obs, feats):
        jc, jx, jw = jax.vmap(jax.jacfwd(block, argnums=(0, 1, 2)))(
            cams[obs[:, 0]], X[obs[:, 1]], w, feats
        )
        return jnp.concatenate([jc, jx, jw[:, :, None]], axis=2), -2.0 * w

    args = [jnp.asarray(a) for a in (cams, X, w, obs, feats)]
    f, j = jax.jit(objective), jax.jit(jacobian)
    return (
        lambda: jax.block_until_ready(f(*args)),
        lambda: [np.asarray(r) for r in jax.block_until_ready(j(*args))],
    )


def _jax_hand_model(inputs: dict[str, np.ndarray]) -> tuple[Any, dict[str, Any]]:
    jk = jax_kernels()
    jnp = jk.jnp
    model = {
        k: jnp.asarray(inputs[k])
        for k in (
            "base_relatives",
            "inverse_base_absolutes",
            "base_positions",
            "weights",
            "points",
            "correspondences",
            "parents",
        )
    }
    model["parents_list"] = [int(p) for p in inputs["parents"]]

    def set_pose(pose, t):
        return pose.at[_POSE_BONE, _POSE_AXIS].set(t)

    model["set_pose"] = set_pose
    return jk, model


def jax_hand(inputs: dict[str, np.ndarray]) -> Pair:
    jk, model = _jax_hand_model(inputs)
    jax, jnp = jk.jax, jk.jnp

    def objective(theta):
        return _hand_common(jnp, theta, model, jnp.stack, jnp.concatenate, jnp.zeros).reshape(-1)

    theta = jnp.asarray(inputs["theta"])
    f, j = jax.jit(objective), jax.jit(jax.jacfwd(objective))
    return (
        lambda: jax.block_until_ready(f(theta)),
        lambda: np.asarray(jax.block_until_ready(j(theta))),
    )


def _jax_lstm_loss(jnp: Any, lax: Any, logsumexp: Any) -> Callable:
    def loss(main, extra, state, seq):
        l = main.shape[0]  # noqa: E741

        def step(st, xy):
            x, target = xy
            h = x * extra[0]
            new = []
            for layer in range(l):
                w, bias = main[layer, 0], main[layer, 1]
                hid, cell = st[layer, 0], st[layer, 1]
                forget = 1.0 / (1.0 + jnp.exp(-(h * w[0] + bias[0])))
                ingate = 1.0 / (1.0 + jnp.exp(-(hid * w[1] + bias[1])))
                outgate = 1.0 / (1.0 + jnp.exp(-(h * w[2] + bias[2])))
                change = jnp.tanh(hid * w[3] + bias[3])
                cell = cell * forget + ingate * change
                hid = outgate * jnp.tanh(cell)
                new.append(jnp.stack([hid, cell]))
                h = hid
            y = h * extra[1] + extra[2]
            ynorm = y - logsumexp(y)
            return jnp.stack(new), jnp.sum(target * ynorm)

        _, totals = lax.scan(step, state, (seq[:-1], seq[1:]))
        return -jnp.sum(totals) / ((seq.shape[0] - 1) * seq.shape[1])

    return loss


def jax_lstm(main_params, extra_params, state, sequence) -> Pair:
    jk = jax_kernels()
    jax, jnp = jk.jax, jk.jnp
    from jax.scipy.special import logsumexp

    loss = _jax_lstm_loss(jnp, jax.lax, logsumexp)
    args = [jnp.asarray(a) for a in (main_params, extra_params, state, sequence)]
    f, g = jax.jit(loss), jax.jit(jax.grad(loss, argnums=(0, 1)))
    return (
        lambda: float(f(*args)),
        lambda: [np.asarray(r) for r in jax.block_until_ready(g(*args))],
    )


# ---------------------------------------------------------------- PyTorch
def torch_gmm(alphas, means, icf, x, gamma, m) -> Pair:
    tk = torch_kernels()
    torch = tk.torch
    xs = torch.from_numpy(x)

    def primal():
        with torch.no_grad():
            return float(
                tk.gmm_objective(*(torch.from_numpy(a) for a in (alphas, means, icf)), xs, gamma, m)
            )

    def derivative():
        ps = [torch.from_numpy(a).requires_grad_() for a in (alphas, means, icf)]
        tk.gmm_objective(*ps, xs, gamma, m).backward()
        return [p.grad.numpy() for p in ps]

    return primal, derivative


def torch_ba(cams, X, w, obs, feats) -> Pair:
    tk = torch_kernels()
    torch = tk.torch
    from torch.func import jacfwd, vmap

    def block(cam, Xp, wi, feat):
        return _ba_block(torch, cam, Xp, wi, feat, torch.stack)

    tc, tX, tw, tf = (torch.from_numpy(a) for a in (cams, X, w, feats))
    ci, pi = (
        torch.from_numpy(obs[:, 0].astype(np.int64)),
        torch.from_numpy(obs[:, 1].astype(np.int64)),
    )

    def primal():
        with torch.no_grad():
            return vmap(block)(tc[ci], tX[pi], tw, tf), 1.0 - tw * tw

    def derivative():
        jc, jx, jw = vmap(jacfwd(block, argnums=(0, 1, 2)))(tc[ci], tX[pi], tw, tf)
        return torch.cat([jc, jx, jw[:, :, None]], dim=2).numpy(), (-2.0 * tw).numpy()

    return primal, derivative


def torch_hand(inputs: dict[str, np.ndarray]) -> Pair:
    tk = torch_kernels()
    torch = tk.torch
    from torch.func import jacfwd

    model: dict[str, Any] = {
        k: torch.from_numpy(inputs[k])
        for k in (
            "base_relatives",
            "inverse_base_absolutes",
            "base_positions",
            "weights",
            "points",
            "parents",
        )
    }
    model["correspondences"] = torch.from_numpy(inputs["correspondences"].astype(np.int64))
    model["parents_list"] = [int(p) for p in inputs["parents"]]
    bone, axis = torch.from_numpy(_POSE_BONE), torch.from_numpy(_POSE_AXIS)

    def set_pose(pose, t):
        return pose.index_put((bone, axis), t)

    model["set_pose"] = set_pose

    def zeros(shape):
        return torch.zeros(shape, dtype=torch.float64)

    def objective(theta):
        return _hand_common(torch, theta, model, torch.stack, torch.cat, zeros).reshape(-1)

    theta = torch.from_numpy(inputs["theta"])

    def primal():
        with torch.no_grad():
            return objective(theta)

    return primal, lambda: jacfwd(objective)(theta).numpy()


def torch_lstm(main_params, extra_params, state, sequence) -> Pair:
    tk = torch_kernels()
    torch = tk.torch
    seq = torch.from_numpy(sequence)
    st0 = torch.from_numpy(state)

    def loss(main, extra):
        l = main.shape[0]  # noqa: E741
        hid = [st0[i, 0] for i in range(l)]
        cell = [st0[i, 1] for i in range(l)]
        total = torch.zeros((), dtype=torch.float64)
        for t in range(seq.shape[0] - 1):
            h = seq[t] * extra[0]
            for layer in range(l):
                w, bias = main[layer, 0], main[layer, 1]
                forget = torch.sigmoid(h * w[0] + bias[0])
                ingate = torch.sigmoid(hid[layer] * w[1] + bias[1])
                outgate = torch.sigmoid(h * w[2] + bias[2])
                change = torch.tanh(hid[layer] * w[3] + bias[3])
                cell[layer] = cell[layer] * forget + ingate * change
                hid[layer] = outgate * torch.tanh(cell[layer])
                h = hid[layer]
            y = h * extra[1] + extra[2]
            total = total + torch.sum(seq[t + 1] * (y - torch.logsumexp(y, dim=0)))
        return -total / ((seq.shape[0] - 1) * seq.shape[1])

    def primal():
        with torch.no_grad():
            return float(loss(torch.from_numpy(main_params), torch.from_numpy(extra_params)))

    def derivative():
        ps = [torch.from_numpy(a).requires_grad_() for a in (main_params, extra_params)]
        loss(*ps).backward()
        return [p.grad.numpy() for p in ps]

    return primal, derivative


__all__ = [
    "jax_ba",
    "jax_gmm",
    "jax_hand",
    "jax_lstm",
    "math",
    "torch_ba",
    "torch_gmm",
    "torch_hand",
    "torch_lstm",
]
