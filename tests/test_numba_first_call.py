"""A Numba derivative found in the disk cache is served without a second Numba compile,
and never stale: each test changes what the code is made of (a global it reads, a
closure value, a callee, its source) between processes and checks that the derivative
is rebuilt and right."""

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

pytestmark = pytest.mark.needs_enzyme

# The child: imports the kernel module from its folder, takes one gradient, and says
# whether the IR Enzyme differentiates was compiled (the second Numba compile).
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
f = kern.make(float(sys.argv[2])) if hasattr(kern, "make") else kern.f
x = np.array([1.0, 2.0, 3.0])
dx = np.zeros(3)
ez.autodiff(f, ez.Reverse, ez.Duplicated, ez.Active)(x, dx, 1.0)
print("RESULT " + json.dumps({"dx": dx.tolist(), "ir_compiles": len(compiles)}))
"""


def _run(folder: Path, cache: Path, arg: float = 0.0) -> dict:
    env = {**os.environ, "ENZYME_PY_CACHE_DIR": str(cache), "ENZYME_PY_LOG": "1"}
    # Bytecode caches of the kernel module would hide a rewrite within the same second.
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(folder), repr(arg)],
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


def _write(folder: Path, name: str, text: str) -> None:
    (folder / f"{name}.py").write_text(textwrap.dedent(text))


def _check(result: dict, expected: list[float]) -> None:
    np.testing.assert_allclose(result["dx"], expected, rtol=1e-12)


def _twice_then(folder: Path, cache: Path, before: list[float], arg: float = 0.0) -> None:
    """First process builds; the second is served from the disk cache without
    compiling the IR."""
    first = _run(folder, cache, arg)
    _check(first, before)
    assert not first["from_disk"] and first["ir_compiles"] == 1, first["log"]
    second = _run(folder, cache, arg)
    _check(second, before)
    assert second["from_disk"] and second["ir_compiles"] == 0, second["log"]


def _rebuilt(result: dict, expected: list[float]) -> None:
    _check(result, expected)
    assert not result["from_disk"] and result["ir_compiles"] == 1, result["log"]


def test_a_changed_global_rebuilds(tmp_path):
    kernel = """
    import numba
    G = {g}
    @numba.njit
    def f(x):
        s = 0.0
        for i in range(x.shape[0]):
            s += G * x[i] ** 2
        return s
    """
    _write(tmp_path, "kern", kernel.format(g=2.0))
    _twice_then(tmp_path, tmp_path / "cache", [4.0, 8.0, 12.0])
    _write(tmp_path, "kern", kernel.format(g=3.0))
    _rebuilt(_run(tmp_path, tmp_path / "cache"), [6.0, 12.0, 18.0])


def test_a_changed_global_array_rebuilds(tmp_path):
    kernel = """
    import numba
    import numpy as np
    W = np.array([{w}, 1.0, 1.0])
    @numba.njit
    def f(x):
        s = 0.0
        for i in range(x.shape[0]):
            s += W[i] * x[i]
        return s
    """
    _write(tmp_path, "kern", kernel.format(w=1.0))
    _twice_then(tmp_path, tmp_path / "cache", [1.0, 1.0, 1.0])
    _write(tmp_path, "kern", kernel.format(w=5.0))
    _rebuilt(_run(tmp_path, tmp_path / "cache"), [5.0, 1.0, 1.0])


def test_a_changed_closure_value_rebuilds(tmp_path):
    _write(
        tmp_path,
        "kern",
        """
        import numba
        def make(c):
            @numba.njit
            def f(x):
                s = 0.0
                for i in range(x.shape[0]):
                    s += c * x[i] ** 2
                return s
            return f
        """,
    )
    _twice_then(tmp_path, tmp_path / "cache", [2.0, 4.0, 6.0], arg=1.0)
    _rebuilt(_run(tmp_path, tmp_path / "cache", arg=2.0), [4.0, 8.0, 12.0])


def test_a_changed_callee_rebuilds(tmp_path):
    helper = """
    import numba
    @numba.njit
    def helper(v):
        return {body}
    """
    _write(tmp_path, "helpers", helper.format(body="v * v"))
    _write(
        tmp_path,
        "kern",
        """
        import numba
        import helpers
        from helpers import helper
        @numba.njit
        def f(x):
            s = 0.0
            for i in range(x.shape[0]):
                s += helper(x[i])
            return s
        """,
    )
    _twice_then(tmp_path, tmp_path / "cache", [2.0, 4.0, 6.0])
    _write(tmp_path, "helpers", helper.format(body="v * v * v"))
    _rebuilt(_run(tmp_path, tmp_path / "cache"), [3.0, 12.0, 27.0])


def test_a_callee_read_through_its_module_rebuilds(tmp_path):
    helper = """
    import numba
    SCALE = {scale}
    @numba.njit
    def helper(v):
        return SCALE * v * v
    """
    _write(tmp_path, "helpers", helper.format(scale=1.0))
    _write(
        tmp_path,
        "kern",
        """
        import numba
        import helpers
        @numba.njit
        def f(x):
            s = 0.0
            for i in range(x.shape[0]):
                s += helpers.helper(x[i])
            return s
        """,
    )
    _twice_then(tmp_path, tmp_path / "cache", [2.0, 4.0, 6.0])
    _write(tmp_path, "helpers", helper.format(scale=2.0))
    _rebuilt(_run(tmp_path, tmp_path / "cache"), [4.0, 8.0, 12.0])


def test_a_changed_source_rebuilds(tmp_path):
    kernel = """
    import numba
    @numba.njit
    def f(x):
        s = 0.0
        for i in range(x.shape[0]):
            s += x[i] ** {p}
        return s
    """
    _write(tmp_path, "kern", kernel.format(p=2))
    _twice_then(tmp_path, tmp_path / "cache", [2.0, 4.0, 6.0])
    _write(tmp_path, "kern", kernel.format(p=3))
    _rebuilt(_run(tmp_path, tmp_path / "cache"), [3.0, 12.0, 27.0])


def test_changed_compile_options_rebuild(tmp_path):
    kernel = """
    import numba
    @numba.njit(fastmath={fm})
    def f(x):
        s = 0.0
        for i in range(x.shape[0]):
            s += x[i] * x[i]
        return s
    """
    _write(tmp_path, "kern", kernel.format(fm=False))
    _twice_then(tmp_path, tmp_path / "cache", [2.0, 4.0, 6.0])
    _write(tmp_path, "kern", kernel.format(fm=True))
    _rebuilt(_run(tmp_path, tmp_path / "cache"), [2.0, 4.0, 6.0])


def test_what_cannot_be_identified_is_keyed_on_the_ir(tmp_path):
    # A plain Python function as a global (what register_jitable and @overload
    # attach code to) cannot be identified by its own code: the IR is compiled in
    # every process, and keys the cache (a disk hit, still right).
    _write(
        tmp_path,
        "kern",
        """
        import numba
        from numba.extending import register_jitable
        @register_jitable
        def helper(v):
            return v * v
        @numba.njit
        def f(x):
            s = 0.0
            for i in range(x.shape[0]):
                s += helper(x[i])
            return s
        """,
    )
    first = _run(tmp_path, tmp_path / "cache")
    _check(first, [2.0, 4.0, 6.0])
    second = _run(tmp_path, tmp_path / "cache")
    _check(second, [2.0, 4.0, 6.0])
    assert second["from_disk"] and second["ir_compiles"] == 1, second["log"]
    assert "keyed on its IR" in second["log"]


# --- the code identity itself (in this process) ------------------------------------


def test_code_identity_follows_values_not_objects():
    import numba

    from enzyme_py.frontends._numba_identity import Unsure, code_identity

    def make(c):
        @numba.njit
        def g(x):
            return c * x

        return g

    assert code_identity(make(1.0)) == code_identity(make(1.0))
    assert code_identity(make(1.0)) != code_identity(make(2.0))
    assert code_identity(make(1.0)) != code_identity(make(1))  # the type too

    class Opaque:
        pass

    thing = Opaque()

    @numba.njit
    def h(x):
        return thing, x

    with pytest.raises(Unsure):
        code_identity(h)


def test_a_lazy_module_is_compiled_only_when_needed(monkeypatch):
    import numba

    from enzyme_py.frontends import numba as frontend

    @numba.njit
    def f(x):
        return x * x * 3.0 + 1.5

    spec = frontend.specialize(f, (numba.float64,))
    assert not spec.wrapper.module.materialized
    assert spec.wrapper.module.digest  # keyed without it
    df = ez.autodiff(f, ez.Reverse, ez.Active, ez.Active)
    assert df(2.0, 1.0)[-1] == pytest.approx(12.0)


def test_ez_grad_prepares_the_ir_once(monkeypatch, tmp_path):
    # ez.grad asks which arrays the function writes, then builds the derivative: both
    # from one module, prepared for Enzyme once (each specialisation made its own).
    import numba

    from enzyme_py.frontends import numba as frontend

    monkeypatch.setenv("ENZYME_PY_CACHE_DIR", str(tmp_path))
    prepared = []
    original = frontend._simplified

    def counting(module):
        prepared.append(module)
        return original(module)

    monkeypatch.setattr(frontend, "_simplified", counting)

    @numba.njit
    def weighted(x, w):
        s = 0.0
        for i in range(x.shape[0]):
            s += w[i] * x[i] * x[i]
        return s

    x, w = np.array([1.0, -2.0, 0.5]), np.array([0.5, 1.5, 2.0])
    np.testing.assert_allclose(ez.grad(weighted)(x, w), 2.0 * w * x, rtol=1e-15)
    assert len(prepared) == 1


# --- memory: what a dropped derivative leaves behind --------------------------------


MEMORY_CHILD = """
import gc, weakref
import numba
import enzyme_py as ez
from enzyme_py import _build

