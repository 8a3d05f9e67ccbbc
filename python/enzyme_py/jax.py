"""JAX bridge: an enzyme_py function as a JAX-callable with a custom VJP (or JVP).

    import enzyme_py as ez
    loss = ez.jax.primitive(numba_loss)           # f(x: array, ..., n: int) -> float
    jax.grad(loss)(x, 10)                         # reverse mode through enzyme_py
    jax.jit(loss, static_argnums=1)(x, 10)        # under jit too

The function runs through ``jax.pure_callback`` on the host. Python ints are passed
as constants (mark them static under ``jit``); float arrays and scalars are
differentiable. ``mode="vjp"`` (default) supports ``jax.grad``/``jax.vjp``;
``mode="jvp"`` supports ``jax.jvp`` (forward mode) instead — JAX allows one kind of
custom rule per function. Needs the ``enzyme_py[jax]`` extra (``jax``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from enzyme_py._state import require_autodiff as _require_autodiff
from enzyme_py.core import ActiveOnly, Activity, Const, Dual, Forward
from enzyme_py.helpers import _Derivatives, _reverse_call

__all__ = ["primitive"]


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

    def value_on_host(statics: tuple[tuple[int, Any], ...], *dynamic: Any) -> np.ndarray:
        args = _merge(statics, [_host(d) for d in dynamic])
        primal = derivatives.get(Forward, [Const] * len(args), Const)
        return np.asarray(primal(*args), dtype=_result_dtype(dynamic))

    def build(statics: tuple[tuple[int, Any], ...], dtypes: tuple[Any, ...]) -> Callable[..., Any]:
        out_type = jax.ShapeDtypeStruct((), _result_dtype_of(dtypes))

        def call(*dynamic: Any) -> Any:
            return jax.pure_callback(lambda *d: value_on_host(statics, *d), out_type, *dynamic)

        if mode == "vjp":
            wrapped = jax.custom_vjp(call)

            def fwd(*dynamic: Any) -> tuple[Any, Any]:
                return call(*dynamic), dynamic

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

                return jax.pure_callback(grads_on_host, shapes, cotangent, *saved)

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

            return tuple(jax.pure_callback(on_host, (out_type, out_type), *primals, *tangents))

        return forward

    def apply(*args: Any) -> Any:
        statics = tuple((i, a) for i, a in enumerate(args) if isinstance(a, int))
        dynamic = [jnp.asarray(a) for a in args if not isinstance(a, int)]
        key = (statics, tuple((d.shape, str(d.dtype)) for d in dynamic))
        fn = made.get(key)
        if fn is None:
            fn = made[key] = build(statics, tuple(d.dtype for d in dynamic))
        return fn(*dynamic)

    apply.__name__ = getattr(f, "__name__", "enzyme_primitive")
    return apply


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
