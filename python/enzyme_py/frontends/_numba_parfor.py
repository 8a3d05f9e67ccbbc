"""Numba's prange loops as calls that a derivative runs on several threads
(``threads=`` on a reverse derivative; docs/design.md §8).

With ``parallel=True`` Numba outlines each prange loop into a body function that loops
over a schedule ``[first, last]`` (its gufunc body) and launches it through its own
threading layer, which Enzyme cannot see into. Here each launch is a typed call
``__enzyme_py_parfor_K(first, last, args...)`` of the body's arguments: in the module of
the function's own compile, where its loops were marked (``_numba_parfor_capture``),
else in a second compile (``typed_launches``); ``_numba_parfor_ir`` defines that call and
Enzyme's rules for it, and ``threaded_module`` makes the module Enzyme differentiates:

- the call runs the body over one chunk of the range per thread on enzyme_py's threads
  (``src/parfor_runner.h``); the body's ``get_thread_id()`` returns the chunk's index,
  which picks its entry of Numba's per-thread reduction arrays;
- the augmented forward pass copies the arrays the body is given (a snapshot: what
  later code may overwrite; not the function's own arrays that it only reads), then
  runs the call;
- the reverse pass runs the body's own reverse derivative (Enzyme's, from an
  ``__enzyme_autodiff`` marker) over the same chunks on the snapshot (in blocks of
  indices where the body has a loop of its own: ``_numba_parfor_ir``). Where each
  index provably touches only entries within a reach r of its own (``index_reach``
  on the body at one index: ``_numba_parfor_indices``), a shadow is used in place,
  the chunks (two per thread) running in two waves, even then odd, each chunk at
  least r long; other shadows of arrays the body only reads get zeroed copies per
  thread, added into the shadow after all chunks ran; a reduction array's shadow is
  shared (each chunk touches only its own entry). A loop whose body writes a float
  array (other than its reduction arrays) at entries its index does not provably own
  runs as one chunk.

Refused (the compile raises ``ParforUnsupported``; the derivative is then the serial
twin's, with a PerformanceWarning): nested prange, reductions into arrays, non-C
arrays, body arguments holding floats that are not arrays (their adjoints would
have to come back from the rule), and random draws.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from enzyme_py.frontends import _numba_parfor_capture
from enzyme_py.frontends._numba_parfor_ir import assume_body_signs, threaded_ir
from enzyme_py.frontends._numba_parfor_launch import (
    LAUNCH_PREFIX,
    Launch,
    ParforUnsupported,
    emit_launch,
    launch_groups,
    split_types,
)
from enzyme_py.frontends._numba_prange_loops import (
    has_prange_with_inner_loop,
    prange_loops_once_per_call,
)

__all__ = [
    "Launch",
    "ParforUnsupported",
    "has_prange_with_inner_loop",
    "inlined_into_wrapper",
    "parfor_compile",
    "prange_loops_once_per_call",
    "threaded_ir",
    "threaded_module",
    "with_launch_rules",
]


@contextlib.contextmanager
def typed_launches() -> Iterator[list[Launch]]:
    """While active (hold Numba's compiler lock), every prange loop Numba lowers is a
    typed call of ``__enzyme_py_parfor_K`` instead of its parallel launch; the list
    collects them in order."""
    import llvmlite.ir as lir
    from numba.core import cgutils
    from numba.parfors import parfor_lowering

    launches: list[Launch] = []

    def typed_launch(
        lowerer: Any,
        cres: Any,
        gu_signature: Any,
        outer_sig: Any,
        expr_args: Any,
        expr_arg_types: Any,
        loop_ranges: Any,
        redvars: Any,
        reddict: Any,
        redarrdict: Any,
        init_block: Any,
        index_var_typ: Any,
        races: Any,
        exp_name_to_tuple_var: Any,
    ) -> None:
        groups = launch_groups(lowerer, cres, loop_ranges, redvars)
        name = f"{LAUNCH_PREFIX}{len(launches)}"
        emit_launch(
            lowerer,
            cres,
            name,
            groups,
            expr_args,
            loop_ranges,
            redvars,
            redarrdict,
            exp_name_to_tuple_var,
        )
        # The body's module is linked in; a global naming it keeps it there.
        lowerer.library.add_linking_library(cres.library)
        keep = cgutils.add_global_variable(
            lowerer.builder.module, lir.IntType(8).as_pointer(), name + ".keep"
        )
        body = lowerer.builder.module.get_global(cres.fndesc.llvm_func_name)
        keep.initializer = body.bitcast(lir.IntType(8).as_pointer())
        launches.append(Launch(name, cres.fndesc.llvm_func_name, groups))

    original = parfor_lowering.call_parallel_gufunc
    parfor_lowering.call_parallel_gufunc = typed_launch
    try:
        yield launches
    finally:
        parfor_lowering.call_parallel_gufunc = original


def parfor_compile(dispatcher: Any, signature: tuple[Any, ...]) -> tuple[Any, tuple[Launch, ...]]:
    """A ``parallel=True`` compile of ``dispatcher``'s function (LLVM IR, Numba's first
    module stage) with its prange loops as typed launches: the IRCompile and the
    launches. Raises ParforUnsupported (or Numba's error) where it cannot.

    Where the dispatcher's own compile of ``signature`` was marked and kept
    (``_numba_parfor_capture``), its module, without compiling again."""
    import numba
    from numba.core.compiler_lock import global_compiler_lock

    from enzyme_py.frontends import _numba_compile

    try:
        captured = _numba_parfor_capture.from_primal(dispatcher, signature)
    except ParforUnsupported:
        raise
    except Exception:  # not as marked: compiled again below
        captured = None
    if captured is not None:
        ir, fndesc, launches = captured
        return _numba_compile.IRCompile(ir, fndesc), launches
    options = dict(_numba_compile.serial_options(dispatcher), parallel=True)
    clone = numba.njit(**options)(dispatcher.py_func)
    # The bodies, compiled inside, linked before Numba's code generation (see
    # first_stage_only), the functions compiled before fully optimised.
    before_codegen: dict[int, str] = {}
    stage = _numba_compile.first_stage_only(before_codegen, kept_callees=False)
    with global_compiler_lock, stage, typed_launches() as found:
        compiled = _numba_compile.ad_compile_ir(clone, signature)
    if not found:
        raise ParforUnsupported("no prange loop was found")
    return compiled, tuple(found)


def threaded_module(
    text: str, function: str, wrapper: str, names: list[str], identity: str, noalias: bool
) -> Any:
    """The SourceModule Enzyme differentiates, from ``text`` (``threaded_ir``'s and the
    wrapper): the Numba function inlined into the wrapper (``inlined_into_wrapper``),
    the module prepared for Enzyme as serial code is (``simplify_for_enzyme``), no
    snapshot of arrays the wrapper takes and never writes (``noalias``: the arrays are
    distinct) nor of arrays whose values the bodies' reverse derivatives never read,
    the bodies' reverse derivatives made by Enzyme's marker pass, the bodies' prange
    sums made reorderable (``reorder_loop_sums``: Numba's prange reductions have no
    order), the launches' rules attached."""
    from enzyme_py.frontends._numba_runtime import RANDOM_STATE
    from enzyme_py.frontends.ir import SourceModule, parse_module

    if any(f"@enzyme_py.inactive.{name}(" in text for name in RANDOM_STATE):
        # Each thread draws from its own state, and a body's reverse on the threads did
        # not use the draws of its forward pass (its gradient disagreed with its value).
        raise ParforUnsupported("it draws random numbers (np.random, random)")
    first = parse_module(inlined_into_wrapper(text, function))
    # What nothing uses any more gone before the work below and Enzyme's: Numba's own
    # gufunc of each prange loop, which the launches replace (GMM prange: 440 lines).
    first.native.optimize("always-inline,globaldce")
    # The launches' glue (each launch, its chunks, its rules) is never differentiated:
    # what follows simplifies the code Enzyme reads, the wrapper and the bodies (GMM
    # prange: 54% of the instructions are glue; ~9 ms), and the glue is optimised with
    # the derivative.
    glue = [f"{name}{part}" for name in names for part in _GLUE]
    # The bodies' schedules start at 0 or later (their `.body` assumes it): what lets
    # LLVM drop Numba's wraparound of negative indices before Enzyme sees them.
    first.native.optimize(_FOLD_WRAPAROUND, leaving=glue)
    for name in names:
        assume_body_signs(first.native, name)
    first.native.simplify_for_enzyme(leaving=glue)
    # The wrapper's read-only parameters, asked of this module on a thread while
    # Enzyme's child runs (after_enzyme_pass releases the GIL as it waits; the
    # question holds it): the marker pass changes none of the code the wrapper
    # reaches but by rewrites that keep its meaning, and LLVM's inference is sound on
    # either (GMM prange: ~6 ms off the way).
    # Leaving the block waits for the thread, also when the pass fails.
    with ThreadPoolExecutor(max_workers=1) as meanwhile:
        read_only = meanwhile.submit(first.native.read_only_params, wrapper) if noalias else None
        # No text on the way (the child runs the pass on its copy of the module, and
        # sends bitcode back); what follows asks copies of it and function texts.
        module = SourceModule(first.native.after_enzyme_pass("enzyme"), identity)
        wrapper_reads = (wrapper, read_only.result()) if read_only is not None else None
    needless = _unread_by_reverse(module, names)
    _settle_snapshots(module, names, wrapper_reads, needless)
    for name in names:
        # The primal launches' sums vectorise (Enzyme's reverse has read the body).
        module.native.reorder_loop_sums(f"{name}.body")
    return with_launch_rules(module, names)


# The functions _numba_parfor_ir defines for each launch K besides its body: K itself,
# its chunks, the reverse chunks Enzyme's marker pass completes, its rules.
_GLUE = ("", ".chunk", ".reverse", ".augment", ".gradient")
_FOLD_WRAPAROUND = (
    "function(sroa,early-cse<memssa>,instcombine,simplifycfg,loop-simplify,lcssa,"
    "loop(indvars),instcombine,correlated-propagation,simplifycfg)"
)
_CALL = re.compile(r"call void @(__enzyme_py_parfor_\d+)\((.*)\)")


def _unread_by_reverse(module: Any, names: list[str]) -> set[str]:
    """The snapshot flags (``@K.copy.<slot>``) of the arrays whose values the reverse
    derivatives of launch K's body (``K.reverse``'s calls, in ``module``, a
    SourceModule after Enzyme's marker pass) never read, by LLVM's inference
    (``readnone``) once the attributes Enzyme copied from the body are dropped (every
    definition's, inferred again): a linear stencil's reverse reads no value of its
    input, and a time loop would copy it at every step."""
    reverses = {name: module.native.function_ir(f"{name}.reverse") for name in names}
    defined = [
        name for name, text in reverses.items() if f"define internal i32 @{name}.reverse(" in text
    ]
    # Every definition's memory attributes inferred afresh (Enzyme's derivatives and
    # augmented copies carry those of the functions they were made from), on a copy.
    inferring = module.native.copy()
    inferring.drop_param_memory_attributes()
    # Only what the launches' reverse functions call is inferred (GMM prange: the
    # Numba function, the wrapper and the primal bodies not).
    inferring.keep_reached([f"{name}.reverse" for name in defined])
    inferring.optimize(_INFER_ATTRIBUTES)
    inferred = inferring.ir()
    params: dict[str, list[str]] = {}
    for m in _DIFFE_DEFINE.finditer(inferred):
        params[m.group(1)] = split_types(m.group(2))
    needless: set[str] = set()
    for name in defined:
        body = reverses[name]
        unread: set[int] | None = None
        for call in _DIFFE_CALL.finditer(body):
            callee = params.get(call.group(1))
            if callee is None:
                return set()  # not understood: every array copied
            here = set()
            for arg, param in zip(split_types(call.group(2)), callee, strict=False):
                value = re.fullmatch(r"\S+\* %v(\d+)", arg)
                if value and " readnone " in f" {param} ":
                    here.add(int(value.group(1)))
            unread = here if unread is None else unread & here
        body_lines = body.splitlines()
        for j in unread or ():
            # Only where the value goes nowhere but the derivatives' calls.
            local = f"%v{j}"
            use = re.compile(rf"%v{j}\b(?![.\w])")
            uses = [
                line
                for line in body_lines
                if local in line and use.search(line) and not line.lstrip().startswith(f"{local} =")
            ]
            if all(_DIFFE_CALL.search(line) for line in uses):
                needless.add(f"@{name}.copy.{j}")
    return needless


_INFER_ATTRIBUTES = "function(sroa,early-cse,instcombine,adce,simplifycfg),cgscc(function-attrs)"
_DIFFE_DEFINE = re.compile(r"^define [^\n]*@(diffe[-\w.$]+)\((.*)\)[^\n]*\{$", re.M)
# The reverse derivative of a body returns its status ({ i32 }: enzyme_primal_return).
_DIFFE_CALL = re.compile(r"call \{ i32 \} @(diffe[-\w.$]+)\((.*)\)")


def _settle_snapshots(
    module: Any, names: list[str], wrapper_reads: tuple[str, list[bool]] | None, unread: set[str]
) -> None:
    """Each launch's snapshot flags in ``module`` (a SourceModule after Enzyme's marker
    pass) made constants, in place: false for the flags of ``unread``, and where the
    launch is called from the wrapper with one of the wrapper's own arrays that the
    wrapper only reads (``wrapper_reads``: its name and, per parameter, whether LLVM
    infers it read-only, the launches' read-only parameters included): nothing can
    change it during the derivative call. None: those copied."""
    needless: set[str] = set(unread)
    if wrapper_reads is not None:
        needless |= _only_read_by_wrapper(module, *wrapper_reads)
    flags = [
        (variable, f"@{variable}" not in needless)
        for variable in module.native.variables()
        if _copy_flag_of(variable, names)
    ]
    module.native.settle_flags(flags)


def _only_read_by_wrapper(module: Any, wrapper: str, read_only: list[bool]) -> set[str]:
    """The snapshot flags of the launches ``wrapper`` calls with one of its own arrays
    that it only reads (``read_only``: per parameter of ``wrapper``)."""
    found: set[str] = set()
    text = module.native.function_ir(wrapper)
    define = re.search(r"^define [^\n]*@" + re.escape(wrapper) + r"\((.*)\)", text, re.M)
    if define is None:
        return found
    params = [p.split()[-1] for p in split_types(define.group(1))]
    only_read = {name for name, flag in zip(params, read_only, strict=True) if flag}
    for call in _CALL.finditer(text, define.end()):
        for j, arg in enumerate(split_types(call.group(2))):
            if arg.split()[-1] in only_read:
                found.add(f"@{call.group(1)}.copy.{j}")
    return found


def _copy_flag_of(variable: str, names: list[str]) -> bool:
    """Whether ``variable`` is a snapshot flag (``K.copy.<slot>``) of a launch of
    ``names``."""
    launch, dot, slot = variable.rpartition(".copy.")
    return bool(dot) and launch in names and slot.isdigit()


def with_launch_rules(module: Any, names: list[str]) -> Any:
    """``module`` (a SourceModule) with each launch's rules attached for Enzyme."""
    from enzyme_py.frontends.ir import SourceModule

    native = module.native
    rules = []
    for name in names:
        rules.append((name, "enzyme_augment", f"{name}.augment", native))
        rules.append((name, "enzyme_gradient", f"{name}.gradient", native))
    return SourceModule(native.with_rules(rules), module.digest + "|parfor rules")


def inlined_into_wrapper(text: str, function: str) -> str:
    """``text`` with the Numba function made internal and marked to be inlined into
    enzyme_py's wrapper (threaded modules, and serial ones' ``combined_form``).
    Called, Enzyme would differentiate it in split mode (it needs a tape: the
    launches'), where Enzyme v0.0.289 finds the launches' arguments of another
    activity in its two halves and aborts."""
    pattern = re.compile(
        r"^define (?:linkonce_odr |weak_odr |external )?([^\n]*@"
        + re.escape(function)
        + r"\([^\n]*\))([^\n]*)\{$",
        re.M,
    )
    # Internal: nothing but the wrapper calls it, and it is gone once inlined, so
    # that the wrapper is the launches' only caller (assume_body_signs).
    return pattern.sub(
        lambda m: f"define internal {m.group(1)}{m.group(2)}alwaysinline {{", text, count=1
    )
