"""``autodiff``: the derivative of a function, whatever made it.

Numba dispatchers get a derivative per argument types (``_numba_derivative``), kernels a
derivative kernel (``offload``), every other function (``ez.c``, ``ez.llvm_ir``, a
derivative differentiated again) one ``Derivative``. The request is checked completely
before anything is built; ``check=True`` installs the gradient check of the first call.
"""

from __future__ import annotations

from typing import Any

from enzyme_py._activities import check_activities, check_mode
from enzyme_py._check import check_first_call
from enzyme_py._derivative import Derivative, Options, resolve_function
from enzyme_py._numba_derivative import NumbaDerivative
from enzyme_py._numba_results import ArrayResultCall
from enzyme_py._reverse_over_reverse import ReverseOverReverse, returns_adjoints
from enzyme_py._split import SplitDerivative
from enzyme_py.core import (
    Activity,
    ActivityError,
    EnzymeError,
    Mode,
    Reverse,
    ReverseSplit,
    checked_flag,
    checked_width,
)
from enzyme_py.frontends import IRFunction
from enzyme_py.frontends import numba as numba_frontend
from enzyme_py.offload import Kernel

__all__ = ["autodiff"]

# Split mode on (a switch, should it ever need to be off: ez.ReverseSplit is then refused
# with advice, and ez.vjp and the bridges recompute, their fallback when split mode is
# refused). It was off for a while: the full test suite crashed, in split calls and in
# later plain ones. The cause was the JIT's placement of code far from its constants
# (src/jit_memory.h), not split mode.
SPLIT_MODE = True


