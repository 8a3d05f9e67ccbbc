"""The runnable examples in the bridges' docstrings (ez.torch.function, ez.jax.primitive)."""

import doctest
import importlib

import pytest

pytestmark = pytest.mark.needs_enzyme


@pytest.mark.parametrize(
    ("module", "name"), [("enzyme_py.torch", "function"), ("enzyme_py.jax", "primitive")]
)
def test_docstring_example_runs(module, name):
    pytest.importorskip("numba")
    pytest.importorskip(module.split(".")[1])
    found = importlib.import_module(module)
    tests = doctest.DocTestFinder().find(getattr(found, name), name, globs={})
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in tests:
        runner.run(test)
    results = runner.summarize(verbose=False)
    assert results.attempted >= 4, f"{module}.{name} has no runnable example"
    assert results.failed == 0
