// Rewrites of LLVM modules around Enzyme.
//
// Before Enzyme: what makes its analyses see what is true (declarations
// without memory attributes it would mis-extend, Numba temporaries that do
// not alias, callees inlined and loops simplified). After Enzyme: its tape
// moved from malloc to enzyme_py's per-thread stack (arena.h).
#pragma once

#include <string>
#include <vector>

#include <llvm-c/Core.h>

namespace enzyme_py {

class HostJit;

// Numba and others declare some libm functions readonly; Enzyme would then add
// readnone and the verifier rejects the result. External declarations carry
// no memory attributes into Enzyme.
void strip_memory_attributes_of_declarations(LLVMModuleRef mod);

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

// Numba's functions that only make an exception with run-time values (the
// shape mismatch of a slice assignment: ol_raise_with_shape_context) are kept
// out of line, marked enzyme_inactive and nofree, and lose the pointer to the
// function that would unwrap the values (which calls the variadic PyTuple_Pack,
// where Enzyme asserts): the exception keeps its class and constant arguments.
// Everywhere, NRT_Allocate / NRT_Free (the scratch copy of an assignment's
// source that may overlap its destination) become malloc / free, whose shadows
// Enzyme makes. Returns how many helpers were changed.
int keep_exception_helpers_inactive(LLVMModuleRef mod);

// Direct calls of Numba's BLAS helpers for real kinds (numba_xxdot,
// numba_xxgemv, numba_xxgemm, numba_xxnrm2: np.dot, @, np.linalg.norm) become
// calls of loops with BLAS's semantics (src/numba_blas.c), which Enzyme
// differentiates in every mode. Returns how many calls.
int define_numba_blas(LLVMModuleRef mod);

// The pass pipeline simplify_for_enzyme runs (no vectorisation, and no unrolling
// but of loops of constant length, which leave Enzyme nothing to cache, such as
// Numba's x ** 2: partial unrolling would make it cache more). GVN without load
// PRE: the loop-carried phis it makes of loads (u[i+1] read again as u[i]) give
// Enzyme v0.0.289 wrong gradients, without an error, where an outer loop
// overwrites the array (Gauss-Seidel sweeps).
extern const char *const kSimplifyPasses;

// For Numba code, once per module:
// - loads of a temporary's data pointer from its MemInfo header become the
//   constant offset enzyme_py's arena puts the data at, from the (noalias)
//   allocation call: LLVM and Enzyme then know temporaries do not alias;
// - the functions Numba links in (linkonce_odr: callees, library code; not
//   those marked noinline, such as NRT_incref) are inlined;
// - kSimplifyPasses run: loop-invariant loads hoisted (Enzyme then caches them
//   once per loop instead of once per iteration) and loop exits made
//   computable (Enzyme sizes its caches once instead of growing them).
void simplify_for_enzyme(LLVMModuleRef mod, const HostJit &jit);

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

// Whether `function` can reach a call of itself or of a function it is called
// from, through direct calls of functions defined in `mod` (recursion). Enzyme
// v0.0.289 batches (width > 1) such derivatives wrongly.
bool reaches_recursion(LLVMModuleRef mod, const std::string &function);

}  // namespace enzyme_py
