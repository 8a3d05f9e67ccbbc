"""``lgamma`` and ``gamma`` in LLVM IR, as code Enzyme differentiates.

Enzyme v0.0.289 aborts on libm's ``lgamma`` ("unknown subtype"); its derivative of
``tgamma`` calls ``digamma``, which libm lacks; and it cannot see into Numba's
``numba_gamma`` (``math.gamma``). Each call of one of these declared functions
becomes a call of a function of the same type that returns the very value libm
(Numba) computes, an inactive call, combined with a term that is exactly zero, or a
factor that is exactly one, whose derivatives are those of the function at every
order:

- lgamma(x) = L + (S(x) - S_c(x)), where L is libm's value, S is lgamma as code
  (reflection below 1/2, the recurrence up to 10, Stirling's series with terms to
  z^-13: its derivatives are digamma, trigamma, ... to about 1e-15) and S_c the same
  computation in an inactive function: the difference is 0 and its derivatives are
  S's;
- gamma(x) = G * exp(S(x) - S_c(x)), G being libm's (Numba's) value: near x,
  G exp(S(y) - S(x)) is gamma(y) (the sign is G's), so every derivative is gamma's;
  the factor is exp(0) = 1, and an overflowed G stays infinite;
- the float32 functions compute S and S_c in float64 (the zero and the one are exact
  in either type).

Where S - S_c is not a number (x a pole, S infinite) the term is 0: the value is
libm's, with no derivative. A function the module defines itself, or uses other than
by direct calls (its address taken), is left as it is: marked inactive, such a use
would carry no derivative.

Numba's IR takes the rules in ``_numba_runtime.prepare``; C, C++ and Cython modules
in the modules their derivatives are built from (``SourceModule.for_derivatives``),
so that their primal calls keep libm's own cost.
"""

from __future__ import annotations

import math
import re
import struct

from enzyme_py.frontends._ir_lines import declares


def _hex(v: float) -> str:
    return f"0x{struct.unpack('<Q', struct.pack('<d', v))[0]:016X}"


def _series_definitions() -> str:
    """IR of enzyme_py.lgamma.series (S), .positive (its part for x >= 1/2) and
    .const (S_c)."""
    pi = _hex(math.pi)
    coefficients = [1 / 12, -1 / 360, 1 / 1260, -1 / 1680, 1 / 1188, -691 / 360360, 1 / 156]
    lines = [
        "define internal double @enzyme_py.lgamma.positive(double %x) {",
        "entry:",
        "  br label %loop",
        "loop:",
        "  %z = phi double [ %x, %entry ], [ %z1, %body ]",
        "  %acc = phi double [ 0.0, %entry ], [ %acc1, %body ]",
        f"  %lt = fcmp olt double %z, {_hex(10.0)}",
        "  br i1 %lt, label %body, label %done",
        "body:",
        "  %lz = call double @llvm.log.f64(double %z)",
        "  %acc1 = fsub double %acc, %lz",
        "  %z1 = fadd double %z, 1.0",
        "  br label %loop",
        "done:",
        "  %w = fdiv double 1.0, %z",
        "  %w2 = fmul double %w, %w",
        f"  %t{len(coefficients)} = fadd double 0.0, {_hex(coefficients[-1])}",
    ]
    for k in range(len(coefficients) - 1, 0, -1):
        lines += [
            f"  %m{k} = fmul double %w2, %t{k + 1}",
            f"  %t{k} = fadd double %m{k}, {_hex(coefficients[k - 1])}",
        ]
    lines += [
        "  %series = fmul double %w, %t1",
        "  %logz = call double @llvm.log.f64(double %z)",
        "  %zh = fsub double %z, 0.5",
        "  %a = fmul double %zh, %logz",
        "  %b = fsub double %a, %z",
        f"  %c = fadd double %b, {_hex(0.5 * math.log(2 * math.pi))}",
        "  %d = fadd double %c, %series",
        "  %r = fadd double %acc, %d",
        "  ret double %r",
        "}",
        "define internal double @enzyme_py.lgamma.series(double %x) {",
        "entry:",
        "  %small = fcmp olt double %x, 0.5",
        "  br i1 %small, label %reflect, label %positive",
        "reflect:",
        f"  %pix = fmul double %x, {pi}",
        "  %s = call double @llvm.sin.f64(double %pix)",
        "  %as = call double @llvm.fabs.f64(double %s)",
        f"  %q = fdiv double {pi}, %as",
        "  %lq = call double @llvm.log.f64(double %q)",
        "  %om = fsub double 1.0, %x",
        "  %p = call double @enzyme_py.lgamma.positive(double %om)",
        "  %rr = fsub double %lq, %p",
        "  ret double %rr",
        "positive:",
        "  %v = call double @enzyme_py.lgamma.positive(double %x)",
        "  ret double %v",
        "}",
        "define internal double @enzyme_py.lgamma.const(double %x) noinline nofree "
        '"enzyme_inactive" {',
        "  %v = call double @enzyme_py.lgamma.series(double %x)",
        "  ret double %v",
        "}",
        # S(x) - S_c(x): 0, or 0 where it is not a number.
        "define internal double @enzyme_py.lgamma.zero(double %x) {",
        "  %s = call double @enzyme_py.lgamma.series(double %x)",
        "  %c = call double @enzyme_py.lgamma.const(double %x)",
        "  %d = fsub double %s, %c",
        "  %ok = fcmp ord double %d, 0.0",
        "  %d0 = select i1 %ok, double %d, double 0.0",
        "  ret double %d0",
        "}",
    ]
    return "\n".join(lines) + "\n"


