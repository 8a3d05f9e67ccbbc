"""Numba's prange loops as typed launches with Enzyme rules (``frontends/_numba_parfor``),
what lets reverse derivatives run them on several threads (docs/design.md §8): the
compile, the generated module, the bodies' reverse derivatives from Enzyme's marker
pass, and the loops it refuses. The derivatives themselves: tests/test_prange.py."""

import re

import numba
import numpy as np
import pytest

from benchmarks.kernels import rosenbrock_prange

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
    assert re.search(r"define internal void @diffe_ZN\S*numba_parfor_gufunc", lowered)
    module = _numba_parfor.with_launch_rules(parse_module(lowered), names)
    ir = module.native.ir()
    assert re.search(r"define void @__enzyme_py_parfor_0\(.*!enzyme_augment", ir)
    assert "!enzyme_gradient" in ir


def test_a_loop_writing_a_float_array_keeps_one_thread():
    """Whether each index writes only entries of its own is not proven: one chunk."""
    from enzyme_py.frontends import _numba_parfor

    compiled, launches = _compiled(scaled, np.ones(4), np.zeros(4), 3)
    (launch,) = launches
    assert sorted(str(g.array) for g in launch.groups) == ["None", "float64", "float64"]
    assert not any(g.reduction for g in launch.groups)
    text, _ = _numba_parfor.threaded_ir(compiled.ir, launches, threads=4)
    run = re.findall(r"call void @__enzyme_py_parfor_run\(.*, i64 (\S+)\)", text)
    assert run == ["1"]
    compiled, launches = _compiled(rosenbrock_prange, np.ones(10))
    text, _ = _numba_parfor.threaded_ir(compiled.ir, launches, threads=4)
    (count,) = re.findall(r"call void @__enzyme_py_parfor_run\(.*, i64 (\S+)\)", text)
    assert count.startswith("%tc")  # 4, at most the reduction array's length


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
