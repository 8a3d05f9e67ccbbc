"""The prange loops of Numba's own parallel compiles, marked so that a derivative on
threads need not compile the function a second time (docs/design.md §8).

A derivative on threads differentiates the function with each prange loop lowered as a
typed launch (``_numba_parfor.typed_launches``), which took a second parallel compile:
Numba's parfor passes and a compile of each loop's body (GMM's prange gradient: about
0.87 of its 1.05 s first call).

Once ``install`` has run, each prange loop Numba lowers becomes

    if (__enzyme_py_parfor_select())  __enzyme_py_parfor_K(first, last, args...)
    else                              Numba's own launch

where ``select`` returns false and launch K does nothing, both internal and inlined by
Numba's module optimisation: the code Numba runs is its own. ``_numba_capture`` keeps
the module before that optimisation, and ``from_primal`` turns it into what
``parfor_compile`` makes: ``select`` returning true, each launch declared, the bodies
linked in as that compile links them (the first module stage only), Numba's launches
dropped with the branch never taken. A loop a typed launch cannot express is lowered as
Numba's alone, and why is kept: the derivative refuses it without compiling again.
"""

from __future__ import annotations

import contextlib
import re
import weakref
from dataclasses import dataclass, field
from typing import Any

from enzyme_py.frontends._numba_capture import after_import, for_linking, module_defining
from enzyme_py.frontends._numba_parfor_launch import (
    LAUNCH_PREFIX,
    Launch,
    ParforUnsupported,
    emit_launch,
    launch_groups,
)
from enzyme_py.frontends._numba_parfor_serial import serial_ir
from enzyme_py.frontends._numba_prange_loops import has_prange_with_inner_loop

__all__ = [
    "SELECT",
    "from_primal",
    "install",
    "install_when_imported",
    "serial_from_primal",
]

SELECT = "__enzyme_py_parfor_select"


@dataclass
class _Record:
    """The prange loops of one function's lowering, in order."""

    launches: list[Launch] = field(default_factory=list)
    declarations: list[str] = field(default_factory=list)  # each launch's, LLVM text
    keeps: list[str] = field(default_factory=list)  # a global naming each body
    bodies: list[Any] = field(default_factory=list)  # the bodies' code libraries
    callees: list[list[Any]] = field(default_factory=list)  # those each body links
    launchers: list[Any] = field(default_factory=list)  # libraries Numba's launches link
    unsupported: str | None = None  # why a loop is Numba's launch alone
    module: Any = None  # a weak reference to the module lowered


# A function's code library -> its functions' records, by mangled name.
_records: weakref.WeakKeyDictionary[Any, dict[str, _Record]] = weakref.WeakKeyDictionary()
_installed = False


def _record_for(lowerer: Any) -> _Record:
    """The record of the function ``lowerer`` lowers; a fresh one for a fresh module (a
    lowering tried again)."""
    by_name = _records.setdefault(lowerer.library, {})
    name, module = lowerer.fndesc.mangled_name, lowerer.builder.module
    record = by_name.get(name)
    if record is None or record.module() is not module:
        record = by_name[name] = _Record(module=weakref.ref(module))
    return record


def _select(module: Any) -> Any:
    """``i1 select()``, returning false, in ``module``."""
    import llvmlite.ir as lir

    found = module.globals.get(SELECT)
    if found is not None:
        return found
    fn = lir.Function(module, lir.FunctionType(lir.IntType(1), []), SELECT)
    fn.linkage = "internal"
    fn.attributes.add("alwaysinline")
    lir.IRBuilder(fn.append_basic_block()).ret(lir.Constant(lir.IntType(1), 0))
    return fn


