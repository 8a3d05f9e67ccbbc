"""JAX bridge: an enzyme_py function as a JAX function with a custom VJP or JVP.

See :func:`primitive` for the conventions. A C or IR function's ``double*`` parameter
needs float64 data, which JAX only makes with ``jax.config.update("jax_enable_x64",
True)``; in JAX's default 32-bit mode such a call is a ``ValueError`` naming the
parameter (data is not up-cast: the function would compute in float64 what JAX would
then round to float32 anyway). Numba functions are compiled for the dtypes they get.
Needs the ``enzyme_py[jax]`` extra (``jax``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from enzyme_py._bridge import TAPES, HostKernel, SavedTape, TapeRegistry, first_float_dtype
from enzyme_py._signature import Param
from enzyme_py._state import require_autodiff as _require_autodiff
from enzyme_py.frontends import IRFunction

__all__ = ["primitive", "tapes"]

#: The split-mode tapes the custom_vjp form keeps between its forward and backward
#: host calls (process-wide; see :func:`primitive`). ``tapes.limit(max_count,
#: max_bytes)`` sets its bounds (default 64 tapes, 256 MiB), ``tapes.limit(0)`` turns
#: split mode off; ``len(tapes)``, ``tapes.nbytes`` and ``tapes.clear()``.
tapes: TapeRegistry = TAPES

# One host call per batch element under jax.vmap: the host functions take unbatched
# arguments, as the function they call does.
_VMAP = "sequential"


def _host(value: Any) -> Any:
    array = np.asarray(value)
    if array.ndim == 0:
        return array.dtype.type(array)
    # JAX hands the callback read-only views; the function gets its own copy.
    return np.array(array, copy=True, order="C")


def primitive(f: Any, mode: str = "vjp") -> Callable[..., Any]:
    """``f``, a Numba, C or IR function returning a float, as a differentiable JAX function.

    ``g = ez.jax.primitive(f, mode)``; ``g(*args)`` returns a 0-d array ``f(*args)``,
    computed on the host through ``jax.pure_callback``. Each argument is what ``f``
    takes: a JAX or NumPy array for an array, a float or 0-d array for a scalar, an
    int for an integer. Python ints are constants (mark them ``static_argnums`` under
    ``jit``, or not: an int traced by ``jit`` is passed as a constant too); integer and
    bool arrays are constants; floating-point ones are differentiated. The result has
    the dtype of the first floating-point argument (float64 if there is none).

    - ``mode="vjp"`` (``jax.custom_vjp``): ``jax.grad``, ``jax.vjp``, ``jax.jacrev``
      by enzyme_py's reverse mode, in split mode: the forward host call is Enzyme's
      augmented forward pass, which keeps its tape in :data:`tapes` under an int32
      handle (a residual, next to the inputs); the backward host call takes that tape
      and runs only the reverse pass, then frees it. Where it finds no tape (split
      mode off or not applicable, the tape evicted, or taken by an earlier backward
      call: ``jax.vjp``'s pullback called a second time) or one made from other
      inputs (compared bit for bit), it recomputes (a combined reverse pass at the
      residual inputs, the same numbers). One tape serves all the cotangents of one
      backward call (``jacrev``); under ``vmap`` each batch element has its own.
      :data:`tapes` is bounded (64 tapes, 256 MiB by default, the oldest evicted
      first): a forward pass whose backward never runs holds its tape until then.
      JAX applies no forward mode to a custom_vjp function: ``jax.jvp`` and
      ``jax.jacfwd`` raise JAX's ``TypeError``.
    - ``mode="jvp"`` (``jax.custom_jvp``): ``jax.jvp``, ``jax.jacfwd``, ``jax.grad``,
      ``jax.vjp`` and ``jax.jacrev``. The tangent is <gradient, tangent>, the gradient
      by enzyme_py's reverse mode, so that JAX can transpose the rule for reverse
      mode: one host call per point for the value and any number of tangents (one
      reverse pass, whose forward half is the value).
    - both: ``jax.jit`` and ``jax.vmap`` (one host call per batch element; the
      custom_vjp form's backward, one host call for the whole batch). First
      derivatives only: ``jax.hessian`` or a grad of a grad raise
      ``NotImplementedError`` (use ``ez.hessian``).

    >>> import jax, jax.numpy as jnp, numba
    >>> import enzyme_py as ez
    >>> jax.config.update("jax_enable_x64", True)
    >>> @numba.njit
    ... def energy(x, k, n):
    ...     s = 0.0
    ...     for i in range(n):
    ...         s += k * x[i] ** 3
    ...     return s
    >>> e = ez.jax.primitive(energy, mode="jvp")
    >>> x = jnp.linspace(0.0, 1.0, 4)
    >>> bool(jnp.allclose(jax.grad(e)(x, 2.0, 4), 6.0 * x**2))
    True
    >>> bool(jnp.allclose(jax.jacfwd(e)(x, 2.0, 4), 6.0 * x**2))
    True
    >>> bool(jnp.allclose(jax.jit(jax.grad(e))(x, 2.0, 4), 6.0 * x**2))
    True
    >>> jax.vmap(e, in_axes=(0, None, None))(jnp.stack([x, 2 * x]), 2.0, 4).shape
    (2,)
    >>> v = ez.jax.primitive(energy)                    # custom_vjp, split mode
    >>> before = len(ez.jax.tapes)
    >>> value, pullback = jax.vjp(lambda a: v(a, 2.0, 4), x)
    >>> len(ez.jax.tapes) - before                      # the forward pass's tape, kept
    1
    >>> bool(jnp.allclose(pullback(1.0)[0], 6.0 * x**2)), len(ez.jax.tapes) - before
    (True, 0)
    """
    _require_autodiff("ez.jax.primitive")
    if mode not in ("vjp", "jvp"):
        raise ValueError(f"mode must be 'vjp' or 'jvp', not {mode!r}")
    kernel = HostKernel(f)
    made: dict[tuple[Any, ...], Callable[..., Any]] = {}
    name = str(getattr(f, "__name__", None) or getattr(f, "display_name", "enzyme_primitive"))
    # C and IR functions have fixed parameter dtypes, checked before JAX traces a call.
    params = _fixed_params(f)

    def build(statics: tuple[tuple[int, Any], ...], avals: tuple[Any, ...]) -> Callable[..., Any]:
        dtype = first_float_dtype(d for _, d in avals)
        out_type = jax.ShapeDtypeStruct((), dtype)
        # Positions (among the dynamic arguments) that are differentiated.
        diff = [k for k, (_, d) in enumerate(avals) if np.dtype(d).kind == "f"]
        positions = _dynamic_positions(statics, len(statics) + len(avals))
        nums = tuple(positions[k] for k in diff)
        grad_types = tuple(jax.ShapeDtypeStruct(avals[k][0], avals[k][1]) for k in diff)

        def value_on_host(*dynamic: Any) -> np.ndarray:
            args = _merge(statics, [_host(d) for d in dynamic])
            return np.asarray(kernel.value(args), dtype=dtype)

        def call(*dynamic: Any) -> Any:
            return jax.pure_callback(value_on_host, out_type, *dynamic, vmap_method=_VMAP)

        if mode == "vjp":
            return _split_vjp(kernel, call, statics, avals, nums, diff, name)

        def value_and_grads_on_host(*dynamic: Any) -> tuple[np.ndarray, ...]:
            args = _merge(statics, [_host(d) for d in dynamic])
            value, found = kernel.value_and_gradient(args, nums)
            return (
                np.asarray(value, dtype=dtype),
                *(
                    np.asarray(g, dtype=t.dtype).reshape(t.shape)
                    for g, t in zip(found, grad_types, strict=True)
                ),
            )

        # The value and the gradient with respect to each differentiated argument,
        # from one reverse pass (its forward half is the value's evaluation).
        value_and_grads = _first_order(
            lambda *dynamic: jax.pure_callback(
                value_and_grads_on_host, (out_type, *grad_types), *dynamic, vmap_method=_VMAP
            ),
            name,
        )

        forward = jax.custom_jvp(call)

        @forward.defjvp
        def jvp_rule(primals: tuple[Any, ...], tangents: tuple[Any, ...]) -> tuple[Any, Any]:
            # <gradient, tangent>, the gradient by enzyme_py's reverse mode: a map JAX
            # can transpose (jax.grad), batch (jacfwd: one host call for all tangents)
            # and jit. A host call of Enzyme's forward mode would be neither transposable
            # nor, through jax.custom_derivatives.linear_call, batchable. The value comes
            # from the same host call, not from a second evaluation of f.
            value, *unit = value_and_grads(*primals)
            dy = sum(
                (jnp.vdot(g, tangents[k]).astype(dtype) for g, k in zip(unit, diff, strict=True)),
                start=jnp.zeros((), dtype),
            )
            return value, dy

        return forward

    def apply(*args: Any) -> Any:
        statics = tuple(
            (i, a) for i, a in enumerate(args) if isinstance(a, (int, np.integer, np.bool_))
        )
        dynamic = [jnp.asarray(a) for i, a in enumerate(args) if i not in dict(statics)]
        if params is not None:
            _check_dtypes(name, params, args)
        avals = tuple((tuple(d.shape), np.dtype(d.dtype)) for d in dynamic)
        key = (statics, tuple((s, d.str) for s, d in avals))
        fn = made.get(key)
        if fn is None:
            fn = made[key] = build(statics, avals)
        return fn(*dynamic)

    apply.__name__ = name
    apply.__doc__ = f"{name} as a JAX function (derivatives by enzyme_py, mode={mode!r})."
    return apply


def _split_vjp(
    kernel: HostKernel,
    call: Callable[..., Any],
    statics: tuple[tuple[int, Any], ...],
    avals: tuple[Any, ...],
    nums: tuple[int, ...],
    diff: list[int],
    name: str,
) -> Callable[..., Any]:
    """The custom_vjp form, in split mode: its forward host call runs Enzyme's
    augmented forward pass and stores the tape in :data:`tapes` under a fresh int32
    handle, a residual next to the inputs; the backward host call takes the tape of
    that handle and runs only the reverse pass. Where there is no tape for the handle
    (0: split mode off or refused, or the tape was evicted or taken by an earlier
    backward call) or the tape was not made from these very inputs (compared bit for
    bit), the backward call recomputes: a combined reverse pass at the residual
    inputs, as without split mode."""
    dtype = first_float_dtype(d for _, d in avals)
    value_type = jax.ShapeDtypeStruct((), dtype)
    handle_type = jax.ShapeDtypeStruct((), np.int32)
    grad_types = tuple(jax.ShapeDtypeStruct(avals[k][0], avals[k][1]) for k in diff)

    def forward_on_host(*dynamic: Any) -> tuple[np.ndarray, np.ndarray]:
        values = [_host(d) for d in dynamic]
        args = _merge(statics, values)
        handle = 0
        if nums and TAPES.enabled:
            value, split = kernel.split_value(args, nums)
            if split is not None:
                handle = TAPES.put(SavedTape(split, values))
        else:
            value = kernel.value(args)
        return np.asarray(value, dtype=dtype), np.asarray(handle, dtype=np.int32)

    def backward_on_host(ct: Any, handle: Any, *dynamic: Any) -> tuple[np.ndarray, ...]:
        # vmap_method="expand_dims": under k vmaps every argument has k leading axes
        # (of size 1 where it is not batched); the handle's are all it has.
        handles = np.asarray(handle)
        arrays = [np.asarray(ct), *(np.asarray(d) for d in dynamic)]
        k = handles.ndim
        batch = np.broadcast_shapes(handles.shape, *(a.shape[:k] for a in arrays))
        out = [np.empty(batch + t.shape, dtype=t.dtype) for t in grad_types]
        taken: dict[int, SavedTape | None] = {}
        for lane in np.ndindex(*batch):
            h = int(_lane(handles, lane))
            seed, *values = (_lane(a, lane) for a in arrays)
            if h not in taken:  # each tape serves every lane of this call, then is freed
                taken[h] = TAPES.take(h) if h else None
            saved = taken[h]
            if saved is not None and saved.made_from(values):
                found = saved.split.pull(float(seed))
            else:
                args = _merge(statics, [_host(v) for v in values])
                found = kernel.gradient(args, nums, float(seed))
            for o, g, t in zip(out, found, grad_types, strict=True):
                o[lane] = np.asarray(g, dtype=t.dtype).reshape(t.shape)
        return tuple(out)

    augmented = _first_order(
        lambda *dynamic: jax.pure_callback(
            forward_on_host, (value_type, handle_type), *dynamic, vmap_method=_VMAP
        ),
        name,
    )
    # ct * gradient with respect to each differentiated argument (reverse mode).
    reverse = _first_order(
        lambda ct, handle, *dynamic: jax.pure_callback(
            backward_on_host, grad_types, ct, handle, *dynamic, vmap_method="expand_dims"
        ),
        name,
    )
    wrapped = jax.custom_vjp(call)

    def fwd(*dynamic: Any) -> tuple[Any, Any]:
        value, handle = augmented(*dynamic)
        return value, (handle, dynamic)

    def bwd(saved: Any, cotangent: Any) -> tuple[Any, ...]:
        handle, dynamic = saved
        found = iter(reverse(cotangent, handle, *dynamic))
        # None: the zero cotangent of an integer argument (a constant).
        return tuple(next(found) if k in diff else None for k in range(len(avals)))

    wrapped.defvjp(fwd, bwd)
    return wrapped


def _lane(a: np.ndarray, lane: tuple[int, ...]) -> Any:
    """Batch element ``lane`` of ``a`` (its leading axes; index 0 of an axis of size 1)."""
    return a[tuple(0 if n == 1 else i for n, i in zip(a.shape, lane, strict=False))]


def _first_order(callback: Callable[..., Any], name: str) -> Callable[..., Any]:
    """``callback`` (a host call), refusing to be differentiated with a message of its
    own instead of JAX's about pure callbacks."""
    wrapped = jax.custom_jvp(callback)

    @wrapped.defjvp
    def refuse(primals: tuple[Any, ...], tangents: tuple[Any, ...]) -> Any:
        raise NotImplementedError(
            f"ez.jax.primitive('{name}') is differentiable once: jax.hessian, a grad of "
            "a grad or a jvp of a jvp need second derivatives, which the bridge does not "
            "provide; use ez.hessian(f), or ez.autodiff of a derivative (forward over "
            "reverse)"
        )

    return wrapped


def _fixed_params(f: Any) -> list[Param] | None:
    """The visible parameters of a C or IR function; None for others (Numba functions
    are compiled for the dtypes they are given; autodiff checks the rest)."""
    return [p for _, p in f.visible_params] if isinstance(f, IRFunction) else None


def _check_dtypes(name: str, params: list[Param], args: tuple[Any, ...]) -> None:
    """An array of the wrong dtype for a pointer parameter fails inside JAX's callback,
    where its message is buried in JAX's; say it here, before tracing."""
    for i, (p, a) in enumerate(zip(params, args, strict=False)):
        if p.kind == "int" and not isinstance(a, (int, np.integer, np.bool_)):
            got = np.dtype(jnp.asarray(a).dtype)
            if got.kind == "f":
                raise TypeError(
                    f"ez.jax.primitive('{name}'): {p.describe(i)} is an integer; got a "
                    f"{got} value: pass a Python int (a constant, also when jit traces it) "
                    "or an integer array"
                )
            continue
        if p.kind != "pointer" or p.dtype is None or isinstance(a, int):
            continue
        got = np.dtype(jnp.asarray(a).dtype)
        if got == p.dtype:
            continue
        if p.dtype == np.float64 and jax.dtypes.canonicalize_dtype(np.float64) != p.dtype:
            raise ValueError(
                f"ez.jax.primitive('{name}'): {p.describe(i)} needs a float64 array, but JAX "
                f"made it {got} because its 64-bit mode is off: call "
                'jax.config.update("jax_enable_x64", True) at startup, or pass float32 '
                "data to a function whose parameter is float32 (float*)"
            )
        raise ValueError(
            f"ez.jax.primitive('{name}'): {p.describe(i)} needs a {p.dtype} array; got "
            f"{got}: convert it with .astype(jnp.{p.dtype})"
        )


def _merge(statics: tuple[tuple[int, Any], ...], dynamic: list[Any]) -> list[Any]:
    n = len(statics) + len(dynamic)
    fixed = dict(statics)
    it = iter(dynamic)
    return [fixed[i] if i in fixed else next(it) for i in range(n)]


def _dynamic_positions(statics: tuple[tuple[int, Any], ...], n: int) -> list[int]:
    fixed = {i for i, _ in statics}
    return [i for i in range(n) if i not in fixed]
