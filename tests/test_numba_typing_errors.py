"""A Numba function that does not compile for the arguments given: every helper and
ez.autodiff raise the same TypeError, naming each parameter with its Numba type and
Numba's reason, never Numba's own TypingError (jvp and vjp let it through before)."""

from __future__ import annotations

import numba
import numpy as np
import pytest

import enzyme_py as ez

pytestmark = pytest.mark.needs_enzyme


@numba.njit(cache=False)
def column_peaks(table):
    return np.sum(np.max(table, axis=0))  # Numba has no np.max(..., axis=)


@numba.njit(cache=False)
def flattened(x):
    return np.sum(x.reshape(x.size) ** 2)


TABLE = np.ones((3, 4))

CALLS = {
    "grad": lambda: ez.grad(column_peaks)(TABLE),
    "value_and_grad": lambda: ez.value_and_grad(column_peaks)(TABLE),
    "jvp": lambda: ez.jvp(column_peaks, (TABLE,), (TABLE,)),
    "vjp": lambda: ez.vjp(column_peaks, TABLE),
    "jacfwd": lambda: ez.jacfwd(column_peaks)(TABLE),
    "jacrev": lambda: ez.jacrev(column_peaks)(TABLE),
    "hessian": lambda: ez.hessian(column_peaks)(TABLE),
    "autodiff": lambda: ez.autodiff(column_peaks, ez.Reverse, ez.Duplicated, ez.Active)(
        TABLE, np.zeros_like(TABLE), 1.0
    ),
}


@pytest.mark.parametrize("helper", sorted(CALLS))
def test_each_helper_names_the_parameter_its_type_and_numbas_reason(helper):
    with pytest.raises(TypeError) as caught:
        CALLS[helper]()
    message = str(caught.value)
    assert "'column_peaks' does not compile for the types of these arguments" in message
    assert "'table': array(float64, 2d, C)" in message
    assert "No implementation of function" in message  # Numba's reason, its first line
    assert "Failed in nopython mode pipeline" not in message  # not Numba's framing
    assert "views" not in message  # a contiguous array: no advice about views


@pytest.mark.parametrize("helper", ["grad", "jvp"])
def test_a_view_gets_the_advice_to_pass_a_contiguous_copy(helper):
    view = np.arange(12.0).reshape(3, 4)[:, ::2]
    with pytest.raises(TypeError) as caught:
        if helper == "grad":
            ez.grad(flattened)(view)
        else:
            ez.jvp(flattened, (view,), (np.ones_like(view),))
    message = str(caught.value)
    assert "'x': array(float64, 2d, A)" in message
    assert "np.ascontiguousarray(...) of the views" in message