def _marked(original: Any) -> Any:
    """Numba's ``call_parallel_gufunc`` with the typed launch beside it (module doc)."""

    def launch(*args: Any) -> None:
        lowerer, cres, loop_ranges, redvars = args[0], args[1], args[6], args[7]
        try:
            record = _record_for(lowerer)
            if record.unsupported is not None:  # not taken: nothing more to mark
                return original(*args)
            groups = launch_groups(lowerer, cres, loop_ranges, redvars)
        except ParforUnsupported as exc:
            record.unsupported = record.unsupported or str(exc)
            return original(*args)
        except Exception as exc:  # marking is an optimisation: never in Numba's way
            with contextlib.suppress(Exception):
                record.unsupported = record.unsupported or f"not marked ({exc})"
            return original(*args)
        builder = lowerer.builder
        name = f"{LAUNCH_PREFIX}{len(record.launches)}"
        before = {id(lib) for lib in lowerer.library._linking_libraries}
        # Numba's launch adds its wrappers to the body's library: what the body links
        # before that.
        callees = list(cres.library._linking_libraries)
        with builder.if_else(builder.call(_select(builder.module), [])) as (typed, numba):
            with typed:
                declaration = _emit_marker(lowerer, cres, name, groups, args)
            with numba:
                original(*args)
        if isinstance(declaration, Exception):
            record.unsupported = record.unsupported or f"{name} was not marked ({declaration})"
            return None
        body = cres.fndesc.llvm_func_name
        body_type = builder.module.globals[body].type
        record.launches.append(Launch(name, body, groups))
        record.declarations.append(declaration)
        record.keeps.append(f'@"{name}.keep" = global i8* bitcast ({body_type} @"{body}" to i8*)')
        record.bodies.append(cres.library)
        record.callees.append(callees)
        record.launchers += [
            lib for lib in lowerer.library._linking_libraries if id(lib) not in before
        ]
        return None

    launch.__wrapped__ = original  # type: ignore[attr-defined]
    return launch


def _emit_marker(
    lowerer: Any, cres: Any, name: str, groups: tuple[Any, ...], args: tuple[Any, ...]
) -> str | Exception:
    """The typed launch ``name`` (``emit_launch``), defined to do nothing (internal,
    inlined: the code Numba runs has no trace of it); its declaration for the
    derivative, or what failed (the launch is then defined all the same: the branch
    to it is never taken, but no call is left to a function defined nowhere)."""
    import llvmlite.ir as lir

    expr_args, loop_ranges, redvars, redarrdict = args[4], args[6], args[7], args[9]
    try:
        marker = emit_launch(
            lowerer,
            cres,
            name,
            groups,
            list(expr_args),  # Numba's launch changes its lists: copies
            list(loop_ranges),
            redvars,
            redarrdict,
            args[13],  # exp_name_to_tuple_var
        )
        types = ", ".join(str(a.type) for a in marker.args)
        result: str | Exception = f'declare void @"{name}"({types})'
    except Exception as exc:
        marker = lowerer.builder.module.globals.get(name)
        result = exc
    if marker is not None and marker.is_declaration:
        marker.linkage = "internal"
        marker.attributes.add("alwaysinline")
        lir.IRBuilder(marker.append_basic_block()).ret_void()
    return result


def install() -> None:
    """Mark the prange loops of every parallel compile from now on."""
    global _installed
    from numba.parfors import parfor_lowering

    if _installed:
        return
    parfor_lowering.call_parallel_gufunc = _marked(parfor_lowering.call_parallel_gufunc)
    _installed = True


def install_when_imported() -> None:
    """``install`` now if Numba's parfor lowering is imported, else when it is."""
    after_import("numba.parfors.parfor_lowering", install)


