// Reverse loops of stencils: adds into neighbouring entries of one shadow, split so
// that each vectorises.
#pragma once

#include <llvm/IR/PassManager.h>

namespace enzyme_py {

// The reverse of a stencil `b[i] = f(a[i-1], a[i], a[i+1])` adds into the shadow of
// `a` at several offsets of i in one loop (`da[i-1] += ...; da[i] += ...;
// da[i+1] += ...`): each iteration reads what the one before stored, so the loop
// vectoriser refuses it and it runs at the speed of store-to-load forwarding.
// Those adds commute (their fadds allow reassociation: Enzyme's own arithmetic, or
// user code compiled with fast-math), so such a loop is split here into one loop
// per add, each touching every entry once, then one loop with the rest of the
// original body; each vectorises. Where every add's value can be computed at any
// iteration, one loop that gathers all of them into each entry runs instead of the
// split loops (and, where the rest only zeroes what it read, does that too); a loop
// too short for it then runs as written (scatter_fusion.h).
//
// Only where that is provably the same computation: an innermost loop of one block
// with a single exit, no calls that touch memory, every access to that shadow one
// of those read-add-writes (at affine addresses of the same stride; the stored value
// a tree of reassociable adds with the loaded one as a leaf, as clang writes
// `(v + da[i]) + w`), and
// every other load reading memory that no store of the loop writes, except the
// same address later in the same iteration (the reverse pass zeroing what it
// read). Where alias analysis cannot tell the other accesses from the shadow's
// (Enzyme's shadows of arrays it keeps on its tape), the split loops run after a
// run-time check that their address ranges are apart, and an untouched copy of the
// loop otherwise.
//
// A function pass, named in the derivative pipeline (_pipeline.py) as
// kSplitScatterAdds: after the first loop vectoriser (which refused such loops) and
// before loop-load elimination and load PRE (which would carry a neighbour's add in a
// register first, in a loop this pass does not take), before the SLP vectoriser (which
// would pair neighbouring adds into vectors that overlap from one iteration to the
// next).
struct SplitScatterAdds : llvm::PassInfoMixin<SplitScatterAdds> {
  llvm::PreservedAnalyses run(llvm::Function &fn, llvm::FunctionAnalysisManager &analyses);
};

inline constexpr const char *kSplitScatterAdds = "enzyme-py-split-scatter-adds";

}  // namespace enzyme_py