# Each function's type, and how its wrapper combines libm's value %v with the zero %z
# (float64) into its result %r.
_TYPES = {
    "lgamma": "double",
    "lgammaf": "float",
    "tgamma": "double",
    "tgammaf": "float",
    "numba_gamma": "double",
    "numba_gammaf": "float",
}
_PLUS_ZERO = {
    "double": "  %r = fadd double %v, %z\n",
    "float": "  %zf = fptrunc double %z to float\n  %r = fadd float %v, %zf\n",
}
_TIMES_ONE = {
    "double": "  %e = call double @llvm.exp.f64(double %z)\n  %r = fmul double %v, %e\n",
    "float": (
        "  %e = call double @llvm.exp.f64(double %z)\n"
        "  %ef = fptrunc double %e to float\n"
        "  %r = fmul float %v, %ef\n"
    ),
}
_INTRINSICS = ("llvm.log.f64", "llvm.sin.f64", "llvm.fabs.f64", "llvm.exp.f64")


def _wrapper(libm: str) -> str:
    """IR of enzyme_py.<libm>: libm's value of %x combined with the zero of x."""
    ty = _TYPES[libm]
    widen = "  %xd = fpext float %x to double\n" if ty == "float" else ""
    arg = "%xd" if ty == "float" else "%x"
    return (
        f"define internal {ty} @enzyme_py.{libm}({ty} %x) {{\n"
        f"  %v = call {ty} @{libm}({ty} %x)\n"
        f"{widen}"
        f"  %z = call double @enzyme_py.lgamma.zero(double {arg})\n"
        f"{(_PLUS_ZERO if libm.startswith('lgamma') else _TIMES_ONE)[ty]}"
        f"  ret {ty} %r\n"
        "}\n"
    )


_DONE = "@enzyme_py.lgamma.zero("


def mark_inactive(ir: str, name: str) -> str:
    """``ir`` with the declaration of ``name`` inactive to Enzyme (and freeing nothing
    it tracks)."""
    pattern = re.compile(rf"^(declare [^\n]*@{re.escape(name)}\([^\n]*)$", re.MULTILINE)
    return pattern.sub(lambda m: m.group(1) + ' nofree "enzyme_inactive"', ir)


def with_gamma_rules(ir: str) -> str:
    """``ir`` with each call of the functions of ``_TYPES`` it declares made a call of
    enzyme_py.<name> (see the module's docstring), their declarations inactive."""
    if _DONE in ir:
        return ir  # taken already
    found = []
    for libm, ty in _TYPES.items():
        if not declares(ir, libm):
            continue
        call = re.compile(rf"(call(?: [a-z]+)* {ty} @){libm}\(")
        rewritten = call.sub(r"\g<1>" + f"enzyme_py.{libm}(", ir)
        # Any use left but its declaration (its address taken) keeps the function.
        if len(re.findall(rf"@{libm}\b", rewritten)) != 1:
            continue
        ir = mark_inactive(rewritten, libm)
        found.append(libm)
    if not found:
        return ir
    text = _series_definitions() + "".join(_wrapper(libm) for libm in found)
    for name in _INTRINSICS:
        if not declares(ir, name):
            text += f"declare double @{name}(double)\n"
    return ir + "\n" + text
