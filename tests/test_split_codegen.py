"""A large derivative's functions compiled on several threads (src/split_codegen.h):
its objects bundled, loaded and unloaded together, its gradient right; small modules
and ENZYME_PY_CODEGEN_THREADS=1 give one object; a damaged bundle is an error."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import enzyme_py as ez
from enzyme_py import _state

from conftest import run_until_done
from reference import fd_gradient

pytestmark = pytest.mark.needs_enzyme

BUNDLE_MAGIC = b"\x7fEZPYOBJ"
ELF_MAGIC = b"\x7fELF"
LOOPS = 30  # per stage: each stage's derivative ~1900 lines of IR, over the threshold
N = 37


def _stage(name: str, seed: int) -> tuple[str, np.ndarray, np.ndarray]:
    """y[i] += c_k * sin(d_k * x[i]) for k < LOOPS, one loop each (kept apart:
    noinline): Enzyme makes a forward and a reverse function of each stage."""
    rng = np.random.default_rng(seed)
    c, d = rng.uniform(0.5, 1.5, LOOPS), rng.uniform(0.5, 1.5, LOOPS)
    loops = "\n".join(
        f"    for (long i = 0; i < n; ++i) y[i] += {float(c[k])!r} * sin({float(d[k])!r} * x[i]);"
        for k in range(LOOPS)
    )
    source = (
        f"__attribute__((noinline)) static void {name}(const double *x, double *y, long n) {{\n"
        f"{loops}\n}}\n"
    )
    return source, c, d


STAGE_A, C_A, D_A = _stage("stage_a", 1)
STAGE_B, C_B, D_B = _stage("stage_b", 2)
SOURCE = (
    "#include <math.h>\n"
    + STAGE_A
    + STAGE_B
    + """
double f(const double *x, double *y, long n) {
    stage_a(x, y, n);
    stage_b(x, y, n);
    double s = 0.0;
    for (long i = 0; i < n; ++i) s += y[i];
    return s;
}
"""
)


def analytic_gradient(x: np.ndarray) -> np.ndarray:
    """d/dx_i of sum_i y_i, y from zero: sum_k c_k d_k cos(d_k x_i)."""
    c, d = np.concatenate([C_A, C_B]), np.concatenate([D_A, D_B])
    return (c[:, None] * d[:, None] * np.cos(d[:, None] * x[None, :])).sum(axis=0)


def gradient(df, x: np.ndarray) -> np.ndarray:
    dx, y, dy = np.zeros_like(x), np.zeros_like(x), np.zeros_like(x)
    df(x, dx, y, dy, x.size, 1.0)
    return dx


@pytest.fixture(scope="module")
def stages():
    f = ez.c(SOURCE).f
    D = ez.Duplicated
    return ez.autodiff(f, ez.Reverse, D, D, ez.Const, ez.Active)


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: nothing to split onto")
def test_a_large_derivative_is_compiled_in_parts_and_right(stages):
    x = np.linspace(-2.0, 2.0, N)
    np.testing.assert_allclose(gradient(stages, x), analytic_gradient(x), rtol=1e-12)
    object_code = stages._compiled.artifact.object
    assert object_code.startswith(BUNDLE_MAGIC)
    assert object_code.count(ELF_MAGIC) >= 2


def gmm_prange_derivative_checked():
    """GMM prange's reverse derivative (small n) and the arguments it was called with,
    its gradient checked against central differences (also test_split_build's)."""
    from benchmarks import kernels

    alphas, means, icf, x, gamma, m = kernels.gmm_inputs(3, 4, 30, seed=4)
    f = kernels.gmm_objective_prange
    D, C = ez.Duplicated, ez.Const
    df = ez.autodiff(f, ez.Reverse, D, D, D, C, C, C, ez.ActiveOnly)
    shadows = [np.zeros_like(a) for a in (alphas, means, icf)]
    args = (alphas, shadows[0], means, shadows[1], icf, shadows[2], x, gamma, m, 1.0)
    df(*args)
    wants = [
        fd_gradient(lambda v: f(v, means, icf, x, gamma, m), alphas),
        fd_gradient(lambda v: f(alphas, v, icf, x, gamma, m), means),
        fd_gradient(lambda v: f(alphas, means, v, x, gamma, m), icf),
    ]
    for got, want in zip(shadows, wants, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)
    return df, args


def test_gmm_prange_is_compiled_in_parts_and_its_gradient_right():
    """What the split is for: a prange function's entry and its reverse chunk (2441 and
    3218 lines of IR), built on two threads; the gradient against central differences."""
    pytest.importorskip("numba")
    df, args = gmm_prange_derivative_checked()
    if (os.cpu_count() or 1) >= 2:
        object_code = df.for_arguments(args)._compiled.artifact.object
        assert object_code.startswith(BUNDLE_MAGIC)


SQUARE = """
define double @square(double %x) {
  %y = fmul double %x, %x
  ret double %y
}
"""


def test_a_small_derivative_stays_one_object():
    df = ez.autodiff(ez.llvm_ir(SQUARE, "square"), ez.Reverse, ez.Active, ez.Active)
    assert df(3.0, 1.0)[-1] == 6.0
    assert df._compiled.artifact.object.startswith(ELF_MAGIC)


def _bundle(stages) -> bytes:
    object_code = stages._compiled.artifact.object
    if object_code.startswith(BUNDLE_MAGIC):
        return object_code
    # One core: a bundle of the one object.
    return (
        BUNDLE_MAGIC
        + (1).to_bytes(8, "little")
        + len(object_code).to_bytes(8, "little")
        + object_code
    )


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[:-10],  # cut short
        lambda b: b + b"\0" * 8,  # bytes after the last object
        lambda b: BUNDLE_MAGIC + b"\xff" * 8,  # a count, no objects
        lambda b: BUNDLE_MAGIC + (0).to_bytes(8, "little"),  # no objects
    ],
)
def test_a_damaged_bundle_is_an_error_not_a_crash(stages, damage):
    before = _state.native.loaded_objects()
    with pytest.raises(RuntimeError, match="damaged object bundle"):
        _state.native.load_object(damage(_bundle(stages)), "__enzyme_py_test_damaged")
    assert _state.native.loaded_objects() == before


