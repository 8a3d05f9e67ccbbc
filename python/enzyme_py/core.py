"""The vocabulary of enzyme_py: modes, activities and exceptions.

This module is pure Python and imported by both the AD build and the stub, so the
names a user writes (``ez.Reverse``, ``ez.Duplicated``, ``ez.EnzymeError``) are the
same objects whichever backend is active. It plays the part EnzymeCore plays for
Enzyme.jl.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
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
    "Mode",
    "Reverse",
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
#: As Duplicated, but the primal output may be left unwritten.
DuplicatedOnly = Activity("DuplicatedOnly", shadow=True, primal_needed=False, modes=_REVERSE)
#: A value followed by its tangent (forward mode).
Dual = Activity("Dual", shadow=True, primal_needed=True, modes=_FORWARD)
#: As Dual, but only the tangent is computed.
DualOnly = Activity("DualOnly", shadow=True, primal_needed=False, modes=_FORWARD)


class EnzymeError(RuntimeError):
    """Enzyme could not differentiate a function; the message is Enzyme's own."""


class ActivityError(TypeError):
    """The mode, activities or arguments do not fit the function's parameters."""


class EnzymeUnavailableError(ImportError):
    """enzyme_py runs without AD: built without it, disabled, or the plugin is missing."""


class CompileError(RuntimeError):
    """Source code (C, C++, LLVM IR) did not compile; the message has the diagnostics."""


class CompilerWarning(UserWarning):
    """clang compiled C/C++ source (``ez.c``, ``ez.cpp``) with warnings; the message has
    them. A variable read before it is written (``-Wuninitialized``) is one: its value
    is whatever the optimizer picked, and so is the derivative."""
