"""The compiles of a Numba function whose IR enzyme_py differentiates.

By default a private clone's compile without Numba's full module optimisation
(``ad_compile``: LLVM IR only where Numba allows, else a full compile at opt=0);
``serial_compile`` for Numba's fully optimised one, the serial twin's for a
``parallel=True`` dispatcher. Also the dispatcher's twin with bounds checking as asked.
"""

from __future__ import annotations

import contextlib
import re
import weakref
from collections.abc import Iterator
from typing import Any, NamedTuple

from enzyme_py.frontends import _numba_parfor_capture
from enzyme_py.frontends._numba_capture import for_linking, kept_modules, module_defining
from enzyme_py.frontends._numba_signatures import compile_if_missing
from enzyme_py.frontends._numba_substitutes import (
    njit_callees,
    uses_substitutes,
    with_substitutes,
)


class IRCompile(NamedTuple):
    """The LLVM IR of a compile (its callees linked in) and its function descriptor."""

    ir: str
    fndesc: Any

    @staticmethod
    def of(cres: Any) -> IRCompile:
        return IRCompile(cres.library.get_llvm_str(), cres.fndesc)


def ad_compile(dispatcher: Any, signature: tuple[Any, ...]) -> IRCompile:
    """A compile of ``dispatcher``'s function for differentiation: its own code
    without Numba's full module optimisation (loop unrolling and vectorisation make
    Enzyme cache far more); the derivative is optimised after Enzyme.

    Where ``_numba_capture`` kept the module of the dispatcher's own compile, that
    module (``_from_primal``): the same IR, without compiling again.

    A private clone of the dispatcher compiles it, after the original has compiled
    the signature, so that every callee that uses no substitute keeps its normal, fully
    optimised compile (those that do, transitively, are cloned with the substitutes:
    ``with_substitutes``; ``uses_substitutes`` then chooses the full form below).
    LLVM IR only where Numba allows (``ad_compile_ir``); else (a function with
    object-mode blocks, whose lifted code needs machine code) a full compile.
    """
    import numba

    compile_if_missing(dispatcher, signature)
    substitutes = uses_substitutes(dispatcher.py_func)
    if not substitutes:
        kept = _from_primal(dispatcher, signature)
        if kept is not None:
            return kept
    clone = numba.njit(**serial_options(dispatcher))(with_substitutes(dispatcher.py_func))
    if not substitutes:
        try:
            return ad_compile_ir(clone, signature, kept_callees=True)
        except Exception:  # the full compile below raises what is wrong, if anything
            pass
    # The substitutes' helpers are compiled for the first time here: the full form
    # gives them the first module stage only (fully optimised, their vectorised loops
    # fail Enzyme's type analysis). The IR-only form with that stage for fresh callees
    # gave np.max a wrong gradient, so functions using substitutes take this form.
    return _ad_compile_full(clone, signature)


def _from_primal(dispatcher: Any, signature: tuple[Any, ...]) -> IRCompile | None:
    """The IR ``ad_compile_ir`` would make, from the module of the dispatcher's own
    compile that ``_numba_capture`` kept: the callees' modules linked in, then the
    first module stage only, as there. For ``parallel=True``, that compile's marked
    module with its prange loops run on the calling thread
    (``_numba_parfor_capture.serial_from_primal``). None where no such module was
    kept, and for what that compile differs in: object mode, lifted loops."""
    from llvmlite import binding as ll
    from numba.core.compiler_lock import global_compiler_lock

    if is_parallel(dispatcher):
        # Its own compile's module, its prange loops on the calling thread.
        try:
            serial = _numba_parfor_capture.serial_from_primal(dispatcher, signature)
        except Exception:  # not as marked: the serial twin is compiled
            return None
        return None if serial is None else IRCompile(*serial)
    cres = dispatcher.overloads.get(tuple(signature))
    if cres is None or cres.objectmode or cres.lifted or cres.typing_error is not None:
        return None
    text = module_defining(cres.library, cres.fndesc.mangled_name)
    if text is None:
        return None
    with global_compiler_lock:
        module = ll.parse_assembly(text)
        linked = _linked_first_stage(module, cres.library, kept_callees=True, roots=(dispatcher,))
        return IRCompile(linked, cres.fndesc)