_SUBPROCESS_PRELUDE = """
import gc, sys
import numpy as np
sys.path.insert(0, {tests!r})
import enzyme_py as ez
from enzyme_py import _build, _state
import test_split_codegen as t

_build.RECENT = 0  # a derivative nobody holds is dropped, its code unloaded
x = np.linspace(-2.0, 2.0, t.N)
f = ez.c(t.SOURCE).f

def make():
    D = ez.Duplicated
    return ez.autodiff(f, ez.Reverse, D, D, ez.Const, ez.Active)
"""


def _in_new_process(body: str, cache: Path, **env: str) -> None:
    """Run ``body`` after the prelude in a new interpreter with ``env`` and a disk cache
    of its own."""
    prelude = _SUBPROCESS_PRELUDE.format(tests=os.path.dirname(__file__))
    run_until_done(prelude, body, cache, **env)


def test_a_bundle_unloads_whole_and_loads_again(tmp_path):
    """Its objects share one resource tracker: unloaded together, the internal names
    they export are free again, and the bundle loads again from the disk cache."""
    body = """
        base = _state.native.loaded_objects()
        df = make()
        np.testing.assert_allclose(t.gradient(df, x), t.analytic_gradient(x), rtol=1e-12)
        assert df._compiled.artifact.object.startswith(t.BUNDLE_MAGIC)
        assert _state.native.loaded_objects() == base + 1  # one tracker, all objects
        del df
        gc.collect()
        other = ez.autodiff(ez.llvm_ir(t.SQUARE, "square"), ez.Reverse, ez.Active, ez.Active)
        assert _state.native.loaded_objects() == base + 1  # the bundle's went, square's came
        again = make()  # from the disk cache, under the same names
        np.testing.assert_allclose(t.gradient(again, x), t.analytic_gradient(x), rtol=1e-12)
        assert other(3.0, 1.0)[-1] == 6.0
        """
    _in_new_process(body, tmp_path, ENZYME_PY_CODEGEN_THREADS="2")


def test_one_codegen_thread_makes_one_object(tmp_path):
    """ENZYME_PY_CODEGEN_THREADS=1, read once per process: a new one here (with a disk
    cache of its own: the derivative is built, not loaded)."""
    body = """
        df = make()
        assert df._compiled.artifact.object.startswith(t.ELF_MAGIC)
        np.testing.assert_allclose(t.gradient(df, x), t.analytic_gradient(x), rtol=1e-12)
        """
    _in_new_process(body, tmp_path, ENZYME_PY_CODEGEN_THREADS="1")


def test_a_split_build_in_this_process_is_right(tmp_path):
    """ENZYME_PY_ISOLATE=0: the parts compiled on threads of the caller's process."""
    body = """
        df = make()
        assert df._compiled.artifact.object.startswith(t.BUNDLE_MAGIC)
        np.testing.assert_allclose(t.gradient(df, x), t.analytic_gradient(x), rtol=1e-12)
        """
    _in_new_process(body, tmp_path, ENZYME_PY_CODEGEN_THREADS="2", ENZYME_PY_ISOLATE="0")
