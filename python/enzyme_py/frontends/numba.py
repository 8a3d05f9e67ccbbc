"""Numba ``@njit`` dispatchers as functions to differentiate.

Numba compiles each signature to a function with its own ABI: a status code as the
return value, the result written through a pointer, an exception-info pointer, and
every array expanded into seven fields (meminfo, parent, nitems, itemsize, data,
shape..., strides...). For each signature enzyme_py takes the IR of Numba's
library and adds a wrapper in plain terms, which is what Enzyme differentiates:

    RET wrapper(<array: T* data, i64 shape... [, i64 stride...]> | <scalar>, ...,
                [<result part: T* data, i64 shape...>, ...], i64* errors)

Arrays are passed without a meminfo (Numba's reference counting sees null and does
nothing): C-contiguous ones by data pointer and shape, those of other layouts with
their strides too. An array or tuple result is copied into output arrays, one per
part (``_numba_results``); a scalar is returned by value. ``errors`` receives
Numba's status code and its exception-info pointer, so a Numba exception is raised
again in Python.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from enzyme_py import _state
from enzyme_py._signature import Param
from enzyme_py.frontends import _numba_parfor, _numba_parfor_capture, _numba_runtime
from enzyme_py.frontends._numba_capture import install_when_imported
from enzyme_py.frontends._numba_compile import (
    IRCompile,
    is_parallel,
    refuse_unresolved_recursion,
    serial_compile,
    with_boundscheck,
)
from enzyme_py.frontends._numba_compile import ad_compile as _ad_compile
from enzyme_py.frontends._numba_errors import raise_numba_error
from enzyme_py.frontends._numba_identity import code_key as _code_key
from enzyme_py.frontends._numba_parfor_launch import PARFOR_OVERLAP
from enzyme_py.frontends._numba_results import (
    INTEGER_MARK,
    INTEGER_MARK_DECLARATION,
    ResultPart,
    copy_out,
    mismatched_part,
    output_signature,
    result_parts,
)
from enzyme_py.frontends._numba_signatures import (
    compile_if_missing,
    refuse_unsigned,
    resolve_signature,
    return_type,
    returns_arrays,
    returns_value,
)
from enzyme_py.frontends.ir import IRFunction, SourceModule, function_of, parse_module

__all__ = [
    "NumbaSignature",
    "is_dispatcher",
    "is_parallel",
    "raise_numba_error",
    "resolve_signature",
    "return_type",
    "returns_arrays",
    "returns_value",
    "specialize",
    "with_boundscheck",
]
# _ad_compile and _code_key are looked up in this module when called (a test counts the
# IR compiles by replacing _ad_compile here, another calls _code_key).

# Numba's compiles from now on keep their IR, which a first derivative then takes
# instead of compiling the function again (_numba_capture); not in the stub build.
if _state.native is not None:
    install_when_imported()
    _numba_parfor_capture.install_when_imported()

WRAPPER = "__enzyme_py_numba_wrapper"
_ARRAY_FIELDS = ("meminfo", "parent", "nitems", "itemsize", "data", "shape", "strides")


def is_dispatcher(f: Any) -> bool:
    """True for a Numba ``@njit`` dispatcher (without importing Numba if it is absent)."""
    module = type(f).__module__
    if not module.startswith("numba"):
        return False
    from numba.core.dispatcher import Dispatcher

    return isinstance(f, Dispatcher)


@dataclass(frozen=True)
class NumbaParam:
    """One Python-level parameter of a Numba function.

    ``param`` describes it as the engine sees its main value (an array is its data
    pointer); ``ndim`` is the rank of an array parameter (0 for scalars).
    """

    param: Param
    ndim: int
    numba_type: Any

    @property
    def is_array(self) -> bool:
        return self.param.kind == "pointer"


@dataclass(frozen=True)
class NumbaSignature:
    """One specialisation of a dispatcher, ready for the engine."""

    name: str  # the Python function's name
    numba_signature: tuple[Any, ...]
    params: tuple[NumbaParam, ...]
    ret: Param | None
    wrapper: IRFunction  # per NumbaParam its value (+ hidden shape...), hidden errors
    # An array or tuple result: its parts, each an output array of the wrapper after
    # the parameters (None: a scalar returned by value, or nothing).
    results: tuple[ResultPart, ...] | None = None
    # Positions among the Python parameters of Numba functions passed as arguments:
    # part of the signature (Numba calls them directly), not of the wrapper.
    functions: tuple[int, ...] = ()


_runtime_symbols_defined = False


def _define_runtime_symbols() -> None:
    """Numba's runtime (NRT) and helper functions live in extension modules loaded
    privately; tell the JIT where they are, under the names Numba's IR uses."""
    global _runtime_symbols_defined
    if _runtime_symbols_defined:
        return
    from numba import _helperlib
    from numba.core.runtime import _nrt_python

    symbols = {f"NRT_{k}": int(v) for k, v in _nrt_python.c_helpers.items()}
    symbols.update({f"numba_{k}": int(v) for k, v in _helperlib.c_helpers.items()})
    _state.native.define_symbols(symbols)
    _runtime_symbols_defined = True


