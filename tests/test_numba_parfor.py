"""Numba's prange loops as typed launches with Enzyme rules (``frontends/_numba_parfor``),
what lets reverse derivatives run them on several threads (docs/design.md §8): the
compile, the generated module, the bodies' reverse derivatives from Enzyme's marker
pass, and the loops it refuses. The derivatives themselves: tests/test_prange.py."""

import re

import numba
import numpy as np
import pytest

import enzyme_py as ez
from benchmarks.kernels import heat_loss_prange, rosenbrock_prange

pytestmark = pytest.mark.needs_enzyme


@numba.njit(parallel=True)
def scaled(x, out, c):
    for i in numba.prange(x.shape[0]):
        out[i] = c * x[i]


def _compiled(f, *args):
    from enzyme_py.frontends import _numba_parfor

    f(*args)
    signature = tuple(numba.typeof(a) for a in args)
    return _numba_parfor.parfor_compile(f, signature)


def test_a_reduction_loop_becomes_a_typed_launch_with_rules():
    from enzyme_py import _state
    from enzyme_py.frontends import _numba_parfor
    from enzyme_py.frontends.ir import parse_module

    compiled, launches = _compiled(rosenbrock_prange, np.ones(10))
    assert [launch.name for launch in launches] == ["__enzyme_py_parfor_0"]
    (launch,) = launches
    # x (read) and the per-thread partial sums (the reduction), as float64 arrays
    assert [(g.array, g.reduction) for g in launch.groups] == [
        ("float64", False),
        ("float64", True),
    ]
    assert "call void @__enzyme_py_parfor_0(i64 0, i64 %" in compiled.ir
    assert "numba_parallel_for" not in compiled.ir

    text, names = _numba_parfor.threaded_ir(compiled.ir, launches, threads=4)
    assert names == ["__enzyme_py_parfor_0"]
    assert "@get_thread_id()" not in text and "@get_num_threads()" not in text
    lowered = _state.native.run_enzyme_pass(text, "enzyme")
    assert "@__enzyme_autodiff" not in re.sub(r"declare[^\n]*", "", lowered)
    # The reverse of the body returns its status (enzyme_primal_return).
    assert re.search(r"define internal \{ i32 \} @diffe_ZN\S*numba_parfor_gufunc", lowered)
    module = _numba_parfor.with_launch_rules(parse_module(lowered), names)
    ir = module.native.ir()
    assert re.search(r"define void @__enzyme_py_parfor_0\(.*!enzyme_augment", ir)
    assert "!enzyme_gradient" in ir


@numba.njit(parallel=True)
def scattered(x, out, where):
    for i in numba.prange(x.shape[0]):
        out[where[i]] = 2.0 * x[i]  # where an index writes is data: not its own entry


@numba.njit(parallel=True)
def spread(x, out):
    for i in numba.prange(x.shape[0] - 1):
        out[i + 1] = x[i] - out[i]  # reads what the index i - 1 writes


@numba.njit(parallel=True)
def row_sums(a, out):
    for i in numba.prange(a.shape[0]):
        s = 0.0
        for j in range(a.shape[1]):  # a loop of its own: every index may be a chunk
            s += a[i, j]
        out[i] = s


_RUN = re.compile(r"call void @__enzyme_py_parfor_run\(.*, i64 (\S+), i64 (\d+), i64 (\d+)\)")


