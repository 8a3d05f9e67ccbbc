"""Helpers shared by test modules: random inputs, derivative checks, a comparison and
the fuzz driver's runner. The finite differences themselves are in reference.py."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import enzyme_py as ez

from reference import fd_partial

FUZZ_DRIVER = Path(__file__).with_name("fuzz_driver.py")


def general_matrix(n: int, seed: int) -> np.ndarray:
    """A random n x n matrix, well away from singular."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, n)) + 2.0 * np.eye(n)


def spd_matrix(n: int, seed: int) -> np.ndarray:
    """A random symmetric positive definite n x n matrix."""
    m = np.random.default_rng(seed).standard_normal((n, n))
    return m @ m.T + n * np.eye(n)


def random_vector(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n)


def check_grad_and_jvp(
    f: Callable[..., Any],
    args: Sequence[Any],
    diff: Sequence[int],
    rtol: float = 1e-6,
    atol: float = 1e-8,
    dtype: Any = None,
) -> None:
    """ez.grad (reverse) and ez.jvp (forward, random tangents) of f against float64
    central differences of f, for the arguments ``diff``.

    dtype None: the arguments are passed as given, and the primal ez.jvp returns must
    match f's to 1e-12. Else the array arguments are passed in ``dtype`` (the
    differences are taken in float64), the gradients must have it, and the primal
    matches to ``rtol``."""
    if dtype is None:
        exact = list(args)
        call = exact
        value_rtol = 1e-12
    else:
        exact = [np.asarray(a, dtype=np.float64) if isinstance(a, np.ndarray) else a for a in args]
        call = [a.astype(dtype) if isinstance(a, np.ndarray) else a for a in exact]
        value_rtol = max(rtol, 1e-12)
    want = [fd_partial(f, exact, k) for k in diff]
    grads = ez.grad(f, tuple(diff))(*call)
    for g, w in zip(grads, want, strict=True):
        if dtype is not None:
            assert g.dtype == dtype
        scale = max(1.0, float(np.max(np.abs(w))))
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol * scale)
    rng = np.random.default_rng(3)
    tangents = [
        rng.standard_normal(np.shape(a)).astype(dtype or np.float64) if k in diff else None
        for k, a in enumerate(call)
    ]
    value, dy = ez.jvp(f, tuple(call), tuple(tangents))
    assert value == pytest.approx(f(*call), rel=value_rtol, abs=1e-12)
    directional = sum(float(np.sum(w * tangents[k])) for w, k in zip(want, diff, strict=True))
    scale = max(1.0, abs(directional))
    assert dy == pytest.approx(directional, rel=rtol, abs=atol * scale)


def close(got: Any, want: Any, rtol: float = 1e-12, how: str = "") -> None:
    """got == want to ``rtol`` (relative and absolute), as arrays; ``how`` names the
    comparison in the message (the JAX bridge's tests)."""
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=rtol, atol=rtol, err_msg=how)


def run_fuzz_driver(*args: str) -> dict[str, Any]:
    """tests/fuzz_driver.py run in a child process with ``args``: its report, once the
    child is known not to have crashed."""
    proc = subprocess.run(
        [sys.executable, str(FUZZ_DRIVER), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, f"the child crashed ({proc.returncode}): {proc.stderr[-3000:]}"
    report: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return report