def _linked_first_stage(
    module: Any, library: Any, kept_callees: bool = False, roots: tuple[Any, ...] = ()
) -> str:
    """What CPUCodeLibrary.finalize does before handing a module to Numba's JIT, up to
    its first module stage: ``library``'s callees linked into ``module`` (Numba's fully
    optimised modules; ``kept_callees``: as ``_link_callees`` links them), then that stage only
    (opt=0: inlining, as in _ad_compile_full); the IR text. Hold Numba's compiler
    lock. ``roots``: the dispatchers whose @njit callees may recurse (see
    ``_link_recursion_targets``)."""
    seen: set[int] = set()
    if kept_callees:
        _link_callees(module, library._linking_libraries, seen)
    for callee in library._linking_libraries:
        if id(callee) not in seen:
            seen.add(id(callee))
            module.link_in(callee._get_module_for_linking(), preserve=True)
    _link_recursion_targets(module, roots, seen, kept_callees)
    module = with_recursion_resolved(module)
    pm = library._codegen._module_pass_manager(
        loop_vectorize=False, slp_vectorize=False, opt=0, cost="cheap"
    )
    pm.run(module)
    return str(module)


_UNRESOLVED = ".numba.unresolved$"


def refuse_unresolved_recursion(ir: str, name: str) -> None:
    """Raise EnzymeError where ``ir`` still calls a function through Numba's
    ``.numba.unresolved$`` global (``with_recursion_resolved`` found no definition):
    Enzyme aborts on such a load (in the build process by default; in this one with
    ENZYME_PY_ISOLATE=0)."""
    from enzyme_py.core import EnzymeError

    found = re.search(rf'@"?{re.escape(_UNRESOLVED)}(\w+)', ir)
    if found is None:
        return
    callee = _python_name(found.group(1))
    raise EnzymeError(
        f"'{name}' reaches a recursive call of the @njit function {callee} that "
        "enzyme_py could not resolve (Numba calls it through a global it fills when it "
        "loads the code, .numba.unresolved$..., which Enzyme cannot follow). What to "
        f"do: write the recursion in {callee} as a loop, or keep the types of its "
        "arguments the same in the recursive call as in the first one."
    )


def _python_name(mangled: str) -> str:
    """The dotted name in a Numba symbol (``_ZN8__main__8fact_recB2v3...``:
    ``__main__.fact_rec``); the symbol itself where it is not of that form."""
    parts, at = [], 3 if mangled.startswith("_ZN") else len(mangled)
    while at < len(mangled) and mangled[at].isdigit():
        digits = re.match(r"\d+", mangled[at:])
        assert digits is not None
        size, at = int(digits.group()), at + len(digits.group())
        parts.append(mangled[at : at + size])
        at += size
    return "'" + (".".join(parts) if parts else mangled) + "'"


def with_recursion_resolved(module: Any) -> Any:
    """``module`` with its recursive calls direct: Numba calls a function that
    recurses through a global it fills only when it loads the code
    (``.numba.unresolved$NAME``), which Enzyme cannot follow (it aborted on such a
    load). Where ``module`` defines NAME, the global becomes a constant holding NAME
    under another name (Numba's loader scans that prefix), so that the first module
    stage turns the loads into calls of NAME. ``module`` itself where there is none."""
    from llvmlite import binding as ll

    targets = {}
    for variable in module.global_variables:
        if variable.name.startswith(_UNRESOLVED):
            try:
                function = module.get_function(variable.name[len(_UNRESOLVED) :])
            except NameError:  # defined elsewhere: left to Numba's loader
                continue
            if not function.is_declaration:
                targets[variable.name] = function
    if not targets:
        return module
    text = str(module)
    for name, function in targets.items():
        resolved = f'@".enzyme_py.resolved${function.name}"'
        declared = re.compile(rf'^@"?{re.escape(name)}"? = [^\n]*$', re.MULTILINE)
        text = declared.sub(
            f"{resolved} = internal unnamed_addr constant i8* bitcast "
            f'({function.type} @"{function.name}" to i8*)',
            text,
        )
        text = re.sub(rf'@"?{re.escape(name)}"?(?![\w.$-])', resolved, text)
    resolved_module = ll.parse_assembly(text)
    resolved_module.verify()
    return resolved_module