def test_chunks_of_a_loop_are_what_its_indices_touch():
    """Chunks run together where every float array written is written at the entries
    its index owns (index_reach: 0); a loop writing elsewhere runs as one chunk. Arrays
    read around the index (a stencil) make two chunks per thread, for the reverse
    pass's two waves."""
    from enzyme_py.frontends import _numba_parfor

    def runs(f, *args):
        compiled, launches = _compiled(f, *args)
        text, _ = _numba_parfor.threaded_ir(compiled.ir, launches, threads=4)
        return _RUN.findall(text), text

    _, launches = _compiled(scaled, np.ones(4), np.zeros(4), 3)
    (launch,) = launches
    assert sorted(str(g.array) for g in launch.groups) == ["None", "float64", "float64"]
    assert not any(g.reduction for g in launch.groups)
    # out[i]: its own entry; a light body (no loop): chunks of 16384 indices at least
    assert runs(scaled, np.ones(4), np.zeros(4), 3)[0] == [("4", "4", "16384")]
    assert runs(scattered, np.ones(4), np.zeros(4), np.arange(4))[0] == [("1", "4", "16384")]
    assert runs(spread, np.ones(4), np.zeros(4))[0] == [("1", "4", "16384")]
    assert runs(row_sums, np.ones((4, 3)), np.zeros(4))[0] == [("4", "4", "1")]
    ((count, workers, grain),), text = runs(rosenbrock_prange, np.ones(10))
    # x[i] and x[i + 1]: 8 chunks on 4 threads, at most the reduction array's length
    assert count.startswith("%tc") and workers == "4" and grain == "16384"
    assert re.search(r"%tc0 = select i1 %lt0, i64 %len0.i, i64 8", text)
    # its reverse pass: x's shadow (slot 6, float64 kind 0) with reach 1 at any first
    gradient = text[text.index("define void @__enzyme_py_parfor_0.gradient(") :]
    assert "store i64 6, i64* %pe0.0" in gradient
    assert "%kind0 = select i1 %same0, i64 2, i64 0" in gradient
    assert "%reach0.4 = select i1 %ge0.4, i64 1, i64 %reach0.2" in gradient


def test_reaches_at_each_least_first_index(monkeypatch):
    """What each float array's entries an index reaches (index_reach), per least first
    index of MINIMUMS (0, 1, 2, 4): the stencil's a[i - 1] wraps around unless the
    range starts at 1 or later, so its reach is unknown from 0 and 2 from every other
    minimum, those between the least and the largest worked out too; a row read by
    index i (row_sums) is unknown from every minimum, the largest's answer taken for
    those between (unknown: the safe one)."""
    from enzyme_py.frontends import _numba_parfor, _numba_parfor_ir

    real = _numba_parfor_ir.body_indices

    def reaches(f, *args):
        found = {}

        def recorded(*given):
            found.update(real(*given))
            return found

        monkeypatch.setattr(_numba_parfor_ir, "body_indices", recorded)
        compiled, launches = _compiled(f, *args)
        _numba_parfor.threaded_ir(compiled.ir, launches, threads=2)
        return {name: (indices.reach, indices.light) for name, indices in found.items()}

    copy, stencil, loss = reaches(heat_loss_prange, np.ones(8), np.ones(8), 2).values()
    # slot 6: the array read (u0, a, a), slot 13: the one written (a, b) or target
    assert stencil == ({6: (None, 2, 2, 2), 13: (0, 0, 0, 0)}, True)
    assert copy == loss == ({6: (0, 0, 0, 0), 13: (0, 0, 0, 0)}, True)
    (rows,) = reaches(row_sums, np.ones((4, 3)), np.zeros(4)).values()
    assert rows == ({6: (None, None, None, None), 15: (0, 0, 0, 0)}, False)
    (neighbours,) = reaches(rosenbrock_prange, np.ones(10)).values()
    assert neighbours == ({6: (1, 1, 1, 1)}, True)


def test_snapshots_only_of_what_the_reverse_reads():
    """A linear stencil's reverse derivative reads no value of its arrays: no snapshot
    of them at each step of the time loop; the loss's reverse reads a and target."""
    from enzyme_py import _state
    from enzyme_py.frontends import _numba_parfor
    from enzyme_py.frontends.ir import SourceModule, parse_module

    compiled, launches = _compiled(heat_loss_prange, np.ones(8), np.ones(8), 2)
    text, names = _numba_parfor.threaded_ir(compiled.ir, launches, threads=2)
    # The marker pass on the module (bitcode back) and on its text: the same answer.
    lowered = SourceModule(parse_module(text).native.after_enzyme_pass("enzyme"), None)
    needless = _numba_parfor._unread_by_reverse(lowered, names)
    from_text = parse_module(_state.native.run_enzyme_pass(text, "enzyme"))
    assert _numba_parfor._unread_by_reverse(from_text, names) == needless
    # the launches: a[i] = u0[i]; b[i] from a[i - 1 : i + 2]; the loss from a and target
    copy, stencil, loss = ([f"@{name}.copy.{j}" for j in (6, 13)] for name in names)
    assert set(stencil) <= needless and set(copy) <= needless
    assert not set(loss) & needless


