"""PyTorch bridge: an enzyme_py function as a ``torch.autograd.Function``.

    import enzyme_py as ez
    loss = ez.torch.function(numba_loss)      # f(x: array, ..., k: float, n: int) -> float
    y = loss(x_tensor, k_tensor, 10)          # differentiable in PyTorch
    y.backward()

Tensors go to the function as NumPy arrays without copies (CPU tensors; a
non-contiguous one is made contiguous). The backward pass is enzyme_py's reverse
derivative: tensors that require grad are Duplicated (arrays) or Active (0-d),
everything else is Const. Needs the ``enzyme_py[torch]`` extra (``torch``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from enzyme_py._state import require_autodiff as _require_autodiff
from enzyme_py.core import ActiveOnly, Const, Forward
from enzyme_py.helpers import _Derivatives, _reverse_call

__all__ = ["function"]


def _to_numpy(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        if value.device.type != "cpu":
            raise TypeError("enzyme_py.torch works on CPU tensors; move the tensor with .cpu()")
        array = value.detach().contiguous().numpy()
        return array if array.ndim else array.dtype.type(array)
    return value


def function(f: Any) -> Callable[..., torch.Tensor]:
    """``f`` (Numba, C or IR function returning a float) as a PyTorch autograd op."""
    _require_autodiff("ez.torch.function")
    derivatives = _Derivatives(f)

    class EnzymeFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, *args: Any) -> torch.Tensor:
            values = [_to_numpy(a) for a in args]
            primal = derivatives.get(Forward, [Const] * len(values), Const)
            result = primal(*[v.copy() if isinstance(v, np.ndarray) else v for v in values])
            ctx.save_for_backward(*[a for a in args if isinstance(a, torch.Tensor)])
            ctx.args = args
            dtype = next(
                (a.dtype for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()),
                torch.float64,
            )
            return torch.tensor(result, dtype=dtype)

        @staticmethod
        def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[Any, ...]:
            args = ctx.args
            values = [_to_numpy(a) for a in args]
            nums = tuple(
                i
                for i, a in enumerate(args)
                if isinstance(a, torch.Tensor) and ctx.needs_input_grad[i]
            )
            _, found = _reverse_call(
                derivatives,
                [v.copy() if isinstance(v, np.ndarray) else v for v in values],
                nums,
                ActiveOnly,
                float(grad_output),
            )
            by_index = dict(zip(nums, found, strict=True))
            grads: list[Any] = []
            for i, a in enumerate(args):
                g = by_index.get(i)
                if g is None:
                    grads.append(None)
                elif isinstance(g, np.ndarray):
                    grads.append(torch.from_numpy(g).reshape(a.shape))
                else:
                    grads.append(torch.tensor(g, dtype=a.dtype))
            return tuple(grads)

    def apply(*args: Any) -> torch.Tensor:
        return EnzymeFunction.apply(*args)

    apply.__name__ = getattr(f, "__name__", "enzyme_function")
    apply.__doc__ = f"{apply.__name__} as a PyTorch autograd op (enzyme_py reverse mode)."
    return apply
