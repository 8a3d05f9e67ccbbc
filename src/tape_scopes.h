// Loads from Enzyme's caches told apart from the derivative's stores, so that LLVM
// hoists them out of the loops that read them.
//
// Enzyme keeps what the reverse pass reads in caches it allocates (enzyme_py's
// __enzyme_py_tape_alloc and __enzyme_py_tape_realloc, rules.h) and marks their loads
// and stores !invariant.group, one group per cache. A reverse loop that reads a
// pointer from a cache once per outer iteration (a temporary swapped with another at
// each step: the shadows of `a, b = b, a` cached per step) reloads it at every
// iteration: LLVM cannot tell that the shadow stores of the loop do not write the
// cache, since the shadow pointer itself came from memory. Kept in the loop, the
// load also hides the loop's shape from the scatter pass (scatter_adds.h): a
// combined reverse derivative of such a stencil took 16 times as long.
//
// The pass gives each such cache load a scope of its own domain (alias.scope) and
// each store and memory intrinsic that provably writes no tape memory that scope as
// noalias. A pointer provably points outside the tape where every value it is made
// of (through GEPs, casts, phis and selects) is a parameter of the derivative, an
// alloca, a global, the result of an allocator that is not the tape's (Numba's
// NRT_MemInfo_alloc*, malloc), or a pointer loaded from a cache whose every
// !invariant.group store stored such a pointer (or from other memory, as long as no
// store, memcpy or call may have put a tape pointer there: aggregates holding
// pointers, integers made from pointers and calls that can reach the tape count as
// unknown). Tape memory is reachable from the tape allocator's results only, and
// nothing else stores them but Enzyme, into its caches. A load is taken as a cache
// load where it carries !invariant.group and its pointer is made of tape
// allocations only.
//
// The engine marks a combined reverse derivative with the function attribute
// kScopeTapeAttribute (engine.cpp): its parameters are the function's arrays and
// their shadows, never the tape (the halves of split mode pass the tape as a
// parameter: not marked). The pass, kScopeTapeLoads, acts on marked functions only,
// early in the derivative's pipeline (_pipeline.PASSES: after the first SROA and
// early CSE have made Enzyme's cache pointers values, before LICM hoists the loads).
#pragma once

#include <llvm/IR/PassManager.h>

namespace enzyme_py {

struct ScopeTapeLoads : llvm::PassInfoMixin<ScopeTapeLoads> {
  llvm::PreservedAnalyses run(llvm::Function &fn, llvm::FunctionAnalysisManager &analyses);
};

inline constexpr const char *kScopeTapeLoads = "enzyme-py-scope-tape-loads";
inline constexpr const char *kScopeTapeAttribute = "enzyme-py-scope-tape";

}  // namespace enzyme_py
