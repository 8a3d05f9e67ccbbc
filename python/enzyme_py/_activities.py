"""Activities checked against a function's parameters and a mode, before anything is built.

One activity per visible parameter, then one for the return value (none if it returns
nothing); each is checked against the parameter's kind (float scalar, integer, array)
and the mode, and refused with an ``ActivityError`` that names the parameter and says
what to use instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from enzyme_py._signature import Param
from enzyme_py.core import (
    Active,
    ActiveOnly,
    Activity,
    ActivityError,
    Const,
    Duplicated,
    DuplicatedOnly,
    Forward,
    Mode,
    Reverse,
)
from enzyme_py.frontends import IRFunction

__all__ = ["RecursionBatchRefused", "check_activities", "check_mode"]


def check_mode(mode: Any) -> Mode:
    """``mode`` if it is ez.Reverse or ez.Forward."""
    if mode is not Reverse and mode is not Forward:
        raise ActivityError(f"mode must be ez.Reverse or ez.Forward, not {mode!r}")
    return mode


def check_activities(
    fn: IRFunction, mode: Mode, activities: Sequence[Any]
) -> tuple[tuple[Activity, ...], Activity | None]:
    """Validate the activities against fn's parameters.

    One activity per visible parameter, then one for the return value. Returns the
    activity of every parameter (hidden ones Const) and the return's.
    """
    check_mode(mode)
    visible = fn.visible_params
    n = len(visible)
    expected = n + (0 if fn.ret is None else 1)
    if len(activities) != expected:
        ret_text = (
            "and returns nothing"
            if fn.ret is None
            else "and a return value (its activity comes last)"
        )
        raise ActivityError(
            f"'{fn.display_name}' has {n} parameter{'s' if n != 1 else ''} {ret_text}, so "
            f"autodiff needs {expected} activit{'ies' if expected != 1 else 'y'}; "
            f"got {len(activities)}"
        )
    for i, act in enumerate(activities):
        if not isinstance(act, Activity):
            what = visible[i][1].describe(i) if i < n else "the return value"
            raise ActivityError(
                f"the activity of {what} of '{fn.display_name}' is {act!r}, not an "
                "enzyme_py activity (ez.Const, ez.Active, ez.Duplicated, ez.Dual, ...)"
            )
    full: list[Activity] = [Const] * len(fn.params)
    for position, ((index, param), act) in enumerate(zip(visible, activities, strict=False)):
        _check_param(fn, mode, position, param, act)
        full[index] = act
    ret = activities[n] if fn.ret is not None else None
    if ret is not None and fn.ret is not None:
        _check_return(fn, mode, fn.ret, ret)
    return tuple(full), ret


def _mode_hint(mode: Mode) -> str:
    if mode is Reverse:
        return "in Reverse mode use Const, Active (float scalars) or Duplicated (arrays)"
    return "in Forward mode use Const, Dual or DualOnly"


def _check_param(fn: IRFunction, mode: Mode, i: int, param: Param, act: Activity) -> None:
    where = f"{param.describe(i)} of '{fn.display_name}'"
    if not act.allowed_in(mode):
        raise ActivityError(
            f"{act.name} is not allowed in {mode.name} mode ({where}); {_mode_hint(mode)}"
        )
    if act is ActiveOnly:
        raise ActivityError(
            f"ActiveOnly describes a return value, not {where}; use Active for a parameter"
        )
    if act is Const:
        return
    if param.kind == "int":
        raise ActivityError(
            f"{where} is an integer ({param.dtype}); integers can only be Const, not {act.name}"
        )
    if param.kind == "float" and act in (Duplicated, DuplicatedOnly):
        raise ActivityError(
            f"{where} is a {param.dtype} scalar passed by value; it has no shadow to "
            f"accumulate into, so it cannot be {act.name}: use Active"
        )
    if param.kind == "pointer":
        if act is Active:
            raise ActivityError(
                f"{where} is an array (a pointer); Active is for float scalars: use "
                "Duplicated and pass a shadow array after it"
            )
        # An array of addresses (T**) takes a shadow of the shadows' addresses.
        if param.dtype is not None and param.dtype.kind != "f" and not param.pointee_is_pointer:
            raise ActivityError(
                f"{where} points to {param.dtype} values, which have no derivative: "
                "it can only be Const"
            )


def _check_return(fn: IRFunction, mode: Mode, ret: Param, act: Activity) -> None:
    what = f"{ret.fields} x {ret.dtype}" if ret.kind == "struct" else str(ret.dtype)
    where = f"the return value ({what}) of '{fn.display_name}'"
    if not act.allowed_in(mode):
        raise ActivityError(
            f"{act.name} is not allowed in {mode.name} mode ({where}); {_mode_hint(mode)}"
        )
    if act is Const and ret.kind == "struct":
        # Enzyme v0.0.289 aborts (setDiffe of a constant) on a constant struct return.
        raise ActivityError(
            f"{where} is a struct of {ret.fields} values, which Enzyme v0.0.289 cannot "
            "leave Const: in Forward mode make it Dual or DualOnly (the primal values come "
            "with Dual); for a Reverse derivative, differentiate a function returning one "
            "of its values"
        )
    if act is Const:
        return
    if ret.kind == "struct" and mode is Forward:
        return
    if ret.kind != "float":
        raise ActivityError(f"{where} is not a float scalar; it can only be Const")
    if act in (Duplicated, DuplicatedOnly):
        raise ActivityError(
            f"{where} is a scalar returned by value; use Active (or ActiveOnly) in Reverse mode"
        )


class RecursionBatchRefused(ActivityError):
    """width > 1 asked of a recursive function (Enzyme v0.0.289 batches it wrongly);
    the helpers catch it to go one column at a time."""
