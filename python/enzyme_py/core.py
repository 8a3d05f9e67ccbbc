"""The vocabulary of enzyme_py: modes, activities and exceptions.

This module is pure Python and imported by both the AD build and the stub, so the
names a user writes (``ez.Reverse``, ``ez.Duplicated``, ``ez.EnzymeError``) are the
same objects whichever backend is active. It plays the part EnzymeCore plays for
Enzyme.jl.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import SupportsIndex

__all__ = [
    "MAX_WIDTH",
    "Active",
    "ActiveOnly",
    "Activity",
    "ActivityError",
    "CompileError",
    "CompilerWarning",
    "Const",
    "Dual",
    "DualOnly",
    "Duplicated",
    "DuplicatedOnly",
    "EnzymeError",
    "EnzymeUnavailableError",
    "Forward",
    "GradientCheckWarning",
    "Mode",
    "PerformanceWarning",
    "Reverse",
    "ReverseSplit",
]


@dataclass(frozen=True)
class Mode:
    """A differentiation mode: ``Reverse`` (gradients) or ``Forward`` (tangents)."""

    name: str

    def __repr__(self) -> str:
        return f"enzyme_py.{self.name}"

    def __reduce__(self) -> str:
        # The module-level singleton, so that `mode is ez.Reverse` survives pickling.
        return self.name


Reverse = Mode("Reverse")
Forward = Mode("Forward")
# Reverse mode in two halves, as Enzyme's augmented forward pass and reverse pass:
# ``autodiff(f, ReverseSplit, ...)`` has ``.forward(...)`` (the primal and a tape) and
# ``.reverse(tape, ..., seed)`` (the adjoints), callable several times per tape.
ReverseSplit = Mode("ReverseSplit")


@dataclass(frozen=True)
class Activity:
    """How one parameter, or the return value, takes part in differentiation.

    Attributes:
        name: the public name (``"Duplicated"``).
        shadow: the argument is followed by its shadow (adjoint or tangent).
        primal_needed: the primal value is computed (False for the ``*Only`` kinds).
        modes: the modes in which the activity is allowed.
    """

    name: str
    shadow: bool
    primal_needed: bool
    modes: frozenset[str]

    def __repr__(self) -> str:
        return f"enzyme_py.{self.name}"

    def __reduce__(self) -> str:
        # The module-level singleton, so that `act is ez.Const` survives pickling.
        return self.name

    def allowed_in(self, mode: Mode) -> bool:
        return mode.name in self.modes


_BOTH = frozenset({"Reverse", "Forward"})
_REVERSE = frozenset({"Reverse"})
_FORWARD = frozenset({"Forward"})

#: Not differentiated: its value is an input only.
Const = Activity("Const", shadow=False, primal_needed=True, modes=_BOTH)
#: A scalar whose adjoint is returned (reverse mode).
Active = Activity("Active", shadow=False, primal_needed=True, modes=_REVERSE)
#: As Active, for the return value: the adjoints without the primal result.
ActiveOnly = Activity("ActiveOnly", shadow=False, primal_needed=False, modes=_REVERSE)
#: An array followed by its shadow, into which the adjoint is added (reverse mode).
Duplicated = Activity("Duplicated", shadow=True, primal_needed=True, modes=_REVERSE)
#: As Duplicated (and built as it: Enzyme's "primal not needed" drops writes that
#: the function reads back), so the primal output is written too.
DuplicatedOnly = Activity("DuplicatedOnly", shadow=True, primal_needed=False, modes=_REVERSE)
#: A value followed by its tangent (forward mode).
Dual = Activity("Dual", shadow=True, primal_needed=True, modes=_FORWARD)
#: As Dual; as a parameter built as Dual (the primal output is written too), as the
#: return only the tangent is returned.
DualOnly = Activity("DualOnly", shadow=True, primal_needed=False, modes=_FORWARD)


class EnzymeError(RuntimeError):
    """Enzyme could not differentiate a function; the message is Enzyme's own (without
    the dump of the function it may print, which ``enzyme_output`` keeps where set)."""

    enzyme_output: str = ""


class ActivityError(TypeError):
    """The mode, activities or arguments do not fit the function's parameters."""


class EnzymeUnavailableError(ImportError):
    """enzyme_py runs without AD: built without it, disabled, or the plugin is missing."""


class GradientCheckWarning(UserWarning):
    """A derivative disagreed with finite differences (``autodiff(..., check=True)``)."""


class CompileError(RuntimeError):
    """Source code (C, C++, LLVM IR) did not compile; the message has the diagnostics."""


class CompilerWarning(UserWarning):
    """clang compiled C/C++ source (``ez.c``, ``ez.cpp``) with warnings; the message has
    them. A variable read before it is written (``-Wuninitialized``) is one: its value
    is whatever the optimizer picked, and so is the derivative."""


class PerformanceWarning(UserWarning):
    """A derivative was built, but not the fast one asked for: it gives the same numbers,
    more slowly (``autodiff(..., threads=k)`` whose parallel derivative Enzyme refused
    runs serially). The message says which function and why."""


#: The widest batch ``autodiff(..., width=k)`` builds. Enzyme's build time and memory
#: grow steeply with the width (docs/guarantees.md has the measurements; width 1000
#: took 148 s, width 2**31 all memory), and batching beyond a few dozen lanes
#: gains nothing over calling a narrower derivative several times.
MAX_WIDTH = 64


def checked_width(width: object) -> int:
    """``width`` as an int, or ValueError: not a positive integer, or beyond MAX_WIDTH."""
    integer = isinstance(width, int) and not isinstance(width, bool)
    integer |= getattr(getattr(width, "dtype", None), "kind", "") in ("i", "u")  # NumPy's
    k = operator.index(width) if integer and isinstance(width, SupportsIndex) else 0
    if k < 1:
        raise ValueError(f"width must be a positive integer; got {width!r}")
    if k > MAX_WIDTH:
        raise ValueError(
            f"width={k} is beyond the largest width enzyme_py builds ({MAX_WIDTH}, "
            "ez.MAX_WIDTH): batch the directions instead, calling a derivative of width "
            f"{MAX_WIDTH} or less several times, each call with the next directions"
        )
    return k


def checked_flag(name: str, value: object) -> bool:
    """An option that is True or False (a NumPy bool too), or TypeError naming it."""
    if type(value).__name__ not in ("bool", "bool_"):
        raise TypeError(f"{name} must be True or False; got {value!r}")
    return bool(value)
