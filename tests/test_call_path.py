"""The per-call path of a Numba derivative: calls whose arguments are all scalars pick
their specialisation by the arguments' types; other types still get their own."""

import math

import numpy as np
import pytest

import enzyme_py as ez

from reference import fd_scalar

numba = pytest.importorskip("numba")
pytestmark = pytest.mark.needs_enzyme


@numba.njit
def _power(x, n):
    # n // 2 is an integer for an int n, a float for a float n: two specialisations.
    return x ** (n // 2) * math.sin(x)


def test_scalar_calls_keep_one_specialisation_per_type():
    df = ez.autodiff(_power, ez.Reverse, ez.Active, ez.Const, ez.Active)
    for n in (4, 4.0, np.float64(4.0), 5, 4.0, 4):
        x = 1.3
        want = fd_scalar(lambda v, n=n: _power(v, n), x)
        value, dx = df(x, n, 1.0)
        assert value == pytest.approx(_power(x, n), rel=1e-12)
        assert dx == pytest.approx(want, rel=1e-6)
    # int, float and np.float64 arguments: a specialisation each, as Numba types them
    # (np.float64 is float64 too, but its own kind: the same derivative, two keys).
    assert len({id(b.derivative) for b in df._by_kinds.values()}) == 2
    assert len(df._by_kinds) == 3


def test_scalar_fast_path_not_taken_for_arrays_or_defaults():
    @numba.njit
    def with_default(x, k=3.0):
        return k * x * x

    df = ez.autodiff(with_default, ez.Reverse, ez.Active, ez.Active)
    assert df(2.0, 1.0)[1] == pytest.approx(12.0)
    assert df._by_scalar_types == {}  # the default is inserted: the general path
    assert df(2.0, 1.0)[1] == pytest.approx(12.0)
