// Rewrites of the LLVM modules Numba makes, before Enzyme: what makes its
// analyses see what is true of Numba's code (temporaries that do not alias,
// exception helpers kept inactive, BLAS helpers given bodies, callees inlined
// and loops simplified). The rewrites for IR of any frontend are in rewrites.h.
#pragma once

#include <llvm-c/Core.h>

#include <string>

namespace enzyme_py {

class HostJit;

// Whether `name` is one of Numba's allocators of a temporary (the inactive one:
// frontends/_numba_runtime.py).
bool is_numba_allocator(const std::string &name);

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
// overwrites the array (Gauss-Seidel sweeps). Jump threading, then unswitching,
// move checks on loop-invariant values that exit the loop (Numba's size checks of
// an np.empty in the loop) before it, and enzyme_py's pass those that follow the
// allocation of another temporary (invariant_exits.h): a loop with a computable
// trip count has its caches allocated once instead of grown by realloc. Last,
// Numba's negative-index tests of indices proven non-negative are folded
// (index_signs.h).
extern const char *const kSimplifyPasses;

// For Numba code, once per module:
// - the wrapper's assumes about the shapes it passes (each >= 0) are made in the
//   Numba function too (assume_signs_in_callees, index_signs.h);
// - loads of a temporary's data pointer from its MemInfo header become the
//   constant offset enzyme_py's arena puts the data at, from the (noalias)
//   allocation call: LLVM and Enzyme then know temporaries do not alias;
// - those allocation calls are nonnull (enzyme_py's allocators jump out of the
//   call instead of returning null): Numba's null checks fold;
// - the functions Numba links in (linkonce_odr: callees, library code; not
//   those marked noinline, such as NRT_incref) are inlined;
// - kSimplifyPasses run: loop-invariant loads hoisted (Enzyme then caches them
//   once per loop instead of once per iteration) and loop exits made
//   computable (Enzyme sizes its caches once instead of growing them);
// - addresses in arrays of layout 'A', which Numba computes through integers, become
//   byte offsets from the array's data pointer (strided_addresses.h);
// - then the calls of an emptied NRT_decref on those temporaries are erased:
//   Enzyme assumed they write the temporary and cached every value read from it;
// - last, reads of a temporary that an earlier loop filled are computed again from
//   what it stored (scratch_forwarding.h), after LLVM's loop-simplify.
void simplify_for_enzyme(LLVMModuleRef mod, const HostJit &jit);

}  // namespace enzyme_py
