"""What a kernel runs per index, for the arguments of a launch: its body (compiled with
its boundscheck), or the derivative the kernel is of; and how launches lay out and name
their arguments. The CPU and GPU launchers and the Kernel facade share one."""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any

import numpy as np

from enzyme_py._activities import check_activities
from enzyme_py._derivative import Derivative
from enzyme_py._signature import Param
from enzyme_py.core import Const, Reverse
from enzyme_py.frontends import numba as numba_frontend
from enzyme_py.frontends.ir import parse_module


def launch_key(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((a.dtype.str, a.ndim) if isinstance(a, np.ndarray) else type(a) for a in args)


class KernelBody:
    """The body of a kernel, or of the derivative kernel it is, ready per launch."""

    def __init__(
        self,
        body: Any,
        derivative_of: tuple[Any, ...] | None = None,
        boundscheck: bool | None = None,
    ):
        self.body = body
        self.derivative_of = derivative_of  # (mode, activities, options) of a derivative
        self.boundscheck = boundscheck
        # What is compiled: a Numba body with its indexing checked (see ``kernel``).
        self.compiled = (
            numba_frontend.with_boundscheck(body, boundscheck)
            if numba_frontend.is_dispatcher(body)
            else body
        )

    @property
    def name(self) -> str:
        return str(
            getattr(self.body, "__name__", None) or getattr(self.body, "display_name", "body")
        )

    def function(self, args: tuple[Any, ...]) -> Any:
        """The IRFunction to run per index, for these arguments."""
        if numba_frontend.is_dispatcher(self.compiled):
            types = (self.compiled.typeof_pyval(0), *self.primal_types(args))
            return numba_frontend.specialize(self.compiled, types).wrapper
        return self.body

    @property
    def is_reverse(self) -> bool:
        """Whether this is a reverse-mode derivative kernel (its shadows are added into)."""
        return self.derivative_of is not None and self.derivative_of[0] is Reverse

    def per_index(
        self, fn: Any, one_thread: bool = False, plain: frozenset[int] = frozenset()
    ) -> Any:
        """What runs per index: the body, or the derivative the kernel is of (on one
        thread, its shadows updated with plain adds instead of atomic ones; on several,
        plain adds into the shadows at launch positions ``plain`` only)."""
        if self.derivative_of is None:
            return fn
        mode, activities, options = self.derivative_of
        if one_thread:
            options = replace(options, atomic_add=False)
        full, ret = check_activities(fn, mode, (Const, *activities))
        derivative = Derivative(fn, mode, full, ret, options).as_function()
        if not plain or one_thread:
            return derivative
        module = parse_module(derivative.module.ir())  # a copy: the derivative keeps its own
        positions = [k for k, _ in derivative.visible_params]  # [index, *launch arguments]
        module.native.make_adds_plain(derivative.name, [positions[1 + k] for k in plain])
        return replace(derivative, module=module)

    def per_index_for(self, args: tuple[Any, ...]) -> Any:
        return self.per_index(self.function(args))

    def layout(self) -> list[tuple[int, int | None]]:
        """For each parameter after the index, of a derivative kernel: the launch position
        of its value and that of its shadow (None without one; shadows follow values)."""
        assert self.derivative_of is not None
        layout, pos = [], 0
        for activity in self.derivative_of[1]:
            layout.append((pos, pos + 1 if activity.shadow else None))
            pos += 2 if activity.shadow else 1
        return layout

    def shadow_positions(self) -> list[int]:
        return [shadow for _, shadow in self.layout() if shadow is not None]

    def primal_types(self, args: tuple[Any, ...]) -> list[Any]:
        if self.derivative_of is None:
            return [self.body.typeof_pyval(a) for a in args]
        return [self.body.typeof_pyval(args[value]) for value, _ in self.layout()]

    @functools.cached_property
    def parameter_names(self) -> list[str] | None:
        """The body's parameters after the index (None where the body does not say)."""
        import inspect

        if numba_frontend.is_dispatcher(self.body):
            return list(inspect.signature(self.body.py_func).parameters)[1:]
        if hasattr(self.body, "visible_params"):
            params = [p for _, p in self.body.visible_params]
            if not params or params[0].dtype != np.dtype(np.int64):
                return None  # not a body: the range driver says what is wrong
            return [p.name for p in params[1:]]
        return None

    def argument_names(self) -> list[str] | None:
        """What ``launch`` takes after ``n`` (None where the body does not say)."""
        names = self.parameter_names
        if names is None or self.derivative_of is None:
            return names
        with_shadows = []  # derivative() made the activities fit the parameters
        for name, (_, shadow) in zip(names, self.layout(), strict=True):
            with_shadows += [name, f"the shadow of {name}"] if shadow is not None else [name]
        return with_shadows

    def describe_argument(self, position: int, param: Param) -> str:
        """How argument errors name parameter ``position`` of a launcher, whose first two
        are its range: as ``launch`` counts its arguments, after n."""
        names = self.argument_names()
        k = position - 2
        name = names[k] if names is not None and 0 <= k < len(names) else param.name
        return f"{name} (argument {k + 1} after n) of kernel {self.name}"