_build.RECENT = 8
IR = (
    "define double @f(double %x) {\\n  %y = fmul double %x, %x\\n"
    "  %z = fmul double %y, C\\n  ret double %z\\n}\\n"
)

def rss_kb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])

refs = []
def closure(i):
    c = 1.0 + i
    @numba.njit
    def g(x):
        return c * x * x
    assert ez.autodiff(g, ez.Reverse, ez.Active, ez.Active)(2.0, 1.0)[-1] == 4.0 * c
    refs.append(weakref.ref(g))

def ir(i):
    f = ez.llvm_ir(IR.replace("C", repr(1.0 + i * 1e-6)), "f")
    ez.autodiff(f, ez.Reverse, ez.Active, ez.Active)(2.0, 1.0)

for i in range(20):
    closure(i)
gc.collect()
alive = sum(r() is not None for r in refs)
for i in range(300):
    ir(i)
gc.collect()
start = rss_kb()
for i in range(300, 2300):
    ir(i)
gc.collect()
print("RESULT", alive, len(_build._loaded), len(_build._recent), rss_kb() - start)
"""


def test_dropped_derivatives_release_their_dispatchers_and_artifacts():
    env = {**os.environ, "ENZYME_PY_DISK_CACHE": "0", "ENZYME_PY_ISOLATE": "0"}
    proc = subprocess.run(
        [sys.executable, "-c", MEMORY_CHILD],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout + proc.stderr
    alive, loaded, recent, growth_kb = (int(v) for v in lines[-1].split()[1:])
    assert alive == 0  # the Numba functions (and their IR) were freed with their derivatives
    assert loaded <= 8 and recent <= 8  # only the most recent artifacts are kept
    # 2,000 distinct IR derivatives made and dropped: measured 13 KB each with their JIT
    # code kept (20 KB before the artifacts were released, 0.9 KB with the code removed
    # too, _build.UNLOAD_CODE, on by default); a loose bound.
    assert growth_kb < 2000 * 25, growth_kb


JIT_RELEASE_CHILD = """
import gc
import numba
import enzyme_py as ez
from enzyme_py import _build, _state

