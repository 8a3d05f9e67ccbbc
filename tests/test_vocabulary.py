"""The shared vocabulary: modes, activities and exceptions (both builds)."""

import enzyme_py as ez
from enzyme_py import core


def test_modes_and_activities_are_the_core_objects():
    assert ez.Reverse is core.Reverse and ez.Forward is core.Forward
    for name in (
        "Const",
        "Active",
        "ActiveOnly",
        "Duplicated",
        "DuplicatedOnly",
        "Dual",
        "DualOnly",
    ):
        act = getattr(ez, name)
        assert act is getattr(core, name)
        assert isinstance(act, ez.Activity)
        assert repr(act) == f"enzyme_py.{name}"


def test_activity_modes():
    assert ez.Active.allowed_in(ez.Reverse) and not ez.Active.allowed_in(ez.Forward)
    assert ez.Dual.allowed_in(ez.Forward) and not ez.Dual.allowed_in(ez.Reverse)
    assert ez.Const.allowed_in(ez.Forward) and ez.Const.allowed_in(ez.Reverse)
    assert ez.Duplicated.shadow and ez.Dual.shadow and not ez.Active.shadow
    assert not ez.ActiveOnly.primal_needed and not ez.DualOnly.primal_needed


def test_exception_hierarchy():
    assert issubclass(ez.ActivityError, TypeError)
    assert issubclass(ez.EnzymeUnavailableError, ImportError)
    assert issubclass(ez.EnzymeError, RuntimeError)
    assert issubclass(ez.CompileError, Exception)


def test_public_names_exist_in_both_builds():
    from enzyme_py import _stub

    for name in ez.__all__:
        assert hasattr(ez, name), name
    for name in _stub.__all__:
        assert name in ez.__all__
        assert callable(getattr(_stub, name))