def _scalar_param(numba_type: Any, name: str) -> Param:
    from numba.core import types

    if isinstance(numba_type, types.Boolean):
        return Param(name, "int", np.dtype(np.bool_))
    if isinstance(numba_type, (types.Float, types.Integer)):
        return Param(
            name,
            "float" if isinstance(numba_type, types.Float) else "int",
            np.dtype(str(numba_type)),
        )
    raise TypeError(
        f"parameter '{name}' has Numba type {numba_type}, which enzyme_py cannot pass yet "
        "(supported: float and integer scalars, booleans, arrays of any layout, @njit "
        "functions as Const arguments)"
    )


def _llvm_scalar(ctx: Any, numba_type: Any) -> str:
    (ty,) = ctx.get_arg_packer([numba_type]).argument_types
    return str(ty)


_MEMO = "_enzyme_py_specialized"


def specialize(
    dispatcher: Any,
    signature: tuple[Any, ...],
    numba_optimized: bool = False,
    strided: bool = False,
    threads: int = 1,
) -> NumbaSignature:
    """Compile ``dispatcher`` for ``signature`` and wrap it for the engine (once per
    dispatcher, signature and form; see ``_specialize``).

    The memo lives on the dispatcher itself: each specialisation refers back to its
    dispatcher, so a process-wide table (even a weak-keyed one) would keep every
    dispatcher, and its compiled IR, alive for good; on the dispatcher the two go
    together (a reference cycle the garbage collector frees).
    """
    key = (tuple(signature), numba_optimized, strided, threads)
    known = getattr(dispatcher, _MEMO, None)
    if known is None:
        known = {}
        try:
            setattr(dispatcher, _MEMO, known)
        except (AttributeError, TypeError):  # no attributes: no memo
            return _specialize(dispatcher, signature, numba_optimized, strided, threads)
    if key not in known:
        known[key] = _specialize(dispatcher, signature, numba_optimized, strided, threads)
    return known[key]  # type: ignore[no-any-return]


def _shared_ad_compile(dispatcher: Any, signature: tuple[Any, ...]) -> Any:
    """``_ad_compile(dispatcher, signature)``, once per dispatcher and signature: the
    specialisations of one signature in other forms (``strided``, which only changes
    the wrapper; ``ez.grad``'s read-only check uses the plain one, the derivative the
    strided one) share the IR compile, which was a GMM first derivative's 0.2-0.3 s
    twice. Kept in the dispatcher's memo (see ``specialize``)."""
    key = ("ad_compile", tuple(signature))
    known = getattr(dispatcher, _MEMO, None)
    if known is None:
        return _ad_compile(dispatcher, signature)
    if key not in known:
        known[key] = _ad_compile(dispatcher, signature)
    return known[key]