_build.RECENT = 0
_build.UNLOAD_CODE = True  # the default (see _build); set, should it ever be off
IR = (
    "define double @f(double %x) {\\n  %y = fmul double %x, %x\\n"
    "  %z = fmul double %y, C\\n  ret double %z\\n}\\n"
)

def make(c):
    f = ez.llvm_ir(IR.replace("C", repr(c)), "f")
    return ez.autodiff(f, ez.Reverse, ez.Active, ez.Active)

df = make(3.0)
assert df(2.0, 1.0)[-1] == 12.0
before = _state.native.loaded_objects()
del df
gc.collect()
other = make(5.0)  # the next request removes the dropped one's code
assert _state.native.loaded_objects() == before, (_state.native.loaded_objects(), before)
again = make(3.0)  # loaded again (from the disk cache), under the same entry name
assert again(2.0, 1.0)[-1] == 12.0 and other(2.0, 1.0)[-1] == 20.0

# Code compiled into Numba functions stays: df.njit() pins it.
pinned = make(7.0)
called = pinned.njit()
@numba.njit
def use(x):
    return called(x, 1.0)
expected = use(2.0)
del pinned
gc.collect()
make(9.0)
assert use(2.0) == expected
print("RESULT ok")
"""


def test_dropped_code_leaves_the_jit_and_comes_back(tmp_path):
    env = {**os.environ, "ENZYME_PY_CACHE_DIR": str(tmp_path), "ENZYME_PY_ISOLATE": "0"}
    proc = subprocess.run(
        [sys.executable, "-c", JIT_RELEASE_CHILD],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0 and "RESULT ok" in proc.stdout, proc.stdout + proc.stderr


def test_a_function_argument_is_keyed_by_its_code_not_its_address():
    # The text of a function argument's Numba type names the dispatcher's address only;
    # another process may have another function there, so the key holds its code.
    import numba
    from numba.core import types

    from enzyme_py.frontends import numba as frontend

    def make(body):
        namespace: dict = {}
        exec(f"def objective(x):\n    return {body}\n", namespace)
        return numba.njit(namespace["objective"])

    @numba.njit
    def caller(f, x):
        return f(x)

    def key(objective):
        signature = (types.Dispatcher(objective), types.float64)
        return frontend._code_key(caller, signature, types.float64, False, True)

    same, twin, other = make("x * x"), make("x * x"), make("x * x * x")
    assert key(same) is not None
    assert key(same) == key(twin)  # two dispatchers of the same code, two addresses
    assert key(same) != key(other)
