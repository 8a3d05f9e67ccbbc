"""The CPU Numba's passes plan for on hosts with AVX-512 (frontends/_numba_cpu.py), and
the code digest in the derivative caches' keys."""

import os
import subprocess
import sys
import textwrap

import pytest

import enzyme_py as ez
from enzyme_py.frontends import _numba_cpu

pytestmark = pytest.mark.skipif(not ez.has_autodiff(), reason="needs the AD build")

# What LLVM 15 reports on an AMD Zen 5 (EPYC): "generic", with AVX-512 (abridged).
ZEN5 = (
    "+64bit,+avx,+avx2,+bmi2,+fma,+movbe,+popcnt,+sse4.2,+ssse3,"
    "+avx512f,+avx512bw,+avx512cd,+avx512dq,+avx512vl,-avx512fp16"
)


def test_an_unknown_avx512_host_is_planned_for_as_its_level_without_avx512():
    cpu, features = _numba_cpu.planning_target("x86_64-pc-linux-gnu", "generic", ZEN5)
    assert cpu == "x86-64-v3"
    on = {f[1:] for f in features.split(",") if f.startswith("+")}
    assert not any(f.startswith("avx512") for f in on)
    assert {"avx2", "fma", "bmi2"} <= on


@pytest.mark.parametrize("cpu", ["rocketlake", "skylake-avx512"])
def test_a_named_avx512_host_keeps_its_name_without_avx512(cpu):
    # An Intel Rocket Lake: LLVM 15 names it, and Numba's passes planning with its
    # AVX-512 made np.outer and the linear-algebra substitutes' loops fail Enzyme's
    # type analysis (tests/test_corpus.py, tests/test_numba_linalg.py there).
    named, features = _numba_cpu.planning_target("x86_64-pc-linux-gnu", cpu, ZEN5)
    assert named == cpu
    on = {f[1:] for f in features.split(",") if f.startswith("+")}
    assert not any(f.startswith("avx512") for f in on)
    assert {"avx2", "fma", "bmi2"} <= on


@pytest.mark.parametrize(
    "triple, cpu, features",
    [
        ("x86_64-pc-linux-gnu", "znver3", "+64bit,+avx,+avx2,+fma,-avx512f"),  # no AVX-512
        ("aarch64-unknown-linux-gnu", "generic", "+neon"),
        ("x86_64-pc-linux-gnu", "generic", "+64bit,+sse2"),  # no level to name
    ],
)
def test_other_hosts_keep_numbas_own_target(triple, cpu, features):
    assert _numba_cpu.planning_target(triple, cpu, features) is None


def test_levels():
    assert _numba_cpu.cpu_level(ZEN5) == "x86-64-v4"
    assert _numba_cpu.cpu_level(_numba_cpu.without_avx512(ZEN5)) == "x86-64-v3"
    assert _numba_cpu.cpu_level("+sse4.2,+popcnt,+ssse3") == "x86-64-v2"
    assert _numba_cpu.cpu_level("+sse2") is None


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k != "NUMBA_CPU_NAME"}
    full.update(env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, env=full, timeout=600,
    )  # fmt: skip


def test_numbas_passes_plan_for_the_named_cpu_and_slice_assignment_differentiates():
    # As on a Zen 5, on any host: the planning machine replaced, then a function that
    # LLVM-15-"generic" planning made Enzyme refuse differentiates, checked.
    done = _run(
        f"""
        import numpy as np, numba
        import enzyme_py as ez
        from enzyme_py.frontends import _numba_cpu
        from numba.core.registry import cpu_target
        _numba_cpu._planned.clear()
        codegen = cpu_target.target_context.codegen()
        before = codegen._tm
        got = _numba_cpu.plan_for_named_cpu("x86_64-pc-linux-gnu", "generic", {ZEN5!r})
        assert got is not None and got[0] == "x86-64-v3", got
        assert codegen._tm is not before

        @numba.njit
        def shifted(x):
            t = np.zeros(x.shape[0] + 1)
            t[1:] = x
            s = 0.0
            for i in range(t.shape[0]):
                s += (i + 1.0) * t[i] * t[i]
            return s

        x = np.arange(1.0, 5.0)
        want = 2.0 * (np.arange(4) + 2.0) * x
        assert np.allclose(ez.grad(shifted)(x), want, rtol=1e-12), ez.grad(shifted)(x)
        print("ok")
        """
    )
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-3000:]


def test_a_cpu_the_user_names_for_numba_is_left_alone():
    done = _run(
        f"""
        import enzyme_py
        from enzyme_py.frontends import _numba_cpu
        from numba.core.registry import cpu_target
        _numba_cpu._planned.clear()
        before = cpu_target.target_context.codegen()._tm
        assert _numba_cpu.plan_for_named_cpu("x86_64-pc-linux-gnu", "generic", {ZEN5!r}) is None
        assert cpu_target.target_context.codegen()._tm is before
        print("ok")
        """,
        NUMBA_CPU_NAME="znver3",
    )
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-3000:]


def test_the_cache_keys_hold_a_digest_of_enzyme_pys_own_code(tmp_path, monkeypatch):
    from enzyme_py import _build

    parts = _build.environment_parts()
    digest = _build._code_digest()
    assert f"code {digest}" in parts
    assert len(digest) == 32 and digest == _build._code_digest()


def test_the_code_digest_changes_with_any_source_or_native_module_and_only_with_them(
    tmp_path,
):
    from enzyme_py import _build

    (tmp_path / "sub").mkdir()
    (tmp_path / "__pycache__").mkdir()
    source, native = tmp_path / "sub" / "a.py", tmp_path / "_native.so"
    source.write_text("x = 1\n")
    native.write_bytes(b"\x7fELF")
    first = _build._code_digest(str(tmp_path))
    (tmp_path / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"stale")
    (tmp_path / "notes.txt").write_text("not code")
    assert _build._code_digest(str(tmp_path)) == first
    # The same size, another modification time: what an install or a copy writes.
    source.write_text("x = 2\n")
    stat = source.stat()
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    second = _build._code_digest(str(tmp_path))
    assert second != first
    native.write_bytes(b"\x7fELF\x02")
    assert _build._code_digest(str(tmp_path)) not in (first, second)