def _specialize(
    dispatcher: Any,
    signature: tuple[Any, ...],
    numba_optimized: bool = False,
    strided: bool = False,
    threads: int = 1,
) -> NumbaSignature:
    """Compile ``dispatcher`` for ``signature`` and wrap it for the engine.

    By default from a compile without Numba's full module optimisation (see
    ``_numba_compile.ad_compile``); ``numba_optimized=True`` takes the dispatcher's own
    compile, for what Enzyme cannot analyse in the unoptimised form. ``strided``: array
    parameters of layouts other than C take their strides as hidden parameters (any
    layout passes); without it every array is passed C-contiguous. ``threads`` above 1,
    for a ``parallel=True`` dispatcher: a parallel compile whose prange loops run on
    that many threads in the derivative (``_numba_parfor``); otherwise the serial
    twin.
    """
    from numba.core import types

    name = dispatcher.py_func.__name__
    names = list(inspect.signature(dispatcher.py_func).parameters)
    refuse_unsigned(dispatcher, signature)
    # Types and ABI come from the dispatcher's own compile (the primal's); the IR
    # Enzyme differentiates is compiled only when a derivative is built (see below).
    compile_if_missing(dispatcher, signature)
    cres = dispatcher.overloads[tuple(signature)]
    threaded = threads > 1 and is_parallel(dispatcher)
    ctx = cres.target_context
    fndesc = cres.fndesc
    fnty = ctx.call_conv.get_function_type(fndesc.restype, fndesc.argtypes)
    retptr_type = str(fnty.args[0])
    excinfo_type = str(fnty.args[1])

    params: list[NumbaParam] = []
    functions: list[int] = []
    signature_text: list[str] = []
    call_args: list[str] = []
    body: list[str] = []
    for i, (arg_name, numba_type) in enumerate(zip(names, fndesc.argtypes, strict=True)):
        v = f"a{i}"
        if isinstance(numba_type, types.Dispatcher):
            # Numba calls the function the type names directly; the value it passes
            # is never read.
            functions.append(i)
            call_args.append(f"{ctx.get_argument_type(numba_type)} null")
            continue
        if isinstance(numba_type, types.Array):
            # Arrays of any layout but C get their strides passed; C-contiguous ones
            # get them computed here (Numba's code for layout C reads shapes only).
            passes_strides = strided and numba_type.layout != "C"
            if numba_type.layout == "F" and not passes_strides:
                raise TypeError(
                    f"parameter '{arg_name}' of '{name}' is a Fortran-ordered array; enzyme_py "
                    "passes C-contiguous arrays: use np.ascontiguousarray"
                )
            fields = ctx.data_model_manager[numba_type]._fields
            if tuple(fields) != _ARRAY_FIELDS:
                raise TypeError(f"unexpected Numba array layout {fields}")
            if not isinstance(numba_type.dtype, (types.Float, types.Integer, types.Boolean)):
                raise TypeError(
                    f"parameter '{arg_name}' of '{name}' is an array of {numba_type.dtype}; "
                    "enzyme_py passes arrays of floats, integers and booleans (pass a "
                    "structured array's fields as arrays of their own: "
                    "np.ascontiguousarray(r['a']))"
                )
            dtype = np.dtype(str(numba_type.dtype))
            if dtype.kind not in "fiub":
                raise TypeError(
                    f"parameter '{arg_name}' of '{name}' is an array of {numba_type.dtype}; "
                    "enzyme_py passes arrays of floats, integers and booleans"
                )
            elem = str(ctx.get_data_type(numba_type.dtype))
            nd = numba_type.ndim
            param = Param(
                arg_name,
                "pointer",
                dtype,
                strided=passes_strides,
                readonly=not numba_type.mutable,
            )
            params.append(NumbaParam(param, nd, numba_type))
            signature_text.append(f"{elem}* {NOALIAS} %{v}")
            signature_text.extend(f"i64 %{v}.shape{d}" for d in range(nd))
            for d in range(nd):
                # Every NumPy shape is >= 0: said to LLVM, it proves indices
                # non-negative and folds Numba's negative-index tests
                # (src/index_signs.h).
                body.append(f"  %{v}.shape{d}.sign = icmp sge i64 %{v}.shape{d}, 0")
                body.append(f"  call void @llvm.assume(i1 %{v}.shape{d}.sign)")
            if passes_strides:
                signature_text.extend(f"i64 %{v}.stride{d}" for d in range(nd))
            elif nd:
                # C-contiguous strides, innermost first.
                body.append(f"  %{v}.stride{nd - 1} = add i64 0, {dtype.itemsize}")
                for d in range(nd - 2, -1, -1):
                    body.append(f"  %{v}.stride{d} = mul i64 %{v}.stride{d + 1}, %{v}.shape{d + 1}")
            # nitems: the product of the shape.
            body.append(f"  %{v}.n0 = add i64 0, 1")
            for d in range(nd):
                body.append(f"  %{v}.n{d + 1} = mul i64 %{v}.n{d}, %{v}.shape{d}")
            call_args += [
                "i8* null",
                "i8* null",
                f"i64 %{v}.n{nd}",
                f"i64 {dtype.itemsize}",
                f"{elem}* %{v}",
                *(f"i64 %{v}.shape{d}" for d in range(nd)),
                *(f"i64 %{v}.stride{d}" for d in range(nd)),
            ]
        else:
            param = _scalar_param(numba_type, arg_name)
            params.append(NumbaParam(param, 0, numba_type))
            llvm_type = _llvm_scalar(ctx, numba_type)
            signature_text.append(f"{llvm_type} %{v}")
            call_args.append(f"{llvm_type} %{v}")

    restype = fndesc.restype
    # Arrays and tuples come back through output arrays (see _numba_results).
    results = result_parts(restype, ctx, name)
    if isinstance(restype, types.NoneType) or results is not None:
        ret_llvm = "void"
    else:
        ret_llvm = retptr_type[:-1]  # the pointee of the result pointer
    ret_param = None if ret_llvm == "void" else _scalar_param(restype, "return")
    slot_type = retptr_type[:-1]
    if results is not None:
        signature_text.extend(output_signature(results, NOALIAS))
    signature_text.append("i64* %errors")
    lines = [
        f"define {ret_llvm} @{WRAPPER}({', '.join(signature_text)}) {{",
        "entry:",
        f"  %result = alloca {slot_type}",
        f"  store {slot_type} zeroinitializer, {slot_type}* %result",
        # Numba writes its exception info pointer into errors[1]: a slot per call,
        # so concurrent calls that raise never see each other's details.
        "  %errors1 = getelementptr i64, i64* %errors, i64 1",
        "  store i64 0, i64* %errors1",
        f"  %excinfo = bitcast i64* %errors1 to {excinfo_type}",
        *body,
        f"  %status = call i32 @{_CALLEE}("
        + ", ".join([f"{retptr_type} %result", f"{excinfo_type} %excinfo", *call_args])
        + ")",
        "  %status64 = sext i32 %status to i64",
        "  store i64 %status64, i64* %errors",
    ]
    if results is not None:
        lines += copy_out(results, slot_type, "%errors")
    elif ret_llvm == "void":
        lines.append("  ret void")
    else:
        lines += [f"  %value = load {ret_llvm}, {ret_llvm}* %result", f"  ret {ret_llvm} %value"]
    lines.append("}")

    _define_runtime_symbols()
    wrapper_lines = "\n".join(lines)
    array_names = [p.param.name for p in params if p.is_array]
    # The wrapper's parameters: each Python parameter (arrays followed by their
    # shapes, which enzyme_py fills in), then the errors buffer.
    wrapper_params: list[Param] = []
    for p in params:
        index = len(wrapper_params)
        wrapper_params.append(p.param)
        wrapper_params.extend(
            Param(f"{p.param.name}.shape{d}", "int", np.dtype(np.int64), hidden=("shape", index, d))
            for d in range(p.ndim)
        )
        if p.param.strided:
            wrapper_params.extend(
                Param(
                    f"{p.param.name}.stride{d}",
                    "int",
                    np.dtype(np.int64),
                    hidden=("stride", index, d),
                )
                for d in range(p.ndim)
            )
    for part in results or ():
        index = len(wrapper_params)
        label = "result" if part.member is None else f"result[{part.member}]"
        wrapper_params.append(Param(label, "pointer", part.dtype))
        wrapper_params.extend(
            Param(f"{label}.shape{d}", "int", np.dtype(np.int64), hidden=("shape", index, d))
            for d in range(part.ndim)
        )
    wrapper_params.append(Param("errors", "pointer", None, hidden=("errors", 0, 0)))
    compiled: list[Any] = []  # the compile whose IR is differentiated, once made
    launches: list[Any] = []  # its prange loops, where they run on several threads

    def source(noalias: bool, combined: bool = False) -> SourceModule:
        """The module Enzyme differentiates: Numba's IR and the wrapper, with the
        arrays' noalias promise or without it; ``combined``: the Numba function
        inlined into the wrapper (``combined_form``) unless it reaches recursion."""
        if not compiled:
            if threaded:  # a parallel compile, each prange loop a typed launch
                ir_compile, found = _numba_parfor.parfor_compile(dispatcher, signature)
                compiled.append(ir_compile)
                launches.extend(found)
            elif numba_optimized:
                compiled.append(IRCompile.of(serial_compile(dispatcher, signature)))
            else:
                compiled.append(_shared_ad_compile(dispatcher, signature))
        own = compiled[0]
        refuse_unresolved_recursion(own.ir, name)
        numba_ir = _numba_runtime.prepare(
            _without_reference_counting(own.ir),
            not _numba_runtime.reinterprets_memory(dispatcher.py_func),
        )
        numba_ir = _numba_runtime.without_array_owners(
            numba_ir, own.fndesc.mangled_name, array_names
        )
        launch_names: list[str] = []
        if threaded:
            numba_ir, launch_names = _numba_parfor.threaded_ir(numba_ir, tuple(launches), threads)
        wrapper_text = wrapper_lines.replace(_CALLEE, own.fndesc.mangled_name)
        if noalias:
            numba_ir = _with_noalias(numba_ir, own.fndesc.mangled_name, array_names)
        text = numba_ir + "\n" + wrapper_text.replace(NOALIAS, "noalias" if noalias else "")
        text += "\n"
        if not re.search(r"^declare void @llvm\.assume\(", numba_ir, re.MULTILINE):
            text += "declare void @llvm.assume(i1)\n"  # the wrapper's assumes
        if f"@{INTEGER_MARK}(" in wrapper_text:
            text += INTEGER_MARK_DECLARATION + "\n"  # copy_out's type marks
        if launch_names:
            module = _numba_parfor.threaded_module(
                text, own.fndesc.mangled_name, WRAPPER, launch_names, _stable(text), noalias
            )
        elif combined:
            inlined = _numba_parfor.inlined_into_wrapper(text, own.fndesc.mangled_name)
            module = _simplified(parse_module(inlined, _stable(text) + _COMBINED))
            if module.native.reaches_recursion(WRAPPER):
                # Left a call of itself, Enzyme v0.0.289's derivative of the wrapper
                # added the recursion's adjoints twice (test_numba's recursion test).
                module = _simplified(parse_module(text, _stable(text) + _COMBINED))
        else:
            module = _simplified(parse_module(text, _stable(text)))
        if len(wrapper_params) != len(function_of(module, WRAPPER, name).params):
            raise RuntimeError(f"the wrapper of '{name}' has an unexpected signature")
        return module

    code_key = _code_key(dispatcher, signature, restype, numba_optimized, strided, threads)
    # No combined form for a threaded module: it has the Numba function inlined
    # already. On one thread (the serial twin: _numba_parfor_serial.py, or Numba's
    # compile of it), the combined form: Enzyme's split form of the called function cost
    # heat prange's first derivative about 30 ms more (Enzyme 28 -> 15 ms, its module
    # 1615 -> 1098 lines), and GMM prange's on one thread 0.76-0.85 -> 0.62 s, its
    # gradient 37 -> 28-31 ms (2-core AMD EPYC). It once took Rosenbrock prange's reverse
    # 5x as long: a forward pass of the prange sum that ez.grad does not want, stored in
    # Numba's reduction array; the derivative's pipeline now drops that store
    # (src/unread_stores.h), and the loop with it (215 us against 208-217 us split).

    def module_of(noalias: bool, combined: bool = False) -> SourceModule:
        if code_key is None:  # not identifiable without its IR: keyed on the IR
            return source(noalias, combined)
        return SourceModule.lazy(
            lambda: source(noalias, combined),
            f"{code_key} noalias={noalias}" + (_COMBINED if combined else ""),
        )

    module = module_of(True)

    def on_error(status: int, detail: int) -> None:
        part = mismatched_part(status)
        if part is not None:
            what = "its result" if len(results or ()) == 1 else f"part {part} of its result"
            raise ValueError(
                f"'{name}' returned {what} with another shape than the array given for it "
                "(its cotangent or tangent): give one shaped like the result"
            )
        if status == PARFOR_OVERLAP:
            raise ValueError(
                f"a prange loop of '{name}' writes an array that shares memory with "
                "another array it uses (two views of one array); its derivative on "
                "threads needs them apart: pass or make a copy of one (.copy()), or "
                "differentiate on one thread, which follows the loop as range would: "
                f"ez.autodiff({name}, ..., threads=1), or, with the helpers (ez.grad, "
                "ez.vjp, ...), that loop written with range instead of prange"
            )
        raise_numba_error(status, detail, name)

    def alias_safe() -> IRFunction:
        if threaded:
            # Arrays that overlap: the serial derivative without the noalias promise.
            # The threaded one's snapshots would copy them apart (PARFOR_OVERLAP).
            serial = specialize(dispatcher, signature, numba_optimized, strided).wrapper
            assert serial.alias_safe is not None
            return serial.alias_safe()
        return IRFunction(
            module_of(False),
            WRAPPER,
            tuple(wrapper_params),
            ret_param,
            name,
            on_error,
            combined_form=None if threaded else combined_form_of(False),
        )

    def combined_form_of(noalias: bool) -> Callable[[], IRFunction]:
        @functools.cache
        def combined_form() -> IRFunction:
            return IRFunction(
                module_of(noalias, combined=True),
                WRAPPER,
                tuple(wrapper_params),
                ret_param,
                name,
                on_error,
                alias_safe if noalias else None,
            )

        return combined_form

    wrapper = IRFunction(
        module,
        WRAPPER,
        tuple(wrapper_params),
        ret_param,
        name,
        on_error,
        alias_safe,
        ("numba", dispatcher, tuple(signature), numba_optimized, strided, threads),
        combined_form=None if threaded else combined_form_of(True),
    )
    return NumbaSignature(
        name, tuple(signature), tuple(params), ret_param, wrapper, results, tuple(functions)
    )