def _link_callees(module: Any, callees: Any, seen: set[int]) -> None:
    """Link the libraries ``callees`` into ``module``: each as the modules of its compile
    that ``_numba_capture`` kept (before Numba's module optimisation), then its own
    callees so; a callee with none kept as Numba's fully optimised module (which holds
    its callees). Serial compiles link them so (``_from_primal`` and the clones of
    ``ad_compile``, which must give the same IR): Enzyme differentiates such callees
    better, where GMM's ``_logsumexp`` unrolled by 8 had it keep eight caches and copy
    their remainder each sample (the serial GMM gradient's build 400 -> 240 ms, the
    gradient 5-7% faster). A parallel compile (``_numba_parfor``) does not: GMM's
    prange body so took 15 -> 21 ms on two threads."""
    from llvmlite import binding as ll

    for callee in callees:
        if id(callee) in seen:
            continue
        seen.add(id(callee))
        texts = kept_modules(callee)
        if not texts:
            module.link_in(callee._get_module_for_linking(), preserve=True)
            continue
        for text in texts:
            # As Numba links a callee (_get_module_for_linking).
            module.link_in(for_linking(ll.parse_assembly(text)))
        _link_callees(module, callee._linking_libraries, seen)


def _link_recursion_targets(
    module: Any, roots: tuple[Any, ...], seen: set[int], kept_callees: bool
) -> None:
    """Link into ``module`` the functions its recursive calls reach but no library it
    links holds: Numba types a recursive call ``f(x, n - 1)`` made from
    ``f(x, 3)`` (n a literal) as another compile of ``f``, which the caller reaches
    only through ``.numba.unresolved$NAME``. That compile is found among the overloads
    of the @njit functions ``roots`` reach (through globals and closure cells) and
    linked as its callees are (``kept_callees``: as ``_link_callees`` links them); the
    functions it reaches are then looked for in turn (mutual recursion)."""
    from llvmlite import binding as ll

    while True:
        defined = {fn.name for fn in module.functions if not fn.is_declaration}
        wanted = {
            variable.name[len(_UNRESOLVED) :]
            for variable in module.global_variables
            if variable.name.startswith(_UNRESOLVED)
        } - defined
        found = [(name, _library_defining(name, roots)) for name in sorted(wanted)]
        found = [(name, library) for name, library in found if library is not None]
        if not found or all(id(library) in seen for _, library in found):
            return
        for name, library in found:
            if id(library) in seen:
                continue
            seen.add(id(library))
            texts = kept_modules(library) if kept_callees else []
            # A copy of Numba's module: linking consumes what it links, and Numba
            # links that module into the libraries it compiles later.
            parts = [ll.parse_assembly(text) for text in texts]
            parts = parts or [library._get_module_for_linking().clone()]
            for part in parts:
                # The target external: nothing in ``module`` calls it by name yet.
                module.link_in(for_linking(part, keep=name))
            if texts:
                _link_callees(module, library._linking_libraries, seen)


def _library_defining(name: str, roots: tuple[Any, ...]) -> Any:
    """The library of the compile named ``name`` among the overloads of the @njit
    functions ``roots`` reach, or None."""
    stack, visited = list(roots), set()
    while stack:
        dispatcher = stack.pop()
        if id(dispatcher) in visited:
            continue
        visited.add(id(dispatcher))
        for compiled in list(dispatcher.overloads.values()):
            if compiled.fndesc.mangled_name == name:
                return compiled.library
        stack.extend(njit_callees(dispatcher.py_func))
    return None


