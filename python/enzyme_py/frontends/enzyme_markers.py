"""Enzyme's clang-plugin interface in C/C++ source: detected and refused.

Code written for Enzyme's clang plugin asks for derivatives inside C
(``__enzyme_autodiff(f, enzyme_dup, x, dx, enzyme_const, n)``), registers rules with
``__enzyme_register_gradient_*`` globals and marks functions inactive. enzyme_py does not
run Enzyme's pass on ``ez.c`` modules, so each of these would be ignored, and a gradient
would come out different without a word. Calls of ``__enzyme_autodiff`` and
``__enzyme_fwddiff`` (with the activity globals) are honoured: Enzyme's own pass runs on
the module (in a forked child), as Enzyme's clang plugin would run it. Every other marker
makes ``ez.c`` raise ``CompileError`` naming it and what to write with enzyme_py instead.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from enzyme_py.core import CompileError

__all__ = ["honour_or_refuse"]

# Enzyme's activity globals (passed between a marker call's arguments).
_ACTIVITY_GLOBALS = {
    "enzyme_dup": "ez.Duplicated (ez.Dual in Forward mode)",
    "enzyme_dupnoneed": "ez.DuplicatedOnly (ez.DualOnly in Forward mode)",
    "enzyme_dupv": "ez.Duplicated with width=k (a shadow of shape (k, *x.shape))",
    "enzyme_dupnoneedv": "ez.DuplicatedOnly with width=k",
    "enzyme_const": "ez.Const",
    "enzyme_out": "ez.Active",
    "enzyme_width": "width=k",
    "enzyme_vector": "width=k",
    "enzyme_scalar": "width=k",
    "enzyme_allocated": "ez.autodiff (enzyme_py allocates the tape)",
    "enzyme_tape": "ez.autodiff (enzyme_py allocates the tape)",
    "enzyme_nofree": "ez.autodiff",
    "enzyme_primal_return": "a return activity that keeps the primal (ez.Active, ez.Dual)",
    "enzyme_noret": "a return activity without the primal (ez.ActiveOnly, ez.DualOnly)",
}
_DIFFERENTIATE = (
    "differentiate the function from Python instead, e.g. "
    "ez.autodiff(m.f, ez.Reverse, ez.Duplicated, ez.Const, ez.Active) for "
    "__enzyme_autodiff(f, enzyme_dup, x, dx, enzyme_const, n) (ez.Forward with ez.Dual for "
    "__enzyme_fwddiff); enzyme_dup is ez.Duplicated (ez.Dual), enzyme_dupnoneed "
    "ez.DuplicatedOnly (ez.DualOnly), enzyme_const ez.Const, enzyme_out or an active "
    "double ez.Active, enzyme_width k is width=k"
)
_INACTIVE = (
    "enzyme_py has no inactivity marker: pass the inputs it should not differentiate as "
    "ez.Const, or give the function a rule with a zero derivative "
    "(ez.register_derivative / ez.register_gradient)"
)
# (what the name contains, what to write instead); the first that matches is used.
_FUNCTION_MARKERS = (
    ("__enzyme_autodiff", _DIFFERENTIATE),
    ("__enzyme_fwddiff", _DIFFERENTIATE),
    ("__enzyme_fwdsplit", _DIFFERENTIATE),
    (
        "__enzyme_augmentfwd",
        "enzyme_py builds combined reverse derivatives: ez.autodiff(m.f, ez.Reverse, ...)",
    ),
    (
        "__enzyme_reverse",
        "enzyme_py builds combined reverse derivatives: ez.autodiff(m.f, ez.Reverse, ...)",
    ),
    ("__enzyme_batch", "use width=k with ez.autodiff (batched forward or reverse mode)"),
    ("__enzyme_inactive", _INACTIVE),
)
_RULE_PREFIXES = {
    "__enzyme_register_gradient_": (
        "ez.register_gradient('{target}', augment=m.{a}, gradient=m.{b})"
    ),
    "__enzyme_register_derivative_": "ez.register_derivative('{target}', forward=m.{a})",
    "__enzyme_register_splitderivative_": "ez.register_derivative('{target}', forward=m.{a})",
}
_GLOBAL = re.compile(r'^@("?)([^\s"=]+)\1 = (.*)$', re.MULTILINE)
_DECLARED = re.compile(r'^declare [^@]*@("?)([^\s"(]+)\1\(', re.MULTILINE)
_DEFINED = re.compile(r'^define [^@]*@("?)([^\s"(]+)\1\(', re.MULTILINE)
_UNKNOWN_ATTRIBUTE = re.compile(r"unknown attribute '(enzyme_\w+)' ignored")
_ATTRIBUTE_IN_SOURCE = re.compile(r"__attribute__\s*\(\([^;{]*?\b(enzyme_\w+)")


def _rule_advice(prefix: str, initializer: str) -> str:
    # {function, augment, gradient} or {function, forward}, as bitcasts of @names.
    referenced = re.findall(r"@\"?([\w.$]+)", initializer)
    target = referenced[0] if referenced else "the function"
    rules = [*referenced[1:], "AUG", "REV"]
    return _RULE_PREFIXES[prefix].format(target=target, a=rules[0], b=rules[1])


def _markers(ir_text: str) -> list[tuple[str, str]]:
    found: dict[str, str] = {}
    for _, name, rest in _GLOBAL.findall(ir_text):
        if name in _ACTIVITY_GLOBALS:
            found[name] = f"write {_ACTIVITY_GLOBALS[name]} in ez.autodiff; {_DIFFERENTIATE}"
            continue
        for prefix in _RULE_PREFIXES:
            if name.startswith(prefix):
                found[name] = "register the rule from Python: " + _rule_advice(prefix, rest)
                break
        else:
            if "__enzyme_function_like" in name:
                found[name] = (
                    "give the function rules instead (ez.register_gradient / "
                    "ez.register_derivative) computing the derivative of the one it is like"
                )
            elif "__enzyme_inactive" in name:
                found[name] = _INACTIVE
            elif "__enzyme_" in name and "__enzyme_py_" not in name:
                found[name] = "enzyme_py has no equivalent of it inside C code"
    functions = {n for _, n in _DECLARED.findall(ir_text)} | {
        n for _, n in _DEFINED.findall(ir_text)
    }
    for name in sorted(functions):
        if "__enzyme_" not in name or "__enzyme_py_" in name:
            continue
        advice = next((a for key, a in _FUNCTION_MARKERS if key in name), None)
        found[name] = advice or "enzyme_py has no equivalent of it inside C code"
    return sorted(found.items())


# What Enzyme's pass is run for; the activity globals only mean something inside them.
_HONOURED_CALLS = ("__enzyme_autodiff", "__enzyme_fwddiff")
_MARKER_CALL = re.compile(r"call [^\n]*@\"?\w*__enzyme_(?!py_)\w*")


def honour_or_refuse(
    ir_text: str, diagnostics: str, source: str, language: str, run_pass: Callable[[str], str]
) -> str:
    """The module's IR with Enzyme's marker calls differentiated by Enzyme's pass
    (``run_pass``); CompileError for any marker that would otherwise be ignored."""
    found = _markers(ir_text)
    attributes = set(_UNKNOWN_ATTRIBUTE.findall(diagnostics))
    attributes |= set(_ATTRIBUTE_IN_SOURCE.findall(source))
    for attribute in sorted(attributes):
        found.append((f"__attribute__(({attribute}))", _INACTIVE))
    honoured = [
        n for n, _ in found if n in _ACTIVITY_GLOBALS or any(c in n for c in _HONOURED_CALLS)
    ]
    refused = [(n, a) for n, a in found if n not in honoured]
    if refused:
        lines = "\n".join(f"- {name}: {advice}" for name, advice in refused)
        raise CompileError(
            f"the {language.upper()} source uses Enzyme's clang-plugin interface beyond "
            "what enzyme_py runs (Enzyme's pass for __enzyme_autodiff and __enzyme_fwddiff "
            "calls): ignored, these would change gradients without a word, so they are "
            f"refused:\n{lines}"
        )
    if not any(any(c in n for c in _HONOURED_CALLS) for n in honoured):
        return ir_text  # activity globals alone: nothing Enzyme would do
    try:
        text = run_pass(ir_text)
    except RuntimeError as exc:
        raise CompileError(
            f"Enzyme's pass could not differentiate the {', '.join(sorted(honoured))} "
            f"calls of the {language.upper()} source: {exc}"
        ) from None
    left = _MARKER_CALL.search(text)
    if left:
        raise CompileError(
            f"Enzyme's pass left a marker call in the {language.upper()} source's module: "
            f"{left.group(0)}"
        )
    return text
