"""JAX bridge: an enzyme_py function as a JAX-callable with a custom VJP (or JVP).

    import enzyme_py as ez
    loss = ez.jax.primitive(numba_loss)           # f(x: array, ..., n: int) -> float
    jax.grad(loss)(x, 10)                         # reverse mode through enzyme_py
    jax.jit(loss, static_argnums=1)(x, 10)        # under jit too

The function runs through ``jax.pure_callback`` on the host. Python ints are passed
as constants (mark them static under ``jit``); float arrays and scalars are
differentiable. ``mode="vjp"`` (default) supports ``jax.grad``/``jax.vjp``;
``mode="jvp"`` supports ``jax.jvp`` (forward mode) instead — JAX allows one kind of
custom rule per function. ``jax.vmap`` works (one host call per batch element).
Derivatives are first order only: ``jax.hessian``, a grad of a grad or a jvp of a jvp
raise ``NotImplementedError`` (use ``ez.hessian``, or ``ez.autodiff`` of a derivative).

A C or IR function's ``double*`` parameter needs float64 data, which JAX only makes
with ``jax.config.update("jax_enable_x64", True)``; in JAX's default 32-bit mode such
a call is a ``ValueError`` naming the parameter (data is not up-cast: the function
would compute in float64 what JAX would then round to float32 anyway). Numba
functions are compiled for the dtypes they get. Needs the ``enzyme_py[jax]`` extra
(``jax``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from enzyme_py._signature import Param
from enzyme_py._state import require_autodiff as _require_autodiff
from enzyme_py.core import ActiveOnly, Activity, Const, Dual, Forward
from enzyme_py.frontends import IRFunction
from enzyme_py.helpers import _Derivatives, _reverse_call

__all__ = ["primitive"]

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
    """``f`` (Numba, C or IR function returning a float) as a differentiable JAX function."""
    _require_autodiff("ez.jax.primitive")
    if mode not in ("vjp", "jvp"):
        raise ValueError(f"mode must be 'vjp' or 'jvp', not {mode!r}")
    derivatives = _Derivatives(f)
    made: dict[tuple[Any, ...], Callable[..., Any]] = {}
    name = str(getattr(f, "__name__", None) or getattr(f, "display_name", "enzyme_primitive"))
    # C and IR functions have fixed parameter dtypes, checked before JAX traces a call.
    params = _fixed_params(f)

    def value_on_host(statics: tuple[tuple[int, Any], ...], *dynamic: Any) -> np.ndarray:
        args = _merge(statics, [_host(d) for d in dynamic])
        primal = derivatives.get(Forward, [Const] * len(args), Const)
        return np.asarray(primal(*args), dtype=_result_dtype(dynamic))

    def build(statics: tuple[tuple[int, Any], ...], dtypes: tuple[Any, ...]) -> Callable[..., Any]:
        out_type = jax.ShapeDtypeStruct((), _result_dtype_of(dtypes))

        def call(*dynamic: Any) -> Any:
            return jax.pure_callback(
                lambda *d: value_on_host(statics, *d), out_type, *dynamic, vmap_method=_VMAP
            )

        if mode == "vjp":
            wrapped = jax.custom_vjp(call)

            def fwd(*dynamic: Any) -> tuple[Any, Any]:
                # Differentiated only inside a second derivative: refused there.
                return _first_order(call, name)(*dynamic), dynamic

            def bwd(saved: Any, cotangent: Any) -> tuple[Any, ...]:
                shapes = tuple(jax.ShapeDtypeStruct(jnp.shape(d), d.dtype) for d in saved)

                def grads_on_host(ct: Any, *d: Any) -> tuple[np.ndarray, ...]:
                    values = [_host(v) for v in d]
                    args = _merge(statics, values)
                    dyn = _dynamic_positions(statics, len(args))
                    _, grads = _reverse_call(
                        derivatives,
                        [v.copy() if isinstance(v, np.ndarray) else v for v in args],
                        tuple(dyn),
                        ActiveOnly,
                        float(np.asarray(ct)),
                    )
                    return tuple(
                        g if isinstance(g, np.ndarray) else np.asarray(g, dtype=values[k].dtype)
                        for k, g in enumerate(grads)
                    )

                def grads(*ct_saved: Any) -> Any:
                    return jax.pure_callback(grads_on_host, shapes, *ct_saved, vmap_method=_VMAP)

                return _first_order(grads, name)(cotangent, *saved)

            wrapped.defvjp(fwd, bwd)
            return wrapped

        forward = jax.custom_jvp(call)

        @forward.defjvp
        def jvp_rule(primals: tuple[Any, ...], tangents: tuple[Any, ...]) -> tuple[Any, Any]:
            def on_host(*pt: Any) -> tuple[np.ndarray, np.ndarray]:
                n = len(pt) // 2
                values = [_host(v) for v in pt[:n]]
                tans = [_host(v) for v in pt[n:]]
                args = _merge(statics, values)
                dyn = _dynamic_positions(statics, len(args))
                acts: list[Activity] = [Const] * len(args)
                call_args: list[Any] = []
                for i, v in enumerate(args):
                    call_args.append(v.copy() if isinstance(v, np.ndarray) else v)
                    if i in dyn:
                        acts[i] = Dual
                        t = tans[dyn.index(i)]
                        call_args.append(t.copy() if isinstance(t, np.ndarray) else float(t))
                y, dy = derivatives.get(Forward, acts, Dual)(*call_args)
                dtype = _result_dtype(values)
                return np.asarray(y, dtype=dtype), np.asarray(dy, dtype=dtype)

            def tangent(*pt: Any) -> Any:
                return jax.pure_callback(on_host, (out_type, out_type), *pt, vmap_method=_VMAP)

            return tuple(_first_order(tangent, name)(*primals, *tangents))

        return forward

    def apply(*args: Any) -> Any:
        statics = tuple((i, a) for i, a in enumerate(args) if isinstance(a, int))
        dynamic = [jnp.asarray(a) for a in args if not isinstance(a, int)]
        if params is not None:
            _check_dtypes(name, params, args)
        key = (statics, tuple((d.shape, str(d.dtype)) for d in dynamic))
        fn = made.get(key)
        if fn is None:
            fn = made[key] = build(statics, tuple(d.dtype for d in dynamic))
        return fn(*dynamic)

    apply.__name__ = name
    return apply


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


def _result_dtype(values: Any) -> Any:
    return _result_dtype_of(tuple(np.asarray(v).dtype for v in values))


def _result_dtype_of(dtypes: tuple[Any, ...]) -> Any:
    floats = [np.dtype(d) for d in dtypes if np.dtype(d).kind == "f"]
    return floats[0] if floats else np.dtype(np.float64)
