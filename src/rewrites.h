// Rewrites of LLVM modules around Enzyme, for IR of any frontend.
//
// Before Enzyme: what makes its analyses see what is true (declarations
// without memory attributes it would mis-extend, scoped noalias metadata it
// would over-extend, fabs feeding only comparisons). After Enzyme: its tape
// moved from malloc to enzyme_py's per-thread stack (arena.h); atomic adds of
// private shadows made plain; Enzyme's arithmetic that LLVM would take wrongly
// (divisions by squares, nuw on loop limits). And a query: whether a function
// reaches recursion.
// Numba's own rewrites (simplify_for_enzyme) are in numba_rewrites.h.
#pragma once

#include <string>
#include <vector>

#include <llvm-c/Core.h>

namespace enzyme_py {

// Numba and others declare some libm functions readonly (tanh, cosh, lgamma, even
// where enzyme_py declares them inactive); Enzyme, which knows them by name, would
// then add readnone and the verifier rejects the result. External declarations
// carry no memory attributes into Enzyme; but for `runtime_too` false, enzyme_py's
// own runtime (`__enzyme_py_*`, such as the prange body's thread index,
// inaccessiblememonly), whose names Enzyme does not know.
void strip_memory_attributes_of_declarations(LLVMModuleRef mod, bool runtime_too);

// Scoped noalias metadata (!alias.scope, !noalias and the
// llvm.experimental.noalias.scope.decl calls marking where a scope starts) is
// what inlining a callee with restrict / noalias parameters leaves: a promise
// for one execution of the inlined call. Enzyme v0.0.289 takes it as holding
// across loop iterations, so it reloads in the reverse pass values a later
// iteration overwrote: a wrong gradient, without an error (a C++ helper with
// __restrict__ parameters, inlined into a loop updating state in place). Removed
// before Enzyme runs; noalias parameter attributes stay. Returns how many
// instructions lost it.
int strip_scoped_noalias(LLVMModuleRef mod);

// Enzyme v0.0.289 aborts ("getting diffe of constant value") on fabs whose result
// only feeds comparisons, as in convergence tests (abs(err) > tol). Such
// comparisons are rewritten without fabs: |x| > r is x > r or x < -r, and so on
// for >=, <, <= (ordered: false for NaN either way). Returns how many.
int compare_without_fabs(LLVMModuleRef mod);

// Enzyme v0.0.289's min-cut caching aborts (computeMinCache: "Assertion
// `legalRecompute(V, Available2, nullptr)' failed") on a loop header's PHI whose
// value on entry is a load or PHI it may not recompute: a running maximum seeded
// with the first entry (`mx = v[0]; for i in range(1, n): ...`, a logsumexp, whose
// loop Numba unrolled: its remainder loop starts from a PHI of that load). The
// build then ran again without min-cut caching: a larger tape and a slower
// derivative (GMM). Such a floating-point value now enters the loop through a
// `freeze` of it: the value itself (a load of initialised memory is never
// poison), which Enzyme differentiates as the identity and may recompute.
// Returns how many values.
int freeze_values_entering_loops(LLVMModuleRef mod);

// Enzyme v0.0.289 differentiates `x = x / c` in a loop wrongly, without an error,
// where x is a PHI fed by that very division and the quotient is used besides
// (a present value: `disc /= 1 + rate; pv += cash[t] * disc`): its reverse pass
// recomputes the quotient from the PHI's value after the loop's last iteration,
// for every iteration, and the gradient with respect to c is wrong (-38.7 for
// -42.8). Through a `freeze` of the PHI (the value itself, differentiated as the
// identity) the quotient is cached per iteration and the gradient is right. Every
// division whose dividend is a PHI gets one. Returns how many divisions.
int freeze_phi_dividends(LLVMModuleRef mod);

// Enzyme v0.0.289 differentiates a running maximum or minimum wrongly, without an
// error, where its value is used inside the loop (`m = max(m, x[i]); s += m`, a
// drawdown's running peak): it rewrites the selection `m' = x[i] > m ? x[i] : m`
// to track the index of the element selected, and its reverse pass reads that
// index's value after the loop's last iteration for every iteration (the C kernel
// `s += m` over [1, 0.5, 2, 0.3, 3, 0.1]: gradient [0, 0, 0, 0, 2, 0] for
// [2, 0, 2, 0, 2, 0]). Through a `freeze` of the loop-header PHI the select reads
// (the value itself, differentiated as the identity) the selection is cached per
// iteration and the gradient is right. Only where the selections the running value
// goes through (one, or a chain of them in an unrolled loop) or the PHI have a user
// inside the loop besides each other and comparisons: a pure reduction (np.max, a
// logsumexp's maximum, unrolled or not) keeps Enzyme's index, which is right there.
// Returns how many selects.
int freeze_running_extrema(LLVMModuleRef mod);

// Before every run of Enzyme (its C API, engine.cpp; its passes on marker calls,
// enzyme_pass.cpp): each rewrite above, in this order. The marker pass (C code's
// __enzyme_autodiff calls; a prange body's reverse, made before the derivative that
// calls it) keeps the memory attributes of enzyme_py's runtime (`runtime_too`
// false), the derivative's run strips them too: both as before the marker pass took
// these rewrites, so that the prange benchmarks' derivatives compile as they did
// (kept in the derivative's run or stripped in the marker pass, GMM prange's code
// changed: its gradient 3-5% slower in 4 of 5 alternated runs, within the spread of
// its builds, whose code varies from one build to the next).
void prepare_for_enzyme(LLVMModuleRef mod, bool runtime_too);

// The running sums of `function`'s outermost loops (a header PHI of floating-point
// type whose latch value is PHI + x or PHI - x, with neither used elsewhere in the
// loop) may be reordered: their fadd / fsub get the `reassoc` flag, so LLVM's
// vectoriser can sum in several lanes. Only for the body of a Numba prange loop,
// whose outermost loop is the prange loop over one chunk: Numba leaves the order of a
// prange reduction unspecified (it sums per thread, then across threads), so another
// order within a chunk is one Numba may take too. Returns how many sums.
int reorder_loop_sums(LLVMModuleRef mod, const std::string &function);

// Enzyme's tape allocations (malloc marked enzyme_cache_alloc, the realloc of
// __enzyme_exponentialallocation) and every free go to arena.h's tape.
// every_malloc: all of malloc (the augmented forward pass of split mode, whose
// tape must live in the tape's own arena, anonymous tape struct included).
void route_tape_to_arena(LLVMModuleRef mod, bool every_malloc = false);

// Reverse kernels on the CPU device: a shadow each thread has a private copy of
// needs no atomic adds. In `function`, every atomic fadd/fsub into memory based
// on one of its parameters `params` (0-based) becomes a load, an add and a
// store; one whose address cannot be traced to a parameter through GEPs and
// casts stays atomic (always correct). Returns how many were made plain.
int make_adds_plain(LLVMModuleRef mod, const std::string &function,
                    const std::vector<unsigned> &params);

// Enzyme v0.0.289's forward rule for x / y divides by y * y (an fmul it makes),
// which overflows for |y| > 1e154: the tangent came out 0 without an error.
// After Enzyme, every fdiv of X by (Y * Y) whose flags allow reassociation and
// reciprocals (Enzyme's own arithmetic is `fast`; so is user code compiled
// with fast-math, which allows the same) becomes X * (1 / Y) * (1 / Y), the new
// instructions without those two flags so that InstCombine does not fold them
// back. Returns how many.
int divide_by_squares_in_steps(LLVMModuleRef mod);

// Enzyme v0.0.289 computes some loops' last iteration (n - 1, where the reverse
// loop starts) as `add nuw i64 %n, -1`. No unsigned add of a
// negative constant stays below 2^64 unless %n is 0, so LLVM folds it to -1: the
// reverse loop of a strided copy (Numba's x.copy() of a non-contiguous x, then
// np.cumsum and np.linalg.norm) started at -1, never ended, and crashed the
// interpreter. After Enzyme, every integer add of a negative constant loses its
// nuw flag (dropping a flag only makes the code more defined). Returns how many.
int drop_unsigned_wrap_of_negative_adds(LLVMModuleRef mod);

// Calls to Enzyme's type marks (__enzyme_integer, __enzyme_float, __enzyme_double,
// __enzyme_pointer: "this memory holds such values", for its type analysis; the
// Numba wrapper marks its result's shapes and strides) erased, and the marks'
// declarations with them: after Enzyme, and where no Enzyme ran (a primal-only
// build), nothing may call them. Returns how many calls.
int erase_type_marks(LLVMModuleRef mod);

// Whether `function` can reach a call of itself or of a function it is called
// from, through direct calls of functions defined in `mod` (recursion). Enzyme
// v0.0.289 batches (width > 1) such derivatives wrongly.
bool reaches_recursion(LLVMModuleRef mod, const std::string &function);

}  // namespace enzyme_py
