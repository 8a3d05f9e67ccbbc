"""PyTorch bridge: an enzyme_py function as a ``torch.autograd.Function``.

See :func:`function` for the conventions. Needs the ``enzyme_py[torch]`` extra.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from enzyme_py._bridge import HostKernel
from enzyme_py._state import require_autodiff as _require_autodiff

__all__ = ["function"]


def _to_numpy(value: Any) -> Any:
    """A tensor as NumPy: its own memory when contiguous (a copy otherwise), a 0-d
    tensor as a NumPy scalar."""
    if isinstance(value, torch.Tensor):
        if value.device.type != "cpu":
            raise TypeError("enzyme_py.torch works on CPU tensors; move the tensor with .cpu()")
        array = value.detach().contiguous().resolve_conj().resolve_neg().numpy()
        return array if array.ndim else array.dtype.type(array)
    return value


def _number(t: torch.Tensor) -> float:
    # Detached: float() of a tensor that requires grad (create_graph=True) warns.
    return float(t.detach())


def _as_tensor(value: Any, like: torch.Tensor) -> torch.Tensor:
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value).reshape(like.shape)
    return torch.tensor(value, dtype=like.dtype)


def _dtype(args: Sequence[Any]) -> torch.dtype:
    return next(
        (a.dtype for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()),
        torch.float64,
    )


def _save(ctx: Any, inputs: Sequence[Any]) -> None:
    """Keep the tensors among inputs for backward and jvp, the rest as they are."""
    tensors = [a for a in inputs if isinstance(a, torch.Tensor)]
    ctx.save_for_backward(*tensors)
    ctx.save_for_forward(*tensors)
    ctx.inputs = tuple(None if isinstance(a, torch.Tensor) else a for a in inputs)


def _saved(ctx: Any) -> list[Any]:
    it = iter(ctx.saved_tensors)
    return [next(it) if a is None else a for a in ctx.inputs]


def _float_tensor(a: Any) -> bool:
    return isinstance(a, torch.Tensor) and a.is_floating_point()


def _loop(op: Any, info: Any, in_dims: Sequence[Any], inputs: Sequence[Any]) -> Any:
    """A vmap rule that calls ``op`` once per batch element and stacks the results."""
    results = []
    for b in range(info.batch_size):
        sliced = [
            a.select(d, b) if isinstance(a, torch.Tensor) and d is not None else a
            for a, d in zip(inputs, in_dims, strict=True)
        ]
        results.append(op.apply(*sliced))
    if isinstance(results[0], tuple):
        stacked = tuple(torch.stack(parts) for parts in zip(*results, strict=True))
        return stacked, (0,) * len(stacked)
    return torch.stack(results), 0


class _Op(torch.autograd.Function):
    """The methods the bridge's ops share: ``setup_context`` keeps the inputs for
    ``backward`` and ``jvp`` (:func:`_save`); ``vmap`` calls the op once per batch
    element (:func:`_loop`) unless the op batches better."""

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        _save(ctx, inputs)

    @classmethod
    def vmap(cls, info: Any, in_dims: Any, *inputs: Any) -> Any:
        return _loop(cls, info, in_dims, inputs)


def _hessian_error(name: str, what: str) -> RuntimeError:
    return RuntimeError(
        f"ez.torch.function('{name}'): {what} are not supported: its derivatives are "
        "differentiable once (Hessian-vector products, torch.func.hessian, "
        "jacfwd(jacrev(f))): use create_graph=True at most once, or ez.autodiff of a "
        "derivative for more"
    )


def function(f: Any) -> Callable[..., torch.Tensor]:
    """``f``, a Numba, C or IR function returning a float, as a PyTorch function.

    ``g = ez.torch.function(f)``; ``g(*args)`` returns a 0-d tensor ``f(*args)``. Each
    argument is what ``f`` takes: a CPU tensor for an array (float64 or float32; a
    contiguous tensor is passed as its own memory, another is copied), a 0-d tensor or
    a Python number for a scalar, a Python int for an integer. The result has the dtype
    of the first floating-point tensor argument (float64 if there is none).

    Derivatives (Enzyme's) with respect to every floating-point tensor argument:

    - ``backward`` / ``torch.autograd.grad``: reverse mode; ``torch.func.grad``,
      ``vjp`` and ``jacrev`` too. When a float tensor argument requires grad, the
      forward pass is Enzyme's augmented forward pass and keeps its tape (split mode)
      until the graph is freed; ``backward`` then runs only the reverse pass (twice
      with ``retain_graph=True``). With ``create_graph=True``, under ``torch.func``,
      or where split mode does not apply, ``backward`` recomputes (a combined reverse
      pass).
    - forward mode: ``torch.func.jvp``, ``jacfwd`` and ``torch.autograd.forward_ad``
      (``jacfwd`` batches its tangents through Enzyme's width).
    - ``torch.vmap``: one call of ``f`` per batch element (each is another point:
      Enzyme's width batches directions at one point, not points).
    - once more, in any order: ``create_graph=True`` (``gradgradcheck``),
      ``torch.func.hessian``, ``jacfwd`` / ``jacrev`` of ``jacfwd`` / ``jacrev``
      (Hessian-vector products by forward over reverse mode; ``torch.func.hessian``
      and ``jacfwd(jacrev(...))`` take their columns 8 at a time through Enzyme's
      width where only array arguments are differentiated). A third derivative
      raises ``RuntimeError``.

    ``f`` gets the tensors' memory without a copy where it provably does not write
    into its arrays (a Numba function, checked once per argument types by typing it
    with read-only arrays); a C or IR function gets copies.

    >>> import math, numba, torch
    >>> import enzyme_py as ez
    >>> @numba.njit
    ... def energy(x, k):
    ...     s = 0.0
    ...     for v in x:
    ...         s += k * math.sin(v) ** 2
    ...     return s
    >>> e = ez.torch.function(energy)
    >>> x = torch.linspace(0.0, 1.0, 4, dtype=torch.float64)
    >>> g = torch.func.grad(e)(x, 2.0)                 # 2 k sin(x) cos(x)
    >>> torch.allclose(g, 2.0 * torch.sin(2 * x))
    True
    >>> h = torch.func.hessian(e)(x, 2.0)              # diagonal: 2 k cos(2x)
    >>> torch.allclose(h, torch.diag(4.0 * torch.cos(2 * x)))
    True
    >>> torch.vmap(e, in_dims=(0, None))(torch.stack([x, 2 * x]), 2.0).shape
    torch.Size([2])
    """
    _require_autodiff("ez.torch.function")
    kernel = HostKernel(f)
    name = getattr(f, "__name__", "enzyme_function")

    class EnzymeSecondDerivative(_Op):
        """seed * H v with respect to the arguments ``wanted`` (H over ``nums``, which
        holds them; v the tangents given for ``nums``), and <v, gradient of f> if
        ``want_seed``: the derivatives of the gradient and tangent ops below."""

        @staticmethod
        def forward(
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
                products = kernel.hessian_vector(values, nums, tangents, _number(seed))
                out += [_as_tensor(products[i], args[i]) for i in wanted]
            if want_seed:
                unit = kernel.gradient(values, nums, 1.0)
                along = sum(float(np.sum(tangents[i] * g)) for i, g in zip(nums, unit, strict=True))
                out.append(torch.tensor(along, dtype=seed.dtype).reshape(seed.shape))
            return tuple(out)

        @staticmethod
        def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
            pass  # nothing to keep: its derivatives are refused

        @classmethod
        def vmap(cls, info: Any, in_dims: Any, *inputs: Any) -> Any:
            nums, wanted, want_seed, seed, *rest = inputs
            dims_v, dims_a = in_dims[4 : 4 + len(nums)], in_dims[4 + len(nums) :]
            vs, args = rest[: len(nums)], rest[len(nums) :]
            plain = not any(
                isinstance(t, torch.Tensor) and torch._C._functorch.is_functorch_wrapped_tensor(t)
                for t in (seed, *rest)
            )  # wrapped: transforms outside this vmap (a third derivative) see each call
            fast, keep = False, nums
            if plain and wanted and not want_seed and in_dims[3] is None:
                # An argument with the same zero tangent in every lane adds nothing.
                keep = tuple(
                    i
                    for i, v, d in zip(nums, vs, dims_v, strict=True)
                    if i in wanted or d is not None or bool(torch.any(v != 0))
                )
                fast = all(d is None for d in dims_a) and all(args[i].dim() > 0 for i in keep)
            if fast:
                # Only the tangents are batched (torch.func.hessian, jacfwd(jacrev)):
                # H is linear in them, so Enzyme's width takes them in batches.
                batched = {
                    i: v.unsqueeze(0).expand(info.batch_size, *v.shape)
                    if d is None
                    else v.movedim(d, 0)
                    for i, v, d in zip(nums, vs, dims_v, strict=True)
                    if i in keep
                }
                products = kernel.hessian_vectors(
                    [_to_numpy(a) for a in args],
                    keep,
                    {i: _to_numpy(v.contiguous()) for i, v in batched.items()},
                    _number(seed),
                    info.batch_size,
                )
                out = tuple(torch.from_numpy(products[i]).to(dtype=args[i].dtype) for i in wanted)
                return out, (0,) * len(out)
            return super().vmap(info, in_dims, *inputs)

        @staticmethod
        def backward(ctx: Any, *unused: Any) -> tuple[Any, ...]:
            # Refused here, not by once_differentiable: that one lets a third derivative
            # through as zero when only the saved inputs require grad.
            raise _hessian_error(name, "third derivatives")

        @staticmethod
        def jvp(ctx: Any, *unused: Any) -> Any:
            raise _hessian_error(name, "third derivatives")

    def second(
        args: Sequence[Any],
        tangents: dict[int, Any],
        wanted: tuple[int, ...],
        seed: torch.Tensor,
    ) -> dict[int, torch.Tensor]:
        """seed * H v for each argument in wanted, v the tangents (zero where none)."""
        nums = tuple(sorted(set(tangents) | set(wanted)))
        vs = [tangents[i] if i in tangents else torch.zeros_like(args[i]) for i in nums]
        found = EnzymeSecondDerivative.apply(nums, wanted, False, seed, *vs, *args)
        return dict(zip(wanted, found, strict=True))

    class EnzymeGradient(_Op):
        """seed * gradient of f with respect to the arguments in nums: the backward pass
        of EnzymeFunction as an op of its own, so that PyTorch can differentiate it."""

        @staticmethod
        def forward(nums: tuple[int, ...], seed: torch.Tensor, *args: Any) -> tuple:
            found = kernel.gradient([_to_numpy(a) for a in args], nums, _number(seed))
            return tuple(_as_tensor(g, args[i]) for i, g in zip(nums, found, strict=True))

        @staticmethod
        def backward(ctx: Any, *vs: torch.Tensor) -> tuple[Any, ...]:
            nums, seed, *args = _saved(ctx)
            grads: list[Any] = [None] * (2 + len(args))
            wanted = tuple(i for i in range(len(args)) if ctx.needs_input_grad[2 + i])
            if wanted:
                tangents = {i: v for i, v in zip(nums, vs, strict=True) if v is not None}
                for i, g in second(args, tangents, wanted, seed).items():
                    grads[2 + i] = g
            if ctx.needs_input_grad[1]:
                (grads[1],) = EnzymeSecondDerivative.apply(nums, (), True, seed, *vs, *args)
            return tuple(grads)

        @staticmethod
        def jvp(ctx: Any, _nums: Any, dseed: Any, *dargs: Any) -> tuple[torch.Tensor, ...]:
            nums, seed, *args = _saved(ctx)
            tangents = {i: t for i, t in enumerate(dargs) if t is not None}
            out = [torch.zeros_like(args[i]) for i in nums]
            if tangents:
                products = second(args, tangents, nums, seed)
                out = [o + products[i] for o, i in zip(out, nums, strict=True)]
            if dseed is not None:
                along = EnzymeGradient.apply(nums, dseed, *args)
                out = [o + a for o, a in zip(out, along, strict=True)]
            return tuple(out)

        @classmethod
        def vmap(cls, info: Any, in_dims: Any, *inputs: Any) -> Any:
            nums, seed, *args = inputs
            if in_dims[1] is not None and all(d is None for d in in_dims[2:]):
                # Only the seed is batched (jacrev): the gradient is linear in it.
                unit = EnzymeGradient.apply(
                    nums, torch.ones_like(seed.select(in_dims[1], 0)), *args
                )
                seeds = seed.movedim(in_dims[1], 0)
                out = tuple(seeds.reshape(-1, *[1] * g.dim()) * g for g in unit)
                return out, (0,) * len(out)
            return super().vmap(info, in_dims, *inputs)

    class TangentOp(_Op):
        """<gradient of f, t> by forward mode, t the tangents ts (one per argument in
        nums), with ``leading`` batch axes on each: its inputs are ``nums, *ts,
        *args``. The derivatives its two forms share."""

        leading = 0

        @classmethod
        def backward(cls, ctx: Any, along: torch.Tensor) -> tuple[Any, ...]:
            """``along`` the incoming gradient, of the shape of the batch."""
            nums, *rest = _saved(ctx)
            ts, args = rest[: len(nums)], rest[len(nums) :]
            grads: list[Any] = [None] * (1 + len(rest))
            want_t = [k for k in range(len(nums)) if ctx.needs_input_grad[1 + k]]
            if want_t:
                unit = EnzymeGradient.apply(nums, torch.ones((), dtype=along.dtype), *args)
                for k in want_t:
                    shape = (*along.shape, *[1] * unit[k].dim())
                    grads[1 + k] = along.reshape(shape) * unit[k]
            wanted = tuple(i for i in range(len(args)) if ctx.needs_input_grad[1 + len(nums) + i])
            if wanted:
                # sum over the batch of along_b * H t_b = H (sum of along_b t_b): H is linear.
                def combined(t: torch.Tensor) -> torch.Tensor:
                    if not cls.leading:
                        return along * t
                    return torch.tensordot(along, t, dims=cls.leading)

                tangents = {i: combined(t) for i, t in zip(nums, ts, strict=True)}
                one = torch.ones((), dtype=along.dtype)
                for i, g in second(args, tangents, wanted, one).items():
                    grads[1 + len(nums) + i] = g
            return tuple(grads)

        @classmethod
        def jvp(cls, ctx: Any, _nums: Any, *tangents: Any) -> torch.Tensor:
            """The tangent along the tangents of t and of the arguments: <gradient of
            f, dt> + <H s, t>, s the arguments' tangents."""
            nums, *rest = _saved(ctx)
            ts, args = rest[: len(nums)], rest[len(nums) :]
            dts, dargs = tangents[: len(nums)], tangents[len(nums) :]
            dtype = _dtype(args)
            out = torch.zeros(ts[0].shape[: cls.leading], dtype=dtype)
            if any(dt is not None for dt in dts):
                full = [
                    torch.zeros_like(t) if dt is None else dt for t, dt in zip(ts, dts, strict=True)
                ]
                out = out + cls.apply(nums, *full, *args)
            moved = {i: s for i, s in enumerate(dargs) if s is not None}
            if moved:
                one = torch.ones((), dtype=dtype)
                products = second(args, moved, nums, one)
                for i, t in zip(nums, ts, strict=True):
                    hs = products[i]
                    out = out + torch.tensordot(t, hs, dims=hs.dim()) if hs.dim() else out + t * hs
            return out

    class EnzymeTangent(TangentOp):
        """<gradient of f, t> for one tangent per argument in nums."""

        @staticmethod
        def forward(nums: tuple[int, ...], *rest: Any) -> torch.Tensor:
            ts, args = rest[: len(nums)], rest[len(nums) :]
            values = [_to_numpy(a) for a in args]
            found = kernel.tangent(values, {i: _to_numpy(t) for i, t in zip(nums, ts, strict=True)})
            return torch.tensor(float(found), dtype=_dtype(args))

        @classmethod
        def vmap(cls, info: Any, in_dims: Any, *inputs: Any) -> Any:
            nums = inputs[0]
            dims_t, dims_a = in_dims[1 : 1 + len(nums)], in_dims[1 + len(nums) :]
            if all(d is None for d in dims_a):
                # Only tangents are batched (jacfwd): Enzyme's width, in batches.
                ts = [
                    t.unsqueeze(0).expand(info.batch_size, *t.shape)
                    if d is None
                    else t.movedim(d, 0)
                    for t, d in zip(inputs[1 : 1 + len(nums)], dims_t, strict=True)
                ]
                return EnzymeTangents.apply(nums, *ts, *inputs[1 + len(nums) :]), 0
            return super().vmap(info, in_dims, *inputs)

    class EnzymeTangents(TangentOp):
        """EnzymeTangent for a batch of tangents (a leading axis on each)."""

        leading = 1

        @staticmethod
        def forward(nums: tuple[int, ...], *rest: Any) -> torch.Tensor:
            ts, args = rest[: len(nums)], rest[len(nums) :]
            values = [_to_numpy(a) for a in args]
            count = ts[0].shape[0]
            tangents = {
                i: _to_numpy(t).reshape(count, *np.shape(values[i]))
                for i, t in zip(nums, ts, strict=True)
            }
            return torch.from_numpy(kernel.tangents(values, tangents, count)).to(_dtype(args))

    # Split mode: forward's tape, for setup_context to put into ctx (forward has no
    # ctx); a few at most, in case a forward is never followed by its setup_context
    # (or is given another tensor than forward returned). Each is kept with a weak
    # reference to its output: an id is reused once its tensor dies, and the tape of
    # a dead output must never serve another (a gradient at the old arguments).
    pending: OrderedDict[int, tuple[weakref.ref[torch.Tensor], tuple[int, ...], Any]] = (
        OrderedDict()
    )
    grad_mode = threading.local()  # .on: grad mode where apply was called

    class EnzymeFunction(_Op):
        @staticmethod
        def forward(*args: Any) -> torch.Tensor:
            values = [_to_numpy(a) for a in args]
            # The arguments a backward pass will want: float tensors requiring grad
            # (none under torch.func's transforms, whose tensors are wrapped), if the
            # call was made with grad mode on (forward itself runs with it off).
            nums = tuple(
                i
                for i, a in enumerate(args)
                if getattr(grad_mode, "on", False) and _float_tensor(a) and a.requires_grad
            )
            split = None
            if nums:
                result, split = kernel.split_value(values, nums)
            else:
                result = kernel.value(values)
            out = torch.tensor(result, dtype=_dtype(args))
            if split is not None:
                pending[id(out)] = (weakref.ref(out), nums, split)
                while len(pending) > 16:
                    pending.popitem(last=False)
            return out

        @staticmethod
        def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
            _save(ctx, inputs)
            kept = pending.pop(id(output), None)
            ctx.split = kept[1:] if kept is not None and kept[0]() is output else None

        @staticmethod
        def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[Any, ...]:
            args = _saved(ctx)
            nums = tuple(
                i for i, a in enumerate(args) if _float_tensor(a) and ctx.needs_input_grad[i]
            )
            if not nums:
                return (None,) * len(args)
            split = getattr(ctx, "split", None)
            if (
                split is not None
                and set(nums) <= set(split[0])
                and not torch.is_grad_enabled()  # create_graph: the differentiable op below
                and not torch._C._functorch.is_functorch_wrapped_tensor(grad_output)
            ):
                # The reverse pass only, from the tape forward kept.
                found = dict(zip(split[0], split[1].pull(_number(grad_output)), strict=True))
                return tuple(
                    _as_tensor(found[i], args[i]) if i in nums else None for i in range(len(args))
                )
            by_index = dict(zip(nums, EnzymeGradient.apply(nums, grad_output, *args), strict=True))
            return tuple(by_index.get(i) for i in range(len(args)))

        @staticmethod
        def jvp(ctx: Any, *tangents: Any) -> torch.Tensor:
            args = _saved(ctx)
            nums = tuple(
                i for i, t in enumerate(tangents) if t is not None and _float_tensor(args[i])
            )
            if not nums:
                return torch.zeros((), dtype=_dtype(args))
            return EnzymeTangent.apply(nums, *[tangents[i] for i in nums], *args)

    def apply(*args: Any) -> torch.Tensor:
        outer = getattr(grad_mode, "on", False)
        grad_mode.on = torch.is_grad_enabled()
        try:
            return EnzymeFunction.apply(*args)
        finally:
            grad_mode.on = outer

    apply.__name__ = name
    apply.__doc__ = f"{name} as a PyTorch function (derivatives by enzyme_py)."
    return apply
