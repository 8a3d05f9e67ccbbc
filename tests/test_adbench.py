"""ADBench's objectives (``benchmarks/adbench``): enzyme_py's gradients and Jacobians of
the C++ (and Numba) objectives against float64 central differences, at small sizes;
the JAX and PyTorch twins (when installed) compute the same values and derivatives;
``python -m benchmarks.adbench --quick`` writes its report. Never timings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.needs_enzyme
pytest.importorskip("numba")

from benchmarks.adbench import data  # noqa: E402
from benchmarks.adbench import enzyme_impl as ei  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
HAND_KEYS = (
    "theta",
    "parents",
    "base_relatives",
    "inverse_base_absolutes",
    "base_positions",
    "weights",
    "correspondences",
    "points",
)


def fd(f, arrays, h=1e-6):
    """Central differences of f() (scalar or array) w.r.t. every entry of each array
    in ``arrays`` (changed in place and restored): one (f.size, a.size) block each."""
    blocks = []
    for a in arrays:
        flat = a.reshape(-1)
        cols = []
        for j in range(flat.size):
            old = flat[j]
            step = h * max(1.0, abs(old))
            flat[j] = old + step
            up = np.array(f(), dtype=np.float64, copy=True).ravel()
            flat[j] = old - step
            down = np.array(f(), dtype=np.float64, copy=True).ravel()
            flat[j] = old
            cols.append((up - down) / (2 * step))
        blocks.append(np.stack(cols, axis=1))
    return blocks


def close(got, want, rtol=1e-5):
    got, want = np.asarray(got), np.asarray(want)
    scale = max(float(np.max(np.abs(want))), 1e-12)
    assert np.max(np.abs(got - want)) <= rtol * scale, (got, want)


@pytest.fixture(scope="module")
def gmm():
    return data.gmm_inputs(3, 4, 20, seed=1)


@pytest.mark.parametrize("frontend", ["cpp", "numba"])
def test_gmm_gradient_matches_finite_differences(gmm, frontend):
    alphas, means, icf, x, gamma, m = (a.copy() if isinstance(a, np.ndarray) else a for a in gmm)
    make = ei.make_gmm_cpp if frontend == "cpp" else ei.make_gmm_numba
    c = make(alphas, means, icf, x, gamma, m)
    grads = c.derivative()
    want = fd(c.primal, [alphas, means, icf])
    for g, w in zip(grads, want, strict=False):
        close(g.ravel(), w[0])
    assert c.build_s >= 0.0
    # Numba's compile is timed apart, before the derivative; C++'s is ez.cpp's
    assert (c.primal_compile_s is None) == (frontend == "cpp")
    assert c.primal_compile_s is None or c.primal_compile_s >= 0.0


def test_gmm_cpp_and_numba_agree(gmm):
    a = ei.make_gmm_cpp(*gmm)
    b = ei.make_gmm_numba(*gmm)
    assert a.primal() == pytest.approx(b.primal(), rel=1e-12)
    for ga, gb in zip(a.derivative(), b.derivative(), strict=False):
        close(ga, gb, 1e-10)


@pytest.fixture(scope="module")
def ba():
    return data.ba_inputs(3, 5, 8, seed=2)


@pytest.mark.parametrize("frontend", ["cpp", "numba"])
def test_ba_jacobian_blocks_match_finite_differences(ba, frontend):
    inp = {k: v.copy() for k, v in ba.items()}
    make = ei.make_ba_cpp if frontend == "cpp" else ei.make_ba_numba
    c = make(inp["cams"], inp["X"], inp["w"], inp["obs"], inp["feats"])
    terr, dw = c.derivative()
    terr, dw = terr.copy(), dw.copy()

    def reproj():
        return c.primal()[0]

    jc, jx, jw = fd(reproj, [inp["cams"], inp["X"], inp["w"]])
    p = inp["w"].shape[0]
    for i in range(p):
        cam, pt = inp["obs"][i]
        rows = slice(2 * i, 2 * i + 2)
        block = np.concatenate(
            [
                jc[rows, 11 * cam : 11 * cam + 11],
                jx[rows, 3 * pt : 3 * pt + 3],
                jw[rows, i : i + 1],
            ],
            axis=1,
        )
        close(terr[:, i, :].T, block)
    (jwe,) = fd(lambda: c.primal()[1], [inp["w"]])
    close(dw, np.diag(jwe))
    close(np.diag(jwe), -2.0 * inp["w"])


def test_ba_lane_widths_agree(ba):
    blocks = [ei.make_ba_cpp(*ba.values(), width=w).derivative()[0].copy() for w in (1, 5, 15)]
    close(blocks[0], blocks[2], 1e-12)
    close(blocks[1], blocks[2], 1e-12)


def test_ba_cpp_and_numba_agree(ba):
    a = ei.make_ba_cpp(*ba.values())
    b = ei.make_ba_numba(*ba.values())
    for ra, rb in zip(a.primal(), b.primal(), strict=False):
        close(ra.copy(), rb, 1e-12)
    for ra, rb in zip(a.derivative(), b.derivative(), strict=False):
        close(ra.copy(), rb, 1e-10)


def test_ba_zero_rotation_branch():
    inp = data.ba_inputs(2, 3, 4, seed=3)
    inp["cams"][0, 0:3] = 0.0  # Rodrigues' small-angle branch for camera 0
    c = ei.make_ba_cpp(*inp.values())
    terr, _ = c.derivative()
    terr = terr.copy()
    (jc,) = fd(lambda: c.primal()[0], [inp["cams"]])
    for i in range(4):
        cam = inp["obs"][i, 0]
        close(terr[:11, i, :].T, jc[2 * i : 2 * i + 2, 11 * cam : 11 * cam + 11], 1e-5)


@pytest.fixture(scope="module")
def hand():
    return data.hand_inputs(2, 12, seed=4)


def test_hand_model_is_a_rest_pose(hand):
    # skinning weights are a partition of unity; the rest pose gives the base positions
    assert np.allclose(hand["weights"].sum(axis=1), 1.0)
    assert hand["parents"][0] == -1 and all(
        hand["parents"][b] < b for b in range(1, hand["parents"].shape[0])
    )
    inp = {k: v.copy() for k, v in hand.items()}
    inp["theta"][:] = 0.0
    inp["theta"][0] = 1e-12  # the global rotation: angle-axis, never exactly 0
    c = ei.make_hand_cpp(*(inp[k] for k in HAND_KEYS))
    err = c.primal()
    close(inp["points"] - err, inp["base_positions"][inp["correspondences"]], 1e-10)


@pytest.mark.parametrize("width", [2, 13])
def test_hand_jacobian_matches_finite_differences(hand, width):
    inp = {k: v.copy() for k, v in hand.items()}
    c = ei.make_hand_cpp(*(inp[k] for k in HAND_KEYS), width=width)
    J = c.derivative()
    assert J.shape == (3 * inp["correspondences"].shape[0], 26)
    (want,) = fd(lambda: c.primal(), [inp["theta"]])
    close(J, want)


def test_lstm_gradient_matches_finite_differences():
    inp = data.lstm_inputs(2, 5, 3, seed=5)
    c = ei.make_lstm_cpp(inp["main_params"], inp["extra_params"], inp["state"], inp["sequence"])
    state_before = inp["state"].copy()
    dmain, dextra = c.derivative()
    np.testing.assert_array_equal(inp["state"], state_before)  # works on a copy
    want_main, want_extra = fd(c.primal, [inp["main_params"], inp["extra_params"]])
    close(dmain.ravel(), want_main[0])
    close(dextra.ravel(), want_extra[0])


# ---------------------------------------------------------------- JAX and PyTorch twins
def _twin(framework: str, name: str):
    pytest.importorskip(framework)
    from benchmarks.adbench import contenders

    return getattr(contenders, f"{'jax' if framework == 'jax' else 'torch'}_{name}")


@pytest.mark.parametrize("framework", ["jax", "torch"])
def test_twins_agree_with_enzyme_py(framework, gmm, ba, hand):
    lstm = data.lstm_inputs(2, 5, 3, seed=5)
    # GMM
    primal, derivative = _twin(framework, "gmm")(*gmm)
    ours = ei.make_gmm_cpp(*gmm)
    assert primal() == pytest.approx(ours.primal(), rel=1e-10)
    for g, w in zip(derivative(), ours.derivative(), strict=False):
        close(g, w, 1e-8)
    # BA
    primal, derivative = _twin(framework, "ba")(*ba.values())
    ours_ba = ei.make_ba_cpp(*ba.values())
    r, we = primal()
    want_r, want_we = ours_ba.primal()
    close(np.asarray(r), want_r, 1e-10)
    close(np.asarray(we), want_we, 1e-12)
    blocks, dw = derivative()
    terr, dw_ours = ours_ba.derivative()
    close(blocks, np.transpose(terr, (1, 2, 0)), 1e-8)
    close(dw, dw_ours, 1e-12)
    # HAND
    primal, derivative = _twin(framework, "hand")(hand)
    ours_hand = ei.make_hand_cpp(*(hand[k] for k in HAND_KEYS))
    close(np.asarray(primal()), ours_hand.primal().ravel(), 1e-10)
    close(derivative(), ours_hand.derivative(), 1e-8)
    # LSTM
    primal, derivative = _twin(framework, "lstm")(*lstm.values())
    ours_lstm = ei.make_lstm_cpp(*lstm.values())
    assert primal() == pytest.approx(ours_lstm.primal(), rel=1e-10)
    for g, w in zip(derivative(), ours_lstm.derivative(), strict=False):
        close(g, w, 1e-8)


def test_adbench_quick_report(tmp_path):
    # JAX and PyTorch are checked by test_twins_agree_with_enzyme_py; here they are
    # blocked (their first calls, tracing and compiling, would take most of the run)
    env = {**os.environ, "BENCH_DISABLE": "jax,torch"}
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.adbench", "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "adbench.json").read_text())
    assert (tmp_path / "adbench.md").is_file()
    assert set(report["results"]) == {"gmm", "ba", "hand", "lstm"}
    env_info = report["environment"]
    for key in ("cpu", "cpus", "load_average_start", "load_average_end", "cpp_compile_s"):
        assert key in env_info
    for name, res in report["results"].items():
        rows = res["rows"]
        assert "enzyme_py C++" in rows
        if name in ("gmm", "ba"):
            assert "enzyme_py Numba" in rows
        if name == "gmm":
            assert "enzyme_py Numba prange" in rows
        for label in ("JAX", "PyTorch"):
            assert "disabled" in rows[label]["skipped"]
        for row in rows.values():
            if "skipped" in row:
                continue
            assert row["relative_error_vs_cpp"] < 1e-6
            assert row["derivative_s"] > 0 and row["primal_s"] > 0
    assert "load average" in proc.stdout