def autodiff(
    f: Any,
    mode: Mode,
    *activities: Activity,
    width: int = 1,
    runtime_activity: bool = False,
    strong_zero: bool = False,
    sig: Any = None,
    check: bool = False,
    threads: int | None = None,
) -> Any:
    """The derivative of ``f`` in ``mode`` with one activity per parameter, then one for
    the return value (none if it returns nothing).

    Reverse mode: call with ``x`` for Const/Active, ``x, dx`` for Duplicated(Only), then
    the seed if the return is Active/ActiveOnly; returns ``(primal, *adjoints of Active
    parameters)`` (primal ``None`` under ActiveOnly or for a function returning nothing).
    Forward mode: ``x`` for Const, ``x, dx`` for Dual(Only); returns ``(y, dy)`` for a
    Dual return, ``dy`` for DualOnly, ``y`` for Const, ``None`` with no return value.

    >>> import numpy as np, enzyme_py as ez
    >>> m = ez.c("double f(const double *x, double a, int n) { double s = 0; "
    ...          "for (int i = 0; i < n; ++i) s += a * x[i] * x[i]; return s; }")
    >>> x, dx = np.array([1.0, 2.0]), np.zeros(2)
    >>> df = ez.autodiff(m.f, ez.Reverse, ez.Duplicated, ez.Active, ez.Const, ez.Active)
    >>> df(x, dx, 3.0, 2, 1.0)           # (f, df/da); df/dx = 2 a x is added into dx
    (15.0, 5.0)
    >>> dx
    array([ 6., 12.])
    >>> fwd = ez.autodiff(m.f, ez.Forward, ez.Dual, ez.Const, ez.Const, ez.Dual)
    >>> fwd(x, np.array([1.0, 0.0]), 3.0, 2)   # (f, its derivative along the tangent)
    (15.0, 6.0)

    Args:
        width: batch size: each shadow, tangent and seed carries ``width`` values.
        runtime_activity: let Enzyme decide at run time whether memory is active.
            Needed when activity is only known per call or per pointer (e.g. a pointer
            that sometimes aliases a Const array). With it, passing an array as its
            own shadow (``df(x, x, ...)``) marks that array inactive for the call;
            without it that is refused. Costs a check per access.
        strong_zero: a zero derivative times inf/nan stays zero instead of nan.
        check: at the first call, compare the result with central finite differences
            of the function along a random direction and warn (GradientCheckWarning)
            if they disagree. Costs a few evaluations of the function, once.
        sig: for a Numba dispatcher, the signature to differentiate (a Numba signature
            or its string). Without it, the dispatcher's only compiled signature, or one
            derivative per argument types, made at the first call with those types.
        threads: for a Numba dispatcher compiled with ``parallel=True``, Reverse
            mode: above 1, its ``prange`` loops run on up to that many threads in the
            derivative too (docs/design.md §8). A loop whose body takes a float that is
            not an array, reduces into an array, reads a non-C array or is nested, and
            forward mode, run on one thread instead, with a ``PerformanceWarning``
            saying why. 1: the derivative of its serial twin (prange as range), on one
            thread. Left out: as many threads as Numba uses (``numba.get_num_threads()``,
            all cores by default) where a prange loop's body has a loop of its own, or
            where the primal is computed too (not ActiveOnly) and no prange loop is
            inside another loop; else one thread; without a warning where threads
            cannot be used. Arrays passed to it that overlap, differentiating it again
            and ``njit()`` take the serial derivative (the same numbers). For any Numba
            dispatcher, also the most threads a fused reverse stencil loop runs on
            (long ones run on one thread per core by default, the same numbers on
            any number: docs/design.md §3); 1 keeps them on the calling thread.

    Split mode: ``ez.ReverseSplit`` gives Reverse mode in two halves (Enzyme's
    augmented forward pass and its reverse pass): ``df.forward(*args)`` takes the
    Reverse arguments without the seed and returns ``(primal, tape)``;
    ``df.reverse(tape, *args, seed)`` takes the same arguments again (the very same
    arrays and shadows, unchanged) and the seed, adds the adjoints into the shadows and
    returns the adjoints of Active parameters. The reverse half runs only the reverse
    pass, as often as wanted while the tape lives; the tape is freed when collected.

    >>> split = ez.autodiff(m.f, ez.ReverseSplit, ez.Duplicated, ez.Active, ez.Const, ez.Active)
    >>> dx = np.zeros(2)
    >>> value, tape = split.forward(x, dx, 3.0, 2)   # runs f once, keeps the tape
    >>> value
    15.0
    >>> split.reverse(tape, x, dx, 3.0, 2, 1.0), dx  # the reverse pass alone
    ((5.0,), array([ 6., 12.]))
    >>> dx[:] = 0.0                                  # it adds into dx: zero it, then
    >>> split.reverse(tape, x, dx, 3.0, 2, 0.5), dx  # another seed, the same tape
    ((2.5,), array([3., 6.]))

    Raises:
        ActivityError: activities that do not fit the parameters or the mode.
        EnzymeError: Enzyme could not differentiate ``f`` (message from Enzyme).
    """
    width = checked_width(width)  # before anything is built (a fork per build)
    if threads is not None and (
        isinstance(threads, bool) or not isinstance(threads, int) or threads < 1
    ):
        raise ValueError(f"threads= is a positive int (or None); got {threads!r}")
    runtime_activity = checked_flag("runtime_activity", runtime_activity)
    strong_zero, check = checked_flag("strong_zero", strong_zero), checked_flag("check", check)
    options = Options(
        width, runtime_activity, strong_zero, first_call=check_first_call if check else None
    )
    if mode is ReverseSplit:
        if isinstance(f, Kernel):
            raise ActivityError("kernels have no split mode; use ez.Reverse")
        if not SPLIT_MODE:
            raise EnzymeError(
                "split mode (ez.ReverseSplit) is switched off (enzyme_py._api.SPLIT_MODE). "
                "Use ez.Reverse (ez.vjp and the bridges compute the primal again in their "
                "reverse pass)."
            )
        return SplitDerivative(f, tuple(activities), options, sig)
    composed = getattr(type(f), "__enzyme_autodiff__", None)
    if composed is not None:  # a helper's result (ez.grad(g), ...): see _compose
        return composed(
            f, mode, *activities, width=width, runtime_activity=runtime_activity,
            strong_zero=strong_zero, sig=sig, check=check, threads=threads,
        )  # fmt: skip
    if (
        mode is Reverse
        and isinstance(f, (Derivative, NumbaDerivative))
        and f.mode is Reverse
        and returns_adjoints(f)
    ):
        # Enzyme cannot take the adjoints it returns as an Active return: forward over
        # reverse gives the same second derivative.
        return ReverseOverReverse(f, tuple(activities), options, autodiff)
    if isinstance(f, Kernel):
        if width != 1 or runtime_activity or strong_zero or check or sig is not None or threads:
            raise ValueError("the derivative of a kernel takes only the mode and activities")
        return f.derivative(mode, *activities)
    if numba_frontend.is_dispatcher(f):
        return NumbaDerivative(f, check_mode(mode), tuple(activities), options, sig, threads)
    if sig is not None or threads is not None:
        raise TypeError("sig= and threads= apply to Numba dispatchers only")
    if isinstance(f, NumbaDerivative) and len(f._by_types) != 1:
        # Not yet (or more than once) specialised: the first call's types pick it.
        return _LateDerivative(f, check_mode(mode), tuple(activities), options)
    fn = resolve_function(f)
    params, ret = check_activities(fn, mode, activities)
    return Derivative(fn, mode, params, ret, options)