def _ad_compile_full(clone: Any, signature: tuple[Any, ...]) -> IRCompile:
    """``clone``'s compile through its dispatcher, with only Numba's first module
    stage (opt=0: inlining, for its refcount pruning)."""
    from numba.core.compiler_lock import global_compiler_lock

    before_codegen: dict[int, str] = {}
    with global_compiler_lock, first_stage_only(before_codegen):
        clone.compile(signature)
    compiled = clone.overloads[tuple(signature)]
    return IRCompile(before_codegen[id(compiled.library)], compiled.fndesc)


@contextlib.contextmanager
def first_stage_only(
    before_codegen: dict[int, str] | None = None, kept_callees: bool = True
) -> Iterator[None]:
    """While active, every library Numba finalises gets only its first module stage
    (opt=0: inlining): the clone's, and that of any callee compiled for the first
    time inside it (the substitutes' helpers of ``_numba_substitutes``, whose fully
    optimised, vectorised loops Enzyme cannot type). Callees compiled before keep
    their full optimisation. Hold Numba's compiler lock.

    ``before_codegen`` (the full compile of ``_ad_compile_full``): filled with each
    such library's module text after that stage and before Numba's code generation
    (by ``id`` of the library), and libraries are linked into one another in that
    form, those compiled before as the modules ``_numba_capture`` kept (with their
    callees, as ``_link_callees`` links them) where it kept them and
    ``kept_callees``, else as Numba links them (fully optimised):

    - code generation rewrites a module in place (sunk addresses, loop strength
      reduction), and Enzyme v0.0.289's reverse of a max and min loop in that form
      (``if v > m: m = v`` and ``if v < mn: mn = v`` over ``x[1:]``, in a function
      that also calls print) put the minimum's adjoint on another element, with no
      error; np.max called next to np.sort did so in this compile too;
    - np.diag's code, compiled with the function itself, came fully optimised (a
      vectorised gather, which Enzyme has no reverse for) into the compile of a
      function that also calls np.linalg.cholesky, and its derivative was refused.

    The compile enzyme_py differentiates by default (``_from_primal``) links so."""
    from llvmlite import binding as ll
    from numba.core import codegen

    library_class = codegen.CPUCodeLibrary
    full = library_class._optimize_final_module
    numbas_for_linking = library_class._get_module_for_linking

    def inline_only(self: Any) -> None:
        self._final_module = with_recursion_resolved(self._final_module)
        pm = self._codegen._module_pass_manager(
            loop_vectorize=False, slp_vectorize=False, opt=0, cost="cheap"
        )
        pm.run(self._final_module)
        if before_codegen is not None:
            before_codegen[id(self)] = str(self._final_module)

    def linked_before_codegen(self: Any) -> Any:
        if before_codegen is None:
            return numbas_for_linking(self)
        text = before_codegen.get(id(self))
        if text is not None:
            module = ll.parse_assembly(text)
        else:
            texts = kept_modules(self) if kept_callees else []
            if not texts:
                return numbas_for_linking(self)
            module = ll.parse_assembly(texts[0])
            for more in texts[1:]:
                module.link_in(ll.parse_assembly(more))
            _link_callees(module, self._linking_libraries, set())
        return for_linking(module)  # as Numba's _get_module_for_linking makes them

    library_class._optimize_final_module = inline_only
    library_class._get_module_for_linking = linked_before_codegen
    try:
        yield
    finally:
        library_class._optimize_final_module = full
        library_class._get_module_for_linking = numbas_for_linking


