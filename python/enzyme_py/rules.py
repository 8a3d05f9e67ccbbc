"""Custom derivative rules: derivatives for functions Enzyme cannot see into.

An external or opaque function (a C symbol from a library, a call through a function
pointer, a BLAS routine) has no body Enzyme can differentiate. Register its rules,
written as other compiled functions (``ez.c`` / ``ez.cpp`` / ``ez.llvm_ir``, or a
``@numba.cfunc`` with the C signature below), and every derivative built afterwards that
calls the function by that name uses them:

    rules = ez.c(RULES_SOURCE)
    ez.register_gradient("mydot", augment=rules.aug_mydot, gradient=rules.rev_mydot)
    ez.register_derivative("mydot", forward=rules.fwd_mydot)

The rules follow Enzyme's conventions for custom derivatives (v0.0.289), found by
experiment and held by tests/test_rules.py:

- every argument of the function is followed by its shadow (integers too); a Const
  argument's shadow is the argument itself, so a rule must not write through it;
- the augmented forward pass takes those and returns the function's value (and a tape,
  if the gradient needs one); the gradient takes them, then the adjoint of the return
  value (then the tape), and adds into the shadows;
- a forward rule takes them and returns ``{value, tangent}`` (a struct of two).

When a rule does not have the signature Enzyme expects, the EnzymeError says which one
it expects. With a reverse rule on a function whose result is used, Enzyme returns no
primal in the same pass: differentiate with ``ActiveOnly`` (``ez.grad`` does). Rules
work on bare declarations (a library symbol) and on functions with a body Enzyme cannot
follow, except forward rules for a declaration with pointer arguments, which Enzyme
v0.0.289 does not find ("No forward mode derivative found"): give such a function a
body (a call through a function pointer, as tests/test_rules.py does). A rule applies
to calls of that exact symbol: not to math functions that clang and Numba turn into
LLVM intrinsics (``sin`` becomes ``llvm.sin``, which Enzyme differentiates itself);
registering one of those warns.
"""

from __future__ import annotations

import hashlib
import warnings
from dataclasses import dataclass, replace

from enzyme_py.frontends.ir import IRFunction, SourceModule, function_of, parse_module

__all__ = ["clear_rules", "register_derivative", "register_gradient"]


@dataclass(frozen=True)
class _Rule:
    kind: str  # Enzyme's metadata: enzyme_augment, enzyme_gradient, enzyme_derivative
    function: IRFunction


_rules: dict[str, list[_Rule]] = {}


def _check(name: str, value: object) -> IRFunction:
    if isinstance(value, IRFunction):
        return value
    if type(value).__name__ == "CFunc" and type(value).__module__.startswith("numba"):
        return _from_numba_cfunc(value)
    raise TypeError(
        f"the {name} rule must be a compiled function (from ez.c, ez.cpp, ez.llvm_ir, or "
        f"a @numba.cfunc); got {type(value).__name__}"
    )


def _from_numba_cfunc(cfunc: object) -> IRFunction:
    """A ``@numba.cfunc`` as a rule: its C-ABI wrapper, behind a function of exactly the
    declared C types (Numba's wrapper of a ``void`` function returns a pointer)."""
    from numba.core import types

    library_ir = cfunc._library.get_llvm_str()  # type: ignore[attr-defined]
    inner = parse_module(library_ir)
    native_name = cfunc.native_name  # type: ignore[attr-defined]
    info = next(i for i in inner.functions() if i["name"] == native_name)
    params = ", ".join(f"{t} %a{k}" for k, t in enumerate(info["params"]))
    args = ", ".join(f"{t} %a{k}" for k, t in enumerate(info["params"]))
    void = isinstance(cfunc._sig.return_type, types.NoneType)  # type: ignore[attr-defined]
    ret = "void" if void else info["ret"]
    name = f"__enzyme_py_rule_{hashlib.sha256(native_name.encode()).hexdigest()[:16]}"
    body = (
        [f"  call {info['ret']} @{native_name}({args})", "  ret void"]
        if void
        else [f"  %r = call {info['ret']} @{native_name}({args})", f"  ret {ret} %r"]
    )
    wrapper = "\n".join([f"define {ret} @{name}({params}) {{", "entry:", *body, "}"])
    return function_of(parse_module(library_ir + "\n" + wrapper + "\n"), name)


# libm functions that clang (without errno) and Numba call as LLVM intrinsics.
_INTRINSICS = frozenset(
    name + suffix
    for name in (
        "sin", "cos", "exp", "exp2", "log", "log2", "log10", "pow", "sqrt", "fabs",
        "floor", "ceil", "trunc", "rint", "nearbyint", "round", "fma", "copysign",
        "fmin", "fmax",
    )
    for suffix in ("", "f")
)  # fmt: skip


def _target(target: object) -> str:
    """The symbol name a rule is for, checked."""
    if not isinstance(target, str) or not target:
        raise TypeError(
            "a rule's target is the name of the function it is for, as a non-empty str "
            f"(its symbol, e.g. 'opaque_dot'); got {target!r}"
        )
    if target in _INTRINSICS:
        warnings.warn(
            f"clang and Numba call {target} as the LLVM intrinsic llvm.{target.rstrip('f')}, "
            f"which Enzyme differentiates itself: a rule for '{target}' applies only to "
            "code that calls the symbol itself",
            stacklevel=3,
        )
    return target


def register_gradient(target: str, augment: IRFunction, gradient: IRFunction) -> None:
    """Reverse-mode rule for the function named ``target`` (augmented forward pass and
    gradient); replaces an earlier reverse rule for it."""
    target = _target(target)
    rules = [r for r in _rules.get(target, []) if r.kind == "enzyme_derivative"]
    rules += [
        _Rule("enzyme_augment", _check("augment", augment)),
        _Rule("enzyme_gradient", _check("gradient", gradient)),
    ]
    _rules[target] = rules


def register_derivative(target: str, forward: IRFunction) -> None:
    """Forward-mode rule for the function named ``target``; replaces an earlier one."""
    target = _target(target)
    rules = [r for r in _rules.get(target, []) if r.kind != "enzyme_derivative"]
    _rules[target] = [*rules, _Rule("enzyme_derivative", _check("forward", forward))]


def clear_rules(target: str | None = None) -> None:
    """Forget the rules for ``target`` (all rules with None)."""
    if target is None:
        _rules.clear()
    else:
        _rules.pop(target, None)


def with_rules(fn: IRFunction) -> IRFunction:
    """``fn`` on a module where the registered rules of the functions it contains are
    linked in and attached; ``fn`` itself when none applies."""
    if not _rules:
        return fn
    present = set(fn.module.native.names())
    chosen = [(target, r) for target, rules in _rules.items() if target in present for r in rules]
    if not chosen:
        return fn
    native = fn.module.native.with_rules(
        [(target, r.kind, r.function.name, r.function.module.native) for target, r in chosen]
    )
    identity = fn.module.digest + "".join(
        f"|{t}:{r.kind}:{r.function.name}:{r.function.module.digest}" for t, r in chosen
    )
    module = SourceModule(native, identity)
    safe = fn.alias_safe
    return replace(
        fn,
        module=module,
        alias_safe=None if safe is None else (lambda: with_rules(safe())),
        # The rules live in this process only: not picklable (the reason, for errors).
        origin=("custom rules", tuple(sorted({target for target, _ in chosen}))),
    )
