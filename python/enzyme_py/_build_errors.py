"""Enzyme's failures as EnzymeErrors: its words, the user's names, and what to write
instead, from what the failing module calls (Numba's runtime, LAPACK, libm, ...)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from enzyme_py.core import EnzymeError

if TYPE_CHECKING:
    from enzyme_py.frontends import IRFunction

_NO_RULE = re.compile(
    r"No (?:augmented forward pass|reverse pass|forward mode derivative)"
    r"(?: found)? for (\S+)"
)


# Functions of Numba's parallel runtime (parallel=True, prange).
_NUMBA_PARALLEL = (
    "get_parallel_chunksize",
    "set_parallel_chunksize",
    "do_scheduling",
    "get_num_threads",
    "get_thread_id",
    "get_sched_size",
    "allocate_sched",
    "deallocate_sched",
    "numba_parallel",
    "numba_gil_",
)
# Numba's LAPACK wrappers (numba/np/linalg.py); its BLAS ones (numba_xxdot, numba_xxgemv,
# numba_xxgemm, numba_xxnrm2) get loop bodies on real arrays (src/numba_rewrites.cpp).
_NUMBA_LAPACK = ("numba_xxgetrf", "numba_xxpotrf", "numba_xgesv", "numba_ez_")
# What Enzyme's assertions say of a call to a variadic function.
_VARIADIC_CALL = (
    "nowrite_shadows.size() == todiff->arg_size()",
    "Number of arg operands",
    "number of arg operands",
    "@PySys_FormatStdout(",
)


def _called(fn: IRFunction) -> list[str]:
    """The functions fn's module defines or declares (Enzyme's errors often name
    another value than the call that stops it)."""
    try:
        return list(fn.module.native.names())
    except Exception:  # a module without the listing: no hints from it
        return []


def _prints(fn: IRFunction) -> bool:
    """Whether fn's module calls print()'s C-API function (its errors name other things)."""
    return "PySys_FormatStdout" in _called(fn)


_NOT_FOUND = re.compile(r"Symbols not found: \[ ([^\]]*) \]")


def missing_symbols_error(message: str, fn: IRFunction, description: str) -> EnzymeError:
    """EnzymeError for a derivative whose code calls functions this process lacks, with
    advice for the functions missing and the frontend the code came from."""
    names = sorted({n for found in _NOT_FOUND.findall(message) for n in found.split(", ")})
    which = ", ".join(names) if names else "(see below)"
    kind = fn.origin[0] if fn.origin else ""
    hints = []
    if "digamma" in names:
        hints.append(
            "Enzyme's derivative of tgamma calls digamma, which libm lacks; enzyme_py's "
            "rules for tgamma and lgamma apply where the code calls them, not where it "
            "takes their address: call them directly."
        )
    openmp = [n for n in names if n.startswith(("__kmpc_", "omp_"))]
    if openmp:
        hints.append(
            "These are OpenMP's runtime functions: compile the code with ez.c or ez.cpp and "
            "flags=['-fopenmp'], for which enzyme_py loads LLVM's runtime (libomp.so.5)."
        )
    cxx = [n for n in names if n.startswith(("_Z", "__cxa_", "_Unwind"))]
    if cxx:
        hints.append(
            f"{', '.join(cxx)}: C++ library code without its definition here (a template "
            "instantiated elsewhere, a library's function): define it in the source "
            "given to ez.cpp, or give it a custom rule (ez.register_gradient)."
        )
    numba_runtime = [n for n in names if n.startswith(("NRT_", "numba_"))]
    if numba_runtime:
        hints.append(
            f"{', '.join(numba_runtime)}: Numba's runtime, which a @numba.cfunc rule that "
            "can raise (or allocates) calls: give the rule no raise and no allocation."
        )
    rest = [n for n in names if n not in {"digamma", *openmp, *cxx, *numba_runtime}]
    if rest:
        where = {
            "numba": "write it as an @njit function the differentiated one calls",
            "cython": "write it as a cdef function of the Cython module",
        }.get(kind, "define it in the source or IR given to enzyme_py")
        hints.append(
            f"{', '.join(rest)}: no definition in this process: {where}, or give it a "
            "custom rule (ez.register_gradient)."
        )
    text = (
        f"the derivative of '{fn.display_name}' calls functions this process does not "
        f"have: {which}\n(while loading {description}: {message})"
    )
    if hints:
        text += "\nWhat to do: " + " ".join(hints)
    return EnzymeError(text)


# Longer messages carry Enzyme's dump of the function it failed on (its IR, its
# activity analysis): half a megabyte for a second derivative through np.linalg.solve.
_LONGEST_MESSAGE = 20000
# Lines of the dump that start with a letter: block labels ("for.body:  ; preds = ..."),
# definitions and declarations.
_DUMPED = re.compile(r"[\w.$-]+:(\s*;.*)?$|(define|declare|attributes) ")


def _shortened(message: str) -> str:
    """Enzyme's message without its dump: the first line, then the last lines of its
    own words (where it says what it could not handle, or the assertion it failed)."""
    if len(message) <= _LONGEST_MESSAGE:
        return message
    lines = message.splitlines()
    # The dump's lines are indented (instructions, "constantinst[...]" verdicts), block
    # labels, definitions or braces.
    said = [line for line in lines[1:] if line[:1].isalpha() and not _DUMPED.match(line)]
    last = [line[:400] for line in said[-3:]]
    left_out = len(lines) - 1 - len(last)
    return (
        f"{lines[0][:300]} [...]\n[{left_out} lines of Enzyme's dump of the function (its "
        "IR and activity analysis) left out; this error's enzyme_output holds them]\n"
        + "\n".join(last)
    )


def enzyme_error(message: str, fn: IRFunction, description: str) -> EnzymeError:
    """EnzymeError with Enzyme's words (its dump of the function left out, kept in the
    error's ``enzyme_output``), the user's names, and what to do instead."""
    full = message
    message = message.replace(f"'{fn.name}'", f"'{fn.display_name}'")
    hints = []
    missing = sorted(set(_NO_RULE.findall(message)))
    lapack = sorted({m for m in (*missing, *_called(fn)) if m.startswith(_NUMBA_LAPACK)})
    if lapack:
        hints.append(
            f"'{fn.display_name}' calls LAPACK through Numba's helper library "
            f"({', '.join(lapack)}). np.linalg.solve, inv, det, slogdet, cholesky and norm "
            "of float arrays differentiate, in the function differentiated and in the @njit "
            "functions it calls by name (enzyme_py gives them loops instead), but not in "
            "@njit functions passed as arguments nor on complex arrays; np.linalg.eig, eigh, "
            "eigvals, svd, qr, lstsq, pinv and cond have no derivative. What to do: call "
            "solve, inv, det, slogdet, cholesky and norm by their names (not through a "
            "function passed in), write the step as loops in the @njit function (an LU or "
            "Cholesky factorisation and triangular solves differentiate), or compute it "
            "outside the function and pass the result in as a Const argument."
        )
    blas = [m for m in missing if m not in lapack and (m.startswith("numba_xx") or "blas" in m)]
    if blas:
        hints.append(
            f"'{fn.display_name}' calls BLAS through Numba's helper library "
            f"({', '.join(blas)}: np.dot or @ on complex arrays, np.linalg.norm), which "
            "Enzyme cannot see into (np.dot and @ on float64 and float32 arrays "
            "differentiate). Use real arrays, or write the product as loops in the "
            "@njit function."
        )
    blas += lapack
    parallel = [m for m in missing if m.startswith(_NUMBA_PARALLEL)]
    if parallel:
        hints.append(
            f"'{fn.display_name}' calls a function compiled with parallel=True (prange): "
            f"Numba's parallel runtime ({', '.join(parallel[:3])}, ...) cannot be "
            "differentiated. enzyme_py differentiates the parallel=True function you "
            "give it as its serial twin (prange as range), but not the parallel=True "
            "functions it calls: drop parallel=True from those."
        )
        missing = [m for m in missing if m not in parallel and not m.startswith("PyEval_")]
    runtime = [m for m in missing if m not in blas and m.startswith(("numba_", "NRT_"))]
    if runtime:
        are = "is a function" if len(runtime) == 1 else "are functions"
        hints.append(
            f"{', '.join(runtime)} {are} of Numba's runtime, which Numba calls for some "
            "operations (lists that grow: list.append, NRT_MemInfo_varsize_realloc; "
            "strings; nested lists in the @njit functions it calls, np.sort and np.median "
            f"in @njit functions passed as arguments) and Enzyme cannot see into. In "
            f"'{fn.display_name}', use arrays instead of lists that grow (np.empty(n) and "
            "element assignments); nested-list literals differentiate in the function "
            "itself, np.sort, np.median, np.outer and np.diff there and in the @njit "
            "functions it calls by name."
        )
    others = [m for m in missing if m not in blas and m not in runtime]
    if others:
        are = "is an external function" if len(others) == 1 else "are external functions"
        source = (
            "write it as a cdef function of the Cython module (or cimport it from a .pxd "
            "with its code)"
            if fn.origin and fn.origin[0] == "cython"
            else "give enzyme_py its source (C through ez.c, or an @njit function)"
        )
        hints.append(
            f"{', '.join(others)} {are} without a derivative Enzyme knows: {source} "
            "instead of a compiled library or ctypes/cffi call, or give it a custom rule "
            "(ez.register_gradient)."
        )
    variadic = any(mark in message for mark in _VARIADIC_CALL)
    if variadic and fn.origin and fn.origin[0] in ("c", "llvm_ir", "cython"):
        hints.append(
            f"'{fn.display_name}' calls a variadic function with a body (a parameter list "
            "ending in '...', va_arg), which Enzyme v0.0.289 cannot differentiate through: "
            "give that function a fixed parameter list (pass an array and its length)."
        )
    elif variadic or _prints(fn):
        hints.append(
            "Numba's code for some operations calls Python's C API through variadic "
            "functions (PyTuple_Pack, PySys_FormatStdout), which Enzyme v0.0.289 cannot "
            "differentiate through: print(), objmode blocks and exceptions raised with "
            f"values known at run time. In @njit functions passed to '{fn.display_name}' "
            "as arguments, leave print() out (print in the function itself and in the @njit "
            "functions it calls by name is skipped by the derivative) "
            "and give exceptions constant messages (slice and fancy-index assignments "
            "differentiate)."
        )
    if fn.origin and fn.origin[0] == "numba" and "numba_cpow" in _called(fn):
        hints.append(
            f"'{fn.display_name}' raises a complex number to a power (z ** p), which Numba "
            "computes in its helper numba_cpow, which Enzyme cannot type: write it as "
            "cmath.exp(p * cmath.log(z)) (complex arithmetic, cmath.exp and cmath.log "
            "differentiate)."
        )
    if "Mismatched activity" in message:
        unsure = (
            f"Enzyme could not tell whether some memory of '{fn.display_name}' holds "
            "values that need derivatives"
        )
        if fn.origin and fn.origin[0] == "numba" and any("xxnrm2" in n for n in _called(fn)):
            hints.append(
                f"'{fn.display_name}' calls np.linalg.norm, whose Numba code for a matrix "
                "(np.linalg.norm(a) of a 2-d array, ord=1, ord=np.inf) Enzyme cannot type "
                "in an @njit function passed as an argument (in the function differentiated "
                "and the @njit functions it calls by name, norms of vectors and matrices "
                "differentiate): call it by name, or write it out, math.sqrt(np.sum(a * a)) "
                "or np.sum(np.abs(a))."
            )
        if fn.origin and fn.origin[0] == "numba":
            hints.append(
                f"{unsure}. Integer arrays whose memory is reinterpreted (a.view(np.float64)) "
                "do this (integer index arrays made inside the function, np.arange(n), "
                "np.argsort(x), differentiate otherwise), and so do integer arrays mixed into "
                "float arithmetic (x * np.arange(n)): use float arrays in float arithmetic "
                "(np.arange(0.0, n)) and no views across dtypes. runtime_activity=True "
                "(ez.autodiff) helps in some of these cases (decided when it runs, a little "
                "slower)."
            )
        else:
            hints.append(
                f"{unsure}. A pointer that points into a Const array on one path and into a "
                "differentiated one on another (a layer's input that is x for the first "
                "layer and the state after it) does this: make both Duplicated (a zero "
                "shadow for the one you do not differentiate), or pass "
                "runtime_activity=True to ez.autodiff (decided when it runs, a little slower)."
            )
    if "key.returnUsed" in message:
        hints.append(
            "A custom derivative rule is attached to a function whose result is used, and "
            "Enzyme v0.0.289 then cannot return the primal in the same pass: ask for "
            "ActiveOnly (ez.grad does) and compute the value separately."
        )
    if "getting diffe of constant value" in message:
        hints.append(
            f"Enzyme v0.0.289 asserts on some Reverse derivatives whose return value is "
            f"Const (here '{fn.display_name}''s, computed by a fused multiply-add or the "
            "like). Ask for the same derivative with an Active return and pass the seed "
            "0.0: nothing flows back from the return value, as with Const (add "
            "strong_zero=True if the derivative may be inf or nan there)."
        )
    if "visitOMPCall" in message or "unhandled openmp function" in message:
        hints.append(
            "Enzyme v0.0.289 differentiates OpenMP's parallel loops in reverse mode only: "
            "a second derivative (ez.hessian, ez.hvp, ez.jacfwd of ez.grad) of code compiled "
            "with -fopenmp differentiates the reverse pass's parallel loops in forward mode, "
            "which it cannot. Take second derivatives of the function compiled without "
            "-fopenmp (its first derivatives can keep it)."
        )
    if "Bad function type of custom" in message:
        hints.append("Give the rule the argument types Enzyme expects (listed above).")
    if "numba.dynamic.globals" in message:
        hints.append(
            f"'{fn.display_name}' calls a ctypes or cffi function (Numba keeps its address "
            "in a global), whose code Enzyme cannot see: write that function with @njit "
            "or compile its C source with ez.c."
        )
    text = f"{_shortened(message)}\n(while differentiating {description})"
    if hints:
        text += "\nWhat to do: " + " ".join(hints)
    error = EnzymeError(text)
    error.enzyme_output = full
    return error
