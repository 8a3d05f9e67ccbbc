"""A first derivative takes the IR of Numba's own compile (kept by _numba_capture)
instead of compiling the function again: the same IR as that second compile (names
aside), right gradients, a second compile wherever nothing was kept, and a bounded
amount kept."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import numba
import numpy as np
import pytest

import enzyme_py as ez
from benchmarks import kernels
from enzyme_py.frontends import _numba_capture as capture
from enzyme_py.frontends import _numba_compile as compile_

pytestmark = pytest.mark.needs_enzyme


@pytest.fixture
def second_compiles(monkeypatch):
    """How many times the function was compiled again for differentiation."""
    count = [0]
    for name in ("ad_compile_ir", "_ad_compile_full"):
        original = getattr(compile_, name)

        def counting(*args, original=original, **kwargs):
            count[0] += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(compile_, name, counting)
    return count


def _fresh_kernels(scale):
    """New dispatchers (compiled in this test, after enzyme_py's import); ``scale``
    (a closure value, part of the derivative caches' keys) makes each test's code its
    own."""

    @numba.njit
    def square(v):
        return v * v

    @numba.njit
    def energy(x, k):
        s = 0.0
        for i in range(x.shape[0] - 1):
            s += k * square(x[i + 1] - x[i]) + scale * np.sin(x[i])
        return s

    return energy


def _energy_gradient(x, k, scale):
    g = scale * np.cos(x)
    g[-1] = 0.0
    d = x[1:] - x[:-1]
    g[1:] += 2 * k * d
    g[:-1] -= 2 * k * d
    return g


def test_the_first_derivative_takes_the_kept_ir(second_compiles):
    energy = _fresh_kernels(0.5)
    x = np.linspace(-1.0, 2.0, 9)
    energy(x, 1.5)  # the primal's own compile, whose module is kept
    g = ez.grad(energy)(x, 1.5)
    assert second_compiles[0] == 0
    np.testing.assert_allclose(g, _energy_gradient(x, 1.5, 0.5), rtol=1e-13)
    dk = ez.grad(energy, 1)(x, 1.5)
    assert dk == pytest.approx(float(np.sum((x[1:] - x[:-1]) ** 2)), rel=1e-13)
    assert second_compiles[0] == 0


def test_without_a_kept_module_the_function_is_compiled_again(second_compiles, monkeypatch):
    monkeypatch.setattr(compile_, "module_defining", lambda library, name: None)
    energy = _fresh_kernels(0.25)
    x = np.linspace(-1.0, 2.0, 9)
    energy(x, 1.5)
    want = _energy_gradient(x, 1.5, 0.25)
    np.testing.assert_allclose(ez.grad(energy)(x, 1.5), want, rtol=1e-13)
    assert second_compiles[0] == 1


def _bodies(ir: str, mangled: str) -> dict[str, list[str]]:
    """The functions the IR defines, each its lines, with what differs between two
    compiles of one function renamed: the function's name, version tags, addresses in
    names, exception constants' numbers and suffixes, attribute group numbers. (Globals are left
    out: the first compile may leave an unused constant behind.)"""
    text = ir.replace(mangled, "FN")
    # (A constant linked in twice is renamed: .const.picklebuf.12.15.)
    text = re.sub(r"(pickledata|picklebuf)\.\d+(\.\d+)*", r"\1.N", text)
    text = re.sub(r"B\d+v\d+B\d+c8tJTIeFIjxB2IKSgI4CrvQC\w+?_3dE", "TAG", text)
    text = re.sub(r"B\dv\d+", "V", text)
    text = re.sub(r"0x[0-9a-f]+", "ADDR", text)
    text = re.sub(r" #\d+", "", text)
    bodies: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("define "):
            current = bodies.setdefault(line, [])
        elif line == "}":
            current = None
        elif current is not None:
            current.append(line)
    return bodies


def test_the_kept_ir_is_that_of_a_second_compile():
    energy = _fresh_kernels(2.0)

    @numba.njit
    def with_temporaries(x):
        y = np.exp(x) * 2.0
        return np.sum(y[1:] * x[:-1])

    for f, args in ((energy, (np.ones(5), 2.0)), (with_temporaries, (np.ones(4),))):
        f(*args)
        signature = f.signatures[0]
        kept = compile_._from_primal(f, signature)
        assert kept is not None
        clone = numba.njit(**compile_.serial_options(f))(f.py_func)
        again = compile_.ad_compile_ir(clone, signature, kept_callees=True)
        made = _bodies(kept.ir, kept.fndesc.mangled_name)
        assert made and made == _bodies(again.ir, again.fndesc.mangled_name)


def test_parallel_functions_take_their_marked_compile_or_compile_again(second_compiles):
    # A light prange body: its own compile's module, the loop a plain call on one
    # thread (frontends/_numba_parfor_capture.py, tests/test_parfor_capture.py).
    @numba.njit(parallel=True)
    def total(x):
        s = 0.0
        for i in numba.prange(x.shape[0]):
            s += x[i] * x[i]
        return s

    x = np.arange(1.0, 6.0)
    total(x)
    assert compile_._from_primal(total, total.signatures[0]) is not None
    np.testing.assert_allclose(ez.grad(total)(x), 2 * x, rtol=1e-14)
    assert second_compiles[0] == 0

    # A prange body with a loop of its own, on one thread: its serial twin, compiled.
    @numba.njit(parallel=True)
    def rows(a):
        s = 0.0
        for i in numba.prange(a.shape[0]):
            for j in range(a.shape[1]):
                s += a[i, j] * a[i, j]
        return s

    a = np.arange(1.0, 7.0).reshape(2, 3)
    rows(a)
    assert compile_._from_primal(rows, rows.signatures[0]) is None
    da = np.zeros_like(a)
    ez.autodiff(rows, ez.Reverse, ez.Duplicated, ez.ActiveOnly, threads=1)(a, da, 1.0)
    np.testing.assert_allclose(da, 2 * a, rtol=1e-14)
    assert second_compiles[0] == 1


def test_what_is_kept_is_bounded(monkeypatch):
    monkeypatch.setattr(capture, "KEEP_BYTES", 4096)
    made = []
    for k in range(8):

        @numba.njit
        def scaled(x, k=float(k)):
            return np.sum(k * x * x)

        scaled(np.ones(3))
        made.append(scaled)
    assert capture._kept_bytes <= 4096
    # The oldest were dropped; their derivatives compile again, and are right.
    first = made[0]
    oldest = first.overloads[first.signatures[0]]
    assert capture.module_defining(oldest.library, oldest.fndesc.mangled_name) is None
    np.testing.assert_allclose(ez.grad(first)(np.arange(3.0)), 0.0 * np.arange(3.0))
    np.testing.assert_allclose(ez.grad(made[-1])(np.arange(3.0)), 14.0 * np.arange(3.0))


@pytest.mark.parametrize("numba_first", [True, False])
def test_kept_whichever_is_imported_first(numba_first):
    imports = (
        "import numba\nimport enzyme_py as ez"
        if numba_first
        else ("import enzyme_py as ez\nimport numba")
    )
    code = textwrap.dedent(
        """
        {imports}
        import numpy as np
        from numba.core import codegen
        from enzyme_py.frontends import _numba_compile as c

        @numba.njit
        def f(x):
            return np.sum(x ** 3)

        x = np.array([1.0, 2.0])
        f(x)
        assert c._from_primal(f, f.signatures[0]) is not None
        assert codegen.CPUCodeLibrary._optimize_functions.__name__ == "optimize_and_keep"
        print(ez.grad(f)(x).tolist())
        """
    ).format(imports=imports)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[3.0, 12.0]"


def _chain(scale):
    """f -> middle -> inner, new dispatchers; ``scale`` makes the code this test's own."""

    # The GMM kernel's logsumexp (a loop with a branch), a new dispatcher.
    inner = numba.njit(kernels._logsumexp.py_func)

    @numba.njit
    def middle(v, w):
        for i in range(v.shape[0]):
            w[i] = scale * v[i] * v[i]
        return inner(w)

    @numba.njit
    def f(x):
        w = np.empty(x.shape[0])
        t = 0.0
        for r in range(3):
            t += middle(x + r, w)
        return t

    return f, middle, inner


def _chain_gradient(x, scale):
    g = np.zeros_like(x)
    for r in range(3):
        v = x + r
        w = scale * v * v
        p = np.exp(w - w.max())
        g += p / p.sum() * 2.0 * scale * v
    return g


def test_callees_are_linked_as_kept_before_their_optimisation(second_compiles, monkeypatch):
    """The serial derivative links its callees as the modules Numba made before its
    module optimisation (kept_modules), each callee once; gradients exact."""
    asked: list[str] = []
    original = compile_.kept_modules

    def counting(library):
        asked.append(library.name)
        return original(library)

    monkeypatch.setattr(compile_, "kept_modules", counting)
    f, middle, inner = _chain(0.75)
    x = np.linspace(-1.0, 1.0, 11)
    f(x)
    np.testing.assert_allclose(ez.grad(f)(x), _chain_gradient(x, 0.75), rtol=1e-12)
    assert second_compiles[0] == 0
    for callee in (middle, inner):
        assert asked.count(callee.overloads[callee.signatures[0]].library.name) == 1


def test_a_callee_without_kept_modules_is_linked_optimised(second_compiles, monkeypatch):
    """Where a callee's modules were not kept (compiled before enzyme_py's import, or
    dropped), its optimised module is linked under callers linked as kept."""
    f, _, inner = _chain(1.25)
    x = np.linspace(-1.0, 1.0, 11)
    f(x)
    inner_library = inner.overloads[inner.signatures[0]].library
    original = compile_.kept_modules
    monkeypatch.setattr(
        compile_,
        "kept_modules",
        lambda library: [] if library is inner_library else original(library),
    )
    np.testing.assert_allclose(ez.grad(f)(x), _chain_gradient(x, 1.25), rtol=1e-12)
    assert second_compiles[0] == 0


def test_a_kept_module_is_found_by_the_function_it_defines():
    name = "_ZN8__main__1fB2v1B38c8tJTIeFIjxB2IKSgI4CrvQClQZ6FczSBAA_3dEd"
    defined = f"; ModuleID = 'm'\ndefine i32 @{name}(double* %r, double %x) {{\n  ret i32 0\n}}\n"
    assert capture._defines(defined, name)
    assert capture._defines(defined.split("\n", 1)[1], name)  # on the first line
    quoted = f'define linkonce_odr i32 @"{name}"(double* %r) {{\n  ret i32 0\n}}\n'
    assert capture._defines(quoted, name)
    called = f"define i32 @g() {{\n  %r = call i32 @{name}(double* null, double 1.0)\n}}\n"
    assert not capture._defines(called, name)  # only called there
    declared = f"declare i32 @{name}(double*, double)\n"
    assert not capture._defines(declared, name)
    assert not capture._defines(defined, name[:-1])  # a prefix of the name is not it