NOALIAS = "<noalias>"
_COMBINED = " combined"  # the identity's mark of a module whose wrapper has the body inlined
_CALLEE = "<callee>"  # the mangled name of the compile whose IR is differentiated


def _simplified(module: SourceModule) -> SourceModule:
    """``module`` prepared for Enzyme (in place): Numba's temporaries made provably
    distinct, the callees Numba links in inlined, loop-invariant loads hoisted. What
    Enzyme caches for the reverse pass then shrinks (on the GMM benchmark from one
    value per inner iteration to one per loop, and no malloc per iteration)."""
    module.native.simplify_for_enzyme()
    return module


# Parts of Numba's IR that differ between compiles of the same code: the version in
# mangled names (..B2v17B..), the ids in names of pickled constants, and object
# addresses in the reprs its wrapper keeps for messages.
_UNSTABLE = re.compile(r"B\d+v\d+B|\.const\.pickle(?:data|buf)\.\d+| at 0x[0-9a-f]+")


def _stable(ir: str) -> str:
    """The IR with per-compile names made constant: the same code keys the same
    cached derivative in every compile and every process."""
    return _UNSTABLE.sub("~", ir)


def _with_noalias(ir: str, function: str, arrays: list[str]) -> str:
    """Numba's function with its array data pointers marked ``noalias``.

    Numba marks none, and without it Enzyme must assume that writing any array may
    change any other, and caches every value it reads. enzyme_py keeps the promise
    true: arrays that overlap in a call go to the derivative built without it.
    """
    start = ir.index(f"define i32 @{function}(")
    end = ir.index("\n", start)
    line = ir[start:end]
    for name in arrays:
        line = line.replace(f" %arg.{name}.4,", f" noalias %arg.{name}.4,")
        line = line.replace(f" %arg.{name}.4)", f" noalias %arg.{name}.4)")
    return ir[:start] + line + ir[end:]


_REFCOUNT_FUNCTION = re.compile(
    r"^(define [^\n]*@NRT_(?:incref|decref)\([^\n]*\{)\n.*?\n\}$", re.MULTILINE | re.DOTALL
)


def _without_reference_counting(ir: str) -> str:
    """Numba's NRT_incref/NRT_decref made no-ops.

    Inside a derivative, arrays from Python come without a MemInfo and temporaries
    live in enzyme_py's arena (released after each call), so nothing needs counting;
    and Enzyme cannot differentiate through the atomic counter updates.
    """
    return _REFCOUNT_FUNCTION.sub(lambda m: m.group(1) + "\n  ret void\n}", ir)