def ad_compile_ir(clone: Any, signature: tuple[Any, ...], kept_callees: bool = False) -> IRCompile:
    """``_ad_compile_full``'s IR without what Numba's JIT needs and enzyme_py never
    uses: no machine code (the compile is never called) and no wrappers for Python
    or C callers, whose lowering and code generation were half of a first
    derivative's time (about 0.2 s of Rosenbrock's 0.6 s on a loaded 2-core machine).
    The compile result has the library (not finalized) and fndesc that
    ``get_llvm_str()`` and the wrapper need. ``kept_callees``: callees linked as
    ``_link_callees`` links them."""
    from numba.core import compiler
    from numba.core.compiler_lock import global_compiler_lock

    making = clone._compiler  # what Dispatcher.compile uses (_FunctionCompiler)
    with global_compiler_lock:
        flags = compiler.Flags()
        making.targetdescr.options.parse_as_flags(flags, making.targetoptions)
        flags = making._customize_flags(flags)
        flags.no_compile = True
        flags.no_cpython_wrapper = True
        flags.no_cfunc_wrapper = True
        cres = compiler.compile_extra(
            making.targetdescr.typing_context,
            making.targetdescr.target_context,
            making._get_implementation(tuple(signature), {}),
            args=tuple(signature),
            return_type=None,
            flags=flags,
            locals=making.locals,
            pipeline_class=making.pipeline_class,
        )
        if cres.typing_error is not None or cres.objectmode or cres.lifted:
            raise RuntimeError("not a plain nopython compile")
        library = cres.library
        return IRCompile(
            _linked_first_stage(library._final_module, library, kept_callees, roots=(clone,)),
            cres.fndesc,
        )


def is_parallel(dispatcher: Any) -> bool:
    """True for a dispatcher made with ``parallel=True``."""
    return bool(dispatcher.targetoptions.get("parallel"))


def serial_options(dispatcher: Any) -> dict[str, Any]:
    """The dispatcher's options for a private clone: no disk cache, and serial code.

    A ``parallel=True`` function whose own compile cannot serve (``_from_primal``) is
    differentiated as its serial twin: without
    ``parallel``, Numba compiles ``prange`` as ``range`` and array expressions as
    loops, the same arithmetic in one thread, which Enzyme differentiates (Numba's
    parallel runtime, a gufunc launched through ``numba_parallel_for``, it cannot).
    """
    return {
        k: v
        for k, v in dispatcher.targetoptions.items()
        if k not in ("cache", "nopython", "parallel")
    }


def serial_compile(dispatcher: Any, signature: tuple[Any, ...]) -> Any:
    """Numba's fully optimised compile of ``signature``: the dispatcher's own, or for a
    ``parallel=True`` dispatcher that of its serial twin (see ``serial_options``)."""
    compile_if_missing(dispatcher, signature)
    if not is_parallel(dispatcher):
        return dispatcher.overloads[tuple(signature)]
    twin = serial_twin(dispatcher)
    twin.compile(signature)
    return twin.overloads[tuple(signature)]


def serial_twin(dispatcher: Any) -> Any:
    """The dispatcher itself, or for a ``parallel=True`` one its serial twin (see
    ``serial_options``), made once."""
    import numba

    if not is_parallel(dispatcher):
        return dispatcher
    twin = _serial_twins.get(dispatcher)
    if twin is None:
        twin = _serial_twins[dispatcher] = numba.njit(**serial_options(dispatcher))(
            dispatcher.py_func
        )
    return twin


_serial_twins: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def with_boundscheck(dispatcher: Any, boundscheck: bool | None) -> Any:
    """``dispatcher``, or a twin of it whose own indexing is checked as asked: ``None``
    checks unless the dispatcher was made with ``boundscheck=False``. Functions the body
    calls keep their own setting (Numba's flag is per function; ``NUMBA_BOUNDSCHECK``
    overrides all)."""
    import numba

    options = {k: v for k, v in dispatcher.targetoptions.items() if k not in ("cache", "nopython")}
    wanted = options.get("boundscheck") is not False if boundscheck is None else boundscheck
    if bool(options.get("boundscheck")) == wanted:
        return dispatcher
    return numba.njit(**{**options, "boundscheck": wanted})(dispatcher.py_func)