def from_primal(
    dispatcher: Any, signature: tuple[Any, ...]
) -> tuple[str, Any, tuple[Launch, ...]] | None:
    """What ``parfor_compile`` makes (the IR, the function descriptor, the launches),
    from the marked module of the dispatcher's own compile of ``signature``; None where
    that compile was not marked or its module not kept. Raises ParforUnsupported where a
    loop was not marked because a typed launch cannot express it."""
    from llvmlite import binding as ll
    from numba.core.compiler_lock import global_compiler_lock

    cres = dispatcher.overloads.get(tuple(signature))
    if cres is None or cres.objectmode or cres.lifted or cres.typing_error is not None:
        return None
    with global_compiler_lock:
        record = _records.get(cres.library, {}).get(cres.fndesc.mangled_name)
        if record is None:
            return None
        if record.unsupported is not None:
            raise ParforUnsupported(record.unsupported)
        text = module_defining(cres.library, cres.fndesc.mangled_name)
        text = text and _typed(text, record)
        if not text or not record.launches:
            return None
        module = ll.parse_assembly(text)
        codegen = cres.library._codegen
        # Numba's launches link the bodies' libraries, which hold their wrappers too:
        # the module defining each body instead, and what the body links.
        seen = {id(lib) for lib in record.launchers}
        bodies = zip(record.launches, record.bodies, record.callees, strict=True)
        for launch, library, callees in bodies:
            body = module_defining(library, launch.body)
            if body is None:
                return None
            kept = ll.parse_assembly(body)
            _link(kept, callees, set())
            _first_stage(kept, codegen)
            # As Numba links a library in (_get_module_for_linking).
            module.link_in(for_linking(kept))
        _link(module, cres.library._linking_libraries, seen)
        _first_stage(module, codegen)
        # SELECT inlined: Numba's launches are on a branch never taken.
        fpm = ll.create_function_pass_manager(module)
        fpm.add_cfg_simplification_pass()
        fpm.initialize()
        fpm.run(module.get_function(cres.fndesc.mangled_name))
        fpm.finalize()
        dead = ll.create_module_pass_manager()
        dead.add_strip_dead_prototypes_pass()
        dead.run(module)
        ir = str(module)
    # Every launch marked, the branches to Numba's dropped: else compiled again.
    if f"@{SELECT}" in ir or re.search(r"call [^\n]*@do_scheduling", ir):
        return None
    return ir, cres.fndesc, tuple(record.launches)


def serial_from_primal(dispatcher: Any, signature: tuple[Any, ...]) -> tuple[str, Any] | None:
    """The module of the dispatcher's own parallel compile of ``signature`` with its
    prange loops run on the calling thread (``_numba_parfor_serial``), and the function
    descriptor: the serial twin's numbers without compiling it. None where
    ``from_primal`` has no module, or a loop is not marked (the twin is compiled).

    Only for functions whose prange bodies have no loop of their own: GMM's (loops
    over components and dimensions, temporaries per sample) so took Enzyme 0.8 s
    against the twin's 0.08 s, and its gradient was 10-40% slower (42 against 30-39
    ms on a 2-core Xeon); heat's and Rosenbrock's were as fast as the twin's, their
    first call 0.19 against 0.30 s (heat)."""
    if has_prange_with_inner_loop(dispatcher.py_func):
        return None
    try:
        captured = from_primal(dispatcher, signature)
    except ParforUnsupported:
        return None
    if captured is None:
        return None
    ir, fndesc, launches = captured
    return serial_ir(ir, launches), fndesc


def _first_stage(module: Any, codegen: Any) -> None:
    """Numba's first module stage (opt=0: inlining), as ``first_stage_only`` gives it."""
    pm = codegen._module_pass_manager(
        loop_vectorize=False, slp_vectorize=False, opt=0, cost="cheap"
    )
    pm.run(module)


def _link(module: Any, libraries: Any, seen: set[int]) -> None:
    """Link Numba's modules of ``libraries`` (each once) into ``module``."""
    for library in libraries:
        if id(library) not in seen:
            seen.add(id(library))
            module.link_in(library._get_module_for_linking(), preserve=True)


def _typed(text: str, record: _Record) -> str | None:
    """The kept module ``text`` with ``select`` returning true, each launch declared and
    its body kept; None where the module is not as marked."""
    text, selects = re.subn(
        r"^(define internal i1 @" + SELECT + r"\(\)[^\n]*\{\n(?:[^\n]*:\n)?\s*)ret i1 false$",
        r"\1ret i1 true",
        text,
        flags=re.M,
    )
    if selects != 1:
        return None
    for launch, declaration in zip(record.launches, record.declarations, strict=True):
        text, count = re.subn(
            r'^define internal void @"?' + re.escape(launch.name) + r'"?\(.*?\n\}\n',
            lambda _, d=declaration: d + "\n",  # type: ignore[misc]
            text,
            flags=re.M | re.S,
        )
        if count != 1:
            return None
    return text + "\n" + "\n".join(record.keeps) + "\n"
