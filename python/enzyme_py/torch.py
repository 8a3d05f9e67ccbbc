"""PyTorch bridge: an enzyme_py function as a ``torch.autograd.Function``.

    import enzyme_py as ez
    loss = ez.torch.function(numba_loss)      # f(x: array, ..., k: float, n: int) -> float
    y = loss(x_tensor, k_tensor, 10)          # differentiable in PyTorch
    y.backward()

Tensors go to the function as NumPy arrays without copies (CPU tensors; a
non-contiguous one is made contiguous). The backward pass is enzyme_py's reverse
derivative: tensors that require grad are Duplicated (arrays) or Active (0-d),
everything else is Const. The backward pass is differentiable once more
(``torch.autograd.grad(..., create_graph=True)``, ``gradgradcheck``): its derivative is
a Hessian-vector product, enzyme_py's forward mode over its reverse mode. A third
derivative is a ``RuntimeError``. Needs the ``enzyme_py[torch]`` extra (``torch``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from enzyme_py._api import autodiff
from enzyme_py._derivative import Derivative
from enzyme_py._state import require_autodiff as _require_autodiff
from enzyme_py.core import (
    Active,
    ActiveOnly,
    Activity,
    Const,
    Dual,
    DualOnly,
    Duplicated,
    Forward,
    Reverse,
)
from enzyme_py.helpers import _activity, _Derivatives, _reverse_call

__all__ = ["function"]


def _to_numpy(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        if value.device.type != "cpu":
            raise TypeError("enzyme_py.torch works on CPU tensors; move the tensor with .cpu()")
        array = value.detach().contiguous().numpy()
        return array if array.ndim else array.dtype.type(array)
    return value


def _copies(values: Sequence[Any]) -> list[Any]:
    # The function may write into its arrays; the tensors behind them must not change.
    return [v.copy() if isinstance(v, np.ndarray) else v for v in values]


def _number(t: torch.Tensor) -> float:
    # Detached: float() of a tensor that requires grad (create_graph=True) warns.
    return float(t.detach())


def _as_tensor(value: Any, like: torch.Tensor) -> torch.Tensor:
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value).reshape(like.shape)
    return torch.tensor(value, dtype=like.dtype)


def _with_saved(args: tuple[Any, ...], saved: Sequence[torch.Tensor]) -> list[Any]:
    """``args`` with its tensors replaced by ``ctx.saved_tensors`` (same order)."""
    it = iter(saved)
    return [next(it) if isinstance(a, torch.Tensor) else a for a in args]


class _Gradient:
    """Gradients (reverse mode) and Hessian-vector products (forward over reverse) of f."""

    def __init__(self, f: Any):
        self.derivatives = _Derivatives(f)

    def gradient(self, values: list[Any], nums: tuple[int, ...], seed: float) -> tuple[Any, ...]:
        """seed times the gradient of f with respect to each argument in nums."""
        _, found = _reverse_call(self.derivatives, _copies(values), nums, ActiveOnly, seed)
        return tuple(found)

    def hessian_vector(
        self, values: list[Any], nums: tuple[int, ...], tangents: dict[int, Any], seed: float
    ) -> dict[int, Any]:
        """seed * H v per argument in nums: H is f's Hessian over them, v the tangents."""
        acts = [_activity(v, i, Reverse) if i in nums else Const for i, v in enumerate(values)]
        reverse: Any = self.derivatives.get(Reverse, acts, ActiveOnly)
        if not isinstance(reverse, Derivative):  # a Numba derivative: its specialisation
            reverse_args: list[Any] = []
            for v, act in zip(values, acts, strict=True):
                reverse_args += [v, np.zeros_like(v)] if act is Duplicated else [v]
            reverse = reverse.for_arguments((*reverse_args, seed))
        # The reverse derivative's parameters: each argument (and its shadow), the seed.
        fwd_acts: list[Activity] = []
        call: list[Any] = []
        products: dict[int, Any] = {}
        for i, (v, act) in enumerate(zip(_copies(values), acts, strict=True)):
            call.append(v)
            if act is Active:
                fwd_acts.append(Dual)
                call.append(float(tangents[i]))
            elif act is Duplicated:
                fwd_acts += [Dual, Dual]  # the shadow's tangent is where H v lands
                products[i] = np.zeros_like(v)
                call += [np.array(tangents[i], dtype=v.dtype), np.zeros_like(v), products[i]]
            else:
                fwd_acts.append(Const)
        fwd_acts.append(Const)
        call.append(seed)
        # Adjoints of Active scalars are the reverse derivative's return value.
        returns = [DualOnly] if any(a is Active for a in acts) else []
        result = autodiff(reverse, Forward, *fwd_acts, *returns)(*call)
        scalars = iter(result if returns else ())
        for i, act in enumerate(acts):
            if act is Active:
                products[i] = next(scalars)
        return products