def test_the_wrappers_read_only_arrays_asked_while_enzyme_runs(monkeypatch):
    """threaded_module asks which of the wrapper's arrays it only reads on a thread,
    of the module before Enzyme's marker pass, while the pass runs: the answer the
    module after the pass gives (u0 and target are never written), and the gradient
    finite differences give."""
    from enzyme_py.frontends import _numba_parfor

    asked = []
    settle = _numba_parfor._settle_snapshots

    def recorded(module, names, wrapper_reads, unread):
        wrapper, read_only = wrapper_reads
        asked.append((read_only, module.native.read_only_params(wrapper)))
        return settle(module, names, wrapper_reads, unread)

    monkeypatch.setattr(_numba_parfor, "_settle_snapshots", recorded)
    u0 = np.linspace(0.0, 1.0, 40) ** 2
    target = np.cos(np.linspace(0.0, 3.0, 40))
    du0 = np.zeros_like(u0)
    df = ez.autodiff(
        heat_loss_prange, ez.Reverse, ez.Duplicated, ez.Const, ez.Const, ez.Active, threads=2
    )
    df(u0, du0, target, 3, 1.0)
    ((meanwhile, after),) = asked
    assert meanwhile == after and any(meanwhile)
    step = 1e-6
    for i in (0, 7, 39):
        up, down = u0.copy(), u0.copy()
        up[i] += step
        down[i] -= step
        fd = (heat_loss_prange(up, target, 3) - heat_loss_prange(down, target, 3)) / (2 * step)
        np.testing.assert_allclose(du0[i], fd, rtol=1e-6)


@pytest.mark.parametrize(
    "f,args,reason",
    [
        (scaled, (np.ones(4), np.zeros(4), 2.0), "takes a float64 that is not an array"),
        (rosenbrock_prange, (np.ones(8)[::2],), "reads a A-layout array"),
    ],
)
def test_loops_it_cannot_run_are_refused(f, args, reason):
    from enzyme_py.frontends._numba_parfor import ParforUnsupported

    with pytest.raises(Exception) as info:
        _compiled(f, *args)
    chain = [info.value, info.value.__cause__, info.value.__context__]
    assert any(isinstance(e, ParforUnsupported) or reason in str(e) for e in chain if e)
    assert reason in "".join(str(e) for e in chain if e)


@numba.njit(parallel=True)
def from_minus_three(x):
    s = 0.0
    for i in numba.prange(-3, x.shape[0] - 3):  # x[-3] is x[n - 3]
        s += x[i] * x[i + 1]
    return s


def test_a_range_from_a_constant_of_zero_or_more_has_one_body():
    """prange(n - 1) starts at 0: its chunks run and differentiate K.body alone (Numba's
    body, which wraps negative indices around, is not made twice); a range that may
    start below 0 keeps both."""
    from enzyme_py.frontends import _numba_parfor

    def functions(f, *args):
        compiled, launches = _compiled(f, *args)
        text, _ = _numba_parfor.threaded_ir(compiled.ir, launches, threads=2)
        chunk = text[text.index("define internal i32 @__enzyme_py_parfor_0.chunk(") :]
        reverse = text[text.index("define internal i32 @__enzyme_py_parfor_0.reverse(") :]
        return chunk[: chunk.index("\n}\n")], reverse[: reverse.index("\n}\n")]

    chunk, reverse = functions(rosenbrock_prange, np.ones(10))
    assert "call i32 @__enzyme_py_parfor_0.body(" in chunk and "select" not in chunk
    assert reverse.count("@__enzyme_autodiff(") == 1
    chunk, reverse = functions(from_minus_three, np.ones(10))
    assert "select i1 %nonneg" in chunk
    assert reverse.count("@__enzyme_autodiff(") == 2
    x = np.linspace(0.5, 1.5, 50_000)
    dx = np.zeros_like(x)
    ez.autodiff(from_minus_three, ez.Reverse, ez.Duplicated, ez.ActiveOnly, threads=2)(x, dx, 1.0)
    expected = np.zeros_like(x)
    idx = np.arange(-3, x.shape[0] - 3)
    np.add.at(expected, idx, x[idx + 1])
    np.add.at(expected, idx + 1, x[idx])
    np.testing.assert_allclose(dx, expected, rtol=1e-13)
