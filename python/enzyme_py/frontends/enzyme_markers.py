"""Enzyme's clang-plugin interface in C/C++ source: honoured as Enzyme's pass honours it,
or refused by name.

Code written for Enzyme's clang plugin asks for derivatives inside C
(``__enzyme_autodiff(f, enzyme_dup, x, dx, enzyme_const, n)``), registers rules with
``__enzyme_register_gradient_*`` / ``__enzyme_register_derivative_*`` globals and marks
functions inactive (``__enzyme_inactivefn``, ``__enzyme_function_like``, an attribute).
What enzyme_py honours, with Enzyme's own passes from the same plugin, each run in a
forked child:

- the rule and inactivity globals: Enzyme's ``preserve-nvvm`` pass turns them into the
  function metadata (``enzyme_augment``, ``enzyme_gradient``, ``enzyme_derivative``) and
  attributes (``enzyme_inactive``, ``enzyme_math``) Enzyme reads, on the IR before clang's
  optimisation pipeline (as the clang plugin runs it, at the pipeline's start: before
  inlining). Both the marker calls and ``ez.autodiff`` on the module's functions then
  use them;
- ``__attribute__((annotate("enzyme_inactive")))`` on a function (clang without Enzyme's
  clang plugin has no ``enzyme_inactive`` attribute): the same ``enzyme_inactive``
  function attribute as ``__enzyme_inactivefn``;
- calls of ``__enzyme_autodiff`` and ``__enzyme_fwddiff``, and split reverse mode's
  ``__enzyme_augmentfwd`` / ``__enzyme_reverse`` / ``__enzyme_augmentsize`` (with the
  activity globals, ``enzyme_width`` / ``enzyme_dupv`` and ``enzyme_allocated`` /
  ``enzyme_tape`` included): Enzyme's ``enzyme`` pass on the optimised module, as the
  clang plugin runs it.

Every other marker makes ``ez.c`` raise ``CompileError`` naming it and what to write with
enzyme_py instead.
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
    "clang without Enzyme's clang plugin does not know this attribute: write "
    '__attribute__((annotate("enzyme_inactive"))) on the function (or list it in a '
    "__enzyme_inactivefn global), which enzyme_py honours as Enzyme does"
)
# (what the name contains, what to write instead); the first that matches is used.
_FUNCTION_MARKERS = (
    ("__enzyme_autodiff", _DIFFERENTIATE),
    ("__enzyme_fwddiff", _DIFFERENTIATE),
    ("__enzyme_fwdsplit", _DIFFERENTIATE),
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
_ATTRIBUTE_IN_SOURCE = re.compile(r"__attribute__\s*\(\([^;{]*?\b(?<!\")(enzyme_\w+)")
# __attribute__((annotate("..."))) strings in the IR.
_ANNOTATION = re.compile(
    r'^@[^\s=]+ = [^\n]*c"(enzyme_\w*)\\00", section "llvm.metadata"', re.MULTILINE
)
# What Enzyme's preserve-nvvm pass turns into metadata and attributes (it matches
# names that contain these).
_RULE_GLOBALS = (
    "__enzyme_register_gradient",
    "__enzyme_register_derivative",
    "__enzyme_inactivefn",
    "__enzyme_function_like",
)
_HONOURED_ANNOTATIONS = ("enzyme_inactive",)
# A rule global's definition in the source (an array of pointers).
_RULE_DECLARED = re.compile(
    r"\b(__enzyme_(?:register_gradient|register_derivative|inactivefn|function_like)\w*)\s*\["
)
# In the source: a reason to look at the IR before clang's optimisation pipeline
# (which may drop a static rule global or inline a function before it is marked).
_RULES_IN_SOURCE = re.compile(
    r"__enzyme_(register_(gradient|derivative)|inactivefn|function_like)|annotate\s*\(\s*\"enzyme_"
)


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
            elif "__enzyme_inactive_global" in name:
                found[name] = (
                    "enzyme_py has no equivalent of inactive globals: pass such data as "
                    "ez.Const arguments"
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
_HONOURED_CALLS = (
    "__enzyme_autodiff",
    "__enzyme_fwddiff",
    "__enzyme_augmentfwd",
    "__enzyme_reverse",
    "__enzyme_augmentsize",
)
_MARKER_CALL = re.compile(r"call [^\n]*@\"?\w*__enzyme_(?!py_)\w*")


def _is_rule_global(name: str) -> bool:
    return any(g in name for g in _RULE_GLOBALS)


def _found(ir_text: str, diagnostics: str, source: str) -> list[tuple[str, str]]:
    found = _markers(ir_text)
    attributes = set(_UNKNOWN_ATTRIBUTE.findall(diagnostics))
    attributes |= set(_ATTRIBUTE_IN_SOURCE.findall(source))
    for attribute in sorted(attributes):
        found.append((f"__attribute__(({attribute}))", _INACTIVE))
    for annotation in sorted(set(_ANNOTATION.findall(ir_text))):
        found.append(
            (
                f'__attribute__((annotate("{annotation}")))',
                'the annotation enzyme_py honours is "enzyme_inactive"',
            )
        )
    found.extend(_misplaced_annotations(ir_text))
    return found


_STRING = re.compile(r'^@("?[^\s"=]+"?) = [^\n]*c"(enzyme_\w*)\\00", section "llvm.metadata"', re.M)
_GLOBAL_ANNOTATIONS = re.compile(r"^@llvm\.global\.annotations = [^\n]*", re.M)
# One entry: the annotated global (through a bitcast or not), then its string.
_ENTRY = re.compile(r"\{ i8\* (?:bitcast \([^@]*)?@(\"[^\"]+\"|[\w.$]+)[^@]*@(\"[^\"]+\"|[\w.$]+)")
_LOCAL_ANNOTATION = re.compile(r"call [^\n]*@llvm\.(?:var|ptr)\.annotation[^\n]*")


def _misplaced_annotations(ir_text: str) -> list[tuple[str, str]]:
    """annotate("enzyme_...") on what is not a function (a global or local variable):
    enzyme_py marks functions only."""
    strings = dict(_STRING.findall(ir_text))
    if not strings:
        return []
    functions = {n for _, n in _DECLARED.findall(ir_text)} | {
        n for _, n in _DEFINED.findall(ir_text)
    }
    misplaced = []
    advice = "enzyme_py honours the annotation on functions only"
    for line in _GLOBAL_ANNOTATIONS.findall(ir_text):
        for target, string in _ENTRY.findall(line):
            name = target.strip('"')
            if string in strings and name not in functions:
                misplaced.append((f'annotate("{strings[string]}") on {name}', advice))
    for call in _LOCAL_ANNOTATION.findall(ir_text):
        for string, text in strings.items():
            if re.search(rf"@{re.escape(string)}\b", call):
                misplaced.append((f'annotate("{text}") on a local variable', advice))
    return misplaced


def _honoured(name: str) -> bool:
    return (
        name in _ACTIVITY_GLOBALS
        or any(c in name for c in _HONOURED_CALLS)
        or _is_rule_global(name)
        or any(name == f'__attribute__((annotate("{a}")))' for a in _HONOURED_ANNOTATIONS)
    )


def honour_or_refuse(
    ir_text: str,
    diagnostics: str,
    source: str,
    language: str,
    run_pass: Callable[[str, str], str],
    unoptimised: Callable[[], str],
    optimise: Callable[[str], str],
) -> str:
    """The module's IR with Enzyme's rule globals as Enzyme's metadata and its marker
    calls differentiated by Enzyme's pass (``run_pass(ir, passes)``); CompileError for
    any marker that would otherwise be ignored.

    ``ir_text`` is clang's optimised IR of ``source``; ``unoptimised()`` the IR before
    clang's optimisation pipeline, ``optimise(ir)`` that pipeline on IR."""
    lang = language.upper()
    rules_first = bool(_RULES_IN_SOURCE.search(source))
    raw = unoptimised() if rules_first else ""
    found = dict(_found(ir_text, diagnostics, source))
    if raw:
        found.update(_found(raw, "", ""))
    defined = set(found)
    for name in sorted(set(_RULE_DECLARED.findall(source)) - set(found)):
        found[name] = (
            "declared in the source but not in the module clang made (clang drops a static "
            "global nothing uses before any pass sees it): declare it without static"
        )
    refused = sorted((n, a) for n, a in found.items() if not _honoured(n) or n not in defined)
    if refused:
        lines = "\n".join(f"- {name}: {advice}" for name, advice in refused)
        raise CompileError(
            f"the {lang} source uses Enzyme's clang-plugin interface beyond what enzyme_py "
            "runs (Enzyme's pass for __enzyme_autodiff, __enzyme_fwddiff, __enzyme_augmentfwd, "
            "__enzyme_reverse and __enzyme_augmentsize calls, and its "
            "__enzyme_register_gradient_* / __enzyme_register_derivative_* / "
            '__enzyme_inactivefn / __enzyme_function_like globals, annotate("enzyme_inactive")): '
            f"ignored, these would change gradients without a word, so they are refused:\n{lines}"
        )
    rules = sorted(n for n in found if _is_rule_global(n) or n.startswith("__attribute__"))
    if rules:
        # As the clang plugin runs it: preserve-nvvm at the start of the pipeline.
        try:
            prepared = run_pass(raw, "preserve-nvvm")
        except RuntimeError as exc:
            raise CompileError(
                f"Enzyme's preserve-nvvm pass could not read {', '.join(rules)} of the {lang} "
                f"source: {exc}"
            ) from None
        left = [n for n, _ in _markers(prepared) if _is_rule_global(n)]
        if left:
            raise CompileError(
                f"Enzyme's preserve-nvvm pass left {', '.join(left)} of the {lang} source "
                "unread: refused, it would be ignored"
            )
        ir_text = optimise(prepared)
    calls = sorted(n for n in found if any(c in n for c in _HONOURED_CALLS))
    if not calls:
        return ir_text  # nothing (more) Enzyme's pass would do
    try:
        text = run_pass(ir_text, "enzyme")
    except RuntimeError as exc:
        raise CompileError(
            f"Enzyme's pass could not differentiate the {', '.join(calls)} calls of the "
            f"{lang} source: {exc}"
        ) from None
    left_call = _MARKER_CALL.search(text)
    if left_call:
        raise CompileError(
            f"Enzyme's pass left a marker call in the {lang} source's module: {left_call.group(0)}"
        )
    return text
