"""ez.grad's question of which arrays a Numba function writes (they get shadows) is
answered from the disk cache in a new process, so that a derivative found there needs
no Numba compile of the IR at all; the first process compiles the IR once for both the
question and the derivative. The answers stay right: a function that writes a scratch
array gets its shadow from the cached answer too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import enzyme_py as ez
from enzyme_py import _cache
from enzyme_py._read_only import _decoded

pytestmark = pytest.mark.needs_enzyme

KERNEL = """
import numba

@numba.njit
def f(x, scratch, w):
    # scratch is written (it needs a shadow: what flows through it is differentiated);
    # w is only read. Read downwards: read upwards, src/scratch_forwarding.h would
    # compute scratch[i] from x again, and no gradient would flow through scratch.
    for i in range(x.shape[0]):
        scratch[i] = {c} * x[i] * x[i]
    s = 0.0
    for i in range(x.shape[0] - 1, -1, -1):
        s += w[i] * scratch[i]
    return s
"""

CHILD = """
import json, sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import enzyme_py as ez
from enzyme_py.frontends import numba as frontend

compiles = []
original = frontend._ad_compile
def counting(*args):
    compiles.append(1)
    return original(*args)
frontend._ad_compile = counting

import kern
x = np.array([1.0, 2.0, 3.0])
w = np.array([0.5, -1.0, 2.0])
gx, gw = ez.grad(kern.f, argnums=(0, 2))(x, np.zeros(3), w)
print("RESULT " + json.dumps({"gx": gx.tolist(), "gw": gw.tolist(), "ir_compiles": len(compiles)}))
"""


def _run(folder: Path, cache: Path) -> dict:
    env = {**os.environ, "ENZYME_PY_CACHE_DIR": str(cache), "ENZYME_PY_LOG": "1"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(folder)],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        check=False,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout + proc.stderr
    result = json.loads(lines[-1][len("RESULT ") :])
    result["from_disk"] = "from disk cache" in proc.stderr
    result["log"] = proc.stderr
    return result


def _expected(c: float) -> tuple[list[float], list[float]]:
    x = np.array([1.0, 2.0, 3.0])
    w = np.array([0.5, -1.0, 2.0])
    return (2.0 * c * w * x).tolist(), (c * x * x).tolist()


def _check(result: dict, c: float) -> None:
    gx, gw = _expected(c)
    np.testing.assert_allclose(result["gx"], gx, rtol=1e-12)
    np.testing.assert_allclose(result["gw"], gw, rtol=1e-12)


def test_grad_in_a_new_process_compiles_no_ir_and_keeps_the_shadows(tmp_path):
    (tmp_path / "kern.py").write_text(textwrap.dedent(KERNEL.format(c=3.0)))
    cache = tmp_path / "cache"
    first = _run(tmp_path, cache)
    _check(first, 3.0)
    # One IR compile serves the read-only question and the derivative.
    assert not first["from_disk"] and first["ir_compiles"] == 1, first["log"]
    second = _run(tmp_path, cache)
    _check(second, 3.0)
    assert second["from_disk"] and second["ir_compiles"] == 0, second["log"]
    # Changed code: a new identity, so neither answer is taken from the cache.
    (tmp_path / "kern.py").write_text(textwrap.dedent(KERNEL.format(c=5.0)))
    third = _run(tmp_path, cache)
    _check(third, 5.0)
    assert not third["from_disk"] and third["ir_compiles"] == 1, third["log"]


def test_a_cached_answer_that_was_wrong_would_show(tmp_path, monkeypatch):
    # The test above can fail: with the scratch array taken for read-only (no shadow),
    # the gradient through it would be lost. Simulate that answer and see the
    # difference: the build refuses the array as Const (_const_memory.py), naming it.
    import numba

    @numba.njit
    def f(x, scratch):
        for i in range(x.shape[0]):
            scratch[i] = x[i] * x[i]
        s = 0.0
        for i in range(x.shape[0] - 1, -1, -1):  # downwards, as KERNEL
            s += scratch[i]
        return s

    x = np.array([1.0, 2.0])
    right = ez.grad(f)(x, np.zeros(2))
    np.testing.assert_allclose(right, 2.0 * x)
    from enzyme_py import _transforms

    monkeypatch.setattr(_transforms, "read_only_params", lambda fn: [True] * len(fn.params))
    with pytest.raises(ez.ActivityError, match=r"\('scratch'\) of 'f' is Const"):
        ez.grad(numba.njit(f.py_func))(x, np.zeros(2))


def test_text_entries_are_verified_and_never_taken_for_derivatives(tmp_path, monkeypatch):
    monkeypatch.setenv("ENZYME_PY_CACHE_DIR", str(tmp_path))
    key = _cache.request_key(["a test text"])
    _cache.store_text(key, "[true, false]")
    assert _cache.load_text(key) == "[true, false]"
    assert _cache.load_text(_cache.request_key(["another"])) is None
    # A derivative's entry under a key is no text.
    other = _cache.request_key(["a derivative"])
    _cache.store(other, _cache.Artifact(b"\x7fELF", "entry", "", ""))
    assert _cache.load_text(other) is None
    # A damaged text entry is a miss (and removed).
    (path,) = [p for p in _cache.entries(tmp_path) if p.stem == key]
    path.write_bytes(path.read_bytes()[:-1] + b"\0")
    assert _cache.load_text(key) is None
    assert not path.exists()


def test_kept_flags_are_checked_before_use():
    assert _decoded("[true, false]", 2) == [True, False]
    assert _decoded("[true, false]", 3) is None  # another parameter count
    assert _decoded("[1, 0]", 2) is None  # not booleans
    assert _decoded("not json", 2) is None
    assert _decoded(None, 2) is None