def function(f: Any) -> Callable[..., torch.Tensor]:
    """``f`` (Numba, C or IR function returning a float) as a PyTorch autograd op.

    Its backward pass is differentiable once more (Hessian-vector products by forward
    over reverse mode), not twice.
    """
    _require_autodiff("ez.torch.function")
    derivatives = _Gradient(f)
    name = getattr(f, "__name__", "enzyme_function")

    class EnzymeSecondDerivative(torch.autograd.Function):
        """The derivative of <v, seed * gradient of f>: seed * H v with respect to the
        arguments wanted, <v, gradient of f> with respect to the seed if wanted."""

        @staticmethod
        def forward(
            ctx: Any,
            nums: tuple[int, ...],
            wanted: tuple[int, ...],
            want_seed: bool,
            seed: torch.Tensor,
            *rest: Any,
        ) -> tuple[torch.Tensor, ...]:
            vs, args = rest[: len(nums)], rest[len(nums) :]
            values = [_to_numpy(a) for a in args]
            tangents = {i: _to_numpy(v) for i, v in zip(nums, vs, strict=True)}
            out: list[torch.Tensor] = []
            if wanted:
                products = derivatives.hessian_vector(values, nums, tangents, _number(seed))
                out += [_as_tensor(products[i], args[i]) for i in wanted]
            if want_seed:
                unit = derivatives.gradient(values, nums, 1.0)
                along = sum(float(np.sum(tangents[i] * g)) for i, g in zip(nums, unit, strict=True))
                out.append(torch.tensor(along, dtype=seed.dtype).reshape(seed.shape))
            return tuple(out)

        @staticmethod
        def backward(ctx: Any, *unused: Any) -> tuple[Any, ...]:
            # Refused here, not by once_differentiable: that one lets a third derivative
            # through as zero when only the saved inputs require grad.
            raise RuntimeError(
                f"ez.torch.function('{name}'): third derivatives are not supported; its "
                "backward pass is differentiable once (Hessian-vector products): use "
                "create_graph=True at most once, or ez.autodiff of a derivative for more"
            )

    class EnzymeGradient(torch.autograd.Function):
        """seed * gradient of f: the backward pass of EnzymeFunction as an op of its own,
        so that PyTorch can differentiate it (double backward)."""

        @staticmethod
        def forward(
            ctx: Any, nums: tuple[int, ...], seed: torch.Tensor, *args: Any
        ) -> tuple[torch.Tensor, ...]:
            found = derivatives.gradient([_to_numpy(a) for a in args], nums, _number(seed))
            ctx.save_for_backward(seed, *[a for a in args if isinstance(a, torch.Tensor)])
            ctx.nums, ctx.args = nums, args
            return tuple(_as_tensor(g, args[i]) for i, g in zip(nums, found, strict=True))

        @staticmethod
        def backward(ctx: Any, *vs: torch.Tensor) -> tuple[Any, ...]:
            seed, *saved = ctx.saved_tensors
            args = _with_saved(ctx.args, saved)
            nums: tuple[int, ...] = ctx.nums
            wanted = tuple(i for i in nums if ctx.needs_input_grad[2 + i])
            want_seed = bool(ctx.needs_input_grad[1])
            grads: list[Any] = [None, None] + [None] * len(args)
            if not wanted and not want_seed:
                return tuple(grads)
            found = iter(EnzymeSecondDerivative.apply(nums, wanted, want_seed, seed, *vs, *args))
            for i in wanted:
                grads[2 + i] = next(found)
            if want_seed:
                grads[1] = next(found)
            return tuple(grads)

    class EnzymeFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, *args: Any) -> torch.Tensor:
            values = [_to_numpy(a) for a in args]
            primal = derivatives.derivatives.get(Forward, [Const] * len(values), Const)
            result = primal(*_copies(values))
            ctx.save_for_backward(*[a for a in args if isinstance(a, torch.Tensor)])
            ctx.args = args
            dtype = next(
                (a.dtype for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()),
                torch.float64,
            )
            return torch.tensor(result, dtype=dtype)

        @staticmethod
        def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[Any, ...]:
            args = _with_saved(ctx.args, ctx.saved_tensors)
            nums = tuple(
                i
                for i, a in enumerate(args)
                if isinstance(a, torch.Tensor) and ctx.needs_input_grad[i]
            )
            found = EnzymeGradient.apply(nums, grad_output, *args)
            by_index = dict(zip(nums, found, strict=True))
            return tuple(by_index.get(i) for i in range(len(args)))

    def apply(*args: Any) -> torch.Tensor:
        return EnzymeFunction.apply(*args)

    apply.__name__ = name
    apply.__doc__ = f"{apply.__name__} as a PyTorch autograd op (enzyme_py reverse mode)."
    return apply