def zeroing_reverse(f: Any, *activities: Activity) -> Any:
    """``autodiff(f, Reverse, *activities)`` of a Numba dispatcher or a function of
    ``ez.c``, ``ez.cython``, ``ez.llvm_ir``..., whose derivatives zero the shadows they
    can themselves (``Options.zeroes_shadows``; ``zeroed_params`` names them: per call,
    ``zeroed_params(args)``, for a dispatcher): for the helpers, whose shadows are
    fresh. Not for users' calls, whose shadows accumulate."""
    options = Options(1, False, False, zeroes_shadows=True)
    if numba_frontend.is_dispatcher(f):
        return NumbaDerivative(f, Reverse, tuple(activities), options)
    fn = resolve_function(f)
    params, ret = check_activities(fn, Reverse, activities)
    return Derivative(fn, Reverse, params, ret, options)


def zeroes_shadows(f: Any) -> bool:
    """Whether ``zeroing_reverse`` takes ``f``: a Numba dispatcher or a function."""
    return numba_frontend.is_dispatcher(f) or isinstance(f, IRFunction)


class _LateDerivative:
    """``autodiff`` of a Numba derivative that has no single specialisation yet: made
    per argument types at the first call with them, as Numba compiles. The derivative's
    own arguments are among the call's (each followed by its shadow or tangent when its
    activity has one); their types pick its specialisation."""

    def __init__(self, inner: NumbaDerivative, mode: Mode, activities: tuple[Any, ...],
                 options: Options):  # fmt: skip
        self.inner, self.mode, self.activities, self.options = inner, mode, activities, options
        self._made: dict[tuple[Any, ...], Any] = {}

    def _for(self, args: tuple[Any, ...]) -> Any:
        values, pos = [], 0
        for act in self.activities:
            if pos >= len(args):
                break
            values.append(args[pos])
            pos += 2 if getattr(act, "shadow", False) else 1
        key = tuple(
            (a.dtype.str, a.ndim, a.flags.c_contiguous) if hasattr(a, "dtype") and
            hasattr(a, "ndim") else type(a)
            for a in values
        )  # fmt: skip
        made = self._made.get(key)
        if made is None:
            bound = self.inner._bound_for(tuple(values))
            if bound.defaults or isinstance(bound.results, ArrayResultCall):
                raise ActivityError(
                    f"{self.inner!r} returns an array or a tuple, or leaves out parameters "
                    "with defaults: it cannot be differentiated again (give an activity for "
                    "every parameter; write array results into an output parameter)"
                )
            made = self._made[key] = autodiff(
                bound.derivative, self.mode, *self.activities,
                width=self.options.width, runtime_activity=self.options.runtime_activity,
                strong_zero=self.options.strong_zero,
            )  # fmt: skip
        return made

    def __call__(self, *args: Any) -> Any:
        return self._for(args)(*args)

    def as_function(self) -> Any:
        raise ActivityError(
            f"this {self.mode.name} derivative of {self.inner!r} is made at its first call "
            "(from the types of its arguments); call it once before differentiating it again"
        )

    def __repr__(self) -> str:
        acts = ", ".join(getattr(a, "name", repr(a)) for a in self.activities)
        return f"<enzyme_py {self.mode.name}({acts}) derivative of {self.inner!r}>"
